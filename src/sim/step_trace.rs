//! The step trace: one record per engine step, for checking the scheduler
//! against vLLM's and for seeing why a run behaved as it did. Built only when
//! asked for ([`super::Simulation::set_step_trace`]); written as JSONL by
//! `crate::output::step_row`, the one writer of the format.

use crate::workload::RequestId;

/// An llm node of a request, as the step trace names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    /// The request's id, as in the workload.
    pub request_id: RequestId,
    /// The sub-request index.
    pub node: u32,
}

/// One engine step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStep {
    /// 0-based count of steps its replica executed before this one.
    pub index: u64,
    /// The replica that ran it, in a cluster of more than one.
    pub replica: Option<u32>,
    /// When it started executing, µs.
    pub start_us: u64,
    /// Its price from the latency model, µs.
    pub duration_us: u64,
    /// Tokens computed per request, in scheduling order (running requests,
    /// then admissions).
    pub scheduled: Vec<(NodeRef, u32)>,
    /// Requests admitted from the waiting queue (new or resumed after a
    /// preemption), with the tokens they start with: prefix-cache hit, or
    /// seeded KV.
    pub admitted: Vec<(NodeRef, u32)>,
    /// Requests preempted while scheduling this step, in order (first those
    /// preempted by an earlier scheduling that scheduled nothing).
    pub preempted: Vec<NodeRef>,
    /// KV blocks referenced by requests once the step was scheduled (vLLM's
    /// null block not counted).
    pub kv_blocks_used: u32,
}
