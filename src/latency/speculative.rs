//! What a speculative-decoding drafter costs a step: after the verify pass
//! (priced by the step's latency model over `decodes + spec_tokens` tokens),
//! the drafter proposes the next drafts of every request that sampled, on the
//! same GPUs, before the step's outputs return (vLLM 0.15.1
//! `gpu_model_runner.py` `propose_draft_token_ids` runs inside
//! `execute_model`/`sample_tokens`).
//!
//! Priced as `roofline.rs` prices a kernel, from the model's architecture and
//! the GPU's catalog numbers, with the roofline's measured efficiencies:
//! each sequential draft pass costs the larger of streaming its weights and
//! its GEMM FLOPs over the drafting sequences (at least its kernels' launch
//! floors), plus its attention reading the drafting sequences' context once.
//! - `eagle`: one decoder layer of the target's shape, the `fc` that fuses
//!   the target's hidden state with the token embedding (2d → d), and the LM
//!   head shared with the target (EAGLE, Li et al. 2024, arXiv:2401.15077
//!   §4.1: "an FC layer and a decoder layer"); `k` sequential passes (vLLM's
//!   `EagleProposer.propose` loops `num_speculative_tokens` times).
//! - `mtp`: the model's next-token-prediction module, priced as one decoder
//!   layer of the target (its attention and its MLP or MoE: DeepSeek-V3's
//!   MTP module is one such layer, arXiv:2412.19437 §2.2), its `eh_proj`
//!   (2d → d) and the shared LM head; `k` passes (vLLM reuses the one MTP
//!   layer for every draft position).
//! - `draft_model`: the draft model's own decode step, all its layers and
//!   its LM head, `k` times, with the target's tensor parallelism.
//! - `ngram`: no GPU work. Its CPU cost (vLLM's numba KMP match over each
//!   request's tokens, `NgramProposer`) has no measured number we can cite,
//!   so it is priced 0: an optimistic bound.
//!
//! Integer fields (bytes, FLOPs, ns) keep the engine's configuration `Eq`.

use crate::arch::{Gpu, ModelArch};

use super::common::MEMORY_EFFICIENCY;
use super::roofline::{
    ATTENTION_FLOOR_US, DECODE_ATTENTION_EFFICIENCY, ELEMENTWISE_KERNELS_PER_LAYER, GEMM_COMPUTE_EFFICIENCY,
    GEMM_FLOOR_US,
};

/// Weights and activations of a drafter in 16 bits: vLLM loads EAGLE heads
/// and draft models in the target's activation dtype (bf16/fp16).
const DRAFT_WEIGHT_BYTES: u64 = 2;

/// The drafter's price per step, per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DraftCost {
    /// Sequential draft forward passes a step (`k`; 0: no GPU work).
    pub passes: u32,
    /// Weight bytes one pass streams on one GPU, whatever the batch.
    pub weight_bytes: u64,
    /// An MoE draft layer: bytes of one routed expert on one GPU (0: dense).
    pub expert_bytes: u64,
    /// Routed experts of that layer.
    pub experts: u32,
    /// Experts each token is routed to.
    pub top_k: u32,
    /// GEMM FLOPs per drafting sequence per pass on one GPU.
    pub flops_per_seq: u64,
    /// KV bytes a pass's attention reads per context token on one GPU.
    pub kv_bytes_per_context_token: u64,
    /// Peak memory bandwidth of the GPU, bytes/s.
    pub bandwidth: u64,
    /// Peak dense 16-bit FLOP/s of the GPU.
    pub flops: u64,
    /// Least time of one pass, ns: its kernels' launch floors.
    pub floor_ns: u64,
}

impl DraftCost {
    /// A drafter that costs no GPU time (`ngram`).
    pub const FREE: DraftCost = DraftCost {
        passes: 0,
        weight_bytes: 0,
        expert_bytes: 0,
        experts: 0,
        top_k: 0,
        flops_per_seq: 0,
        kv_bytes_per_context_token: 0,
        bandwidth: 0,
        flops: 0,
        floor_ns: 0,
    };

    /// An EAGLE head for `target` on `tp` GPUs of `gpu`, `k` passes.
    pub fn eagle(target: &ModelArch, gpu: &Gpu, tp: u64, k: u32) -> DraftCost {
        let d = target.hidden_size;
        let layer = target.attention_params_per_layer() + target.dense_mlp_params() + 2 * d * d;
        // Q/K/V, O, gate-up, down, fc, LM head: six GEMMs.
        Self::passes(target, gpu, tp, k, layer, 6, None)
    }

