//! blis-sweep: a discrete-event simulator of vLLM inference serving.
//!
//! Data flows one way: [`workload`] reads request DAGs, [`sim`] drives them
//! through a model of vLLM's V1 scheduler priced by a [`latency`] model for
//! the deployment a [`scenario`] names, and finished requests leave through a
//! push-style sink to [`metrics`] and the JSONL writers of [`output`]. The
//! simulation core does no I/O and knows no file format; [`cli`] owns files,
//! printing and exit codes.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod agentx;
pub mod arch;
mod atomic;
pub mod calibrate;
pub mod capacity;
pub mod cli;
pub mod hash;
pub mod histogram;
pub mod latency;
pub mod metrics;
pub mod observe;
pub mod output;
pub mod report;
pub mod scenario;
pub mod sim;
mod spool;
pub mod sweep;
pub mod workload;
pub mod yaml;
