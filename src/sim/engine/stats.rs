//! What one engine counts over a run (summed over a cluster's engines).

use super::speculative::SpecStats;

/// Counters over the whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Steps executed.
    pub steps: u64,
    /// Preemptions (a request preempted twice counts twice).
    pub preemptions: u64,
    /// Tokens looked up in the prefix cache at admission.
    pub prefix_queries: u64,
    /// Of those, tokens found.
    pub prefix_hits: u64,
    /// Tokens computed (prefill and decode).
    pub computed_tokens: u64,
    /// KV offload: the CPU tier's capacity, blocks (0: no tier).
    pub cpu_tier_blocks: u64,
    /// KV offload: prompt tokens loaded from the CPU tier (hits past the
    /// GPU prefix hit, which `prefix_hits` counts).
    pub cpu_hit_tokens: u64,
    /// KV offload: of `cpu_hit_tokens`, those read from the disk tier.
    pub disk_hit_tokens: u64,
    /// KV offload: loads from the CPU tier.
    pub cpu_loads: u64,
    /// KV offload: bytes those loads read, per GPU.
    pub cpu_load_bytes: u64,
    /// KV offload: blocks stored to the CPU tier.
    pub cpu_stored_blocks: u64,
    /// LoRA adapters copied into a GPU slot from the CPU cache.
    pub lora_loads_cpu: u64,
    /// LoRA adapters read from disk (then copied into a GPU slot).
    pub lora_loads_disk: u64,
    /// Speculative decoding's counters (all zero when it is off).
    pub spec: SpecStats,
}

impl EngineStats {
    /// Adds another engine's counters (a cluster's total).
    pub fn add(&mut self, other: &EngineStats) {
        self.steps += other.steps;
        self.preemptions += other.preemptions;
        self.prefix_queries += other.prefix_queries;
        self.prefix_hits += other.prefix_hits;
        self.computed_tokens += other.computed_tokens;
        self.cpu_tier_blocks += other.cpu_tier_blocks;
        self.cpu_hit_tokens += other.cpu_hit_tokens;
        self.disk_hit_tokens += other.disk_hit_tokens;
        self.cpu_loads += other.cpu_loads;
        self.cpu_load_bytes += other.cpu_load_bytes;
        self.cpu_stored_blocks += other.cpu_stored_blocks;
        self.lora_loads_cpu += other.lora_loads_cpu;
        self.lora_loads_disk += other.lora_loads_disk;
        self.spec.add(&other.spec);
    }
}
