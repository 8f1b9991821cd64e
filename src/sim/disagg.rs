//! Prefill/decode disaggregation, as vLLM's `NixlConnector` behind llm-d's
//! P/D sidecar runs it: a split llm node is prefilled on a prefill replica
//! (`max_tokens: 1`; that token is discarded), which holds its blocks; the
//! proxy then sends it to the decode replica, whose scheduler allocates
//! blocks for the prompt and reads the KV over the link
//! (`WAITING_FOR_REMOTE_KVS`); when it lands, the prefill replica frees its
//! blocks and the decode replica computes the last prompt token and
//! generates. TTFT therefore holds both front ends, the prefill, the
//! transfer and the decode replica's first step.

use super::dag::SplitStage;
use super::engine::{Departure, Owner};
use super::outcome::{ClockOverflow, ResultSink};
use super::simulation::{Event, Simulation};
use crate::latency::LatencyModel;

impl<L: LatencyModel> Simulation<L> {
    /// Whether `owner` is a split node still at its prefill replica.
    pub(super) fn is_prefill(&self, owner: Owner) -> bool {
        let a = self.active[owner.slot as usize].as_ref().expect("live request");
        a.progress[owner.node as usize].split.is_some_and(|s| s.stage == SplitStage::Prefill)
    }

    /// The prefill replica keeps the node's blocks in `engine_slot` for the
    /// decode replica to read.
    pub(super) fn prefill_held(&mut self, owner: Owner, engine_slot: u32) {
        let split = self.active_mut(owner.slot).progress[owner.node as usize].split.as_mut().expect("a split node");
        split.prefill_slot = Some(engine_slot);
    }

    /// The prefill finished: its token is dropped (the decode replica
    /// generates the first token again), and the proxy sends the request on
    /// to the decode replica.
    pub(super) fn prefill_done(&mut self, d: Departure, sink: &mut dyn ResultSink) {
        let Owner { slot, node } = d.owner;
        let a = self.active_mut(slot);
        let outcome = &mut a.nodes[node as usize];
        outcome.cached_tokens = d.cached_tokens;
        outcome.preemptions = d.preemptions;
        let split = a.progress[node as usize].split.as_mut().expect("a split node");
        split.stage = SplitStage::Decode;
        let decode = split.decode;
        self.send_to_replica(slot, node, decode, sink);
    }

    /// The decode replica allocated blocks for `tokens` prompt tokens of
    /// `owner` in its engine slot `engine_slot`: the read starts when the
    /// link is free and lands after the transfer.
    pub(super) fn kv_load(&mut self, owner: Owner, engine_slot: u32, tokens: u32) {
        let now = self.now;
        let a = self.active[owner.slot as usize].as_ref().expect("live request");
        let split = a.progress[owner.node as usize].split.expect("only a split node loads KV");
        let generation = a.generation;
        let bytes = u64::from(tokens) * self.cluster.pool_of(split.prefill).kv_bytes_per_token;
        let end = self.cluster.transfer_end(now, split.decode, bytes);
        let end = self.later(end, 0, || ClockOverflow::Engine);
        let outcome = &mut self.active_mut(owner.slot).nodes[owner.node as usize];
        outcome.kv_transfer_bytes += bytes;
        outcome.kv_transfer_us += end - now;
        let event =
            Event::KvLanded { slot: owner.slot, generation, node: owner.node, replica: split.decode, engine_slot };
        self.queue.push(end, event);
    }

    /// The KV of `node` landed in replica `replica`'s engine slot
    /// `engine_slot`: the decode engine may run it, and the prefill replica
    /// frees its blocks.
    pub(super) fn kv_landed(&mut self, slot: u32, node: u32, replica: u32, engine_slot: u32) {
        self.cluster.instances[replica as usize].engine.kv_loaded(engine_slot);
        let split = self.active_mut(slot).progress[node as usize].split.as_mut().expect("a split node");
        split.stage = SplitStage::Landed;
        let (prefill, held) = (split.prefill, split.prefill_slot.take());
        if let Some(held) = held {
            self.cluster.instances[prefill as usize].engine.release(held);
        }
    }
}
