//! Where the gateway meets the simulation: admission when the client sends
//! a request, the queue an llm call enters when it becomes ready, dispatch
//! (tried on every enqueue, engine step end, request end and tick while the
//! queue is not empty), TTL expiry on the tick, and the end of a request one
//! of whose calls was shed or expired (its other calls aborted, as a
//! timeout does).

use super::flow_control::{Enqueued, Entry, QueueOrder};
use super::{Gateway, GatewayStats, rejection_reason};
use crate::latency::LatencyModel;
use crate::sim::cluster::Cluster;
use crate::sim::event::Event;
use crate::sim::outcome::{ClockOverflow, NodeError, RequestStatus, ResultSink};
use crate::sim::simulation::Simulation;
use crate::workload::{NodeKind, Request};

impl<L: LatencyModel> Cluster<L> {
    /// Whether the gateway admits `request` reaching the router's admission
    /// at `now` (its send, or later with `router.env.admission_latency_ms`);
    /// the error string of its nodes if not. Without admission, every request.
    pub(in crate::sim) fn gateway_admits(&mut self, request: &Request, now: u64) -> Result<(), String> {
        let routable = self.routable();
        let Some(g) = self.gateway.as_mut() else { return Ok(()) };
        let Some(a) = g.admission.as_mut() else {
            g.stats.admitted += 1;
            return Ok(());
        };
        // The replicas the router may send to (an autoscaled pool's routable ones).
        let serving = &self.instances[..routable];
        let saturation = g.saturation;
        match a.admit(now, request, || saturation.of(serving)) {
            Ok(()) => {
                g.stats.admitted += 1;
                Ok(())
            }
            Err(r) => {
                let stats = &mut g.stats;
                match r {
                    super::Rejection::TokenBucket => stats.rejected_token_bucket += 1,
                    super::Rejection::Saturation => stats.rejected_saturation += 1,
                    super::Rejection::TenantBudget => stats.rejected_tenant_budget += 1,
                }
                Err(rejection_reason(r, a.config()))
            }
        }
    }
}

impl<L: LatencyModel> Simulation<L> {
    /// A request entered (`entered`) or left the system: its tenant's in-flight.
    pub(in crate::sim) fn gateway_count(&mut self, request: &Request, entered: bool) {
        if let Some(a) = self.cluster.gateway.as_mut().and_then(|g| g.admission.as_mut()) {
            if entered { a.on_enter(request) } else { a.on_leave(request) }
        }
    }

    /// Whether the gateway may reject a request when it is sent.
    pub(in crate::sim) fn gateway_admission(&self) -> bool {
        self.cluster.gateway.as_ref().is_some_and(|g| g.admission.is_some())
    }

    /// Whether ready llm calls wait in the gateway queue.
    pub(in crate::sim) fn gateway_queues(&self) -> bool {
        self.cluster.gateway.as_ref().is_some_and(Gateway::queues)
    }

    /// Llm node `node` of the request in `slot` is ready: it joins the
    /// gateway queue (or is shed, or sheds a less urgent call), then
    /// dispatch is tried.
    pub(in crate::sim) fn gateway_enqueue(&mut self, slot: u32, node: u32, sink: &mut dyn ResultSink) {
        let now = self.now;
        let a = self.requests.active[slot as usize].as_ref().expect("live request");
        let g = self.cluster.gateway.as_mut().expect("a gateway");
        let q = g.queue.as_mut().expect("a queue");
        let NodeKind::Llm(call) = &a.request.sub_requests[node as usize].kind else { unreachable!("llm nodes queue") };
        let key = match q.config.order {
            QueueOrder::Fifo => 0,
            QueueOrder::Priority => i64::from(call.priority),
            QueueOrder::Deadline => a
                .request
                .traffic
                .slo_target_us
                .map_or(i64::MAX, |t| a.send_us.saturating_add(t).min(i64::MAX as u64) as i64),
        };
        let entry = Entry { slot, generation: a.generation, node, enqueued_us: now, key, seq: 0 };
        let outcome = q.enqueue(entry, a.request.traffic.class(), a.request.traffic.tenant.as_deref());
        let depth = q.len() as u64;
        let cap = q.config.max_queue.unwrap_or(0);
        g.stats.max_depth = g.stats.max_depth.max(depth);
        let full =
            |what: &str| format!("shed: the gateway queue was full ({cap} calls, router.flow_control.max_queue){what}");
        match outcome {
            Enqueued::Queued => g.stats.queued += 1,
            Enqueued::Displaced(victim) => {
                g.stats.queued += 1;
                g.stats.shed += 1;
                let why = full(" and a more urgent call took its place");
                self.gateway_end(victim.slot, victim.node, NodeError::Shed(why), RequestStatus::Shed, sink);
            }
            Enqueued::Full => {
                g.stats.shed += 1;
                let why = full("");
                self.gateway_end(slot, node, NodeError::Shed(why), RequestStatus::Shed, sink);
            }
        }
        self.gateway_tick_later();
        self.gateway_pump(sink);
    }

