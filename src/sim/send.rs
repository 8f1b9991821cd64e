//! Sending: requests reach the cluster as the client sends them (all at
//! their arrival, under a concurrency cap, or from closed-loop users); a
//! sent request's roots are scheduled and its timeout set, or the router
//! rejects it.

use super::client::Client;
use super::event::Event;
use super::outcome::{ClockOverflow, FinishedRequest, NodeError, NodeOutcome, RequestStatus, ResultSink};
use super::requests::{Active, NodeProgress, SiblingPins};
use super::router::Affinity;
use super::simulation::Simulation;
use crate::latency::LatencyModel;
use crate::workload::Request;

impl<L: LatencyModel> Simulation<L> {
    /// Adds the next request. Arrivals must not decrease (the reader
    /// guarantees it); everything that happens before this arrival is
    /// simulated first. In a closed loop, this simulates until a user is free
    /// and sends the request then. False, with the request dropped, when it
    /// would be sent after the horizon: the caller can stop reading.
    pub fn add_request(&mut self, request: Request, sink: &mut dyn ResultSink) -> bool {
        match self.client.mode {
            Client::OpenLoop | Client::Capped { .. } => {
                if request.arrival_us() > self.horizon_us {
                    return false;
                }
                // (After a request held back below, the clock may already be
                // past this arrival: the arrival is the request's own.)
                let arrival_us = request.arrival_us();
                self.advance_to(arrival_us, sink);
                let limit = match self.client.mode {
                    Client::Capped { limit } => limit.max(1) as usize,
                    _ => usize::MAX,
                };
                // Held back, not read ahead: while more than `limit` requests
                // wait, this one cannot be sent before they are, so the
                // simulation goes on until fewer wait (a slot frees at most one
                // per finished request, so at least one still waits ahead of
                // it, and every send is as it would have been). The client's
                // queue then holds at most `limit + 1`, not every request that
                // arrived (a TraceV2 pool's sessions all arrive at 0). Not with
                // a router that rejects: a rejection frees the next at once, so
                // the queue could drain past this request (so with the
                // gateway's admission too).
                let rejects = self.cluster.router.config().max_queue.is_some() || self.gateway_admission();
                if limit != usize::MAX && !rejects {
                    while self.client.unsent.len() > limit && self.step_events(u64::MAX, sink) {}
                }
                if self.requests.in_flight < limit {
                    let send_us = self.now.max(arrival_us);
                    self.send(request, arrival_us, send_us, sink);
                } else {
                    self.client.unsent.push_back((request, arrival_us));
                }
            }
            Client::ClosedLoop { .. } => {
                while self.client.users_not_started == 0
                    && self.client.users_free_at.is_empty()
                    && self.step_events(u64::MAX, sink)
                {}
                // The earlier of the next user to start (ties: the new user)
                // and the first user free again.
                let starting = (self.client.users_not_started > 0).then(|| self.next_user_start());
                let freed = self.client.users_free_at.front().copied();
                let new_user = match (starting, freed) {
                    (Some(s), Some(f)) => s <= f,
                    (s, _) => s.is_some(),
                };
                let next_free = if new_user { starting } else { freed };
                match next_free {
                    Some(free_at) if free_at <= self.horizon_us => {
                        if new_user {
                            self.client.users_not_started -= 1;
                        } else {
                            self.client.users_free_at.pop_front();
                        }
                        let send_us = self.advance_to(free_at, sink);
                        if !self.send(request, 0, send_us, sink)
                            && let Client::ClosedLoop { think_time_us, .. } = self.client.mode
                        {
                            // Answered at once with an error: the user thinks, then sends again.
                            let requests = self.requests.next_index;
                            let next = self.later(send_us, think_time_us, || ClockOverflow::ThinkTime { requests });
                            self.client.users_free_at.push_back(next);
                        }
                    }
                    _ => return false,
                }
            }
        }
        true
    }

