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
//! the prefix index and admission.

mod policy;

use std::collections::HashSet;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

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
}

impl View {
    /// Requests waiting + running.
    pub(crate) fn load(&self) -> u64 {
        u64::from(self.waiting) + u64::from(self.running)
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
}

impl Router {
    pub(super) fn new(config: RouterConfig, instances: &mut [Replica]) -> Router {
        let n = instances.len();
        let policy = config.policy.start();
        let stale_prefix = config.refresh_interval_us > 0 && policy.reads_prefix();
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
        }
    }

    pub(super) fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// Re-reads the replicas if the view is older than the refresh interval.
    fn refresh(&mut self, now: u64, instances: &mut [Replica]) {
        let interval = self.config.refresh_interval_us;
        if self.refreshed_us.is_some_and(|t| now.saturating_sub(t) < interval) && interval > 0 {
            return;
        }
        self.refreshed_us = Some(now);
        for (view, instance) in self.views.iter_mut().zip(instances.iter_mut()) {
            let (kv_used, kv_total) = instance.engine.kv_blocks();
            *view = View { waiting: instance.waiting(), running: instance.running(), kv_used, kv_total };
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
        self.views.iter().any(|v| v.waiting < max_queue)
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
            views: &mut self.views,
            prefix_hits: &self.hits,
            prompt_blocks: self.hashes.len(),
            lora_fit: &self.lora_fit,
            rng: &mut self.rng,
            refresh_interval_us: self.config.refresh_interval_us,
        };
        self.policy.pick(&mut replicas) as u32
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
