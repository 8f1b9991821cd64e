//! `blis-sweep PLAN.yaml`: runs a sweep; `blis-sweep plan PLAN.yaml` prints
//! its expanded grid.
//!
//! Progress goes to stderr: a bar with runs done, ETA and simulated requests
//! per second when stderr is a terminal, one plain line per run otherwise,
//! nothing with `--quiet`. Exit status: 0 when every run succeeded, 1 when
//! some failed (the others still finish), 2 for a plan that cannot run.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};

use crate::sweep::executor::{self, RunFinished, SweepOptions};
use crate::sweep::grid;

#[derive(Debug, clap::Args)]
pub(crate) struct SweepArgs {
    /// The plan (YAML): workload, scenarios, grid, output.
    #[arg(value_name = "PLAN.yaml")]
    plan: Option<PathBuf>,
    /// Worker threads; default: all cores.
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
    /// Redo runs that an earlier invocation already finished.
    #[arg(long)]
    force: bool,
    /// No progress output.
    #[arg(long, short = 'q')]
    quiet: bool,
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
    print!("{}", grid::describe(&plan));
    Ok(())
}

pub(crate) fn run(args: SweepArgs) -> anyhow::Result<Outcome> {
    let Some(path) = args.plan else {
        bail!("give a plan file (blis-sweep PLAN.yaml) or a command; see --help");
    };
    let plan = grid::load(&path)?;
    let jobs = match args.jobs {
        Some(0) => bail!("--jobs: must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let total = plan.cells.len() as u64;
    let terminal = std::io::stderr().is_terminal() && !args.quiet;
    let bar = if terminal {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} runs  {elapsed_precise} ETA {eta}  {msg}")
                .expect("valid template"),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let started = Instant::now();
    let mut done = 0u64;
    let quiet = args.quiet;
    let mut on_run = |r: RunFinished<'_>| {
        done += 1;
        bar.inc(1);
        bar.set_message(format!("{:.1} runs/min", done as f64 / started.elapsed().as_secs_f64() * 60.0));
        if !terminal && !quiet {
            let error = r.error.map_or_else(String::new, |e| format!(": {e}"));
            eprintln!("[{done}] {} {} in {:.2} s{error}", r.run_id, r.status, r.wall_s);
        }
    };
    let report = executor::run(&plan, &SweepOptions { jobs, force: args.force }, &mut on_run)?;
    bar.finish_and_clear();
    if !quiet {
        eprintln!(
            "{}: {} runs ({} run now, {} already done), {} failed, {:.1} s -> {}",
            plan.name,
            report.total,
            report.ran,
            report.skipped,
            report.failed.len(),
            started.elapsed().as_secs_f64(),
            plan.output.display()
        );
    }
    if let Some((run_id, error)) = report.failed.first() {
        eprintln!("blis-sweep: {} of {} runs failed; first: {run_id}: {error}", report.failed.len(), report.total);
        return Ok(Outcome::SomeFailed);
    }
    Ok(Outcome::AllOk)
}
