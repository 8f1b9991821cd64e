//! The report's replica count over time, for the runs that autoscaled (their
//! `metrics.json` carries an `autoscale` block): one step line per run, the
//! routable replicas, to the run's end. Absent when no run autoscaled.

use std::fmt::Write as _;

use super::svg::{Series, escape, line_chart};
use crate::metrics::Metrics;

/// Lines drawn on one chart at most (the palette's colours); the rest are
/// listed by name.
const MAX_SERIES: usize = 8;

/// The section for `runs` (run id, metrics), or nothing.
pub(super) fn section<'a>(runs: impl Iterator<Item = (&'a str, &'a Metrics)>, html: &mut String) {
    let series: Vec<Series> = runs
        .filter_map(|(id, m)| {
            let a = m.autoscale.as_ref()?;
            // Steps: the count holds until the next change.
            let mut points: Vec<(f64, f64)> = Vec::new();
            for &(t, n) in &a.replicas {
                if let Some(&(_, prev)) = points.last() {
                    points.push((t, prev));
                }
                points.push((t, f64::from(n)));
            }
            if let Some(&(t, n)) = points.last()
                && m.sim_duration_s > t
            {
                points.push((m.sim_duration_s, n));
            }
            let name = format!("{id} ({:.2} GPU-h, {} up / {} down)", a.gpu_hours, a.scale_ups, a.scale_downs);
            Some(Series { name, points, dashed: false, band: Vec::new() })
        })
        .collect();
    if series.is_empty() {
        return;
    }
    html.push_str("<h2>Replicas over time (autoscaled runs)</h2><div class=\"charts\">");
    html.push_str(&line_chart(
        "replicas",
        "Routable replicas",
        "simulated time (s)",
        &[],
        "replicas",
        &series[..series.len().min(MAX_SERIES)],
        &[],
    ));
    html.push_str("</div>");
    if series.len() > MAX_SERIES {
        let _ = write!(html, "<p>Not drawn ({} more runs):", series.len() - MAX_SERIES);
        for s in &series[MAX_SERIES..] {
            let _ = write!(html, " {};", escape(&s.name));
        }
        html.push_str("</p>");
    }
}
