//! `blis-sweep run`: one deployment, one workload.
//!
//! The workload is read twice, streaming both times: a first pass validates
//! every row, so a bad file is rejected before any output exists (results may
//! go to stdout, which cannot be taken back); the second pass feeds the
//! simulation. A workload on a pipe is copied to an unnamed temporary file
//! during the first pass (through the sweep's `Tap`) and read back from it.
//! Results arrive from `sim::run` in input order and are written as they come.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};

use super::atomic::{self, AtomicFile};
use super::import::{ImportFlags, parse_input};
use crate::metrics::{Metrics, MetricsCollector};
use crate::output::JsonlWriter;
use crate::scenario::{self, Deployment};
use crate::sim::{self, Client, RunConfig, RunError, Tee};
use crate::sweep::input::Tap;
use crate::workload::Request;
use crate::workload::import::{self, ImportFormat, ImportOptions};
use crate::workload::reader::{Format, Reader};

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// Scenario file (YAML or JSON): model, hardware, tp, dtype, engine, latency_model.
    #[arg(long, short = 's', value_name = "S.yaml")]
    scenario: PathBuf,
    /// Workload JSONL: one request DAG per line, sorted by arrival_time.
    #[arg(value_name = "WORKLOAD.jsonl", required_unless_present = "input", conflicts_with = "input")]
    workload: Option<PathBuf>,
    /// A trace in another format, read directly: FORMAT:PATH with FORMAT
    /// mooncake, azure or agent-calls (see `blis-sweep import`).
    #[arg(long, value_name = "FORMAT:PATH")]
    input: Option<String>,
    #[command(flatten)]
    import: ImportFlags,
    /// Result JSONL (written atomically). Without it, results go to stdout.
    #[arg(short = 'o', long, value_name = "RESULTS.jsonl")]
    output: Option<PathBuf>,
    /// Metrics JSON (written atomically). Without it, and with -o, metrics go to stdout.
    #[arg(long, value_name = "METRICS.json")]
    metrics: Option<PathBuf>,
    /// Step trace JSONL (written atomically): one row per engine step with
    /// its start, duration, tokens scheduled per request, admissions with
    /// their prefix-cache hit, preemptions and KV blocks in use.
    #[arg(long, value_name = "STEPS.jsonl")]
    step_trace: Option<PathBuf>,
    /// Stop at this simulated time (seconds): later arrivals are not read,
    /// requests still running are reported unfinished.
    #[arg(long, value_name = "SECONDS")]
    horizon: Option<f64>,
    /// At most N requests (whole DAGs) in flight: later arrivals wait in the
    /// client, first come first sent. E2E counts from the send.
    #[arg(long, value_name = "N")]
    concurrency: Option<u32>,
    /// Ignore arrival times: --concurrency N virtual users each send their
    /// next request when their previous one finishes (plus --think-time).
    #[arg(long, requires = "concurrency")]
    closed_loop: bool,
    /// Closed loop: pause between a user's response and its next request.
    #[arg(long, value_name = "SECONDS", requires = "closed_loop")]
    think_time: Option<f64>,
    /// Divide every arrival time by this (2 = twice the request rate).
    #[arg(long, value_name = "X")]
    rate_scale: Option<f64>,
    /// The client gives up on a request this long after sending it (an HTTP
    /// client's timeout): the server aborts what is still running, and the
    /// request is reported timed out.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// No summary on stderr.
    #[arg(long, short = 'q')]
    quiet: bool,
}

/// The knobs that shape the traffic, shared with sweeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Traffic {
    pub(crate) client: Client,
    pub(crate) rate_scale: f64,
    pub(crate) horizon_us: Option<u64>,
    pub(crate) timeout_us: Option<u64>,
}

impl RunArgs {
    fn traffic(&self) -> anyhow::Result<Traffic> {
        let seconds = |flag: &str, v: f64| -> anyhow::Result<u64> {
            crate::workload::checked_seconds_to_us(v).map_err(|reason| anyhow::anyhow!("--{flag}: {reason}"))
        };
        let client = match (self.concurrency, self.closed_loop) {
            (Some(0), _) => bail!("--concurrency: must be at least 1"),
            (None, _) => Client::OpenLoop,
            (Some(limit), false) => Client::Capped { limit },
            (Some(users), true) => {
                Client::ClosedLoop { users, think_time_us: seconds("think-time", self.think_time.unwrap_or(0.0))? }
            }
        };
        let rate_scale = self.rate_scale.unwrap_or(1.0);
        if !(rate_scale.is_finite() && rate_scale > 0.0) {
            bail!("--rate-scale: {rate_scale} must be a positive number");
        }
        let horizon_us = self.horizon.map(|h| seconds("horizon", h)).transpose()?;
        let timeout_us = match self.timeout.map(|t| seconds("timeout", t)).transpose()? {
            Some(0) => bail!("--timeout: must be positive"),
            t => t,
        };
        Ok(Traffic { client, rate_scale, horizon_us, timeout_us })
    }
}

