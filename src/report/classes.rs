//! The report's per-class section, when the sweep wrote `classes.parquet`
//! (its runs' requests carried SLO classes or tenants): per deployment and
//! load, each class's requests, TTFT p99, SLO attainment and goodput, and
//! the Jain index over tenants where a run has one — each at the worst seed
//! of that load (the capacity search's rule: the highest TTFT, the lowest
//! attainment, goodput and fairness), the seeds' range beside it, never a
//! mean.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::Run;
use super::page::escape;
use crate::workload::SloClass;

/// Over seeds: requests, TTFT p99, attainment, goodput, Jain (each the
/// lowest and highest of the values present).
#[derive(Default)]
struct Cell {
    range: [Option<(f64, f64)>; 5],
}

/// Which end of each value's range is its worst: TTFT's highest, the
/// others' lowest (requests: the fewest completed).
const WORST_IS_HIGH: [bool; 5] = [false, true, false, false, false];

impl Cell {
    fn add(&mut self, values: [Option<f64>; 5]) {
        for (r, v) in self.range.iter_mut().zip(values) {
            if let Some(v) = v {
                *r = Some(r.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
            }
        }
    }

    /// Value `i` at the worst seed, and its range when the seeds differ,
    /// each through `show`.
    fn text(&self, i: usize, show: &dyn Fn(f64) -> String) -> String {
        match self.range[i] {
            None => "–".to_owned(),
            Some((lo, hi)) => {
                let worst = if WORST_IS_HIGH[i] { hi } else { lo };
                if show(lo) == show(hi) {
                    show(worst)
                } else {
                    format!("{} ({}–{})", show(worst), show(lo), show(hi))
                }
            }
        }
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
        "<h2>SLO classes and tenants</h2><p>Per deployment and load, each value at the worst seed (the highest \
         TTFT, the lowest attainment, goodput and fairness), the seeds' range in parentheses where they differ; \
         attainment and goodput need an SLO (–: none).</p><table id=\"classes\"><tr><th>deployment</th>\
         <th>concurrency</th><th>rate ×</th><th>class / tenant</th><th>requests</th><th>TTFT p99 ms</th>\
         <th>SLO attainment</th><th>goodput req/s</th><th>Jain (tenants)</th></tr>",
    );
    for ((deployment, cap, rate, group, _, name), cell) in &cells {
        let fixed = |digits: usize| move |v: f64| format!("{v:.digits$}");
        let percent = |v: f64| format!("{:.1} %", v * 100.0);
        let who = if *group == 0 { name.clone() } else { format!("tenant {name}") };
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            escape(deployment),
            if *cap == u64::MAX { "open".to_owned() } else { cap.to_string() },
            f64::from_bits(*rate),
            escape(&who),
            cell.text(0, &fixed(0)),
            cell.text(1, &fixed(1)),
            cell.text(2, &percent),
            cell.text(3, &fixed(2)),
            cell.text(4, &fixed(3)),
        );
    }
    html.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_shows_its_worst_seed_and_the_range_never_a_mean() {
        let mut cell = Cell::default();
        cell.add([Some(100.0), Some(80.0), Some(0.99), Some(4.0), None]);
        cell.add([Some(98.0), Some(120.0), Some(0.90), Some(4.0), None]);
        let fixed = |v: f64| format!("{v:.1}");
        // TTFT: the highest is the worst; attainment: the lowest.
        assert_eq!(cell.text(1, &fixed), "120.0 (80.0–120.0)");
        assert_eq!(cell.text(2, &|v| format!("{:.2}", v)), "0.90 (0.90–0.99)");
        // Equal seeds: one number; none: a dash.
        assert_eq!((cell.text(3, &fixed), cell.text(4, &fixed)), ("4.0".to_owned(), "–".to_owned()));
    }
}
