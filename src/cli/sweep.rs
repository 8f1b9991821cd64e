//! `blis-sweep PLAN.yaml`: runs a sweep; `blis-sweep plan PLAN.yaml` prints
//! its expanded grid.
//!
//! Progress goes to stderr: first the runs, requests and tokens to simulate
//! with an estimated time and disk use ([`crate::sweep::estimate`]), then a
//! bar with runs done, the ETA from simulated work and simulated requests
//! per second when stderr is a terminal, one plain line per run and a
//! progress line every 5 s otherwise; a capacity search, one line a probe
//! run; nothing with `--quiet`. Exit status: 0 when every run succeeded, 1 when
//! some failed (the others still finish), 2 for a plan that cannot run, an
//! output folder another sweep holds or another plan's results fill (without
//! `--force`), and an output that cannot be written (the sweep stops at once).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::calibrate::matrix;
use crate::capacity;
use crate::sweep::executor::{self, RunFinished, SweepOptions};
use crate::sweep::shard::{self, ShardError, ShardSpec};
use crate::sweep::{estimate, grid};

/// Seconds between two progress lines when stderr is not a terminal: often
/// enough for a log to show a long sweep moving, rarely enough to stay short.
const PLAIN_PROGRESS_S: f64 = 5.0;

#[derive(Debug, clap::Args)]
pub(crate) struct SweepArgs {
    /// The plan (YAML): workload, scenarios, grid, output.
    #[arg(value_name = "PLAN.yaml")]
    plan: Option<PathBuf>,
    /// Worker threads; default: all cores.
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
    /// Redo runs that an earlier invocation already finished, and replace
    /// the results of another plan in the output folder (refused without it).
    #[arg(long)]
    force: bool,
    /// Also write tokens/part-*.parquet: every llm node's token latencies.
    #[arg(long)]
    tokens: bool,
    /// Also write each run's result JSONL to runs/<run_id>/results.jsonl.
    #[arg(long)]
    results_jsonl: bool,
    /// Also write each run's step trace (one row per engine step, as `run
    /// --step-trace`) to runs/<run_id>/steps.jsonl.
    #[arg(long)]
    step_trace: bool,
    /// Run a deterministic share of the grid, for several machines: `I/N`
    /// (0 ≤ I < N) takes the runs whose index is I modulo N and writes under
    /// `OUTPUT/shard=I/`; `auto` takes I from the scheduler
    /// (JOB_COMPLETION_INDEX of a Kubernetes Indexed Job, SLURM_ARRAY_TASK_ID
    /// of a Slurm array) and N from --shard-count or OUTPUT/shards.json.
    #[arg(long, value_name = "I/N|auto")]
    shard: Option<String>,
    /// The sweep's number of shards (the array's size, the Job's
    /// completions), recorded in OUTPUT/shards.json by the first shard;
    /// needed by `--shard auto` until then.
    #[arg(long, value_name = "N")]
    shard_count: Option<usize>,
    /// No progress output.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Do not write OUTPUT/report.html at the end.
    #[arg(long)]
    no_report: bool,
}

impl SweepArgs {
    /// The sweep's options from the flags: no shard, no progress counters.
    fn options(&self, jobs: usize) -> SweepOptions {
        SweepOptions {
            jobs,
            force: self.force,
            tokens: self.tokens,
            results_jsonl: self.results_jsonl,
            step_trace: self.step_trace,
            shard: None,
            keep_other_runs: false,
            progress: None,
        }
    }
}

/// Parses `--shard` and `--shard-count`.
fn shard_spec(spec: &str, count: Option<usize>) -> anyhow::Result<ShardSpec> {
    if spec == "auto" {
        return Ok(ShardSpec::Auto { count });
    }
    let number = |what: &str, v: &str| -> anyhow::Result<usize> {
        v.trim().parse().map_err(|_| anyhow::anyhow!("--shard: {what} `{v}` is not a non-negative integer"))
    };
    let Some((i, n)) = spec.split_once('/') else { bail!("--shard: expected I/N or auto, got `{spec}`") };
    let (index, count_given) = (number("I", i)?, number("N", n)?);
    if let Some(stated) = count.filter(|&c| c != count_given) {
        return Err(ShardError::TwoCounts { index, count: count_given, stated }.into());
    }
    Ok(ShardSpec::Given { index, count: count_given })
}

