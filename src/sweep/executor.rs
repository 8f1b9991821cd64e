//! Runs a resolved [`Plan`]: every run not finished yet (or every run, with
//! `force`) on a rayon pool of `jobs` threads, each run one single-threaded
//! simulation that writes its own Parquet parts ([`super::parts`]) and sends
//! them, finished, with its outcome over a bounded channel to the collector
//! thread. Memory stays bounded: at most `jobs` simulations, each with its
//! open Parquet writers. When all runs are over, `runs.parquet` and
//! `manifest.json` are rebuilt from every run's files, including runs
//! finished by an earlier invocation ([`super::summary`]).
//!
//! Before anything runs, the sweep takes the output folder's lock
//! ([`super::lock`]), checks that the folder holds this plan's results
//! ([`super::output_dir`]), reads the workload once ([`super::input`]) and
//! removes the runs that are no longer in the plan; which of the others are
//! reused is [`super::resume`]'s call. The first I/O error stops the sweep:
//! workers check a shared cancel flag before each run and between requests.

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_channel::Sender;
use rayon::prelude::*;

use super::collector::{Message, collect};
use super::error::SweepError;
use super::estimate::{self, WorkloadSize};
use super::grid::{Cell, Plan};
use super::input;
use super::lock::OutputLock;
use super::output_dir::{Layout, TmpFile, io_err};
use super::parts::RunParts;
use super::resume::{self, Outputs, RunStatus};
use super::source::{OpenError, WorkloadSource};
use super::summary::{self, BATCH_CELLS};
use super::tables::{DeploymentRow, RunColumns};
use crate::metrics::{Metrics, MetricsCollector};
use crate::output;
use crate::scenario;
use crate::sim::{self, FinishedRequest, RunConfig, RunError, Sink};
use crate::workload::import::weka_dag::Session;

/// How to run a sweep.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// Worker threads (≥ 1).
    pub jobs: usize,
    /// Redo runs that are already finished, and replace another plan's
    /// results in the output folder instead of refusing to.
    pub force: bool,
    /// Also write `tokens/part-<run_id>.parquet` (per-token latencies).
    pub tokens: bool,
    /// Also write each run's result JSONL to `runs/<run_id>/results.jsonl`.
    pub results_jsonl: bool,
    /// Also write each run's step trace to `runs/<run_id>/steps.jsonl`.
    pub step_trace: bool,
    /// Run only this deterministic share of the grid: `(i, n)` takes the runs
    /// whose grid index is `i` modulo `n`, and writes under `shard=i/`.
    pub shard: Option<(usize, usize)>,
    /// Keep finished runs the plan does not list (a capacity search's earlier
    /// probes, run by later rounds' plans).
    pub keep_other_runs: bool,
    /// Counters a progress display reads while the sweep runs.
    pub progress: Option<Arc<Progress>>,
}

/// What a sweep has done so far, updated as it goes (inside runs too), for
/// a progress display polling it from another thread.
#[derive(Debug, Default)]
pub struct Progress {
    /// Set once the runs to do are known.
    pub started: AtomicBool,
    /// Runs this invocation executes.
    pub to_run: AtomicU64,
    /// Runs an earlier invocation finished, reused.
    pub reused: AtomicU64,
    /// Requests simulated so far, over every run.
    pub requests: AtomicU64,
    /// The furthest simulated time any run has reached, µs.
    pub sim_us: AtomicU64,
    /// The work of the runs to do ([`estimate::request_work`] of their
    /// workloads' requests), known when `started` is set.
    pub work_total: AtomicU64,
    /// Of it, done: each finished request's work, and a finished run's
    /// whole estimate (its requests counted so far replaced).
    pub work_done: AtomicU64,
    /// The runs to do, their requests, tokens and work, set before `started`.
    pub estimate: std::sync::OnceLock<estimate::Estimate>,
}

/// One run finished (reported as it happens, from the collector thread).
#[derive(Debug, Clone)]
pub struct RunFinished<'a> {
    /// The run.
    pub run_id: &'a str,
    /// `ok` or `failed`.
    pub status: &'a str,
    /// Why it failed.
    pub error: Option<&'a str>,
    /// Seconds the run took.
    pub wall_s: f64,
    /// Requests it simulated.
    pub requests: u64,
}

