//! The ISPASS'26 runs of LLMServingSim 2.0
//! ([`crate::workload::import::ispass26`]), scored as the artifact reports
//! them: mean TTFT, mean TPOT ((last − first token) / (output − 1) per
//! request, averaged over requests of two or more tokens) and output
//! throughput (output tokens / the time from the run's start to its last
//! token), and, where the artifact has the curve, output tokens per second
//! in 1-s bins. Other simulators' published means for the same run stand
//! beside ours.

use serde::Serialize;

use super::aggregates::AggregateComparison;
use crate::scenario::Deployment;
use crate::sim::{self, FinishedRequest, Sink};
use crate::workload::import::ispass26::{IspassRun, Means};

/// A replayed ISPASS run against the real one.
#[derive(Debug, Clone, Serialize)]
pub struct IspassComparison {
    /// Whole-run rows for the calibration table: `ttft_mean`, `tpot_mean`
    /// and `run_time` (ms: output tokens / output throughput, the real one
    /// from figure 8's throughput) where means were measured; `curve_end`
    /// (ms: the end of the last 1-s bin with output) where only the curve was.
    pub aggregates: Vec<AggregateComparison>,
    /// vLLM's measured means (figure 8).
    pub measured: Option<Means>,
    /// Ours.
    pub simulated: Means,
    /// Other simulators' means (figure 8), by name.
    pub simulators: Vec<(String, Means)>,
    /// The per-second curves, where measured.
    pub curve: Option<CurveComparison>,
    /// What the replay assumed.
    pub notes: Vec<String>,
}

/// Output tokens a second, real and simulated (entry k − 1: second k).
#[derive(Debug, Clone, Serialize)]
pub struct CurveComparison {
    /// Measured.
    pub real: Vec<f64>,
    /// Simulated, binned the same way.
    pub simulated: Vec<f64>,
    /// Σ |simulated − real| over bins / Σ real: 0 when the curves coincide.
    pub normalized_abs_error: f64,
}

/// What the sink keeps of each finished request.
#[derive(Default)]
struct Tokens {
    /// Per request: send, first token, last token (µs) and token count.
    requests: Vec<(u64, u64, u64, usize)>,
    /// Every output token's time, µs.
    times: Vec<u64>,
}

impl Sink for Tokens {
    fn request_done(&mut self, r: &FinishedRequest) -> std::io::Result<()> {
        let times: Vec<u64> = r.nodes.iter().flat_map(|n| n.token_times_us.iter().copied()).collect();
        if let (Some(&first), Some(&last)) = (times.first(), times.last())
            && r.finish_us.is_some()
        {
            self.requests.push((r.send_us, first, last, times.len()));
        }
        self.times.extend(times);
        Ok(())
    }
}

