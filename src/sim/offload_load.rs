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