/// What a sweep did.
#[derive(Debug, Clone, Default)]
pub struct SweepReport {
    /// Runs in the plan.
    pub total: usize,
    /// Runs skipped because an earlier invocation finished them.
    pub skipped: usize,
    /// Runs executed now.
    pub ran: usize,
    /// Runs that did not finish `ok` (failed, or missing), including earlier ones.
    pub failed: usize,
    /// The first of them in grid order: (run_id, error).
    pub first_failure: Option<(String, String)>,
    /// Table rows written.
    pub rows_written: u64,
    /// Seconds the workers spent encoding and writing the Parquet parts, all
    /// workers together (the encoder's throughput is rows / this).
    pub encode_s: f64,
}

/// Runs `plan` (taken, not copied: a plan of 10^5 cells holds tens of MB).
/// `on_run` is called once per run executed, as it finishes.
pub fn run(
    mut plan: Plan,
    opts: &SweepOptions,
    on_run: &mut (dyn FnMut(RunFinished<'_>) + Send),
) -> Result<SweepReport, SweepError> {
    let root = match opts.shard {
        None => plan.output.clone(),
        Some((i, n)) => {
            plan.cells.retain(|c| c.index % n == i);
            plan.output.join(format!("shard={i}"))
        }
    };
    let layout = Layout { root };
    // Every row of an imported trace is checked before the output folder
    // is touched (with each set of options a grid override gives it). A TraceV2
    // pool is checked as its corpus: its clones are the corpus's rows again
    // (with integer ids), and its size is a run's own (one too large fails
    // that run, not the sweep, and is not walked here).
    let mut corpora: Vec<(PathBuf, Arc<[Session]>)> = Vec::new();
    for source in std::iter::once(&plan.workload).chain(&plan.workloads) {
        if let WorkloadSource::Import { path, options, .. } = source
            && options.agentic.is_some()
        {
            // An AgentX load replays its corpus, read once for every run.
            if !corpora.iter().any(|(p, _)| p == path) {
                let corpus: Arc<[Session]> = crate::workload::import::weka::load(path)?.into();
                crate::agentx::check_corpus(&corpus).map_err(|e| {
                    crate::workload::import::common::ImportError::new(
                        &path.display().to_string(),
                        0,
                        "requests",
                        e.to_string(),
                    )
                })?;
                corpora.push((path.clone(), corpus));
            }
            continue;
        }
        if let WorkloadSource::Import { format, path, options } = source {
            let options = crate::workload::import::common::ImportOptions { total_sessions: None, ..options.clone() };
            for request in crate::workload::import::open(*format, path, &options)? {
                request?;
            }
        }
    }
    // So is a workload file, so a bad one leaves nothing behind (a stream
    // is copied as it is read, and the runs read the copy).
    let mut workload = None;
    if let WorkloadSource::File(path) = &plan.workload {
        let read = input::read_workload(path)?;
        workload = Some((path.clone(), read.content));
    }
    if let Some((_, n)) = opts.shard {
        // Before this shard writes anything: the parent's record of how many
        // shards the sweep has (a shard of another count is refused).
        super::shard::record(&plan.output, n)?;
    }
    // Held until this function returns, errors included.
    let _lock = OutputLock::acquire(&layout.root)?;
    layout.claim(&plan, opts.force)?;
    if let Some((path, content)) = workload {
        // The ids follow what the runs will read (as load hashed it, unless
        // the file changed since).
        plan.set_workload_file(path, content);
    }
    let plan = &plan;
    if !opts.keep_other_runs {
        layout.remove_runs_except(&plan.cells.iter().map(|c| c.run_id.as_str()).collect::<HashSet<_>>())?;
    }
    let outputs = Outputs { tokens: opts.tokens, results_jsonl: opts.results_jsonl, step_trace: opts.step_trace };
    let todo: Vec<&Cell> =
        plan.cells.iter().filter(|c| opts.force || !resume::reusable(&layout, &c.run_id, outputs)).collect();
    // The work of every run to do, for the ETA: each workload's requests
    // counted once (with the first seed that reads it).
    let mut work: Vec<u64> = Vec::new();
    if let Some(p) = &opts.progress {
        let mut sizes: Vec<(Option<usize>, Option<WorkloadSize>)> = Vec::new();
        let mut total = estimate::Estimate { runs: todo.len() as u64, ..Default::default() };
        for cell in &todo {
            let size = match sizes.iter().find(|(w, _)| *w == cell.workload) {
                Some((_, size)) => *size,
                None => {
                    let size = workload_size(plan.workload_of(cell), cell.seed);
                    sizes.push((cell.workload, size));
                    size
                }
            };
            // A workload that cannot be counted (an AgentX load replays a
            // corpus of sessions): one unit, as a run count would.
            let size = size.unwrap_or(WorkloadSize { requests: 0, output_tokens: 0, work: 1 });
            total.requests += size.requests;
            total.output_tokens += size.output_tokens;
            let w = (size.work as f64 * estimate::load_factor(cell.concurrency)).round() as u64;
            total.work += w;
            work.push(w);
        }
        p.work_total.store(total.work, Ordering::Relaxed);
        let _ = p.estimate.set(total);
        p.to_run.store(todo.len() as u64, Ordering::Relaxed);
        p.reused.store((plan.cells.len() - todo.len()) as u64, Ordering::Relaxed);
        p.started.store(true, Ordering::Release);
    }
    let jobs = opts.jobs.max(1);
    let (tx, rx) = crossbeam_channel::bounded::<Message>(4 * jobs);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| SweepError::Io { path: "thread pool".to_owned(), error: std::io::Error::other(e) })?;
    let cancel = AtomicBool::new(false);
    let ctx = Context {
        plan,
        corpora,
        opts,
        outputs,
        layout: &layout,
        cancel: &cancel,
        rows: AtomicU64::new(0),
        encode_ns: AtomicU64::new(0),
    };
    let collected = std::thread::scope(|scope| {
        let collector = scope.spawn(|| {
            collect(&layout, rx, &cancel, &mut |run_id, status, wall_s, requests| {
                on_run(RunFinished { run_id, status: &status.status, error: status.error.as_deref(), wall_s, requests })
            })
        });
        pool.install(|| {
            todo.par_iter().enumerate().for_each_with(tx, |tx, (i, cell)| {
                if !cancel.load(Ordering::Relaxed) {
                    run_cell(&ctx, cell, work.get(i).copied().unwrap_or(0), tx);
                }
            });
        });
        collector.join().expect("the collector does not panic")
    });
    collected?;
    let failures = summary::write_summary(plan, &layout, BATCH_CELLS)?;
    Ok(SweepReport {
        total: plan.cells.len(),
        skipped: plan.cells.len() - todo.len(),
        ran: todo.len(),
        failed: failures.count,
        first_failure: failures.first,
        rows_written: ctx.rows.load(Ordering::Relaxed),
        encode_s: ctx.encode_ns.load(Ordering::Relaxed) as f64 / 1e9,
    })
}

/// What every run of one sweep shares.
struct Context<'a> {
    plan: &'a Plan,
    /// The AgentX corpora, each read once.
    corpora: Vec<(PathBuf, Arc<[Session]>)>,
    opts: &'a SweepOptions,
    outputs: Outputs,
    layout: &'a Layout,
    cancel: &'a AtomicBool,
    /// Table rows written, all runs.
    rows: AtomicU64,
    /// Nanoseconds spent encoding Parquet, all workers.
    encode_ns: AtomicU64,
}

