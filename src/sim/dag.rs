//! DAG progress: a request's nodes start `interval` after their last
//! predecessor, run (a tool call for its duration, an llm call in the
//! engine) and finish, releasing their successors; a failed node skips what
//! depends on it; the request leaves when its last node has, or when the
//! client's timeout cuts it short.

use super::engine::{KvTransfer, Owner, request_key};
use super::event::Event;
use super::outcome::{ClockOverflow, FinishedRequest, NodeError, RequestStatus, ResultSink, later_or_overflow};
use super::requests::{Split, SplitStage};
use super::router::Affinity;
use super::simulation::Simulation;
use crate::latency::LatencyModel;
use crate::workload::{NodeKind, RequestId, seconds_to_us};

impl<L: LatencyModel> Simulation<L> {
    pub(super) fn start_node(&mut self, slot: u32, node: u32, sink: &mut dyn ResultSink) {
        let now = self.now;
        let admission_us = self.admission_latency_us();
        let a = self.requests.active[slot as usize].as_mut().expect("live request");
        a.nodes[node as usize].start_us = Some(now);
        if admission_us > 0 && a.request.initial.contains(&node) {
            // The client sent it `interval` after the send; the router's
            // admission (router.env) counts in its TTFT.
            a.nodes[node as usize].start_us = Some(now - (a.progress[node as usize].ready_us - a.send_us));
        }
        match &a.request.sub_requests[node as usize].kind {
            NodeKind::ToolCall { duration } => {
                let end = later_or_overflow(&mut self.clock_overflow, now, seconds_to_us(*duration), || {
                    ClockOverflow::Node { request_id: a.request.request_id.to_string(), node, field: "duration" }
                });
                let generation = a.generation;
                self.queue.push(end, Event::ToolDone { slot, generation, node });
            }
            NodeKind::Llm(call) => {
                if call.tokens_to_emit() == 0 {
                    // Seeded progress already holds every output token.
                    self.node_done(slot, node, sink);
                    return;
                }
                if self.gateway_queues() {
                    self.gateway_enqueue(slot, node, sink);
                } else {
                    self.route_node(slot, node, sink);
                }
            }
        }
    }

    /// Llm node `node` goes to a replica (through the gateway queue first,
    /// with flow control): the router picks it, or its request's pinned one.
    pub(super) fn route_node(&mut self, slot: u32, node: u32, sink: &mut dyn ResultSink) {
        let now = self.now;
        let a = self.requests.active[slot as usize].as_mut().expect("live request");
        let NodeKind::Llm(call) = &a.request.sub_requests[node as usize].kind else {
            unreachable!("only llm nodes are routed")
        };
        let pin = match &mut a.siblings {
            Some(s) => &mut s.replica[s.group[node as usize] as usize],
            None => &mut a.pinned,
        };
        let replica = match *pin {
            Some(r) => r,
            None => {
                let r = self.cluster.route(now, call);
                if self.cluster.router.config().affinity != Affinity::Node {
                    *pin = Some(r);
                }
                r
            }
        };
        if self.cluster.instances.len() > 1 {
            a.nodes[node as usize].replica = Some(replica);
        }
        // Disaggregated (llm-d's order: the decode replica is chosen
        // first, then whether and where to prefill): the prompt goes
        // to a prefill replica first.
        let mut first = replica;
        if self.cluster.splits(replica, call) {
            let prefill = self.cluster.route_prefill(now, call);
            let a = self.requests.active[slot as usize].as_mut().expect("live request");
            a.nodes[node as usize].prefill_replica = Some(prefill);
            a.progress[node as usize].split =
                Some(Split { prefill, decode: replica, prefill_slot: None, stage: SplitStage::Prefill });
            first = prefill;
        }
        match self.routing_latency_us() {
            0 => self.send_to_replica(slot, node, first, sink),
            hop => self.hop_start(slot, node, first, hop),
        }
    }

