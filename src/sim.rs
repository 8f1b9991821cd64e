//! The simulation core: one single-threaded discrete-event simulation of one
//! vLLM engine serving request DAGs. [`run`] is the one way to run it: a
//! request source in, a push-style [`Sink`] out (results in input order,
//! engine steps, a finish hook; every callback fallible). [`Simulation`],
//! underneath, owns the clock, the event queue, the DAG driver state and the
//! engine (scheduler + paged KV cache). Nothing here reads files, prints,
//! looks at a wall clock or holds global state.

mod driver;
mod engine;
mod kv_cache;
mod order;
mod queue;
mod run;
mod step_trace;

pub use driver::{Client, FinishedRequest, NodeError, NodeOutcome, RequestStatus, ResultSink, Simulation};
pub use engine::{EngineConfig, EngineStats};
pub use order::InputOrder;
pub use run::{RunConfig, RunError, RunSummary, Sink, Tee, run};
pub use step_trace::{EngineStep, NodeRef};