/// Replays `run` on `deployment` and compares.
pub fn compare(deployment: &Deployment, run: &IspassRun) -> IspassComparison {
    let mut tokens = Tokens::default();
    let source = run.workload.iter().map(|r| Ok::<_, std::convert::Infallible>(r.clone()));
    // Neither the source nor the sink can fail.
    let _ = sim::run(deployment.run_config(), source, &mut tokens);
    let n = tokens.requests.len().max(1) as f64;
    let ttft_ms = tokens.requests.iter().map(|&(send, first, _, _)| (first - send) as f64 / 1e3).sum::<f64>() / n;
    let tpots: Vec<f64> = tokens
        .requests
        .iter()
        .filter(|r| r.3 > 1)
        .map(|&(_, first, last, k)| (last - first) as f64 / 1e3 / (k - 1) as f64)
        .collect();
    let tpot_ms = tpots.iter().sum::<f64>() / tpots.len().max(1) as f64;
    let end_us = tokens.times.iter().copied().max().unwrap_or(0);
    let total = tokens.times.len() as f64;
    let run_time_ms = end_us as f64 / 1e3;
    let simulated =
        Means { throughput_tok_s: if end_us > 0 { total / (end_us as f64 / 1e6) } else { 0.0 }, ttft_ms, tpot_ms };
    let row = |metric: &str, real_ms: f64, sim_ms: f64| AggregateComparison {
        stage: -1,
        metric: metric.to_owned(),
        real_ms,
        sim_ms,
        blis_ms: None,
        requests: tokens.requests.len(),
    };
    let mut aggregates = Vec::new();
    if let Some(m) = &run.measured {
        aggregates.push(row("ttft_mean", m.ttft_ms, ttft_ms));
        aggregates.push(row("tpot_mean", m.tpot_ms, tpot_ms));
        // The real run's length as its throughput implies it: the workload's
        // output tokens (every request completes) over its throughput.
        let outputs: f64 = run
            .workload
            .iter()
            .flat_map(|r| &r.sub_requests)
            .filter_map(|s| match &s.kind {
                crate::workload::NodeKind::Llm(call) => Some(f64::from(call.output_tokens)),
                _ => None,
            })
            .sum();
        aggregates.push(row("run_time", outputs / m.throughput_tok_s * 1e3, run_time_ms));
    }
    let curve = run.curve.as_ref().map(|real| {
        let mut simulated = vec![0.0; real.len()];
        for &t in &tokens.times {
            // Token at t µs falls in second ⌊t / 1 s⌋ + 1, entry ⌊t / 1 s⌋.
            let k = (t / 1_000_000) as usize;
            if k >= simulated.len() {
                simulated.resize(k + 1, 0.0);
            }
            simulated[k] += 1.0;
        }
        let pad = |v: &[f64], i: usize| v.get(i).copied().unwrap_or(0.0);
        let bins = real.len().max(simulated.len());
        let deviation: f64 = (0..bins).map(|i| (pad(&simulated, i) - pad(real, i)).abs()).sum();
        let sum: f64 = real.iter().sum();
        CurveComparison {
            real: real.clone(),
            simulated,
            normalized_abs_error: if sum > 0.0 { deviation / sum } else { 0.0 },
        }
    });
    if run.measured.is_none()
        && let Some(c) = &curve
    {
        let end = |v: &[f64]| v.iter().rposition(|&x| x > 0.0).map_or(0.0, |k| (k + 1) as f64 * 1e3);
        aggregates.push(row("curve_end", end(&c.real), end(&c.simulated)));
    }
    IspassComparison {
        aggregates,
        measured: run.measured,
        simulated,
        simulators: run.simulators.clone(),
        curve,
        notes: run.notes.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::import::ispass26::IspassRun;

    /// Two requests on an engine whose every step takes 1 ms (linear model,
    /// steps taking turns with nothing else): the scores are the artifact's
    /// definitions applied to simulated token times.
    #[test]
    fn means_throughput_and_curve_follow_the_artifacts_definitions() {
        let spec = serde_saphyr::from_str(
            "model: Llama-3.1-8B\nhardware: H100\nengine: {num_gpu_blocks: 100, async_scheduling: false}\n\
             latency_model: {kind: linear, beta: [1000, 0, 0]}\n",
        )
        .unwrap();
        let d = crate::scenario::resolve(spec, std::path::Path::new("."), "t").unwrap();
        let request = |id: u64, at: f64, out: u32| {
            use crate::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};
            let call = LlmCall::new(2, out);
            let node = SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None };
            Request {
                traffic: Default::default(),
                request_id: RequestId::Int(id),
                arrival_time: at,
                initial: vec![0],
                sub_requests: vec![node],
            }
        };
        let measured = Means { throughput_tok_s: 500.0, ttft_ms: 2.0, tpot_ms: 1.0 };
        let run = IspassRun {
            scenario_yaml: String::new(),
            // The first runs alone; the second arrives at 1.0005 s.
            workload: vec![request(0, 0.0, 3), request(1, 1.0005, 1)],
            measured: Some(measured),
            simulators: vec![("APEX".to_owned(), measured)],
            curve: Some(vec![3.0, 0.0]),
            notes: Vec::new(),
        };
        let c = compare(&d, &run);
        // Request 0: first token after one 1-ms step, then one a step.
        // Request 1: its one token 1 ms after it arrives (at 1.0015 s), so
        // the run ends there with 4 tokens.
        assert_eq!(c.simulated.ttft_ms, 1.0);
        assert_eq!(c.simulated.tpot_ms, 1.0, "averaged over requests of two or more tokens");
        assert!((c.simulated.throughput_tok_s - 4.0 / 1.0015).abs() < 1e-9);
        let curve = c.curve.unwrap();
        assert_eq!(curve.simulated, vec![3.0, 1.0]);
        assert_eq!(curve.normalized_abs_error, 1.0 / 3.0);
        let metrics: Vec<(&str, f64, f64)> =
            c.aggregates.iter().map(|a| (a.metric.as_str(), a.real_ms, a.sim_ms)).collect();
        assert_eq!(metrics, [("ttft_mean", 2.0, 1.0), ("tpot_mean", 1.0, 1.0), ("run_time", 8.0, 1001.5)]);
    }
}
