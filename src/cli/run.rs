//! `blis-sweep run`: one deployment, one workload.
//!
//! The workload is read once, streamed into the simulation, each row checked
//! as it is read (the format's rules, a LoRA adapter the deployment does not
//! serve, the rate scale); the first bad row ends the run with its error and
//! no output: every file is written under a temporary name and committed only
//! when the run is whole, and results bound for stdout go to an unnamed
//! temporary file first, copied to stdout at the end (stdout cannot be taken
//! back). A replayed TraceV2 trace without `--horizon` is counted first: its
//! horizon is twice its last arrival. Results arrive from `sim::run` in input
//! order and are written as they come.

use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};

use super::atomic::{self, AtomicFile};
use super::client_args::ClientArgs;
use super::workload_args::{Source, WorkloadArgs};
use crate::metrics::{Metrics, MetricsCollector};
use crate::output::{JsonlWriter, TraceV2Server, TraceV2Writer};
use crate::scenario::{self, Deployment};
use crate::sim::{self, Client, ClockOverflow, RunConfig, RunError, Tee};
use crate::workload::Request;
use crate::workload::import::common::ImportOptions;
use crate::workload::import::{self, ImportFormat};
use crate::workload::reader::{Format, Reader};

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// Scenario file (YAML or JSON): model, hardware, tp, dtype, engine, latency_model.
    #[arg(long, short = 's', value_name = "S.yaml")]
    scenario: PathBuf,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Also write what was simulated as a TraceV2 pair, PREFIX.yaml and
    /// PREFIX.csv (`mode: generated`, or `replayed` for a replayed trace);
    /// replayed with --session-mode closed-loop and the same scenario, it
    /// gives the same metrics (shared prefixes found from token ids).
    #[arg(long, value_name = "PREFIX")]
    trace_output: Option<PathBuf>,
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
    #[command(flatten)]
    sending: ClientArgs,
    /// The client gives up on a request this long after sending it (an HTTP
    /// client's timeout): the server aborts what is still running, and the
    /// request is reported timed out.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Leave out the first N requests (the SLO's window opens when they
    /// have all left). Default: a closed loop's first request of every
    /// user; nothing open loop.
    #[arg(long, value_name = "N", conflicts_with = "warmup_seconds")]
    warmup_requests: Option<u64>,
    /// Leave out the first SECONDS of the run from the SLO's window.
    #[arg(long, value_name = "SECONDS")]
    warmup_seconds: Option<f64>,
    /// Closed loop: users start spread over SECONDS instead of all at 0.
    #[arg(long, value_name = "SECONDS", requires = "closed_loop")]
    ramp: Option<f64>,
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
    /// `blis replay`'s horizon, found as the trace is read (see
    /// [`RunConfig::replay_horizon`]).
    pub(crate) replay_horizon: bool,
    pub(crate) timeout_us: Option<u64>,
    pub(crate) measurement: crate::sim::Measurement,
}

impl RunArgs {
    fn traffic(&self) -> anyhow::Result<Traffic> {
        let seconds = |flag: &str, v: f64| -> anyhow::Result<u64> {
            crate::workload::checked_seconds_to_us(v).map_err(|reason| anyhow::anyhow!("--{flag}: {reason}"))
        };
        let client = self.sending.client()?;
        let rate_scale = self.sending.rate_scale()?;
        let horizon_us = self.horizon.map(|h| seconds("horizon", h)).transpose()?;
        let timeout_us = match self.timeout.map(|t| seconds("timeout", t)).transpose()? {
            Some(0) => bail!("--timeout: must be positive"),
            t => t,
        };
        let warmup = match (self.warmup_requests, self.warmup_seconds) {
            (Some(n), _) => crate::sim::Warmup::Requests(n),
            (None, Some(s)) => crate::sim::Warmup::Micros(seconds("warmup-seconds", s)?),
            (None, None) => crate::sim::Warmup::Auto,
        };
        let ramp_us = self.ramp.map(|r| seconds("ramp", r)).transpose()?.unwrap_or(0);
        let measurement = crate::sim::Measurement { warmup, ramp_us };
        Ok(Traffic { client, rate_scale, horizon_us, replay_horizon: false, timeout_us, measurement })
    }
}

