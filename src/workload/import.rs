//! Traces in formats users already have, read as request sources: each
//! importer streams [`Request`](crate::workload::Request)s the simulator consumes directly (`run --input
//! FORMAT:PATH`, a plan's `workload: {import: FORMAT, path: …}`), and
//! `blis-sweep import` writes them as workload JSONL when wanted. One file per
//! format; each documents its mapping and rejects a bad row with
//! `FILE:LINE: column: reason`.
//!
//! - [`mooncake`]: Mooncake's FAST'25 traces (`timestamp` ms, lengths,
//!   `hash_ids` of 512-token blocks), prompts kept as block identities.
//! - [`azure`]: the Azure LLM inference traces of 2023 (Splitwise).
//! - [`agent_calls`]: agent sessions from `lmcache-agent-trace`'s per-call
//!   table, each a request DAG (or, `fixed-accumulate`, one request per call at
//!   its recorded time).
//! - [`tracev2`]: BLIS's trace pair (header YAML + data CSV), with its
//!   session modes.
//! - [`weka`]: Weka's agentic-coding sessions (the AgentX corpus), each a
//!   request DAG whose subagents fan out and join ([`weka_dag`]).
//! - [`llmservingsim_dataset`]: LLMServingSim's request datasets (arrival
//!   ns, lengths, the prompts' token ids), as the ISPASS'26 artifact ships
//!   them.
//! - [`vllm_bench`]: `vllm bench serve --save-detailed` result files (also a
//!   per-token baseline for `calibrate`, through `convert vllm-bench`).
//! - [`sharegpt`]: ShareGPT conversations, each a session of chained calls.
//! - [`csv`]: a plain CSV of arrival, input and output tokens (sessions and
//!   shared-prefix groups optional).
//! - [`inference_perf`]: an inference-perf config's `shared_prefix` run, the
//!   generator the BLIS training runs replay too.
//! - [`otel`]: OpenTelemetry GenAI spans, each session a request DAG whose
//!   overlapping calls run in parallel.
//! - [`servegen`]: ServeGen's per-client windows (rate, arrival pattern,
//!   length PMFs), generated into requests as ServeGen's own generator does.
//!
//! Real vLLM runs with their measurements (`blis-sweep convert`, fit, the
//! calibration matrix) come in through [`measured`], the one list of their
//! sources: a workload, a baseline and a scenario each ([`blis_vllm_h100`],
//! [`llmservingsim`]), or the aggregates of a run ([`blis_trainval`],
//! [`blis_eval`], [`silicon`], [`ispass26`]). [`common`] holds what every
//! importer shares; this file only names the trace formats and opens them.

pub mod agent_calls;
pub mod azure;
pub mod blis_eval;
pub mod blis_trainval;
pub mod blis_vllm_h100;
pub mod common;
pub mod csv;
pub mod inference_perf;
pub mod ispass26;
pub mod llmservingsim;
pub mod llmservingsim_dataset;
pub mod measured;
pub mod mooncake;
pub mod otel;
pub mod servegen;
pub mod sharegpt;
pub mod silicon;
pub mod tracev2;
pub mod vllm_bench;
pub mod weka;
pub mod weka_dag;

use std::path::Path;

use self::common::{ImportError, ImportOptions, Requests};

/// The formats `--input FORMAT:PATH` takes; named, described and opened by
/// the one list of importers below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFormat {
    /// See [`mooncake`].
    Mooncake,
    /// See [`azure`].
    Azure,
    /// See [`agent_calls`].
    AgentCalls,
    /// See [`tracev2`]: the path is the header, the data beside it.
    TraceV2,
    /// See [`llmservingsim_dataset`].
    LlmservingsimDataset,
    /// See [`weka`].
    Weka,
    /// See [`vllm_bench`].
    VllmBench,
    /// See [`sharegpt`].
    Sharegpt,
    /// See [`csv`].
    Csv,
    /// See [`inference_perf`].
    InferencePerf,
    /// See [`otel`].
    Otel,
    /// See [`servegen`].
    Servegen,
}

