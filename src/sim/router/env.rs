//! `router.env`: the router's real view of its replicas, as a gateway in
//! front of vLLM (llm-d's EPP) has it, instead of one global refresh
//! interval for everything.
//!
//! - Admission happens `admission_latency_us` after the send, routing's
//!   pick reaches the replica's front end `routing_latency_us` after it
//!   (the EPP hop); both are events (`router/hooks.rs`).
//! - Load views (waiting, running, KV use) are scraped on the router's own
//!   timer, at `k · metrics_refresh_us` (+ a per-replica phase with
//!   `jitter`), as the EPP's per-endpoint metrics refresh loop (50 ms by
//!   default) does; a scrape at `s` sees the replica as it was just before
//!   `s` (every event before `s`), however long until the next pick.
//! - The prefix index gets each replica's KV store/remove events
//!   `kv_event_delay_us` after they happened: a stream with a delay, as
//!   llm-d's KV-event indexer (vLLM publishes `BlockStored`/`BlockRemoved`
//!   over ZMQ as they happen; the indexer applies them as they arrive), not a
//!   copy frozen and replaced every interval (BLIS): with a stream, a block
//!   stored long ago is known however recently the copy was made.
//! - In-flight counts are the router's own, never stale (BLIS #467, and the
//!   EPP counts the requests it has sent and not seen answered): the nodes
//!   it sent to a replica and not finished there, including those still in
//!   the routing hop. Policies that count requests read them
//!   ([`View::load`]); the `weighted` policy's scorers read the scraped
//!   fields, as llm-d's queue and running scorers read `/metrics`.
//!
//! A key left out keeps today's behaviour (`router.refresh_interval_ms` for
//! the view or the index; zero latencies).

use std::collections::{HashSet, VecDeque};

use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::View;
use crate::sim::replica::Replica;

/// `router.env`, resolved (µs). Every field at its default is the router
/// without `env` except for the fresh in-flight counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouterEnv {
    /// From the send to the admission decision.
    pub admission_latency_us: u64,
    /// From the routing decision to the replica's front end.
    pub routing_latency_us: u64,
    /// The load views' scrape interval (`Some(0)`: live; `None`: as
    /// `refresh_interval_us`).
    pub metrics_refresh_us: Option<u64>,
    /// How late KV events reach the prefix index (`Some(0)`: live; `None`:
    /// as `refresh_interval_us`).
    pub kv_event_delay_us: Option<u64>,
    /// Each replica's scrape timer starts at its own phase in
    /// `[0, metrics_refresh_us)`, drawn from `router.seed`'s stream (else
    /// every replica is scraped at the same instants).
    pub jitter: bool,
}

/// Mixed into `router.seed` for the scrape phases, so they are drawn from
/// their own stream and the policies' draws stay as without `env` (the
/// bytes of "phases", an arbitrary constant).
const PHASE_STREAM: u64 = 0x7068_6173_6573;

/// The router's `env` state over a run.
pub(super) struct EnvState {
    env: RouterEnv,
    /// Per replica: when its next scrape is due, µs (`u64::MAX`: never).
    next_scrape: Vec<u64>,
    /// The earliest of `next_scrape`.
    next_due: u64,
    /// Per replica: what its last scrape read.
    scraped: Vec<View>,
    /// Per replica: nodes routed to it still in the routing hop.
    in_hop: Vec<u32>,
    /// KV events drained from the caches and not yet applied to the index,
    /// oldest first: (when, replica, block hash, stored).
    pending: VecDeque<(u64, u32, u64, bool)>,
    /// When [`EnvState::observe`] last ran: the events still in the caches
    /// then were made at that time or later, before the next call's.
    observed_us: u64,
    /// Scratch for draining one cache.
    events: Vec<(u64, bool)>,
}