pub(crate) fn run(args: RunArgs) -> anyhow::Result<()> {
    check_paths(&args)?;
    let deployment = scenario::load(&args.scenario)?;
    let mut traffic = args.traffic()?;
    let input = match args.workload.source()? {
        Source::File(path) => Input::File(path.to_owned()),
        Source::Generate(spec, seed) => Input::Generate(spec, seed),
        Source::Trace(format, path, data) => {
            // TraceV2's adapters are served where the engines serve LoRA.
            let adapters = deployment.pools.iter().all(|p| p.engine.lora.is_some());
            // Its priorities are modelled where any engine schedules by them.
            let priorities =
                deployment.pools.iter().any(|p| p.engine.scheduling_policy == crate::sim::SchedulingPolicy::Priority);
            let options = ImportOptions { trace_data: data, adapters, priorities, ..args.workload.import.options()? };
            let input = Input::Import(format, path, options);
            replay_defaults(&input, &mut traffic, &deployment, args.sending.concurrency.is_some())?;
            input
        }
    };
    let rows = std::cell::Cell::new(0);
    let wall = Instant::now();
    // Every output is written under a temporary name and committed only once
    // all of them are complete: a failing command leaves none of its own.
    let mut extra = Extra::create(&args)?;
    let mut metrics_file = args.metrics.as_deref().map(atomic::create).transpose()?;
    let (outcome, results) = match &args.output {
        Some(path) => {
            let mut out = atomic::create(path)?;
            let name = path.display().to_string();
            let outcome = simulate(&deployment, &input, traffic, (&mut out, &name), &mut extra, &rows)?;
            (outcome, Some(out))
        }
        None => {
            // Held in an unnamed temporary file until the run is whole.
            let (spool, file) = crate::atomic::unnamed_temp_file()?;
            let mut held = BufWriter::with_capacity(1 << 20, file);
            let outcome = simulate(&deployment, &input, traffic, (&mut held, "stdout"), &mut extra, &rows)?;
            let mut file = held.into_inner().map_err(|e| e.into_error()).context("stdout")?;
            io::Seek::seek(&mut file, io::SeekFrom::Start(0)).with_context(|| spool.display().to_string())?;
            let mut stdout = io::stdout().lock();
            io::copy(&mut file, &mut stdout).context("stdout")?;
            stdout.flush().context("stdout")?;
            (outcome, None)
        }
    };
    let rows = rows.get();
    let wall_s = wall.elapsed().as_secs_f64();
    let mut outcome = outcome;
    if let Input::Import(ImportFormat::TraceV2, header, options) = &input {
        let data = options.trace_data.clone().unwrap_or_else(|| import::tracev2::data_path(header));
        outcome.trace_columns_not_modelled =
            import::tracev2::unmodelled_columns(&data, options.adapters, options.priorities)?
                .into_iter()
                .map(str::to_owned)
                .collect();
    }
    let mut json = serde_json::to_string_pretty(&outcome).context("metrics")?;
    json.push('\n');
    if let (Some(f), Some(path)) = (&mut metrics_file, &args.metrics) {
        f.write_all(json.as_bytes()).with_context(|| format!("{}: write failed", path.display()))?;
    }
    let mut files: Vec<AtomicFile> = [results, metrics_file].into_iter().flatten().collect();
    files.extend(extra.files());
    atomic::commit_all(files)?;
    if args.metrics.is_none() && args.output.is_some() {
        io::stdout().write_all(json.as_bytes()).context("stdout")?;
    }
    if !args.quiet {
        say!("{}", summary(&deployment, &outcome, rows, wall_s));
        let unmodelled = &outcome.trace_columns_not_modelled;
        if !unmodelled.is_empty() {
            say!("TraceV2 columns present, not modelled (read and ignored): {}", unmodelled.join(", "));
        }
    }
    Ok(())
}

