//! Error against load: for a real run that swept its request rate over two
//! or more stages, the error of mean E2E, ITL and TTFT in each stage, and
//! whether the real server kept up with the stage at all — a capacity
//! answer is read at the highest load a deployment sustains, so that is
//! where the error must hold.
//!
//! A stage is **saturated** when the real server did not keep up with it:
//! for runs with per-request data, when the real mean E2E of the requests
//! sent in the stage's last quarter exceeds that of its first quarter by
//! more than half ([`GROWTH_LIMIT`]: the queue grows across the stage), or
//! when fewer than [`COMPLETED_SHARE`] of the requests it sent completed
//! (completions lag sends). Runs known only by their per-stage aggregates
//! show neither, so there a stage is saturated when its real p99 TTFT
//! exceeds [`SATURATED_TTFT_P99_MS`]: a queue that grows over a stage of
//! minutes puts TTFT in seconds, while a server that keeps up answers in
//! tens of milliseconds.
//!
//! The **trend** of a sweep is the error at its highest-rate stage that is
//! not saturated minus the error at its lowest-rate stage, in points; none
//! when the lowest stage is saturated or is the only unsaturated one.

use serde::Serialize;

use super::aggregates::{AggregateComparison, Sample, sample};
use super::observed::Observations;

/// The E2E growth across a stage (last quarter's mean over the first's)
/// beyond which it counts as saturated.
pub const GROWTH_LIMIT: f64 = 1.5;

/// The share of a stage's requests that must complete for it to count as
/// kept up with.
pub const COMPLETED_SHARE: f64 = 0.95;

/// Real p99 TTFT beyond which a stage known only by its aggregates counts
/// as saturated, ms.
pub const SATURATED_TTFT_P99_MS: f64 = 1_000.0;

/// The metrics the error against load is shown for.
pub const METRICS: [&str; 3] = ["e2e_mean", "itl_mean", "ttft_mean"];

/// One metric of one load stage, measured and simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageComparison {
    /// The stage, from 0 in send order.
    pub stage: i32,
    /// Requests sent in the stage per second.
    pub rate_rps: f64,
    /// Whether the real server did not keep up with the stage (module docs).
    pub saturated: bool,
    /// `e2e_mean`, `itl_mean` or `ttft_mean`.
    pub metric: String,
    /// Measured, ms.
    pub real_ms: f64,
    /// Simulated, ms.
    pub sim_ms: f64,
    /// BLIS's prediction, ms.
    pub blis_ms: Option<f64>,
    /// Requests the simulated value summarises.
    pub requests: usize,
}

impl StageComparison {
    /// sim / real − 1.
    pub fn error(&self) -> f64 {
        if self.real_ms > 0.0 { self.sim_ms / self.real_ms - 1.0 } else { 0.0 }
    }

    /// BLIS's prediction / real − 1.
    pub fn blis_error(&self) -> Option<f64> {
        self.blis_ms.map(|b| if self.real_ms > 0.0 { b / self.real_ms - 1.0 } else { 0.0 })
    }
}

/// Requests sent in `[from, to)` (seconds).
fn sent(obs: &Observations, from: f64, to: f64) -> usize {
    obs.requests.values().filter(|r| (from..to).contains(&(r.send_us / 1e6))).count()
}

/// Requests sent in `[from, to)` per second.
fn rate(obs: &Observations, from: f64, to: f64) -> f64 {
    if to > from { sent(obs, from, to) as f64 / (to - from) } else { 0.0 }
}

/// The per-stage rows of a run known by its aggregates (the rows of
/// [`super::aggregates::compare`]); empty for a run of fewer than two stages.
pub fn from_aggregates(
    rows: &[AggregateComparison],
    sim: &Observations,
    stages: &[(f64, f64)],
) -> Vec<StageComparison> {
    if stages.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (k, &(from, to)) in stages.iter().enumerate() {
        let stage = k as i32;
        let find = |m: &str| rows.iter().find(|a| a.stage == stage && a.metric == m);
        let saturated = find("ttft_p99").is_some_and(|a| a.real_ms > SATURATED_TTFT_P99_MS);
        for metric in METRICS {
            let Some(a) = find(metric) else { continue };
            out.push(StageComparison {
                stage,
                rate_rps: rate(sim, from, to),
                saturated,
                metric: metric.to_owned(),
                real_ms: a.real_ms,
                sim_ms: a.sim_ms,
                blis_ms: a.blis_ms,
                requests: a.requests,
            });
        }
    }
    out
}

