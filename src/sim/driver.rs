//! The DAG driver and the simulation loop.
//!
//! A root node starts `interval` after its request arrives; any other node
//! starts `interval` after its last predecessor finishes. A tool call finishes
//! `duration` after it starts and uses no device. An llm node enters the
//! engine when it starts and finishes with its last output token. A request
//! finishes when its last node does, and then leaves through the
//! [`ResultSink`] with everything measured about it; its state is freed.
//!
//! An llm node the engine can never serve fails at its start; the nodes that
//! depend on it are skipped, and the request is reported as failed.
//!
//! Events at the same microsecond are handled in the order they were
//! scheduled; the engine starts its next step only after all of them, so a
//! node that starts at the instant a step ends joins the next step.
//!
//! With async scheduling (vLLM's default), the engine pipelines: when a step
//! starts executing, the step after it is scheduled at once, before the
//! first one's results are in. A request that reaches the engine while a
//! step executes is therefore first scheduled two steps later.

use std::collections::VecDeque;

use super::engine::{Batch, Departure, Engine, EngineConfig, EngineEvent, EngineStats, Owner};
use super::queue::EventQueue;
use super::step_trace::{EngineStep, NodeRef};
use crate::latency::LatencyModel;
use crate::workload::{NodeKind, Request};

/// Why a node did not run to completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeError {
    /// The engine can never serve this call (too long for `max_model_len` or
    /// for the KV cache); the message says which.
    Unservable(String),
    /// Not run because predecessor `0` failed.
    Skipped(u32),
    /// The horizon was reached before the node finished.
    Unfinished,
    /// The client stopped waiting (its request timeout) before the node
    /// finished.
    TimedOut,
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::Unservable(why) => f.write_str(why),
            NodeError::Skipped(p) => write!(f, "not run: predecessor {p} failed"),
            NodeError::Unfinished => f.write_str("unfinished: the horizon was reached"),
            NodeError::TimedOut => f.write_str("timed out: the client stopped waiting"),
        }
    }
}

/// Everything measured about one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeOutcome {
    /// When it started (entered the scheduler, for llm nodes), µs.
    pub start_us: Option<u64>,
    /// When the engine first admitted it, µs.
    pub scheduled_us: Option<u64>,
    /// Emission time of each output token, µs.
    pub token_times_us: Vec<u64>,
    /// When it finished, µs.
    pub finish_us: Option<u64>,
    /// Why it did not run to completion, if so.
    pub error: Option<NodeError>,
    /// Prompt tokens found in the prefix cache at first admission.
    pub cached_tokens: u32,
    /// Times the engine preempted it.
    pub preemptions: u32,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestStatus {
    /// Every node ran.
    Completed,
    /// A node was unservable.
    Unservable,
    /// The horizon cut it short.
    Unfinished,
    /// The client's request timeout cut it short.
    TimedOut,
}

/// A request leaving the simulation.
#[derive(Debug)]
pub struct FinishedRequest {
    /// Position in the input (0-based), for writing results in input order.
    pub index: u64,
    /// The request as read.
    pub request: Request,
    /// One outcome per sub-request.
    pub nodes: Vec<NodeOutcome>,
    /// Arrival, µs (as read; 0 for every request of a closed loop).
    pub arrival_us: u64,
    /// When the client sent it, µs: its arrival, or later when a concurrency
    /// cap or a closed loop made it wait. E2E counts from here.
    pub send_us: u64,
    /// When its last node finished, µs (completed requests).
    pub finish_us: Option<u64>,
    /// How it ended.
    pub status: RequestStatus,
}

impl FinishedRequest {
    /// Appends the request's result row (see [`crate::workload::writer`]).
    /// Its `arrival_time` is when the client sent it, where the client held
    /// it back: a result row records when the request reached the server, as
    /// a real client's baseline does.
    pub fn write_result_row(&self, out: &mut Vec<u8>) {
        let arrival_time = if self.send_us != self.request.arrival_us() {
            self.send_us as f64 / 1e6
        } else {
            self.request.arrival_time
        };
        let errors: Vec<Option<String>> = self.nodes.iter().map(|n| n.error.as_ref().map(|e| e.to_string())).collect();
        crate::workload::writer::write_result_row_at(out, &self.request, arrival_time, &mut |i| {
            let node = &self.nodes[i];
            Some(crate::workload::writer::NodeTokens {
                start_us: node.start_us.unwrap_or(0),
                token_times_us: &node.token_times_us,
                error: errors[i].as_deref(),
            })
        });
    }
}

