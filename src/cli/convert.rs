//! `blis-sweep convert`: real vLLM runs into a workload, a baseline result
//! JSONL and a scenario, ready for `run` and `calibrate`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::atomic;
use crate::workload::import::common::{Converted, baseline_jsonl};
use crate::workload::import::measured;
use crate::workload::import::{blis_trainval, silicon, vllm_bench};
use crate::workload::writer::write_workload_row;

#[derive(Debug, clap::Args)]
pub(crate) struct ConvertArgs {
    #[command(subcommand)]
    source: Source,
}

#[derive(Debug, clap::Subcommand)]
enum Source {
    /// BLIS's real vLLM runs on H100 (experiments.csv + requests/<experiment>.csv).
    BlisVllmH100 {
        /// The data folder (../shared/data/blis-vllm-h100).
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// Experiment names; default: every experiment in experiments.csv.
        #[arg(long, value_name = "NAME")]
        experiment: Vec<String>,
        /// Output folder.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// LLMServingSim's real vLLM runs (runs/<run>/ + workloads/).
    Llmservingsim {
        /// The data folder (../shared/data/llmservingsim-vllm-bench).
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// Run names; default: every folder under runs/.
        #[arg(long, value_name = "RUN")]
        run: Vec<String>,
        /// Output folder.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// BLIS's training runs known only by their aggregates
    /// (trainval15_experiment_configs.json + aggregates_trainval.csv): the
    /// inference-perf workload each sent and its deployment; no baseline
    /// (compare with `blis-sweep fit --trainval` or a calibration plan).
    BlisTrainval {
        /// The data folder (../shared/data/blis-vllm-h100).
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// Experiment names; default: every aggregate-only run in aggregates_trainval.csv.
        #[arg(long, value_name = "NAME")]
        experiment: Vec<String>,
        /// Output folder.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// aiconfigurator's measured deployments (silicon_sample.csv): each
    /// row's benchmark workload and deployment; replay with `run
    /// --concurrency C` (the row's concurrency, printed); no baseline (its
    /// TTFT and TPOT means are compared by a calibration plan).
    Silicon {
        /// The data folder (../shared/data/aiconfigurator-vllm-h100-h200).
        #[arg(long, value_name = "DIR")]
        data: PathBuf,
        /// Row names (GPU-model-tpN-dtype-ISLxOSL-cC-lineL); default: every replayable row.
        #[arg(long, value_name = "NAME")]
        row: Vec<String>,
        /// Output folder.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// A `vllm bench serve --save-result --save-detailed` result file: its
    /// requests (lengths; arrivals from its start times, else drawn at its
    /// request rate) and their measured TTFT and ITLs per token, the
    /// baseline `calibrate --real` reads. The file names the model only:
    /// give the deployment with --scenario to have NAME.scenario.yaml
    /// written (else none is).
    VllmBench {
        /// The result JSON.
        #[arg(long, value_name = "FILE")]
        data: PathBuf,
        /// The deployment the benchmark ran against, copied as
        /// NAME.scenario.yaml (checked to load).
        #[arg(long, value_name = "S.yaml")]
        scenario: Option<PathBuf>,
        /// The outputs' name; default: the file's name without `.json`.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Seeds the arrivals drawn where the file has no start times.
        #[arg(long, value_name = "N", default_value_t = 0)]
        seed: u64,
        /// Output folder.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// One converted run, as written: its workload, scenario and, where the
/// source has per-request truth, a baseline; with what to tell the user.
struct Replay {
    name: String,
    workload: Vec<crate::workload::Request>,
    /// None where the source does not name the deployment.
    scenario_yaml: Option<String>,
    baseline: Option<Vec<u8>>,
    notes: Vec<String>,
}

/// Writes every run's files, all committed only once all of them are
/// complete (a failing conversion leaves no output), then names them.
fn write(out: &Path, runs: &[Replay]) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("{}: cannot create", out.display()))?;
    // (A run named twice, or two names one file through a link.)
    let suffixes = ["workload.jsonl", "baseline.jsonl", "scenario.yaml"];
    let paths: Vec<PathBuf> =
        runs.iter().flat_map(|r| suffixes.map(|suffix| out.join(format!("{}.{suffix}", r.name)))).collect();
    atomic::check_distinct(&paths.iter().map(|p| atomic::Named::given("--out", p)).collect::<Vec<_>>(), &[])?;
    let mut written = Vec::new();
    for r in runs {
        let mut workload = Vec::new();
        for request in &r.workload {
            write_workload_row(&mut workload, request);
        }
        let files = [
            Some(("workload.jsonl", workload)),
            r.baseline.clone().map(|b| ("baseline.jsonl", b)),
            r.scenario_yaml.clone().map(|s| ("scenario.yaml", s.into_bytes())),
        ];
        for (suffix, bytes) in files.into_iter().flatten() {
            let path = out.join(format!("{}.{suffix}", r.name));
            let mut f = atomic::create(&path)?;
            f.write_all(&bytes).with_context(|| format!("{}: write failed", path.display()))?;
            written.push(f);
        }
    }
    atomic::commit_all(written)?;
    for r in runs {
        say!("{}: {} requests -> {}", r.name, r.workload.len(), out.display());
        for note in &r.notes {
            say!("  note: {note}");
        }
    }
    Ok(())
}

/// The training runs' workloads and scenarios; their truth stays in
/// aggregates_trainval.csv. Without names, every run that can be replayed
/// is, and each that cannot is named with why (Llama 4's runs); a named run
/// that cannot stops it.
fn trainval(data: &Path, names: Vec<String>) -> anyhow::Result<Vec<Replay>> {
    let all = names.is_empty();
    let names = if all { blis_trainval::list(data)? } else { names };
    let mut runs = Vec::with_capacity(names.len());
    for name in names {
        match blis_trainval::load(data, &name) {
            Ok(r) => runs.push(Replay {
                name,
                workload: r.workload,
                scenario_yaml: Some(r.scenario_yaml),
                baseline: None,
                notes: r.notes,
            }),
            Err(e) if all => say!("{name}: skipped: {e}"),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(runs)
}

/// The measured deployments' workloads and scenarios; their truth stays in
/// silicon_sample.csv.
fn silicon(data: &Path, names: Vec<String>) -> anyhow::Result<Vec<Replay>> {
    let names = if names.is_empty() { silicon::list(data)? } else { names };
    let mut runs = Vec::with_capacity(names.len());
    for name in names {
        let r = silicon::load(data, &name, crate::calibrate::replay::kv_blocks)?;
        let mut notes = vec![format!("replay with `blis-sweep run --concurrency {}`, the benchmark's", r.concurrency)];
        notes.push(format!("protocol {}: {}", r.protocol.class(), r.notes.join("; ")));
        if !r.warmups.is_empty() {
            // Behind the harness's barrier the warm-ups leave the server as
            // they found it (nothing cached that a measured prompt hits).
            notes.push(format!(
                "{} warm-ups, awaited before the measured requests, left out: the workload is the measured requests",
                r.warmups.len()
            ));
        }
        runs.push(Replay { name, workload: r.workload, scenario_yaml: Some(r.scenario_yaml), baseline: None, notes });
    }
    Ok(runs)
}

/// A `vllm bench serve` result file: its workload, per-token baseline and,
/// given one, the deployment.
fn vllm_bench(data: &Path, scenario: Option<&Path>, name: Option<String>, seed: u64) -> anyhow::Result<Replay> {
    let name = match name {
        Some(n) => n,
        None => {
            let file = data.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            file.strip_suffix(".json").unwrap_or(&file).to_owned()
        }
    };
    if name.is_empty() || name.contains(['/', '\\']) {
        anyhow::bail!("--name: `{name}` is not a file name");
    }
    let bench = vllm_bench::convert(data, seed)?;
    let mut notes = bench.notes;
    let scenario_yaml = match scenario {
        Some(path) => {
            crate::scenario::load(path).with_context(|| format!("--scenario {}", path.display()))?;
            Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("--scenario: {}: cannot read", path.display()))?,
            )
        }
        None => {
            notes.push(
                "no scenario written: the result file names the model only; replay with `run -s` your deployment \
                 (or give --scenario)"
                    .to_owned(),
            );
            None
        }
    };
    let baseline = Some(baseline_jsonl(&bench.baseline));
    Ok(Replay { name, workload: bench.workload, scenario_yaml, baseline, notes })
}

pub(crate) fn run(args: ConvertArgs) -> anyhow::Result<()> {
    let (source, data, names, out) = match args.source {
        Source::BlisVllmH100 { data, experiment, out } => (measured::Source::BlisVllmH100, data, experiment, out),
        Source::Llmservingsim { data, run, out } => (measured::Source::Llmservingsim, data, run, out),
        Source::BlisTrainval { data, experiment, out } => return write(&out, &trainval(&data, experiment)?),
        Source::Silicon { data, row, out } => return write(&out, &silicon(&data, row)?),
        Source::VllmBench { data, scenario, name, seed, out } => {
            return write(&out, &[vllm_bench(&data, scenario.as_deref(), name, seed)?]);
        }
    };
    let names = if names.is_empty() { measured::list(source, &data)? } else { names };
    let mut runs = Vec::with_capacity(names.len());
    for name in names {
        let c: Converted = measured::convert(source, &data, &name)?;
        let baseline = Some(c.baseline_jsonl());
        let mut notes = c.notes;
        if let Some(t) = c.client_timeout_s {
            notes.push(format!("replay with `blis-sweep run --timeout {t}`, the real client's timeout"));
        }
        runs.push(Replay { name, workload: c.workload, scenario_yaml: Some(c.scenario_yaml), baseline, notes });
    }
    write(&out, &runs)
}