    /// `target`'s own MTP module on `tp` GPUs of `gpu`, `k` passes.
    pub fn mtp(target: &ModelArch, gpu: &Gpu, tp: u64, k: u32) -> DraftCost {
        let d = target.hidden_size;
        let ffn = match &target.moe {
            None => target.dense_mlp_params(),
            Some(m) => d * m.num_experts + 3 * d * m.shared_intermediate_size,
        };
        let layer = target.attention_params_per_layer() + ffn + 2 * d * d;
        let experts = target.moe.as_ref().map(|m| (m.num_experts, m.top_k, 3 * d * m.expert_intermediate_size));
        Self::passes(target, gpu, tp, k, layer, 6, experts)
    }

    /// One layer-shaped draft pass of `layer` parameters (plus the LM head)
    /// with `gemms` GEMM kernels, and routed experts `(count, top_k,
    /// parameters each)` if any.
    fn passes(
        target: &ModelArch,
        gpu: &Gpu,
        tp: u64,
        k: u32,
        layer: u64,
        gemms: u64,
        experts: Option<(u64, u64, u64)>,
    ) -> DraftCost {
        let lm_head = target.vocab_size * target.hidden_size;
        let (n, top_k, per_expert) = experts.unwrap_or((0, 0, 0));
        let active = layer + lm_head + top_k * per_expert;
        let kernels = gemms as f64 + ELEMENTWISE_KERNELS_PER_LAYER;
        DraftCost {
            passes: k,
            weight_bytes: (layer + lm_head) * DRAFT_WEIGHT_BYTES / tp,
            expert_bytes: per_expert * DRAFT_WEIGHT_BYTES / tp,
            experts: n as u32,
            top_k: top_k as u32,
            flops_per_seq: 2 * active / tp,
            kv_bytes_per_context_token: target.kv_elements_per_token_per_layer(tp) * DRAFT_WEIGHT_BYTES,
            bandwidth: gpu.memory_bandwidth as u64,
            flops: gpu.bf16_flops as u64,
            floor_ns: ((kernels * GEMM_FLOOR_US + ATTENTION_FLOOR_US) * 1e3).round() as u64,
        }
    }

    /// `draft`'s own decode steps on `tp` GPUs of `gpu`, `k` of them.
    pub fn draft_model(draft: &ModelArch, gpu: &Gpu, tp: u64, k: u32) -> DraftCost {
        let embed = draft.vocab_size * draft.hidden_size;
        let params = draft.param_count();
        let layers = draft.num_layers as f64;
        // Per layer: four GEMMs, the elementwise kernels and attention; then
        // the LM head.
        let floor_us =
            layers * ((4.0 + ELEMENTWISE_KERNELS_PER_LAYER) * GEMM_FLOOR_US + ATTENTION_FLOOR_US) + GEMM_FLOOR_US;
        DraftCost {
            passes: k,
            // The input embedding is a gather, not streamed.
            weight_bytes: (params - embed) * DRAFT_WEIGHT_BYTES / tp,
            expert_bytes: 0,
            experts: 0,
            top_k: 0,
            flops_per_seq: 2 * (params - embed) / tp,
            kv_bytes_per_context_token: draft.kv_bytes_per_token(tp, DRAFT_WEIGHT_BYTES),
            bandwidth: gpu.memory_bandwidth as u64,
            flops: gpu.bf16_flops as u64,
            floor_ns: (floor_us * 1e3).round() as u64,
        }
    }