/// Where finished requests go: the result writer, the metrics, a test's `Vec`.
pub trait ResultSink {
    /// Called once per request, in completion order.
    fn request_done(&mut self, request: FinishedRequest);

    /// Called once per engine step when the step trace is on
    /// ([`Simulation::set_step_trace`]), in execution order.
    fn engine_step(&mut self, _step: &EngineStep) {}
}

impl ResultSink for Vec<FinishedRequest> {
    fn request_done(&mut self, request: FinishedRequest) {
        self.push(request);
    }
}

/// How requests reach the engine: the behaviour of the benchmark client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Client {
    /// Every request is sent at its arrival time.
    #[default]
    OpenLoop,
    /// At most `limit` requests (whole DAGs) in flight: a request is sent at
    /// its arrival time or, if `limit` are in flight, when one finishes
    /// (first come, first sent), like a benchmark client with a concurrency cap.
    Capped {
        /// Requests in flight at most (≥ 1).
        limit: u32,
    },
    /// `users` virtual users, each sending its next request `think_time_us`
    /// after its previous one finished; arrival times are ignored and every
    /// user starts at time 0.
    ClosedLoop {
        /// Virtual users (≥ 1).
        users: u32,
        /// Pause between a user's response and its next request, µs.
        think_time_us: u64,
    },
}

/// Events name a request by its slot and the slot's generation: a request
/// that timed out leaves events behind, and they must not touch the request
/// that reuses its slot.
#[derive(Debug, Clone, Copy)]
enum Event {
    NodeStart {
        slot: u32,
        generation: u32,
        node: u32,
    },
    /// An llm node reaches the engine, after the server's front end.
    EngineEnter {
        slot: u32,
        generation: u32,
        node: u32,
    },
    ToolDone {
        slot: u32,
        generation: u32,
        node: u32,
    },
    /// The client stops waiting for the request.
    Timeout {
        slot: u32,
        generation: u32,
    },
    StepEnd,
}

struct Active {
    index: u64,
    /// The slot's generation when this request took it.
    generation: u32,
    request: Request,
    arrival_us: u64,
    send_us: u64,
    nodes: Vec<NodeOutcome>,
    pending_preds: Vec<u32>,
    ready_us: Vec<u64>,
    failed_pred: Vec<Option<u32>>,
    unresolved: usize,
}

/// One simulated engine serving a stream of request DAGs.
pub struct Simulation<L> {
    now: u64,
    queue: EventQueue<Event>,
    engine: Engine<L>,
    active: Vec<Option<Active>>,
    free_slots: Vec<u32>,
    in_flight: usize,
    next_index: u64,
    events: Vec<EngineEvent>,
    /// Step trace on: the records of the step executing and of the one
    /// queued after it (async scheduling), named when they were scheduled.
    tracing: bool,
    trace_executing: EngineStep,
    trace_queued: EngineStep,
    /// Preempted by a scheduling that scheduled nothing: reported with the
    /// next step.
    trace_carried: Vec<NodeRef>,
    steps_started: u64,
    check_invariants: bool,
    client: Client,
    /// Nothing happens after this time, µs (`u64::MAX`: no horizon).
    horizon_us: u64,
    /// Capped client: arrived requests waiting for a free slot, with their arrival.
    unsent: VecDeque<(Request, u64)>,
    /// Closed loop: when each idle user sends next, ascending.
    users_free_at: VecDeque<u64>,
    /// How many requests each slot has held.
    slot_generations: Vec<u32>,
    /// The client gives up on a request this long after sending it, µs.
    timeout_us: Option<u64>,
}

impl<L> std::fmt::Debug for Simulation<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation").field("now", &self.now).field("in_flight", &self.in_flight).finish()
    }
}

impl<L: LatencyModel> Simulation<L> {
    /// An idle engine at time 0.
    pub fn new(config: EngineConfig, latency: L) -> Self {
        Simulation {
            now: 0,
            queue: EventQueue::new(),
            engine: Engine::new(config, latency),
            active: Vec::new(),
            free_slots: Vec::new(),
            in_flight: 0,
            next_index: 0,
            events: Vec::new(),
            tracing: false,
            trace_executing: EngineStep::default(),
            trace_queued: EngineStep::default(),
            trace_carried: Vec::new(),
            steps_started: 0,
            check_invariants: false,
            client: Client::OpenLoop,
            horizon_us: u64::MAX,
            unsent: VecDeque::new(),
            users_free_at: VecDeque::new(),
            slot_generations: Vec::new(),
            timeout_us: None,
        }
    }

