//! Analytical roofline: every kernel of a step costs the larger of its compute
//! time and its memory time, at the efficiency that kernel class reaches on
//! real hardware, and never less than a kernel's launch floor. Layers are
//! identical, so one layer is priced and multiplied. Tensor parallelism splits
//! heads, MLP columns and experts across GPUs and adds two all-reduces a layer.
//!
//! Efficiencies were measured on H100 SXM with vLLM's own kernels (NVIDIA
//! aiconfigurator's kernel database, `../shared/data/aiconfigurator-vllm-h100-
//! h200/csv_bf16`); they are applied unchanged to other GPUs.

use super::batch::{LatencyModel, StepBatch};
use super::common;
use crate::arch::hardware::InterNode;
use crate::arch::{Attention, Gpu, ModelArch};

/// Large BF16 GEMMs (m ≥ 2048, n, k ≥ 4096) reach a median 797 of 989 TFLOPS
/// in `h100_sxm_vllm0.24_gemm_bf16.csv`.
pub(super) const GEMM_COMPUTE_EFFICIENCY: f64 = 0.81;
/// FlashAttention-3 prefill (causal, isl ≥ 2048) reaches a median 48 % of the
/// BF16 peak in `h100_sxm_vllm0.24_context_attention_kvbf16.csv`.
const PREFILL_ATTENTION_EFFICIENCY: f64 = 0.48;
/// Decode attention, fitted by least squares to all 6,770 head_dim-128 rows
/// of `h100_sxm_vllm0.24_generation_attention_kvbf16.csv` as
/// `13.3 µs + 0.067 µs × sequences + KV bytes / (0.955 × peak bandwidth)` per
/// layer (3.20 TB/s; within 2.9 % median on rows reading ≥ 200 MB).
pub(super) const DECODE_ATTENTION_EFFICIENCY: f64 = 0.955;
const DECODE_ATTENTION_BASE_US: f64 = 13.3;
const DECODE_ATTENTION_PER_SEQUENCE_US: f64 = 0.067;
/// Smallest GEMM (m = 1, n, k ≤ 512): median 2.7 µs in the GEMM table.
pub(super) const GEMM_FLOOR_US: f64 = 2.7;
/// Smallest attention kernel: the prefill table's shortest prompts, like the
/// decode fit's base, take about 11–13 µs; 11.4 µs is the decode table's
/// median at batch 1 and ≤ 128 cached tokens.
pub(super) const ATTENTION_FLOOR_US: f64 = 11.4;
/// vLLM custom all-reduce under CUDA graphs, 128 elements, TP2: 4.3 µs
/// (`h100_sxm_vllm0.24_custom_allreduce.csv`).
const ALLREDUCE_FLOOR_US: f64 = 4.3;
/// Same table, 2^29 elements on TP2: 3.22 ms against 2.39 ms at the NVLink
/// per-direction peak for a ring all-reduce, so 74 %.
const ALLREDUCE_BANDWIDTH_EFFICIENCY: f64 = 0.74;
/// Across nodes vLLM's custom all-reduce (one NVLink domain only) gives way
/// to NCCL's ring, priced as NCCL's own tuning model prices it
/// (NVIDIA/nccl `src/graph/tuning.cc`, low-latency protocol, the one small
/// messages use): a base of 6.6 µs (`baseLat`, ring LL), then 0.47 µs for
/// each of the ring's NVLink steps, × 1.8 once the ring spans nodes
/// (`hwLat` NVLink ring LL; `intraLat *= 1.8`), and the network's latency
/// for each of its `2 × (nodes − 1)` network steps (`nInterSteps`).
const NCCL_RING_BASE_US: f64 = 6.6;
const NCCL_NVLINK_STEP_US: f64 = 0.47 * 1.8;
/// Non-GEMM kernels per layer (two RMSNorms, rotary, activation), each at
/// least the GEMM launch floor and otherwise memory-bound.
pub(super) const ELEMENTWISE_KERNELS_PER_LAYER: f64 = 4.0;
/// Per-step CPU time outside the GPU (vLLM V1 scheduling, input preparation,
/// sampling, output processing). Chosen so that Llama-2-7b TP1 on H100 in the
/// 5 req/s stage of the real `blis-vllm-h100` codegen run (its first 3,000
/// requests, converted by `blis-sweep convert`) gives the measured mean ITL,
/// 7.26 ms ((e2e − ttft) / 246 per request; simulated 7.26); issue #4
/// replaces this with a fit over all real runs.
const STEP_OVERHEAD_US: f64 = 485.0;