    /// Simulates everything before `t`; returns `t`, or now if that is later.
    pub(super) fn advance_to(&mut self, t: u64, sink: &mut dyn ResultSink) -> u64 {
        let t = t.max(self.now);
        if t > 0 {
            self.run_until(t - 1, sink);
        }
        t
    }

    /// The client sends `request` at `send_us`. The router admits it (its
    /// roots are scheduled) or rejects it, and then it leaves at once,
    /// reported; false then. With `router.env.admission_latency_ms`, the
    /// request is in flight until the router decides, then (see
    /// `router/hooks.rs`): true.
    pub(super) fn send(&mut self, request: Request, arrival_us: u64, send_us: u64, sink: &mut dyn ResultSink) -> bool {
        let in_window = self.window.on_send(send_us);
        let latency = self.admission_latency_us();
        if latency > 0 {
            let admit_us = self.later(send_us, latency, || ClockOverflow::Engine);
            self.dispatch_from(request, arrival_us, send_us, admit_us, in_window);
            return true;
        }
        let reason = if !self.cluster.admits(send_us) {
            self.rejection()
        } else {
            match self.cluster.gateway_admits(&request, send_us) {
                Ok(()) => {
                    self.dispatch(request, arrival_us, send_us, in_window);
                    return true;
                }
                Err(why) => why,
            }
        };
        let nodes = request
            .sub_requests
            .iter()
            .map(|_| NodeOutcome { error: Some(NodeError::Rejected(reason.clone())), ..NodeOutcome::default() })
            .collect();
        sink.request_done(FinishedRequest {
            index: self.requests.next_index,
            request,
            nodes,
            arrival_us,
            send_us,
            finish_us: None,
            status: RequestStatus::Rejected,
            in_window,
        });
        self.window.on_leave(self.requests.next_index, send_us, false);
        self.requests.next_index += 1;
        false
    }

    /// Why the router rejects a request.
    pub(super) fn rejection(&self) -> String {
        format!(
            "rejected: every replica has {} or more requests waiting (router.max_queue)",
            self.cluster.router.config().max_queue.unwrap_or(0)
        )
    }

    /// The request enters the system at `send_us`: its roots are scheduled.
    /// `in_window`: sent inside the measurement window.
    pub(super) fn dispatch(&mut self, request: Request, arrival_us: u64, send_us: u64, in_window: bool) {
        self.dispatch_from(request, arrival_us, send_us, send_us, in_window);
    }

    /// As [`Simulation::dispatch`], its roots counted from `start_us`: when
    /// it reaches the router's admission (`router.env`), which, later than
    /// the send and with `router.max_queue`, first decides then.
    pub(super) fn dispatch_from(
        &mut self,
        request: Request,
        arrival_us: u64,
        send_us: u64,
        start_us: u64,
        in_window: bool,
    ) {
        let n = request.sub_requests.len();
        if self.cluster.gateway.is_some() {
            self.gateway_count(&request, true);
        }
        let mut progress =
            vec![
                NodeProgress { pending_preds: 0, failed_pred: None, ready_us: start_us, split: None, in_hop: false };
                n
            ];
        for sub in &request.sub_requests {
            for &j in &sub.next {
                progress[j as usize].pending_preds += 1;
            }
        }
        let slot = match self.requests.free_slots.pop() {
            Some(s) => s,
            None => {
                self.requests.active.push(None);
                self.requests.slot_generations.push(0);
                self.requests.active.len() as u32 - 1
            }
        };
        let generation = self.requests.slot_generations[slot as usize].wrapping_add(1);
        self.requests.slot_generations[slot as usize] = generation;
        if start_us > send_us && (self.cluster.router.config().max_queue.is_some() || self.gateway_admission()) {
            // Before its roots at the same time (the queue is FIFO on ties).
            self.queue.push(start_us, Event::Admit { slot, generation });
        }
        for &root in &request.initial {
            let at = self.later(start_us, request.sub_requests[root as usize].interval_us(), || ClockOverflow::Node {
                request_id: request.request_id.to_string(),
                node: root,
                field: "interval",
            });
            self.queue.push(at, Event::NodeStart { slot, generation, node: root });
        }
        if let Some(t) = self.client.timeout_us {
            let at = self.later(send_us, t, || ClockOverflow::Timeout);
            self.queue.push(at, Event::Timeout { slot, generation });
        }
        let siblings = (self.cluster.router.config().affinity == Affinity::SiblingGroup).then(|| {
            let (group, n) = super::router::siblings::sibling_groups(&request.sub_requests);
            Box::new(SiblingPins { group, replica: vec![None; n as usize] })
        });
        self.requests.active[slot as usize] = Some(Active {
            index: self.requests.next_index,
            generation,
            request,
            arrival_us,
            send_us,
            nodes: vec![NodeOutcome::default(); n],
            progress,
            unresolved: n,
            pinned: None,
            siblings,
            in_window,
        });
        self.requests.next_index += 1;
        self.requests.in_flight += 1;
    }

