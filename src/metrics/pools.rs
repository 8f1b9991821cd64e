//! Per-pool metrics of a deployment with more than one pool (`pools:`):
//! which replica belongs to which pool ([`PoolLayout`], given by the caller,
//! which knows the deployment), and each pool's share of the run
//! ([`PoolMetrics`]).
//!
//! Definitions:
//! - A pool that serves requests (`mixed`, `decode`) counts the llm calls
//!   whose serving replica (a split call's decode replica) is in it, their
//!   prompt and output tokens, and the TTFT and ITL of those of completed
//!   requests (as the run's own, [`super::MetricsCollector`]).
//! - A `prefill` pool counts the calls it prefilled and their prompt
//!   tokens; its output is none (the one token a prefill makes is dropped:
//!   the decode replica generates the first token again), and it has no
//!   TTFT or ITL of its own.
//! - KV transfers (deployments with a prefill pool): each split call whose
//!   KV moved (more than 0 bytes), whatever became of its request, counted
//!   by the pool it left and the pool it went to; its time runs from the
//!   decode replica's request for the KV until it landed, link wait
//!   included.
//! - Steps, preemptions and the prefix-cache hit rate are the pool's
//!   engines' own ([`crate::sim::RunSummary::replicas`]).

use serde::Serialize;

use super::histogram::Histogram;
use crate::sim::{EngineStats, NodeOutcome, Role};

/// One pool of a deployment, as metrics and tables name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    /// As `pools:` names it (`default` without `pools:`).
    pub name: String,
    /// What its replicas do.
    pub role: Role,
    /// GPUs it occupies.
    pub gpus: u64,
}

/// A deployment's pools and each replica's pool, in the simulator's replica
/// order (the order of a node's `replica` and of `RunSummary::replicas`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolLayout {
    pools: Vec<PoolInfo>,
    /// Per replica, its pool's index in `pools`.
    replica_pool: Vec<usize>,
}

impl PoolLayout {
    /// `pools`, and per replica the index of its pool in `pools`.
    ///
    /// # Panics
    /// When a replica names a pool `pools` does not have (a caller's bug).
    pub fn new(pools: Vec<PoolInfo>, replica_pool: Vec<usize>) -> PoolLayout {
        assert!(replica_pool.iter().all(|&p| p < pools.len()), "each replica's pool is one of the pools");
        PoolLayout { pools, replica_pool }
    }

    /// The pools, in the order the deployment gives them.
    pub fn pools(&self) -> &[PoolInfo] {
        &self.pools
    }

    /// The pool of `replica` (None for a replica the deployment does not have).
    pub fn pool_of(&self, replica: u32) -> Option<&PoolInfo> {
        self.index_of(replica).map(|p| &self.pools[p])
    }

    /// The index in [`PoolLayout::pools`] of `replica`'s pool.
    pub fn index_of(&self, replica: u32) -> Option<usize> {
        self.replica_pool.get(replica as usize).copied()
    }

    /// Whether a prefill pool moves KV to decode pools.
    pub fn disaggregated(&self) -> bool {
        self.pools.iter().any(|p| p.role == Role::Prefill)
    }

    /// Whether `replica` serves requests (is not a prefill replica).
    pub(super) fn serves(&self, replica: usize) -> bool {
        self.replica_pool.get(replica).is_none_or(|&p| self.pools[p].role != Role::Prefill)
    }
}

/// KV transfers into or out of one pool, or of the whole run.
#[derive(Debug, Default)]
pub(super) struct Transfers {
    bytes: u64,
    time: Histogram,
}

impl Transfers {
    fn record(&mut self, node: &NodeOutcome) {
        self.bytes += node.kv_transfer_bytes;
        self.time.record(node.kv_transfer_us);
    }

    pub(super) fn metrics(&self) -> TransferMetrics {
        TransferMetrics {
            count: self.time.count(),
            bytes: self.bytes,
            mean_ms: self.time.mean() / 1e3,
            p99_ms: self.time.percentile(99.0) / 1e3,
        }
    }
}

/// What one pool's calls measured.
#[derive(Debug, Default)]
struct PoolCounts {
    llm_calls: u64,
    input_tokens: u64,
    output_tokens: u64,
    ttft: Histogram,
    itl: Histogram,
    transfers: Transfers,
}