/// The roofline's tunable constants: the measured defaults above, or values
/// fitted by `blis-sweep fit` on real runs of one GPU (and engine version).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RooflineConstants {
    /// Fraction of peak FLOP/s large GEMMs reach.
    pub gemm_efficiency: f64,
    /// Fraction of peak bandwidth weight streaming and other memory-bound kernels reach.
    pub memory_efficiency: f64,
    /// Fraction of peak FLOP/s prefill attention reaches.
    pub prefill_attention_efficiency: f64,
    /// Fraction of peak bandwidth decode attention reaches on KV reads.
    pub decode_attention_efficiency: f64,
    /// Decode attention's fixed cost per layer, µs.
    pub decode_attention_base_us: f64,
    /// Decode attention's cost per sequence per layer, µs.
    pub decode_attention_per_sequence_us: f64,
    /// Smallest all-reduce, µs.
    pub allreduce_floor_us: f64,
    /// Fraction of the per-direction link bandwidth a ring all-reduce reaches.
    pub allreduce_efficiency: f64,
    /// Time per engine step outside the priced kernels that nothing hides
    /// (launch gaps, sampling, small kernels), µs.
    pub step_overhead_us: f64,
    /// The CPU side of a step (scheduling, input preparation, launches,
    /// output processing), µs: hidden behind the GPU under async scheduling
    /// unless the longer (as in `Kernels`; the same host costs).
    #[serde(default)]
    pub cpu_step_us: f64,
    /// Further CPU time per sequence scheduled in a step, µs.
    #[serde(default)]
    pub cpu_per_sequence_us: f64,
    /// Further CPU time per token scheduled in a step, µs.
    #[serde(default)]
    pub cpu_per_token_us: f64,
    /// Multiplier on the three CPU terms (as the kernels model's).
    #[serde(default = "super::common::one")]
    pub cpu_scale: f64,
    /// Time from a request reaching the server to the engine seeing it
    /// (HTTP, tokenization), µs; part of its TTFT and E2E.
    pub request_overhead_us: f64,
}

impl Default for RooflineConstants {
    fn default() -> Self {
        RooflineConstants {
            gemm_efficiency: GEMM_COMPUTE_EFFICIENCY,
            memory_efficiency: common::MEMORY_EFFICIENCY,
            prefill_attention_efficiency: PREFILL_ATTENTION_EFFICIENCY,
            decode_attention_efficiency: DECODE_ATTENTION_EFFICIENCY,
            decode_attention_base_us: DECODE_ATTENTION_BASE_US,
            decode_attention_per_sequence_us: DECODE_ATTENTION_PER_SEQUENCE_US,
            allreduce_floor_us: ALLREDUCE_FLOOR_US,
            allreduce_efficiency: ALLREDUCE_BANDWIDTH_EFFICIENCY,
            step_overhead_us: STEP_OVERHEAD_US,
            cpu_step_us: 0.0,
            cpu_per_sequence_us: 0.0,
            cpu_per_token_us: 0.0,
            cpu_scale: 1.0,
            // Not measured: real TTFT includes the server front end, which
            // only a fit against real runs can estimate.
            request_overhead_us: 0.0,
        }
    }
}

impl RooflineConstants {
    /// The constants for `gpu` (catalog name): fitted on real runs where
    /// `../shared/data` has them and the measured defaults did not already
    /// match (`roofline/<gpu>.constants.yaml`, written by `blis-sweep fit`),
    /// else the measured defaults.
    pub fn for_gpu(gpu: &str) -> RooflineConstants {
        let text = match gpu {
            // vLLM 0.19 on two RTX PRO 6000 Blackwell Server GPUs without
            // NVLink: all-reduces go over PCIe through NCCL, which only the
            // fit can price (70 µs floor, 16 GB/s).
            "RTXPRO6000" => include_str!("roofline/rtxpro6000.constants.yaml"),
            // The CPU side is the host's and vLLM's, not the kernels': where
            // the kernels model has a fit (H100, H200), a model only the
            // roofline prices there (MLA, FP8 KV) takes its CPU side.
            _ => {
                let mut c = RooflineConstants::default();
                if let Some(k) = super::kernels::KernelConstants::fitted(gpu) {
                    (c.cpu_step_us, c.cpu_per_sequence_us) = (k.cpu_step_us, k.cpu_per_sequence_us);
                    (c.cpu_per_token_us, c.cpu_scale) = (k.cpu_per_token_us, k.cpu_scale);
                }
                return c;
            }
        };
        crate::yaml::parse(text).expect("embedded roofline constants parse")
    }

