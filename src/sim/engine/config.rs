//! What configures one engine: vLLM's engine arguments the scheduler and
//! KV cache obey.

use super::connector::ConnectorKind;
use super::lora::LoraConfig;
use super::offload::KvOffload;
use super::priority::SchedulingPolicy;
use super::span::AttentionSpan;
use super::speculative::SpecDecode;
use crate::sim::kv_cache::KvGroupKind;

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
    /// vLLM ≥ 0.33, priority policy: a running request that has to preempt
    /// itself (it is the least urgent) no longer ends the step's pass over
    /// the running requests; the next ones are still scheduled.
    pub self_preemption_continues: bool,
    /// `--kv-transfer-config`: who else holds KV for this engine.
    pub kv_connector: ConnectorKind,
    /// KV offload to a CPU tier (`offload.rs`); `None`: off.
    pub kv_offload: Option<KvOffload>,
    /// `--enable-lora` and its limits (`None`: off).
    pub lora: Option<LoraConfig>,
    /// `--speculative-config`: drafts verified each decode step (off: `None`).
    pub speculative: Option<SpecDecode>,
    /// `--scheduling-policy`: the waiting queue's order and the preemption
    /// victim (`priority.rs`).
    pub scheduling_policy: SchedulingPolicy,
    /// The model's KV cache groups, as vLLM's hybrid KV cache manager
    /// forms them (`kv_cache/groups.rs`); empty: one full-attention group.
    pub kv_groups: Vec<KvGroupKind>,
    /// vLLM ≥ 0.22: admission counts a window group's blocks up to its cap.
    pub window_admission_cap: bool,
    /// vLLM ≥ 0.28: a window frees by the processed tokens, one step later
    /// with async scheduling.
    pub window_lags_in_flight: bool,
    /// vLLM ≥ 0.30's `prefix_cache_retention_interval`: 0 (its default)
    /// caches a window group's blocks only where a resent prompt or a shared
    /// prefix ends; R > 0 also the window's blocks at the end of every R
    /// tokens; `None` (and releases before) every block.
    pub prefix_cache_retention_interval: Option<u32>,
    /// How far back each layer reads, for pricing (`span.rs`); full: every
    /// layer reads the whole context.
    pub attention_span: AttentionSpan,
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
            self_preemption_continues: false,
            kv_connector: ConnectorKind::None,
            kv_offload: None,
            lora: None,
            speculative: None,
            scheduling_policy: SchedulingPolicy::Fcfs,
            kv_groups: Vec::new(),
            window_admission_cap: false,
            window_lags_in_flight: false,
            prefix_cache_retention_interval: None,
            attention_span: AttentionSpan::default(),
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