impl EnvState {
    pub(super) fn new(env: RouterEnv, seed: u64, instances: &[Replica]) -> EnvState {
        let n = instances.len();
        let mut next_scrape = vec![u64::MAX; n];
        if let Some(interval) = env.metrics_refresh_us.filter(|&i| i > 0) {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ PHASE_STREAM);
            for next in &mut next_scrape {
                let phase = if env.jitter { rng.random_range(0..interval) } else { 0 };
                // The scrape at construction stands for the one at `phase − interval`.
                *next = if phase == 0 { interval } else { phase };
            }
        }
        let mut state = EnvState {
            env,
            next_due: next_scrape.iter().copied().min().unwrap_or(u64::MAX),
            next_scrape,
            scraped: vec![View::default(); n],
            in_hop: vec![0; n],
            pending: VecDeque::new(),
            observed_us: 0,
            events: Vec::new(),
        };
        for (view, instance) in state.scraped.iter_mut().zip(instances) {
            *view = read(instance);
        }
        state
    }

    /// Replica `r` has a new engine (an autoscaler's cold start): the old
    /// cache's events still on their way are dropped, and its scrape reads
    /// an empty replica until the next.
    pub(super) fn forget(&mut self, r: usize) {
        self.pending.retain(|e| e.1 as usize != r);
        self.scraped[r] = View::default();
    }

    pub(super) fn env(&self) -> &RouterEnv {
        &self.env
    }

    /// Whether the views are this module's (else `refresh_interval_us`'s).
    pub(super) fn owns_views(&self) -> bool {
        self.env.metrics_refresh_us.is_some()
    }

    /// Whether the prefix index is this module's.
    pub(super) fn owns_prefix(&self) -> bool {
        self.env.kv_event_delay_us.is_some()
    }

    /// Whether the prefix index is a delayed copy (else live or not ours).
    pub(super) fn delays_prefix(&self) -> bool {
        self.env.kv_event_delay_us.is_some_and(|d| d > 0)
    }

    /// A node routed to replica `r` enters (`true`) or leaves the routing hop.
    pub(super) fn hop(&mut self, r: usize, entering: bool) {
        if entering {
            self.in_hop[r] += 1;
        } else {
            self.in_hop[r] -= 1;
        }
    }

    /// Brings the router up to `now`: takes the scrapes due by then (each
    /// sees the replicas as before `now`, when called before the events of
    /// `now`, as the simulation does at each new time) and applies the KV
    /// events due to the index `prefix_sets` (one set per replica, empty
    /// without a delayed index).
    pub(super) fn observe(&mut self, now: u64, instances: &mut [Replica], prefix_sets: &mut [HashSet<u64>]) {
        if now >= self.next_due {
            let interval = self.env.metrics_refresh_us.unwrap_or(0).max(1);
            for ((next, view), instance) in self.next_scrape.iter_mut().zip(&mut self.scraped).zip(instances.iter()) {
                if *next <= now {
                    *view = read(instance);
                    // The first due time after now (scrapes in between saw the same state).
                    *next += interval * ((now - *next) / interval + 1);
                }
            }
            self.next_due = self.next_scrape.iter().copied().min().unwrap_or(u64::MAX);
        }
        if prefix_sets.is_empty() {
            return;
        }
        let made_us = self.observed_us;
        self.observed_us = now;
        for (r, instance) in instances.iter_mut().enumerate() {
            instance.engine.kv_mut().take_events(&mut self.events);
            self.pending.extend(self.events.drain(..).map(|(h, stored)| (made_us, r as u32, h, stored)));
        }
        let delay = self.env.kv_event_delay_us.unwrap_or(0);
        while let Some(&(t, r, h, stored)) = self.pending.front() {
            if t.saturating_add(delay) > now {
                break;
            }
            self.pending.pop_front();
            let set = &mut prefix_sets[r as usize];
            if stored {
                set.insert(h);
            } else {
                set.remove(&h);
            }
        }
    }

    /// The views a pick reads: the last scrape's (or, live, the replicas'
    /// now; or, without `metrics_refresh`, `views` as refreshed), each with
    /// the router's own in-flight count.
    pub(super) fn compose(&self, instances: &[Replica], views: &mut [View]) {
        for (r, (view, instance)) in views.iter_mut().zip(instances).enumerate() {
            match self.env.metrics_refresh_us {
                Some(0) => *view = read(instance),
                Some(_) => *view = self.scraped[r],
                None => {}
            }
            view.in_flight = Some(self.in_hop[r] + instance.waiting() + instance.running());
        }
    }
}

/// Replica `instance` as a scrape reads it now.
fn read(instance: &Replica) -> View {
    let (kv_used, kv_total) = instance.engine.kv_blocks();
    View { waiting: instance.waiting(), running: instance.running(), kv_used, kv_total, in_flight: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::engine::EngineConfig;

    fn first_scrapes(env: RouterEnv, seed: u64) -> Vec<u64> {
        let instances: Vec<Replica> = (0..6).map(|_| Replica::new(EngineConfig::for_tests(4, 64, 64), 0)).collect();
        EnvState::new(env, seed, &instances).next_scrape
    }

    #[test]
    fn scrape_phases_are_seeded_and_within_one_interval() {
        let env = RouterEnv { metrics_refresh_us: Some(50_000), jitter: true, ..RouterEnv::default() };
        let a = first_scrapes(env, 1);
        assert_eq!(a, first_scrapes(env, 1));
        assert_ne!(a, first_scrapes(env, 2));
        assert!(a.iter().all(|&t| (1..=50_000).contains(&t)), "{a:?}");
        assert!(a.windows(2).any(|w| w[0] != w[1]), "{a:?}");
        let aligned = first_scrapes(RouterEnv { jitter: false, ..env }, 1);
        assert!(aligned.iter().all(|&t| t == 50_000), "{aligned:?}");
        let live = first_scrapes(RouterEnv { metrics_refresh_us: Some(0), ..RouterEnv::default() }, 1);
        assert!(live.iter().all(|&t| t == u64::MAX), "no timer when live");
    }

    #[test]
    fn a_late_scrape_is_rescheduled_past_now_on_its_grid() {
        let instances: Vec<Replica> = (0..2).map(|_| Replica::new(EngineConfig::for_tests(4, 64, 64), 0)).collect();
        let mut instances = instances;
        let env = RouterEnv { metrics_refresh_us: Some(10), ..RouterEnv::default() };
        let mut s = EnvState::new(env, 0, &instances);
        s.observe(35, &mut instances, &mut []);
        assert_eq!(s.next_scrape, [40, 40]);
        s.observe(40, &mut instances, &mut []);
        assert_eq!(s.next_scrape, [50, 50]);
    }
}
