//! The command line: parsing (clap) and one file per subcommand. This is the
//! only place that touches files, stdout/stderr, wall clocks and exit codes;
//! errors are `anyhow` here and typed everywhere else.
//!
//! Exit status: 0 success; 1 a sweep in which some runs failed (the others
//! finished); 2 bad input or any other error (the message is one line, naming
//! the file, line and field where there is one). A closed stdout (e.g.
//! `| head`) is not an error.

/// `eprintln!` that never panics: a message stderr cannot take (a full
/// disk behind `2>file`) is dropped, not a reason to abort the command.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod agentx;
mod atomic;
mod calibrate;
mod client_args;
mod convert;
mod fit;
mod generate;
mod import;
mod observe;
mod results;
mod run;
mod sweep;
mod workload_args;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Simulates vLLM inference serving: request DAGs in, per-token latencies
/// and metrics out.
///
/// `blis-sweep PLAN.yaml` runs a sweep; the commands below do the rest.
#[derive(Debug, Parser)]
#[command(name = "blis-sweep", version, about, long_about = None, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    sweep: sweep::SweepArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate one deployment serving a workload; write result JSONL and metrics.
    // Commands with numeric flags: a negative number is a value (`--horizon
    // -1`), refused by the flag's own check naming it, not clap's
    // "unexpected argument".
    #[command(allow_negative_numbers = true)]
    Run(run::RunArgs),
    /// Reconstruct absolute token times from a result JSONL, as CSV.
    Results(results::ResultsArgs),
    /// Print the runs a sweep plan expands to.
    Plan(sweep::PlanArgs),
    /// Find each deployment's capacity under an SLO (a plan with search:).
    #[command(allow_negative_numbers = true)]
    Capacity(sweep::CapacityArgs),
    /// Write OUTPUT_DIR/report.html: latency, throughput, capacity and calibration charts.
    Report(sweep::ReportArgs),
    /// Write a synthetic workload (JSONL) from a spec or a preset.
    #[command(allow_negative_numbers = true)]
    Generate(generate::GenerateArgs),
    /// Compare real and simulated latencies; write a calibration report.
    #[command(allow_negative_numbers = true)]
    Calibrate(calibrate::CalibrateArgs),
    /// Turn real vLLM runs into a workload, a baseline and a scenario.
    Convert(convert::ConvertArgs),
    /// Write a trace in another format (`import --help` lists them) as workload JSONL.
    #[command(allow_negative_numbers = true)]
    Import(import::ImportArgs),
    /// Fit a latency model's per-GPU constants to converted real runs.
    #[command(allow_negative_numbers = true)]
    Fit(fit::FitArgs),
    /// Send a workload to a real vLLM server; record what it did (result JSONL, TraceV2).
    #[command(allow_negative_numbers = true)]
    Observe(observe::ObserveArgs),
    /// Run an AgentX load (lanes of Weka plays, warm-up, a profile window) on one deployment.
    #[command(allow_negative_numbers = true)]
    Agentx(agentx::AgentxArgs),
}

/// Parses the arguments, runs the command and maps the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Some(Command::Run(args)) => run::run(args),
        Some(Command::Results(args)) => results::run(args),
        Some(Command::Plan(args)) => sweep::plan(args),
        Some(Command::Report(args)) => sweep::report(args),
        Some(Command::Capacity(args)) => match sweep::capacity(args) {
            Ok(sweep::Outcome::AllOk) => Ok(()),
            Ok(sweep::Outcome::SomeFailed) => return ExitCode::from(1),
            Err(e) => Err(e),
        },
        Some(Command::Generate(args)) => generate::run(args),
        Some(Command::Calibrate(args)) => calibrate::run(args),
        Some(Command::Convert(args)) => convert::run(args),
        Some(Command::Import(args)) => import::run(args),
        Some(Command::Fit(args)) => fit::run(args),
        Some(Command::Observe(args)) => observe::run(args),
        Some(Command::Agentx(args)) => agentx::run(args),
        None => match sweep::run(cli.sweep) {
            Ok(sweep::Outcome::AllOk) => Ok(()),
            Ok(sweep::Outcome::SomeFailed) => return ExitCode::from(1),
            Err(e) => Err(e),
        },
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            say!("blis-sweep: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line: a cause already spelled out by the
/// error around it (`FILE: No such file…` around the OS error) is not
/// repeated, and control characters from user input (a newline or a
/// terminal escape in a file name or an id) are shown escaped.
fn one_line(e: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
        .chars()
        .flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] })
        .collect()
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_on_one_line_without_repeats() {
        let os = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let e = anyhow::Error::new(os).context("w.jsonl: No such file or directory (os error 2)").context("reading");
        assert_eq!(one_line(&e), "reading: w.jsonl: No such file or directory (os error 2)");
        let e = anyhow::anyhow!("bad id \"a\nb\u{1b}[31m\"");
        assert_eq!(one_line(&e), "bad id \"a\\nb\\u{1b}[31m\"");
    }
}
