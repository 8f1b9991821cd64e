//! What LoRA adapters add to a step: vLLM's punica kernels (SGMV shrink then
//! expand, `vllm/lora/ops/triton_ops/lora_shrink_op.py`,
//! `lora_expand_op.py`) beside every LoRA-target linear layer, priced
//! roofline-style from the GPU's datasheet, and the bytes of one adapter's
//! weights (what loading it moves).
//!
//! The target modules are vLLM's for Llama-like dense models
//! (`packed_modules_mapping`: `qkv_proj`, `o_proj`, `gate_up_proj`,
//! `down_proj`), every adapter at `max_lora_rank` (the kernels run on
//! buffers of that rank, `LoRAConfig.max_lora_rank`). Per GPU under tensor
//! parallelism a column-parallel layer (qkv, gate_up) keeps its full input
//! and 1/tp of its output, a row-parallel one (o, down) the reverse
//! (`vllm/lora/layers/column_parallel_linear.py`, `row_parallel_linear.py`).
//!
//! Per module and token the shrink computes `x·A` (2·rank·d_in FLOPs) and
//! the expand `(x·A)·B` added into the output (2·rank·d_out); every distinct
//! adapter's A and B are read once. At ranks ≤ 64 the arithmetic intensity
//! is a few FLOPs a byte, far below any GPU's ridge point, so the kernels
//! are memory-bound: each costs the larger of its FLOPs and its bytes at
//! the efficiencies the roofline model uses, and at least a kernel's floor.
//! Pure: integers in, µs out; zero for a batch without adapters.

use super::batch::StepBatch;

/// LoRA-target modules a layer has (qkv, o, gate_up, down), each one shrink
/// and one expand kernel.
const MODULES_PER_LAYER: u64 = 4;
/// The smallest GEMM-like kernel on H100: median 2.7 µs (m = 1, n, k ≤ 512)
/// in `h100_sxm_vllm0.24_gemm_bf16.csv`, the roofline's `GEMM_FLOOR_US`.
const KERNEL_FLOOR_US: f64 = 2.7;
/// Large BF16 GEMMs reach 81 % of peak (the roofline's
/// `GEMM_COMPUTE_EFFICIENCY`; the same table).
const COMPUTE_EFFICIENCY: f64 = 0.81;
/// Skinny, memory-streaming GEMMs reach 85 % of peak bandwidth (the
/// roofline's `MEMORY_EFFICIENCY`; the same table).
const MEMORY_EFFICIENCY: f64 = super::common::MEMORY_EFFICIENCY;
/// Adapter weights and activations are 16-bit (vLLM's `lora_dtype` defaults
/// to the model's dtype; BF16 here).
const ELEMENT_BYTES: u64 = 2;

/// The model and GPU numbers the LoRA kernels are priced from, per GPU.
/// Integers, so an engine configuration holding them stays `Eq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoraPricing {
    /// Transformer layers.
    pub layers: u64,
    /// Σ over one layer's target modules of (d_in + d_out) on one GPU.
    pub dims_per_layer: u64,
    /// Σ over one layer's target modules of (d_in + 2·d_out) on one GPU: the
    /// activations a token's shrink reads and its expand reads and writes.
    pub activation_elements_per_layer: u64,
    /// The GPU's dense BF16 peak, FLOP/s.
    pub peak_flops: u64,
    /// The GPU's peak memory bandwidth, bytes/s.
    pub bandwidth: u64,
}

impl LoraPricing {
    /// Bytes of one adapter of `rank` on one GPU: A and B of every target
    /// module of every layer.
    pub fn adapter_bytes(&self, rank: u32) -> u64 {
        u64::from(rank) * self.dims_per_layer * self.layers * ELEMENT_BYTES
    }

    /// The LoRA kernels of a step of `batch`, µs (0 when no token in it has
    /// an adapter).
    pub fn step_us(&self, batch: &StepBatch) -> u64 {
        if batch.lora_tokens == 0 {
            return 0;
        }
        let rank = f64::from(batch.lora_rank);
        let tokens = f64::from(batch.lora_tokens);
        let layer_flops = 2.0 * rank * self.dims_per_layer as f64 * tokens;
        let layer_bytes = (f64::from(batch.lora_adapters) * rank * self.dims_per_layer as f64
            + tokens * self.activation_elements_per_layer as f64)
            * ELEMENT_BYTES as f64;
        let compute_us = layer_flops / (self.peak_flops as f64 * COMPUTE_EFFICIENCY) * 1e6;
        let memory_us = layer_bytes / (self.bandwidth as f64 * MEMORY_EFFICIENCY) * 1e6;
        let floor_us = (2 * MODULES_PER_LAYER) as f64 * KERNEL_FLOOR_US;
        let layer_us = compute_us.max(memory_us).max(floor_us);
        (layer_us * self.layers as f64).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.1-8B on one H100 SXM: hidden 4096, 32 heads of 128, 8 KV
    /// heads, intermediate 14336; 989 TFLOPS, 3.35 TB/s.
    fn llama8b_h100() -> LoraPricing {
        let (h, qkv, inter) = (4096, 4096 + 2 * 1024, 14336);
        LoraPricing {
            layers: 32,
            dims_per_layer: (h + qkv) + (h + h) + (h + 2 * inter) + (inter + h),
            activation_elements_per_layer: (h + 2 * qkv) + (h + 2 * h) + (h + 4 * inter) + (inter + 2 * h),
            peak_flops: 989_000_000_000_000,
            bandwidth: 3_350_000_000_000,
        }
    }

    #[test]
    fn an_adapter_of_rank_16_on_llama_8b_is_68_mib() {
        // 16 × (10240 + 8192 + 32768 + 18432) × 32 layers × 2 bytes.
        assert_eq!(llama8b_h100().adapter_bytes(16), 16 * 69_632 * 32 * 2);
        assert_eq!(llama8b_h100().adapter_bytes(16), 68 << 20);
    }

    #[test]
    fn no_adapter_costs_nothing_and_small_batches_pay_the_kernel_floor() {
        let p = llama8b_h100();
        assert_eq!(p.step_us(&StepBatch::EMPTY), 0);
        let one = StepBatch { decodes: 1, lora_tokens: 1, lora_adapters: 1, lora_rank: 16, ..StepBatch::EMPTY };
        // 8 kernels × 2.7 µs a layer × 32 layers: the floor binds (one
        // adapter's 2.3 MB a layer streams in 0.8 µs).
        assert_eq!(p.step_us(&one), 691);
        // A big prefill is memory-bound on its activations and grows with them.
        let big = StepBatch { lora_tokens: 8192, ..one };
        let t = p.step_us(&big);
        assert!(t > 691 * 10, "{t}");
        let two = StepBatch { lora_adapters: 4, ..big };
        assert!(p.step_us(&two) > t);
    }
}