#[derive(Debug, clap::Args)]
pub(crate) struct PlanArgs {
    /// The plan (YAML).
    #[arg(value_name = "PLAN.yaml")]
    plan: PathBuf,
}

/// Outcome of a sweep for the exit status.
pub(crate) enum Outcome {
    AllOk,
    SomeFailed,
}

pub(crate) fn plan(args: PlanArgs) -> anyhow::Result<()> {
    let plan = grid::load(&args.plan)?;
    print(&grid::describe(&plan))
}

pub(crate) fn run(args: SweepArgs) -> anyhow::Result<Outcome> {
    let Some(path) = args.plan.clone() else {
        bail!("give a plan file (blis-sweep PLAN.yaml) or a command; see --help");
    };
    let jobs = match args.jobs {
        Some(0) => bail!("--jobs: must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if std::fs::read_to_string(&path).is_ok_and(|t| matrix::is_calibration_plan(&t)) {
        if args.shard.is_some() || args.shard_count.is_some() {
            bail!("--shard: a calibration plan replays its real runs on one machine");
        }
        return run_calibration(&path, jobs, args.quiet, args.no_report);
    }
    let plan = grid::load(&path)?;
    if plan.search.is_some() {
        return run_capacity(plan, &args, jobs);
    }
    let terminal = std::io::stderr().is_terminal() && !args.quiet;
    let quiet = args.quiet;
    // The bar draws from the start and ticks on its own; its length becomes
    // the runs to do once the sweep knows which are done already. Its ETA is
    // the sweep's own, from simulated work (indicatif's counts runs).
    let bar = if terminal {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} runs  {elapsed_precise}  {msg}")
                .expect("valid template"),
        );
        bar.set_message("reading the plan's workload");
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar
    } else {
        ProgressBar::hidden()
    };
    let started = Instant::now();
    let progress = std::sync::Arc::new(executor::Progress::default());
    let (name, output) = (plan.name.clone(), plan.output.clone());
    let outputs = estimate::OutputsOn { tokens: args.tokens, results_jsonl: args.results_jsonl };
    // When the runs started (the ETA's elapsed time leaves the workload's
    // first read out).
    let runs_started = std::sync::OnceLock::<Instant>::new();
    // Once the sweep knows which runs are done already: the bar's length,
    // and the estimate (whichever of the ticker and the first run comes first).
    let announced = std::sync::atomic::AtomicBool::new(false);
    let announce = || {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        if progress.started.load(Acquire) && !announced.swap(true, Relaxed) {
            runs_started.get_or_init(Instant::now);
            let (to_run, reused) = (progress.to_run.load(Relaxed), progress.reused.load(Relaxed));
            bar.set_length(to_run);
            if !quiet {
                let e = progress.estimate.get().copied().unwrap_or_default();
                let (line, warning) = e.describe(&name, reused, jobs, outputs);
                bar.suspend(|| {
                    say!("{line}");
                    if let Some(w) = warning {
                        say!("{w}");
                    }
                });
            }
        }
    };
    // The ETA: elapsed since the runs started × work left / work done.
    let eta = || {
        use std::sync::atomic::Ordering::Relaxed;
        let (done, total) = (progress.work_done.load(Relaxed), progress.work_total.load(Relaxed));
        let elapsed = runs_started.get().map_or(0.0, |t| t.elapsed().as_secs_f64());
        (done, total, estimate::eta_s(elapsed, done, total))
    };
    let mut done = 0u64;
    let mut on_run = |r: RunFinished<'_>| {
        announce();
        done += 1;
        bar.inc(1);
        if !terminal && !quiet {
            let to_run = progress.to_run.load(std::sync::atomic::Ordering::Relaxed);
            let error = r.error.map_or_else(String::new, |e| format!(": {e}"));
            say!("[{done}/{to_run}] {} {} in {:.2} s{error}", r.run_id, r.status, r.wall_s);
        }
    };
    let shard = match (args.shard.as_deref(), args.shard_count) {
        (None, None) => None,
        (None, Some(_)) => bail!("--shard-count: only with --shard"),
        (Some(spec), count) => Some(shard::resolve(shard_spec(spec, count)?, &|k| std::env::var(k).ok(), &output)?),
    };
    let options = SweepOptions { shard, progress: Some(progress.clone()), ..args.options(jobs) };
    let finished = std::sync::atomic::AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        // Inside runs too: the ETA, requests simulated per second and the
        // simulated time reached, a few times a second; without a terminal,
        // a line every PLAIN_PROGRESS_S.
        scope.spawn(|| {
            use std::sync::atomic::Ordering::{Acquire, Relaxed};
            let mut last_line = Instant::now();
            while !finished.load(Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(100));
                announce();
                let (work_done, work_total, eta) = eta();
                let share = if work_total > 0 { work_done as f64 * 100.0 / work_total as f64 } else { 0.0 };
                if terminal {
                    let requests = progress.requests.load(Relaxed);
                    let sim_s = progress.sim_us.load(Relaxed) as f64 / 1e6;
                    bar.set_message(format!(
                        "ETA {}  {share:.0} % of the work, {requests} requests simulated ({:.0}/s), simulated time {sim_s:.0} s",
                        estimate::format_eta(eta),
                        requests as f64 / started.elapsed().as_secs_f64()
                    ));
                } else if !quiet
                    && progress.started.load(Acquire)
                    && last_line.elapsed().as_secs_f64() >= PLAIN_PROGRESS_S
                {
                    last_line = Instant::now();
                    let elapsed = runs_started.get().map_or(0.0, |t| t.elapsed().as_secs_f64());
                    say!(
                        "progress: {share:.1} % of the work, elapsed {elapsed:.1} s, ETA {} ({})",
                        estimate::format_eta(eta),
                        eta.map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s")),
                    );
                }
            }
        });
        // Stops the ticker however this ends (a panic included: the scope
        // would otherwise wait for it forever).
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Release);
            }
        }
        let stop = Stop(&finished);
        let report = executor::run(plan, &options, &mut on_run);
        drop(stop);
        announce();
        report
    })?;
    bar.finish_and_clear();
    if !quiet {
        say!(
            "{}: {} runs ({} run now, {} already done), {} failed, {:.1} s -> {}",
            name,
            report.total,
            report.ran,
            report.skipped,
            report.failed,
            started.elapsed().as_secs_f64(),
            output.display()
        );
    }
    // (A shard writes part of the tables: the report is for the whole.)
    if !args.no_report && shard.is_none() {
        crate::report::write(&output)?;
    }
    if let Some((run_id, error)) = &report.first_failure {
        say!("blis-sweep: {} of {} runs failed; first: {run_id}: {error}", report.failed, report.total);
        return Ok(Outcome::SomeFailed);
    }
    Ok(Outcome::AllOk)
}

