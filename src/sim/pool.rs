//! Pools: groups of identical replicas with one role each, as llm-d and
//! Dynamo deploy them: `mixed` replicas serve whole requests (the aggregated
//! deployment), `prefill` replicas only compute prompts, `decode` replicas
//! take the prompt's KV from a prefill replica and generate. A run without
//! pools is one mixed pool. What moves KV between pools is configured here
//! ([`KvTransferConfig`]); who decides to split a request, too
//! ([`PdDecider`]).

use super::engine::EngineConfig;
use super::router::RouterConfig;

/// What a pool's replicas do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Whole requests: prefill and decode on one replica.
    Mixed,
    /// Prompts only, their KV sent to a decode replica.
    Prefill,
    /// Generation, after the prompt's KV arrived from a prefill replica
    /// (or the whole request, when the decider keeps it local).
    Decode,
}

impl Role {
    /// The one list of roles, as scenario files name them.
    pub const ALL: [Role; 3] = [Role::Mixed, Role::Prefill, Role::Decode];

    /// The order a cluster lays out pools of these roles in, as indices:
    /// the pools that serve requests (mixed, decode) first, then the
    /// prefill pools, each group in the given order. Replica indices in
    /// results follow it.
    pub fn layout_order(roles: &[Role]) -> Vec<usize> {
        let serving = (0..roles.len()).filter(|&i| roles[i] != Role::Prefill);
        serving.chain((0..roles.len()).filter(|&i| roles[i] == Role::Prefill)).collect()
    }

    /// As scenario files and tables name it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Mixed => "mixed",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// One pool of a run.
#[derive(Debug, Clone)]
pub struct PoolConfig<L> {
    /// As the scenario names it.
    pub name: String,
    /// What its replicas do.
    pub role: Role,
    /// The engine (scheduler and KV cache) of each replica.
    pub engine: EngineConfig,
    /// Identical replicas (≥ 1).
    pub replicas: u32,
    /// The replicas are data-parallel ranks of one MoE engine: they step
    /// together, priced together ([`crate::latency::LatencyModel::lockstep_time_us`]).
    pub lockstep: bool,
    /// What prices its steps.
    pub latency: L,
    /// How requests are spread over its replicas. Every pool that serves
    /// requests (mixed and decode) stands behind one router: the first
    /// such pool's; prefill pools behind the first prefill pool's.
    pub router: RouterConfig,
    /// KV bytes of one token on one replica (all its GPUs together, at its
    /// KV cache dtype): what a transfer out of it moves per token.
    pub kv_bytes_per_token: u64,
}

impl<L> PoolConfig<L> {
    /// The pool of an aggregated deployment: `replicas` mixed engines of
    /// `engine` behind `router`, priced by `latency`, named `default`.
    pub fn mixed(engine: EngineConfig, replicas: u32, router: RouterConfig, latency: L) -> Self {
        PoolConfig {
            name: "default".to_owned(),
            role: Role::Mixed,
            engine,
            replicas,
            lockstep: false,
            latency,
            router,
            // (Nothing is sent out of a mixed pool.)
            kv_bytes_per_token: 0,
        }
    }
}

/// How prompt KV moves from a prefill replica to a decode replica.
///
/// Each decode replica reads over one inbound link, one transfer at a time,
/// first come first served: a read waits for the one before it (vLLM's
/// `NixlConnector` issues a request's reads as they are scheduled; on one
/// NIC or NVLink port they share its bandwidth, which FIFO approximates by
/// keeping the total time of a burst and giving the first the shortest).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvTransferConfig {
    /// The link's bandwidth, Gbit/s (all of a replica's GPUs' ports together).
    pub bandwidth_gbps: f64,
    /// Fixed cost of one transfer (handshake, descriptor setup, the decode
    /// side's poll), µs.
    pub latency_us: u64,
}

impl KvTransferConfig {
    /// The link of a deployment that moves no KV (no prefill pool): never
    /// used.
    pub const UNUSED: KvTransferConfig = KvTransferConfig { bandwidth_gbps: 1.0, latency_us: 0 };

    /// How long moving `bytes` takes on an idle link, µs (rounded up).
    pub fn duration_us(&self, bytes: u64) -> u64 {
        // Gbit/s = 1e3 bits per µs.
        let wire = (bytes as f64 * 8.0 / (self.bandwidth_gbps * 1e3)).ceil() as u64;
        self.latency_us.saturating_add(wire)
    }
}

/// Which requests a P/D deployment splits (llm-d's decider plugins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PdDecider {
    /// Every request is prefilled remotely.
    #[default]
    Always,
    /// llm-d's `prefix-based-pd-decider`: prefill remotely only when at
    /// least `threshold_tokens` of the prompt are not already cached on the
    /// decode replica the router chose; shorter ones run there whole.
    PrefixThreshold {
        /// Uncached prompt tokens from which a prompt goes to a prefill replica.
        threshold_tokens: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_takes_its_latency_plus_bytes_over_bandwidth() {
        // 100 MB over 400 Gbit/s: 2,000 µs, plus 50 µs.
        let link = KvTransferConfig { bandwidth_gbps: 400.0, latency_us: 50 };
        assert_eq!(link.duration_us(100_000_000), 2_050);
        assert_eq!(link.duration_us(1), 51);
        assert_eq!(Role::ALL.map(Role::name), ["mixed", "prefill", "decode"]);
    }
}
