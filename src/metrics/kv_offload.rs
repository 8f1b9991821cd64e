//! The metrics JSON's `kv_offload` object: prefix hits split by tier (the
//! GPU prefix cache's, the CPU tier's loads past it), the loads and their
//! bytes, the blocks stored. Present only when a CPU tier is configured,
//! so a run without one writes exactly what it wrote before.

use serde::Serialize;

use crate::sim::EngineStats;

/// KV offload over the run (all replicas).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct KvOffloadMetrics {
    /// The CPU tiers' capacity, blocks, all replicas together.
    pub cpu_tier_blocks: u64,
    /// Prompt tokens looked up at admission.
    pub prefix_query_tokens: u64,
    /// Of those, found in the GPU prefix cache.
    pub gpu_hit_tokens: u64,
    /// Of those, loaded from the CPU tier (past the GPU hit), the disk
    /// tier's included.
    pub cpu_hit_tokens: u64,
    /// Of `cpu_hit_tokens`, read from the disk tier (0 without one).
    pub disk_hit_tokens: u64,
    /// `gpu_hit_tokens / prefix_query_tokens` (= `kv_cache_hit_rate`).
    pub gpu_hit_rate: f64,
    /// `cpu_hit_tokens / prefix_query_tokens`.
    pub cpu_hit_rate: f64,
    /// Both tiers: `(gpu + cpu hit tokens) / prefix_query_tokens`.
    pub hit_rate: f64,
    /// Loads from the CPU tier.
    pub cpu_loads: u64,
    /// Bytes those loads read, per GPU.
    pub cpu_load_bytes: u64,
    /// Blocks stored to the CPU tier.
    pub cpu_stored_blocks: u64,
}

impl KvOffloadMetrics {
    /// From the engines' counters; `None` without a CPU tier.
    pub(super) fn from_stats(s: &EngineStats) -> Option<KvOffloadMetrics> {
        if s.cpu_tier_blocks == 0 {
            return None;
        }
        let rate = |n: u64| if s.prefix_queries > 0 { n as f64 / s.prefix_queries as f64 } else { 0.0 };
        Some(KvOffloadMetrics {
            cpu_tier_blocks: s.cpu_tier_blocks,
            prefix_query_tokens: s.prefix_queries,
            gpu_hit_tokens: s.prefix_hits,
            cpu_hit_tokens: s.cpu_hit_tokens,
            disk_hit_tokens: s.disk_hit_tokens,
            gpu_hit_rate: rate(s.prefix_hits),
            cpu_hit_rate: rate(s.cpu_hit_tokens),
            hit_rate: rate(s.prefix_hits + s.cpu_hit_tokens),
            cpu_loads: s.cpu_loads,
            cpu_load_bytes: s.cpu_load_bytes,
            cpu_stored_blocks: s.cpu_stored_blocks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_without_a_cpu_tier_and_split_by_tier_with_one() {
        assert_eq!(KvOffloadMetrics::from_stats(&EngineStats::default()), None);
        let s = EngineStats {
            prefix_queries: 1000,
            prefix_hits: 200,
            cpu_hit_tokens: 300,
            cpu_tier_blocks: 64,
            ..EngineStats::default()
        };
        let m = KvOffloadMetrics::from_stats(&s).unwrap();
        assert_eq!((m.gpu_hit_rate, m.cpu_hit_rate, m.hit_rate), (0.2, 0.3, 0.5));
    }
}