/// A calibration plan: replays every experiment, writes the matrix. Failed
/// experiments (a bad data file) are reported and make the exit status 1.
fn run_calibration(path: &std::path::Path, jobs: usize, quiet: bool, no_report: bool) -> anyhow::Result<Outcome> {
    let plan = matrix::load(path)?;
    let started = Instant::now();
    let outcomes = matrix::run(&plan, jobs, &|o| {
        if quiet {
            return;
        }
        match &o.report {
            Ok(c) => say!("{}: {}", o.experiment.name, c.describe()),
            Err(why) => say!("{}: failed: {why}", o.experiment.name),
        }
    })?;
    matrix::write(&plan, &outcomes)?;
    if !no_report {
        crate::report::write(&plan.output)?;
    }
    let failed: Vec<&matrix::Outcome> = outcomes.iter().filter(|o| o.report.is_err()).collect();
    if !quiet {
        say!(
            "{}: {} experiments, {} failed, {:.1} s -> {}",
            plan.name,
            outcomes.len(),
            failed.len(),
            started.elapsed().as_secs_f64(),
            plan.output.join("calibration.parquet").display()
        );
    }
    if let Some(o) = failed.first() {
        let why = o.report.as_ref().err().map_or("", String::as_str);
        say!(
            "blis-sweep: {} of {} experiments failed; first: {}: {why}",
            failed.len(),
            outcomes.len(),
            o.experiment.name
        );
        return Ok(Outcome::SomeFailed);
    }
    Ok(Outcome::AllOk)
}

