//! The report's load charts: latency (p99 at the worst seed, p50 dashed),
//! and requests served with goodput, against load, a small multiple per
//! deployment. Arrival-driven runs (open loop, capped) are drawn against
//! the req/s they were offered, closed-loop runs against their users:
//! never on one axis. Seeds are a band (lowest to highest), never a mean.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::charts::{AgainstLoad, against_load, scale_for};
use super::page::chart;
use super::points::{Data, Point};
use crate::metrics::Slo;

/// A latency chart: its id, title, the runs table's p99 and p50 columns,
/// and its SLO target.
type Latency = (&'static str, &'static str, &'static str, &'static str, Option<f64>);

/// The sections, after the frontier; `names` are the points' short names.
pub(super) fn sections(data: &Data, names: &[String], slo: Option<&Slo>, html: &mut String) {
    let groups = [
        ("", "offered load (req/s)", false, "Latency against offered load"),
        ("-closed", "users (closed loop)", true, "Latency against users (closed loop)"),
    ];
    for (suffix, x_title, closed, heading) in groups {
        let chosen: Vec<&Point> = data
            .points
            .iter()
            .filter(|p| (p.client == "closed_loop") == closed && p.load().is_some() && p.ok > 0)
            .collect();
        if chosen.is_empty() {
            continue;
        }
        // Within a deployment's facet: its client (a cap, open loop) when
        // they differ.
        let capped = chosen.iter().any(|q| q.client == "capped");
        let variant = |p: &Point| match (p.client.as_str(), p.concurrency) {
            ("capped", Some(c)) => format!("≤ {c} in flight"),
            ("capped", None) => "capped".to_owned(),
            ("open_loop", _) if capped => "open loop".to_owned(),
            _ => String::new(),
        };
        let mut facets: Vec<String> = Vec::new();
        for p in &chosen {
            if !facets.contains(&names[p.id]) {
                facets.push(names[p.id].clone());
            }
        }
        let band = chosen.iter().any(|p| p.ok > 1);
        let _ = write!(
            html,
            "<h2>{heading}</h2><p>A small multiple per deployment; p99 at the worst seed (solid), p50 (dashed){}; \
             the shaded region above a dashed red line misses the SLO. Click a legend entry to pick a series.</p>",
            if band { ", the band the seeds' spread" } else { "" }
        );
        let charts: [Latency; 4] = [
            ("ttft", "TTFT", "ttft_p99_ms", "ttft_p50_ms", slo.and_then(|s| s.ttft_p99_ms)),
            ("itl", "ITL", "itl_p99_ms", "itl_p50_ms", slo.and_then(|s| s.itl_p99_ms)),
            ("tpot", "TPOT", "tpot_p99_ms", "tpot_mean_ms", slo.and_then(|s| s.tpot_p99_ms)),
            ("e2e", "E2E", "e2e_p99_ms", "e2e_p50_ms", slo.and_then(|s| s.e2e_p99_ms)),
        ];
        // TPOT's chart only under a TPOT target (its mean dashed: the runs
        // table has no TPOT p50).
        for (id, title, p99, p50, target) in charts.into_iter().filter(|c| c.0 != "tpot" || c.4.is_some()) {
            let low = if id == "tpot" { "mean" } else { "p50" };
            let stats = [("p99", p99, true), (low, p50, false)];
            let rows = rows(&chosen, names, &variant, &stats);
            let values = rows.iter().flat_map(|r| [&r["value"], &r["lo"]]).filter_map(Value::as_f64);
            let y_scale = scale_for(values.chain(target), true);
            let spec = against_load(AgainstLoad {
                title: &format!("{title} against load"),
                x_title,
                y_title: &format!("{title} (ms)"),
                y_scale,
                series: series_order(&rows),
                rows,
                facets: facets.clone(),
                target: target.map(|t| (format!("SLO {title} p99 {t} ms"), t)),
                band,
            });
            html.push_str(&chart(&format!("{id}{suffix}"), &spec));
        }
        let stats = [("served", "responses_per_sec", false), ("goodput", "goodput_rps", false)];
        let rows = rows(&chosen, names, &variant, &stats);
        let spec = against_load(AgainstLoad {
            title: "Requests served and goodput against load",
            x_title,
            y_title: "req/s",
            y_scale: json!({"type": "linear", "zero": true}),
            series: series_order(&rows),
            rows,
            facets,
            target: None,
            band,
        });
        html.push_str(&chart(&format!("throughput{suffix}"), &spec));
    }
    let without = data.points.iter().filter(|p| p.load().is_none()).count();
    if without > 0 {
        let _ = write!(
            html,
            "<p>{without} grid points have no offered rate (their workload's arrivals span no time): in the runs \
             table only.</p>"
        );
    }
}

/// The long-form rows of `stats` (name, column, worst is highest) at each
/// point: the worst seed's value, the spread.
fn rows(
    chosen: &[&Point],
    names: &[String],
    variant: &dyn Fn(&Point) -> String,
    stats: &[(&str, &str, bool)],
) -> Vec<Value> {
    let mut out = Vec::new();
    for p in chosen {
        let Some(load) = p.load() else { continue };
        for &(stat, column, high) in stats {
            let Some(s) = p.get(column) else { continue };
            let v = variant(p);
            out.push(json!({
                "deployment": names[p.id],
                "series": if v.is_empty() { stat.to_owned() } else { v },
                "stat": stat,
                "line": if matches!(stat, "goodput" | "p50" | "mean") { "dashed" } else { "solid" },
                "load": load,
                "value": if high { s.max } else { s.min },
                "lo": s.min,
                "hi": s.max,
                "seeds": p.ok,
            }));
        }
    }
    out
}

/// The series in order of first appearance.
fn series_order(rows: &[Value]) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    for r in rows {
        let s = r["series"].as_str().unwrap_or_default();
        if !order.iter().any(|o| o == s) {
            order.push(s.to_owned());
        }
    }
    order
}
