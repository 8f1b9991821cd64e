//! `blis-sweep fit`: fits a latency model's per-GPU constants to converted
//! real runs (see `blis-sweep convert`) and writes them as a constants file.

use std::fmt::Write as _;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use anyhow::{Context, bail};

use super::atomic::write_file;
use crate::calibrate::fit::{Constants, FitRun, fit};
use crate::calibrate::observed;
use crate::workload::reader::{Format, Reader};

#[derive(Debug, clap::Args)]
pub(crate) struct FitArgs {
    /// Folder with NAME.scenario.yaml, NAME.workload.jsonl and NAME.baseline.jsonl per run.
    #[arg(long, value_name = "DIR")]
    runs: PathBuf,
    /// Runs to fit on (all of one GPU).
    #[arg(long, value_name = "NAME", required = true)]
    experiment: Vec<String>,
    /// Constants to fit, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "step_overhead_us,request_overhead_us")]
    params: Vec<String>,
    /// The real client's request timeout (as `run --timeout`), for runs where
    /// requests hit it.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Simulations of the whole set at most.
    #[arg(long, default_value_t = 80)]
    max_evaluations: usize,
    /// Where to write the fitted constants (YAML).
    #[arg(long, value_name = "CONSTANTS.yaml")]
    out: PathBuf,
}

pub(crate) fn run(args: FitArgs) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    let mut start: Option<Constants> = None;
    let mut gpu = String::new();
    let mut kind = "";
    for name in &args.experiment {
        let path = |suffix: &str| args.runs.join(format!("{name}.{suffix}"));
        let deployment = crate::scenario::load(&path("scenario.yaml"))?;
        let Some(constants) = deployment.latency.constants() else {
            bail!(
                "{}: the {} model has no constants to fit",
                path("scenario.yaml").display(),
                deployment.latency.kind()
            );
        };
        if !kind.is_empty() && kind != deployment.latency.kind() {
            bail!("--experiment {name}: uses the {} model but the others use {kind}", deployment.latency.kind());
        }
        kind = deployment.latency.kind();
        if !gpu.is_empty() && gpu != deployment.gpu.name {
            bail!(
                "--experiment {name}: runs on {} but the others ran on {gpu}; constants are per GPU",
                deployment.gpu.name
            );
        }
        gpu = deployment.gpu.name.to_owned();
        start.get_or_insert(constants);
        let wl = path("workload.jsonl");
        let f = File::open(&wl).with_context(|| format!("{}: cannot open", wl.display()))?;
        let requests = Reader::new(BufReader::new(f), wl.display().to_string(), Format::Workload)
            .collect::<Result<Vec<_>, _>>()?;
        let bl = path("baseline.jsonl");
        let f = File::open(&bl).with_context(|| format!("{}: cannot open", bl.display()))?;
        let real = observed::from_results(BufReader::new(f), &bl.display().to_string())?;
        let timeout_us = args.timeout.filter(|t| t.is_finite() && *t > 0.0).map(crate::workload::seconds_to_us);
        runs.push(FitRun { name: name.clone(), deployment, requests, real, timeout_us });
    }
    let start = start.expect("at least one experiment");
    let result =
        fit(&runs, &start, &args.params, args.max_evaluations).map_err(|e| anyhow::anyhow!("--params: {e}"))?;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# {kind} model constants for {gpu}, fitted by `blis-sweep fit --params {}` on:",
        args.params.join(",")
    );
    for r in &result.runs {
        let _ = writeln!(
            text,
            "#   {}: E2E {:+.1} %, ITL {:+.1} %, TTFT {:+.1} % (p99 {:+.1} %), E2E MAPE {:.1} %",
            r.run,
            r.e2e_mean * 100.0,
            r.itl_mean * 100.0,
            r.ttft_mean * 100.0,
            r.ttft_p99 * 100.0,
            r.e2e_mape * 100.0
        );
    }
    let _ = writeln!(
        text,
        "# loss {:.4} after {} simulations of the set; other constants as the scenarios had them.",
        result.loss, result.evaluations
    );
    for (key, value) in &result.constants {
        let _ = writeln!(text, "{key}: {value}");
    }
    write_file(&args.out, text.as_bytes())?;
    eprint!("{text}");
    Ok(())
}
