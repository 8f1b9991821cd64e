//! The report's data: one point per grid point of `runs.parquet` — a
//! scenario with its overrides (workload overrides such as a session or
//! generator rate included), a concurrency or open loop, a rate scale —
//! its seeds kept as a spread (min and max), never averaged, and never
//! merged with another rate scale or override. Each point's load is
//! absolute: the req/s its runs were offered (manifest.json's
//! `offered_rps`), or, closed loop, its users.
//!
//! The frontier's coordinates are a point's worst seed, the capacity
//! search's rule: the lowest output tokens/s per GPU, the lowest output
//! tokens/s per user (1000 / mean TPOT, ms), the highest TTFT p99. A point
//! meets the SLO when every seed did (`slo_met`).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;

use super::pareto::frontier;

/// A metric's range over a point's seeds that ran.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub(crate) struct Spread {
    pub(crate) min: f64,
    pub(crate) max: f64,
}

/// One grid point.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Point {
    /// Its position in `points` (the order of first appearance in the runs
    /// table: grid order).
    pub(crate) id: usize,
    pub(crate) scenario: String,
    /// As the runs table's `overrides` column (a JSON object).
    pub(crate) overrides: Value,
    /// The scenario and its overrides (keys and values), as the charts name it.
    pub(crate) deployment: String,
    /// `open_loop`, `capped` or `closed_loop` (manifest.json's).
    pub(crate) client: String,
    pub(crate) concurrency: Option<i64>,
    pub(crate) rate_scale: f64,
    /// Req/s offered (arrival-driven clients).
    pub(crate) offered_rps: Option<f64>,
    /// Users (closed loop).
    pub(crate) users: Option<i64>,
    pub(crate) gpus: Option<i64>,
    pub(crate) seeds: Vec<i64>,
    pub(crate) run_ids: Vec<String>,
    /// Seeds whose run finished `ok`.
    pub(crate) ok: usize,
    /// Every seed met the SLO (`None`: no SLO, or no seed ran).
    pub(crate) met: Option<bool>,
    /// Per metric (the runs table's column name, and the derived
    /// `tokens_per_sec_per_gpu` and `tokens_per_sec_per_user`), its spread
    /// over the seeds that ran and have it.
    pub(crate) metrics: BTreeMap<&'static str, Spread>,
}

impl Point {
    /// A metric's spread.
    pub(crate) fn get(&self, name: &str) -> Option<Spread> {
        self.metrics.get(name).copied()
    }

    /// Every seed ran: its worst seed is known.
    pub(crate) fn complete(&self) -> bool {
        self.ok == self.seeds.len() && self.ok > 0
    }

    /// Its load as the x axis of its client's charts.
    pub(crate) fn load(&self) -> Option<f64> {
        match self.client.as_str() {
            "closed_loop" => self.users.map(|u| u as f64),
            _ => self.offered_rps,
        }
    }
}

/// The metric columns a point keeps.
pub(crate) const METRICS: [&str; 13] = [
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "tpot_mean_ms",
    "tpot_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "responses_per_sec",
    "goodput_rps",
    "tokens_per_sec",
    "slo_attainment",
    "sim_duration_ms",
];

/// The report's points and their two frontiers.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Data {
    pub(crate) points: Vec<Point>,
    /// Ids of the points on the frontier of output tokens/s per GPU against
    /// output tokens/s per user (both worst seed), by ascending x.
    pub(crate) frontier_per_user: Vec<usize>,
    /// The same against TTFT p99 (lower is better), by descending TTFT.
    pub(crate) frontier_ttft: Vec<usize>,
}

/// One row of the runs table, the columns a point needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunRow {
    pub(crate) run_id: String,
    pub(crate) scenario: String,
    pub(crate) overrides: String,
    pub(crate) concurrency: Option<i64>,
    pub(crate) rate_scale: f64,
    pub(crate) seed: i64,
    pub(crate) status: String,
    pub(crate) gpus: Option<i64>,
    pub(crate) slo_met: Option<bool>,
    pub(crate) metrics: [Option<f64>; METRICS.len()],
}

/// What manifest.json says of a run that the runs table does not.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunLoad {
    pub(crate) client: String,
    pub(crate) offered_rps: Option<f64>,
}

