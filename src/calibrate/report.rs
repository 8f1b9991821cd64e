//! The calibration report: real against simulated, with BLIS's schema
//! (`trace_info`, `metrics.{ttft,e2e,itl}`, `config_match`,
//! `known_limitations`, `throughput`). Latencies are µs, errors are
//! `sim − real`, percent errors are fractions.
//!
//! Requests are matched by request id, llm nodes by (request id, node).
//! Real requests in the first `warmup_requests` rows are left out. The
//! simulated side is shifted into the client's frame: `network_rtt_us` is
//! added to its TTFT and E2E, and with `network_bandwidth_mbps` so is the
//! time to upload the prompt and download the output (4 bytes a token).

use std::collections::BTreeMap;

use serde::Serialize;

use super::observed::Observations;
use super::stats::MetricReport;

/// How to compare.
#[derive(Debug, Clone, Default)]
pub struct CalibrateOptions {
    /// Real requests to skip from the start; `None`: the TraceV2 header's, or 0.
    pub warmup_requests: Option<usize>,
    /// Added to simulated latencies, µs; `None`: the TraceV2 header's, or 0.
    pub network_rtt_us: Option<f64>,
    /// Upload/download delay from token counts; 0 = none.
    pub network_bandwidth_mbps: f64,
    /// Within-tolerance verdict on output-token throughput, percent.
    pub throughput_tolerance_pct: Option<f64>,
    /// GPUs, for per-GPU throughput.
    pub num_gpus: Option<u32>,
}

/// What was compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceInfo {
    /// Real requests = matched + warm-up + unmatched real.
    pub num_requests: usize,
    /// Real requests left out as warm-up.
    pub warm_up_excluded: usize,
    /// Requests found on both sides.
    pub matched_pairs: usize,
    /// Matched llm nodes whose prompt or output token counts differ.
    pub token_mismatches: usize,
    /// Real requests (after warm-up) the simulation does not have.
    pub unmatched_real: usize,
    /// Simulated requests the real side does not have.
    pub unmatched_sim: usize,
    /// First send to last real completion, seconds.
    pub duration_s: f64,
}

/// Sim against real throughput over the matched requests that completed on
/// the real side, both timed in the client frame from the earliest send.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[allow(missing_docs)]
pub struct Throughput {
    pub matched_requests: usize,
    pub real_runtime_sec: f64,
    pub sim_runtime_sec: f64,
    pub real_output_tokens: u64,
    pub sim_output_tokens: u64,
    pub real_output_tokens_per_sec: f64,
    pub sim_output_tokens_per_sec: f64,
    pub output_tokens_per_sec_error: f64,
    pub output_tokens_per_sec_percent_error: f64,
    pub real_requests_per_sec: f64,
    pub sim_requests_per_sec: f64,
    pub requests_per_sec_error: f64,
    pub requests_per_sec_percent_error: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_gpus: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_output_tokens_per_sec_per_gpu: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_output_tokens_per_sec_per_gpu: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerance_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within: Option<bool>,
}

/// Which simulator settings were checked against the real server's.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct ConfigMatch {
    /// Settings that matched.
    pub matched: Vec<String>,
    /// Settings the simulator had to default.
    pub defaulted: Vec<String>,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// What was compared.
    pub trace_info: TraceInfo,
    /// `ttft`, `e2e`, and `itl` when both sides have inter-token data.
    pub metrics: BTreeMap<&'static str, MetricReport>,
    /// Not checked yet: both lists empty.
    pub config_match: ConfigMatch,
    /// Where the simulator is known to differ from a real server.
    pub known_limitations: Vec<&'static str>,
    /// Throughput comparison.
    pub throughput: Throughput,
}

const KNOWN_LIMITATIONS: [&str; 4] = [
    "Steps are priced as a whole: tokens emitted by one engine step share its end time.",
    "Client-side time (HTTP, tokenization, streaming) is not simulated; only --network-rtt-us and --network-bandwidth-mbps shift the simulated side.",
    "Without token ids in the workload, prefix-cache hits the real server had cannot be simulated.",
    "Speculative decoding, CPU KV offload and LoRA adapters are not modelled.",
];

