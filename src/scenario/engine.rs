//! `engine:` resolved for one engine (one pool's): vLLM's serving defaults
//! filled in, the KV capacity computed where `num_gpu_blocks` is not given,
//! `max_model_len` bounded by the model and the cache, and the release's
//! scheduler behaviour, into the simulator's [`EngineConfig`].
//!
//! Two calls, [`batch_limits`] then [`resolve`], because a scenario's checks
//! of `dp` sit between them: keeping that order keeps the first error a
//! scenario reports the one it has always reported.

use super::error::{InvalidValue, invalid};
use super::kv_capacity;
use super::spec::EngineSpec;
use super::vllm_version::{DEFAULT_VLLM_VERSION, VllmVersion};
use crate::arch::{Dtype, Gpu, KvCacheDtype, KvLayout, LayerKind, ModelArch};
use crate::sim::{AttentionSpan, ConnectorKind, EngineConfig, KvGroupKind, LoraConfig, Reach, SchedulingPolicy};

/// The batch limits and memory share of one engine, vLLM's defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BatchLimits {
    pub(crate) max_num_seqs: u32,
    pub(crate) max_num_batched_tokens: u32,
    pub(crate) block_size: u32,
    pub(crate) gpu_memory_utilization: f64,
}

/// One engine's settings, resolved.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedEngine {
    /// What the simulator runs.
    pub(crate) engine: EngineConfig,
    /// The vLLM release whose scheduler it behaves as.
    pub(crate) vllm_version: VllmVersion,
    /// `gpu_memory_utilization` used for the KV capacity.
    pub(crate) gpu_memory_utilization: f64,
    /// `kv_cache_dtype`.
    pub(crate) kv_cache_dtype: KvCacheDtype,
    /// True when `num_gpu_blocks` was computed rather than given.
    pub(crate) kv_capacity_computed: bool,
    /// Weight bytes on each GPU (with LoRA slots).
    pub(crate) weight_bytes_per_gpu: f64,
    /// Layers a KV cache group holds (all attention layers without groups).
    pub(crate) group_layers: u64,
}

/// The batch limits of `e` on `gpu`, checked.
pub(crate) fn batch_limits(gpu: &Gpu, e: &EngineSpec) -> Result<BatchLimits, InvalidValue> {
    // vLLM's serving defaults (vllm/engine/arg_utils.py, get_batch_defaults,
    // OPENAI_API_SERVER): GPUs with ≥ 70 GiB that are not A100 get 8192
    // batched tokens and 1024 sequences; others 2048 and 256.
    let big_gpu = gpu.memory_bytes >= 70 << 30 && !gpu.name.starts_with("A100");
    let max_num_batched_tokens = e.max_num_batched_tokens.unwrap_or(if big_gpu { 8192 } else { 2048 });
    let max_num_seqs = e.max_num_seqs.unwrap_or(if big_gpu { 1024 } else { 256 });
    let block_size = e.block_size.unwrap_or(16);
    let util = e.gpu_memory_utilization.unwrap_or(0.9);
    if max_num_seqs == 0 {
        return invalid("engine.max_num_seqs", "must be positive");
    }
    if max_num_batched_tokens < max_num_seqs {
        return invalid(
            "engine.max_num_batched_tokens",
            format!(
                "{max_num_batched_tokens} is below max_num_seqs = {max_num_seqs}; vLLM requires max_num_batched_tokens >= max_num_seqs"
            ),
        );
    }
    if block_size == 0 {
        return invalid("engine.block_size", "must be positive");
    }
    if !(util > 0.0 && util <= 1.0) {
        return invalid("engine.gpu_memory_utilization", format!("{util} must be in (0, 1]"));
    }
    Ok(BatchLimits { max_num_seqs, max_num_batched_tokens, block_size, gpu_memory_utilization: util })
}