    /// Checks every constant is finite and in range; the first bad one's name.
    pub fn validate(&self) -> Result<(), String> {
        let fractions = [
            ("gemm_efficiency", self.gemm_efficiency),
            ("memory_efficiency", self.memory_efficiency),
            ("prefill_attention_efficiency", self.prefill_attention_efficiency),
            ("decode_attention_efficiency", self.decode_attention_efficiency),
            ("allreduce_efficiency", self.allreduce_efficiency),
        ];
        for (name, v) in fractions {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(format!("{name}: {v} must be in (0, 1]"));
            }
        }
        let times = [
            ("decode_attention_base_us", self.decode_attention_base_us),
            ("decode_attention_per_sequence_us", self.decode_attention_per_sequence_us),
            ("allreduce_floor_us", self.allreduce_floor_us),
            ("step_overhead_us", self.step_overhead_us),
            ("cpu_step_us", self.cpu_step_us),
            ("cpu_per_sequence_us", self.cpu_per_sequence_us),
            ("cpu_per_token_us", self.cpu_per_token_us),
            ("request_overhead_us", self.request_overhead_us),
        ];
        for (name, v) in times {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name}: {v} must be a non-negative number of microseconds"));
            }
        }
        if !(self.cpu_scale.is_finite() && self.cpu_scale > 0.0) {
            return Err(format!("cpu_scale: {} must be a positive factor", self.cpu_scale));
        }
        Ok(())
    }
}

/// The roofline latency model for one deployment.
#[derive(Debug, Clone)]
pub struct Roofline {
    layers: f64,
    /// Layers with a dense MLP (all of a dense model's).
    dense_layers: f64,
    hidden: f64,
    heads_per_gpu: f64,
    /// Per head: the query-key dot product's and the value's width.
    qk_dim: f64,
    v_dim: f64,
    /// KV-cache elements a token takes per layer on one GPU.
    kv_elements: f64,
    /// Bytes a KV element takes (`kv_cache_dtype`).
    kv_bytes: f64,
    /// Output columns of the attention's input projections per GPU.
    qkv_out: f64,
    /// Attention projection weights per layer per GPU, elements.
    attn_weights: f64,
    /// Latent attention's KV up-projection per layer per GPU, elements,
    /// which a prefill chunk also applies to its cached context (0 for
    /// grouped attention).
    kv_up_weights: f64,
    /// Dense MLP weights per layer per GPU, elements.
    dense_mlp_weights: f64,
    moe: Option<MoeShape>,
    vocab: f64,
    tp: f64,
    weight_bytes: f64,
    act_bytes: f64,
    gemm_flops: f64,
    attention_flops: f64,
    bandwidth: f64,
    interconnect: f64,
    /// GPUs sharing `interconnect`; a collective over more crosses the
    /// network between nodes.
    gpus_per_node: f64,
    inter_node: Option<InterNode>,
    c: RooflineConstants,
    async_scheduling: bool,
    /// Whether sampling runs vLLM's sort-based top-k/top-p path
    /// ([`super::sort_sampler_us`]).
    sort_sampler: bool,
}

#[derive(Debug, Clone)]
struct MoeShape {
    experts: f64,
    top_k: f64,
    /// Weights of one expert per GPU (gate, up, down), elements: an expert's
    /// weights over the GPUs the experts are spread across.
    expert_weights: f64,
    shared_weights: f64,
    /// Bytes a routed expert weight streams: the serving dtype's, or packed
    /// experts' (gpt-oss's MXFP4 4.25 bits, Kimi-K2.5's INT4 groups 4.5).
    expert_bytes: Option<f64>,
    /// GPUs the experts are spread across: `tp`, or `tp × dp` under expert
    /// parallelism (either way each GPU streams 1/ranks of the touched
    /// experts' weights and computes 1/ranks of the routed FLOPs).
    ranks: f64,
}