pub(crate) fn run(args: RunArgs) -> anyhow::Result<()> {
    let deployment = scenario::load(&args.scenario)?;
    let traffic = args.traffic()?;
    let (rows, input) = match (&args.workload, &args.input) {
        (Some(path), _) => validate(path, traffic.rate_scale)?,
        (None, Some(text)) => {
            let (format, path) = parse_input(text)?;
            let input = Input::Import(format, path, args.import.options()?);
            (input.count(traffic.rate_scale)?, input)
        }
        (None, None) => bail!("give a workload file or --input FORMAT:PATH"),
    };
    let wall = Instant::now();
    // Every output is written under a temporary name and committed only once
    // all of them are complete: a failing command leaves none of its own.
    let mut steps = args.step_trace.as_deref().map(atomic::create).transpose()?;
    let mut metrics_file = args.metrics.as_deref().map(atomic::create).transpose()?;
    let steps_name = args.step_trace.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let (outcome, results) = match &args.output {
        Some(path) => {
            let mut out = atomic::create(path)?;
            let names = (path.display().to_string(), steps_name);
            let outcome = simulate(&deployment, &input, traffic, &mut out, steps.as_mut(), (&names.0, &names.1))?;
            (outcome, Some(out))
        }
        None => {
            let stdout = io::stdout();
            let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
            let outcome = simulate(&deployment, &input, traffic, &mut out, steps.as_mut(), ("stdout", &steps_name))?;
            out.flush().context("stdout")?;
            (outcome, None)
        }
    };
    let wall_s = wall.elapsed().as_secs_f64();
    let mut json = serde_json::to_string_pretty(&outcome).context("metrics")?;
    json.push('\n');
    if let (Some(f), Some(path)) = (&mut metrics_file, &args.metrics) {
        f.write_all(json.as_bytes()).with_context(|| format!("{}: write failed", path.display()))?;
    }
    for file in [results, steps, metrics_file].into_iter().flatten() {
        atomic::commit(file)?;
    }
    if args.metrics.is_none() && args.output.is_some() {
        io::stdout().write_all(json.as_bytes()).context("stdout")?;
    }
    if !args.quiet {
        eprintln!("{}", summary(&deployment, &outcome, rows, wall_s));
    }
    Ok(())
}

/// Where the simulation pass reads the workload from.
enum Input {
    /// A regular file, opened again.
    File(PathBuf),
    /// A pipe or device, copied during the first pass into an unnamed
    /// temporary file (removed from the directory at once, so nothing is
    /// left behind whatever happens).
    Spool(File, String),
    /// A trace read by an importer, each pass anew.
    Import(ImportFormat, PathBuf, ImportOptions),
}

/// Requests of a pass over the input.
type Rows = Box<dyn Iterator<Item = anyhow::Result<Request>>>;

impl Input {
    /// First pass over an imported trace: every row valid, or the first error.
    fn count(&self, rate_scale: f64) -> anyhow::Result<u64> {
        let mut n = 0;
        for row in self.rows()? {
            let mut request = row?;
            request.scale_arrival(rate_scale).map_err(|e| anyhow::anyhow!("--rate-scale: {e}"))?;
            n += 1;
        }
        Ok(n)
    }

    fn rows(&self) -> anyhow::Result<Rows> {
        if let Input::Import(format, path, options) = self {
            return Ok(Box::new(import::open(*format, path, options)?.map(|r| r.map_err(anyhow::Error::new))));
        }
        let (file, name) = match self {
            Input::File(path) => (
                File::open(path).with_context(|| format!("{}: cannot open", path.display()))?,
                path.display().to_string(),
            ),
            Input::Spool(spool, name) => {
                let mut file = spool.try_clone().context("the workload's temporary copy")?;
                file.seek(SeekFrom::Start(0)).context("the workload's temporary copy")?;
                (file, name.clone())
            }
            Input::Import(..) => unreachable!("returned above"),
        };
        let reader = Reader::new(BufReader::with_capacity(1 << 20, file), name, Format::Workload);
        Ok(Box::new(reader.map(|r| r.map_err(anyhow::Error::new))))
    }
}