/// Writes `text` to stdout. Never `print!`, which panics when stdout is
/// closed (`| head`): a closed stdout is an error here, which [`super::main`]
/// turns into a quiet end.
fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("stdout")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_flags_parse() {
        assert_eq!(shard_spec("1/3", None).unwrap(), ShardSpec::Given { index: 1, count: 3 });
        assert_eq!(shard_spec("1/3", Some(3)).unwrap(), ShardSpec::Given { index: 1, count: 3 });
        assert!(shard_spec("1/3", Some(4)).is_err());
        assert_eq!(shard_spec("auto", Some(4)).unwrap(), ShardSpec::Auto { count: Some(4) });
        assert!(shard_spec("1", None).is_err());
        assert!(shard_spec("a/3", None).is_err());
    }
}

/// A plan with `search:`: the capacity of each deployment, as a printed
/// table and `capacity.parquet`; every probe a run in the tables.
fn run_capacity(plan: grid::Plan, args: &SweepArgs, jobs: usize) -> anyhow::Result<Outcome> {
    let search = plan.search.clone().expect("checked by the caller");
    if args.shard.is_some() || args.shard_count.is_some() {
        bail!("--shard: a capacity search runs in rounds that depend on each other; run it on one machine");
    }
    let started = Instant::now();
    let quiet = args.quiet;
    let mut probes = 0u64;
    let mut on_probe = |p: capacity::Probe<'_>| {
        probes += 1;
        if !quiet {
            say!("[probe {probes}] {} ({}, {:.2} s)", p.line, p.run.run_id, p.run.wall_s);
        }
    };
    let options = SweepOptions { keep_other_runs: true, ..args.options(jobs) };
    let (name, output) = (plan.name.clone(), plan.output.clone());
    let rows = capacity::search(plan.clone(), &search, &options, &mut on_probe)?;
    let table = capacity::write(&plan, &search, &rows)?;
    if !args.no_report {
        crate::report::write(&output)?;
    }
    print(&table)?;
    if !quiet {
        say!(
            "{name}: capacity of {} deployments ({} runs now), {:.1} s -> {}",
            rows.len(),
            probes,
            started.elapsed().as_secs_f64(),
            output.join("capacity.parquet").display()
        );
    }
    // A deployment whose probe could not run has no capacity: not a success.
    if rows.iter().any(|r| r.answer == capacity::Answer::Failed) {
        return Ok(Outcome::SomeFailed);
    }
    Ok(Outcome::AllOk)
}

#[derive(Debug, clap::Args)]
pub(crate) struct CapacityArgs {
    #[command(flatten)]
    sweep: SweepArgs,
}

/// `blis-sweep capacity PLAN.yaml`: the plan must have `search:`.
pub(crate) fn capacity(args: CapacityArgs) -> anyhow::Result<Outcome> {
    let Some(path) = &args.sweep.plan else { bail!("give a plan file with a search: section") };
    let plan = grid::load(path)?;
    if plan.search.is_none() {
        bail!("{}: search: missing: a capacity search needs {{slo, range}} (see README, Capacity)", path.display());
    }
    run(args.sweep)
}

#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// A sweep's output folder (a sharded sweep's parent too), or a calibration plan's.
    #[arg(value_name = "OUTPUT_DIR")]
    dir: PathBuf,
}

/// `blis-sweep report OUTPUT_DIR`: writes OUTPUT_DIR/report.html; a
/// sharded sweep's parent folder is reported as one sweep.
pub(crate) fn report(args: ReportArgs) -> anyhow::Result<()> {
    let path = crate::report::write(&args.dir)?;
    say!("{}", path.display());
    Ok(())
}
