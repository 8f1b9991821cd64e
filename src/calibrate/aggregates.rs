//! Real runs known only by their aggregates (BLIS's training experiments,
//! [`crate::workload::import::blis_trainval`]): the simulated requests are
//! summarised the way the real client summarised its own — per load stage
//! (by send time) and over the whole run — and set beside the measured
//! numbers.

use serde::Serialize;

use super::observed::Observations;
use super::stats::percentile;
use crate::workload::import::blis_trainval::Aggregate;

/// One aggregate, measured and simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AggregateComparison {
    /// −1 for the whole run, else the load stage.
    pub stage: i32,
    /// `e2e_mean`, `ttft_p99`, `itl_mean`, …
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

/// Latencies (ms) of the completed requests sent in `[from, to)` seconds.
pub(crate) struct Sample {
    pub(crate) e2e: Vec<f64>,
    pub(crate) ttft: Vec<f64>,
    /// Per request: (E2E − TTFT) / (output tokens − 1), vLLM's TPOT.
    pub(crate) tpot: Vec<f64>,
}

pub(crate) fn sample(sim: &Observations, from: f64, to: f64) -> Sample {
    let mut s = Sample { e2e: Vec::new(), ttft: Vec::new(), tpot: Vec::new() };
    for id in &sim.order {
        let r = &sim.requests[id];
        let sent = r.send_us / 1e6;
        let (Some(e2e), Some(first)) = (r.e2e_us, r.llm_nodes.first()) else { continue };
        if sent < from || sent >= to {
            continue;
        }
        let ttft = sim.nodes[&(id.clone(), *first)].ttft_us;
        s.e2e.push(e2e / 1e3);
        s.ttft.push(ttft / 1e3);
        if r.output_tokens > 1 {
            s.tpot.push((e2e - ttft) / 1e3 / (r.output_tokens - 1) as f64);
        }
    }
    s.e2e.sort_by(f64::total_cmp);
    s.ttft.sort_by(f64::total_cmp);
    s
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// The simulated counterpart of each measured aggregate. `itl_mean` is
/// defined as the real client's summary derives it, (mean E2E − mean TTFT)
/// / (mean output tokens − 1), with the real run's own mean output count
/// (recovered from its three means): a client that miscounts tokens (the
/// Llama-2-7b runs, see the data's README) skews the real ITL, and the
/// simulated one the same way.
pub fn compare(sim: &Observations, stages: &[(f64, f64)], real: &[Aggregate]) -> Vec<AggregateComparison> {
    let mut out = Vec::new();
    for a in real {
        let (from, to) = match a.stage {
            -1 => (f64::NEG_INFINITY, f64::INFINITY),
            k => match usize::try_from(k).ok().and_then(|k| stages.get(k)) {
                Some(&(from, to)) => (from, to),
                None => continue,
            },
        };
        let s = sample(sim, from, to);
        let sim_ms = match a.metric.as_str() {
            "e2e_mean" => mean(&s.e2e),
            "e2e_p90" => percentile(&s.e2e, 90.0),
            "e2e_p99" => percentile(&s.e2e, 99.0),
            "ttft_mean" => mean(&s.ttft),
            "ttft_p90" => percentile(&s.ttft, 90.0),
            "ttft_p99" => percentile(&s.ttft, 99.0),
            "tpot_mean" => mean(&s.tpot),
            "itl_mean" => {
                let pick = |m: &str| real.iter().find(|r| r.stage == a.stage && r.metric == m).map(|r| r.actual_ms);
                let Some(tokens) = pick("e2e_mean")
                    .zip(pick("ttft_mean"))
                    .map(|(e2e, ttft)| (e2e - ttft) / a.actual_ms + 1.0)
                    .filter(|t| *t > 1.0)
                else {
                    continue;
                };
                (mean(&s.e2e) - mean(&s.ttft)) / (tokens - 1.0)
            }
            _ => continue,
        };
        out.push(AggregateComparison {
            stage: a.stage,
            metric: a.metric.clone(),
            real_ms: a.actual_ms,
            sim_ms,
            blis_ms: a.blis_ms,
            requests: s.e2e.len(),
        });
    }
    out
}