impl Roofline {
    /// Prices steps of `model` on `tp` GPUs of kind `gpu`. `weight_bytes` is
    /// bytes per weight (1 for FP8), `fp8_compute` says whether GEMMs run on
    /// FP8 tensor cores.
    pub fn new(
        model: &ModelArch,
        gpu: &Gpu,
        tp: u64,
        weight_bytes: u64,
        fp8_compute: bool,
        c: RooflineConstants,
    ) -> Roofline {
        let tpf = tp as f64;
        let d = model.hidden_size as f64;
        let moe = model.moe.as_ref().map(|m| MoeShape {
            experts: m.num_experts as f64,
            top_k: m.top_k as f64,
            expert_weights: 3.0 * d * m.expert_intermediate_size as f64 / tpf,
            shared_weights: 3.0 * d * m.shared_intermediate_size as f64 / tpf,
            expert_bytes: m.packed_experts.map(|p| p.bytes_per_weight()),
            ranks: tpf,
        });
        let heads_per_gpu = model.num_heads as f64 / tpf;
        let (qk_dim, v_dim, qkv_out, kv_up_weights) = match model.attention {
            Attention::Grouped => {
                let hd = model.head_dim as f64;
                (hd, hd, heads_per_gpu * hd + 2.0 * model.num_kv_heads.div_ceil(tp) as f64 * hd, 0.0)
            }
            Attention::Latent { kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, .. } => {
                let qk = (qk_nope_head_dim + qk_rope_head_dim) as f64;
                let latent = (kv_lora_rank + qk_rope_head_dim) as f64;
                let up = kv_lora_rank as f64 * heads_per_gpu * (qk_nope_head_dim + v_head_dim) as f64;
                (qk, v_head_dim as f64, heads_per_gpu * qk + latent, up)
            }
        };
        Roofline {
            layers: model.num_layers as f64,
            dense_layers: model.dense_layers() as f64,
            hidden: d,
            heads_per_gpu,
            qk_dim,
            v_dim,
            kv_elements: model.kv_elements_per_token_per_layer(tp) as f64,
            kv_bytes: 2.0,
            qkv_out,
            attn_weights: model.attention_params_per_layer() as f64 / tpf,
            kv_up_weights,
            dense_mlp_weights: model.dense_mlp_params() as f64 / tpf,
            moe,
            vocab: model.vocab_size as f64,
            tp: tpf,
            weight_bytes: weight_bytes as f64,
            act_bytes: 2.0,
            gemm_flops: match (fp8_compute, gpu.fp8_flops) {
                (true, Some(f)) => f,
                _ => gpu.bf16_flops,
            },
            attention_flops: gpu.bf16_flops,
            bandwidth: gpu.memory_bandwidth,
            interconnect: gpu.interconnect_bandwidth,
            gpus_per_node: gpu.gpus_per_node.max(1) as f64,
            inter_node: gpu.inter_node,
            c,
            async_scheduling: true,
            sort_sampler: false,
        }
    }

    /// The same model for requests that sample through vLLM's sort-based
    /// top-k/top-p path (off unless set).
    pub fn with_sort_sampler(mut self, sort_sampler: bool) -> Roofline {
        self.sort_sampler = sort_sampler;
        self
    }

    /// The same model for an engine with or without async scheduling (on
    /// unless set): whether the CPU side overlaps the GPU.
    pub fn with_async_scheduling(mut self, async_scheduling: bool) -> Roofline {
        self.async_scheduling = async_scheduling;
        self
    }

    /// A KV cache of `bytes` an element (1 for `kv_cache_dtype: fp8`).
    pub fn with_kv_cache_bytes(mut self, bytes: u64) -> Roofline {
        self.kv_bytes = bytes as f64;
        self
    }

    /// Experts spread over `tp × dp` GPUs (vLLM's `--enable-expert-parallel`
    /// with data parallelism), for pricing lockstep steps of `dp` ranks.
    pub fn with_expert_parallel(mut self, dp: u64) -> Roofline {
        if let Some(m) = &mut self.moe {
            let ranks = self.tp * dp as f64;
            m.expert_weights *= m.ranks / ranks;
            m.ranks = ranks;
        }
        self
    }

    /// The constants in use.
    pub fn constants(&self) -> &RooflineConstants {
        &self.c
    }

    /// The same model with other constants.
    pub fn with_constants(&self, c: RooflineConstants) -> Roofline {
        Roofline { c, ..self.clone() }
    }

    /// A GEMM of `tokens` rows against `weights` elements: roofline in µs.
    fn gemm_us(&self, tokens: f64, weights: f64, out_cols: f64) -> f64 {
        if weights == 0.0 {
            return 0.0;
        }
        let flops = 2.0 * tokens * weights;
        let in_cols = weights / out_cols;
        let bytes = weights * self.weight_bytes + tokens * (in_cols + out_cols) * self.act_bytes;
        let compute = flops / (self.gemm_flops * self.c.gemm_efficiency);
        let memory = bytes / (self.bandwidth * self.c.memory_efficiency);
        (compute.max(memory) * 1e6).max(GEMM_FLOOR_US)
    }

    /// An all-reduce of `tokens` hidden states over `ranks` GPUs, µs. Within
    /// a node, over its NVLink (or PCIe); across nodes, NCCL's ring (see
    /// [`NCCL_RING_BASE_US`]), whose every step waits for its slowest link:
    /// a node's network adapters (one per GPU, NCCL runs a ring channel
    /// through each) unless its NVLink is slower. (A GPU the catalog gives no
    /// network is refused beyond one node before it is priced; should one
    /// reach here, its group is priced as one node.)
    fn allreduce_us(&self, tokens: f64, ranks: f64) -> f64 {
        if ranks <= 1.0 {
            return 0.0;
        }
        let bytes = tokens * self.hidden * self.act_bytes;
        let wire = 2.0 * (ranks - 1.0) / ranks * bytes;
        let Some(net) = self.inter_node.filter(|_| ranks > self.gpus_per_node) else {
            return self.c.allreduce_floor_us + wire / (self.interconnect * self.c.allreduce_efficiency) * 1e6;
        };
        let nodes = (ranks / self.gpus_per_node).ceil();
        let net_steps = 2.0 * (nodes - 1.0);
        let nvlink_steps = 2.0 * (ranks - 1.0) - net_steps;
        let slowest = self.interconnect.min(ranks / nodes * net.bandwidth);
        NCCL_RING_BASE_US
            + nvlink_steps * NCCL_NVLINK_STEP_US
            + net_steps * net.latency_us
            + wire / (slowest * self.c.allreduce_efficiency) * 1e6
    }