/// Compares `real` against `sim`.
pub fn compare(real: &Observations, sim: &Observations, opts: &CalibrateOptions) -> Report {
    let warmup = opts.warmup_requests.or(real.header_warm_up).unwrap_or(0);
    let rtt = opts.network_rtt_us.or(real.header_rtt_ms.map(|ms| ms * 1000.0)).unwrap_or(0.0);
    let per_token_us = if opts.network_bandwidth_mbps > 0.0 { 32.0 / opts.network_bandwidth_mbps } else { 0.0 };
    let (mut ttft, mut e2e, mut itl) = (Vec::new(), Vec::new(), Vec::new());
    let (mut warm, mut matched, mut unmatched_real, mut mismatches) = (0, 0, 0, 0);
    let (mut first_send, mut real_last, mut sim_last) = (f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY);
    let (mut tp_count, mut real_tokens, mut sim_tokens) = (0usize, 0u64, 0u64);
    for id in &real.order {
        let r = &real.requests[id];
        if r.index < warmup {
            warm += 1;
            continue;
        }
        let Some(s) = sim.requests.get(id) else {
            unmatched_real += 1;
            continue;
        };
        matched += 1;
        // The request's prompt goes up once, with its first call.
        let upload = r
            .llm_nodes
            .first()
            .and_then(|n| real.nodes.get(&(id.clone(), *n)))
            .map_or(0.0, |n| n.input_tokens as f64 * per_token_us);
        for node in &r.llm_nodes {
            let key = (id.clone(), *node);
            let (Some(rn), Some(sn)) = (real.nodes.get(&key), sim.nodes.get(&key)) else { continue };
            if rn.input_tokens != sn.input_tokens || rn.output_tokens != sn.output_tokens {
                mismatches += 1;
            }
            ttft.push((rn.ttft_us, sn.ttft_us + rtt + rn.input_tokens as f64 * per_token_us));
            if let (Some(a), Some(b)) = (rn.itl_us, sn.itl_us) {
                itl.push((a, b));
            }
        }
        if let (Some(re), Some(se)) = (r.e2e_us, s.e2e_us) {
            let shifted = se + rtt + upload + r.output_tokens as f64 * per_token_us;
            e2e.push((re, shifted));
            first_send = first_send.min(r.send_us);
            real_last = real_last.max(r.send_us + re);
            sim_last = sim_last.max(r.send_us + shifted);
            tp_count += 1;
            real_tokens += r.output_tokens;
            sim_tokens += s.output_tokens;
        }
    }
    let unmatched_sim = sim.order.iter().filter(|id| !real.requests.contains_key(*id)).count();
    let mut metrics = BTreeMap::new();
    metrics.insert("ttft", MetricReport::new(&ttft));
    metrics.insert("e2e", MetricReport::new(&e2e));
    if !itl.is_empty() {
        metrics.insert("itl", MetricReport::new(&itl));
    }
    let (real_runtime, sim_runtime) =
        if tp_count > 0 { ((real_last - first_send) / 1e6, (sim_last - first_send) / 1e6) } else { (0.0, 0.0) };
    let rate = |n: f64, t: f64| if t > 0.0 { n / t } else { 0.0 };
    let frac = |err: f64, real: f64| if real > 0.0 { err.abs() / real } else { 0.0 };
    let (rtps, stps) = (rate(real_tokens as f64, real_runtime), rate(sim_tokens as f64, sim_runtime));
    let (rrps, srps) = (rate(tp_count as f64, real_runtime), rate(tp_count as f64, sim_runtime));
    let tps_percent_error = frac(stps - rtps, rtps);
    let throughput = Throughput {
        matched_requests: tp_count,
        real_runtime_sec: real_runtime,
        sim_runtime_sec: sim_runtime,
        real_output_tokens: real_tokens,
        sim_output_tokens: sim_tokens,
        real_output_tokens_per_sec: rtps,
        sim_output_tokens_per_sec: stps,
        output_tokens_per_sec_error: stps - rtps,
        output_tokens_per_sec_percent_error: tps_percent_error,
        real_requests_per_sec: rrps,
        sim_requests_per_sec: srps,
        requests_per_sec_error: srps - rrps,
        requests_per_sec_percent_error: frac(srps - rrps, rrps),
        num_gpus: opts.num_gpus,
        real_output_tokens_per_sec_per_gpu: opts.num_gpus.map(|g| rtps / f64::from(g)),
        sim_output_tokens_per_sec_per_gpu: opts.num_gpus.map(|g| stps / f64::from(g)),
        tolerance_pct: opts.throughput_tolerance_pct,
        within: opts.throughput_tolerance_pct.map(|t| tps_percent_error * 100.0 <= t + 1e-9),
    };
    Report {
        trace_info: TraceInfo {
            num_requests: real.order.len(),
            warm_up_excluded: warm,
            matched_pairs: matched,
            token_mismatches: mismatches,
            unmatched_real,
            unmatched_sim,
            duration_s: real_runtime,
        },
        metrics,
        config_match: ConfigMatch::default(),
        known_limitations: KNOWN_LIMITATIONS.to_vec(),
        throughput,
    }
}
