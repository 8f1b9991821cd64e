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

use super::client::{Client, ClientState};
use super::cluster::Cluster;
use super::engine::{EngineConfig, EngineEvent, EngineStats};
use super::event::Event;
use super::outcome::{ClockOverflow, NodeError, RequestStatus, ResultSink, later_or_overflow};
use super::pool::{KvTransferConfig, PdDecider, PoolConfig};
use super::queue::EventQueue;
use super::requests::Requests;
use super::router::RouterConfig;
use super::window::{Measurement, Window, WindowState};
use crate::latency::LatencyModel;

/// Simulated pools of engine replicas behind routers, serving a stream of
/// request DAGs.
pub struct Simulation<L> {
    pub(super) now: u64,
    pub(super) queue: EventQueue<Event>,
    /// The first sum of times that passed the clock: the run stops with it.
    pub(super) clock_overflow: Option<ClockOverflow>,
    /// Nothing happens after this time, µs (`u64::MAX`: no horizon).
    pub(super) horizon_us: u64,
    /// The requests in flight and their DAGs' progress.
    pub(super) requests: Requests,
    /// How requests are sent, and those the client still holds.
    pub(super) client: ClientState,
    /// The replicas, their pools, routers and links.
    pub(super) cluster: Cluster<L>,
    /// Warm-up and ramp, as set.
    pub(super) measurement: Measurement,
    /// The measurement window as the run goes.
    pub(super) window: WindowState,
    /// What the engines report (reused buffer).
    pub(super) events: Vec<EngineEvent>,
    /// Ranks that started the current lockstep step (reused buffer).
    pub(super) lockstep_started: Vec<u32>,
    pub(super) tracing: bool,
    pub(super) check_invariants: bool,
}

impl<L> std::fmt::Debug for Simulation<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation").field("now", &self.now).field("in_flight", &self.requests.in_flight).finish()
    }
}

