//! The simulation: one struct owning the clock, the event queue, the
//! client's and the DAGs' state and the engine; the event loop and the
//! engine's steps. The client lives in `client.rs`, DAG progress in
//! `dag.rs`, what leaves in `outcome.rs`.
//!
//! Events at the same microsecond are handled in the order they were
//! scheduled; the engine starts its next step only after all of them, so a
//! node that starts at the instant a step ends joins the next step.
//!
//! With async scheduling (vLLM's default), the engine pipelines: when a step
//! starts executing, the step after it is scheduled at once, before the
//! first one's results are in. A request that reaches the engine while a
//! step executes is therefore first scheduled two steps later.
//!
//! Replicas step independently, each on its own clock, except the
//! data-parallel ranks of an MoE model: they step in lockstep
//! ([`Simulation::start_lockstep`]).

use std::collections::VecDeque;

use super::client::Client;
use super::dag::Active;
use super::engine::{Batch, Departure, EngineConfig, EngineEvent, EngineStats};
use super::instance::Instance;
use super::outcome::{ClockOverflow, NodeError, RequestStatus, ResultSink, later_or_overflow};
use super::queue::EventQueue;
use super::router::{Router, RouterConfig};
use super::step_trace::NodeRef;
use super::window::{Measurement, Window, WindowState};
use crate::latency::LatencyModel;
use crate::workload::Request;

/// Events name a request by its slot and the slot's generation: a request
/// that timed out leaves events behind, and they must not touch the request
/// that reuses its slot.
#[derive(Debug, Clone, Copy)]
pub(super) enum Event {
    NodeStart {
        slot: u32,
        generation: u32,
        node: u32,
    },
    /// An llm node reaches replica `replica`'s engine, after the server's
    /// front end.
    EngineEnter {
        slot: u32,
        generation: u32,
        node: u32,
        replica: u32,
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
    /// Replica `replica`'s executing step ends.
    StepEnd {
        replica: u32,
    },
}

/// Simulated replicas of one engine behind a router, serving a stream of
/// request DAGs.
pub struct Simulation<L> {
    pub(super) now: u64,
    pub(super) queue: EventQueue<Event>,
    /// Prices every replica's steps (models are stateless).
    pub(super) latency: L,
    /// The server's front end (HTTP, tokenization) before the engine, µs.
    pub(super) request_overhead_us: u64,
    pub(super) instances: Vec<Instance>,
    pub(super) router: Router,
    pub(super) active: Vec<Option<Active>>,
    pub(super) free_slots: Vec<u32>,
    pub(super) in_flight: usize,
    pub(super) next_index: u64,
    pub(super) events: Vec<EngineEvent>,
    pub(super) tracing: bool,
    pub(super) check_invariants: bool,
    pub(super) client: Client,
    /// Nothing happens after this time, µs (`u64::MAX`: no horizon).
    pub(super) horizon_us: u64,
    /// Capped client: arrived requests waiting for a free slot, with their arrival.
    pub(super) unsent: VecDeque<(Request, u64)>,
    /// Closed loop: when each idle user that has sent before sends next,
    /// ascending.
    pub(super) users_free_at: VecDeque<u64>,
    /// Closed loop: users that have not sent yet (all free at time 0, before
    /// those in `users_free_at`). A count, not a queue entry each: a run never
    /// needs more users than it has requests, however many are asked for.
    pub(super) users_not_started: u64,
    /// The first sum of times that passed the clock: the run stops with it.
    pub(super) clock_overflow: Option<ClockOverflow>,
    /// How many requests each slot has held.
    pub(super) slot_generations: Vec<u32>,
    /// The client gives up on a request this long after sending it, µs.
    pub(super) timeout_us: Option<u64>,
    /// The replicas are data-parallel ranks that step together.
    pub(super) lockstep: bool,
    /// Ranks that started the current lockstep step (reused buffer).
    pub(super) lockstep_started: Vec<u32>,
    /// Warm-up and ramp, as set.
    pub(super) measurement: Measurement,
    /// The measurement window as the run goes.
    pub(super) window: WindowState,
}

/// An idle data-parallel rank's batch: nothing (it runs the dummy batch).
static IDLE_RANK: crate::latency::StepBatch = crate::latency::StepBatch::EMPTY;

impl<L> std::fmt::Debug for Simulation<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation").field("now", &self.now).field("in_flight", &self.in_flight).finish()
    }
}

impl<L: LatencyModel> Simulation<L> {
    /// One idle engine at time 0.
    pub fn new(config: EngineConfig, latency: L) -> Self {
        Self::cluster(config, latency, 1, RouterConfig::default())
    }