/// A deployment's name, as every table and chart of the report writes it:
/// the scenario, then each override key and value.
pub(crate) fn deployment(scenario: &str, overrides: &Value) -> String {
    let mut name = scenario.to_owned();
    for (k, v) in overrides.as_object().into_iter().flatten() {
        name.push_str(&format!(" {k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_owned)));
    }
    name
}

/// The points of `rows`, with each run's load from `loads` (by run id).
pub(crate) fn collect(rows: &[RunRow], loads: &HashMap<String, RunLoad>) -> Data {
    let mut points: Vec<Point> = Vec::new();
    let mut index: HashMap<(String, String, Option<i64>, u64), usize> = HashMap::new();
    for r in rows {
        let key = (r.scenario.clone(), r.overrides.clone(), r.concurrency, r.rate_scale.to_bits());
        let load = loads.get(&r.run_id).cloned().unwrap_or_default();
        let i = *index.entry(key).or_insert_with(|| {
            let overrides: Value = serde_json::from_str(&r.overrides).unwrap_or(Value::Null);
            let client = if load.client.is_empty() {
                if r.concurrency.is_some() { "capped" } else { "open_loop" }.to_owned()
            } else {
                load.client.clone()
            };
            points.push(Point {
                id: points.len(),
                scenario: r.scenario.clone(),
                deployment: deployment(&r.scenario, &overrides),
                overrides,
                users: if client == "closed_loop" { r.concurrency } else { None },
                offered_rps: if client == "closed_loop" { None } else { load.offered_rps },
                client,
                concurrency: r.concurrency,
                rate_scale: r.rate_scale,
                gpus: r.gpus,
                seeds: Vec::new(),
                run_ids: Vec::new(),
                ok: 0,
                met: None,
                metrics: BTreeMap::new(),
            });
            points.len() - 1
        });
        let p = &mut points[i];
        p.seeds.push(r.seed);
        p.run_ids.push(r.run_id.clone());
        if r.status != "ok" {
            continue;
        }
        p.ok += 1;
        p.gpus = p.gpus.or(r.gpus);
        p.met = match (p.met, r.slo_met, p.ok) {
            (_, None, _) => p.met,
            (None, Some(m), 1) => Some(m),
            (None, Some(_), _) => None,
            (Some(a), Some(b), _) => Some(a && b),
        };
        let derived = [
            ("tokens_per_sec_per_gpu", r.metrics[10].zip(r.gpus.filter(|&g| g > 0)).map(|(t, g)| t / g as f64)),
            ("tokens_per_sec_per_user", r.metrics[4].filter(|&t| t > 0.0).map(|t| 1000.0 / t)),
        ];
        for (name, v) in METRICS.iter().copied().zip(r.metrics).chain(derived) {
            let Some(v) = v.filter(|v| v.is_finite()) else { continue };
            p.metrics
                .entry(name)
                .and_modify(|s| {
                    s.min = s.min.min(v);
                    s.max = s.max.max(v);
                })
                .or_insert(Spread { min: v, max: v });
        }
    }
    // A point whose seeds did not all run has no worst seed: no frontier.
    let worst = |p: &Point, name: &str, high: bool| {
        let s = p.get(name).filter(|_| p.complete());
        s.map_or(f64::NAN, |s| if high { s.max } else { s.min })
    };
    let per_user: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (worst(p, "tokens_per_sec_per_user", false), worst(p, "tokens_per_sec_per_gpu", false)))
        .collect();
    let ttft: Vec<(f64, f64)> =
        points.iter().map(|p| (-worst(p, "ttft_p99_ms", true), worst(p, "tokens_per_sec_per_gpu", false))).collect();
    Data { frontier_per_user: frontier(&per_user), frontier_ttft: frontier(&ttft), points }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(run: &str, overrides: &str, rate: f64, seed: i64, tps: f64, tpot: f64, met: bool) -> RunRow {
        let mut metrics = [None; METRICS.len()];
        metrics[10] = Some(tps);
        metrics[4] = Some(tpot);
        metrics[1] = Some(tpot * 10.0);
        RunRow {
            run_id: run.to_owned(),
            scenario: "s".to_owned(),
            overrides: overrides.to_owned(),
            concurrency: None,
            rate_scale: rate,
            seed,
            status: "ok".to_owned(),
            gpus: Some(2),
            slo_met: Some(met),
            metrics,
        }
    }

    #[test]
    fn seeds_are_a_spread_and_nothing_else_is_merged() {
        let rows = [
            row("a", "{}", 1.0, 1, 100.0, 10.0, true),
            row("b", "{}", 1.0, 2, 120.0, 20.0, false),
            row("c", "{}", 2.0, 1, 300.0, 40.0, true),
            row("d", "{\"workload_session_rate\":2}", 1.0, 1, 500.0, 5.0, true),
        ];
        let loads: HashMap<String, RunLoad> = [("a", 1.5), ("b", 1.5), ("c", 3.0), ("d", 7.0)]
            .into_iter()
            .map(|(r, o)| (r.to_owned(), RunLoad { client: "open_loop".to_owned(), offered_rps: Some(o) }))
            .collect();
        let data = collect(&rows, &loads);
        assert_eq!(data.points.len(), 3);
        let p = &data.points[0];
        assert_eq!((p.seeds.clone(), p.ok, p.met, p.load()), (vec![1, 2], 2, Some(false), Some(1.5)));
        assert_eq!(p.get("tokens_per_sec_per_gpu"), Some(Spread { min: 50.0, max: 60.0 }));
        assert_eq!(p.get("tokens_per_sec_per_user"), Some(Spread { min: 50.0, max: 100.0 }));
        assert_eq!(data.points[2].deployment, "s workload_session_rate=2");
        // Worst seeds: (50, 50), (25, 150), (200, 250): the last beats both.
        assert_eq!(data.frontier_per_user, vec![2]);
        // Against TTFT p99 (worst 200, 400, 50 ms), the same.
        assert_eq!(data.frontier_ttft, vec![2]);
        // A seed that did not run: the point has no worst seed, no frontier.
        let mut rows = rows.to_vec();
        rows[3].status = "failed".to_owned();
        let data = collect(&rows, &loads);
        assert_eq!((data.points[2].ok, data.points[2].met), (0, None));
        assert_eq!(data.frontier_per_user, vec![1, 0]);
    }
}
