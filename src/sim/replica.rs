//! One replica of a cluster: an engine with its own scheduler, KV cache and
//! step clock, what its front end holds, and the step-trace records of its
//! steps in flight. Every replica runs on the simulation's one event queue.

use super::engine::{Engine, EngineConfig};
use super::step_trace::{EngineStep, NodeRef};

pub(super) struct Replica {
    pub(super) engine: Engine,
    /// The pool it belongs to (an index into the simulation's pools).
    pub(super) pool: u32,
    /// Llm nodes routed here still in the server's front end (HTTP,
    /// tokenization), not yet in the engine's queues.
    pub(super) in_transit: u32,
    /// Step trace: the record of the step executing and of the one queued
    /// after it (async scheduling), named when they were scheduled.
    pub(super) trace_executing: EngineStep,
    pub(super) trace_queued: EngineStep,
    /// Preempted by a scheduling that scheduled nothing: reported with the
    /// next step.
    pub(super) trace_carried: Vec<NodeRef>,
    /// Steps this replica started.
    pub(super) steps_started: u64,
    /// KV offload: when its host link is free of the loads queued on it.
    pub(super) host_link_free_us: u64,
}

impl Replica {
    pub(super) fn new(config: EngineConfig, pool: u32) -> Replica {
        Replica {
            engine: Engine::new(config),
            pool,
            in_transit: 0,
            trace_executing: EngineStep::default(),
            trace_queued: EngineStep::default(),
            trace_carried: Vec::new(),
            steps_started: 0,
            host_link_free_us: 0,
        }
    }

    /// Requests waiting: in the front end or the engine's waiting queue.
    pub(super) fn waiting(&self) -> u32 {
        self.in_transit + self.engine.num_waiting() as u32
    }

    /// Requests in the engine's running batch.
    pub(super) fn running(&self) -> u32 {
        self.engine.num_running() as u32
    }
}
