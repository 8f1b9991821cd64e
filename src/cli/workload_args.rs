//! The workload flags `run` and `observe` share — a workload JSONL, a trace
//! in another format (`--input FORMAT:PATH`), a TraceV2 pair or a generator
//! (`--workload-spec`, `--preset`/`--rate`/`--num-requests`: `generate`'s
//! spec, read by its code), with the importers' flags — and what they name.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::generate::Spec;
use super::import::{ImportFlags, parse_input};
use crate::sim::Client;
use crate::workload::import::common::ImportOptions;
use crate::workload::import::{self, ImportFormat};

#[derive(Debug, clap::Args)]
pub(crate) struct WorkloadArgs {
    /// Workload JSONL: one request DAG per line, sorted by arrival_time.
    #[arg(value_name = "WORKLOAD.jsonl", required_unless_present_any = GENERATOR_OR_TRACE, conflicts_with_all = GENERATOR_OR_TRACE)]
    pub(crate) workload: Option<PathBuf>,
    /// A trace in another format, read directly: FORMAT:PATH, FORMAT one of
    /// `blis-sweep import --help`'s.
    #[arg(long, value_name = "FORMAT:PATH", conflicts_with_all = ["trace_header", "workload_spec", "preset", "rate", "num_requests"])]
    pub(crate) input: Option<String>,
    /// A generator spec (YAML, as `generate --spec` and a plan's
    /// `workload.generate` take it): its requests, generated as they are
    /// sent, seeded by --seed.
    #[arg(long, value_name = "SPEC.yaml", conflicts_with = "trace_header")]
    pub(crate) workload_spec: Option<PathBuf>,
    /// Generator: chatbot | summarization | contentgen | multidoc (BLIS's
    /// lengths), over --workload-spec's preset or alone with --rate and
    /// --num-requests.
    #[arg(long, conflicts_with = "trace_header")]
    pub(crate) preset: Option<String>,
    /// Generator: mean requests per second (over --workload-spec's rate).
    #[arg(long, value_name = "PER_S", conflicts_with = "trace_header")]
    pub(crate) rate: Option<f64>,
    /// Generator: requests to generate (over --workload-spec's num_requests).
    #[arg(long, value_name = "N", conflicts_with = "trace_header")]
    pub(crate) num_requests: Option<u64>,
    /// A BLIS TraceV2 pair, as `blis replay` takes it: its header…
    #[arg(long, value_name = "TRACE.yaml", requires = "trace_data")]
    pub(crate) trace_header: Option<PathBuf>,
    /// …and its data.
    #[arg(long, value_name = "TRACE.csv", requires = "trace_header")]
    pub(crate) trace_data: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) import: ImportFlags,
}

/// The flags other than a workload file that name where requests come from.
const GENERATOR_OR_TRACE: [&str; 6] = ["input", "trace_header", "workload_spec", "preset", "rate", "num_requests"];

/// Where the requests come from, as the flags say.
pub(crate) enum Source<'a> {
    /// A workload JSONL.
    File(&'a Path),
    /// A generator, and the seed of its streams.
    Generate(Box<Spec>, u64),
    /// A trace an importer reads: its format, its path, and a TraceV2's data
    /// file when given apart from its header.
    Trace(ImportFormat, PathBuf, Option<PathBuf>),
}

impl WorkloadArgs {
    /// The source the flags name; a trace's session flags beside a source
    /// without sessions are refused, not ignored.
    pub(crate) fn source(&self) -> anyhow::Result<Source<'_>> {
        let source = self.named_source()?;
        if let (Source::File(_) | Source::Generate(..), Some(flag)) = (&source, self.import.trace_only_flag()) {
            bail!(
                "{flag}: only a trace's sessions are pooled or re-timed (--input FORMAT:PATH or a TraceV2 pair); a workload file's or a generator's requests are capped with --concurrency N"
            );
        }
        Ok(source)
    }

    fn named_source(&self) -> anyhow::Result<Source<'_>> {
        if self.workload_spec.is_some() || self.preset.is_some() || self.rate.is_some() || self.num_requests.is_some() {
            let spec = Spec::load(
                "--workload-spec",
                self.workload_spec.as_deref(),
                self.preset.clone(),
                self.rate,
                self.num_requests,
            )?;
            return Ok(Source::Generate(Box::new(spec), self.import.options()?.seed));
        }
        Ok(match (&self.workload, &self.input, &self.trace_header) {
            (Some(path), ..) => Source::File(path),
            (None, Some(text), _) => {
                let (format, path) = parse_input(text)?;
                Source::Trace(format, path, None)
            }
            (None, None, Some(h)) => Source::Trace(ImportFormat::TraceV2, h.clone(), self.trace_data.clone()),
            (None, None, None) => {
                bail!("give a workload file, --input FORMAT:PATH, --trace-header/--trace-data or --workload-spec")
            }
        })
    }

    /// Every input file the flags name, with its flag (a TraceV2 `--input`'s
    /// data beside its header too): no output may be one of them.
    pub(crate) fn inputs(&self) -> anyhow::Result<Vec<(&'static str, PathBuf)>> {
        let input = self.input.as_deref().map(parse_input).transpose()?;
        let beside = match &input {
            Some((ImportFormat::TraceV2, header)) => Some(import::tracev2::data_path(header)),
            _ => None,
        };
        let given = [
            ("WORKLOAD", self.workload.clone()),
            ("--input", input.map(|(_, p)| p)),
            ("--input (its TraceV2 data)", beside),
            ("--trace-header", self.trace_header.clone()),
            ("--trace-data", self.trace_data.clone()),
            ("--workload-spec", self.workload_spec.clone()),
        ];
        Ok(given.into_iter().filter_map(|(flag, path)| Some((flag, path?))).collect())
    }
}

/// The client of a pool of `--concurrent-sessions N` (a TraceV2 corpus's
/// sessions, all arriving at 0): `N` requests in flight, first come first
/// sent, a session admitted as one completes — the simulator's capped client,
/// and the observe driver's, so `run` and `observe` keep a pool alike. `None`
/// without a pool. A pool is the client: refused beside `--concurrency`
/// (`capped`).
fn pool_client(options: &ImportOptions, capped: bool) -> anyhow::Result<Option<Client>> {
    let Some(limit) = options.concurrent_sessions else { return Ok(None) };
    if capped {
        bail!("--concurrent-sessions: the pool is the client; drop --concurrency");
    }
    Ok(Some(Client::Capped { limit }))
}

/// The client an imported trace brings, where the command line gives none
/// (`capped`: `--concurrency`): a TraceV2 pool's ([`pool_client`]), or a
/// `vllm bench serve` result's `--max-concurrency`. `run` and `observe`
/// send a trace alike.
pub(crate) fn trace_client(
    format: ImportFormat,
    path: &Path,
    options: &ImportOptions,
    capped: bool,
) -> anyhow::Result<Option<Client>> {
    if let Some(client) = pool_client(options, capped)? {
        return Ok(Some(client));
    }
    if format == ImportFormat::VllmBench && !capped {
        return Ok(crate::workload::import::vllm_bench::max_concurrency(path)?.map(|limit| Client::Capped { limit }));
    }
    Ok(None)
}
