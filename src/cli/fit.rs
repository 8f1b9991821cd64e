//! `blis-sweep fit`: fits a latency model's per-GPU constants to converted
//! real runs (see `blis-sweep convert`) and to training runs known by their
//! aggregates, and writes them as a constants file.

use std::fmt::Write as _;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use anyhow::{Context, bail};

use super::atomic::{self, write_file};
use crate::calibrate::fit::{Constants, FitRun, Scored, Truth, fit};
use crate::calibrate::observed;
use crate::sim::Client;
use crate::workload::import::{blis_trainval, silicon};
use crate::workload::reader::{Format, Reader};

#[derive(Debug, clap::Args)]
pub(crate) struct FitArgs {
    /// Folder with NAME.scenario.yaml, NAME.workload.jsonl and NAME.baseline.jsonl per run.
    #[arg(long, value_name = "DIR")]
    runs: Option<PathBuf>,
    /// Runs to fit on (all of one GPU), from --runs.
    #[arg(long, value_name = "NAME")]
    experiment: Vec<String>,
    /// A blis-vllm-h100 folder whose training runs known only by their
    /// aggregates (`trainval15_experiment_configs.json`,
    /// `aggregates_trainval.csv`) join the fit.
    #[arg(long, value_name = "DIR")]
    trainval: Option<PathBuf>,
    /// Training runs to fit on, from --trainval (as aggregates_trainval.csv names them).
    #[arg(long, value_name = "NAME")]
    trainval_experiment: Vec<String>,
    /// An aiconfigurator folder whose measured deployments
    /// (`silicon_sample.csv`) join the fit, by TPOT only (TTFT depends on a
    /// protocol the rows do not give).
    #[arg(long, value_name = "DIR")]
    silicon: Option<PathBuf>,
    /// Rows to fit on, from --silicon (as the calibration matrix names them:
    /// GPU-model-tpN-dtype-ISLxOSL-cC-lineL).
    #[arg(long, value_name = "NAME")]
    silicon_row: Vec<String>,
    /// Measurements the fit scores, comma-separated: e2e_mean, itl_mean
    /// (targets 3 %), ttft_mean (10 %), ttft_p99 (25 %). Leave one out when
    /// the runs' values of it are noise the model should not chase (the
    /// TTFT tail of a CPU server, spikes of its API process).
    #[arg(long, value_delimiter = ',', default_value = "e2e_mean,itl_mean,ttft_mean,ttft_p99")]
    score: Vec<String>,
    /// Constants to fit, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "step_overhead_us,request_overhead_us")]
    params: Vec<String>,
    /// The real client's request timeout (as `run --timeout`), for runs where
    /// requests hit it.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// Constants to start from (and keep, where not fitted) instead of the
    /// runs' own: a constants file, as this command writes.
    #[arg(long, value_name = "CONSTANTS.yaml")]
    start: Option<PathBuf>,
    /// Simulations of the whole set at most.
    #[arg(long, default_value_t = 80)]
    max_evaluations: usize,
    /// Where to write the fitted constants (YAML).
    #[arg(long, value_name = "CONSTANTS.yaml")]
    out: PathBuf,
}

/// The runs of one fit: one GPU, one latency model.
#[derive(Default)]
struct Set {
    runs: Vec<FitRun>,
    start: Option<Constants>,
    gpu: String,
    kind: &'static str,
}

impl Set {
    /// Adds a run, after checking it shares the others' GPU and latency model.
    fn add(&mut self, run: FitRun, origin: &str) -> anyhow::Result<()> {
        let d = &run.deployment;
        let p = d.serving();
        let constants = p.latency.constants();
        if !self.kind.is_empty() && self.kind != p.latency.kind() {
            bail!("{origin}: uses the {} model but the others use {}", p.latency.kind(), self.kind);
        }
        if !self.gpu.is_empty() && self.gpu != p.gpu.name {
            bail!("{origin}: runs on {} but the others ran on {}; constants are per GPU", p.gpu.name, self.gpu);
        }
        self.kind = p.latency.kind();
        self.gpu = p.gpu.name.to_owned();
        self.start.get_or_insert(constants);
        self.runs.push(run);
        Ok(())
    }
}

/// A converted run's scenario text, resolved beside its data.
fn resolve(scenario_yaml: &str, dir: &std::path::Path, name: &str) -> anyhow::Result<crate::scenario::Deployment> {
    let spec: crate::scenario::ScenarioSpec =
        crate::yaml::parse(scenario_yaml).map_err(|e| anyhow::anyhow!("{name}: scenario: {}", e.message))?;
    crate::scenario::resolve(spec, dir, name)
        .map_err(|e| anyhow::anyhow!("{name}: scenario: {}: {}", e.field, e.reason))
}

