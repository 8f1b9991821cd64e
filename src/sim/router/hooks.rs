//! `router.env`'s events in the simulation: the admission decision after
//! `admission_latency_us` and the routing hop of `routing_latency_us`; and
//! the cluster's side of the router's clock (its scrapes and KV events are
//! brought up to each new time before the events of that time).

use super::super::cluster::Cluster;
use super::super::event::Event;
use super::super::outcome::{ClockOverflow, NodeError, RequestStatus, ResultSink};
use super::super::simulation::Simulation;
use crate::latency::LatencyModel;

impl<L: LatencyModel> Cluster<L> {
    /// The simulation reached `now`, before its events at `now`.
    pub(in crate::sim) fn observe(&mut self, now: u64) {
        let serving = self.serving as usize;
        self.router.observe(now, &mut self.instances[..serving]);
        if let Some(r) = self.prefill_router.as_mut() {
            r.observe(now, &mut self.instances[serving..]);
        }
    }

    /// A node routed to instance `replica` enters (`true`) or leaves the
    /// routing hop: its router counts it in flight there meanwhile.
    pub(in crate::sim) fn hop(&mut self, replica: u32, entering: bool) {
        let serving = self.serving;
        match self.prefill_router.as_mut() {
            Some(r) if replica >= serving => r.hop((replica - serving) as usize, entering),
            _ => self.router.hop(replica as usize, entering),
        }
    }
}

impl<L: LatencyModel> Simulation<L> {
    /// `router.env.admission_latency_ms`, µs (0 without).
    pub(in crate::sim) fn admission_latency_us(&self) -> u64 {
        self.cluster.router.env().map_or(0, |e| e.admission_latency_us)
    }

    /// `router.env.routing_latency_ms`, µs (0 without): the one hop from the
    /// serving router (llm-d's EPP picks the prefill replica in the same
    /// decision).
    pub(in crate::sim) fn routing_latency_us(&self) -> u64 {
        self.cluster.router.env().map_or(0, |e| e.routing_latency_us)
    }

    /// The request in `slot` reaches the router's admission now: admitted
    /// (its roots were scheduled from now) or rejected, as without latency.
    pub(in crate::sim) fn admit(&mut self, slot: u32, sink: &mut dyn ResultSink) {
        let reason = if !self.cluster.admits(self.now) {
            self.rejection()
        } else {
            let request = &self.requests.active[slot as usize].as_ref().expect("live request").request;
            match self.cluster.gateway_admits(request, self.now) {
                Ok(()) => return,
                Err(why) => why,
            }
        };
        for node in &mut self.requests.get_mut(slot).nodes {
            node.error = Some(NodeError::Rejected(reason.clone()));
        }
        self.complete(slot, RequestStatus::Rejected, sink);
    }

    /// Llm node `node`, routed now to instance `replica`, reaches it `hop_us` later.
    pub(in crate::sim) fn hop_start(&mut self, slot: u32, node: u32, replica: u32, hop_us: u64) {
        let at = self.later(self.now, hop_us, || ClockOverflow::Engine);
        let a = self.requests.get_mut(slot);
        a.progress[node as usize].in_hop = true;
        let generation = a.generation;
        self.cluster.hop(replica, true);
        self.queue.push(at, Event::RouterHop { slot, generation, node, replica });
    }

    /// The routing hop of llm node `node` ends: it reaches `replica`'s front end.
    pub(in crate::sim) fn hop_arrived(&mut self, slot: u32, node: u32, replica: u32, sink: &mut dyn ResultSink) {
        self.requests.get_mut(slot).progress[node as usize].in_hop = false;
        self.cluster.hop(replica, false);
        self.send_to_replica(slot, node, replica, sink);
    }
}
