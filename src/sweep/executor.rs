//! Runs a resolved [`Plan`]: every run not finished yet (or every run, with
//! `force`) on a rayon pool of `jobs` threads, each run one single-threaded
//! simulation that builds its own record batches and sends them over a
//! bounded channel to the collector thread. Memory stays bounded: at most
//! `jobs` simulations, a few batches in the channel, one open Parquet writer
//! per running simulation. When all runs are over, `runs.parquet` and
//! `manifest.json` are rebuilt from every run's files, including runs
//! finished by an earlier invocation.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::Path;
use std::time::Instant;

use crossbeam_channel::Sender;
use parquet::arrow::ArrowWriter;
use rayon::prelude::*;

use super::collector::{Layout, Message, Table, collect, write_atomic};
use super::grid::{Cell, Plan, WorkloadSource};
use super::tables::{BATCH_ROWS, GridColumns, RequestRows, RunStatus, TokenRows, runs_batch, writer_properties};
use crate::metrics::{Metrics, MetricsCollector};
use crate::scenario;
use crate::sim::{FinishedRequest, InputOrder, ResultSink, Simulation};
use crate::workload::reader::{Format, ReadError, Reader};

/// How to run a sweep.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// Worker threads (≥ 1).
    pub jobs: usize,
    /// Redo runs that are already finished.
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
    /// (run_id, error) of every failed run, including earlier ones.
    pub failed: Vec<(String, String)>,
    /// Table rows the collector wrote.
    pub rows_written: u64,
    /// Seconds the collector was busy (its throughput is rows / busy).
    pub collector_busy_s: f64,
}

/// Why a sweep could not complete. Fatal.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The workload file breaks the format (found before any run starts).
    #[error(transparent)]
    Workload(#[from] ReadError),
    /// An output or input file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SweepError + '_ {
    move |source| SweepError::Io { path: path.display().to_string(), source }
}

/// Runs `plan`. `on_run` is called once per run executed, as it finishes.
pub fn run(
    plan: &Plan,
    opts: &SweepOptions,
    on_run: &mut (dyn FnMut(RunFinished<'_>) + Send),
) -> Result<SweepReport, SweepError> {
    if let WorkloadSource::File(path) = &plan.workload {
        validate_workload(path)?;
    }
    let (plan, root) = match opts.shard {
        None => (plan.clone(), plan.output.clone()),
        Some((i, n)) => {
            let mut shard = plan.clone();
            shard.cells.retain(|c| c.index % n == i);
            (shard, plan.output.join(format!("shard={i}")))
        }
    };
    let plan = &plan;
    let layout = Layout { root };
    let tables: &[Table] = if opts.tokens { &[Table::Requests, Table::Tokens] } else { &[Table::Requests] };
    layout.prepare(tables).map_err(io_err(&layout.root))?;
    let todo: Vec<&Cell> = plan.cells.iter().filter(|c| opts.force || !layout.status(&c.run_id).exists()).collect();
    let grid = GridColumns::new(plan);
    let schemas: Vec<_> = tables
        .iter()
        .map(|&t| match t {
            Table::Requests => (t, RequestRows::schema(&grid)),
            Table::Tokens => (t, TokenRows::schema(&grid)),
        })
        .collect();
    let jobs = opts.jobs.max(1);
    let (tx, rx) = crossbeam_channel::bounded::<Message>(4 * jobs);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| SweepError::Io { path: "thread pool".to_owned(), source: std::io::Error::other(e) })?;
    let collected = std::thread::scope(|scope| {
        let collector = scope.spawn(|| {
            collect(&layout, &schemas, rx, &mut |run_id, status, wall_s, requests| {
                on_run(RunFinished { run_id, status: &status.status, error: status.error.as_deref(), wall_s, requests })
            })
        });
        pool.install(|| {
            todo.par_iter().for_each_with(tx, |tx, cell| run_cell(plan, cell, &grid, opts, &layout, tx));
        });
        collector.join().expect("the collector does not panic")
    });
    let collector = collected.map_err(io_err(&layout.root))?;
    let mut report = SweepReport {
        total: plan.cells.len(),
        skipped: plan.cells.len() - todo.len(),
        ran: todo.len(),
        failed: Vec::new(),
        rows_written: collector.rows,
        collector_busy_s: collector.busy_s,
    };
    write_summary_tables(plan, &layout, &grid, &mut report)?;
    Ok(report)
}

fn validate_workload(path: &Path) -> Result<(), SweepError> {
    let file = File::open(path).map_err(io_err(path))?;
    for row in Reader::new(BufReader::with_capacity(1 << 20, file), path.display().to_string(), Format::Workload) {
        row?;
    }
    Ok(())
}

/// A per-run JSONL file being written (under a temporary name) and its row buffer.
type JsonlOut = (std::io::BufWriter<File>, Vec<u8>);

/// Rows, metrics and result rows of one run, fed in input order.
struct RunSink<'a> {
    cell: &'a Cell,
    requests: RequestRows,
    tokens: Option<TokenRows>,
    results: Option<JsonlOut>,
    steps: Option<JsonlOut>,
    metrics: MetricsCollector,
    tx: &'a Sender<Message>,
    error: Option<String>,
}