/// Refuses outputs that are one file, or an input (see
/// [`atomic::check_distinct`]), before anything is read or written.
fn check_paths(args: &RunArgs) -> anyhow::Result<()> {
    use atomic::Named;
    let trace = args.trace_output.as_deref().map(trace_paths);
    let mut outputs = vec![match &args.output {
        Some(path) => Named::given("-o", path),
        None => Named::stdout("-o"),
    }];
    match (&args.metrics, &args.output) {
        (Some(path), _) => outputs.push(Named::given("--metrics", path)),
        (None, Some(_)) => outputs.push(Named::stdout("--metrics")),
        (None, None) => {}
    }
    if let Some(path) = &args.step_trace {
        outputs.push(Named::given("--step-trace", path));
    }
    if let Some((header, data)) = &trace {
        outputs.push(Named::given("--trace-output", header));
        outputs.push(Named::given("--trace-output", data));
    }
    let given = args.workload.inputs()?;
    let mut inputs = vec![Named::given("-s", &args.scenario)];
    inputs.extend(given.iter().map(|(flag, path)| Named::given(flag, path)));
    atomic::check_distinct(&outputs, &inputs)
}

/// Where the simulation pass reads the workload from (`observe`'s too).
pub(crate) enum Input {
    /// A workload file, opened again (a pipe or device: its copy).
    File(PathBuf),
    /// A trace read by an importer, each pass anew.
    Import(ImportFormat, PathBuf, ImportOptions),
    /// A generator (`--workload-spec`) and its seed, generated each pass anew.
    Generate(Box<super::generate::Spec>, u64),
}

/// Requests of a pass over the input.
pub(crate) type Rows<'a> = Box<dyn Iterator<Item = anyhow::Result<Request>> + 'a>;

impl Input {
    /// First pass over an imported trace or a generator: every row valid,
    /// or the first error (a LoRA adapter the `deployment` does not serve,
    /// where one is given); the count and the last arrival, µs.
    pub(crate) fn count(&self, rate_scale: f64, deployment: Option<&Deployment>) -> anyhow::Result<(u64, u64)> {
        let (mut n, mut last) = (0, 0);
        for row in self.rows()? {
            let mut request = row?;
            if let (Some((field, reason)), Input::Import(_, path, _)) =
                (deployment.and_then(|d| scenario::unserved_adapter(d, &request)), self)
            {
                bail!("{}: request {}: {field}: {reason}", path.display(), request.request_id);
            }
            request.scale_arrival(rate_scale).map_err(|e| anyhow::anyhow!("--rate-scale: {e}"))?;
            last = last.max(request.arrival_us());
            n += 1;
        }
        Ok((n, last))
    }

    /// The rows of one pass, each checked as it is read: a LoRA adapter
    /// `d` does not serve is an error naming the row (its line in a
    /// workload file), so is an arrival the rate scale cannot hold; `count`
    /// counts the rows read.
    pub(crate) fn checked_rows<'a>(
        &'a self,
        rate_scale: f64,
        d: &'a Deployment,
        count: &'a std::cell::Cell<u64>,
    ) -> anyhow::Result<Rows<'a>> {
        let check = move |mut request: Request, at: &dyn Fn(&Request) -> String| -> anyhow::Result<Request> {
            if let Some((field, reason)) = scenario::unserved_adapter(d, &request) {
                bail!("{}: {field}: {reason}", at(&request));
            }
            if let Err(e) = request.scale_arrival(rate_scale) {
                bail!("{}: --rate-scale: {e}", at(&request));
            }
            count.set(count.get() + 1);
            Ok(request)
        };
        if let Input::File(path) = self {
            let name = path.display().to_string();
            let mut reader = workload_reader(path)?;
            return Ok(Box::new(std::iter::from_fn(move || {
                let row = reader.next()?.map_err(anyhow::Error::new);
                Some(row.and_then(|r| check(r, &|_| format!("{name}:{}", reader.line()))))
            })));
        }
        let name = match self {
            Input::Import(_, path, _) => path.display().to_string(),
            _ => "--workload-spec".to_owned(),
        };
        let at = move |r: &Request| format!("{name}: request {}", r.request_id);
        Ok(Box::new(self.rows()?.map(move |row| row.and_then(|r| check(r, &at)))))
    }

    pub(crate) fn rows(&self) -> anyhow::Result<Rows<'_>> {
        let path = match self {
            Input::Import(format, path, options) => {
                let requests = import::open(*format, path, options).map_err(super::import::flag_error)?;
                return Ok(Box::new(requests.map(|r| r.map_err(anyhow::Error::new))));
            }
            Input::Generate(spec, seed) => return Ok(Box::new(spec.requests(*seed))),
            Input::File(path) => path,
        };
        Ok(Box::new(workload_reader(path)?.map(|r| r.map_err(anyhow::Error::new))))
    }
}

