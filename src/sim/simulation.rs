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
use super::cluster::Cluster;
use super::dag::Active;
use super::engine::{Batch, Departure, EngineConfig, EngineEvent, EngineStats};
use super::outcome::{ClockOverflow, NodeError, RequestStatus, ResultSink, later_or_overflow};
use super::pool::{KvTransferConfig, PdDecider, PoolConfig, Role};
use super::queue::EventQueue;
use super::router::RouterConfig;
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
    /// A prompt's KV, read from its prefill replica, has landed in replica
    /// `replica`'s engine slot `engine_slot`.
    KvLanded {
        slot: u32,
        generation: u32,
        node: u32,
        replica: u32,
        engine_slot: u32,
    },
}

/// Simulated pools of engine replicas behind routers, serving a stream of
/// request DAGs.
pub struct Simulation<L> {
    pub(super) now: u64,
    pub(super) queue: EventQueue<Event>,
    /// The replicas, their pools, routers and links.
    pub(super) cluster: Cluster<L>,
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
        let pool = PoolConfig {
            name: "default".to_owned(),
            role: Role::Mixed,
            engine: config,
            replicas,
            lockstep: false,
            latency,
            router,
            kv_bytes_per_token: 0,
        };
        // (No transfer happens without a prefill pool.)
        Self::pools(vec![pool], KvTransferConfig { bandwidth_gbps: 1.0, latency_us: 0 }, PdDecider::Always)
    }

    /// Idle pools at time 0 (at least one that serves requests: mixed or
    /// decode), KV moving between them over `transfer`, split as `pd` says.
    pub fn pools(pools: Vec<PoolConfig<L>>, transfer: KvTransferConfig, pd: PdDecider) -> Self {
        Simulation {
            now: 0,
            queue: EventQueue::new(),
            cluster: Cluster::new(pools, transfer, pd),
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

    /// Reports every engine step to the sink's [`ResultSink::engine_step`].
    /// Off by default: building the records costs a little per step.
    pub fn set_step_trace(&mut self, on: bool) {
        self.tracing = on;
        for instance in &mut self.cluster.instances {
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
        for instance in &self.cluster.instances {
            total.add(instance.engine.stats());
        }
        total
    }

    /// Each replica's engine counters so far.
    pub fn replica_stats(&self) -> Vec<EngineStats> {
        self.cluster.instances.iter().map(|i| i.engine.stats().clone()).collect()
    }

    /// (running, waiting) requests in the engines now.
    pub fn engine_queues(&self) -> (usize, usize) {
        self.cluster.instances.iter().fold((0, 0), |(r, w), i| (r + i.engine.num_running(), w + i.engine.num_waiting()))
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
        for p in 0..self.cluster.pools.len() {
            let pool = &self.cluster.pools[p];
            if pool.lockstep {
                self.start_lockstep(pool.replicas.clone(), sink);
            } else {
                for replica in pool.replicas.clone() {
                    self.start_step(replica, sink);
                }
            }
        }
        true
    }

    /// Runs to the end (or to the horizon), then reports every request still
    /// in flight as unfinished.
    pub fn finish(&mut self, sink: &mut dyn ResultSink) {
        self.run_until(u64::MAX, sink);
        for replica in 0..self.cluster.instances.len() {
            for d in self.cluster.instances[replica].engine.drain() {
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
        if self.cluster.instances[replica as usize].engine.stepping() {
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
    pub(super) fn start_lockstep(&mut self, ranks: std::ops::Range<u32>, sink: &mut dyn ResultSink) {
        let range = ranks.start as usize..ranks.end as usize;
        if self.cluster.instances[range.clone()].iter().any(|i| i.engine.stepping()) {
            return;
        }
        let mut started = std::mem::take(&mut self.lockstep_started);
        started.clear();
        for r in range.clone() {
            if self.begin_step(r).is_some() {
                started.push(r as u32);
            }
        }
        if !started.is_empty() {
            let batches: Vec<&crate::latency::StepBatch> = self.cluster.instances[range.clone()]
                .iter()
                .map(|i| if i.engine.stepping() { &i.engine.executing().priced } else { &IDLE_RANK })
                .collect();
            let duration = self.cluster.pool_of(ranks.start).latency.lockstep_time_us(&batches);
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
        let instance = &mut self.cluster.instances[r];
        let latency = &self.cluster.pools[instance.pool as usize].latency;
        let duration = match instance.engine.start_queued() {
            Some(d) => {
                std::mem::swap(&mut instance.trace_executing, &mut instance.trace_queued);
                Some(d)
            }
            None if instance.engine.has_work() => {
                let d = instance.engine.start_step(latency, &mut events);
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
        let cluster = self.cluster.instances.len() > 1;
        let instance = &mut self.cluster.instances[r];
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
            let instance = &mut self.cluster.instances[r];
            let latency = &self.cluster.pools[instance.pool as usize].latency;
            let queued = instance.engine.queue_step(latency, &mut events);
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
            match e {
                EngineEvent::Scheduled(owner) => {
                    // The first admission anywhere: a split request's is its
                    // prefill's.
                    let now = self.now;
                    self.active_mut(owner.slot).nodes[owner.node as usize].scheduled_us.get_or_insert(now);
                }
                EngineEvent::KvLoad { owner, slot: engine_slot, tokens } => self.kv_load(owner, engine_slot, tokens),
                EngineEvent::Finished(_) | EngineEvent::Held { .. } => unreachable!("only a step's end finishes"),
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
        let engine = &self.cluster.instances[r].engine;
        if !scheduled {
            let carried: Vec<NodeRef> =
                engine.preempted_unscheduled().iter().map(|&slot| self.node_ref(r, slot)).collect();
            self.cluster.instances[r].trace_carried.extend(carried);
            return;
        }
        let instance = &mut self.cluster.instances[r];
        let mut record =
            std::mem::take(if queued { &mut instance.trace_queued } else { &mut instance.trace_executing });
        let mut carried = std::mem::take(&mut instance.trace_carried);
        let engine = &self.cluster.instances[r].engine;
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
        let instance = &mut self.cluster.instances[r];
        instance.trace_carried = carried;
        *(if queued { &mut instance.trace_queued } else { &mut instance.trace_executing }) = record;
    }

    /// The request and node replica `r`'s engine holds in `slot`.
    pub(super) fn node_ref(&self, r: usize, slot: u32) -> NodeRef {
        let owner = self.cluster.instances[r].engine.owner(slot);
        let a = self.active[owner.slot as usize].as_ref().expect("live request");
        NodeRef { request_id: a.request.request_id.clone(), node: owner.node }
    }

    pub(super) fn record_departure(&mut self, d: Departure) {
        let a = self.active_mut(d.owner.slot);
        let split = a.progress[d.owner.node as usize].split.is_some();
        let node = &mut a.nodes[d.owner.node as usize];
        node.token_times_us = d.token_times_us;
        if split {
            // The prompt's cache hit is its prefill's; preemptions add up.
            node.preemptions += d.preemptions;
        } else {
            node.preemptions = d.preemptions;
            node.cached_tokens = d.cached_tokens;
        }
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
                self.cluster.instances[replica as usize].in_transit -= 1;
                self.enter_engine(slot, node, replica, sink)
            }
            Event::Timeout { slot, generation } if self.is_live(slot, generation) => self.time_out(slot, sink),
            Event::KvLanded { slot, generation, node, replica, engine_slot } if self.is_live(slot, generation) => {
                self.kv_landed(slot, node, replica, engine_slot)
            }
            // Left behind by a request that timed out.
            Event::NodeStart { .. }
            | Event::ToolDone { .. }
            | Event::EngineEnter { .. }
            | Event::Timeout { .. }
            | Event::KvLanded { .. } => {}
            Event::StepEnd { replica } => {
                let r = replica as usize;
                let mut events = std::mem::take(&mut self.events);
                self.cluster.instances[r].engine.finish_step(self.now, &mut events);
                if self.check_invariants
                    && let Err(e) = self.cluster.instances[r].engine.check_kv()
                {
                    panic!("KV cache invariant broken on replica {r} at {} µs: {e}", self.now);
                }
                for e in events.drain(..) {
                    match e {
                        EngineEvent::Held { owner, slot: engine_slot } => self.prefill_held(owner, engine_slot),
                        EngineEvent::Finished(d) if self.is_prefill(d.owner) => self.prefill_done(d, sink),
                        EngineEvent::Finished(d) => {
                            let owner = d.owner;
                            self.record_departure(d);
                            self.node_done(owner.slot, owner.node, sink);
                        }
                        EngineEvent::Scheduled(_) | EngineEvent::KvLoad { .. } => {
                            unreachable!("scheduling reports these")
                        }
                    }
                }
                self.events = events;
            }
        }
    }
}