    /// Tokens `batch` computes.
    fn tokens(batch: &StepBatch) -> f64 {
        // Speculative drafts are verified as tokens of their decodes.
        let mut tokens = f64::from(batch.decodes) + f64::from(batch.spec_tokens);
        for c in &batch.prefills {
            tokens += f64::from(c.new_tokens);
        }
        tokens
    }

    /// One layer of `batch` on one GPU, µs, with `ffn` for its MLP or MoE and
    /// `comm` for its collectives; and the sequences it samples. (Summed in
    /// one fixed order, so a price never moves by a rounding.)
    fn layer_us(&self, batch: &StepBatch, tokens: f64, ffn: f64, comm: f64) -> (f64, f64) {
        let decodes = f64::from(batch.decodes);
        // Verification computes logits at every draft position too.
        let spec = f64::from(batch.spec_tokens);
        let mut sampled = decodes + spec;
        // Attention per layer: prefill FLOPs (causal over context + chunk) and
        // KV bytes (read the context, write and read the new tokens).
        let (mut prefill_flops, mut prefill_kv, mut prefill_context) = (0.0, 0.0, 0.0);
        let kv_token_bytes = self.kv_elements * self.kv_bytes;
        for c in &batch.prefills {
            let t = f64::from(c.new_tokens);
            let ctx = f64::from(c.context_tokens);
            if c.samples {
                sampled += 1.0;
            }
            // QKᵀ and PV, causal over the context and the chunk.
            prefill_flops += 2.0 * self.heads_per_gpu * (self.qk_dim + self.v_dim) * (t * ctx + t * (t + 1.0) / 2.0);
            prefill_kv += (ctx + 2.0 * t) * kv_token_bytes;
            prefill_context += ctx;
        }
        // Each decode reads its context once, and writes and reads its new
        // tokens (1 + its drafts).
        let decode_kv = (batch.decode_context_tokens as f64 + 2.0 * (decodes + spec)) * kv_token_bytes;
        let d = self.hidden;
        let o_weights = self.heads_per_gpu * self.v_dim * d;
        let mut layer =
            self.gemm_us(tokens, self.attn_weights - o_weights, self.qkv_out) + self.gemm_us(tokens, o_weights, d);
        if self.kv_up_weights > 0.0 && prefill_context > 0.0 {
            // Latent attention's prefill expands the cached latents to keys
            // and values again.
            layer += self.gemm_us(prefill_context, self.kv_up_weights, self.kv_up_weights / self.kv_elements.max(1.0));
        }
        layer += ffn;
        if prefill_flops > 0.0 {
            let compute = prefill_flops / (self.attention_flops * self.c.prefill_attention_efficiency);
            let memory = prefill_kv / (self.bandwidth * self.c.memory_efficiency);
            layer += (compute.max(memory) * 1e6).max(ATTENTION_FLOOR_US);
        }
        if batch.decodes > 0 {
            layer += self.c.decode_attention_base_us
                + self.c.decode_attention_per_sequence_us * decodes
                + decode_kv / (self.bandwidth * self.c.decode_attention_efficiency) * 1e6;
        }
        let elementwise_bytes = tokens * (6.0 * d) * self.act_bytes;
        layer += (elementwise_bytes / (self.bandwidth * self.c.memory_efficiency) * 1e6)
            .max(ELEMENTWISE_KERNELS_PER_LAYER * GEMM_FLOOR_US);
        layer += comm;
        (layer, sampled)
    }

    /// One dense layer's MLP, µs.
    fn dense_ffn_us(&self, tokens: f64) -> f64 {
        let d = self.hidden;
        let i = self.dense_mlp_weights / (3.0 * d);
        self.gemm_us(tokens, 2.0 * d * i, 2.0 * i) + self.gemm_us(tokens, d * i, d)
    }

