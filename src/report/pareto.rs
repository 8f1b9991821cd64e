//! The Pareto frontier of a report's points — the points no other point
//! beats on both axes at once (at least as good on both, better on one) —
//! and the report's section that draws it: output tokens/s per GPU against
//! output tokens/s per user and against TTFT p99, every grid point at its
//! worst seed, the frontier joined, then the frontier's points as a table.
//! Both axes of `frontier` are "higher is better"; a caller whose axis is
//! "lower is better" (TTFT) negates it. Points with a non-finite coordinate
//! are no candidates (a run without TPOT has no tokens/s per user).

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::charts::scale_for;
use super::page::{chart, escape};
use super::points::{Data, Point};
use super::{load_text, sig3};

/// The indices of the points on the frontier, by ascending x (then
/// ascending index). Equal points are both on it when either is.
///
/// O(n log n): by descending x, a point is on the frontier when its y is
/// the highest of its x and above every y of a strictly greater x.
pub(crate) fn frontier(points: &[(f64, f64)]) -> Vec<usize> {
    let mut order: Vec<usize> =
        (0..points.len()).filter(|&i| points[i].0.is_finite() && points[i].1.is_finite()).collect();
    order.sort_by(|&a, &b| points[b].0.total_cmp(&points[a].0).then(points[b].1.total_cmp(&points[a].1)));
    let mut on = Vec::new();
    // The highest y of the points with a strictly greater x than the group's.
    let mut best = f64::NEG_INFINITY;
    let mut k = 0;
    while k < order.len() {
        let x = points[order[k]].0;
        let top = points[order[k]].1;
        let mut end = k;
        while end < order.len() && points[order[end]].0 == x {
            end += 1;
        }
        if top > best {
            on.extend(order[k..end].iter().copied().filter(|&i| points[i].1 == top));
        }
        best = best.max(top);
        k = end;
    }
    on.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(a.cmp(&b)));
    on
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, point by point: nothing at least as good on both
    /// axes and better on one.
    fn by_definition(points: &[(f64, f64)]) -> Vec<usize> {
        let finite = |p: &(f64, f64)| p.0.is_finite() && p.1.is_finite();
        let mut on: Vec<usize> = (0..points.len())
            .filter(|&i| finite(&points[i]))
            .filter(|&i| {
                let p = points[i];
                !points.iter().filter(|q| finite(q)).any(|q| q.0 >= p.0 && q.1 >= p.1 && (q.0 > p.0 || q.1 > p.1))
            })
            .collect();
        on.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(a.cmp(&b)));
        on
    }

    #[test]
    fn the_frontier_keeps_what_nothing_beats_on_both_axes() {
        // Throughput per GPU falls as speed per user rises; (2, 2) and
        // (3, 1) are beaten by (3, 3), (1, 1) by everything.
        let points = [(1.0, 10.0), (2.0, 2.0), (3.0, 3.0), (3.0, 1.0), (4.0, 0.5), (1.0, 1.0)];
        assert_eq!(frontier(&points), vec![0, 2, 4]);
        // Equal points are both on it; a tie in x keeps only the higher y.
        let points = [(1.0, 5.0), (1.0, 5.0), (1.0, 4.0), (2.0, 5.0)];
        assert_eq!(frontier(&points), vec![3]);
        let points = [(1.0, 6.0), (1.0, 6.0), (2.0, 5.0)];
        assert_eq!(frontier(&points), vec![0, 1, 2]);
        // A tie in y with a greater x is beaten.
        assert_eq!(frontier(&[(1.0, 5.0), (2.0, 5.0)]), vec![1]);
        // No coordinate, no candidate; nothing, nothing.
        assert_eq!(frontier(&[(f64::NAN, 9.0), (f64::INFINITY, 9.0), (1.0, 1.0)]), vec![2]);
        assert!(frontier(&[]).is_empty());
    }

    #[test]
    fn the_frontier_equals_its_definition_on_random_points() {
        // A fixed linear congruential sequence (Knuth's MMIX constants):
        // coordinates on a coarse grid, so ties in x and y are common.
        let mut state = 12345u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % 8) as f64
        };
        for n in 0..60 {
            let points: Vec<(f64, f64)> = (0..n).map(|_| (next(), next())).collect();
            assert_eq!(frontier(&points), by_definition(&points), "{points:?}");
        }
    }
}