/// The workload file at `path` (a pipe's copy: [`crate::spool`]), read row
/// by row.
fn workload_reader(path: &Path) -> anyhow::Result<Reader<BufReader<crate::spool::Input>>> {
    let file = crate::spool::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    Ok(Reader::new(BufReader::with_capacity(1 << 20, file), path.display().to_string(), Format::Workload))
}

/// First pass: every row valid (arrivals scaled by `rate_scale` included;
/// its adapters served by `deployment`, where one is given), or the first
/// error. A workload that cannot be read twice (`cat W |
/// blis-sweep run -s S /dev/stdin`) is copied as it is read.
pub(crate) fn validate(path: &Path, rate_scale: f64, deployment: Option<&Deployment>) -> anyhow::Result<(u64, Input)> {
    let name = path.display().to_string();
    let mut n = 0;
    let mut reader = workload_reader(path)?;
    while let Some(row) = reader.next() {
        let mut request = row?;
        if let Some((field, reason)) = deployment.and_then(|d| scenario::unserved_adapter(d, &request)) {
            bail!("{name}:{}: {field}: {reason}", reader.line());
        }
        request.scale_arrival(rate_scale).map_err(|e| anyhow::anyhow!("{name}: --rate-scale: {e}"))?;
        n += 1;
    }
    Ok((n, Input::File(path.to_owned())))
}

/// A TraceV2 replay follows `blis replay`: without --horizon it stops at
/// twice the last arrival (600 s when every arrival is at 0); a pool of
/// concurrent sessions is sent by a client that admits that many at a time
/// and runs until the pool drains.
fn replay_defaults(input: &Input, traffic: &mut Traffic, d: &Deployment, capped: bool) -> anyhow::Result<()> {
    let Input::Import(format, path, options) = input else { return Ok(()) };
    if let Some(client) = super::workload_args::trace_client(*format, path, options, capped)? {
        traffic.client = client;
    } else if *format == ImportFormat::TraceV2 && traffic.horizon_us.is_none() {
        if traffic.client == Client::OpenLoop {
            // Set by the run when the trace is read (the trace read once).
            traffic.replay_horizon = true;
        } else {
            // A client that holds requests back sends them by the horizon:
            // it must be known from the start.
            let (_, last_arrival_us) = input.count(traffic.rate_scale, Some(d))?;
            traffic.horizon_us = Some(sim::replay_horizon_us(last_arrival_us));
        }
    }
    Ok(())
}

