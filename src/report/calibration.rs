//! The report's calibration matrix (`calibration.parquet`): per real run
//! and metric, sim / real − 1 with BLIS's published error beside it, as a
//! shaded table, then each metric's errors as dots, ours beside BLIS's.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::charts::calibration_errors;
use super::page::{chart, escape};

/// The section for `rows` (`calibration.parquet`'s).
pub(super) fn section(rows: &[BTreeMap<String, Value>], html: &mut String) {
    let mut runs: Vec<String> = Vec::new();
    let mut metrics: Vec<String> = Vec::new();
    let mut dots: Vec<Value> = Vec::new();
    let mut cells: BTreeMap<(String, String), (Option<f64>, Option<f64>)> = BTreeMap::new();
    for r in rows {
        let run = r.get("experiment").or(r.get("run")).and_then(Value::as_str).unwrap_or_default().to_owned();
        let metric = r.get("metric").and_then(Value::as_str).unwrap_or_default().to_owned();
        if !runs.contains(&run) {
            runs.push(run.clone());
        }
        if !metrics.contains(&metric) {
            metrics.push(metric.clone());
        }
        let ours = r.get("error").or(r.get("err")).and_then(Value::as_f64);
        let blis = r.get("blis_error").or(r.get("blis_err")).and_then(Value::as_f64);
        for (simulator, error) in [("blis-sweep", ours), ("BLIS (published)", blis)] {
            if let Some(error) = error {
                dots.push(json!({"run": run, "metric": metric, "simulator": simulator, "error": error}));
            }
        }
        cells.insert((run, metric), (ours, blis));
    }
    html.push_str("<h2>Calibration against real vLLM runs</h2>");
    if !dots.is_empty() {
        html.push_str(&chart("calibration-errors", &calibration_errors(dots, metrics.clone())));
    }
    html.push_str(
        "<p>sim / real − 1 per run and metric; BLIS's published error in parentheses.</p>\
         <table id=\"calibration\"><tr><th>run</th>",
    );
    for m in &metrics {
        let _ = write!(html, "<th>{}</th>", escape(m));
    }
    html.push_str("</tr>");
    for run in &runs {
        let _ = write!(html, "<tr><td class=\"l\">{}</td>", escape(run));
        for m in &metrics {
            let (ours, blis) = cells.get(&(run.clone(), m.clone())).copied().unwrap_or_default();
            // Green within 5 %, red from 50 %.
            let shade = |e: f64| {
                let t = (e.abs() / 0.5).min(1.0);
                format!("rgb({},{},{})", (200.0 + 55.0 * t) as u8, (230.0 - 130.0 * t) as u8, (200.0 - 100.0 * t) as u8)
            };
            match ours {
                Some(e) => {
                    let b = blis.map_or_else(String::new, |b| format!(" ({:+.1} %)", b * 100.0));
                    let _ = write!(html, "<td style=\"background:{}\">{:+.1} %{}</td>", shade(e), e * 100.0, b);
                }
                None => html.push_str("<td>–</td>"),
            }
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
}
