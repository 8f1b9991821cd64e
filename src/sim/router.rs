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

use std::collections::HashSet;

use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::instance::Instance;
use super::kv_cache::block_hashes;
use crate::workload::LlmCall;

/// How the router picks a replica for an llm node.
#[derive(Debug, Clone, PartialEq)]
pub enum RoutingPolicy {
    /// Replicas in turn, one decision each.
    RoundRobin,
    /// Uniformly at random (seeded by [`RouterConfig::seed`]).
    Random,
    /// Fewest requests waiting + running.
    LeastRequests,
    /// Fewest KV blocks in use; ties by fewest requests.
    LeastKv,
    /// Longest prefix-cache hit for the prompt; ties by fewest requests.
    PrefixAffinity,
    /// Highest weighted sum of scorers, each scoring a replica in [0, 1], as
    /// llm-d's scheduler combines its scorers.
    Weighted(Vec<(Scorer, f64)>),
    /// vLLM's data-parallel load balancer (`DPLBAsyncMPClient`): lowest
    /// `4 × waiting + running`, from counts the DP coordinator publishes, each
    /// pick counted as one more waiting request until the next publication.
    VllmDp,
}

impl RoutingPolicy {
    /// The policy's name in scenario files.
    pub fn name(&self) -> &'static str {
        match self {
            RoutingPolicy::RoundRobin => "round-robin",
            RoutingPolicy::Random => "random",
            RoutingPolicy::LeastRequests => "least-requests",
            RoutingPolicy::LeastKv => "least-kv",
            RoutingPolicy::PrefixAffinity => "prefix-affinity",
            RoutingPolicy::Weighted(_) => "weighted",
            RoutingPolicy::VllmDp => "vllm-dp",
        }
    }
}

/// One scorer of the `weighted` policy (llm-d's scorer of the same role).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scorer {
    /// `queue-scorer`: (max − waiting) / (max − min) over replicas; 1 when all equal.
    Queue,
    /// `kv-cache-utilization-scorer`: 1 − used / total KV blocks.
    KvUtilization,
    /// `prefix-cache-scorer`: prompt blocks found in the replica's cache / prompt blocks.
    PrefixCache,
    /// Running requests, min-max normalised like `queue`.
    RunningRequests,
}

impl Scorer {
    /// The scorer's name in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Scorer::Queue => "queue",
            Scorer::KvUtilization => "kv-utilization",
            Scorer::PrefixCache => "prefix-cache",
            Scorer::RunningRequests => "running-requests",
        }
    }

    /// Every scorer, for messages.
    pub const ALL: [Scorer; 4] = [Scorer::Queue, Scorer::KvUtilization, Scorer::PrefixCache, Scorer::RunningRequests];
}

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
    /// Seed of the `random` policy's stream.
    pub seed: u64,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            policy: RoutingPolicy::RoundRobin,
            affinity: Affinity::Node,
            refresh_interval_us: 0,
            max_queue: None,
            seed: 0,
        }
    }
}

/// What the router knows of one replica.
#[derive(Debug, Clone, Copy, Default)]
struct View {
    waiting: u32,
    running: u32,
    kv_used: u32,
    kv_total: u32,
}

impl View {
    fn load(&self) -> u64 {
        u64::from(self.waiting) + u64::from(self.running)
    }
}

/// The router's state over a run.
pub(super) struct Router {
    config: RouterConfig,
    /// Decisions so far (round-robin's turn).
    decisions: u64,
    rng: Xoshiro256PlusPlus,
    views: Vec<View>,
    /// When the views were last refreshed, µs (`None`: never).
    refreshed_us: Option<u64>,
    /// Stale prefix index, per replica (refresh interval > 0 with a
    /// prefix-aware policy).
    prefix_sets: Vec<HashSet<u64>>,
    /// Scratch: the prompt's block hashes, events drained from a cache,
    /// per-replica prefix hits and scores.
    hashes: Vec<u64>,
    events: Vec<(u64, bool)>,
    hits: Vec<usize>,
    scores: Vec<f64>,
}

impl Router {
    pub(super) fn new(config: RouterConfig, instances: &mut [Instance]) -> Router {
        let n = instances.len();
        let stale_prefix = config.refresh_interval_us > 0 && config.uses_prefix();
        if stale_prefix {
            for instance in instances.iter_mut() {
                instance.engine.kv_mut().record_events();
            }
        }
        Router {
            rng: Xoshiro256PlusPlus::seed_from_u64(config.seed),
            config,
            decisions: 0,
            views: vec![View::default(); n],
            refreshed_us: None,
            prefix_sets: if stale_prefix { vec![HashSet::new(); n] } else { Vec::new() },
            hashes: Vec::new(),
            events: Vec::new(),
            hits: vec![0; n],
            scores: vec![0.0; n],
        }
    }