    /// The server of replica `replica` receives llm node `node`: its front
    /// end (HTTP, tokenization) takes its pool's overhead before the engine
    /// sees the request; it counts in TTFT.
    pub(super) fn send_to_replica(&mut self, slot: u32, node: u32, replica: u32, sink: &mut dyn ResultSink) {
        match self.cluster.pool_of(replica).request_overhead_us {
            0 => self.enter_engine(slot, node, replica, sink),
            delay => {
                self.cluster.instances[replica as usize].in_transit += 1;
                let generation = self.requests.active[slot as usize].as_ref().expect("live request").generation;
                let at = self.later(self.now, delay, || ClockOverflow::Engine);
                self.queue.push(at, Event::EngineEnter { slot, generation, node, replica });
            }
        }
    }

    pub(super) fn enter_engine(&mut self, slot: u32, node: u32, replica: u32, sink: &mut dyn ResultSink) {
        let a = self.requests.active[slot as usize].as_mut().expect("live request");
        let NodeKind::Llm(call) = &a.request.sub_requests[node as usize].kind else {
            unreachable!("only llm nodes enter the engine")
        };
        let split = a.progress[node as usize].split;
        let transfer = match split {
            None => KvTransfer::Local,
            Some(s) if s.stage == SplitStage::Prefill => KvTransfer::SendAfterPrefill,
            Some(_) => KvTransfer::ReceivePrefill,
        };
        let engine = &mut self.cluster.instances[replica as usize].engine;
        let spec_key = if engine.config().speculative.is_some() {
            let id = match &a.request.request_id {
                RequestId::Int(i) => *i,
                RequestId::Str(s) => crate::hash::hash64(s.as_bytes()),
            };
            request_key(id, node)
        } else {
            0
        };
        if let Err(why) = engine.add(Owner { slot, node }, call, transfer, spec_key, self.now) {
            a.nodes[node as usize].error = Some(NodeError::Unservable(why));
            if let Some(Split { prefill, prefill_slot: Some(held), .. }) = split {
                self.cluster.instances[prefill as usize].engine.release(held);
            }
            self.node_done(slot, node, sink);
        }
    }

    /// Marks a node finished (or failed) now and releases its successors.
    pub(super) fn node_done(&mut self, slot: u32, node: u32, sink: &mut dyn ResultSink) {
        let now = self.now;
        let a = self.requests.active[slot as usize].as_mut().expect("live request");
        let outcome = &mut a.nodes[node as usize];
        let failed = outcome.error.is_some();
        if !failed {
            outcome.finish_us = Some(now);
        }
        a.unresolved -= 1;
        // Resolve successors; skipped nodes cascade through an explicit stack.
        let mut stack = vec![(node, failed)];
        while let Some((n, failed)) = stack.pop() {
            for k in 0..a.request.sub_requests[n as usize].next.len() {
                let s = a.request.sub_requests[n as usize].next[k] as usize;
                let progress = &mut a.progress[s];
                progress.pending_preds -= 1;
                if failed {
                    progress.failed_pred.get_or_insert(n);
                } else {
                    progress.ready_us = progress.ready_us.max(now);
                }
                if progress.pending_preds > 0 {
                    continue;
                }
                if let Some(p) = progress.failed_pred {
                    a.nodes[s].error = Some(NodeError::Skipped(p));
                    a.unresolved -= 1;
                    stack.push((s as u32, true));
                } else {
                    let interval = a.request.sub_requests[s].interval_us();
                    let at = later_or_overflow(&mut self.clock_overflow, progress.ready_us, interval, || {
                        ClockOverflow::Node {
                            request_id: a.request.request_id.to_string(),
                            node: s as u32,
                            field: "interval",
                        }
                    });
                    self.queue.push(at, Event::NodeStart { slot, generation: a.generation, node: s as u32 });
                }
            }
        }
        if a.unresolved == 0 {
            let failed = a.nodes.iter().any(|n| n.error.is_some());
            self.complete(slot, if failed { RequestStatus::Unservable } else { RequestStatus::Completed }, sink);
        }
    }

