//! KV-cache capacity when the scenario does not give `num_gpu_blocks`,
//! computed the way vLLM's profiling run arrives at it:
//! `memory × gpu_memory_utilization − weights − peak activations − non-torch
//! memory`, divided by the bytes of one block.

use crate::arch::ModelArch;

const GIB: f64 = (1u64 << 30) as f64;

/// Memory outside weights, activations and KV that vLLM holds on every GPU:
/// CUDA graphs, cuBLAS workspaces, the allocator's slack. Fitted to the one
/// measured point we have: vLLM 0.15.1 reported `num_gpu_blocks = 7462` for
/// Llama-2-7b TP1 on H100 at utilisation 0.9 (`../shared/data/blis-vllm-h100/
/// experiments.csv`); this constant reproduces it exactly, and CodeLlama-34b
/// TP2 (26,602 measured) within 0.2 % (see the tests).
const BASE_NON_TORCH_BYTES: f64 = 0.67 * GIB;

/// NCCL buffers per GPU under tensor parallelism, from NVIDIA aiconfigurator's
/// `h100_sxm_system_spec.yaml` (`misc.nccl_mem`: TP2 342 MB, TP4/TP8 392 MB).
fn nccl_bytes(tp: u64) -> f64 {
    match tp {
        1 => 0.0,
        2 => 358_612_992.0,
        _ => 411_041_792.0,
    }
}

/// What the capacity depends on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CapacityInputs<'a> {
    pub(crate) model: &'a ModelArch,
    pub(crate) memory_bytes: u64,
    pub(crate) gpu_memory_utilization: f64,
    pub(crate) tp: u64,
    pub(crate) weight_bytes_per_gpu: f64,
    pub(crate) activation_bytes: u64,
    /// Bytes of one block of the pool (`ModelArch::kv_layout`).
    pub(crate) block_bytes: u64,
    pub(crate) max_num_batched_tokens: u64,
    pub(crate) max_num_seqs: u64,
}

/// Number of KV blocks that fit, or `Err(shortfall in bytes)` when the weights
/// and reserves alone exceed the memory vLLM may use.
pub(crate) fn num_gpu_blocks(x: CapacityInputs<'_>) -> Result<u64, f64> {
    let m = x.model;
    let per_gpu_intermediate = match &m.moe {
        // The profiling run routes every token through top-k experts.
        Some(moe) => moe.top_k * moe.expert_intermediate_size / x.tp,
        None => m.intermediate_size / x.tp,
    };
    // Peak activation of the profiling forward pass over max_num_batched_tokens:
    // the residual stream, QKV and attention output (4·hidden) and the MLP's
    // gate/up outputs (2·intermediate per GPU), plus the sampler's fp32 logits
    // for max_num_seqs sequences.
    let act = x.max_num_batched_tokens as f64
        * (4 * m.hidden_size + 2 * per_gpu_intermediate) as f64
        * x.activation_bytes as f64
        + (x.max_num_seqs * m.vocab_size * 4) as f64;
    let usable = x.memory_bytes as f64 * x.gpu_memory_utilization;
    let available = usable - x.weight_bytes_per_gpu - act - BASE_NON_TORCH_BYTES - nccl_bytes(x.tp);
    let block_bytes = x.block_bytes as f64;
    if available < block_bytes {
        return Err(block_bytes - available);
    }
    Ok((available / block_bytes) as u64)
}