pub(crate) fn run(args: FitArgs) -> anyhow::Result<()> {
    if args.experiment.is_empty() && args.trainval_experiment.is_empty() && args.silicon_row.is_empty() {
        bail!(
            "give runs to fit on: --runs DIR --experiment NAME…, --trainval DIR --trainval-experiment NAME…, or --silicon DIR --silicon-row NAME…"
        );
    }
    let start = args.start.as_deref().map(|path| atomic::Named::given("--start", path));
    atomic::check_distinct(&[atomic::Named::given("--out", &args.out)], start.as_slice())?;
    let mut set = Set::default();
    let timeout_us = args.timeout.filter(|t| t.is_finite() && *t > 0.0).map(crate::workload::seconds_to_us);
    for name in &args.experiment {
        let Some(dir) = &args.runs else { bail!("--experiment {name}: give --runs DIR") };
        let path = |suffix: &str| dir.join(format!("{name}.{suffix}"));
        let deployment = crate::scenario::load(&path("scenario.yaml"))?;
        let wl = path("workload.jsonl");
        let f = File::open(&wl).with_context(|| format!("{}: cannot open", wl.display()))?;
        let requests = Reader::new(BufReader::new(f), wl.display().to_string(), Format::Workload)
            .collect::<Result<Vec<_>, _>>()?;
        let bl = path("baseline.jsonl");
        let f = File::open(&bl).with_context(|| format!("{}: cannot open", bl.display()))?;
        let real = Truth::PerRequest(observed::from_results(BufReader::new(f), &bl.display().to_string())?);
        let origin = path("scenario.yaml").display().to_string();
        let client = Client::OpenLoop;
        set.add(FitRun { name: name.clone(), deployment, requests, real, timeout_us, client }, &origin)?;
    }
    for name in &args.trainval_experiment {
        let Some(dir) = &args.trainval else { bail!("--trainval-experiment {name}: give --trainval DIR") };
        let run = blis_trainval::load(dir, name)?;
        let deployment = resolve(&run.scenario_yaml, dir, name)?;
        let real = Truth::Aggregates { stages: run.stages, aggregates: run.aggregates };
        let (requests, client) = (run.workload, Client::OpenLoop);
        set.add(FitRun { name: name.clone(), deployment, requests, real, timeout_us: None, client }, name)?;
    }
    for name in &args.silicon_row {
        let Some(dir) = &args.silicon else { bail!("--silicon-row {name}: give --silicon DIR") };
        let run = silicon::load(dir, name, crate::calibrate::replay::kv_blocks)?;
        let deployment = resolve(&run.scenario_yaml, dir, name)?;
        let aggregates = run.aggregates.into_iter().filter(|a| a.metric == "tpot_mean").collect();
        let real = Truth::Aggregates { stages: Vec::new(), aggregates };
        let (requests, client) = (run.workload, Client::Capped { limit: run.concurrency });
        set.add(FitRun { name: name.clone(), deployment, requests, real, timeout_us: None, client }, name)?;
    }
    let Set { runs, mut start, gpu, kind } = set;
    if let (Some(path), Some(start)) = (&args.start, &mut start) {
        let text = std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        let given: Constants =
            crate::yaml::parse(&text).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message))?;
        // Each given constant is checked alone against the model (the others
        // as the scenarios have them, which the model takes), so a bad one is
        // this file's, at its line, not `--params`'.
        let line = |key: &str| {
            text.lines()
                .position(|l| l.starts_with(key) && l[key.len()..].trim_start().starts_with(':'))
                .map_or(String::new(), |i| format!(":{}", i + 1))
        };
        let defaults = start.clone();
        let latency = &runs.first().context("no runs to fit")?.deployment.serving().latency;
        for (key, value) in given {
            let at = format!("{}{}: {key}", path.display(), line(&key));
            if !start.contains_key(&key) {
                bail!("{at}: not a constant of the {kind} model");
            }
            let mut alone = defaults.clone();
            alone.insert(key.clone(), value.clone());
            if let Err(reason) = latency.with_constants(&alone) {
                let reason = reason.strip_prefix(&format!("{key}: ")).unwrap_or(&reason).to_owned();
                bail!("{at}: {reason}");
            }
            start.insert(key, value);
        }
    }
    let start = start.expect("at least one experiment");
    let mut scored = Vec::new();
    for name in &args.score {
        let Some(s) = Scored::parse(name) else {
            let names: Vec<&str> = Scored::ALL.iter().map(|s| s.name()).collect();
            bail!("--score: unknown measurement `{name}`; one of {}", names.join(", "));
        };
        scored.push(s);
    }
    let result = fit(&runs, &start, &args.params, &scored, args.max_evaluations)
        .map_err(|e| anyhow::anyhow!("--params: {e}"))?;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# {kind} model constants for {gpu}, fitted by `blis-sweep fit --params {} --score {}` on:",
        args.params.join(","),
        args.score.join(",")
    );
    for r in &result.runs {
        let pct = |label: &str, e: Option<f64>| e.map(|e| format!("{label} {:+.1} %", e * 100.0));
        let parts: Vec<String> = [
            pct("E2E", r.e2e_mean),
            pct("ITL", r.itl_mean),
            pct("TTFT", r.ttft_mean),
            pct("TTFT p99", r.ttft_p99),
            r.e2e_mape.map(|m| format!("E2E MAPE {:.1} %", m * 100.0)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let _ = writeln!(text, "#   {}: {}", r.run, parts.join(", "));
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
    {
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), "{text}");
    }
    Ok(())
}
