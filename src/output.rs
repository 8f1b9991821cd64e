//! The files a run writes, outside the simulation core (which knows no file
//! format): result and step-trace JSONL ([`jsonl`]) and BLIS's TraceV2 pair
//! ([`tracev2`]), each written as a push-style sink.

mod jsonl;
mod tracev2;

pub use jsonl::{JsonlWriter, result_row, step_row};
pub use tracev2::{ObservedServer, TraceV2Server, TraceV2Writer};
