//! Request DAGs: the typed values, and the one place the workload / result
//! JSONL format is read ([`reader`]) and written ([`writer`]).
//!
//! The format is the seed's `000_…` document: one request DAG per line, with
//! `llm` and `tool_call` sub-requests. A result file is the same DAG with a
//! `token_latency` array (and, for nodes that could not run, an `error`) on
//! every llm node. Times are seconds in the files and integer microseconds
//! inside the simulator; conversion happens here, once.

pub mod agentic;
pub mod generate;
pub mod import;
pub mod reader;
pub mod timeline;
mod traffic;
mod types;
pub mod writer;

pub use traffic::{SloClass, Traffic, class_names};
pub use types::{
    LlmCall, NodeKind, NodeResult, PromptBlocks, Request, RequestId, SeededProgress, SubRequest, checked_seconds_to_us,
    seconds_to_us,
};
