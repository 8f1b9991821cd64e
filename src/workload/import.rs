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
//! - [`llmservingsim_dataset`]: LLMServingSim's request datasets (arrival
//!   ns, lengths, the prompts' token ids), as the ISPASS'26 artifact ships
//!   them.
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
pub mod ispass26;
pub mod llmservingsim;
pub mod llmservingsim_dataset;
pub mod measured;
pub mod mooncake;
pub mod silicon;
pub mod tracev2;

use std::path::Path;

use self::common::{ImportError, ImportOptions, Requests};

/// The formats `--input FORMAT:PATH` takes.
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
}

impl ImportFormat {
    /// Every format, as named on the command line.
    pub const ALL: [ImportFormat; 5] = [
        ImportFormat::Mooncake,
        ImportFormat::Azure,
        ImportFormat::AgentCalls,
        ImportFormat::TraceV2,
        ImportFormat::LlmservingsimDataset,
    ];

    /// The name `--input` and plans use.
    pub fn name(self) -> &'static str {
        match self {
            ImportFormat::Mooncake => "mooncake",
            ImportFormat::Azure => "azure",
            ImportFormat::AgentCalls => "agent-calls",
            ImportFormat::TraceV2 => "tracev2",
            ImportFormat::LlmservingsimDataset => "llmservingsim-dataset",
        }
    }

    /// The format called `name`, or a message listing them.
    pub fn parse(name: &str) -> Result<ImportFormat, String> {
        Self::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
            format!("unknown format `{name}`; available: {}", Self::ALL.map(ImportFormat::name).join(", "))
        })
    }
}

/// Opens `path` as `format`.
pub fn open(format: ImportFormat, path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    match format {
        ImportFormat::Mooncake => mooncake::open(path),
        ImportFormat::Azure => azure::open(path),
        ImportFormat::AgentCalls => agent_calls::open(path, options),
        ImportFormat::TraceV2 => tracev2::open(path, options),
        ImportFormat::LlmservingsimDataset => llmservingsim_dataset::open(path),
    }
}