/// Accumulates per-pool metrics (see the module's definitions).
#[derive(Debug, Default)]
pub(super) struct PoolCollector {
    layout: PoolLayout,
    pools: Vec<PoolCounts>,
    /// Every transfer of the run.
    pub(super) transfers: Transfers,
}

impl PoolCollector {
    pub(super) fn new(layout: PoolLayout) -> PoolCollector {
        let pools = layout.pools.iter().map(|_| PoolCounts::default()).collect();
        PoolCollector { layout, pools, transfers: Transfers::default() }
    }

    pub(super) fn layout(&self) -> &PoolLayout {
        &self.layout
    }

    /// Takes one llm call of `input_tokens` prompt tokens into account; its
    /// latencies count when its request `completed`.
    pub(super) fn llm_call(&mut self, input_tokens: u32, node: &NodeOutcome, completed: bool) {
        // A call never routed (rejected, behind a failed node) is no pool's.
        if node.start_us.is_none() {
            return;
        }
        let ran = node.error.is_none();
        let input = if ran { u64::from(input_tokens) } else { 0 };
        let serving = self.layout.index_of(node.replica.unwrap_or(0));
        if let Some(s) = serving {
            let p = &mut self.pools[s];
            p.llm_calls += 1;
            p.input_tokens += input;
            p.output_tokens += node.token_times_us.len() as u64;
            if let (true, Some(start), Some(&first)) = (completed, node.start_us, node.token_times_us.first()) {
                p.ttft.record(first - start);
                p.itl.record_gaps(&node.token_times_us);
            }
        }
        let prefill = node.prefill_replica.and_then(|r| self.layout.index_of(r));
        if let Some(pf) = prefill {
            let p = &mut self.pools[pf];
            p.llm_calls += 1;
            p.input_tokens += input;
        }
        if node.kv_transfer_bytes > 0 {
            self.transfers.record(node);
            // One transfer leaves one pool and enters another (counted once
            // should both be the same pool).
            let mut ends = [prefill, serving];
            if ends[0] == ends[1] {
                ends[1] = None;
            }
            for p in ends.into_iter().flatten() {
                self.pools[p].transfers.record(node);
            }
        }
    }

    /// Each pool's metrics, given each replica's engine counters.
    pub(super) fn finish(&self, replicas: &[EngineStats]) -> Vec<PoolMetrics> {
        let disaggregated = self.layout.disaggregated();
        let ms = |h: &Histogram, p: f64| h.percentile(p) / 1e3;
        self.layout
            .pools
            .iter()
            .zip(&self.pools)
            .enumerate()
            .map(|(i, (info, c))| {
                let mut stats = EngineStats::default();
                let mut engines = 0;
                for (r, s) in replicas.iter().enumerate() {
                    if self.layout.replica_pool.get(r) == Some(&i) {
                        stats.add(s);
                        engines += 1;
                    }
                }
                let serves = info.role != Role::Prefill;
                let latency = |v: f64| serves.then_some(v);
                PoolMetrics {
                    pool: info.name.clone(),
                    role: info.role.name().to_owned(),
                    replicas: engines,
                    gpus: info.gpus,
                    llm_calls: c.llm_calls,
                    input_tokens: c.input_tokens,
                    output_tokens: c.output_tokens,
                    ttft_mean_ms: latency(c.ttft.mean() / 1e3),
                    ttft_p50_ms: latency(ms(&c.ttft, 50.0)),
                    ttft_p99_ms: latency(ms(&c.ttft, 99.0)),
                    itl_mean_ms: latency(c.itl.mean() / 1e3),
                    itl_p50_ms: latency(ms(&c.itl, 50.0)),
                    itl_p99_ms: latency(ms(&c.itl, 99.0)),
                    engine_steps: stats.steps,
                    preemption_count: stats.preemptions,
                    prefix_hit_tokens: stats.prefix_hits,
                    kv_cache_hit_rate: if stats.prefix_queries > 0 {
                        stats.prefix_hits as f64 / stats.prefix_queries as f64
                    } else {
                        0.0
                    },
                    kv_transfers: disaggregated.then(|| c.transfers.metrics()),
                }
            })
            .collect()
    }
}

