//! The requests in flight: one slot each (reused when a request leaves,
//! with a generation that tells its events from its successor's), and each
//! request's DAG progress and measurements so far.

use super::outcome::NodeOutcome;
use crate::workload::Request;

/// Every request in flight.
#[derive(Default)]
pub(super) struct Requests {
    /// By slot.
    pub(super) active: Vec<Option<Active>>,
    pub(super) free_slots: Vec<u32>,
    pub(super) in_flight: usize,
    /// The next request's position in the input.
    pub(super) next_index: u64,
    /// How many requests each slot has held.
    pub(super) slot_generations: Vec<u32>,
}

impl Requests {
    /// The request in `slot`.
    pub(super) fn get_mut(&mut self, slot: u32) -> &mut Active {
        self.active[slot as usize].as_mut().expect("live request")
    }

    /// Whether `slot` still holds the request of `generation`.
    pub(super) fn is_live(&self, slot: u32, generation: u32) -> bool {
        self.active[slot as usize].as_ref().is_some_and(|a| a.generation == generation)
    }
}

/// A request in flight: its DAG's progress and what was measured so far.
pub(super) struct Active {
    pub(super) index: u64,
    /// The slot's generation when this request took it.
    pub(super) generation: u32,
    pub(super) request: Request,
    pub(super) arrival_us: u64,
    pub(super) send_us: u64,
    pub(super) nodes: Vec<NodeOutcome>,
    /// Per node, what its start waits on (one allocation per request).
    pub(super) progress: Vec<NodeProgress>,
    pub(super) unresolved: usize,
    /// With `affinity: request`, the replica its first llm node took.
    pub(super) pinned: Option<u32>,
    /// With `affinity: sibling-group`: each node's group, and the replica
    /// each group's first llm node took.
    pub(super) siblings: Option<Box<SiblingPins>>,
    /// Sent inside the measurement window.
    pub(super) in_window: bool,
}

/// `affinity: sibling-group`'s state of one request.
#[derive(Debug)]
pub(super) struct SiblingPins {
    /// Each node's sibling group.
    pub(super) group: Vec<u32>,
    /// The replica each group's first llm node took.
    pub(super) replica: Vec<Option<u32>>,
}

/// A node's wait for its predecessors.
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeProgress {
    /// Predecessors not resolved yet.
    pub(super) pending_preds: u32,
    /// The first predecessor that failed, if any.
    pub(super) failed_pred: Option<u32>,
    /// When its last finished predecessor finished (or the send), µs.
    pub(super) ready_us: u64,
    /// An llm node prefilled on one replica and decoded on another.
    pub(super) split: Option<Split>,
    /// Routed and in the routing hop (`router.env.routing_latency_ms`).
    pub(super) in_hop: bool,
}

/// Where a split llm node stands (prefill/decode disaggregation).
#[derive(Debug, Clone, Copy)]
pub(super) struct Split {
    /// The prefill replica (an instance index).
    pub(super) prefill: u32,
    /// The decode replica.
    pub(super) decode: u32,
    /// The prefill's engine slot, whose blocks it holds for the transfer.
    pub(super) prefill_slot: Option<u32>,
    pub(super) stage: SplitStage,
}

/// The stages of a split llm node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SplitStage {
    /// At the prefill replica (its front end or engine).
    Prefill,
    /// At the decode replica, its KV still held by the prefill replica.
    Decode,
    /// The KV has landed: the prefill replica let go of it.
    Landed,
}
