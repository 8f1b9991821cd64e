//! `blis-sweep convert`: real vLLM runs into a workload, a baseline result
//! JSONL and a scenario, ready for `run` and `calibrate`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::atomic;
use crate::workload::import::convert::{self, Converted};
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
}

/// Writes every converted run's three files, all committed only once all
/// of them are complete: a failing conversion leaves no output.
fn write(out: &Path, converted: &[(String, Converted)]) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("{}: cannot create", out.display()))?;
    let mut files = Vec::new();
    for (name, c) in converted {
        let mut workload = Vec::new();
        for r in &c.workload {
            write_workload_row(&mut workload, r);
        }
        for (suffix, bytes) in [
            ("workload.jsonl", workload),
            ("baseline.jsonl", c.baseline_jsonl()),
            ("scenario.yaml", c.scenario_yaml.clone().into_bytes()),
        ] {
            let path = out.join(format!("{name}.{suffix}"));
            let mut f = atomic::create(&path)?;
            f.write_all(&bytes).with_context(|| format!("{}: write failed", path.display()))?;
            files.push(f);
        }
    }
    for f in files {
        atomic::commit(f)?;
    }
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

pub(crate) fn run(args: ConvertArgs) -> anyhow::Result<()> {
    let (source, data, names, out) = match args.source {
        Source::BlisVllmH100 { data, experiment, out } => (convert::Source::BlisVllmH100, data, experiment, out),
        Source::Llmservingsim { data, run, out } => (convert::Source::Llmservingsim, data, run, out),
    };
    let names = if names.is_empty() { convert::list(source, &data)? } else { names };
    let mut converted = Vec::with_capacity(names.len());
    for name in names {
        let c = convert::convert(source, &data, &name)?;
        converted.push((name, c));
    }
    write(&out, &converted)
}
