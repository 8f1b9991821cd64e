//! Prefill/decode disaggregation, as vLLM's `NixlConnector` behind llm-d's
//! P/D sidecar runs it: a split llm node is prefilled on a prefill replica
//! (`max_tokens: 1`; that token is discarded), which holds its blocks; the
//! proxy then sends it to the decode replica, whose scheduler allocates
//! blocks for the prompt and reads the KV over the link
//! (`WAITING_FOR_REMOTE_KVS`); when it lands, the prefill replica frees its
//! blocks and the decode replica computes the last prompt token and
//! generates. TTFT therefore holds both front ends, the prefill, the
//! transfer and the decode replica's first step.

use super::engine::{Departure, Owner};
use super::event::Event;
use super::outcome::{ClockOverflow, ResultSink};
use super::requests::SplitStage;
use super::simulation::Simulation;
use crate::latency::LatencyModel;

impl<L: LatencyModel> Simulation<L> {
    /// Whether `owner` is a split node still at its prefill replica.
    pub(super) fn is_prefill(&self, owner: Owner) -> bool {
        let a = self.requests.active[owner.slot as usize].as_ref().expect("live request");
        a.progress[owner.node as usize].split.is_some_and(|s| s.stage == SplitStage::Prefill)
    }

    /// The prefill replica keeps the node's blocks in `engine_slot` for the
    /// decode replica to read.
    pub(super) fn prefill_held(&mut self, owner: Owner, engine_slot: u32) {
        let split =
            self.requests.get_mut(owner.slot).progress[owner.node as usize].split.as_mut().expect("a split node");
        split.prefill_slot = Some(engine_slot);
    }

    /// The prefill finished: its token is dropped (the decode replica
    /// generates the first token again), and the proxy sends the request on
    /// to the decode replica.
    pub(super) fn prefill_done(&mut self, d: Departure, sink: &mut dyn ResultSink) {
        let Owner { slot, node } = d.owner;
        let a = self.requests.get_mut(slot);
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
        let a = self.requests.active[owner.slot as usize].as_ref().expect("live request");
        let split = a.progress[owner.node as usize].split.expect("only a split node loads KV");
        let generation = a.generation;
        let bytes = u64::from(tokens) * self.cluster.pool_of(split.prefill).kv_bytes_per_token;
        let end = self.cluster.transfer_end(now, split.decode, bytes);
        let end = self.later(end, 0, || ClockOverflow::Engine);
        let outcome = &mut self.requests.get_mut(owner.slot).nodes[owner.node as usize];
        outcome.kv_transfer_bytes += bytes;
        outcome.kv_transfer_us += end - now;
        let event =
            Event::KvLanded { slot: owner.slot, generation, node: owner.node, replica: split.decode, engine_slot };
        self.queue.push(end, event);
    }