/// Why a run did not produce results.
enum CellError {
    /// The run itself failed (recorded, the sweep goes on).
    Failed(String),
    /// A file could not be written (the sweep stops).
    Io(SweepError),
    /// The sweep is stopping.
    Cancelled,
}

/// A per-run JSONL file being written (under a temporary name) and its row buffer.
type JsonlOut = (TmpFile, Vec<u8>);

/// Rows, metrics and result rows of one run, fed in input order.
struct RunSink<'a> {
    parts: RunParts,
    results: Option<JsonlOut>,
    steps: Option<JsonlOut>,
    metrics: MetricsCollector,
    /// The first write error: the run stops and so does the sweep.
    error: Option<SweepError>,
    progress: Option<&'a Progress>,
    /// The run's estimated work not yet counted as done.
    work_left: &'a AtomicU64,
    /// Its client's [`estimate::load_factor`].
    work_factor: f64,
}

/// Writes one JSONL row; an error is kept (it names the file) and stops the run.
fn write_row(out: &mut JsonlOut, error: &mut Option<SweepError>, row: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
    let (file, buf) = out;
    buf.clear();
    row(buf);
    file.write_all(buf).inspect_err(|e| {
        *error = Some(io_err(file.path())(io::Error::new(e.kind(), e.to_string())));
    })
}