impl<L: LatencyModel> Simulation<L> {
    /// One idle engine at time 0.
    pub fn new(config: EngineConfig, latency: L) -> Self {
        let pool = PoolConfig::mixed(config, 1, RouterConfig::default(), latency);
        Self::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always)
    }

    /// Idle pools at time 0 (at least one that serves requests: mixed or
    /// decode), KV moving between them over `transfer`, split as `pd` says.
    pub fn pools(pools: Vec<PoolConfig<L>>, transfer: KvTransferConfig, pd: PdDecider) -> Self {
        Simulation {
            now: 0,
            queue: EventQueue::new(),
            clock_overflow: None,
            horizon_us: u64::MAX,
            requests: Requests::default(),
            client: ClientState::default(),
            cluster: Cluster::new(pools, transfer, pd),
            measurement: Measurement::default(),
            window: WindowState::default(),
            events: Vec::new(),
            lockstep_started: Vec::new(),
            tracing: false,
            check_invariants: false,
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
        self.client.timeout_us = timeout_us;
    }

    /// Sets how requests are sent (before the first request is added).
    pub fn set_client(&mut self, client: Client) {
        self.client.mode = client;
        self.client.users_free_at.clear();
        // Users are a count, not a queue entry each (a run never allocates
        // for users that have not sent); user k of n starts at k · ramp / n
        // (all at 0 without a ramp), see `next_user_start`.
        let closed_users = match client {
            Client::ClosedLoop { users, .. } => Some(u64::from(users.max(1))),
            _ => None,
        };
        self.client.users_not_started = closed_users.unwrap_or(0);
        self.window = WindowState::new(self.measurement, closed_users);
    }

    /// When the next closed-loop user that has not sent yet starts: user k
    /// of n at k · ramp / n.
    pub(super) fn next_user_start(&self) -> u64 {
        let Client::ClosedLoop { users, .. } = self.client.mode else { return 0 };
        let n = u128::from(users.max(1));
        let k = n - u128::from(self.client.users_not_started.min(n as u64));
        (k * u128::from(self.measurement.ramp_us) / n) as u64
    }

    /// Sets the warm-up and the ramp (before the first request is added).
    pub fn set_measurement(&mut self, measurement: Measurement) {
        self.measurement = measurement;
        self.set_client(self.client.mode);
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
        self.cluster.tracing = on;
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
        self.requests.in_flight
    }

    /// Engine counters so far, summed over the replicas.
    pub fn engine_stats(&self) -> EngineStats {
        let mut total = EngineStats::default();
        for i in 0..self.cluster.instances.len() {
            total.add(&self.cluster.replica_stats(i));
        }
        total
    }

    /// Each replica's engine counters so far.
    pub fn replica_stats(&self) -> Vec<EngineStats> {
        (0..self.cluster.instances.len()).map(|i| self.cluster.replica_stats(i)).collect()
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
        // The pool's size first, then the router's scrapes of it.
        self.cluster.autoscale_to(t);
        self.cluster.observe(t);
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
        self.cluster.autoscale_settle(t);
        true
    }

    /// Runs to the end (or to the horizon), then reports every request still
    /// in flight as unfinished.
    pub fn finish(&mut self, sink: &mut dyn ResultSink) {
        self.run_until(u64::MAX, sink);
        if let Some(g) = self.cluster.gateway.as_mut() {
            g.close();
        }
        for replica in 0..self.cluster.instances.len() {
            for d in self.cluster.instances[replica].engine.drain() {
                self.record_departure(d);
            }
        }
        if (self.requests.in_flight > 0 || !self.client.unsent.is_empty()) && self.horizon_us != u64::MAX {
            // Only a horizon leaves requests behind; the run lasted until it.
            self.now = self.now.max(self.horizon_us);
        }
        // A capped client's queue empties as requests finish; with a horizon,
        // what is left was never sent: the client still held it when the run
        // ended, so its send time is the end (the horizon), not its arrival.
        // Sends are then in input order at times that never decrease, as the
        // result rows (which record the send) must be for the reader.
        while let Some((request, arrival_us)) = self.client.unsent.pop_front() {
            // Never sent: outside the window.
            let held_until = self.now.max(arrival_us);
            self.dispatch(request, arrival_us, held_until, false);
        }
        for slot in 0..self.requests.active.len() as u32 {
            let Some(a) = self.requests.active[slot as usize].as_mut() else { continue };
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

    pub(super) fn handle(&mut self, event: Event, sink: &mut dyn ResultSink) {
        match event {
            Event::NodeStart { slot, generation, node } if self.requests.is_live(slot, generation) => {
                self.start_node(slot, node, sink)
            }
            Event::ToolDone { slot, generation, node } if self.requests.is_live(slot, generation) => {
                self.node_done(slot, node, sink)
            }
            Event::EngineEnter { slot, generation, node, replica } if self.requests.is_live(slot, generation) => {
                self.cluster.instances[replica as usize].in_transit -= 1;
                self.enter_engine(slot, node, replica, sink)
            }
            Event::Timeout { slot, generation } if self.requests.is_live(slot, generation) => self.time_out(slot, sink),
            Event::KvLanded { slot, generation, node, replica, engine_slot }
                if self.requests.is_live(slot, generation) =>
            {
                self.kv_landed(slot, node, replica, engine_slot)
            }
            Event::Admit { slot, generation } if self.requests.is_live(slot, generation) => self.admit(slot, sink),
            Event::RouterHop { slot, generation, node, replica } if self.requests.is_live(slot, generation) => {
                self.hop_arrived(slot, node, replica, sink)
            }
            // Left behind by a request that timed out.
            Event::Admit { .. }
            | Event::RouterHop { .. }
            | Event::NodeStart { .. }
            | Event::ToolDone { .. }
            | Event::EngineEnter { .. }
            | Event::Timeout { .. }
            | Event::KvLanded { .. } => {}
            Event::StepEnd { replica } => self.step_end(replica, sink),
            Event::GatewayTick => self.gateway_tick(sink),
        }
    }
}