/// `PREFIX.yaml` and `PREFIX.csv` of `--trace-output`.
pub(crate) fn trace_paths(prefix: &Path) -> (PathBuf, PathBuf) {
    let with = |ext: &str| {
        let mut p = prefix.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    (with(".yaml"), with(".csv"))
}

/// The files of one run besides the results: the step trace and the
/// TraceV2 pair, each under a temporary name until committed.
struct Extra {
    steps: Option<(AtomicFile, String)>,
    trace: Option<(AtomicFile, String, AtomicFile, String)>,
}

impl Extra {
    fn create(args: &RunArgs) -> anyhow::Result<Extra> {
        let steps = match &args.step_trace {
            Some(p) => Some((atomic::create(p)?, p.display().to_string())),
            None => None,
        };
        let trace = match &args.trace_output {
            Some(prefix) => {
                let (h, d) = trace_paths(prefix);
                Some((atomic::create(&h)?, h.display().to_string(), atomic::create(&d)?, d.display().to_string()))
            }
            None => None,
        };
        Ok(Extra { steps, trace })
    }

    /// Its files, to commit with the others.
    fn files(self) -> impl Iterator<Item = AtomicFile> {
        let steps = self.steps.map(|(f, _)| f);
        let trace = self.trace.map(|(h, _, d, _)| [h, d]).into_iter().flatten();
        steps.into_iter().chain(trace)
    }
}

/// The TraceV2 header's `server` block of a deployment: here, where a
/// deployment meets the writers (`output/` sits below `scenario/`).
impl From<&Deployment> for TraceV2Server {
    fn from(d: &Deployment) -> TraceV2Server {
        let p = d.serving();
        TraceV2Server {
            model: d.model.name.clone(),
            tensor_parallel: p.tp,
            max_num_seqs: p.engine.max_num_seqs,
            block_size: p.engine.block_size,
            gpu_memory_utilization: p.gpu_memory_utilization,
            max_model_len: p.engine.max_model_len,
        }
    }
}

/// Runs `input` on `d` into `out` and `extra`; `rows` counts the rows read.
fn simulate(
    d: &Deployment,
    input: &Input,
    traffic: Traffic,
    out: (&mut dyn Write, &str),
    extra: &mut Extra,
    rows: &std::cell::Cell<u64>,
) -> anyhow::Result<Metrics> {
    let mut metrics = MetricsCollector::with_slo(d.slo).measuring(&traffic.measurement).pooled(d.pool_layout());
    let tracing = extra.steps.is_some();
    let mut writer = JsonlWriter::new(out.0, out.1);
    if let Some((f, name)) = &mut extra.steps {
        writer = writer.with_steps(f as &mut dyn Write, name.clone());
    }
    let replayed = matches!(input, Input::Import(ImportFormat::TraceV2, ..));
    let mut trace = extra.trace.as_mut().map(|(h, hn, data, dn)| {
        let server = TraceV2Server::from(d);
        TraceV2Writer::new((h as &mut dyn Write, hn.clone()), (data as &mut dyn Write, dn.clone()), replayed, server)
    });
    let config = RunConfig {
        client: traffic.client,
        measurement: traffic.measurement,
        horizon_us: traffic.horizon_us,
        replay_horizon: traffic.replay_horizon,
        timeout_us: traffic.timeout_us,
        step_trace: tracing,
        ..d.run_config()
    };
    let rows = input.checked_rows(traffic.rate_scale, d, rows)?;
    let end = sim::run(config, rows, &mut Tee(&mut metrics, Tee(&mut writer, &mut trace))).map_err(|e| match e {
        RunError::Source(e) => e,
        RunError::Sink(e) => anyhow::Error::new(e),
        // The think time is the flag's; any other sum is the input's.
        RunError::Clock(e @ ClockOverflow::ThinkTime { .. }) => anyhow::anyhow!("--think-time: {e}"),
        RunError::Clock(e) => match &input {
            Input::File(p) | Input::Import(_, p, _) => anyhow::anyhow!("{}: {e}", p.display()),
            Input::Generate(..) => anyhow::anyhow!("--workload-spec: {e}"),
        },
    })?;
    // What the TraceV2 pair could not hold, said once the run is done.
    for warning in trace.iter().flat_map(TraceV2Writer::warnings) {
        say!("blis-sweep: warning: {warning}");
    }
    Ok(d.label_metrics(metrics.finish(&end), &end.stats))
}

/// The KV cache groups of a hybrid model, as vLLM logs them: " in N groups
/// of L layers (kinds)"; nothing with one full-attention group.
fn kv_groups_summary(p: &crate::scenario::Pool) -> String {
    use crate::sim::KvGroupKind;
    let groups = &p.engine.kv_groups;
    if groups.is_empty() {
        return String::new();
    }
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for g in groups {
        let name = match g {
            KvGroupKind::Full => "full".to_owned(),
            KvGroupKind::SlidingWindow { window } => format!("sliding window {window}"),
            KvGroupKind::ChunkedLocal { chunk } => format!("chunked local {chunk}"),
            KvGroupKind::Linear => "linear".to_owned(),
        };
        match kinds.iter_mut().find(|(k, _)| *k == name) {
            Some((_, n)) => *n += 1,
            None => kinds.push((name, 1)),
        }
    }
    let kinds: Vec<String> = kinds.into_iter().map(|(k, n)| format!("{n} {k}")).collect();
    let plural = if groups.len() == 1 { "" } else { "s" };
    format!(" in {} group{plural} of {} layers ({})", groups.len(), p.kv_group_layers, kinds.join(", "))
}

fn summary(d: &Deployment, m: &Metrics, rows: u64, wall_s: f64) -> String {
    let p = d.serving();
    let rate = if wall_s > 0.0 { m.injected_requests as f64 / wall_s } else { 0.0 };
    let cluster = if p.dp > 1 {
        let lockstep = if d.model.moe.is_some() { ", lockstep, experts over all GPUs" } else { "" };
        format!("{} data-parallel ranks (vLLM's DP balancer{lockstep}, imbalance {:.2}) of ", p.dp, m.imbalance)
    } else if let (Some(a), Some(s)) = (&p.autoscale, &m.autoscale) {
        // (Imbalance over all `max` replicas, most of them off much of the time, says nothing here.)
        let (min, max, peak, mean, gpu_h) = (a.min, a.max, s.peak_replicas, s.mean_replicas, s.gpu_hours);
        format!(
            "{min}–{max} replicas autoscaled (peak {peak}, mean {mean:.2}, {gpu_h:.3} GPU-hours; {} router) of ",
            p.router.policy.name()
        )
    } else if p.replicas > 1 {
        format!("{} replicas ({} router, imbalance {:.2}) of ", p.replicas, p.router.policy.name(), m.imbalance)
    } else {
        String::new()
    };
    // A TP group beyond one node is priced over the network between nodes.
    let nodes = p.tp.div_ceil(p.gpu.gpus_per_node.max(1));
    let nodes = if nodes > 1 { format!(" in {nodes} nodes of {}", p.gpu.gpus_per_node) } else { String::new() };
    let rejected = if m.rejected_requests > 0 { format!(", {} rejected", m.rejected_requests) } else { String::new() };
    let deployment = if d.pools.len() > 1 {
        pools_summary(d, m)
    } else {
        format!(
            "{name}: {cluster}{model} on {tp}x {gpu}{nodes} ({dtype}), {weights:.2} GiB of weights per GPU, {blocks} KV blocks of {bs}{groups}, {kind} latency model ({why})",
            name = d.name,
            model = d.model.name,
            tp = p.tp,
            gpu = p.gpu.name,
            dtype = p.dtype,
            weights = p.weight_bytes_per_gpu / (1u64 << 30) as f64,
            blocks = p.engine.num_gpu_blocks,
            bs = p.engine.block_size,
            groups = kv_groups_summary(p),
            kind = p.latency.kind(),
            why = p.latency_reason,
        )
    };
    let text = format!(
        "{deployment}\n\
         {rows} requests: {done} completed, {bad} unservable, {unfinished} unfinished{rejected}; \
         simulated {sim:.1} s in {wall_s:.2} s wall ({rate:.0} requests/s)\n\
         TTFT mean {ttft:.1} ms, p99 {ttft99:.1} ms | ITL mean {itl:.2} ms, p99 {itl99:.2} ms | \
         E2E mean {e2e:.0} ms, p99 {e2e99:.0} ms\n\
         {rps:.2} req/s, {tps:.0} tok/s, {pre} preemptions, prefix-cache hit rate {hit:.1} %",
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
    );
    let text = match &m.window {
        Some(w) => format!(
            "{text}\nmeasurement window {} to {:.1} s: {} requests ({} failed), {:.2} req/s sent, {:.2} req/s completed",
            w.start_s.map_or_else(|| "never opened,".to_owned(), |s| format!("{s:.1}")),
            w.end_s,
            w.requests,
            w.failed,
            w.offered_rps,
            w.throughput_rps
        ),
        None => text,
    };
    let text = match (d.slo, m.slo_met, m.slo_attainment, m.goodput_rps) {
        (Some(slo), Some(met), Some(att), Some(good)) => format!(
            "{text}\nSLO at p{}: {}; {:.1} % of the window's requests within every target, goodput {good:.2} req/s{}",
            slo.at(),
            if met { "met" } else { "missed" },
            att * 100.0,
            // The target closest to (or furthest past) its bound.
            m.window.as_ref().and_then(|w| w.binding.as_ref()).map_or_else(String::new, |b| format!(
                "; binding {} {:.2} ms of {} ms",
                b.metric, b.value_ms, b.target_ms
            ))
        ),
        _ => text,
    };
    classes_summary(text, m)
}

/// One line a class (when the requests carry classes or tenants, see
/// [`crate::metrics::GroupMetrics`]), and the tenants' fairness.
fn classes_summary(mut text: String, m: &Metrics) -> String {
    for (class, g) in &m.per_class.0 {
        let slo = match (g.slo_attainment, g.goodput_rps) {
            (Some(a), Some(good)) => format!(", {:.1} % within its targets, goodput {good:.2} req/s", a * 100.0),
            _ => String::new(),
        };
        text.push_str(&format!(
            "\n{class}: {} requests ({} completed), TTFT p50 {:.1} ms, p99 {:.1} ms | E2E p99 {:.0} ms{slo}",
            g.requests, g.completed, g.ttft_ms.p50, g.ttft_ms.p99, g.e2e_ms.p99
        ));
    }
    if let Some(f) = m.fairness {
        text.push_str(&format!("\n{} tenants, Jain's index {:.3}", m.per_tenant.0.len(), f.jain_tenants));
    }
    text
}

/// A deployment of several pools: the pools by role, the KV link and the
/// decider, then one line a pool with its engines and its share of the run.
fn pools_summary(d: &Deployment, m: &Metrics) -> String {
    let roles: Vec<String> = sim::Role::ALL
        .into_iter()
        .filter_map(|role| {
            let n = d.pools.iter().filter(|p| p.role == role).count();
            (n > 0).then(|| format!("{n} {}", role.name()))
        })
        .collect();
    let mut text =
        format!("{}: {} pools ({}) of {}, {} GPUs", d.name, d.pools.len(), roles.join(" + "), d.model.name, d.gpus());
    if d.pools.iter().any(|p| p.role == sim::Role::Prefill) {
        let decider = match d.pd {
            sim::PdDecider::Always => "always".to_owned(),
            sim::PdDecider::PrefixThreshold { threshold_tokens } => {
                format!("prefix-threshold at {threshold_tokens} uncached tokens")
            }
        };
        text += &format!(
            "; KV over {:.0} Gbit/s + {} µs a transfer; P/D decider {decider}",
            d.kv_transfer.bandwidth_gbps, d.kv_transfer.latency_us
        );
    }
    for (p, pm) in d.pools.iter().zip(&m.pools) {
        let nodes = p.tp.div_ceil(p.gpu.gpus_per_node.max(1));
        let nodes = if nodes > 1 { format!(" in {nodes} nodes of {}", p.gpu.gpus_per_node) } else { String::new() };
        let replicas = if pm.replicas == 1 { "1 replica".to_owned() } else { format!("{} replicas", pm.replicas) };
        let calls = if p.role == sim::Role::Prefill { "prefilled" } else { "served" };
        text += &format!(
            "\n  pool {} ({}): {replicas} of {}x {}{nodes} ({}), {} KV blocks of {}, {} latency model ({}); {} llm calls {calls}",
            p.name,
            p.role.name(),
            p.tp,
            p.gpu.name,
            p.dtype,
            p.engine.num_gpu_blocks,
            p.engine.block_size,
            p.latency.kind(),
            p.latency_reason,
            pm.llm_calls,
        );
        if let (Some(ttft), Some(ttft99), Some(itl)) = (pm.ttft_mean_ms, pm.ttft_p99_ms, pm.itl_mean_ms) {
            text += &format!(", TTFT mean {ttft:.1} ms, p99 {ttft99:.1} ms, ITL mean {itl:.2} ms");
        }
        if let Some(t) = &pm.kv_transfers {
            let way = if p.role == sim::Role::Prefill { "out" } else { "in" };
            text += &format!(
                ", {} KV transfers {way} ({:.1} MB), mean {:.2} ms, p99 {:.2} ms",
                t.count,
                t.bytes as f64 / 1e6,
                t.mean_ms,
                t.p99_ms
            );
        }
    }
    text
}