impl Sink for RunSink<'_> {
    fn engine_step(&mut self, step: &crate::sim::EngineStep) -> io::Result<()> {
        match &mut self.steps {
            Some(out) => write_row(out, &mut self.error, |buf| output::step_row(buf, step)),
            None => Ok(()),
        }
    }

    fn request_done(&mut self, r: &FinishedRequest) -> io::Result<()> {
        if let Some(p) = self.progress {
            p.requests.fetch_add(1, Ordering::Relaxed);
            p.sim_us.fetch_max(r.finish_us.unwrap_or(r.send_us), Ordering::Relaxed);
            // Never past the run's estimate: the rest is counted when it ends.
            let left = self.work_left.load(Ordering::Relaxed);
            let w = ((estimate::request_work(&r.request) as f64 * self.work_factor).round() as u64).min(left);
            self.work_left.store(left - w, Ordering::Relaxed);
            p.work_done.fetch_add(w, Ordering::Relaxed);
        }
        self.metrics.observe(r);
        if let Err(e) = self.parts.push(r) {
            let message = e.to_string();
            self.error = Some(e);
            return Err(io::Error::other(message));
        }
        if let Some(out) = &mut self.results {
            write_row(out, &mut self.error, |buf| output::result_row(buf, r))?;
        }
        Ok(())
    }
}

