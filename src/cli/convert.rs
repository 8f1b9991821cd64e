//! `blis-sweep convert`: real vLLM runs into a workload, a baseline result
//! JSONL and a scenario, ready for `run` and `calibrate`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::atomic;
use crate::workload::import::convert::{self, Converted};
use crate::workload::import::{blis_trainval, silicon};
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
}

/// Writes every converted run's three files, all committed only once all
/// of them are complete: a failing conversion leaves no output.
fn write(out: &Path, converted: &[(String, Converted)]) -> anyhow::Result<()> {
    let files = converted.iter().flat_map(|(name, c)| {
        [
            (format!("{name}.workload.jsonl"), workload_jsonl(&c.workload)),
            (format!("{name}.baseline.jsonl"), c.baseline_jsonl()),
            (format!("{name}.scenario.yaml"), c.scenario_yaml.clone().into_bytes()),
        ]
    });
    write_all(out, files)?;
    for (name, c) in converted {
        eprintln!("{name}: {} requests -> {}", c.workload.len(), out.display());
        for note in &c.notes {
            eprintln!("  note: {note}");
        }
        if let Some(t) = c.client_timeout_s {
            eprintln!("  note: replay with `blis-sweep run --timeout {t}`, the real client's timeout");
        }
    }
    Ok(())
}

fn workload_jsonl(requests: &[crate::workload::Request]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for r in requests {
        write_workload_row(&mut bytes, r);
    }
    bytes
}

/// Writes `(file name, bytes)` under `out`, all committed only once every
/// one is complete.
fn write_all(out: &Path, files: impl Iterator<Item = (String, Vec<u8>)>) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("{}: cannot create", out.display()))?;
    let mut written = Vec::new();
    for (name, bytes) in files {
        let path = out.join(name);
        let mut f = atomic::create(&path)?;
        f.write_all(&bytes).with_context(|| format!("{}: write failed", path.display()))?;
        written.push(f);
    }
    for f in written {
        atomic::commit(f)?;
    }
    Ok(())
}

/// The training runs' workloads and scenarios; their truth stays in
/// aggregates_trainval.csv.
/// Without names, every run that can be replayed is, and each that cannot
/// is named with why (Llama 4's runs); a named run that cannot stops it.
fn trainval(data: &Path, names: Vec<String>, out: &Path) -> anyhow::Result<()> {
    let all = names.is_empty();
    let names = if all { blis_trainval::list(data)? } else { names };
    let mut runs = Vec::with_capacity(names.len());
    for name in names {
        match blis_trainval::load(data, &name) {
            Ok(r) => runs.push((name, r)),
            Err(e) if all => eprintln!("{name}: skipped: {e}"),
            Err(e) => return Err(e.into()),
        }
    }
    let files = runs.iter().flat_map(|(name, r)| {
        [
            (format!("{name}.workload.jsonl"), workload_jsonl(&r.workload)),
            (format!("{name}.scenario.yaml"), r.scenario_yaml.clone().into_bytes()),
        ]
    });
    write_all(out, files)?;
    for (name, r) in &runs {
        eprintln!("{name}: {} requests -> {}", r.workload.len(), out.display());
        for note in &r.notes {
            eprintln!("  note: {note}");
        }
    }
    Ok(())
}

/// The measured deployments' workloads and scenarios; their truth stays in
/// silicon_sample.csv.
fn silicon(data: &Path, names: Vec<String>, out: &Path) -> anyhow::Result<()> {
    let names = if names.is_empty() { silicon::list(data)? } else { names };
    let mut runs = Vec::with_capacity(names.len());
    for name in names {
        let r = silicon::load(data, &name)?;
        runs.push((name, r));
    }
    let files = runs.iter().flat_map(|(name, r)| {
        [
            (format!("{name}.workload.jsonl"), workload_jsonl(&r.workload)),
            (format!("{name}.scenario.yaml"), r.scenario_yaml.clone().into_bytes()),
        ]
    });
    write_all(out, files)?;
    for (name, r) in &runs {
        eprintln!(
            "{name}: {} requests -> {}; replay with `blis-sweep run --concurrency {}`",
            r.workload.len(),
            out.display(),
            r.concurrency
        );
    }
    Ok(())
}

pub(crate) fn run(args: ConvertArgs) -> anyhow::Result<()> {
    let (source, data, names, out) = match args.source {
        Source::BlisVllmH100 { data, experiment, out } => (convert::Source::BlisVllmH100, data, experiment, out),
        Source::Llmservingsim { data, run, out } => (convert::Source::Llmservingsim, data, run, out),
        Source::BlisTrainval { data, experiment, out } => return trainval(&data, experiment, &out),
        Source::Silicon { data, row, out } => return silicon(&data, row, &out),
    };
    let names = if names.is_empty() { convert::list(source, &data)? } else { names };
    let mut converted = Vec::with_capacity(names.len());
    for name in names {
        let c = convert::convert(source, &data, &name)?;
        converted.push((name, c));
    }
    write(&out, &converted)
}
