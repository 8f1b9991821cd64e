//! The driver's half of KV offload: a load from an engine's CPU tier
//! (`engine/offload.rs`) takes its time on that replica's host link (each
//! GPU's PCIe link to host memory), loads on one link one after another in
//! the order they were asked for; when it lands the engine registers the
//! blocks and the request runs at its turn (`Simulation::kv_landed`).

use super::engine::Owner;
use super::event::Event;
use super::outcome::ClockOverflow;
use super::simulation::Simulation;
use crate::latency::LatencyModel;

impl<L: LatencyModel> Simulation<L> {
    /// Replica `replica`'s engine allocated blocks in its slot
    /// `engine_slot` for `owner`'s prompt blocks its CPU tier holds: the
    /// read starts when the link is free and takes `duration_us`.
    pub(super) fn host_load(&mut self, replica: u32, owner: Owner, engine_slot: u32, duration_us: u64) {
        let instance = &mut self.cluster.instances[replica as usize];
        let start = self.now.max(instance.host_link_free_us);
        let end = self.later(start, duration_us, || ClockOverflow::Engine);
        self.cluster.instances[replica as usize].host_link_free_us = end;
        let generation = self.requests.active[owner.slot as usize].as_ref().expect("live request").generation;
        let event = Event::KvLanded { slot: owner.slot, generation, node: owner.node, replica, engine_slot };
        self.queue.push(end, event);
    }
}

#[cfg(test)]
mod tests {
    use crate::latency::{LatencyModel, StepBatch};
    use crate::sim::*;
    use crate::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};

    /// Every step takes 1 ms; no front end.
    #[derive(Clone)]
    struct Fixed;

    impl LatencyModel for Fixed {
        fn step_time_us(&self, _: &StepBatch) -> u64 {
            1000
        }
    }

    fn single(id: u64, at_ms: f64, prompt: Vec<u32>, output_tokens: u32) -> Request {
        let kind = NodeKind::Llm(LlmCall::for_prompt(prompt, output_tokens));
        Request {
            traffic: Default::default(),
            request_id: RequestId::Int(id),
            arrival_time: at_ms / 1e3,
            initial: vec![0],
            sub_requests: vec![SubRequest { next: vec![], interval: 0.0, kind, result: None }],
        }
    }

    struct Firsts(Vec<(u64, Option<u32>)>);

    impl Sink for Firsts {
        fn request_done(&mut self, r: &FinishedRequest) -> std::io::Result<()> {
            self.0.push((r.index, r.nodes[0].replica));
            Ok(())
        }
    }

    /// The replica each request went to, on two replicas of 11 usable
    /// blocks under prefix-affinity, with or without a CPU tier.
    fn replicas(offload: Option<KvOffload>) -> Vec<Option<u32>> {
        let engine = EngineConfig { max_model_len: 4096, kv_offload: offload, ..EngineConfig::for_tests(8, 4096, 12) };
        let router =
            RouterConfig { policy: RoutingPolicy::named("prefix-affinity").unwrap(), ..RouterConfig::default() };
        let prefix: Vec<u32> = (1..=65).collect();
        let requests = vec![
            // A: 4 full blocks on replica 0 (both empty: the lowest index).
            single(0, 0.0, prefix.clone(), 1),
            // 161 tokens of 11 blocks on replica 0 again (both idle): every
            // GPU block, A's evicted; it decodes until ~25 ms.
            single(1, 10.0, (100..261).collect(), 15),
            // A's prompt again: replica 0 is busier and its GPU lost A.
            single(2, 12.0, prefix, 1),
        ];
        let mut out = Firsts(Vec::new());
        run(RunConfig::aggregated(engine, 2, router, Fixed), requests.into_iter().map(Ok::<_, ()>), &mut out).unwrap();
        out.0.sort();
        out.0.into_iter().map(|(_, r)| r).collect()
    }

    #[test]
    fn prefix_affinity_sees_the_cpu_tier() {
        // Without a CPU tier neither replica holds A: the emptier one wins.
        assert_eq!(replicas(None), [Some(0), Some(0), Some(1)]);
        // With one, replica 0's CPU tier holds A's 4 blocks past its empty
        // GPU hit (llm-d's precise scorer indexes CPU-tier blocks too).
        let offload = KvOffload {
            cpu_blocks: 64,
            block_bytes: 1000,
            bandwidth_bytes_per_s: 1_000_000_000,
            policy: OffloadPolicy::All,
            disk: None,
        };
        assert_eq!(replicas(Some(offload)), [Some(0), Some(0), Some(0)]);
    }
}