/// The mean of `v` (0 when empty).
fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// A sample's mean E2E, ITL (each request's (E2E − TTFT) / (output tokens − 1))
/// and TTFT, ms.
fn means(s: &Sample) -> [(&'static str, f64); 3] {
    [("e2e_mean", mean(&s.e2e)), ("itl_mean", mean(&s.tpot)), ("ttft_mean", mean(&s.ttft))]
}

/// Whether the real requests sent in `[from, to)` show a saturated stage
/// (module docs): E2E growing across it, or completions lagging sends.
fn saturated(real: &Observations, from: f64, to: f64) -> bool {
    let sent = sent(real, from, to);
    let quarter = (to - from) / 4.0;
    let first = sample(real, from, from + quarter);
    let last = sample(real, to - quarter, to);
    let completed = sample(real, from, to).e2e.len();
    let grows = !first.e2e.is_empty() && !last.e2e.is_empty() && mean(&last.e2e) > GROWTH_LIMIT * mean(&first.e2e);
    grows || (completed as f64) < COMPLETED_SHARE * sent as f64
}

/// The per-stage rows of a run with per-request data, both sides summarised
/// over the requests sent in each stage (ITL as each request's (E2E − TTFT)
/// / (output tokens − 1), averaged); `blis` holds BLIS's predictions as
/// (stage, metric, ms). Empty for a run of fewer than two stages.
pub fn from_requests(
    real: &Observations,
    sim: &Observations,
    stages: &[(f64, f64)],
    blis: &[(i32, String, f64)],
) -> Vec<StageComparison> {
    if stages.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (k, &(from, to)) in stages.iter().enumerate() {
        let stage = k as i32;
        let (r, s) = (sample(real, from, to), sample(sim, from, to));
        let saturated = saturated(real, from, to);
        for ((metric, real_ms), (_, sim_ms)) in means(&r).into_iter().zip(means(&s)) {
            out.push(StageComparison {
                stage,
                rate_rps: rate(real, from, to),
                saturated,
                metric: metric.to_owned(),
                real_ms,
                sim_ms,
                blis_ms: blis.iter().find(|(st, m, _)| *st == stage && m == metric).map(|b| b.2),
                requests: s.e2e.len(),
            });
        }
    }
    out
}

/// The trend of one metric over a sweep's stages (module docs), points:
/// ours and BLIS's (where BLIS predicted both stages), with the two stages
/// it spans; `None` where the sweep has no unsaturated stage above its
/// lowest.
pub fn trend(rows: &[StageComparison], metric: &str) -> Option<Trend> {
    let mut stages: Vec<&StageComparison> = rows.iter().filter(|r| r.metric == metric).collect();
    stages.sort_by(|a, b| a.rate_rps.total_cmp(&b.rate_rps).then(a.stage.cmp(&b.stage)));
    let low = *stages.first()?;
    if low.saturated {
        return None;
    }
    let high = *stages.iter().rev().find(|r| !r.saturated)?;
    if high.stage == low.stage {
        return None;
    }
    let points = |hi: f64, lo: f64| (hi - lo) * 100.0;
    Some(Trend {
        low: low.stage,
        high: high.stage,
        points: points(high.error(), low.error()),
        blis_points: high.blis_error().zip(low.blis_error()).map(|(h, l)| points(h, l)),
    })
}

/// How an error moves from a sweep's lowest stage to its highest
/// unsaturated one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// The lowest-rate stage.
    pub low: i32,
    /// The highest-rate stage that is not saturated.
    pub high: i32,
    /// Error at `high` − error at `low`, points.
    pub points: f64,
    /// The same for BLIS's prediction.
    pub blis_points: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::observed::{NodeObs, RequestObs};

    /// Observations of requests sent at `sends` (s) with E2E `e2e` (ms, None
    /// for a failure), TTFT 10 ms and 11 output tokens.
    fn obs(rows: &[(f64, Option<f64>)]) -> Observations {
        let mut o = Observations::default();
        for (i, &(send, e2e)) in rows.iter().enumerate() {
            let id = i.to_string();
            o.order.push(id.clone());
            o.requests.insert(
                id.clone(),
                RequestObs {
                    index: i,
                    send_us: send * 1e6,
                    e2e_us: e2e.map(|ms| ms * 1e3),
                    output_tokens: 11,
                    llm_nodes: vec![0],
                },
            );
            o.nodes.insert((id, 0), NodeObs { ttft_us: 10e3, itl_us: None, input_tokens: 100, output_tokens: 11 });
        }
        o
    }

    /// Two stages of 4 s: 1 req/s then 2 req/s. The real E2E is 100 ms in
    /// stage 0 and 200 ms in stage 1, flat across it; the simulated 105 and
    /// 220 ms: +5 % then +10 %, a trend of +5 points. ITL is (E2E − 10) / 10.
    #[test]
    fn per_request_stages_compare_and_trend() {
        let stage0: Vec<f64> = (0..4).map(|i| f64::from(i) + 0.5).collect();
        let stage1: Vec<f64> = (0..8).map(|i| 4.0 + f64::from(i) * 0.5 + 0.25).collect();
        let with = |a: f64, b: f64| -> Vec<(f64, Option<f64>)> {
            stage0.iter().map(|&t| (t, Some(a))).chain(stage1.iter().map(|&t| (t, Some(b)))).collect()
        };
        let (real, sim) = (obs(&with(100.0, 200.0)), obs(&with(105.0, 220.0)));
        let stages = [(0.0, 4.0), (4.0, 8.0)];
        let blis = [(0, "e2e_mean".to_owned(), 110.0), (1, "e2e_mean".to_owned(), 200.0)];
        let rows = from_requests(&real, &sim, &stages, &blis);
        assert_eq!(rows.len(), 6);
        let e2e: Vec<_> = rows.iter().filter(|r| r.metric == "e2e_mean").collect();
        assert_eq!((e2e[0].rate_rps, e2e[1].rate_rps), (1.0, 2.0));
        assert!(!e2e[0].saturated && !e2e[1].saturated);
        assert!((e2e[0].error() - 0.05).abs() < 1e-12 && (e2e[1].error() - 0.10).abs() < 1e-12);
        let itl = rows.iter().find(|r| r.metric == "itl_mean" && r.stage == 1).unwrap();
        assert!((itl.real_ms - 19.0).abs() < 1e-12 && (itl.sim_ms - 21.0).abs() < 1e-12);
        let t = trend(&rows, "e2e_mean").unwrap();
        assert_eq!((t.low, t.high), (0, 1));
        assert!((t.points - 5.0).abs() < 1e-9, "{t:?}");
        // BLIS: +10 % then 0 %: −10 points.
        assert!((t.blis_points.unwrap() + 10.0).abs() < 1e-9, "{t:?}");
        // One stage: nothing to show.
        assert!(from_requests(&real, &sim, &stages[..1], &[]).is_empty());
    }

    /// A stage whose real E2E doubles from its first quarter to its last, or
    /// whose requests mostly fail, is saturated, and the trend stops below
    /// it: with only the lowest stage left, there is none.
    #[test]
    fn saturated_stages_are_left_out_of_the_trend() {
        let mut rows: Vec<(f64, Option<f64>)> = (0..4).map(|i| (f64::from(i) + 0.5, Some(100.0))).collect();
        rows.extend((0..8).map(|i| (4.0 + f64::from(i) * 0.5 + 0.25, Some(100.0 + 50.0 * f64::from(i)))));
        let real = obs(&rows);
        assert!(!saturated(&real, 0.0, 4.0));
        assert!(saturated(&real, 4.0, 8.0));
        let failing: Vec<_> = (0..8).map(|i| (f64::from(i) * 0.5, if i < 6 { Some(100.0) } else { None })).collect();
        assert!(saturated(&obs(&failing), 0.0, 4.0));
        let cmp = from_requests(&real, &real, &[(0.0, 4.0), (4.0, 8.0)], &[]);
        assert!(cmp.iter().any(|r| r.saturated));
        assert_eq!(trend(&cmp, "e2e_mean"), None);
    }

    /// Aggregate-only stages take their rows from the aggregate comparison
    /// and are saturated by a real p99 TTFT over a second.
    #[test]
    fn aggregate_stages_use_the_ttft_rule() {
        let row = |stage, metric: &str, real_ms, sim_ms| AggregateComparison {
            stage,
            metric: metric.to_owned(),
            real_ms,
            sim_ms,
            blis_ms: None,
            requests: 4,
        };
        let rows = [
            row(-1, "e2e_mean", 150.0, 150.0),
            row(0, "e2e_mean", 100.0, 98.0),
            row(0, "ttft_p99", 40.0, 40.0),
            row(1, "e2e_mean", 200.0, 190.0),
            row(1, "ttft_p99", 60.0, 60.0),
            row(2, "e2e_mean", 9000.0, 900.0),
            row(2, "ttft_p99", 8000.0, 60.0),
        ];
        let sim = obs(&(0..12).map(|i| (f64::from(i), Some(1.0))).collect::<Vec<_>>());
        let cmp = from_aggregates(&rows, &sim, &[(0.0, 4.0), (4.0, 8.0), (8.0, 12.0)]);
        assert_eq!(cmp.len(), 3);
        assert_eq!(cmp.iter().map(|r| r.saturated).collect::<Vec<_>>(), [false, false, true]);
        let t = trend(&cmp, "e2e_mean").unwrap();
        assert_eq!((t.low, t.high), (0, 1));
        assert!((t.points - (-5.0 - -2.0)).abs() < 1e-9, "{t:?}");
        assert!(from_aggregates(&rows, &sim, &[(0.0, 4.0)]).is_empty());
    }
}