    /// A request left (or was answered with a rejection): the client may
    /// send another.
    pub(super) fn slot_freed(&mut self, sink: &mut dyn ResultSink) {
        match self.client.mode {
            Client::OpenLoop => {}
            Client::Capped { .. } => {
                // A rejected request frees its place at once: the next is tried.
                while let Some((request, arrival_us)) = self.client.unsent.pop_front() {
                    if self.send(request, arrival_us, self.now, sink) {
                        break;
                    }
                }
            }
            Client::ClosedLoop { think_time_us, .. } => {
                let requests = self.requests.next_index;
                let next = self.later(self.now, think_time_us, || ClockOverflow::ThinkTime { requests });
                self.client.users_free_at.push_back(next)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::{Linear, StepPricer};
    use crate::sim::engine::EngineConfig;
    use crate::sim::outcome::CLOCK_LIMIT_US;
    use crate::workload::{LlmCall, NodeKind, RequestId, SubRequest};

    fn sim(client: Client) -> Simulation<StepPricer> {
        let config = EngineConfig::for_tests(4, 64, 64);
        let mut s = Simulation::new(config, StepPricer::Linear(Linear::new(&[1000.0, 1.0, 1.0]).unwrap()));
        s.set_client(client);
        s
    }

    fn request(id: u64, arrival_time: f64) -> Request {
        let call = LlmCall::new(8, 4);
        Request {
            traffic: Default::default(),
            request_id: RequestId::Int(id),
            arrival_time,
            initial: vec![0],
            sub_requests: vec![SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None }],
        }
    }

    #[test]
    fn a_capped_client_reads_no_further_ahead_than_it_can_send() {
        // 1,000 requests at 0 under a cap of 2: at most 3 wait at any time.
        let mut s = sim(Client::Capped { limit: 2 });
        let mut out: Vec<FinishedRequest> = Vec::new();
        for i in 0..1000 {
            assert!(s.add_request(request(i, 0.0), &mut out));
            assert!(s.client.unsent.len() <= 3, "{} waiting", s.client.unsent.len());
        }
        s.finish(&mut out);
        assert_eq!(out.len(), 1000);
        assert!(out.iter().all(|r| r.arrival_us == 0 && r.status == RequestStatus::Completed));
    }

    #[test]
    fn closed_loop_users_are_counted_and_think_times_checked() {
        let mut s = sim(Client::ClosedLoop { users: u32::MAX, think_time_us: CLOCK_LIMIT_US / 2 });
        assert!(s.client.users_free_at.is_empty());
        let mut out: Vec<FinishedRequest> = Vec::new();
        for i in 0..3 {
            s.add_request(request(i, 0.0), &mut out);
        }
        assert_eq!(s.client.users_not_started, u64::from(u32::MAX) - 3);
        assert!(s.clock_overflow().is_none());
        let mut one = sim(Client::ClosedLoop { users: 1, think_time_us: CLOCK_LIMIT_US / 2 });
        for i in 0..4 {
            one.add_request(request(i, 0.0), &mut out);
        }
        assert!(matches!(one.clock_overflow(), Some(ClockOverflow::ThinkTime { .. })), "{:?}", one.clock_overflow());
    }
}