    /// The KV of `node` landed in replica `replica`'s engine slot
    /// `engine_slot`: the decode engine may run it, and the prefill replica
    /// frees its blocks (for a split node).
    pub(super) fn kv_landed(&mut self, slot: u32, node: u32, replica: u32, engine_slot: u32) {
        self.cluster.instances[replica as usize].engine.kv_loaded(engine_slot);
        // Without a split, a load from the CPU tier (`offload_load.rs`).
        let Some(split) = self.requests.get_mut(slot).progress[node as usize].split.as_mut() else { return };
        split.stage = SplitStage::Landed;
        let (prefill, held) = (split.prefill, split.prefill_slot.take());
        if let Some(held) = held {
            self.cluster.instances[prefill as usize].engine.release(held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::{Linear, StepPricer};
    use crate::sim::engine::{ConnectorKind, EngineConfig};
    use crate::sim::outcome::{FinishedRequest, RequestStatus};
    use crate::sim::pool::{KvTransferConfig, PdDecider, PoolConfig, Role};
    use crate::sim::router::RouterConfig;
    use crate::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};

    fn pool(role: Role, replicas: u32) -> PoolConfig<StepPricer> {
        PoolConfig {
            name: role.name().to_owned(),
            role,
            engine: EngineConfig { kv_connector: ConnectorKind::Nixl, ..EngineConfig::for_tests(4, 256, 64) },
            replicas,
            lockstep: false,
            // 1,000 µs a step, 2 µs a prefill token, 10 µs a decode.
            latency: StepPricer::Linear(Linear::new(&[1000.0, 2.0, 10.0]).unwrap()),
            router: RouterConfig::default(),
            kv_bytes_per_token: 1000,
        }
    }

    fn request(id: u64, input_tokens: u32, output_tokens: u32) -> Request {
        let call = LlmCall::new(input_tokens, output_tokens);
        Request {
            traffic: Default::default(),
            request_id: RequestId::Int(id),
            arrival_time: 0.0,
            initial: vec![0],
            sub_requests: vec![SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None }],
        }
    }

    /// 8 Gbit/s = 1,000 bytes a µs, plus 50 µs a transfer.
    const LINK: KvTransferConfig = KvTransferConfig { bandwidth_gbps: 8.0, latency_us: 50 };

    #[test]
    fn a_split_request_is_prefilled_moved_and_decoded_as_computed_by_hand() {
        let mut sim = Simulation::pools(vec![pool(Role::Prefill, 1), pool(Role::Decode, 1)], LINK, PdDecider::Always);
        sim.check_invariants(true);
        let mut out: Vec<FinishedRequest> = Vec::new();
        sim.add_request(request(0, 100, 3), &mut out);
        // Prefill replica (instance 1, after the serving pool): 100 tokens,
        // 1,000 + 2 × 100 = 1,200 µs; its blocks are held.
        sim.run_until(1200, &mut out);
        assert_eq!(sim.cluster.instances[1].engine.kv_blocks().0, 7, "100 tokens + 1 sampled: 7 blocks held");
        // The decode replica allocates 7 blocks for the prompt at 1,200 µs
        // and reads 100 × 1,000 bytes: 50 + 100 µs, landing at 1,350 µs,
        // when the prefill replica frees its blocks.
        assert_eq!(sim.cluster.instances[0].engine.kv_blocks().0, 7);
        sim.run_until(1350, &mut out);
        assert_eq!(sim.cluster.instances[1].engine.kv_blocks().0, 0, "freed once the transfer completed");
        sim.finish(&mut out);
        let node = &out[0].nodes[0];
        assert_eq!(out[0].status, RequestStatus::Completed);
        // Then one step computes the last prompt token and samples the first
        // (1,000 + 2 = 1,002 µs), and two decode steps of 1,010 µs follow.
        assert_eq!(node.token_times_us, [2352, 3362, 4372]);
        assert_eq!((node.replica, node.prefill_replica), (Some(0), Some(1)));
        assert_eq!((node.kv_transfer_us, node.kv_transfer_bytes), (150, 100_000));
        assert_eq!(node.scheduled_us, Some(0), "first admitted by the prefill replica");
        assert_eq!(sim.cluster.instances[0].engine.kv_blocks().0, 0);
    }

    #[test]
    fn transfers_into_one_decode_replica_wait_for_each_other() {
        let mut sim = Simulation::pools(vec![pool(Role::Prefill, 2), pool(Role::Decode, 1)], LINK, PdDecider::Always);
        let mut out: Vec<FinishedRequest> = Vec::new();
        // Round-robin: one prompt on each prefill replica, both done at
        // 1,200 µs; the second read starts when the first lands.
        sim.add_request(request(0, 100, 2), &mut out);
        sim.add_request(request(1, 100, 2), &mut out);
        sim.finish(&mut out);
        out.sort_by_key(|r| r.index);
        let transfers: Vec<u64> = out.iter().map(|r| r.nodes[0].kv_transfer_us).collect();
        assert_eq!(transfers, [150, 300]);
        let prefills: Vec<Option<u32>> = out.iter().map(|r| r.nodes[0].prefill_replica).collect();
        assert_eq!(prefills, [Some(1), Some(2)]);
    }

    #[test]
    fn the_prefix_threshold_decider_keeps_short_prompts_on_the_decode_replica() {
        let decider = PdDecider::PrefixThreshold { threshold_tokens: 64 };
        let mut sim = Simulation::pools(vec![pool(Role::Prefill, 1), pool(Role::Decode, 1)], LINK, decider);
        let mut out: Vec<FinishedRequest> = Vec::new();
        sim.add_request(request(0, 32, 2), &mut out);
        sim.add_request(request(1, 100, 2), &mut out);
        sim.finish(&mut out);
        out.sort_by_key(|r| r.index);
        assert_eq!(out[0].nodes[0].prefill_replica, None);
        assert_eq!(out[0].nodes[0].kv_transfer_bytes, 0);
        // Alone on the decode replica: 1,000 + 2 × 32, then 1,010.
        assert_eq!(out[0].nodes[0].token_times_us, [1064, 2074]);
        assert_eq!(out[1].nodes[0].prefill_replica, Some(1));
        assert!(out.iter().all(|r| r.status == RequestStatus::Completed));
    }

    /// A (a 64-token prompt, prefilled remotely) and B (16 + 100 tokens,
    /// kept local by the decider, 1.2 ms later) on a decode replica that
    /// runs one request at a time in 9 usable blocks of 16, its prefills
    /// chunked by `long_prefill_token_threshold`; run for 10 s.
    fn a_landed_prompt_and_a_head_that_outgrows_it(long_prefill_token_threshold: u32) -> Vec<FinishedRequest> {
        let mut decode = pool(Role::Decode, 1);
        decode.engine = EngineConfig {
            kv_connector: ConnectorKind::Nixl,
            long_prefill_token_threshold,
            ..EngineConfig::for_tests(1, 256, 10)
        };
        let decider = PdDecider::PrefixThreshold { threshold_tokens: 48 };
        let mut sim = Simulation::pools(vec![pool(Role::Prefill, 1), decode], LINK, decider);
        sim.check_invariants(true);
        let mut out: Vec<FinishedRequest> = Vec::new();
        sim.add_request(request(0, 64, 2), &mut out);
        sim.add_request(Request { arrival_time: 0.0012, ..request(1, 16, 100) }, &mut out);
        sim.run_until(10_000_000, &mut out);
        out.sort_by_key(|r| r.index);
        out
    }

    #[test]
    fn a_landed_prompt_behind_a_request_that_cannot_fit_still_runs() {
        // A's prompt (4 blocks) is read into the decode replica at 1,128 µs
        // and lands at 1,242 µs, but B was admitted at 1,200 µs: A waits,
        // holding its blocks. B outgrows the 5 blocks left and preempts
        // itself, going back to the front of the queue, where it cannot fit
        // beside A's blocks: with nothing running, A must run (and free
        // them) or the replica stalls for good (vLLM #45387).
        let out = a_landed_prompt_and_a_head_that_outgrows_it(0);
        assert_eq!(out.iter().map(|r| r.status).collect::<Vec<_>>(), [RequestStatus::Completed; 2]);
        assert_eq!(out[0].nodes[0].prefill_replica, Some(1));
        assert_eq!(out[1].nodes[0].prefill_replica, None);
        assert!(out[1].nodes[0].preemptions > 0, "B outgrew what A's blocks left");
    }

    #[test]
    fn a_landed_prompt_runs_before_a_head_that_would_start_over_forever() {
        // As above, but prefills are chunked by 16 tokens: B, preempted,
        // fits its first chunk beside A's blocks, so it is admitted again,
        // grows until it cannot and preempts itself, over and over. With
        // nothing running, A (landed) is admitted first and frees them.
        let out = a_landed_prompt_and_a_head_that_outgrows_it(16);
        assert_eq!(out.iter().map(|r| r.status).collect::<Vec<_>>(), [RequestStatus::Completed; 2]);
    }

    #[test]
    fn a_prefill_replica_checks_only_the_prompt_and_its_one_token() {
        // The prefill replica holds 256 tokens a sequence, the decode
        // replica 512: a 200-token prompt with 100 output tokens fits the
        // prefill request (201 tokens) and the whole sequence on the decode.
        let mut decode = pool(Role::Decode, 1);
        decode.engine.max_model_len = 512;
        let mut sim = Simulation::pools(vec![pool(Role::Prefill, 1), decode], LINK, PdDecider::Always);
        let mut out: Vec<FinishedRequest> = Vec::new();
        sim.add_request(request(0, 200, 100), &mut out);
        sim.finish(&mut out);
        assert_eq!(out[0].status, RequestStatus::Completed, "{:?}", out[0].nodes[0].error);
        assert_eq!(out[0].nodes[0].token_times_us.len(), 100);
        assert_eq!(out[0].nodes[0].prefill_replica, Some(1));
    }
}