/// The engine of `tp` GPUs of `gpu` serving `model` at `dtype`, one of `dp`
/// data-parallel ranks (an MoE model's experts spread over all of them),
/// with the limits [`batch_limits`] checked.
pub(crate) fn resolve(
    model: &ModelArch,
    gpu: &Gpu,
    tp: u64,
    dp: u32,
    dtype: Dtype,
    e: &EngineSpec,
    limits: BatchLimits,
) -> Result<ResolvedEngine, InvalidValue> {
    let BatchLimits { max_num_seqs, max_num_batched_tokens, block_size, gpu_memory_utilization: util } = limits;
    let weight_bytes: u64 = if dtype.is_fp8() { 1 } else { 2 };
    let kv_cache_dtype = e.kv_cache_dtype.unwrap_or_default();
    let kv_dtype_bytes = kv_cache_dtype.bytes();
    // vLLM's hybrid KV cache manager is on unless disabled. (It turns it
    // off for chunked local attention when
    // `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` is 0: the default in
    // 0.10–0.11, "1" in every release modelled here, 0.15.1, 0.19.0 and
    // 0.33.0's `envs.py`; and with EAGLE or MTP drafts, refused with groups.)
    let hybrid = !e.disable_hybrid_kv_cache_manager.unwrap_or(false);
    if !hybrid && model.layers.contains(&LayerKind::Linear) {
        return invalid(
            "engine.disable_hybrid_kv_cache_manager",
            format!("{} has linear-attention layers: vLLM needs its hybrid KV cache manager for them", model.name),
        );
    }
    let layout = model.kv_layout(tp, kv_dtype_bytes, block_size, hybrid);
    // A linear hybrid's block size is raised so a page holds a state.
    let block_size = layout.block_size;
    let lora = super::lora::resolve(model, gpu, tp, e.lora.as_ref())?;
    // vLLM allocates the adapters' GPU slots before it sizes the KV cache.
    let weights = weight_bytes_per_gpu(model, tp, dp, weight_bytes) + super::lora::reserved_bytes(lora.as_ref());
    let (num_gpu_blocks, computed) = match e.num_gpu_blocks {
        Some(0) => return invalid("engine.num_gpu_blocks", "must be positive"),
        Some(n) => {
            // A given capacity must fit in the GPU's memory: the simulator's
            // own memory follows the blocks used, but a count no GPU could
            // hold is a typo (or 2^32 - 1) that would price a fantasy.
            let block_bytes = layout.block_bytes;
            let most = gpu.memory_bytes / block_bytes.max(1);
            if u64::from(n) > most {
                return invalid(
                    "engine.num_gpu_blocks",
                    format!(
                        "{n} blocks of {block_size} tokens need {:.1} GiB per GPU, more than the {:.0} GiB of one {} (at most {most} blocks)",
                        (u64::from(n) as f64 * block_bytes as f64) / (1u64 << 30) as f64,
                        gpu.memory_bytes as f64 / (1u64 << 30) as f64,
                        gpu.name
                    ),
                );
            }
            (n, false)
        }
        None => {
            let inputs = kv_capacity::CapacityInputs {
                model,
                memory_bytes: gpu.memory_bytes,
                gpu_memory_utilization: util,
                tp,
                weight_bytes_per_gpu: weights,
                activation_bytes: 2,
                block_bytes: layout.block_bytes,
                max_num_batched_tokens: u64::from(max_num_batched_tokens),
                max_num_seqs: u64::from(max_num_seqs),
            };
            match kv_capacity::num_gpu_blocks(inputs) {
                Ok(n) => (n.min(u64::from(u32::MAX)) as u32, true),
                Err(short) => {
                    return invalid(
                        "tp",
                        format!(
                            "{} does not fit on {tp}× {}: {:.1} GiB of weights per GPU leave no room for a KV block ({:.2} GiB short); raise tp or gpu_memory_utilization",
                            model.name,
                            gpu.name,
                            weights / (1u64 << 30) as f64,
                            short / (1u64 << 30) as f64
                        ),
                    );
                }
            }
        }
    };
    // vLLM keeps one block aside as the null block.
    let usable_tokens = longest_sequence(&layout, num_gpu_blocks.saturating_sub(1));
    let max_model_len = match e.max_model_len {
        Some(0) => return invalid("engine.max_model_len", "must be positive"),
        Some(n) if u64::from(n) > model.max_model_len => {
            return invalid(
                "engine.max_model_len",
                format!("{n} exceeds the model's maximum context {}", model.max_model_len),
            );
        }
        Some(n) if computed && u64::from(n) > usable_tokens => {
            return invalid(
                "engine.max_model_len",
                format!(
                    "{n} tokens do not fit in the KV cache ({usable_tokens} tokens); lower max_model_len or raise gpu_memory_utilization"
                ),
            );
        }
        Some(n) => n,
        // Unset: the model's context, capped at what the KV cache holds (vLLM
        // would refuse to start; a capacity planner wants the run).
        None => model.max_model_len.min(usable_tokens.max(1)).min(u64::from(u32::MAX)) as u32,
    };
    let vllm_version = match &e.vllm_version {
        Some(v) => {
            VllmVersion::parse(v).map_err(|reason| InvalidValue { field: "engine.vllm_version".to_owned(), reason })?
        }
        None => DEFAULT_VLLM_VERSION,
    };
    let release = vllm_version.behaviour();
    let engine = EngineConfig {
        max_num_seqs,
        max_num_batched_tokens,
        max_model_len,
        block_size,
        num_gpu_blocks,
        enable_prefix_caching: e.enable_prefix_caching.unwrap_or(true),
        long_prefill_token_threshold: e.long_prefill_token_threshold.unwrap_or(0),
        async_scheduling: e.async_scheduling.unwrap_or(true),
        scheduler_reserve_full_isl: e.scheduler_reserve_full_isl.unwrap_or(release.scheduler_reserve_full_isl),
        lone_request_skips_prefill_threshold: e
            .lone_request_skips_prefill_threshold
            .unwrap_or(release.lone_request_skips_prefill_threshold),
        free_uncached_blocks_first: e.free_uncached_blocks_first.unwrap_or(release.free_uncached_blocks_first),
        self_preemption_continues: release.self_preemption_continues,
        kv_connector: ConnectorKind::None,
        kv_offload: super::kv_offload::resolve(e.kv_offload.as_ref(), model, tp, kv_dtype_bytes, block_size)?,
        lora: lora.map(|l| LoraConfig {
            every_running_counts: release.lora_counts_every_running_request,
            skipped_queue_first: release.lora_skipped_queue_first,
            ..l
        }),
        speculative: super::speculative::resolve(e, model, gpu, tp, dp)?
            .map(|s| s.for_release(release.eagle_hashes_next_token)),
        scheduling_policy: scheduling_policy(e)?,
        kv_groups: kv_groups(&layout),
        window_admission_cap: release.window_admission_cap,
        window_lags_in_flight: release.window_lags_in_flight,
        prefix_cache_retention_interval: release.window_cache_retention.then_some(0),
        attention_span: attention_span(model, tp, kv_dtype_bytes),
    };
    if !engine.kv_groups.is_empty()
        && let Some(other) =
            [(engine.speculative.is_some(), "engine.speculative"), (engine.kv_offload.is_some(), "engine.kv_offload")]
                .into_iter()
                .find_map(|(on, key)| on.then_some(key))
    {
        return invalid(
            other,
            format!(
                "{} keeps its KV in {} groups (sliding-window or linear layers): {other} with KV cache groups is not modelled yet",
                model.name,
                engine.kv_groups.len()
            ),
        );
    }
    if engine.scheduling_policy == SchedulingPolicy::Priority
        && let Some(other) = [
            (engine.lora.is_some(), "engine.lora"),
            (engine.speculative.is_some(), "engine.speculative"),
            (engine.kv_offload.is_some(), "engine.kv_offload"),
        ]
        .into_iter()
        .find_map(|(on, key)| on.then_some(key))
    {
        return invalid("engine.scheduling_policy", format!("priority with {other} is not modelled yet; use fcfs"));
    }
    Ok(ResolvedEngine {
        engine,
        vllm_version,
        gpu_memory_utilization: util,
        kv_cache_dtype,
        kv_capacity_computed: computed,
        weight_bytes_per_gpu: weights,
        group_layers: layout.group_layers,
    })
}

