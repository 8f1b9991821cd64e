//! The simulation core: one single-threaded discrete-event simulation of one
//! vLLM engine serving request DAGs. [`run`] is the one way to run it: a
//! request source in, a push-style [`Sink`] out (results in input order,
//! engine steps, a finish hook; every callback fallible). [`Simulation`],
//! underneath, owns the clock, the event queue, the client and DAG state and the
//! engine (scheduler + paged KV cache). Nothing here reads files, prints,
//! looks at a wall clock or holds global state.

mod client;
mod dag;
mod engine;
mod kv_cache;
mod order;
mod outcome;
mod queue;
mod run;
mod simulation;
mod step_trace;

pub use client::Client;
pub use engine::{EngineConfig, EngineStats};
pub use order::InputOrder;
pub use outcome::{FinishedRequest, NodeError, NodeOutcome, RequestStatus, ResultSink};
pub use run::{RunConfig, RunError, RunSummary, Sink, Tee, run};
pub use simulation::Simulation;
pub use step_trace::{EngineStep, NodeRef};
