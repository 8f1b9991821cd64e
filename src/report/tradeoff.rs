//! The report's trade-off section: output tokens/s per GPU against output
//! tokens/s per user and against TTFT p99, every grid point at its worst
//! seed, the Pareto frontier (`pareto.rs`, found in `points.rs`) joined;
//! then the frontier's points as a table.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::charts::scale_for;
use super::page::{chart, escape};
use super::points::{Data, Point};
use super::{load_text, sig3};

/// A point's coordinate at its worst seed (`high`: the highest value is
/// the worst); NaN without one.
fn worst(p: &Point, name: &str, high: bool) -> f64 {
    p.get(name).filter(|_| p.complete()).map_or(f64::NAN, |s| if high { s.max } else { s.min })
}

fn slo_text(p: &Point) -> &'static str {
    match p.met {
        Some(true) => "meets the SLO",
        Some(false) => "misses the SLO",
        None => "no SLO",
    }
}

/// A view of the frontier: its chart id, title, x axis title, x metric,
/// whether that metric's worst is its highest, and the frontier's points.
type View<'a> = (&'a str, &'a str, &'a str, &'a str, bool, &'a [usize]);

/// The section; `names` are the points' short names.
pub(super) fn section(data: &Data, names: &[String], html: &mut String) {
    html.push_str(
        "<h2>Throughput per GPU against speed per user</h2><p>Every deployment at every load run (capacity probes \
         included), at its worst seed; the dashed line joins the Pareto frontier: the points no other point beats on \
         both axes. Filled circles met the SLO at every seed. Click a legend entry to pick a deployment.</p>\
         <div class=\"charts\">",
    );
    let tooltip = json!([
        {"field": "deployment"}, {"field": "load"}, {"field": "gpus", "title": "GPUs"},
        {"field": "y", "title": "output tokens/s per GPU", "format": ",.3~r"},
        {"field": "per_user", "title": "output tokens/s per user", "format": ",.3~r"},
        {"field": "ttft_p99_ms", "title": "TTFT p99 (ms)", "format": ",.4~r"},
        {"field": "slo", "title": "SLO"}
    ]);
    let axes: [View<'_>; 2] = [
        (
            "pareto",
            "Output tokens/s per GPU against output tokens/s per user",
            "output tokens/s per user (1000 / mean TPOT)",
            "tokens_per_sec_per_user",
            false,
            &data.frontier_per_user,
        ),
        (
            "pareto-ttft",
            "Output tokens/s per GPU against TTFT p99",
            "TTFT p99 (ms)",
            "ttft_p99_ms",
            true,
            &data.frontier_ttft,
        ),
    ];
    for (id, title, x_title, x, high, on) in axes {
        let rows: Vec<Value> = data
            .points
            .iter()
            .filter_map(|p| {
                let (xv, yv) = (worst(p, x, high), worst(p, "tokens_per_sec_per_gpu", false));
                (xv.is_finite() && yv.is_finite()).then(|| {
                    json!({
                        "deployment": names[p.id],
                        "load": load_text(p),
                        "gpus": p.gpus,
                        "x": xv,
                        "y": yv,
                        "per_user": worst(p, "tokens_per_sec_per_user", false),
                        "ttft_p99_ms": worst(p, "ttft_p99_ms", true),
                        "slo": slo_text(p),
                        "frontier": on.contains(&p.id),
                    })
                })
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let x_scale = scale_for(rows.iter().filter_map(|r| r["x"].as_f64()), false);
        html.push_str(&chart(id, &super::charts::tradeoff(title, x_title, x_scale, tooltip.clone(), rows)));
    }
    html.push_str(
        "</div><table id=\"frontier\"><tr><th>deployment</th><th>GPUs</th><th>load</th><th>tok/s per GPU</th>\
         <th>tok/s per user</th><th>TTFT p99 ms</th><th>ITL p99 ms</th><th>SLO</th></tr>",
    );
    for &i in &data.frontier_per_user {
        let p = &data.points[i];
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td class=\"l\">{}</td></tr>",
            escape(&names[i]),
            p.gpus.map_or_else(|| "–".to_owned(), |g| g.to_string()),
            escape(&load_text(p)),
            sig3(worst(p, "tokens_per_sec_per_gpu", false)),
            sig3(worst(p, "tokens_per_sec_per_user", false)),
            worst(p, "ttft_p99_ms", true),
            worst(p, "itl_p99_ms", true),
            match p.met {
                Some(true) => "met",
                Some(false) => "missed",
                None => "–",
            }
        );
    }
    html.push_str("</table>");
}
