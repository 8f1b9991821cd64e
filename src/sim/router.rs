//! The router in front of a cluster's replicas: it admits or rejects each
//! request when it arrives, and picks a replica for each llm node when the
//! node becomes ready (or, with `affinity: request`, for a DAG's first llm
//! node, its later nodes following).
//!
//! It sees each replica as of its last refresh (`refresh_interval_us`; 0 =
//! live), as routers that scrape engine metrics do: requests waiting (in the
//! server's front end or the engine's waiting queue), running, and KV blocks
//! in use. Its prefix index is built from the same block hashes as the KV
//! caches: live with a zero interval, else a copy updated from the caches'
//! store/remove events at each refresh (so evictions are seen late, as by
//! llm-d's and Dynamo's KV-event indexers). Ties go to the lowest replica
//! index everywhere; `random` draws from its own seeded stream.
//!
//! The policies are in `router/policy/`, one file each, listed once in
//! `router/policy.rs`; this file is what they share: the view, its refresh,
//! the prefix index and admission. `router.env` (latencies, the scrape
//! timer, the delayed KV-event stream, fresh in-flight counts) is in
//! `router/env.rs`, its events in `router/hooks.rs`.

mod env;
#[cfg(test)]
mod env_tests;
mod hooks;
mod policy;
pub(crate) mod siblings;

use std::collections::HashSet;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use self::env::EnvState;
pub use self::env::RouterEnv;
use self::policy::{Policy, Replicas};
pub use self::policy::{RoutingPolicy, Scorer};
use super::replica::Replica;
use crate::workload::LlmCall;

/// Whether each llm node is routed on its own or a DAG sticks to one replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Affinity {
    /// Each llm node is routed when it becomes ready.
    #[default]
    Node,
    /// Every llm node of a request goes where its first llm node went (an
    /// agent session pinned to a replica).
    Request,
    /// Each sibling group of a request (the main agent; the subagents one
    /// turn spawned) goes where its first llm node went ([`siblings`]).
    SiblingGroup,
}

/// The router's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterConfig {
    /// How a replica is picked.
    pub policy: RoutingPolicy,
    /// Per node or per request.
    pub affinity: Affinity,
    /// How old the router's view of the replicas may be, µs (0: live).
    pub refresh_interval_us: u64,
    /// A request arriving when every replica has this many requests waiting
    /// is rejected (`None`: every request is admitted).
    pub max_queue: Option<u32>,
    /// Seed of the router's stream, which the policies that draw (`random`,
    /// `power-of-two`) draw from.
    pub seed: u64,
    /// `router.env`: latencies, scrape timer, KV-event delay (`None`: off).
    pub env: Option<RouterEnv>,
    /// Admission and flow control in front of it (`None`: neither).
    pub gateway: Option<super::gateway::GatewayConfig>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            policy: RoutingPolicy::default(),
            affinity: Affinity::Node,
            refresh_interval_us: 0,
            max_queue: None,
            seed: 0,
            env: None,
            gateway: None,
        }
    }
}

/// What the router knows of one replica.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct View {
    /// Requests waiting, in the front end or the engine's waiting queue.
    pub(crate) waiting: u32,
    /// Requests running.
    pub(crate) running: u32,
    /// KV blocks in use.
    pub(crate) kv_used: u32,
    /// KV blocks in all.
    pub(crate) kv_total: u32,
    /// With `router.env`: the nodes the router sent here and not finished
    /// (always fresh, as the router counts them itself); `None` without.
    pub(crate) in_flight: Option<u32>,
}

impl View {
    /// Requests waiting + running: the router's own in-flight count when it
    /// keeps one (`router.env`), else the view's.
    pub(crate) fn load(&self) -> u64 {
        match self.in_flight {
            Some(n) => u64::from(n),
            None => u64::from(self.waiting) + u64::from(self.running),
        }
    }

    /// (waiting, running) with the in-flight count where there is one: the
    /// last view's running (at most the in-flight count), the rest waiting.
    pub(crate) fn waiting_running(&self) -> (u64, u64) {
        match self.in_flight {
            Some(n) => {
                let running = self.running.min(n);
                (u64::from(n - running), u64::from(running))
            }
            None => (u64::from(self.waiting), u64::from(self.running)),
        }
    }
}

/// The router's state over a run.
pub(super) struct Router {
    config: RouterConfig,
    policy: Box<dyn Policy>,
    rng: Xoshiro256PlusPlus,
    views: Vec<View>,
    /// When the views were last refreshed, µs (`None`: never).
    refreshed_us: Option<u64>,
    /// Stale prefix index, per replica (refresh interval > 0 with a
    /// prefix-aware policy).
    prefix_sets: Vec<HashSet<u64>>,
    /// Scratch: the prompt's block hashes, events drained from a cache,
    /// per-replica prefix hits.
    hashes: Vec<u64>,
    events: Vec<(u64, bool)>,
    hits: Vec<usize>,
    /// Scratch: how each replica fits the request's LoRA adapter.
    lora_fit: Vec<u8>,
    /// `router.env`'s state (`None`: off).
    env: Option<Box<EnvState>>,
}

impl Router {
    pub(super) fn new(config: RouterConfig, instances: &mut [Replica]) -> Router {
        let n = instances.len();
        let policy = config.policy.start();
        let env = config.env.map(|e| Box::new(EnvState::new(e, config.seed, instances)));
        let stale_prefix = policy.reads_prefix()
            && match env.as_deref().filter(|e| e.owns_prefix()) {
                Some(e) => e.delays_prefix(),
                None => config.refresh_interval_us > 0,
            };
        if stale_prefix {
            for instance in instances.iter_mut() {
                instance.engine.kv_mut().record_events();
            }
        }
        Router {
            rng: Xoshiro256PlusPlus::seed_from_u64(config.seed),
            config,
            policy,
            views: vec![View::default(); n],
            refreshed_us: None,
            prefix_sets: if stale_prefix { vec![HashSet::new(); n] } else { Vec::new() },
            hashes: Vec::new(),
            events: Vec::new(),
            hits: vec![0; n],
            lora_fit: Vec::new(),
            env,
        }
    }

