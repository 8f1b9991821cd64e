//! The report's replica count over time, for the runs that autoscaled (their
//! `metrics.json` carries an `autoscale` block): the routable replicas per
//! run, a step at each change, to the run's end. Absent when no run
//! autoscaled.

use serde_json::{Value, json};

use super::charts::replicas;
use super::page::chart;
use crate::metrics::Metrics;

/// The section for `runs` (run id, metrics), or nothing.
pub(super) fn section<'a>(runs: impl Iterator<Item = (&'a str, &'a Metrics)>, html: &mut String) {
    let mut rows: Vec<Value> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (id, m) in runs {
        let Some(a) = m.autoscale.as_ref() else { continue };
        let name = format!("{id} ({:.2} GPU-h, {} up / {} down)", a.gpu_hours, a.scale_ups, a.scale_downs);
        for &(t, n) in &a.replicas {
            rows.push(json!({"run": name, "t": t, "replicas": n}));
        }
        // The count holds to the run's end.
        if let Some(&(t, n)) = a.replicas.last()
            && m.sim_duration_s > t
        {
            rows.push(json!({"run": name, "t": m.sim_duration_s, "replicas": n}));
        }
        names.push(name);
    }
    if names.is_empty() {
        return;
    }
    html.push_str("<h2>Replicas over time (autoscaled runs)</h2>");
    html.push_str(&chart("replicas", &replicas(rows, names)));
}
