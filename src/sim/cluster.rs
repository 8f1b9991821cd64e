//! The cluster a simulation runs: every replica of every pool (one flat
//! list, the pools that serve requests first), the routers in front of
//! them, and the links KV moves over between pools.

use std::ops::Range;

use super::autoscale::Autoscaler;
use super::engine::EngineStats;
use super::gateway::Gateway;
use super::pool::{KvTransferConfig, PdDecider, PoolConfig, Role};
use super::replica::Replica;
use super::router::Router;
use crate::latency::LatencyModel;

/// One pool, as the simulation runs it.
pub(super) struct Pool<L> {
    pub(super) role: Role,
    /// Prices its replicas' steps (models are stateless).
    pub(super) latency: L,
    /// The server's front end (HTTP, tokenization) before the engine, µs.
    pub(super) request_overhead_us: u64,
    /// Its replicas step together (data-parallel ranks of an MoE engine).
    pub(super) lockstep: bool,
    /// KV bytes of one token on one of its replicas.
    pub(super) kv_bytes_per_token: u64,
    /// Its replicas, as indices into the cluster's instances.
    pub(super) replicas: Range<u32>,
}

/// Every replica, the routers and the KV links.
pub(super) struct Cluster<L> {
    pub(super) instances: Vec<Replica>,
    pub(super) pools: Vec<Pool<L>>,
    /// In front of the pools that serve requests (mixed and decode): the
    /// first `serving` instances.
    pub(super) router: Router,
    pub(super) serving: u32,
    /// In front of the prefill pools (the instances after `serving`).
    pub(super) prefill_router: Option<Router>,
    /// How KV moves from a prefill replica to a decode replica.
    pub(super) transfer: KvTransferConfig,
    /// Which requests are split.
    pub(super) pd: PdDecider,
    /// When each instance's inbound KV link is free again, µs.
    pub(super) link_free_at: Vec<u64>,
    /// Autoscaling of the one pool (`autoscale.rs`); the router sees the
    /// first `routable()` instances.
    pub(super) autoscale: Option<Autoscaler>,
    /// Counters of engines an autoscaled replica had before a cold start.
    pub(super) retired: Vec<EngineStats>,
    /// The step trace is on (a cold-started engine traces too).
    pub(super) tracing: bool,
    /// Admission and flow control in front of the serving router.
    pub(super) gateway: Option<Gateway>,
}

impl<L: LatencyModel> Cluster<L> {
    /// The pools' replicas, serving pools first (in the given order), then
    /// prefill pools, each behind its router.
    pub(super) fn new(pools: Vec<PoolConfig<L>>, transfer: KvTransferConfig, pd: PdDecider) -> Cluster<L> {
        let roles: Vec<Role> = pools.iter().map(|p| p.role).collect();
        let mut given: Vec<Option<PoolConfig<L>>> = pools.into_iter().map(Some).collect();
        let order: Vec<PoolConfig<L>> =
            Role::layout_order(&roles).into_iter().map(|i| given[i].take().expect("each pool once")).collect();
        assert!(order.first().is_some_and(|p| p.role != Role::Prefill), "a cluster needs a pool that serves requests");
        let mut serving_router = order[0].router.clone();
        let gateway_config = serving_router.gateway.take();
        let prefill_router = order.iter().find(|p| p.role == Role::Prefill).map(|p| p.router.clone());
        let mut instances = Vec::new();
        let mut states = Vec::with_capacity(order.len());
        let mut serving_count = 0;
        for (i, p) in order.into_iter().enumerate() {
            let first = instances.len() as u32;
            for _ in 0..p.replicas.max(1) {
                instances.push(Replica::new(p.engine.clone(), i as u32));
            }
            if p.role != Role::Prefill {
                serving_count = instances.len() as u32;
            }
            states.push(Pool {
                role: p.role,
                request_overhead_us: p.latency.request_overhead_us(),
                latency: p.latency,
                lockstep: p.lockstep && p.replicas > 1,
                kv_bytes_per_token: p.kv_bytes_per_token,
                replicas: first..instances.len() as u32,
            });
        }
        let router = Router::new(serving_router, &mut instances[..serving_count as usize]);
        let prefill_router = prefill_router.map(|r| Router::new(r, &mut instances[serving_count as usize..]));
        let link_free_at = vec![0; instances.len()];
        let sequences =
            instances[..serving_count as usize].iter().map(|i| u64::from(i.engine.config().max_num_seqs)).sum();
        let gateway = gateway_config.map(|g| Gateway::new(g, sequences));
        Cluster {
            instances,
            pools: states,
            router,
            serving: serving_count,
            prefill_router,
            transfer,
            pd,
            link_free_at,
            autoscale: None,
            retired: Vec::new(),
            tracing: false,
            gateway,
        }
    }

    /// The pool of instance `r`.
    pub(super) fn pool_of(&self, r: u32) -> &Pool<L> {
        &self.pools[self.instances[r as usize].pool as usize]
    }

    /// Routes among the serving pools: an instance index.
    pub(super) fn route(&mut self, now: u64, call: &crate::workload::LlmCall) -> u32 {
        let n = self.routable();
        self.router.route(now, &mut self.instances[..n], call)
    }

    /// Routes among the prefill pools: an instance index.
    pub(super) fn route_prefill(&mut self, now: u64, call: &crate::workload::LlmCall) -> u32 {
        let router = self.prefill_router.as_mut().expect("a prefill pool");
        self.serving + router.route(now, &mut self.instances[self.serving as usize..], call)
    }

    /// Whether the serving router admits a request now.
    pub(super) fn admits(&mut self, now: u64) -> bool {
        self.autoscale_arrival(now);
        let n = self.routable();
        self.router.admits(now, &mut self.instances[..n])
    }

    /// Whether a call the router sent to instance `decode` is prefilled on
    /// a prefill replica: only on a decode pool with a prefill pool behind
    /// it, as the decider says.
    pub(super) fn splits(&self, decode: u32, call: &crate::workload::LlmCall) -> bool {
        if self.prefill_router.is_none() || self.pool_of(decode).role != Role::Decode {
            return false;
        }
        match self.pd {
            PdDecider::Always => true,
            PdDecider::PrefixThreshold { threshold_tokens } => {
                let engine = &self.instances[decode as usize].engine;
                let cached = engine.cached_prompt_tokens(call);
                call.input_tokens.saturating_sub(cached) >= threshold_tokens
            }
        }
    }

    /// A transfer of `bytes` into instance `decode` asked for at `now`: when
    /// it lands (it waits for the link's transfer before it).
    pub(super) fn transfer_end(&mut self, now: u64, decode: u32, bytes: u64) -> u64 {
        let start = now.max(self.link_free_at[decode as usize]);
        let end = start.saturating_add(self.transfer.duration_us(bytes));
        self.link_free_at[decode as usize] = end;
        end
    }
}
