//! The simulation core: one single-threaded discrete-event simulation of one
//! vLLM engine serving request DAGs. [`Simulation`] owns the clock, the event
//! queue, the DAG driver state and the engine (scheduler + paged KV cache);
//! finished requests leave through a push-style [`ResultSink`]. Nothing here
//! reads files, prints, looks at a wall clock or holds global state.

mod driver;
mod engine;
mod kv_cache;
mod order;
mod queue;
mod step_trace;

pub use driver::{Client, FinishedRequest, NodeError, NodeOutcome, RequestStatus, ResultSink, Simulation};
pub use engine::{EngineConfig, EngineStats};
pub use order::InputOrder;
pub use step_trace::{EngineStep, NodeRef};