    pub(super) fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// `router.env`, if configured.
    pub(super) fn env(&self) -> Option<&RouterEnv> {
        self.env.as_deref().map(EnvState::env)
    }

    /// A node routed to replica `r` (of this router's) enters (`true`) or
    /// leaves the routing hop (`router.env.routing_latency_ms`).
    pub(super) fn hop(&mut self, r: usize, entering: bool) {
        // (A prefill router without `env` of its own counts nothing.)
        if let Some(env) = self.env.as_deref_mut() {
            env.hop(r, entering);
        }
    }

    /// The simulation reached `now` (called before its events at `now`):
    /// `router.env`'s scrapes and KV events due by then are taken.
    pub(super) fn observe(&mut self, now: u64, instances: &mut [Replica]) {
        if let Some(env) = self.env.as_deref_mut() {
            env.observe(now, instances, &mut self.prefix_sets);
        }
    }

    /// Re-reads the replicas if the view is older than the refresh interval
    /// (with `router.env`, what it does not own), then lets `router.env`
    /// compose the view.
    fn refresh(&mut self, now: u64, instances: &mut [Replica]) {
        self.refresh_interval(now, instances);
        if let Some(env) = self.env.as_deref_mut() {
            env.observe(now, instances, &mut self.prefix_sets);
            env.compose(instances, &mut self.views);
        }
    }

    /// `refresh_interval_us`'s refresh of the views and the prefix index.
    fn refresh_interval(&mut self, now: u64, instances: &mut [Replica]) {
        let interval = self.config.refresh_interval_us;
        if self.refreshed_us.is_some_and(|t| now.saturating_sub(t) < interval) && interval > 0 {
            return;
        }
        self.refreshed_us = Some(now);
        let env = self.env.as_deref();
        if !env.is_some_and(EnvState::owns_views) {
            for (view, instance) in self.views.iter_mut().zip(instances.iter_mut()) {
                let (kv_used, kv_total) = instance.engine.kv_blocks();
                *view = View {
                    waiting: instance.waiting(),
                    running: instance.running(),
                    kv_used,
                    kv_total,
                    in_flight: None,
                };
            }
        }
        if env.is_some_and(EnvState::owns_prefix) {
            return;
        }
        for (set, instance) in self.prefix_sets.iter_mut().zip(instances.iter_mut()) {
            instance.engine.kv_mut().take_events(&mut self.events);
            for (h, stored) in self.events.drain(..) {
                if stored {
                    set.insert(h);
                } else {
                    set.remove(&h);
                }
            }
        }
    }

    /// Whether a request arriving now is admitted: some replica has fewer
    /// than `max_queue` requests waiting.
    pub(super) fn admits(&mut self, now: u64, instances: &mut [Replica]) -> bool {
        let Some(max_queue) = self.config.max_queue else { return true };
        self.refresh(now, instances);
        self.views[..instances.len()].iter().any(|v| v.waiting < max_queue)
    }

    /// The replica for an llm node ready now.
    pub(super) fn route(&mut self, now: u64, instances: &mut [Replica], call: &LlmCall) -> u32 {
        let n = instances.len();
        if n == 1 {
            return 0;
        }
        self.refresh(now, instances);
        if self.policy.reads_prefix() {
            self.prefix_hits(instances, call);
        }
        self.lora_fit.clear();
        if let Some(name) = call.lora.as_deref().filter(|_| self.policy.reads_lora()) {
            let adapter = super::engine::adapter_id(name);
            self.lora_fit.extend(instances.iter().map(|i| match i.engine.lora() {
                Some(l) if l.is_active(adapter) => 2,
                Some(l) if l.has_room_for(adapter) => 1,
                _ => 0,
            }));
        }
        let mut replicas = Replicas {
            // (An autoscaled pool's routable replicas: the first `n`.)
            views: &mut self.views[..n],
            prefix_hits: &self.hits[..n],
            prompt_blocks: self.hashes.len(),
            lora_fit: &self.lora_fit,
            rng: &mut self.rng,
            refresh_interval_us: self.config.refresh_interval_us,
        };
        self.policy.pick(&mut replicas) as u32
    }

    /// The next pick re-reads the replicas (an autoscaled pool's routable
    /// set changed).
    pub(super) fn invalidate(&mut self) {
        self.refreshed_us = None;
    }

    /// Replica `i` has a new engine (a cold start): its stale prefix index
    /// starts empty and follows the new cache.
    pub(super) fn restarted(&mut self, i: usize, instance: &mut Replica) {
        if let Some(env) = self.env.as_deref_mut() {
            env.forget(i);
        }
        if let Some(set) = self.prefix_sets.get_mut(i) {
            set.clear();
            instance.engine.kv_mut().record_events();
        }
    }

    /// Leading prompt blocks of `call` each replica's prefix index holds, into `self.hits`.
    fn prefix_hits(&mut self, instances: &[Replica], call: &LlmCall) {
        // Every replica of a pool keys its cache alike.
        instances[0].engine.prompt_hashes(call, &mut self.hashes);
        for (i, instance) in instances.iter().enumerate() {
            self.hits[i] = match self.prefix_sets.get(i) {
                Some(set) => self.hashes.iter().take_while(|h| set.contains(h)).count(),
                None => instance.engine.cached_prefix_blocks(&self.hashes),
            };
        }
    }
}