    /// Whether `event` belongs to a request that has left.
    pub(super) fn is_stale(&self, event: &Event) -> bool {
        match *event {
            Event::NodeStart { slot, generation, .. }
            | Event::ToolDone { slot, generation, .. }
            | Event::EngineEnter { slot, generation, .. }
            | Event::Admit { slot, generation }
            | Event::RouterHop { slot, generation, .. }
            | Event::Timeout { slot, generation } => !self.requests.is_live(slot, generation),
            Event::KvLanded { slot, generation, .. } => !self.requests.is_live(slot, generation),
            Event::StepEnd { .. } | Event::GatewayTick => false,
        }
    }

    /// The request in `slot` leaves with `status`: reported, its slot freed.
    pub(super) fn complete(&mut self, slot: u32, status: RequestStatus, sink: &mut dyn ResultSink) {
        let a = self.requests.active[slot as usize].take().expect("live request");
        self.requests.free_slots.push(slot);
        self.requests.in_flight -= 1;
        let finish_us = a.nodes.iter().filter_map(|n| n.finish_us).max();
        self.window.on_leave(a.index, self.now, status == RequestStatus::Completed);
        if self.cluster.gateway.is_some() {
            self.gateway_count(&a.request, false);
        }
        sink.request_done(FinishedRequest {
            index: a.index,
            request: a.request,
            nodes: a.nodes,
            arrival_us: a.arrival_us,
            send_us: a.send_us,
            finish_us: if status == RequestStatus::Completed { finish_us } else { None },
            status,
            in_window: a.in_window,
        });
        self.slot_freed(sink);
        self.gateway_pump(sink);
    }

    /// The client gives up on the request in `slot`: its llm nodes still in
    /// the engine are aborted (keeping the tokens they streamed), every node
    /// not finished is marked timed out, and the request leaves now. Events
    /// it left in the queue find its slot's generation moved on.
    pub(super) fn time_out(&mut self, slot: u32, sink: &mut dyn ResultSink) {
        self.abort_request(slot, RequestStatus::TimedOut, NodeError::TimedOut, sink);
    }

    /// The request in `slot` ends now with `status`: every node not
    /// finished (nor failed already) fails with `error`, those in an engine
    /// aborted, those in the gateway queue taken out.
    pub(super) fn abort_request(
        &mut self,
        slot: u32,
        status: RequestStatus,
        error: NodeError,
        sink: &mut dyn ResultSink,
    ) {
        let n = self.requests.get_mut(slot).nodes.len();
        let queued = self.gateway_forget(slot);
        for node in 0..n {
            let a = self.requests.get_mut(slot);
            let outcome = &a.nodes[node];
            if outcome.finish_us.is_some() || outcome.error.is_some() {
                continue;
            }
            let is_llm = matches!(a.request.sub_requests[node].kind, NodeKind::Llm(_));
            if a.progress[node].in_hop {
                // Routed, not at a replica yet (router.env): its hop event goes stale.
                let first = a.progress[node].split.map_or(outcome.replica.unwrap_or(0), |s| s.prefill);
                self.cluster.hop(first, false);
            } else if outcome.start_us.is_some() && is_llm && !queued.contains(&(node as u32)) {
                let owner = Owner { slot, node: node as u32 };
                let replica = outcome.replica.unwrap_or(0);
                let split = a.progress[node].split;
                if let Some(s) = split
                    && s.stage != SplitStage::Landed
                {
                    // Its prefill, running or holding the KV for the send.
                    let p = &mut self.cluster.instances[s.prefill as usize];
                    if p.engine.abort(owner).is_none() {
                        p.in_transit -= 1;
                    }
                }
                if split.is_none_or(|s| s.stage != SplitStage::Prefill) {
                    let r = replica as usize;
                    match self.cluster.instances[r].engine.abort(owner) {
                        Some(d) => self.record_departure(d),
                        // Still in the replica's front end: its EngineEnter event
                        // goes stale.
                        None => self.cluster.instances[r].in_transit -= 1,
                    }
                }
            }
            self.requests.get_mut(slot).nodes[node].error = Some(error.clone());
        }
        self.complete(slot, status, sink);
    }
}
