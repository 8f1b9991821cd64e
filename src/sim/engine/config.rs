//! What configures one engine and what it counts: vLLM's engine arguments
//! the scheduler and KV cache obey, and the run's counters.

use super::connector::ConnectorKind;
use super::lora::LoraConfig;
use super::offload::KvOffload;
use super::speculative::{SpecDecode, SpecStats};

/// vLLM engine arguments the scheduler and KV cache obey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most requests running at once.
    pub max_num_seqs: u32,
    /// Token budget of one step.
    pub max_num_batched_tokens: u32,
    /// Longest sequence (prompt + output) served.
    pub max_model_len: u32,
    /// Tokens per KV block.
    pub block_size: u32,
    /// KV blocks on each GPU, including vLLM's one reserved null block.
    pub num_gpu_blocks: u32,
    /// Automatic prefix caching.
    pub enable_prefix_caching: bool,
    /// Cap on one prefill chunk; 0 = none.
    pub long_prefill_token_threshold: u32,
    /// vLLM's async scheduling: step N+1 is scheduled when step N starts
    /// executing, before N's results are in (`async_scheduler.py`), so a
    /// request that arrives during step N is first scheduled in step N+2.
    pub async_scheduling: bool,
    /// vLLM ≥ 0.19 `scheduler_reserve_full_isl`: a waiting request is
    /// admitted only if blocks for its whole prompt are free, not only for
    /// its first chunk.
    pub scheduler_reserve_full_isl: bool,
    /// vLLM ≥ 0.31: `long_prefill_token_threshold` does not apply while only
    /// one request is running or waiting ("nobody to starve").
    pub lone_request_skips_prefill_threshold: bool,
    /// vLLM ≥ 0.28: freed blocks without a prefix-cache hash go to the head of
    /// the free queue, to be reused first.
    pub free_uncached_blocks_first: bool,
    /// `--kv-transfer-config`: who else holds KV for this engine.
    pub kv_connector: ConnectorKind,
    /// KV offload to a CPU tier (`offload.rs`); `None`: off.
    pub kv_offload: Option<KvOffload>,
    /// `--enable-lora` and its limits (`None`: off).
    pub lora: Option<LoraConfig>,
    /// `--speculative-config`: drafts verified each decode step (off: `None`).
    pub speculative: Option<SpecDecode>,
}

impl EngineConfig {
    /// An engine of `max_num_seqs` sequences, steps of
    /// `max_num_batched_tokens`, sequences of at most `max_model_len`, and
    /// `num_gpu_blocks` blocks of `block_size` tokens; prefix caching and
    /// async scheduling on (vLLM's defaults), no prefill chunk cap, no KV
    /// connector, and every release-dependent behaviour off (set them with
    /// struct update syntax).
    pub fn new(
        max_num_seqs: u32,
        max_num_batched_tokens: u32,
        max_model_len: u32,
        block_size: u32,
        num_gpu_blocks: u32,
    ) -> EngineConfig {
        EngineConfig {
            max_num_seqs,
            max_num_batched_tokens,
            max_model_len,
            block_size,
            num_gpu_blocks,
            enable_prefix_caching: true,
            long_prefill_token_threshold: 0,
            async_scheduling: true,
            scheduler_reserve_full_isl: false,
            lone_request_skips_prefill_threshold: false,
            free_uncached_blocks_first: false,
            kv_connector: ConnectorKind::None,
            kv_offload: None,
            lora: None,
            speculative: None,
        }
    }
}

#[cfg(test)]
impl EngineConfig {
    /// A small engine for the simulator's unit tests: `max_num_seqs`
    /// sequences, steps of `max_num_batched_tokens`, `num_gpu_blocks` blocks
    /// of 16, prefix caching on, every version-dependent behaviour off.
    pub(crate) fn for_tests(max_num_seqs: u32, max_num_batched_tokens: u32, num_gpu_blocks: u32) -> EngineConfig {
        EngineConfig {
            async_scheduling: false,
            ..EngineConfig::new(
                max_num_seqs,
                max_num_batched_tokens,
                max_num_batched_tokens.max(256),
                16,
                num_gpu_blocks,
            )
        }
    }
}

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