/// One pool's share of a run (see the module's definitions). Latencies in
/// milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PoolMetrics {
    /// Its name.
    pub pool: String,
    /// `mixed`, `prefill` or `decode`.
    pub role: String,
    /// Its engines (replicas, or data-parallel ranks).
    pub replicas: u32,
    /// GPUs it occupies.
    pub gpus: u64,
    /// Llm calls it served (`mixed`, `decode`) or prefilled (`prefill`).
    pub llm_calls: u64,
    /// Prompt tokens of those that ran.
    pub input_tokens: u64,
    /// Output tokens it emitted (none for a prefill pool).
    pub output_tokens: u64,
    /// TTFT of its calls of completed requests (null for a prefill pool).
    pub ttft_mean_ms: Option<f64>,
    #[allow(missing_docs)]
    pub ttft_p50_ms: Option<f64>,
    #[allow(missing_docs)]
    pub ttft_p99_ms: Option<f64>,
    /// ITL of its calls of completed requests (null for a prefill pool).
    pub itl_mean_ms: Option<f64>,
    #[allow(missing_docs)]
    pub itl_p50_ms: Option<f64>,
    #[allow(missing_docs)]
    pub itl_p99_ms: Option<f64>,
    /// Steps its engines executed.
    pub engine_steps: u64,
    /// Its engines' preemptions.
    pub preemption_count: u64,
    /// Prompt tokens its engines found in their prefix caches.
    pub prefix_hit_tokens: u64,
    /// Its engines' prefix-cache hit rate in tokens.
    pub kv_cache_hit_rate: f64,
    /// The KV transfers out of it (prefill) or into it (decode); only in a
    /// deployment with a prefill pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfers: Option<TransferMetrics>,
}

/// KV transfers: how many, their bytes, their time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct TransferMetrics {
    /// Transfers (split llm calls whose KV moved).
    pub count: u64,
    /// Bytes moved, all of them together.
    pub bytes: u64,
    /// Mean time of one, ms.
    pub mean_ms: f64,
    #[allow(missing_docs)]
    pub p99_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> PoolLayout {
        // Replicas 0–1 decode, replica 2 prefill (serving pools first).
        let pools = vec![
            PoolInfo { name: "p".into(), role: Role::Prefill, gpus: 4 },
            PoolInfo { name: "d".into(), role: Role::Decode, gpus: 8 },
        ];
        PoolLayout::new(pools, vec![1, 1, 0])
    }

    fn split(decode: u32, prefill: u32, tokens: &[u64], transfer_us: u64) -> NodeOutcome {
        NodeOutcome {
            start_us: Some(0),
            token_times_us: tokens.to_vec(),
            replica: Some(decode),
            prefill_replica: Some(prefill),
            kv_transfer_us: transfer_us,
            kv_transfer_bytes: 1000,
            ..NodeOutcome::default()
        }
    }

    #[test]
    fn a_split_call_counts_in_both_pools_and_its_latency_in_the_decode_pool() {
        let mut c = PoolCollector::new(layout());
        c.llm_call(100, &split(0, 2, &[400, 410, 430], 100), true);
        c.llm_call(50, &split(1, 2, &[600, 620], 300), true);
        // Routed nowhere: no pool's.
        c.llm_call(7, &NodeOutcome::default(), false);
        let stats = |steps| EngineStats { steps, prefix_queries: 10, prefix_hits: 5, ..EngineStats::default() };
        let m = c.finish(&[stats(3), stats(4), stats(9)]);
        let (p, d) = (&m[0], &m[1]);
        assert_eq!((p.llm_calls, p.input_tokens, p.output_tokens, p.replicas, p.engine_steps), (2, 150, 0, 1, 9));
        assert_eq!((d.llm_calls, d.input_tokens, d.output_tokens, d.replicas, d.engine_steps), (2, 150, 5, 2, 7));
        assert_eq!((p.ttft_mean_ms, p.itl_p99_ms), (None, None));
        // TTFTs 400 and 600 µs; gaps 10, 20, 20 µs.
        assert_eq!(d.ttft_mean_ms, Some(0.5));
        assert!((d.itl_mean_ms.unwrap() - 50.0 / 3.0 / 1e3).abs() < 1e-12);
        let t = d.kv_transfers.as_ref().unwrap();
        assert_eq!((t.count, t.bytes, t.mean_ms), (2, 2000, 0.2));
        assert_eq!(p.kv_transfers, d.kv_transfers);
        assert_eq!(c.transfers.metrics().count, 2);
        assert!(!layout().serves(2) && layout().serves(0));
        assert_eq!(layout().pool_of(2).map(|p| p.name.as_str()), Some("p"));
    }
}