    pub(super) fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// Re-reads the replicas if the view is older than the refresh interval.
    fn refresh(&mut self, now: u64, instances: &mut [Instance]) {
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
    pub(super) fn admits(&mut self, now: u64, instances: &mut [Instance]) -> bool {
        let Some(max_queue) = self.config.max_queue else { return true };
        self.refresh(now, instances);
        self.views.iter().any(|v| v.waiting < max_queue)
    }

    /// The replica for an llm node ready now.
    pub(super) fn route(&mut self, now: u64, instances: &mut [Instance], call: &LlmCall) -> u32 {
        let n = instances.len();
        if n == 1 {
            return 0;
        }
        self.refresh(now, instances);
        if self.config.uses_prefix() {
            self.prefix_hits(instances, call);
        }
        let views = &self.views;
        let by_load = |i: usize| (views[i].load(), i);
        let pick = match &self.config.policy {
            RoutingPolicy::RoundRobin => (self.decisions % n as u64) as usize,
            RoutingPolicy::Random => self.rng.random_range(0..n),
            RoutingPolicy::LeastRequests => (0..n).min_by_key(|&i| by_load(i)).expect("a replica"),
            RoutingPolicy::LeastKv => (0..n).min_by_key(|&i| (views[i].kv_used, by_load(i))).expect("a replica"),
            RoutingPolicy::PrefixAffinity => {
                let hits = &self.hits;
                (0..n).min_by_key(|&i| (std::cmp::Reverse(hits[i]), by_load(i))).expect("a replica")
            }
            RoutingPolicy::VllmDp => (0..n)
                .min_by_key(|&i| (4 * u64::from(views[i].waiting) + u64::from(views[i].running), i))
                .expect("a replica"),
            RoutingPolicy::Weighted(scorers) => {
                self.scores.iter_mut().for_each(|s| *s = 0.0);
                for &(scorer, weight) in scorers {
                    score(scorer, weight, views, &self.hits, self.hashes.len(), &mut self.scores);
                }
                // The first highest score: ties go to the lowest index.
                let mut best = 0;
                for i in 1..n {
                    if self.scores[i] > self.scores[best] {
                        best = i;
                    }
                }
                best
            }
        };
        self.decisions += 1;
        if self.config.policy == RoutingPolicy::VllmDp && self.config.refresh_interval_us > 0 {
            // vLLM counts its own pick as waiting until the coordinator's
            // next publication (core_client.py: "Increment local waiting count").
            self.views[pick].waiting += 1;
        }
        pick as u32
    }

    /// Leading prompt blocks of `call` each replica's prefix index holds, into `self.hits`.
    fn prefix_hits(&mut self, instances: &[Instance], call: &LlmCall) {
        self.hashes.clear();
        if let Some(ids) = call.prompt_ids() {
            let block_size = instances[0].engine.config().block_size;
            block_hashes(ids, block_size, &mut self.hashes);
        }
        for (i, instance) in instances.iter().enumerate() {
            self.hits[i] = match self.prefix_sets.get(i) {
                Some(set) => self.hashes.iter().take_while(|h| set.contains(h)).count(),
                None => instance.engine.kv().cached_prefix(&self.hashes),
            };
        }
    }
}

impl RouterConfig {
    /// Whether the policy reads the prefix index.
    fn uses_prefix(&self) -> bool {
        match &self.policy {
            RoutingPolicy::PrefixAffinity => true,
            RoutingPolicy::Weighted(scorers) => scorers.iter().any(|(s, _)| *s == Scorer::PrefixCache),
            _ => false,
        }
    }
}

/// Adds `weight × scorer` of each replica to `scores`.
fn score(scorer: Scorer, weight: f64, views: &[View], hits: &[usize], prompt_blocks: usize, scores: &mut [f64]) {
    let min_max_inverse = |value: &dyn Fn(&View) -> u32, scores: &mut [f64]| {
        let max = views.iter().map(value).max().unwrap_or(0);
        let min = views.iter().map(value).min().unwrap_or(0);
        for (s, v) in scores.iter_mut().zip(views) {
            *s += weight * if max == min { 1.0 } else { f64::from(max - value(v)) / f64::from(max - min) };
        }
    };
    match scorer {
        Scorer::Queue => min_max_inverse(&|v| v.waiting, scores),
        Scorer::RunningRequests => min_max_inverse(&|v| v.running, scores),
        Scorer::KvUtilization => {
            for (s, v) in scores.iter_mut().zip(views) {
                let used = if v.kv_total > 0 { f64::from(v.kv_used) / f64::from(v.kv_total) } else { 0.0 };
                *s += weight * (1.0 - used);
            }
        }
        Scorer::PrefixCache => {
            for (s, &h) in scores.iter_mut().zip(hits) {
                *s += weight * if prompt_blocks > 0 { h as f64 / prompt_blocks as f64 } else { 0.0 };
            }
        }
    }
}