/// One importer: its format's name, what it reads and how to open it.
struct Importer {
    format: ImportFormat,
    /// The name `--input` and plans use.
    name: &'static str,
    /// What it reads, for help text.
    reads: &'static str,
    open: fn(&Path, &ImportOptions) -> Result<Requests, ImportError>,
}

/// The importers, in the order messages list them: every format is named,
/// described and opened here alone.
const IMPORTERS: &[Importer] = &[
    Importer {
        format: ImportFormat::Mooncake,
        name: "mooncake",
        reads: "Mooncake's FAST'25 traces (JSON lines; prompts as 512-token block ids)",
        open: |path, _| mooncake::open(path),
    },
    Importer {
        format: ImportFormat::Azure,
        name: "azure",
        reads: "the Azure LLM inference traces of 2023 (CSV)",
        open: |path, _| azure::open(path),
    },
    Importer {
        format: ImportFormat::AgentCalls,
        name: "agent-calls",
        reads: "lmcache-agent-trace's per-call table, each session a request DAG",
        open: agent_calls::open,
    },
    Importer {
        format: ImportFormat::TraceV2,
        name: "tracev2",
        reads: "BLIS's TraceV2 pair (PATH the header YAML, the data CSV beside it)",
        open: tracev2::open,
    },
    Importer {
        format: ImportFormat::LlmservingsimDataset,
        name: "llmservingsim-dataset",
        reads: "LLMServingSim's request datasets (JSON lines with token ids)",
        open: |path, _| llmservingsim_dataset::open(path),
    },
    Importer {
        format: ImportFormat::Weka,
        name: "weka",
        reads: "Weka/kv-cache-tester agent sessions (JSON lines or files; subagents as DAG branches)",
        open: weka::open,
    },
    Importer {
        format: ImportFormat::VllmBench,
        name: "vllm-bench",
        reads: "`vllm bench serve --save-result --save-detailed` result JSON (lengths, TTFTs, ITLs)",
        open: vllm_bench::open,
    },
    Importer {
        format: ImportFormat::Sharegpt,
        name: "sharegpt",
        reads: "ShareGPT conversations (a JSON array), each a session of chained calls",
        open: sharegpt::open,
    },
    Importer {
        format: ImportFormat::Csv,
        name: "csv",
        reads: "a plain CSV: arrival, input_tokens, output_tokens[, session, prefix, prefix_tokens]",
        open: csv::open,
    },
    Importer {
        format: ImportFormat::InferencePerf,
        name: "inference-perf",
        reads: "an inference-perf config YAML (shared_prefix data, constant/poisson stages), its requests generated",
        open: inference_perf::open,
    },
    Importer {
        format: ImportFormat::Otel,
        name: "otel",
        reads: "OpenTelemetry GenAI spans (OTLP JSON, span lists, JSON lines; a file or a folder), sessions as request DAGs",
        open: otel::open,
    },
    Importer {
        format: ImportFormat::Servegen,
        name: "servegen",
        reads: "ServeGen's client data (a folder of chunk-<id>-trace.csv + -dataset.json, or one trace), generated at its rates",
        open: servegen::open,
    },
];

impl ImportFormat {
    /// Every format, in the list's order.
    pub fn all() -> impl Iterator<Item = ImportFormat> {
        IMPORTERS.iter().map(|i| i.format)
    }

    fn importer(self) -> &'static Importer {
        IMPORTERS.iter().find(|i| i.format == self).expect("every format is listed")
    }

    /// The name `--input` and plans use.
    pub fn name(self) -> &'static str {
        self.importer().name
    }

    /// What it reads, for help text.
    pub fn reads(self) -> &'static str {
        self.importer().reads
    }

    /// The format called `name`, or a message listing them.
    pub fn parse(name: &str) -> Result<ImportFormat, String> {
        Self::all().find(|f| f.name() == name).ok_or_else(|| {
            format!(
                "unknown format `{name}`; available: {}",
                Self::all().map(ImportFormat::name).collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// Every format with what it reads, one per line, for `--help`.
    pub fn help() -> String {
        Self::all().map(|f| format!("{}: {}", f.name(), f.reads())).collect::<Vec<_>>().join("\n")
    }
}

/// Opens `path` as `format`.
pub fn open(format: ImportFormat, path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    (format.importer().open)(path, options)
}
