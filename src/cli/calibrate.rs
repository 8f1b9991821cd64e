//! `blis-sweep calibrate`: real against simulated latencies, as a report
//! with BLIS's schema.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use anyhow::{Context, bail};

use super::atomic::{self, write_file};
use crate::calibrate::observed::{self, Observations};
use crate::calibrate::report::{CalibrateOptions, compare};

#[derive(Debug, clap::Args)]
pub(crate) struct CalibrateArgs {
    /// Real side: a result JSONL (a vLLM baseline in our format).
    #[arg(long, value_name = "REAL.jsonl", conflicts_with_all = ["trace_header", "trace_data"])]
    real: Option<PathBuf>,
    /// Real side: a BLIS TraceV2 header (YAML)…
    #[arg(long, value_name = "TRACE.yaml", requires = "trace_data")]
    trace_header: Option<PathBuf>,
    /// …and its data (CSV).
    #[arg(long, value_name = "TRACE.csv", requires = "trace_header")]
    trace_data: Option<PathBuf>,
    /// Simulated side: our result JSONL.
    #[arg(long, value_name = "SIM.jsonl")]
    sim: PathBuf,
    /// Where to write the report (JSON, atomically).
    #[arg(long, value_name = "REPORT.json")]
    report: PathBuf,
    /// Real requests to leave out from the start (default: the trace header's, else 0).
    #[arg(long, value_name = "N")]
    warmup_requests: Option<usize>,
    /// Added to simulated TTFT and E2E, µs (default: the trace header's RTT, else 0).
    #[arg(long, value_name = "US")]
    network_rtt_us: Option<f64>,
    /// Adds prompt upload and output download time at this bandwidth (4 bytes a token).
    #[arg(long, value_name = "MBPS", default_value_t = 0.0)]
    network_bandwidth_mbps: f64,
    /// Verdict on output-token throughput within this percent error.
    #[arg(long, value_name = "PCT")]
    throughput_tolerance_pct: Option<f64>,
    /// GPUs (TP × DP × replicas), for per-GPU throughput.
    #[arg(long, value_name = "N")]
    num_gpus: Option<u32>,
}

fn results(path: &PathBuf) -> anyhow::Result<Observations> {
    let file = path.display().to_string();
    let f = File::open(path).with_context(|| format!("{file}: cannot open"))?;
    Ok(observed::from_results(BufReader::new(f), &file)?)
}

pub(crate) fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    let inputs = [("--real", &args.real), ("--trace-header", &args.trace_header), ("--trace-data", &args.trace_data)];
    let mut inputs: Vec<_> =
        inputs.into_iter().filter_map(|(flag, p)| Some(atomic::Named::given(flag, p.as_deref()?))).collect();
    inputs.push(atomic::Named::given("--sim", &args.sim));
    atomic::check_distinct(&[atomic::Named::given("--report", &args.report)], &inputs)?;
    let real = match (&args.real, &args.trace_header, &args.trace_data) {
        (Some(path), None, None) => results(path)?,
        (None, Some(h), Some(d)) => observed::from_trace(h, d)?,
        _ => bail!("give the real side: --real REAL.jsonl, or --trace-header H.yaml --trace-data D.csv"),
    };
    let sim = results(&args.sim)?;
    if args.network_bandwidth_mbps < 0.0 || !args.network_bandwidth_mbps.is_finite() {
        bail!("--network-bandwidth-mbps: must be a non-negative number");
    }
    let opts = CalibrateOptions {
        warmup_requests: args.warmup_requests,
        network_rtt_us: args.network_rtt_us,
        network_bandwidth_mbps: args.network_bandwidth_mbps,
        throughput_tolerance_pct: args.throughput_tolerance_pct,
        num_gpus: args.num_gpus,
    };
    let report = compare(&real, &sim, &opts);
    let mut json = serde_json::to_string_pretty(&report).context("report")?;
    json.push('\n');
    write_file(&args.report, json.as_bytes())?;
    let line = |name: &str| {
        report.metrics.get(name).map_or_else(String::new, |m| {
            format!(
                "{name}: mean {:.1} vs {:.1} ms ({:+.1} %), MAPE {:.1} %, r {:.3}, {}",
                m.workload_level.real_mean / 1e3,
                m.workload_level.sim_mean / 1e3,
                m.workload_level.mean_error / m.workload_level.real_mean.max(f64::MIN_POSITIVE) * 100.0,
                m.request_level.mape * 100.0,
                m.request_level.pearson_r,
                m.request_level.quality
            )
        })
    };
    say!(
        "{} matched requests ({} warm-up, {} unmatched real, {} unmatched sim, {} token mismatches)\n{}\n{}{}",
        report.trace_info.matched_pairs,
        report.trace_info.warm_up_excluded,
        report.trace_info.unmatched_real,
        report.trace_info.unmatched_sim,
        report.trace_info.token_mismatches,
        line("ttft"),
        line("e2e"),
        if report.metrics.contains_key("itl") { format!("\n{}", line("itl")) } else { String::new() }
    );
    Ok(())
}