fn run_cell(ctx: &Context<'_>, cell: &Cell, work: u64, tx: &mut Sender<Message>) {
    let wall = Instant::now();
    let mut deployment = DeploymentRow::from_spec(&cell.spec);
    let work_left = AtomicU64::new(work);
    let simulated = simulate_cell(ctx, cell, &mut deployment, &work_left);
    // Ended, however: what its requests did not count is done too.
    if let Some(p) = &ctx.opts.progress {
        p.work_done.fetch_add(work_left.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    let (status, metrics, parts) = match simulated {
        Ok((m, parts)) => (RunStatus::ok(ctx.outputs, deployment), Some(Box::new(m)), parts),
        Err(CellError::Failed(e)) => (RunStatus::failed(e, deployment), None, Vec::new()),
        Err(CellError::Io(e)) => {
            ctx.cancel.store(true, Ordering::Relaxed);
            let _ = tx.send(Message::Fatal(e));
            return;
        }
        Err(CellError::Cancelled) => return,
    };
    let _ = tx.send(Message::Done {
        run_id: cell.run_id.clone(),
        status: Box::new(status),
        metrics,
        wall_s: wall.elapsed().as_secs_f64(),
        parts,
    });
}

/// Runs `cell`; returns its metrics and its finished table parts, for the
/// collector to put in place. `deployment` becomes the resolved deployment's
/// columns.
fn simulate_cell(
    ctx: &Context<'_>,
    cell: &Cell,
    deployment: &mut DeploymentRow,
    work_left: &AtomicU64,
) -> Result<(Metrics, Vec<TmpFile>), CellError> {
    // Whatever an earlier execution of this run left goes first, status.json
    // at the head, so a run never mixes files of two executions.
    ctx.layout.discard(&cell.run_id).map_err(CellError::Io)?;
    let d = scenario::resolve(cell.spec.clone(), &cell.base, &cell.scenario)
        .map_err(|e| CellError::Failed(ctx.plan.scenario_error(cell, &e)))?;
    *deployment = DeploymentRow::of(&d);
    let run_dir = ctx.layout.run_dir(&cell.run_id);
    let open = |on: bool, name: &str| -> Result<Option<JsonlOut>, CellError> {
        if !on {
            return Ok(None);
        }
        std::fs::create_dir_all(&run_dir).map_err(|e| CellError::Io(io_err(&run_dir)(e)))?;
        Ok(Some((TmpFile::create(&run_dir.join(name)).map_err(CellError::Io)?, Vec::new())))
    };
    let results = open(ctx.opts.results_jsonl, "results.jsonl")?;
    let steps = open(ctx.opts.step_trace, "steps.jsonl")?;
    let config = RunConfig {
        client: cell.client(ctx.plan),
        measurement: ctx.plan.measurement,
        timeout_us: ctx.plan.timeout_us,
        step_trace: steps.is_some(),
        ..d.run_config()
    };
    let run = RunColumns::new(&ctx.plan.name, cell, deployment.clone());
    let parts = RunParts::open(ctx.layout, run, ctx.opts.tokens).map_err(CellError::Io)?;
    let mut sink = RunSink {
        parts,
        results,
        steps,
        metrics: MetricsCollector::with_slo(ctx.plan.slo.or(d.slo))
            .measuring(&ctx.plan.measurement)
            .pooled(d.pool_layout()),
        error: None,
        progress: ctx.opts.progress.as_deref(),
        work_left,
        work_factor: estimate::load_factor(cell.concurrency),
    };
    if let WorkloadSource::Import { path, options, .. } = ctx.plan.workload_of(cell)
        && let Some(agentic) = &options.agentic
    {
        let corpus = ctx.corpora.iter().find(|(p, _)| p == path).map(|(_, c)| c.clone()).expect("read up front");
        let (report, end) = match crate::agentx::run(&config, corpus, agentic, cell.seed, &mut sink) {
            Ok(done) => done,
            Err(crate::agentx::AgentxError::Sink(e)) => {
                return Err(CellError::Io(sink.error.take().unwrap_or_else(|| io_err(&run_dir)(e))));
            }
            Err(e) => return Err(CellError::Failed(format!("workload: {e}"))),
        };
        let mut metrics = finish_cell(ctx, &d, sink, &end)?;
        metrics.0.agentx = Some(report);
        return Ok(metrics);
    }
    let requests = ctx.plan.workload_of(cell).requests(cell.seed).map_err(|e| match e {
        OpenError::File(path, e) => CellError::Io(io_err(&path)(e)),
        OpenError::Import(e) => CellError::Failed(e.to_string()),
    })?;
    // A stopping sweep ends the source: the rest of the run would be thrown away.
    let source = requests.map(|request| {
        if ctx.cancel.load(Ordering::Relaxed) {
            return Err(CellError::Cancelled);
        }
        let mut request = request.map_err(CellError::Failed)?;
        request.scale_arrival(cell.rate_scale).map_err(CellError::Failed)?;
        Ok(request)
    });
    let end = match sim::run(config, source, &mut sink) {
        Ok(end) => end,
        Err(RunError::Source(e)) => return Err(e),
        // A sum of times past the clock: this run fails, with the field to blame.
        Err(RunError::Clock(e @ sim::ClockOverflow::ThinkTime { .. })) => {
            return Err(CellError::Failed(format!("workload.think_time: {e}")));
        }
        Err(RunError::Clock(e)) => return Err(CellError::Failed(format!("workload: {e}"))),
        // A file of this run cannot be written: the sweep stops.
        Err(RunError::Sink(e)) => {
            return Err(CellError::Io(sink.error.take().unwrap_or_else(|| io_err(&run_dir)(e))));
        }
    };
    let (mut metrics, parts) = finish_cell(ctx, &d, sink, &end)?;
    if let WorkloadSource::Import { format: crate::workload::import::ImportFormat::TraceV2, path, options } =
        ctx.plan.workload_of(cell)
    {
        let data = options.trace_data.clone().unwrap_or_else(|| crate::workload::import::tracev2::data_path(path));
        metrics.trace_columns_not_modelled =
            crate::workload::import::tracev2::unmodelled_columns(&data, options.adapters, options.priorities)
                .map_err(|e| CellError::Failed(e.to_string()))?
                .into_iter()
                .map(str::to_owned)
                .collect();
    }
    Ok((metrics, parts))
}

/// What `source` holds for a run with `seed`; `None` when it cannot be
/// counted (an AgentX load, a workload that fails: its run reports why).
fn workload_size(source: &WorkloadSource, seed: u64) -> Option<WorkloadSize> {
    if let WorkloadSource::Import { options, .. } = source
        && options.agentic.is_some()
    {
        return None;
    }
    let mut size = WorkloadSize::default();
    for r in source.requests(seed).ok()? {
        size.add(&r.ok()?);
    }
    Some(size)
}

/// A run's files committed and its metrics: what every run does once its
/// simulation has ended.
fn finish_cell(
    ctx: &Context<'_>,
    d: &scenario::Deployment,
    mut sink: RunSink<'_>,
    end: &sim::RunSummary,
) -> Result<(Metrics, Vec<TmpFile>), CellError> {
    if ctx.cancel.load(Ordering::Relaxed) {
        return Err(CellError::Cancelled);
    }
    for (file, _) in [sink.results.take(), sink.steps.take()].into_iter().flatten() {
        file.commit().map_err(CellError::Io)?;
    }
    let (parts, rows, encode_s) = sink.parts.finish().map_err(CellError::Io)?;
    ctx.rows.fetch_add(rows, Ordering::Relaxed);
    ctx.encode_ns.fetch_add((encode_s * 1e9) as u64, Ordering::Relaxed);
    Ok((d.label_metrics(sink.metrics.finish(end), &end.stats), parts))
}