    /// Stops the simulation at `horizon_us`: later events never happen, and
    /// requests not finished by then are reported unfinished.
    pub fn set_horizon(&mut self, horizon_us: Option<u64>) {
        self.horizon_us = horizon_us.unwrap_or(u64::MAX);
    }

    /// The client gives up on a request `timeout_us` after sending it (as a
    /// benchmark client's HTTP timeout does): what it still runs is aborted,
    /// its KV blocks freed, and it is reported timed out. Set before the
    /// first request is added.
    pub fn set_request_timeout(&mut self, timeout_us: Option<u64>) {
        self.timeout_us = timeout_us;
    }

    /// Sets how requests are sent (before the first request is added).
    pub fn set_client(&mut self, client: Client) {
        self.client = client;
        self.users_free_at.clear();
        if let Client::ClosedLoop { users, .. } = client {
            self.users_free_at.extend(std::iter::repeat_n(0, users.max(1) as usize));
        }
    }

    /// Reports every engine step to the sink's [`ResultSink::engine_step`].
    /// Off by default: building the records costs a little per step.
    pub fn set_step_trace(&mut self, on: bool) {
        self.tracing = on;
        self.engine.set_tracing(on);
    }

    /// Verifies the KV cache's block accounting after every step and panics
    /// on a violation. For tests; costs a walk of the free queue per step.
    pub fn check_invariants(&mut self, on: bool) {
        self.check_invariants = on;
    }

    /// Current simulated time, µs: the time of the last event handled.
    pub fn now_us(&self) -> u64 {
        self.now
    }

    /// Requests added and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Engine counters so far.
    pub fn engine_stats(&self) -> &EngineStats {
        self.engine.stats()
    }

    /// (running, waiting) requests in the engine now.
    pub fn engine_queues(&self) -> (usize, usize) {
        (self.engine.num_running(), self.engine.num_waiting())
    }

    /// Adds the next request. Arrivals must not decrease (the reader
    /// guarantees it); everything that happens before this arrival is
    /// simulated first. In a closed loop, this simulates until a user is free
    /// and sends the request then. False, with the request dropped, when it
    /// would be sent after the horizon: the caller can stop reading.
    pub fn add_request(&mut self, request: Request, sink: &mut dyn ResultSink) -> bool {
        match self.client {
            Client::OpenLoop | Client::Capped { .. } => {
                if request.arrival_us() > self.horizon_us {
                    return false;
                }
                let arrival_us = self.advance_to(request.arrival_us(), sink);
                let limit = match self.client {
                    Client::Capped { limit } => limit.max(1) as usize,
                    _ => usize::MAX,
                };
                if self.in_flight < limit {
                    self.send(request, arrival_us, arrival_us);
                } else {
                    self.unsent.push_back((request, arrival_us));
                }
            }
            Client::ClosedLoop { .. } => {
                while self.users_free_at.is_empty() && self.step_events(u64::MAX, sink) {}
                match self.users_free_at.front() {
                    Some(&free_at) if free_at <= self.horizon_us => {
                        self.users_free_at.pop_front();
                        let send_us = self.advance_to(free_at, sink);
                        self.send(request, 0, send_us);
                    }
                    _ => return false,
                }
            }
        }
        true
    }

    /// Simulates everything before `t`; returns `t`, or now if that is later.
    fn advance_to(&mut self, t: u64, sink: &mut dyn ResultSink) -> u64 {
        let t = t.max(self.now);
        if t > 0 {
            self.run_until(t - 1, sink);
        }
        t
    }