    /// The drafter's time in a step where `seqs` requests sampled, with
    /// `context_tokens` tokens of context between them, µs (rounded up).
    pub fn step_us(&self, seqs: u32, context_tokens: u64) -> u64 {
        if self.passes == 0 || seqs == 0 {
            return 0;
        }
        let touched = u64::from(self.experts.min(self.top_k.saturating_mul(seqs)));
        let bytes = (self.weight_bytes + touched * self.expert_bytes) as f64;
        let memory = bytes / (self.bandwidth as f64 * MEMORY_EFFICIENCY);
        let compute = (u64::from(seqs) * self.flops_per_seq) as f64 / (self.flops as f64 * GEMM_COMPUTE_EFFICIENCY);
        let kv = (context_tokens * self.kv_bytes_per_context_token) as f64;
        let attention = kv / (self.bandwidth as f64 * DECODE_ATTENTION_EFFICIENCY);
        let pass_ns = ((memory.max(compute) + attention) * 1e9).max(self.floor_ns as f64);
        (f64::from(self.passes) * pass_ns / 1e3).ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{ModelArch, catalog, hardware};

    fn model(name: &str) -> ModelArch {
        let (id, text) = catalog::model_config(name).unwrap();
        ModelArch::from_config_json(id, text).unwrap()
    }

    /// Llama-3.1-8B's EAGLE head on one H100: one layer (218 M), the fc
    /// (33.6 M) and the LM head (525 M), 777 M parameters or 1.55 GB,
    /// streamed at 0.85 × 3.35 TB/s: 0.546 ms a pass at small batch, three
    /// passes 1.64 ms. A tenth of the 8 B model's own 16 GB per step.
    #[test]
    fn eagle_head_on_h100_streams_its_weights_each_pass() {
        let gpu = hardware::lookup("H100").unwrap();
        let c = DraftCost::eagle(&model("Llama-3.1-8B"), &gpu, 1, 3);
        assert_eq!(c.weight_bytes, 2 * (218_103_808 + 33_554_432 + 525_336_576));
        let one = c.step_us(1, 0);
        assert!((1_600..1_700).contains(&one), "{one}");
        // More context costs attention reads; more sequences cost nothing
        // while weight streaming dominates.
        assert!(c.step_us(1, 100_000) > one);
        assert_eq!(c.step_us(8, 0), one);
        assert_eq!(c.step_us(0, 0), 0);
        assert_eq!(DraftCost::FREE.step_us(64, 1 << 20), 0);
    }

    /// Every latency model prices the verify width: 8 decodes verifying 3
    /// drafts each cost more than 8 plain decodes, and less than 32 decodes
    /// of the same context (the drafts' attention reads each context once).
    #[test]
    fn every_model_prices_the_verify_width() {
        use crate::arch::Dtype;
        use crate::arch::MoeRouting;
        use crate::latency::{KernelConstants, Kernels, LatencyModel, Linear, Roofline, RooflineConstants, StepBatch};
        let gpu = hardware::lookup("H100").unwrap();
        let m = model("Llama-3.1-8B");
        let batch = |decodes: u32, spec_tokens: u32| StepBatch {
            prefills: vec![],
            decodes,
            decode_context_tokens: u64::from(decodes) * 4000,
            spec_tokens,
            ..StepBatch::default()
        };
        let (plain, verify, wide) = (batch(8, 0), batch(8, 24), batch(32, 0));
        let kernels =
            Kernels::new(&m, &gpu, 1, Dtype::Bf16, 2, MoeRouting::Skewed, KernelConstants::fitted("H100").unwrap())
                .unwrap();
        let roofline = Roofline::new(&m, &gpu, 1, 2, false, RooflineConstants::default());
        let models: [(&str, &dyn LatencyModel); 2] = [("kernels", &kernels), ("roofline", &roofline)];
        for (name, l) in models {
            let (p, v, w) = (l.step_time_us(&plain), l.step_time_us(&verify), l.step_time_us(&wide));
            assert!(p < v && v < w, "{name}: plain {p}, verify {v}, 32 decodes {w} µs");
        }
        // Linear: β2 per verified token (8 × 4), β3 per context token once.
        let linear = Linear::new(&[1000.0, 2.0, 10.0, 0.001]).unwrap();
        assert_eq!(linear.step_time_us(&verify), 1000 + 10 * 32 + 32);
    }

    /// A draft model costs its own decode steps: Llama-3.1-8B drafting for
    /// itself costs k of its weight streams, far above an EAGLE head.
    #[test]
    fn draft_model_costs_its_own_steps() {
        let gpu = hardware::lookup("H100").unwrap();
        let m = model("Llama-3.1-8B");
        let d = DraftCost::draft_model(&m, &gpu, 1, 2);
        let e = DraftCost::eagle(&m, &gpu, 1, 2);
        assert!(d.step_us(4, 1000) > 5 * e.step_us(4, 1000));
    }
}