    /// Dispatches queued calls while the saturation lets their band go.
    pub(in crate::sim) fn gateway_pump(&mut self, sink: &mut dyn ResultSink) {
        let Some(g) = self.cluster.gateway.as_mut() else { return };
        if g.pumping || g.queue.as_ref().is_none_or(|q| q.len() == 0) {
            return;
        }
        g.pumping = true;
        loop {
            // The replicas the router may send to (an autoscaled pool's routable ones).
            let n = self.cluster.routable();
            let g = self.cluster.gateway.as_mut().expect("a gateway");
            let s = g.saturation.of(&self.cluster.instances[..n]);
            let Some(e) = g.queue.as_mut().expect("a queue").pop(s) else { break };
            g.stats.dispatched += 1;
            g.stats.queue_wait_us.record(self.now - e.enqueued_us);
            debug_assert!(self.requests.is_live(e.slot, e.generation), "a request that left took its calls out");
            self.route_node(e.slot, e.node, sink);
        }
        self.cluster.gateway.as_mut().expect("a gateway").pumping = false;
    }

    /// Schedules the next tick if the queue holds calls and none is pending.
    fn gateway_tick_later(&mut self) {
        let g = self.cluster.gateway.as_mut().expect("a gateway");
        let Some(q) = g.queue.as_ref().filter(|q| q.len() > 0) else { return };
        if g.tick_pending {
            return;
        }
        g.tick_pending = true;
        let tick = q.config.tick_us;
        let at = self.later(self.now, tick, || ClockOverflow::Engine);
        self.queue.push(at, Event::GatewayTick);
    }

    /// The tick: calls past their TTL expire (ending their requests), then
    /// dispatch is tried.
    pub(in crate::sim) fn gateway_tick(&mut self, sink: &mut dyn ResultSink) {
        let now = self.now;
        let g = self.cluster.gateway.as_mut().expect("a gateway");
        g.tick_pending = false;
        let q = g.queue.as_mut().expect("a queue");
        if let Some(ttl) = q.config.ttl_us.filter(|&t| now >= t) {
            let mut expired = std::mem::take(&mut g.scratch);
            q.expire(now - ttl, &mut expired);
            for i in 0..expired.len() {
                let e = expired[i];
                // An earlier expiry may have ended the same request.
                if !self.requests.is_live(e.slot, e.generation) {
                    continue;
                }
                let why = |w: &Entry| {
                    NodeError::Expired(format!(
                        "expired: waited {} ms in the gateway queue (router.flow_control.ttl_ms)",
                        (now - w.enqueued_us) as f64 / 1e3
                    ))
                };
                // Its other calls out of the queue with it are marked first:
                // the abort below must not look for them in an engine.
                let a = self.requests.get_mut(e.slot);
                for w in expired[i + 1..].iter().filter(|w| w.slot == e.slot && w.generation == e.generation) {
                    a.nodes[w.node as usize].error = Some(why(w));
                }
                self.cluster.gateway.as_mut().expect("a gateway").stats.expired += 1;
                self.gateway_end(e.slot, e.node, why(&e), RequestStatus::Expired, sink);
            }
            expired.clear();
            self.cluster.gateway.as_mut().expect("a gateway").scratch = expired;
        }
        self.gateway_pump(sink);
        self.gateway_tick_later();
    }

    /// Node `node` of the request in `slot` (out of the queue) fails with
    /// `error`: the request ends with `status`, its other calls aborted.
    fn gateway_end(
        &mut self,
        slot: u32,
        node: u32,
        error: NodeError,
        status: RequestStatus,
        sink: &mut dyn ResultSink,
    ) {
        self.requests.get_mut(slot).nodes[node as usize].error = Some(error.clone());
        self.abort_request(slot, status, error, sink);
    }

    /// The calls of the request in `slot` still in the gateway queue, taken
    /// out (it is leaving), as a list of their nodes.
    pub(in crate::sim) fn gateway_forget(&mut self, slot: u32) -> Vec<u32> {
        let Some(q) = self.cluster.gateway.as_mut().and_then(|g| g.queue.as_mut()) else { return Vec::new() };
        let generation = self.requests.active[slot as usize].as_ref().expect("live request").generation;
        let mut out = Vec::new();
        q.remove_request(slot, generation, &mut out);
        out.into_iter().map(|e| e.node).collect()
    }

    /// What the gateway did, if the run has one.
    pub fn gateway_stats(&self) -> Option<GatewayStats> {
        self.cluster.gateway.as_ref().map(|g| g.stats.clone())
    }
}