    /// The client sends `request` at `send_us`: its roots are scheduled.
    fn send(&mut self, request: Request, arrival_us: u64, send_us: u64) {
        let n = request.sub_requests.len();
        let mut pending_preds = vec![0u32; n];
        for sub in &request.sub_requests {
            for &j in &sub.next {
                pending_preds[j as usize] += 1;
            }
        }
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.active.push(None);
                self.slot_generations.push(0);
                self.active.len() as u32 - 1
            }
        };
        let generation = self.slot_generations[slot as usize].wrapping_add(1);
        self.slot_generations[slot as usize] = generation;
        for &root in &request.initial {
            let at = send_us.saturating_add(request.sub_requests[root as usize].interval_us());
            self.queue.push(at, Event::NodeStart { slot, generation, node: root });
        }
        if let Some(t) = self.timeout_us {
            self.queue.push(send_us.saturating_add(t), Event::Timeout { slot, generation });
        }
        self.active[slot as usize] = Some(Active {
            index: self.next_index,
            generation,
            request,
            arrival_us,
            send_us,
            nodes: vec![NodeOutcome::default(); n],
            pending_preds,
            ready_us: vec![send_us; n],
            failed_pred: vec![None; n],
            unresolved: n,
        });
        self.next_index += 1;
        self.in_flight += 1;
    }

    /// A request left: the client may send another.
    fn slot_freed(&mut self) {
        match self.client {
            Client::OpenLoop => {}
            Client::Capped { .. } => {
                if let Some((request, arrival_us)) = self.unsent.pop_front() {
                    self.send(request, arrival_us, self.now);
                }
            }
            Client::ClosedLoop { think_time_us, .. } => {
                self.users_free_at.push_back(self.now.saturating_add(think_time_us))
            }
        }
    }

    /// Handles every event up to and including `limit` µs.
    pub fn run_until(&mut self, limit: u64, sink: &mut dyn ResultSink) {
        while self.step_events(limit, sink) {}
    }

    /// Handles every event of the earliest pending time, if that is at most
    /// `limit`, then lets the engine start a step. False when there was none.
    fn step_events(&mut self, limit: u64, sink: &mut dyn ResultSink) -> bool {
        let limit = limit.min(self.horizon_us);
        // Events a request left behind when it timed out (its own timeout
        // if it finished first, nodes it never started) go without moving
        // the clock: the run ends at its last real event.
        while self.queue.peek().is_some_and(|e| self.is_stale(e)) {
            self.queue.pop();
        }
        let Some(t) = self.queue.peek_time().filter(|&t| t <= limit) else {
            return false;
        };
        debug_assert!(t >= self.now, "time went backwards");
        self.now = t;
        while self.queue.peek_time() == Some(t) {
            let (_, event) = self.queue.pop().expect("peeked");
            self.handle(event, sink);
        }
        self.start_step(sink);
        true
    }

    /// Runs to the end (or to the horizon), then reports every request still
    /// in flight as unfinished.
    pub fn finish(&mut self, sink: &mut dyn ResultSink) {
        self.run_until(u64::MAX, sink);
        for d in self.engine.drain() {
            self.record_departure(d);
        }
        if (self.in_flight > 0 || !self.unsent.is_empty()) && self.horizon_us != u64::MAX {
            // Only a horizon leaves requests behind; the run lasted until it.
            self.now = self.now.max(self.horizon_us);
        }
        // A capped client's queue empties as requests finish; with a horizon,
        // what is left was never sent (and is reported with its arrival).
        while let Some((request, arrival_us)) = self.unsent.pop_front() {
            self.send(request, arrival_us, arrival_us);
        }
        for slot in 0..self.active.len() as u32 {
            let Some(a) = self.active[slot as usize].as_mut() else { continue };
            for node in &mut a.nodes {
                if node.finish_us.is_none() && node.error.is_none() {
                    node.error = Some(NodeError::Unfinished);
                }
            }
            // (The client sends nothing more: its queue is empty by now.)
            self.complete(slot, RequestStatus::Unfinished, sink);
        }
    }

    /// Event count left in the queue (for tests).
    pub fn pending_events(&self) -> usize {
        self.queue.len()
    }

    /// If the engine is idle, starts its next step: the one queued (async
    /// scheduling), else a newly scheduled one; with async scheduling, the
    /// step after it is then scheduled at once.
    fn start_step(&mut self, sink: &mut dyn ResultSink) {
        if self.engine.stepping() {
            return;
        }
        let mut events = std::mem::take(&mut self.events);
        let duration = match self.engine.start_queued() {
            Some(d) => {
                std::mem::swap(&mut self.trace_executing, &mut self.trace_queued);
                Some(d)
            }
            None if self.engine.has_work() => {
                let d = self.engine.start_step(&mut events);
                if self.tracing {
                    self.trace_scheduling(d.is_some(), false);
                }
                d
            }
            None => None,
        };
        if let Some(d) = duration {
            self.queue.push(self.now.saturating_add(d), Event::StepEnd);
            if self.tracing {
                self.trace_executing.index = self.steps_started;
                self.trace_executing.start_us = self.now;
                sink.engine_step(&self.trace_executing);
            }
            self.steps_started += 1;
            if self.engine.config().async_scheduling {
                let queued = self.engine.queue_step(&mut events);
                if self.tracing {
                    self.trace_scheduling(queued, true);
                }
            }
        }
        for e in events.drain(..) {
            if let EngineEvent::Scheduled(owner) = e {
                self.active_mut(owner.slot).nodes[owner.node as usize].scheduled_us = Some(self.now);
            }
        }
        self.events = events;
    }

    /// Step trace: names the requests of what the engine just scheduled, in
    /// the record of the step executing or of the one queued. A scheduling
    /// that scheduled nothing can still have preempted (a request that
    /// cannot grow preempts itself): those are reported with the next step.
    /// Named now, since a slot can be reused before the step runs.
    fn trace_scheduling(&mut self, scheduled: bool, queued: bool) {
        if !scheduled {
            let carried: Vec<NodeRef> =
                self.engine.preempted_unscheduled().iter().map(|&slot| self.node_ref(slot)).collect();
            self.trace_carried.extend(carried);
            return;
        }
        let mut record = std::mem::take(if queued { &mut self.trace_queued } else { &mut self.trace_executing });
        let batch: &Batch = if queued { self.engine.last_scheduled() } else { self.engine.executing() };
        record.duration_us = batch.duration_us;
        record.kv_blocks_used = batch.kv_blocks_used;
        record.scheduled.clear();
        record.scheduled.extend(batch.entries.iter().map(|e| (self.node_ref(e.slot), e.tokens)));
        record.admitted.clear();
        record.admitted.extend(batch.admitted.iter().map(|&(slot, cached)| (self.node_ref(slot), cached)));
        record.preempted.clear();
        record.preempted.append(&mut self.trace_carried);
        record.preempted.extend(batch.preempted.iter().map(|&slot| self.node_ref(slot)));
        *(if queued { &mut self.trace_queued } else { &mut self.trace_executing }) = record;
    }

    /// The request and node the engine's `slot` holds.
    fn node_ref(&self, slot: u32) -> NodeRef {
        let owner = self.engine.owner(slot);
        let a = self.active[owner.slot as usize].as_ref().expect("live request");
        NodeRef { request_id: a.request.request_id.clone(), node: owner.node }
    }

    fn record_departure(&mut self, d: Departure) {
        let node = &mut self.active_mut(d.owner.slot).nodes[d.owner.node as usize];
        node.token_times_us = d.token_times_us;
        node.preemptions = d.preemptions;
        node.cached_tokens = d.cached_tokens;
    }

    fn active_mut(&mut self, slot: u32) -> &mut Active {
        self.active[slot as usize].as_mut().expect("live request")
    }

    fn handle(&mut self, event: Event, sink: &mut dyn ResultSink) {
        match event {
            Event::NodeStart { slot, generation, node } if self.is_live(slot, generation) => {
                self.start_node(slot, node, sink)
            }
            Event::ToolDone { slot, generation, node } if self.is_live(slot, generation) => {
                self.node_done(slot, node, sink)
            }
            Event::EngineEnter { slot, generation, node } if self.is_live(slot, generation) => {
                self.enter_engine(slot, node, sink)
            }
            Event::Timeout { slot, generation } if self.is_live(slot, generation) => self.time_out(slot, sink),
            // Left behind by a request that timed out.
            Event::NodeStart { .. } | Event::ToolDone { .. } | Event::EngineEnter { .. } | Event::Timeout { .. } => {}
            Event::StepEnd => {
                let mut events = std::mem::take(&mut self.events);
                self.engine.finish_step(self.now, &mut events);
                if self.check_invariants
                    && let Err(e) = self.engine.check_kv()
                {
                    panic!("KV cache invariant broken at {} µs: {e}", self.now);
                }
                for e in events.drain(..) {
                    if let EngineEvent::Finished(d) = e {
                        let owner = d.owner;
                        self.record_departure(d);
                        self.node_done(owner.slot, owner.node, sink);
                    }
                }
                self.events = events;
            }
        }
    }

    fn start_node(&mut self, slot: u32, node: u32, sink: &mut dyn ResultSink) {
        let now = self.now;
        let a = self.active[slot as usize].as_mut().expect("live request");
        a.nodes[node as usize].start_us = Some(now);
        match &a.request.sub_requests[node as usize].kind {
            NodeKind::ToolCall { duration } => {
                let end = now.saturating_add(crate::workload::seconds_to_us(*duration));
                let generation = a.generation;
                self.queue.push(end, Event::ToolDone { slot, generation, node });
            }
            NodeKind::Llm(call) => {
                if call.tokens_to_emit() == 0 {
                    // Seeded progress already holds every output token.
                    self.node_done(slot, node, sink);
                    return;
                }
                // The server's front end (HTTP, tokenization) takes this long
                // before the engine sees the request; it counts in TTFT.
                match self.engine.request_overhead_us() {
                    0 => self.enter_engine(slot, node, sink),
                    delay => self
                        .queue
                        .push(now.saturating_add(delay), Event::EngineEnter { slot, generation: a.generation, node }),
                }
            }
        }
    }

    fn enter_engine(&mut self, slot: u32, node: u32, sink: &mut dyn ResultSink) {
        let a = self.active[slot as usize].as_mut().expect("live request");
        let NodeKind::Llm(call) = &a.request.sub_requests[node as usize].kind else {
            unreachable!("only llm nodes enter the engine")
        };
        if let Err(why) = self.engine.add(Owner { slot, node }, call) {
            a.nodes[node as usize].error = Some(NodeError::Unservable(why));
            self.node_done(slot, node, sink);
        }
    }

    /// Marks a node finished (or failed) now and releases its successors.
    fn node_done(&mut self, slot: u32, node: u32, sink: &mut dyn ResultSink) {
        let now = self.now;
        let a = self.active[slot as usize].as_mut().expect("live request");
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
                a.pending_preds[s] -= 1;
                if failed {
                    a.failed_pred[s].get_or_insert(n);
                } else {
                    a.ready_us[s] = a.ready_us[s].max(now);
                }
                if a.pending_preds[s] > 0 {
                    continue;
                }
                if let Some(p) = a.failed_pred[s] {
                    a.nodes[s].error = Some(NodeError::Skipped(p));
                    a.unresolved -= 1;
                    stack.push((s as u32, true));
                } else {
                    let at = a.ready_us[s].saturating_add(a.request.sub_requests[s].interval_us());
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
    fn is_stale(&self, event: &Event) -> bool {
        match *event {
            Event::NodeStart { slot, generation, .. }
            | Event::ToolDone { slot, generation, .. }
            | Event::EngineEnter { slot, generation, .. }
            | Event::Timeout { slot, generation } => !self.is_live(slot, generation),
            Event::StepEnd => false,
        }
    }

    /// Whether `slot` still holds the request of `generation`.
    fn is_live(&self, slot: u32, generation: u32) -> bool {
        self.active[slot as usize].as_ref().is_some_and(|a| a.generation == generation)
    }

    /// The request in `slot` leaves with `status`: reported, its slot freed.
    fn complete(&mut self, slot: u32, status: RequestStatus, sink: &mut dyn ResultSink) {
        let a = self.active[slot as usize].take().expect("live request");
        self.free_slots.push(slot);
        self.in_flight -= 1;
        let finish_us = a.nodes.iter().filter_map(|n| n.finish_us).max();
        sink.request_done(FinishedRequest {
            index: a.index,
            request: a.request,
            nodes: a.nodes,
            arrival_us: a.arrival_us,
            send_us: a.send_us,
            finish_us: if status == RequestStatus::Completed { finish_us } else { None },
            status,
        });
        self.slot_freed();
    }

    /// The client gives up on the request in `slot`: its llm nodes still in
    /// the engine are aborted (keeping the tokens they streamed), every node
    /// not finished is marked timed out, and the request leaves now. Events
    /// it left in the queue find its slot's generation moved on.
    fn time_out(&mut self, slot: u32, sink: &mut dyn ResultSink) {
        let n = self.active_mut(slot).nodes.len();
        for node in 0..n {
            let outcome = &self.active_mut(slot).nodes[node];
            if outcome.finish_us.is_some() || outcome.error.is_some() {
                continue;
            }
            if outcome.start_us.is_some()
                && let Some(d) = self.engine.abort(Owner { slot, node: node as u32 })
            {
                self.record_departure(d);
            }
            self.active_mut(slot).nodes[node].error = Some(NodeError::TimedOut);
        }
        self.complete(slot, RequestStatus::TimedOut, sink);
    }
}