/// The simulator's KV cache groups for `layout`: none when one
/// full-attention group holds every layer.
fn kv_groups(layout: &KvLayout) -> Vec<KvGroupKind> {
    if layout.groups.iter().all(|&k| k == LayerKind::Full) && layout.groups.len() == 1 {
        return Vec::new();
    }
    layout
        .groups
        .iter()
        .map(|&k| match k {
            LayerKind::Full => KvGroupKind::Full,
            LayerKind::SlidingWindow(window) => KvGroupKind::SlidingWindow { window },
            LayerKind::ChunkedLocal(chunk) => KvGroupKind::ChunkedLocal { chunk },
            LayerKind::Linear => KvGroupKind::Linear,
        })
        .collect()
}

/// How far back each of `model`'s layers reads, for pricing: a linear
/// layer's state as the tokens of KV it weighs.
fn attention_span(model: &ModelArch, tp: u64, kv_dtype_bytes: u64) -> AttentionSpan {
    let per_token = (model.kv_elements_per_token_per_layer(tp) * kv_dtype_bytes).max(1);
    let state = model.linear_state_bytes(tp, kv_dtype_bytes).div_ceil(per_token).min(u64::from(u32::MAX)) as u32;
    AttentionSpan::new(model.layers.iter().map(|&k| match k {
        LayerKind::Full => Reach::Full,
        LayerKind::SlidingWindow(w) => Reach::Window(w),
        LayerKind::ChunkedLocal(c) => Reach::Chunk(c),
        LayerKind::Linear => Reach::State(state),
    }))
}