    /// One layer's MLP, or its MoE when every token of `tokens` is routed
    /// over the experts' GPUs, µs (a dense layer's for a dense model).
    fn ffn_us(&self, tokens: f64) -> f64 {
        let d = self.hidden;
        match &self.moe {
            None => self.dense_ffn_us(tokens),
            Some(m) => {
                // Expected distinct experts touched when `tokens` tokens each pick top_k.
                let touched = m.experts * (1.0 - (1.0 - m.top_k / m.experts).powf(tokens));
                let weights = touched * m.expert_weights;
                let flops = 2.0 * tokens * m.top_k * m.expert_weights;
                let bytes = weights * m.expert_bytes.unwrap_or(self.weight_bytes);
                let experts = (flops / (self.gemm_flops * self.c.gemm_efficiency))
                    .max(bytes / (self.bandwidth * self.c.memory_efficiency))
                    * 1e6;
                let router = self.gemm_us(tokens, d * m.experts, m.experts);
                let shared = if m.shared_weights > 0.0 {
                    self.gemm_us(tokens, m.shared_weights, m.shared_weights / (3.0 * d) * 2.0)
                } else {
                    0.0
                };
                experts.max(GEMM_FLOOR_US) + router + shared
            }
        }
    }

    /// The CPU side of a step of `batch`, µs.
    fn cpu_us(&self, batch: &StepBatch) -> f64 {
        let c = &self.c;
        super::common::cpu_side_us(c.cpu_step_us, c.cpu_per_sequence_us, c.cpu_per_token_us, c.cpu_scale, batch)
    }

    /// The LM head over `sampled` sequences, µs, and the sort-based
    /// sampler after it where the requests take that path.
    fn lm_head_us(&self, sampled: f64) -> f64 {
        let d = self.hidden;
        let head =
            if sampled > 0.0 { self.gemm_us(sampled, self.vocab * d / self.tp, self.vocab / self.tp) } else { 0.0 };
        let sampler = if self.sort_sampler { super::common::sort_sampler_us(sampled, self.vocab) } else { 0.0 };
        head + sampler
    }
}

impl LatencyModel for Roofline {
    fn request_overhead_us(&self) -> u64 {
        self.c.request_overhead_us.round() as u64
    }

    fn step_time_us(&self, batch: &StepBatch) -> u64 {
        if batch.is_empty() {
            return 1;
        }
        let tokens = Self::tokens(batch);
        // Two all-reduces over the TP group: after attention's output
        // projection and after the MLP or MoE.
        let comm = 2.0 * self.allreduce_us(tokens, self.tp);
        let (layer, sampled) = self.layer_us(batch, tokens, self.ffn_us(tokens), comm);
        let mut gpu = self.layers * layer + self.lm_head_us(sampled) + self.c.step_overhead_us;
        if self.moe.is_some() && self.dense_layers > 0.0 {
            // Leading dense layers (DeepSeek's first_k_dense_replace).
            let (dense, _) = self.layer_us(batch, tokens, self.dense_ffn_us(tokens), comm);
            gpu += self.dense_layers * (dense - layer);
        }
        super::common::overlap(gpu, self.cpu_us(batch), self.async_scheduling).round().max(1.0) as u64
    }