impl ResultSink for RunSink<'_> {
    fn engine_step(&mut self, step: &crate::sim::EngineStep) {
        let Some((file, buf)) = &mut self.steps else { return };
        buf.clear();
        step.write_jsonl(buf);
        if let Err(e) = file.write_all(buf)
            && self.error.is_none()
        {
            self.error = Some(format!("steps.jsonl: {e}"));
        }
    }

    fn request_done(&mut self, mut r: FinishedRequest) {
        self.metrics.observe(&r);
        self.requests.push(&r);
        if let Some(t) = &mut self.tokens {
            t.push(&r);
        }
        if let Some((file, buf)) = &mut self.results {
            r.rewrite_arrival_as_sent();
            buf.clear();
            r.write_result_row(buf);
            if let Err(e) = file.write_all(buf)
                && self.error.is_none()
            {
                self.error = Some(format!("results.jsonl: {e}"));
            }
        }
        if self.requests.len() >= BATCH_ROWS || self.tokens.as_ref().is_some_and(|t| t.len() >= BATCH_ROWS) {
            self.flush();
        }
    }
}

impl RunSink<'_> {
    fn flush(&mut self) {
        // The collector outlives every worker; a send fails only if it died.
        if self.requests.len() > 0 {
            let batch = self.requests.finish(self.cell);
            let _ = self.tx.send(Message::Rows { run_id: self.cell.run_id.clone(), table: Table::Requests, batch });
        }
        if let Some(t) = &mut self.tokens
            && t.len() > 0
        {
            let batch = t.finish(self.cell);
            let _ = self.tx.send(Message::Rows { run_id: self.cell.run_id.clone(), table: Table::Tokens, batch });
        }
    }
}

fn run_cell(
    plan: &Plan,
    cell: &Cell,
    grid: &GridColumns,
    opts: &SweepOptions,
    layout: &Layout,
    tx: &mut Sender<Message>,
) {
    let wall = Instant::now();
    let outcome = simulate_cell(plan, cell, grid, opts, layout, tx);
    let (status, metrics) = match outcome {
        Ok(m) => (RunStatus { status: "ok".to_owned(), error: None }, Some(Box::new(m))),
        Err(e) => (RunStatus { status: "failed".to_owned(), error: Some(e) }, None),
    };
    let _ =
        tx.send(Message::Done { run_id: cell.run_id.clone(), status, metrics, wall_s: wall.elapsed().as_secs_f64() });
}