/// First pass: every row valid (arrivals scaled by `rate_scale` included),
/// or the first error. A workload that cannot be read twice (`cat W |
/// blis-sweep run -s S /dev/stdin`) is copied as it is read.
fn validate(path: &Path, rate_scale: f64) -> anyhow::Result<(u64, Input)> {
    let name = path.display().to_string();
    let file = File::open(path).with_context(|| format!("{name}: cannot open"))?;
    let regular = file.metadata().with_context(|| format!("{name}: cannot open"))?.is_file();
    let count = |input: &mut dyn io::Read| -> anyhow::Result<u64> {
        let mut n = 0;
        for row in Reader::new(BufReader::with_capacity(1 << 20, input), name.as_str(), Format::Workload) {
            let mut request = row?;
            request.scale_arrival(rate_scale).map_err(|e| anyhow::anyhow!("{name}: --rate-scale: {e}"))?;
            n += 1;
        }
        Ok(n)
    };
    if regular {
        let mut file = file;
        return Ok((count(&mut file)?, Input::File(path.to_owned())));
    }
    let (spool_path, spool) = atomic::unnamed_temp_file()?;
    let mut copy = BufWriter::with_capacity(1 << 20, &spool);
    let mut copy_error = None;
    let n = count(&mut Tap { inner: file, hash: None, copy: Some(&mut copy), copy_error: &mut copy_error })?;
    let copied = match copy_error {
        Some(e) => Err(e),
        None => copy.flush(),
    };
    copied.with_context(|| format!("{name}: copying it to {}", spool_path.display()))?;
    drop(copy);
    Ok((n, Input::Spool(spool, name)))
}

fn simulate(
    d: &Deployment,
    input: &Input,
    traffic: Traffic,
    out: &mut dyn Write,
    steps: Option<&mut AtomicFile>,
    names: (&str, &str),
) -> anyhow::Result<Metrics> {
    let mut metrics = MetricsCollector::default();
    let tracing = steps.is_some();
    let mut writer = JsonlWriter::new(out, names.0);
    if let Some(f) = steps {
        writer = writer.with_steps(f as &mut dyn Write, names.1);
    }
    let config = RunConfig {
        client: traffic.client,
        horizon_us: traffic.horizon_us,
        timeout_us: traffic.timeout_us,
        step_trace: tracing,
        ..d.run_config()
    };
    let rows = input.rows()?.map(|row| -> anyhow::Result<Request> {
        let mut request = row?;
        // (Checked by the first pass.)
        request.scale_arrival(traffic.rate_scale).map_err(anyhow::Error::msg)?;
        Ok(request)
    });
    let end = sim::run(config, rows, &mut Tee(&mut metrics, &mut writer)).map_err(|e| match e {
        RunError::Source(e) => e,
        RunError::Sink(e) => anyhow::Error::new(e),
    })?;
    Ok(metrics.finish(&end))
}

fn summary(d: &Deployment, m: &Metrics, rows: u64, wall_s: f64) -> String {
    let rate = if wall_s > 0.0 { m.injected_requests as f64 / wall_s } else { 0.0 };
    let cluster = if d.dp > 1 {
        let lockstep = if d.model.moe.is_some() { ", lockstep, experts over all GPUs" } else { "" };
        format!("{} data-parallel ranks (vLLM's DP balancer{lockstep}, imbalance {:.2}) of ", d.dp, m.imbalance)
    } else if d.replicas > 1 {
        format!("{} replicas ({} router, imbalance {:.2}) of ", d.replicas, d.router.policy.name(), m.imbalance)
    } else {
        String::new()
    };
    let rejected = if m.rejected_requests > 0 { format!(", {} rejected", m.rejected_requests) } else { String::new() };
    format!(
        "{name}: {cluster}{model} on {tp}x {gpu} ({dtype}), {blocks} KV blocks of {bs}, {kind} latency model\n\
         {rows} requests: {done} completed, {bad} unservable, {unfinished} unfinished{rejected}; \
         simulated {sim:.1} s in {wall_s:.2} s wall ({rate:.0} requests/s)\n\
         TTFT mean {ttft:.1} ms, p99 {ttft99:.1} ms | ITL mean {itl:.2} ms, p99 {itl99:.2} ms | \
         E2E mean {e2e:.0} ms, p99 {e2e99:.0} ms\n\
         {rps:.2} req/s, {tps:.0} tok/s, {pre} preemptions, prefix-cache hit rate {hit:.1} %",
        name = d.name,
        model = d.model.name,
        tp = d.tp,
        gpu = d.gpu.name,
        dtype = d.dtype,
        blocks = d.engine.num_gpu_blocks,
        bs = d.engine.block_size,
        kind = d.latency.kind(),
        done = m.completed_requests,
        bad = m.dropped_unservable,
        unfinished = m.still_unfinished,
        sim = m.sim_duration_s,
        ttft = m.ttft_mean_ms,
        ttft99 = m.ttft_p99_ms,
        itl = m.itl_mean_ms,
        itl99 = m.itl_p99_ms,
        e2e = m.e2e_mean_ms,
        e2e99 = m.e2e_p99_ms,
        rps = m.responses_per_sec,
        tps = m.tokens_per_sec,
        pre = m.preemption_count,
        hit = m.kv_cache_hit_rate * 100.0,
    )
}
