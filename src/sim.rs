//! The simulation core: one single-threaded discrete-event simulation of
//! vLLM engines — one, replicas behind a router, or pools of them with
//! roles (mixed, prefill, decode) and KV moving between them — serving
//! request DAGs. [`run`] is the one way to run it: a request source in, a
//! push-style [`Sink`] out (results in input order, engine steps, a finish
//! hook; every callback fallible). [`Simulation`], underneath, owns the
//! clock, the event queue, the requests in flight, the client and the
//! cluster. Nothing here reads files, prints, looks at a wall clock or holds
//! global state.
//!
//! Reading guide: `run.rs` (the run path and the sink), `simulation.rs` (the
//! struct and the event loop), `event.rs` (what the queue holds);
//! `client.rs` + `send.rs` (how requests are sent, admitted or rejected),
//! `gateway.rs` + `gateway/` (admission and flow control in front of the
//! router, off by default),
//! `requests.rs` + `dag.rs` (the requests in flight and their nodes);
//! `pool.rs` + `cluster.rs` (pools, routers, KV links), `replica.rs` (one
//! replica), `router.rs` (which replica), `steps.rs` (engine steps),
//! `disagg.rs` (prefill/decode disaggregation); `engine.rs` + `engine/`
//! (vLLM's scheduler, its KV connector seam) over `kv_cache.rs` (the paged
//! KV cache); `outcome.rs` (what leaves); `autoscale.rs` (a pool's replica
//! count following a metric).

mod autoscale;
mod client;
mod cluster;
mod dag;
mod disagg;
mod engine;
mod event;
mod gateway;
mod kv_cache;
mod offload_load;
mod order;
mod outcome;
mod pool;
mod queue;
mod replica;
mod requests;
mod router;
#[cfg(test)]
mod router_tests;
mod run;
mod send;
mod simulation;
mod step_trace;
mod steps;
mod window;

pub use autoscale::{AutoscaleConfig, AutoscaleReport, ScaleMetric};
pub use client::Client;
pub use engine::{
    AttentionSpan, ConnectorKind, DiskTier, EaglePrefixRule, EngineConfig, EngineStats, KvOffload, LoraConfig,
    LoraLoad, OffloadPolicy, Reach, SchedulingPolicy, SpecDecode, SpecMethod, SpecStats,
};
pub use gateway::{
    AdmissionConfig, AdmissionPolicy, DEFAULT_KV_CACHE_UTIL_THRESHOLD, DEFAULT_QUEUE_DEPTH_THRESHOLD, Fairness,
    FlowControlConfig, GatewayConfig, GatewayStats, QueueOrder, Saturation,
};
pub use kv_cache::KvGroupKind;
pub use order::InputOrder;
pub use outcome::{CLOCK_LIMIT_US, ClockOverflow, FinishedRequest, NodeError, NodeOutcome, RequestStatus, ResultSink};
pub use pool::{KvTransferConfig, PdDecider, PoolConfig, Role};
pub use router::{Affinity, RouterConfig, RouterEnv, RoutingPolicy, Scorer};
pub use run::{REPLAY_HORIZON_AT_ZERO_US, RunConfig, RunError, RunSummary, Sink, Tee, replay_horizon_us, run};
pub use simulation::Simulation;
pub use step_trace::{EngineStep, NodeRef};
pub use window::{Measurement, Warmup, Window};