    /// Lockstep data-parallel ranks with expert parallelism: each rank runs
    /// attention on its own batch, then every MoE layer routes all ranks'
    /// tokens over the experts' GPUs, as vLLM's default all2all backend
    /// (`allgather_reducescatter`) does: the hidden states are all-gathered
    /// before the experts and reduce-scattered after, a collective priced as
    /// one all-reduce of every rank's tokens. Each layer waits for the
    /// slowest rank's attention.
    fn lockstep_time_us(&self, ranks: &[&StepBatch]) -> u64 {
        let (mut slowest, mut all_tokens, mut lm_head, mut cpu) = (0.0f64, 0.0, 0.0f64, 0.0f64);
        for b in ranks {
            let b = if b.is_empty() { &super::batch::DUMMY_BATCH } else { b };
            // Each rank's engine core has its own CPU side.
            cpu = cpu.max(self.cpu_us(b));
            let tokens = Self::tokens(b);
            let (rest, sampled) = self.layer_us(b, tokens, 0.0, self.allreduce_us(tokens, self.tp));
            slowest = slowest.max(rest);
            all_tokens += tokens;
            lm_head = lm_head.max(self.lm_head_us(sampled));
        }
        let ep_ranks = self.moe.as_ref().map_or(self.tp, |m| m.ranks);
        let layer = slowest + self.ffn_us(all_tokens) + self.allreduce_us(all_tokens, ep_ranks);
        let gpu = self.layers * layer + lm_head + self.c.step_overhead_us;
        super::common::overlap(gpu, cpu, self.async_scheduling).round().max(1.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::hardware;
    use crate::latency::test_support::{decode, model};

    #[test]
    fn decode_is_memory_bound_and_grows_with_context() {
        let m = Roofline::new(
            &model("Llama-2-7b"),
            &hardware::lookup("H100").unwrap(),
            1,
            2,
            false,
            RooflineConstants::default(),
        );
        let short = m.step_time_us(&decode(10, 100));
        let long = m.step_time_us(&decode(10, 2000));
        assert!(long > short);
        // 13.5 GB of weights at 85 % of 3.35 TB/s is 4.7 ms before overheads.
        assert!((5_500..9_000).contains(&short), "{short}");
    }

    #[test]
    fn prefill_is_compute_bound_and_tp_helps() {
        let chunk = StepBatch {
            prefills: vec![crate::latency::PrefillChunk { new_tokens: 2048, context_tokens: 0, samples: true }],
            ..StepBatch::default()
        };
        let h100 = hardware::lookup("H100").unwrap();
        let tp1 = Roofline::new(&model("CodeLlama-34b"), &h100, 1, 2, false, RooflineConstants::default())
            .step_time_us(&chunk);
        let tp2 = Roofline::new(&model("CodeLlama-34b"), &h100, 2, 2, false, RooflineConstants::default())
            .step_time_us(&chunk);
        assert!(tp2 < tp1 * 7 / 10, "{tp1} {tp2}");
        // 2·34e9·2048 FLOP at 81 % of 989 TFLOPS ≈ 171 ms.
        assert!((150_000..220_000).contains(&tp1), "{tp1}");
    }

    #[test]
    fn fitted_gpus_have_their_own_constants() {
        let pro = RooflineConstants::for_gpu("RTXPRO6000");
        pro.validate().unwrap();
        assert!(pro.allreduce_floor_us > 10.0 * RooflineConstants::default().allreduce_floor_us);
        assert_eq!(RooflineConstants::for_gpu("RTX4090"), RooflineConstants::default());
        // A100 and L40S take the kernels model's CPU side (the H100 fit's).
        let (a100, k) =
            (RooflineConstants::for_gpu("A100-80G"), crate::latency::KernelConstants::fitted("H100").unwrap());
        assert_eq!((a100.cpu_step_us, a100.cpu_per_sequence_us), (k.cpu_step_us, k.cpu_per_sequence_us));
    }

    /// The roofline's CPU side works as the kernels model's: on H100 it is
    /// the kernels fit's (the host's, not the kernels'), added to the GPU
    /// side without async scheduling and hidden behind it with.
    #[test]
    fn the_cpu_side_adds_or_hides_as_the_kernels_model_s() {
        let h100 = hardware::lookup("H100").unwrap();
        let c = RooflineConstants::for_gpu("H100");
        let k = crate::latency::KernelConstants::fitted("H100").unwrap();
        assert_eq!((c.cpu_step_us, c.cpu_per_sequence_us), (k.cpu_step_us, k.cpu_per_sequence_us));
        assert_eq!((c.cpu_per_token_us, c.cpu_scale), (k.cpu_per_token_us, k.cpu_scale));
        assert!(c.cpu_step_us > 0.0);
        let m = model("Llama-3.1-8B");
        let gpu_only = Roofline::new(
            &m,
            &h100,
            1,
            2,
            false,
            RooflineConstants { cpu_step_us: 0.0, cpu_per_sequence_us: 0.0, ..c },
        );
        let with_cpu = Roofline::new(&m, &h100, 1, 2, false, c);
        let batch = decode(8, 500);
        let gpu = gpu_only.step_time_us(&batch) as f64;
        let cpu = c.cpu_scale * (c.cpu_step_us + 8.0 * c.cpu_per_sequence_us + 8.0 * c.cpu_per_token_us);
        let sync = with_cpu.clone().with_async_scheduling(false).step_time_us(&batch) as f64;
        assert!((sync - (gpu + cpu)).abs() <= 1.0, "{sync} {gpu} {cpu}");
        assert_eq!(with_cpu.step_time_us(&batch) as f64, gpu.max(cpu.round()));
    }

    #[test]
    fn a_cpu_scale_must_be_a_positive_factor() {
        let c = RooflineConstants::default();
        assert_eq!(c.cpu_scale, 1.0);
        for bad in [0.0, -1.0, f64::NAN] {
            let err = RooflineConstants { cpu_scale: bad, ..c }.validate().unwrap_err();
            assert!(err.starts_with("cpu_scale: "), "{err}");
        }
        let err = RooflineConstants { cpu_per_token_us: -0.5, ..c }.validate().unwrap_err();
        assert_eq!(err, "cpu_per_token_us: -0.5 must be a non-negative number of microseconds");
    }

    /// TP beyond one node: the all-reduce leaves NVLink for NCCL's ring over
    /// the network. Llama-3.1-70B, 32 decodes (512 KiB of hidden states):
    /// TP8 on NVLink pays its 4.3 µs floor and 0.97 MB / (450 GB/s × 0.74);
    /// TP16 over two HGX H100 nodes pays NCCL's 6.6 µs, 28 NVLink steps of
    /// 0.846 µs and 2 network steps of 2.7 µs, and 0.98 MB / (8 × 50 GB/s
    /// × 0.74); TP32 over four, 56 and 6 steps.
    #[test]
    fn an_all_reduce_across_nodes_pays_the_network() {
        let h100 = hardware::lookup("H100").unwrap();
        let m = model("Llama-3.1-70B");
        let r = |tp: u64| Roofline::new(&m, &h100, tp, 2, false, RooflineConstants::default());
        let bytes = 32.0 * 8192.0 * 2.0;
        let tp8 = r(8).allreduce_us(32.0, 8.0);
        assert!((tp8 - (4.3 + 2.0 * 7.0 / 8.0 * bytes / (450e9 * 0.74) * 1e6)).abs() < 1e-9, "{tp8}");
        let tp16 = r(16).allreduce_us(32.0, 16.0);
        let expect16 = 6.6 + 28.0 * 0.47 * 1.8 + 2.0 * 2.7 + 2.0 * 15.0 / 16.0 * bytes / (400e9 * 0.74) * 1e6;
        assert!((tp16 - expect16).abs() < 1e-9, "{tp16} {expect16}");
        let tp32 = r(32).allreduce_us(32.0, 32.0);
        let expect32 = 6.6 + 56.0 * 0.47 * 1.8 + 6.0 * 2.7 + 2.0 * 31.0 / 32.0 * bytes / (400e9 * 0.74) * 1e6;
        assert!((tp32 - expect32).abs() < 1e-9, "{tp32} {expect32}");
        assert!(tp16 > 5.0 * tp8 && tp32 > 1.5 * tp16, "{tp8} {tp16} {tp32}");
        // 160 all-reduces a step: a decode step is no faster at TP16 than at
        // TP8, though each GPU streams half the weights.
        let batch = decode(32, 1000);
        let (s8, s16, s32) = (r(8).step_time_us(&batch), r(16).step_time_us(&batch), r(32).step_time_us(&batch));
        assert!(s16 > s8 && s32 > s16, "{s8} {s16} {s32}");
        // A 64 MiB message is bandwidth-bound: the network's 400 GB/s a node
        // against NVLink's 450 a GPU.
        let big = 4096.0 * 8192.0;
        let latency16 = 6.6 + 28.0 * 0.47 * 1.8 + 2.0 * 2.7;
        let ratio = (r(16).allreduce_us(big, 16.0) - latency16) / (r(8).allreduce_us(big, 8.0) - 4.3);
        // (15/16) / (7/8) of the bytes a GPU, at 450/400 of the time a byte.
        assert!((ratio - 15.0 / 14.0 * 450.0 / 400.0).abs() < 1e-9, "{ratio}");
    }

    #[test]
    fn fp8_and_moe_are_priced() {
        let h100 = hardware::lookup("H100").unwrap();
        let batch = decode(32, 500);
        let bf16 = Roofline::new(&model("Llama-3.1-70B"), &h100, 4, 2, false, RooflineConstants::default())
            .step_time_us(&batch);
        let fp8 = Roofline::new(&model("Llama-3.1-70B"), &h100, 4, 1, true, RooflineConstants::default())
            .step_time_us(&batch);
        assert!(fp8 < bf16);
        let moe = Roofline::new(&model("Qwen3-30B-A3B"), &h100, 1, 2, false, RooflineConstants::default());
        assert!(moe.step_time_us(&decode(1, 100)) < moe.step_time_us(&decode(64, 100)));
    }

    #[test]
    fn expert_parallel_ranks_share_the_experts_and_wait_for_each_other() {
        let h100 = hardware::lookup("H100").unwrap();
        let tp1 = Roofline::new(&model("Qwen3-30B-A3B"), &h100, 1, 2, false, RooflineConstants::default());
        let ep2 = tp1.clone().with_expert_parallel(2);
        let batch = decode(64, 1000);
        // One rank streams half the touched experts' weights.
        assert!(ep2.step_time_us(&batch) < tp1.step_time_us(&batch));
        // In lockstep the MoE layers see both ranks' tokens and pay the
        // collective: an idle partner (a one-token dummy) costs a little, a
        // busy one more, and both ranks' steps last the same either way.
        let empty = StepBatch::default();
        let alone = ep2.lockstep_time_us(&[&batch, &empty]);
        let both = ep2.lockstep_time_us(&[&batch, &batch]);
        assert!(alone > ep2.step_time_us(&batch), "{alone}");
        assert!(both > alone, "{both} {alone}");
        assert_eq!(ep2.lockstep_time_us(&[&empty, &batch]), alone);
        // A dense model is unchanged by it.
        let dense = Roofline::new(&model("Llama-2-7b"), &h100, 1, 2, false, RooflineConstants::default());
        assert_eq!(dense.clone().with_expert_parallel(4).step_time_us(&batch), dense.step_time_us(&batch));
    }
}