fn simulate_cell(
    plan: &Plan,
    cell: &Cell,
    grid: &GridColumns,
    opts: &SweepOptions,
    layout: &Layout,
    tx: &Sender<Message>,
) -> Result<Metrics, String> {
    let d = scenario::resolve(cell.spec.clone(), &cell.base, &cell.scenario)
        .map_err(|e| format!("scenario {}: {e}", cell.scenario))?;
    let mut sim = Simulation::new(d.engine.clone(), d.latency.clone());
    sim.set_client(cell.client(plan));
    sim.set_request_timeout(plan.timeout_us);
    let results_path = layout.run_dir(&cell.run_id).join("results.jsonl");
    let results_tmp = results_path.with_extension("jsonl.tmp");
    let steps_path = layout.run_dir(&cell.run_id).join("steps.jsonl");
    let steps_tmp = steps_path.with_extension("jsonl.tmp");
    let open = |on: bool, tmp: &Path| -> Result<Option<JsonlOut>, String> {
        if !on {
            return Ok(None);
        }
        std::fs::create_dir_all(layout.run_dir(&cell.run_id)).map_err(|e| e.to_string())?;
        let f = File::create(tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        Ok(Some((std::io::BufWriter::with_capacity(1 << 20, f), Vec::new())))
    };
    let results = open(opts.results_jsonl, &results_tmp)?;
    let steps = open(opts.step_trace, &steps_tmp)?;
    sim.set_step_trace(steps.is_some());
    let mut sink = InputOrder::new(RunSink {
        cell,
        requests: RequestRows::new(grid),
        tokens: opts.tokens.then(|| TokenRows::new(grid)),
        results,
        steps,
        metrics: MetricsCollector::default(),
        tx,
        error: None,
    });
    let requests: Box<dyn Iterator<Item = Result<crate::workload::Request, String>>> = match &plan.workload {
        WorkloadSource::File(path) => {
            let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let reader =
                Reader::new(BufReader::with_capacity(1 << 20, file), path.display().to_string(), Format::Workload);
            Box::new(reader.map(|row| row.map_err(|e| e.to_string())))
        }
        WorkloadSource::Generate(g) => {
            Box::new(g.requests(cell.seed).map(|r| r.map_err(|e| format!("workload.generate.{e}"))))
        }
    };
    for request in requests {
        let mut request = request?;
        request.scale_arrival(cell.rate_scale)?;
        if !sim.add_request(request, &mut sink) {
            break;
        }
    }
    sim.finish(&mut sink);
    let mut sink = sink.inner;
    sink.flush();
    if let Some(e) = sink.error {
        return Err(e);
    }
    for (out, tmp, path) in
        [(sink.results.take(), &results_tmp, &results_path), (sink.steps.take(), &steps_tmp, &steps_path)]
    {
        if let Some((file, _)) = out {
            file.into_inner()
                .map_err(|e| e.into_error())
                .and_then(|_| std::fs::rename(tmp, path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(sink.metrics.finish(sim.engine_stats(), sim.now_us()))
}

/// Rebuilds `runs.parquet` and `manifest.json` from every run's files.
fn write_summary_tables(
    plan: &Plan,
    layout: &Layout,
    grid: &GridColumns,
    report: &mut SweepReport,
) -> Result<(), SweepError> {
    let mut rows = Vec::with_capacity(plan.cells.len());
    let mut manifest_runs = Vec::with_capacity(plan.cells.len());
    for cell in &plan.cells {
        let dir = layout.run_dir(&cell.run_id);
        let read_json = |name: &str| -> Option<serde_json::Value> {
            let text = std::fs::read_to_string(dir.join(name)).ok()?;
            serde_json::from_str(&text).ok()
        };
        let status: RunStatus = match read_json("status.json").and_then(|v| serde_json::from_value(v).ok()) {
            Some(s) => s,
            None => RunStatus { status: "missing".to_owned(), error: Some("the run did not finish".to_owned()) },
        };
        if status.status != "ok" {
            report.failed.push((cell.run_id.clone(), status.error.clone().unwrap_or_default()));
        }
        let metrics: Option<Metrics> = read_json("metrics.json").and_then(|v| serde_json::from_value(v).ok());
        let wall_s = read_json("timing.json").and_then(|v| v["wall_s"].as_f64()).unwrap_or(0.0);
        manifest_runs.push(serde_json::json!({
            "run_id": cell.run_id,
            "scenario": cell.scenario,
            "concurrency": cell.concurrency,
            "seed": cell.seed,
            "rate_scale": cell.rate_scale,
            "overrides": cell.overrides.iter().cloned().collect::<serde_json::Map<String, serde_json::Value>>(),
            "status": status.status,
            "error": status.error,
        }));
        rows.push((cell, status, metrics, wall_s));
    }
    let batch = runs_batch(grid, &rows);
    let path = layout.root.join("runs.parquet");
    let tmp = layout.root.join(".runs.parquet.tmp");
    let file = File::create(&tmp).map_err(io_err(&tmp))?;
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(writer_properties(&batch.schema())))
        .map_err(|e| SweepError::Io { path: tmp.display().to_string(), source: std::io::Error::other(e) })?;
    writer
        .write(&batch)
        .and_then(|_| writer.close().map(|_| ()))
        .map_err(|e| SweepError::Io { path: tmp.display().to_string(), source: std::io::Error::other(e) })?;
    std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
    let manifest = serde_json::json!({
        "name": plan.name,
        "plan": plan.file.display().to_string(),
        "plan_hash": plan.plan_hash,
        "tool": format!("blis-sweep {}", env!("CARGO_PKG_VERSION")),
        "runs": manifest_runs,
    });
    let mut text = serde_json::to_string_pretty(&manifest).expect("JSON values serialize");
    text.push('\n');
    let path = layout.root.join("manifest.json");
    write_atomic(&path, text.as_bytes()).map_err(io_err(&path))?;
    Ok(())
}