/// The longest sequence whose blocks fit in `blocks`: with only windowed or
/// linear groups, the window's blocks and the states; else what the
/// full-attention groups leave (vLLM's `max_memory_usage_bytes` per group).
fn longest_sequence(layout: &KvLayout, blocks: u32) -> u64 {
    let bs = u64::from(layout.block_size);
    let full = layout.groups.iter().filter(|&&k| k == LayerKind::Full).count() as u64;
    let bounded: u64 = layout
        .groups
        .iter()
        .map(|&k| match k {
            LayerKind::Full => 0,
            LayerKind::SlidingWindow(w) | LayerKind::ChunkedLocal(w) => u64::from(w).div_ceil(bs) + 1,
            LayerKind::Linear => 1,
        })
        .sum();
    let left = u64::from(blocks).saturating_sub(bounded);
    match full {
        0 if left > 0 || bounded == 0 => u64::MAX,
        0 => 0,
        n => left / n * bs,
    }
}

/// `engine.scheduling_policy`, vLLM's `--scheduling-policy` (default fcfs).
fn scheduling_policy(e: &EngineSpec) -> Result<SchedulingPolicy, InvalidValue> {
    match e.scheduling_policy.as_deref() {
        None => Ok(SchedulingPolicy::Fcfs),
        Some(name) => SchedulingPolicy::parse(name)
            .map_or_else(|| invalid("engine.scheduling_policy", format!("`{name}`: fcfs or priority")), Ok),
    }
}

/// Weight bytes on one GPU. FP8 quantises the linear layers; vLLM keeps the
/// embedding and LM head in 16 bits. Under data parallelism an MoE model's
/// experts are spread over all `dp × tp` GPUs (expert parallelism); every
/// other weight is on each rank, split `tp` ways.
pub(super) fn weight_bytes_per_gpu(model: &ModelArch, tp: u64, dp: u32, weight_bytes: u64) -> f64 {
    let embed = model.vocab_size * model.hidden_size * if model.tie_word_embeddings { 1 } else { 2 };
    // Routed experts are on the MoE layers only: not on the leading dense
    // ones (DeepSeek-V3's first_k_dense_replace = 3).
    let experts = model.moe.as_ref().map_or(0, |m| {
        (model.num_layers - m.dense_layers) * m.num_experts * 3 * model.hidden_size * m.expert_intermediate_size
    });
    let rest = model.param_count() - embed - experts;
    // Packed experts (MXFP4, INT4 groups): 4 bits a weight and their scales.
    let expert_bytes =
        model.moe.as_ref().and_then(|m| m.packed_experts).map_or(weight_bytes as f64, |p| p.bytes_per_weight());
    (embed * 2 + rest * weight_bytes) as f64 / tp as f64 + experts as f64 * expert_bytes / (tp * u64::from(dp)) as f64
}
