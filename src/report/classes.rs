//! The report's per-class section, when the sweep wrote `classes.parquet`
//! (its runs' requests carried SLO classes or tenants): per deployment and
//! load, each class's requests, TTFT p99, SLO attainment and goodput, the
//! mean over the seeds of that load; and each run's Jain index over
//! tenants where it has one.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::Run;
use super::page::escape;
use crate::workload::SloClass;

/// Means over seeds: requests, TTFT p99, attainment, goodput, Jain (each a
/// sum and a count of the values present).
#[derive(Default)]
struct Cell {
    sums: [f64; 5],
    counts: [u32; 5],
}

impl Cell {
    fn add(&mut self, values: [Option<f64>; 5]) {
        for (i, v) in values.into_iter().enumerate() {
            if let Some(v) = v {
                self.sums[i] += v;
                self.counts[i] += 1;
            }
        }
    }

    fn mean(&self, i: usize) -> Option<f64> {
        (self.counts[i] > 0).then(|| self.sums[i] / f64::from(self.counts[i]))
    }
}

/// Writes the section from `rows` (`classes.parquet`'s) for `runs`.
pub(super) fn section(rows: &[BTreeMap<String, Value>], runs: &[Run], html: &mut String) {
    let by_id: BTreeMap<&str, &Run> = runs.iter().map(|r| (r.run_id.as_str(), r)).collect();
    // (deployment, concurrency (open loop last), rate scale, group, class
    // order or tenant) → the means.
    type Key = (String, u64, u64, u8, usize, String);
    let mut cells: BTreeMap<Key, Cell> = BTreeMap::new();
    for r in rows {
        let get = |k: &str| r.get(k).unwrap_or(&Value::Null);
        let Some(run) = get("run_id").as_str().and_then(|id| by_id.get(id)) else { continue };
        let name = get("name").as_str().unwrap_or_default().to_owned();
        let (group, order) = match get("group").as_str() {
            Some("class") => (0, SloClass::ALL.iter().position(|c| c.name() == name).unwrap_or(usize::MAX)),
            _ => (1, 0),
        };
        let key =
            (run.deployment.clone(), run.concurrency.unwrap_or(u64::MAX), run.rate_scale.to_bits(), group, order, name);
        let values =
            ["requests", "ttft_p99_ms", "slo_attainment", "goodput_rps", "jain_tenants"].map(|k| get(k).as_f64());
        cells.entry(key).or_default().add(values);
    }
    if cells.is_empty() {
        return;
    }
    html.push_str(
        "<h2>SLO classes and tenants</h2><p>Per deployment and load, the mean over seeds; attainment and goodput \
         need an SLO (–: none).</p><table id=\"classes\"><tr><th>deployment</th><th>concurrency</th>\
         <th>rate ×</th><th>class / tenant</th><th>requests</th><th>TTFT p99 ms</th><th>SLO attainment</th>\
         <th>goodput req/s</th><th>Jain (tenants)</th></tr>",
    );
    for ((deployment, cap, rate, group, _, name), cell) in &cells {
        let f = |i: usize, digits: usize| cell.mean(i).map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"));
        let att = cell.mean(2).map_or_else(|| "–".to_owned(), |v| format!("{:.1} %", v * 100.0));
        let who = if *group == 0 { name.clone() } else { format!("tenant {name}") };
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            escape(deployment),
            if *cap == u64::MAX { "open".to_owned() } else { cap.to_string() },
            f64::from_bits(*rate),
            escape(&who),
            f(0, 0),
            f(1, 1),
            att,
            f(3, 2),
            f(4, 3),
        );
    }
    html.push_str("</table>");
}