    /// `replicas` (≥ 1) idle engines of `config` behind a router, at time 0.
    pub fn cluster(config: EngineConfig, latency: L, replicas: u32, router: RouterConfig) -> Self {
        let mut instances: Vec<Instance> = (0..replicas.max(1)).map(|_| Instance::new(config.clone())).collect();
        let router = Router::new(router, &mut instances);
        Simulation {
            now: 0,
            queue: EventQueue::new(),
            request_overhead_us: latency.request_overhead_us(),
            latency,
            instances,
            router,
            active: Vec::new(),
            free_slots: Vec::new(),
            in_flight: 0,
            next_index: 0,
            events: Vec::new(),
            tracing: false,
            check_invariants: false,
            client: Client::OpenLoop,
            horizon_us: u64::MAX,
            unsent: VecDeque::new(),
            users_free_at: VecDeque::new(),
            users_not_started: 0,
            clock_overflow: None,
            slot_generations: Vec::new(),
            timeout_us: None,
            lockstep: false,
            lockstep_started: Vec::new(),
            measurement: Measurement::default(),
            window: WindowState::default(),
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
        // Users are a count, not a queue entry each (a run never allocates
        // for users that have not sent); user k of n starts at k · ramp / n
        // (all at 0 without a ramp), see `next_user_start`.
        let closed_users = match client {
            Client::ClosedLoop { users, .. } => Some(u64::from(users.max(1))),
            _ => None,
        };
        self.users_not_started = closed_users.unwrap_or(0);
        self.window = WindowState::new(self.measurement, closed_users);
    }

    /// When the next closed-loop user that has not sent yet starts: user k
    /// of n at k · ramp / n.
    pub(super) fn next_user_start(&self) -> u64 {
        let Client::ClosedLoop { users, .. } = self.client else { return 0 };
        let n = u128::from(users.max(1));
        let k = n - u128::from(self.users_not_started.min(n as u64));
        (k * u128::from(self.measurement.ramp_us) / n) as u64
    }

    /// Sets the warm-up and the ramp (before the first request is added).
    pub fn set_measurement(&mut self, measurement: Measurement) {
        self.measurement = measurement;
        self.set_client(self.client);
    }

    /// The measurement window so far (the whole run's after `finish`).
    pub fn window(&self) -> Window {
        self.window.summary()
    }

    /// The first sum of times that passed the simulator's clock, if any: the
    /// run cannot go on (its later times would be wrong).
    pub fn clock_overflow(&self) -> Option<&ClockOverflow> {
        self.clock_overflow.as_ref()
    }

    /// `t + d`, or the clock's end with `what` kept as the run's error.
    pub(super) fn later(&mut self, t: u64, d: u64, what: impl FnOnce() -> ClockOverflow) -> u64 {
        later_or_overflow(&mut self.clock_overflow, t, d, what)
    }

    /// Makes the replicas data-parallel ranks of one MoE engine that step
    /// together, all ranks' steps priced at once by the latency model. Set
    /// before the first request.
    pub fn set_lockstep(&mut self, on: bool) {
        self.lockstep = on;
    }

    /// Reports every engine step to the sink's [`ResultSink::engine_step`].
    /// Off by default: building the records costs a little per step.
    pub fn set_step_trace(&mut self, on: bool) {
        self.tracing = on;
        for instance in &mut self.instances {
            instance.engine.set_tracing(on);
        }
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

    /// Engine counters so far, summed over the replicas.
    pub fn engine_stats(&self) -> EngineStats {
        let mut total = EngineStats::default();
        for instance in &self.instances {
            total.add(instance.engine.stats());
        }
        total
    }

    /// Each replica's engine counters so far.
    pub fn replica_stats(&self) -> Vec<EngineStats> {
        self.instances.iter().map(|i| i.engine.stats().clone()).collect()
    }

    /// (running, waiting) requests in the engines now.
    pub fn engine_queues(&self) -> (usize, usize) {
        self.instances.iter().fold((0, 0), |(r, w), i| (r + i.engine.num_running(), w + i.engine.num_waiting()))
    }

    /// Handles every event up to and including `limit` µs.
    pub fn run_until(&mut self, limit: u64, sink: &mut dyn ResultSink) {
        while self.step_events(limit, sink) {}
    }

    /// Handles every event of the earliest pending time, if that is at most
    /// `limit`, then lets idle engines start a step. False when there was none.
    pub(super) fn step_events(&mut self, limit: u64, sink: &mut dyn ResultSink) -> bool {
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
        if self.lockstep {
            self.start_lockstep(sink);
        } else {
            for replica in 0..self.instances.len() as u32 {
                self.start_step(replica, sink);
            }
        }
        true
    }

    /// Runs to the end (or to the horizon), then reports every request still
    /// in flight as unfinished.
    pub fn finish(&mut self, sink: &mut dyn ResultSink) {
        self.run_until(u64::MAX, sink);
        for replica in 0..self.instances.len() {
            for d in self.instances[replica].engine.drain() {
                self.record_departure(d);
            }
        }
        if (self.in_flight > 0 || !self.unsent.is_empty()) && self.horizon_us != u64::MAX {
            // Only a horizon leaves requests behind; the run lasted until it.
            self.now = self.now.max(self.horizon_us);
        }
        // A capped client's queue empties as requests finish; with a horizon,
        // what is left was never sent: the client still held it when the run
        // ended, so its send time is the end (the horizon), not its arrival.
        // Sends are then in input order at times that never decrease, as the
        // result rows (which record the send) must be for the reader.
        while let Some((request, arrival_us)) = self.unsent.pop_front() {
            // Never sent: outside the window.
            let held_until = self.now.max(arrival_us);
            self.dispatch(request, arrival_us, held_until, false);
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

    /// If replica `replica`'s engine is idle, starts its next step: the one
    /// queued (async scheduling), else a newly scheduled one; with async
    /// scheduling, the step after it is then scheduled at once.
    pub(super) fn start_step(&mut self, replica: u32, sink: &mut dyn ResultSink) {
        if self.instances[replica as usize].engine.stepping() {
            return;
        }
        if let Some(d) = self.begin_step(replica as usize) {
            self.launch(replica, d, sink);
        }
    }

    /// Data-parallel ranks in lockstep: when none is executing and one has
    /// work, every rank with work starts its step and the others run a dummy
    /// batch; all end together, after the step the latency model prices for
    /// all ranks at once (vLLM's DP engines of an MoE model meet in every MoE
    /// layer; `DPEngineCoreProc` runs `execute_dummy_batch` on an idle rank
    /// while any rank has requests).
    pub(super) fn start_lockstep(&mut self, sink: &mut dyn ResultSink) {
        if self.instances.iter().any(|i| i.engine.stepping()) {
            return;
        }
        let mut started = std::mem::take(&mut self.lockstep_started);
        started.clear();
        for r in 0..self.instances.len() {
            if self.begin_step(r).is_some() {
                started.push(r as u32);
            }
        }
        if !started.is_empty() {
            let batches: Vec<&crate::latency::StepBatch> = self
                .instances
                .iter()
                .map(|i| if i.engine.stepping() { &i.engine.executing().priced } else { &IDLE_RANK })
                .collect();
            let duration = self.latency.lockstep_time_us(&batches);
            for &r in &started {
                self.launch(r, duration, sink);
            }
        }
        self.lockstep_started = started;
    }

    /// Starts replica `r`'s queued step or schedules a new one; its duration,
    /// or `None` when it has nothing to run.
    fn begin_step(&mut self, r: usize) -> Option<u64> {
        let mut events = std::mem::take(&mut self.events);
        let instance = &mut self.instances[r];
        let duration = match instance.engine.start_queued() {
            Some(d) => {
                std::mem::swap(&mut instance.trace_executing, &mut instance.trace_queued);
                Some(d)
            }
            None if instance.engine.has_work() => {
                let d = instance.engine.start_step(&self.latency, &mut events);
                if self.tracing {
                    self.trace_scheduling(r, d.is_some(), false);
                }
                d
            }
            None => None,
        };
        self.scheduled(&mut events);
        self.events = events;
        duration
    }

    /// Replica `replica`'s step, just begun, executes for `duration_us`:
    /// its end is queued, it is traced, and with async scheduling the step
    /// after it is scheduled at once.
    fn launch(&mut self, replica: u32, duration_us: u64, sink: &mut dyn ResultSink) {
        let r = replica as usize;
        let end = self.later(self.now, duration_us, || ClockOverflow::Engine);
        self.queue.push(end, Event::StepEnd { replica });
        let cluster = self.instances.len() > 1;
        let instance = &mut self.instances[r];
        if self.tracing {
            instance.trace_executing.index = instance.steps_started;
            instance.trace_executing.start_us = self.now;
            instance.trace_executing.duration_us = duration_us;
            instance.trace_executing.replica = cluster.then_some(replica);
            sink.engine_step(&instance.trace_executing);
        }
        instance.steps_started += 1;
        if instance.engine.config().async_scheduling {
            let mut events = std::mem::take(&mut self.events);
            let queued = self.instances[r].engine.queue_step(&self.latency, &mut events);
            if self.tracing {
                self.trace_scheduling(r, queued, true);
            }
            self.scheduled(&mut events);
            self.events = events;
        }
    }

    /// Records the first admission of the requests the engine reports.
    fn scheduled(&mut self, events: &mut Vec<EngineEvent>) {
        for e in events.drain(..) {
            if let EngineEvent::Scheduled(owner) = e {
                self.active_mut(owner.slot).nodes[owner.node as usize].scheduled_us = Some(self.now);
            }
        }
    }

    /// Step trace: names the requests of what replica `r`'s engine just
    /// scheduled, in the record of the step executing or of the one queued.
    /// A scheduling that scheduled nothing can still have preempted (a
    /// request that cannot grow preempts itself): those are reported with
    /// the next step. Named now, since a slot can be reused before the step
    /// runs.
    pub(super) fn trace_scheduling(&mut self, r: usize, scheduled: bool, queued: bool) {
        let engine = &self.instances[r].engine;
        if !scheduled {
            let carried: Vec<NodeRef> =
                engine.preempted_unscheduled().iter().map(|&slot| self.node_ref(r, slot)).collect();
            self.instances[r].trace_carried.extend(carried);
            return;
        }
        let instance = &mut self.instances[r];
        let mut record =
            std::mem::take(if queued { &mut instance.trace_queued } else { &mut instance.trace_executing });
        let mut carried = std::mem::take(&mut instance.trace_carried);
        let engine = &self.instances[r].engine;
        let batch: &Batch = if queued { engine.last_scheduled() } else { engine.executing() };
        record.duration_us = batch.duration_us;
        record.kv_blocks_used = batch.kv_blocks_used;
        record.scheduled.clear();
        record.scheduled.extend(batch.entries.iter().map(|e| (self.node_ref(r, e.slot), e.tokens)));
        record.admitted.clear();
        record.admitted.extend(batch.admitted.iter().map(|&(slot, cached)| (self.node_ref(r, slot), cached)));
        record.preempted.clear();
        record.preempted.append(&mut carried);
        record.preempted.extend(batch.preempted.iter().map(|&slot| self.node_ref(r, slot)));
        let instance = &mut self.instances[r];
        instance.trace_carried = carried;
        *(if queued { &mut instance.trace_queued } else { &mut instance.trace_executing }) = record;
    }

    /// The request and node replica `r`'s engine holds in `slot`.
    pub(super) fn node_ref(&self, r: usize, slot: u32) -> NodeRef {
        let owner = self.instances[r].engine.owner(slot);
        let a = self.active[owner.slot as usize].as_ref().expect("live request");
        NodeRef { request_id: a.request.request_id.clone(), node: owner.node }
    }

    pub(super) fn record_departure(&mut self, d: Departure) {
        let node = &mut self.active_mut(d.owner.slot).nodes[d.owner.node as usize];
        node.token_times_us = d.token_times_us;
        node.preemptions = d.preemptions;
        node.cached_tokens = d.cached_tokens;
    }

    pub(super) fn handle(&mut self, event: Event, sink: &mut dyn ResultSink) {
        match event {
            Event::NodeStart { slot, generation, node } if self.is_live(slot, generation) => {
                self.start_node(slot, node, sink)
            }
            Event::ToolDone { slot, generation, node } if self.is_live(slot, generation) => {
                self.node_done(slot, node, sink)
            }
            Event::EngineEnter { slot, generation, node, replica } if self.is_live(slot, generation) => {
                self.instances[replica as usize].in_transit -= 1;
                self.enter_engine(slot, node, replica, sink)
            }
            Event::Timeout { slot, generation } if self.is_live(slot, generation) => self.time_out(slot, sink),
            // Left behind by a request that timed out.
            Event::NodeStart { .. } | Event::ToolDone { .. } | Event::EngineEnter { .. } | Event::Timeout { .. } => {}
            Event::StepEnd { replica } => {
                let r = replica as usize;
                let mut events = std::mem::take(&mut self.events);
                self.instances[r].engine.finish_step(self.now, &mut events);
                if self.check_invariants
                    && let Err(e) = self.instances[r].engine.check_kv()
                {
                    panic!("KV cache invariant broken on replica {r} at {} µs: {e}", self.now);
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
}
