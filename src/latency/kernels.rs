//! Measured-kernel model: a step costs what vLLM's own kernels measured on
//! the GPU for the shapes the step runs (BF16 or FP8 GEMMs by m, n, k; the
//! fused MoE kernel by tokens for the expert shapes measured; FlashAttention
//! prefill and decode by batch and length; custom all-reduce by message size
//! and TP), interpolated between measured points (see [`super::kernel_tables`]),
//! plus the CPU time of a step that no kernel table holds. Layers are
//! identical, so one layer is priced and multiplied.
//!
//! A step has two sides (vLLM's engine core and its GPU workers): the CPU
//! schedules the batch, prepares its inputs, launches the kernels and
//! processes the sampled tokens; the GPU runs the kernels. Without async
//! scheduling they take turns, and a step lasts their sum. With it (vLLM's
//! default from 0.14, vllm-project/vllm#27614), step N+1 is scheduled and
//! its inputs prepared while the GPU runs step N, and N's outputs are
//! processed while N+1 runs: the GPU waits only when the CPU side is the
//! longer, and a step lasts the longer of the two.
//!
//! The few constants measurement cannot give (the GPU's time per step and
//! per sequence outside the measured kernels, the CPU side per step and per
//! scheduled sequence, the front end's time per request, and a scale on the
//! GEMM and attention tables for an engine version other than the one
//! measured) are fitted per GPU by `blis-sweep fit` on real runs and embedded
//! (`kernels/<gpu>.constants.yaml`): the CPU side on runs without async
//! scheduling, where it shows, the rest on runs with it, where it hides.

use std::sync::Arc;

use super::batch::{LatencyModel, StepBatch};
use super::kernel_tables::{self, AttentionFit, AttentionKind, GemmDtype, KernelTables, MoeDtype, MoeLine};
use crate::arch::{Attention, Dtype, Gpu, ModelArch, MoeRouting};

/// The kernels model's tunable constants.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelConstants {
    /// GPU time per engine step outside the measured kernels (embedding,
    /// input preparation and sampling kernels, the gaps between CUDA graph
    /// pieces), µs.
    pub step_overhead_us: f64,
    /// Further GPU time per sequence scheduled in a step (per-sequence
    /// metadata, the KV-cache write, the sampler's softmax and draw; its
    /// top-k/top-p sort is priced apart, see `per_sequence_gpu_us`), µs.
    pub per_sequence_us: f64,
    /// The CPU side of a step (vLLM's schedule, the step's broadcast to the
    /// workers, their input preparation, update_from_output), µs, as
    /// measured on vLLM's own objects by scripts/vllm-host-cost; hidden
    /// behind the GPU under async scheduling unless it is the longer (see
    /// the module docs and `latency::overlap`).
    #[serde(default)]
    pub cpu_step_us: f64,
    /// Further CPU time per sequence scheduled in a step, µs (measured).
    #[serde(default)]
    pub cpu_per_sequence_us: f64,
    /// Further CPU time per token scheduled in a step, µs (measured).
    #[serde(default)]
    pub cpu_per_token_us: f64,
    /// Multiplier on the three measured CPU terms: from the measuring host
    /// to the real runs' hosts (and the host work it did not drive: kernel
    /// launches, attention metadata, the sampler's setup); fitted.
    #[serde(default = "super::common::one")]
    pub cpu_scale: f64,
    /// Time from a request reaching the server to the engine seeing it (HTTP,
    /// tokenization), µs; part of its TTFT and E2E.
    pub request_overhead_us: f64,
    /// Multiplier on the measured GEMM times.
    pub gemm_scale: f64,
    /// Multiplier on the measured attention times.
    pub attention_scale: f64,
}

impl KernelConstants {
    /// The constants fitted for `gpu` (catalog name), if the tables cover it.
    /// Parsed once per process: every scenario on these GPUs asks, some
    /// twice (the roofline takes the CPU side from it).
    pub fn fitted(gpu: &str) -> Option<KernelConstants> {
        static H100: std::sync::OnceLock<KernelConstants> = std::sync::OnceLock::new();
        match gpu {
            // No real vLLM runs on H200 in ../shared/data: the H100 fit (same
            // host class and vLLM; only the kernels differ, and those are
            // measured per GPU) stands in.
            "H100" | "H200" => Some(*H100.get_or_init(|| {
                crate::yaml::parse(include_str!("kernels/h100.constants.yaml"))
                    .expect("embedded kernel constants parse")
            })),
            // No real per-request vLLM runs on A100 or L40S in ../shared/data
            // to fit on: the H100 fit's host-side constants (step and
            // per-sequence overheads, the CPU side, the front end) stand in,
            // as BLIS's A100/L40S runs used the same vLLM 0.15.1 and client.
            // Its GEMM and attention scales adjusted H100's vLLM 0.24 tables;
            // these GPUs' tables (vLLM 0.14.0) are taken as measured.
            // Blackwell (B200, GB200, B300, GB300): aiconfigurator's tables were measured with the
            // same vLLM (0.24.0) and harness as H100's, and no real vLLM run
            // on them is in ../shared/data per request: the H100 fit, scales
            // included, stands in.
            "B200" | "GB200" | "B300" | "GB300" => KernelConstants::fitted("H100"),
            "A100-80G" | "L40S" => {
                Some(KernelConstants { gemm_scale: 1.0, attention_scale: 1.0, ..KernelConstants::fitted("H100")? })
            }
            _ => None,
        }
    }

    /// Checks every constant is finite and in range; the first bad one's name.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("step_overhead_us", self.step_overhead_us),
            ("per_sequence_us", self.per_sequence_us),
            ("cpu_step_us", self.cpu_step_us),
            ("cpu_per_sequence_us", self.cpu_per_sequence_us),
            ("cpu_per_token_us", self.cpu_per_token_us),
            ("request_overhead_us", self.request_overhead_us),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name}: {v} must be a non-negative number of microseconds"));
            }
        }
        for (name, v) in
            [("gemm_scale", self.gemm_scale), ("attention_scale", self.attention_scale), ("cpu_scale", self.cpu_scale)]
        {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name}: {v} must be a positive factor"));
            }
        }
        Ok(())
    }
}

/// Why a deployment cannot be priced from the kernel tables.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelsError {
    /// No tables for this GPU.
    #[error("no measured kernel tables for {0}; measured: {list}", list = kernel_tables::MEASURED_GPUS.join(", "))]
    Gpu(String),
    /// No attention kernel was measured for this head size.
    #[error("no measured attention kernel with head_dim {0}")]
    HeadDim(u64),
    /// No all-reduce was measured at this TP degree.
    #[error("no measured all-reduce for tp {0}; measured: {1:?}")]
    Tp(u64, Vec<u64>),
    /// The TP group spans nodes: the measured all-reduce is vLLM's custom
    /// all-reduce, which works within one NVLink domain only.
    #[error(
        "no measured all-reduce across nodes: tp {tp} spans {nodes} nodes of {per_node} {gpu}, and the tables hold vLLM's custom all-reduce within one node"
    )]
    InterNode {
        /// The TP degree.
        tp: u64,
        /// Nodes it spans.
        nodes: u64,
        /// GPUs of one node.
        per_node: u64,
        /// The GPU.
        gpu: String,
    },
    /// Something the tables hold no kernel for.
    #[error("{0}")]
    Unmeasured(&'static str),
    /// The GPU's tables hold no GEMMs of this precision (A100 and L40S:
    /// BF16 only).
    #[error("no measured {dtype} GEMMs on {gpu}: its tables hold BF16 only")]
    Precision {
        /// The GPU.
        gpu: String,
        /// The weights' precision.
        dtype: Dtype,
    },
}

/// Whose measured FP8 GEMMs price FP8 linear layers: the vLLM release a run
/// used, for the two tables aiconfigurator measured (0.14's `vllm_default`
/// FP8 GEMMs take 1.2-2× the time of 0.24's CUTLASS ones at the shapes of a
/// 70B model; median ratio 0.613, ../shared/data/aiconfigurator-vllm-a100-l40s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fp8GemmRelease {
    /// vLLM 0.14.0's (H100 only): for runs on releases before 0.20.
    Vllm014,
    /// vLLM 0.24.0's (the default).
    #[default]
    Vllm024,
}

impl std::fmt::Display for Fp8GemmRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fp8GemmRelease::Vllm014 => "vLLM 0.14",
            Fp8GemmRelease::Vllm024 => "vLLM 0.24",
        })
    }
}

impl Fp8GemmRelease {
    /// Whether the tables of `gpu` (catalog name) hold this release's FP8 GEMMs.
    pub fn measured_on(self, gpu: &str) -> bool {
        let dtype = match self {
            Fp8GemmRelease::Vllm014 => GemmDtype::Fp8Vllm014,
            Fp8GemmRelease::Vllm024 => GemmDtype::Fp8,
        };
        kernel_tables::for_gpu(gpu).is_some_and(|t| t.has_gemm(dtype))
    }

    /// `"0.14"` or `"0.24"`.
    pub fn parse(text: &str) -> Result<Fp8GemmRelease, String> {
        match text.trim() {
            "0.14" => Ok(Fp8GemmRelease::Vllm014),
            "0.24" => Ok(Fp8GemmRelease::Vllm024),
            other => Err(format!("`{other}` is not a measured release: 0.14 (H100 only) or 0.24")),
        }
    }
}

/// The measured-kernel latency model for one deployment.
#[derive(Debug, Clone)]
pub struct Kernels {
    tables: Arc<KernelTables>,
    layers: f64,
    hidden: f64,
    /// A layer's GEMMs at each measured m: QKV, O and, for a dense model,
    /// the MLP (see [`KernelTables::gemm_column`]).
    layer_gemms: Arc<[f64]>,
    moe: Option<MoeShape>,
    /// The LM head at each measured m.
    lm_head: Arc<[f64]>,
    tp: u64,
    context: AttentionFit,
    generation: AttentionFit,
    /// Memory bandwidth for the unmeasured elementwise kernels, B/s.
    bandwidth: f64,
    /// Shortest kernel in the GEMM table (m = 1, n = k = 32), µs.
    kernel_floor_us: f64,
    /// Whether the engine overlaps a step's CPU side with the GPU.
    async_scheduling: bool,
    /// vLLM's `enforce_eager`: no CUDA graphs, every kernel launched from the
    /// host each step ([`Kernels::eager_launch_us`]).
    enforce_eager: bool,
    /// The vocabulary every sampling sequence's logits span (the LM head's
    /// output gathered on every TP rank).
    vocab: f64,
    /// Whether sampling runs vLLM's sort-based top-k/top-p path (see
    /// [`super::sort_sampler_us`]).
    sort_sampler: bool,
    c: KernelConstants,
}

#[derive(Debug, Clone)]
struct MoeShape {
    experts: f64,
    top_k: f64,
    routed: Routed,
    /// The router and the shared expert (if any), at each measured m.
    router_and_shared: Arc<[f64]>,
    /// GEMMs in `router_and_shared`: the router, and the shared expert's two.
    router_and_shared_kernels: f64,
}

/// How the routed experts are priced.
#[derive(Debug, Clone)]
enum Routed {
    /// vLLM's fused MoE kernel, measured for this expert shape and TP.
    Fused(MoeLine),
    /// No measurement for the shape (or FP8): each expert the tokens touch
    /// as its own gate-up and down GEMMs (at each measured m), which read the
    /// same weights.
    PerExpert(Arc<[f64]>),
}

/// Elementwise kernels per layer (two RMSNorms, rotary, activation) and
/// the bytes per token and hidden unit they move; not in the kernel tables,
/// so priced at memory bandwidth with the measured efficiency of streaming
/// kernels (see roofline.rs) and never less than the shortest measured kernel.
const ELEMENTWISE_KERNELS_PER_LAYER: f64 = 4.0;
const ELEMENTWISE_BYTES_PER_TOKEN_PER_HIDDEN: f64 = 12.0;

/// Host time to launch kernels without CUDA graphs (vLLM `enforce_eager`),
/// µs: per kernel and per layer. The BLIS registry's
/// `host_launch_per_kernel` (3.2 µs, the residual of two Granite TP8 runs at
/// concurrency 1) and `host_launch_eager_per_layer` (7.0 µs, "conventional
/// 5–10 µs"), both labelled `method: assumed` there
/// (inference-sim/blis-registry@b3789be2,
/// `coefficients/cost-model-host-overheads.yaml`; see
/// `../shared/data/protocols/README.md` §5). Not measured on vLLM V1 and not
/// fitted here.
const EAGER_LAUNCH_US: (f64, f64) = (3.2, 7.0);
impl Kernels {
    /// Whether the tables can price `model` in `weights` on `tp` GPUs of kind
    /// `gpu` with a KV cache of `kv_bytes` an element, and if not, what is
    /// missing.
    pub fn check(model: &ModelArch, gpu: &Gpu, tp: u64, weights: Dtype, kv_bytes: u64) -> Result<(), KernelsError> {
        let tables = kernel_tables::for_gpu(gpu.name).ok_or_else(|| KernelsError::Gpu(gpu.name.to_owned()))?;
        if weights.is_fp8() && !tables.has_gemm(GemmDtype::Fp8) {
            return Err(KernelsError::Precision { gpu: gpu.name.to_owned(), dtype: weights });
        }
        if model.attention != Attention::Grouped {
            return Err(KernelsError::Unmeasured(
                "no measured latent-attention (MLA) kernels: the tables hold FlashAttention with grouped KV heads",
            ));
        }
        if kv_bytes != 2 {
            return Err(KernelsError::Unmeasured(
                "no measured attention kernels over an FP8 KV cache: the tables hold 16-bit KV (kvbf16)",
            ));
        }
        if model.linear.is_some() {
            return Err(KernelsError::Unmeasured(
                "no measured linear-attention (Gated DeltaNet, Mamba) kernels: the tables hold attention and GEMMs only",
            ));
        }
        if model.moe.as_ref().is_some_and(|m| m.packed_experts.is_some()) {
            return Err(KernelsError::Unmeasured(
                "no measured 4-bit MoE kernels (MXFP4 or INT4 experts): the tables hold 16-bit and FP8 MoE",
            ));
        }
        if model.moe.as_ref().is_some_and(|m| m.dense_layers > 0) {
            return Err(KernelsError::Unmeasured(
                "an MoE model with dense layers (first_k_dense_replace, or MoE on every other layer) is priced by the roofline only",
            ));
        }
        if tp > gpu.gpus_per_node {
            let per_node = gpu.gpus_per_node.max(1);
            let nodes = tp.div_ceil(per_node);
            return Err(KernelsError::InterNode { tp, nodes, per_node, gpu: gpu.name.to_owned() });
        }
        if tp > 1 && !tables.has_allreduce(tp) {
            return Err(KernelsError::Tp(tp, tables.allreduce_tps()));
        }
        let heads = model.num_heads / tp;
        let kv_heads = model.num_kv_heads.div_ceil(tp);
        for kind in [AttentionKind::Context, AttentionKind::Generation] {
            tables.fit_attention(kind, heads, kv_heads, model.head_dim).ok_or(KernelsError::HeadDim(model.head_dim))?;
        }
        Ok(())
    }

    /// Prices steps of `model` served in `weights` on `tp` GPUs of kind
    /// `gpu`. FP8 weights run the linear layers on FP8 GEMMs (vLLM keeps the
    /// router and LM head in 16 bits); block-scaled FP8 on the per-tensor
    /// FP8 table too (the measured block-FP8 GEMMs carry a per-call host
    /// overhead a CUDA-graph step does not pay, see
    /// scripts/import-kernel-tables.py) and its experts on the measured
    /// block-FP8 fused MoE.
    pub fn new(
        model: &ModelArch,
        gpu: &Gpu,
        tp: u64,
        weights: Dtype,
        kv_bytes: u64,
        routing: MoeRouting,
        c: KernelConstants,
    ) -> Result<Kernels, KernelsError> {
        Self::new_for_release(model, gpu, tp, weights, kv_bytes, routing, c, Fp8GemmRelease::default())
    }

    /// [`Self::new`] with the FP8 GEMMs of vLLM release `fp8_gemms` (the
    /// 0.14 table exists on H100 only; BF16 GEMMs are the 0.24 table's,
    /// which 0.14's match within ~2 %, see ../shared/data/aiconfigurator-vllm-a100-l40s).
    #[allow(clippy::too_many_arguments)]
    pub fn new_for_release(
        model: &ModelArch,
        gpu: &Gpu,
        tp: u64,
        weights: Dtype,
        kv_bytes: u64,
        routing: MoeRouting,
        c: KernelConstants,
        fp8_gemms: Fp8GemmRelease,
    ) -> Result<Kernels, KernelsError> {
        Self::check(model, gpu, tp, weights, kv_bytes)?;
        let tables = kernel_tables::for_gpu(gpu.name).ok_or_else(|| KernelsError::Gpu(gpu.name.to_owned()))?;
        let fp8 = match fp8_gemms {
            Fp8GemmRelease::Vllm024 => GemmDtype::Fp8,
            Fp8GemmRelease::Vllm014 => GemmDtype::Fp8Vllm014,
        };
        // Only FP8 weights read an FP8 table (`check` has refused FP8 on a
        // GPU without the default one).
        if weights.is_fp8() && !tables.has_gemm(fp8) {
            return Err(KernelsError::Unmeasured("no FP8 GEMMs measured on vLLM 0.14 for this GPU (H100 only)"));
        }
        let (dtype, moe_dtype) = match weights {
            Dtype::Fp16 | Dtype::Bf16 => (GemmDtype::Bf16, Some(MoeDtype::Bf16)),
            // No trustworthy per-tensor FP8 fused MoE was measured: those
            // experts take the block-FP8 fused MoE's line (the same fused
            // kernel over FP8 weights; scales are a rounding error of its
            // traffic), else each expert is priced as FP8 GEMMs. On the real
            // Llama-4-Scout FP8-dynamic runs (per-channel FP8 experts) the
            // per-expert GEMMs, one launch per expert per layer, made ITL
            // +48–61 %; the fused line +0.1–5.8 %.
            Dtype::Fp8 => (fp8, Some(MoeDtype::Fp8Block)),
            Dtype::Fp8Block => (fp8, Some(MoeDtype::Fp8Block)),
        };
        let heads = model.num_heads / tp;
        let kv_heads = model.num_kv_heads.div_ceil(tp);
        let d = model.head_dim;
        let fit = |kind| tables.fit_attention(kind, heads, kv_heads, d).ok_or(KernelsError::HeadDim(d));
        let tpf = tp as f64;
        let hidden = model.hidden_size as f64;
        let sum = |columns: &[Vec<f64>]| -> Arc<[f64]> {
            (0..columns[0].len()).map(|i| columns.iter().map(|c| c[i]).sum()).collect()
        };
        // Gate-up and down projections of an MLP of `inter` columns.
        let mlp =
            |inter: f64| [tables.gemm_column(dtype, 2.0 * inter, hidden), tables.gemm_column(dtype, hidden, inter)];
        let mut layer = vec![
            tables.gemm_column(dtype, ((heads + 2 * kv_heads) * d) as f64, hidden),
            tables.gemm_column(dtype, hidden, (heads * d) as f64),
        ];
        let moe = match &model.moe {
            None => {
                layer.extend(mlp(model.intermediate_size as f64 / tpf));
                None
            }
            Some(m) => {
                let mut router = vec![tables.gemm_column(GemmDtype::Bf16, m.num_experts as f64, hidden)];
                if m.shared_intermediate_size > 0 {
                    router.extend(mlp(m.shared_intermediate_size as f64 / tpf));
                }
                let fused = moe_dtype.and_then(|dt| {
                    let (hidden, inter) = (model.hidden_size, m.expert_intermediate_size);
                    tables.moe_line((dt, routing), hidden, inter, m.top_k, m.num_experts, tp)
                });
                Some(MoeShape {
                    experts: m.num_experts as f64,
                    top_k: m.top_k as f64,
                    routed: match fused {
                        Some(line) => Routed::Fused(line),
                        None => Routed::PerExpert(sum(&mlp(m.expert_intermediate_size as f64 / tpf))),
                    },
                    router_and_shared_kernels: router.len() as f64,
                    router_and_shared: sum(&router),
                })
            }
        };
        Ok(Kernels {
            context: fit(AttentionKind::Context)?,
            generation: fit(AttentionKind::Generation)?,
            kernel_floor_us: tables.gemm_us(1.0, 32.0, 32.0),
            layer_gemms: sum(&layer),
            lm_head: sum(&[tables.gemm_column(GemmDtype::Bf16, model.vocab_size as f64 / tpf, hidden)]),
            tables,
            layers: model.num_layers as f64,
            hidden,
            moe,
            tp,
            bandwidth: gpu.memory_bandwidth,
            async_scheduling: true,
            enforce_eager: false,
            vocab: model.vocab_size as f64,
            sort_sampler: false,
            c,
        })
    }

    /// The same model for an engine that runs without CUDA graphs (vLLM
    /// `enforce_eager`; off unless set).
    pub fn with_enforce_eager(self, enforce_eager: bool) -> Kernels {
        Kernels { enforce_eager, ..self }
    }

    /// The host time to launch one step's kernels one by one (no CUDA graph),
    /// µs: [`EAGER_LAUNCH_US`] for each kernel this model prices in a layer
    /// — the GEMMs (QKV, O, and the MLP's two, or the router, shared expert
    /// and the fused MoE op as one, or two a touched expert when priced per
    /// expert), one attention kernel for the prefill chunks and one for the
    /// decodes, the two all-reduces under TP, the elementwise kernels — and
    /// per layer, then the LM head. They overlap the GPU (see `step_time_us`).
    fn eager_launch_us(&self, batch: &StepBatch, m: f64) -> f64 {
        let gemms = match &self.moe {
            None => 4.0,
            Some(e) => {
                let routed = match &e.routed {
                    Routed::Fused(_) => 1.0,
                    Routed::PerExpert(_) => 2.0 * e.experts * (1.0 - (1.0 - e.top_k / e.experts).powf(m)),
                };
                2.0 + e.router_and_shared_kernels + routed
            }
        };
        let attention = f64::from(u8::from(!batch.prefills.is_empty()) + u8::from(batch.decodes > 0));
        let allreduce = if self.tp > 1 { 2.0 } else { 0.0 };
        let per_layer = gemms + attention + allreduce + ELEMENTWISE_KERNELS_PER_LAYER;
        let (per_kernel, per_layer_us) = EAGER_LAUNCH_US;
        self.layers * (per_layer * per_kernel + per_layer_us) + per_kernel
    }

    /// The same model for requests that sample through vLLM's sort-based
    /// top-k/top-p path (off unless set; see [`super::sort_sampler_us`]).
    pub fn with_sort_sampler(self, sort_sampler: bool) -> Kernels {
        Kernels { sort_sampler, ..self }
    }

    /// The per-sequence GPU work outside the kernel tables that neither TP
    /// nor the batch's weights amortise: where the requests sample with
    /// top-k/top-p on a release that sorts, the sampler over the full
    /// vocabulary on every rank, µs per step. (The KV-cache write,
    /// `reshape_and_cache_flash`, was priced here too — its bytes at
    /// bandwidth, at least the tables' shortest kernel a layer — and dropped:
    /// it moved the one-model held-out fits 1–2.5 points further off; see
    /// README, Accuracy.)
    fn per_sequence_gpu_us(&self, sampled: f64) -> f64 {
        if self.sort_sampler { super::common::sort_sampler_us(sampled, self.vocab) } else { 0.0 }
    }

    /// The same model for an engine with or without async scheduling (on
    /// unless set).
    pub fn with_async_scheduling(self, async_scheduling: bool) -> Kernels {
        Kernels { async_scheduling, ..self }
    }

    /// The constants in use.
    pub fn constants(&self) -> &KernelConstants {
        &self.c
    }

    /// The same model with other constants.
    pub fn with_constants(&self, c: KernelConstants) -> Kernels {
        Kernels { c, ..self.clone() }
    }

    /// The MoE block: the router (and shared expert), then the routed experts.
    fn moe(&self, m: f64, e: &MoeShape) -> f64 {
        let routed = match &e.routed {
            Routed::Fused(line) => self.tables.moe_us(*line, m),
            Routed::PerExpert(expert) => {
                let touched = e.experts * (1.0 - (1.0 - e.top_k / e.experts).powf(m));
                let per_expert = (m * e.top_k / touched).max(1.0);
                touched * self.tables.at_m(expert, per_expert)
            }
        };
        self.tables.at_m(&e.router_and_shared, m) + routed
    }

    fn context_attention(&self, batch: &StepBatch) -> f64 {
        let t = |len: f64| self.tables.attention_us(AttentionKind::Context, self.context, 1.0, len);
        // A chunk of `new` tokens after `ctx` cached ones does the causal work
        // of a `ctx + new` prompt less that of a `ctx` prompt, and at least
        // what a `new`-token prompt costs.
        let (mut sum, mut longest) = (0.0f64, 0.0f64);
        for c in &batch.prefills {
            let (new, ctx) = (f64::from(c.new_tokens), f64::from(c.context_tokens));
            let cost = if ctx > 0.0 { t(new).max(t(ctx + new) - t(ctx)) } else { t(new) };
            sum += cost;
            longest = longest.max(cost);
        }
        // One varlen kernel runs every chunk: one launch, not one per chunk.
        let chunks = batch.prefills.len() as f64;
        (sum - (chunks - 1.0).max(0.0) * t(1.0)).max(longest)
    }

    fn generation_attention(&self, batch: &StepBatch) -> f64 {
        if batch.decodes == 0 {
            return 0.0;
        }
        let n = f64::from(batch.decodes);
        // Each decode reads its context once and attends over it plus its
        // new tokens (1 + its drafts: the drafts lengthen the mean sequence).
        let mean_len = (batch.decode_context_tokens as f64 + f64::from(batch.spec_tokens)) / n + 1.0;
        self.tables.attention_us(AttentionKind::Generation, self.generation, n, mean_len)
    }
}

impl LatencyModel for Kernels {
    fn request_overhead_us(&self) -> u64 {
        self.c.request_overhead_us.round() as u64
    }

    fn step_time_us(&self, batch: &StepBatch) -> u64 {
        if batch.is_empty() {
            return 1;
        }
        let prefill_tokens: f64 = batch.prefills.iter().map(|c| f64::from(c.new_tokens)).sum();
        // Speculative drafts are verified as tokens of their decodes, with
        // logits at every position.
        let spec = f64::from(batch.spec_tokens);
        let m = prefill_tokens + f64::from(batch.decodes) + spec;
        let sampled = f64::from(batch.decodes) + spec + batch.prefills.iter().filter(|c| c.samples).count() as f64;
        let mut gemms = self.tables.at_m(&self.layer_gemms, m);
        if let Some(e) = &self.moe {
            gemms += self.moe(m, e);
        }
        let attention = if batch.prefills.is_empty() { 0.0 } else { self.context_attention(batch) }
            + self.generation_attention(batch);
        let allreduce = if self.tp > 1 { 2.0 * self.tables.allreduce_us(self.tp, m * self.hidden) } else { 0.0 };
        let elementwise_bytes = m * self.hidden * ELEMENTWISE_BYTES_PER_TOKEN_PER_HIDDEN;
        let elementwise = (elementwise_bytes / (self.bandwidth * super::common::MEMORY_EFFICIENCY) * 1e6)
            .max(ELEMENTWISE_KERNELS_PER_LAYER * self.kernel_floor_us);
        let layer = gemms * self.c.gemm_scale + attention * self.c.attention_scale + allreduce + elementwise;
        let lm_head = if sampled > 0.0 { self.tables.at_m(&self.lm_head, sampled) * self.c.gemm_scale } else { 0.0 };
        let sequences = batch.prefills.len() as f64 + f64::from(batch.decodes);
        let gpu = self.layers * layer
            + lm_head
            + self.per_sequence_gpu_us(sampled)
            + self.c.step_overhead_us
            + self.c.per_sequence_us * sequences;
        let c = &self.c;
        let cpu =
            super::common::cpu_side_us(c.cpu_step_us, c.cpu_per_sequence_us, c.cpu_per_token_us, c.cpu_scale, batch);
        // Without CUDA graphs the host launches every kernel itself, but
        // launches are asynchronous: the host queues kernel i + 1 while the
        // GPU runs kernel i, so the forward pass lasts the longer of the
        // GPU's kernels and the host's launches, not their sum.
        let gpu = if self.enforce_eager { gpu.max(self.eager_launch_us(batch, m)) } else { gpu };
        super::common::overlap(gpu, cpu, self.async_scheduling).round().max(1.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{catalog, hardware};
    use crate::latency::PrefillChunk;
    use crate::latency::test_support::{decode, model};

    fn bare() -> KernelConstants {
        KernelConstants {
            step_overhead_us: 0.0,
            per_sequence_us: 0.0,
            cpu_step_us: 0.0,
            cpu_per_sequence_us: 0.0,
            cpu_per_token_us: 0.0,
            cpu_scale: 1.0,
            request_overhead_us: 0.0,
            gemm_scale: 1.0,
            attention_scale: 1.0,
        }
    }

    fn kernels(id: &str, gpu: &str, tp: u64) -> Kernels {
        Kernels::new(&model(id), &hardware::lookup(gpu).unwrap(), tp, Dtype::Bf16, 2, MoeRouting::Skewed, bare())
            .unwrap()
    }

    #[test]
    fn a_lone_decode_is_the_sum_of_its_measured_kernels() {
        let k = kernels("Llama-2-7b", "H100", 1);
        let t = &k.tables;
        let gemms = t.gemm_us(1.0, 12288.0, 4096.0)
            + t.gemm_us(1.0, 4096.0, 4096.0)
            + t.gemm_us(1.0, 22016.0, 4096.0)
            + t.gemm_us(1.0, 4096.0, 11008.0);
        let attention = t.attention_us(AttentionKind::Generation, k.generation, 1.0, 101.0);
        let elementwise = 4.0 * t.gemm_us(1.0, 32.0, 32.0);
        let expect = 32.0 * (gemms + attention + elementwise) + t.gemm_us(1.0, 32000.0, 4096.0);
        assert_eq!(k.step_time_us(&decode(1, 100)), expect.round() as u64);
        // Streaming 13 GB of weights at a few TB/s: 4–6 ms.
        assert!((4_000.0..6_000.0).contains(&expect), "{expect}");
    }

    /// The sort-based sampler, by hand from vllm-project/vllm#32558's
    /// 3.812 ms for 256 rows × 131,072 logits: 64 rows of Llama-3.1-8B's
    /// 128,256 logits cost 64 × 128,256 / (256 × 131,072) × 3,812 =
    /// 932.5 µs, 8 rows 116.6 µs; on every TP rank alike. A step pays it
    /// only with the sampler on.
    #[test]
    fn the_sort_sampler_costs_its_logits() {
        assert!((super::super::common::sort_sampler_us(256.0, 131_072.0) - 3812.0).abs() < 1e-9);
        assert!((super::super::common::sort_sampler_us(64.0, 128_256.0) - 932.53).abs() < 0.01);
        assert!((super::super::common::sort_sampler_us(8.0, 128_256.0) - 116.57).abs() < 0.01);
        for (n, by_hand) in [(64u32, 932.53), (8, 116.57)] {
            for tp in [1, 2] {
                let k = kernels("Llama-3.1-8B", "H100", tp);
                let batch = decode(n, 500);
                let plain = k.step_time_us(&batch) as f64;
                let sorted = k.clone().with_sort_sampler(true).step_time_us(&batch) as f64;
                assert!((sorted - plain - by_hand).abs() <= 1.0, "tp{tp} n{n}: {plain} → {sorted}");
            }
        }
    }

    #[test]
    fn constants_add_and_scale() {
        let k = kernels("Llama-2-7b", "H100", 1);
        let batch = decode(8, 500);
        let base = k.step_time_us(&batch);
        let c = KernelConstants { step_overhead_us: 300.0, per_sequence_us: 10.0, ..bare() };
        assert_eq!(k.with_constants(c).step_time_us(&batch), base + 380);
        let slower = KernelConstants { gemm_scale: 2.0, ..bare() };
        assert!(k.with_constants(slower).step_time_us(&batch) > base * 3 / 2);
    }

    /// A lone decode of Llama-2-7b on H100: its kernels (hand-summed in
    /// `a_lone_decode_is_the_sum_of_its_measured_kernels`) plus 100 µs of
    /// GPU time outside them make the GPU side; 300 µs per step and 20 µs per
    /// sequence the CPU side. Taking turns, a step is their sum; overlapped,
    /// the longer: the GPU while the CPU side is shorter, the CPU side once
    /// 256 sequences make it the longer.
    #[test]
    fn async_scheduling_hides_the_cpu_side_behind_the_gpu() {
        let k = kernels("Llama-2-7b", "H100", 1);
        let gpu_only = |batch: &StepBatch| {
            let bare = k.with_constants(KernelConstants { step_overhead_us: 100.0, ..bare() });
            bare.step_time_us(batch)
        };
        let c = KernelConstants { step_overhead_us: 100.0, cpu_step_us: 300.0, cpu_per_sequence_us: 20.0, ..bare() };
        let sync = k.with_constants(c).with_async_scheduling(false);
        let overlapped = k.with_constants(c).with_async_scheduling(true);
        let one = decode(1, 100);
        let gpu = gpu_only(&one);
        assert!((4_000..6_000).contains(&gpu), "{gpu}");
        assert_eq!(sync.step_time_us(&one), gpu + 320);
        assert_eq!(overlapped.step_time_us(&one), gpu);
        // 256 sequences: 300 + 256 × 20 = 5,420 µs of CPU against a GPU side
        // of a few ms more than one decode's weights.
        let many = decode(256, 100);
        let gpu = gpu_only(&many);
        assert_eq!(sync.step_time_us(&many), gpu + 5_420);
        assert_eq!(overlapped.step_time_us(&many), gpu.max(5_420));
        let cpu_bound = k.with_constants(KernelConstants { cpu_per_sequence_us: 80.0, ..c });
        assert!(gpu < 300 + 256 * 80, "{gpu}");
        assert_eq!(cpu_bound.step_time_us(&many), 300 + 256 * 80);
    }

    /// Without CUDA graphs every kernel the model prices is launched from
    /// the host: Llama-3.1-70B at TP4 decoding launches 4 GEMMs, one
    /// attention kernel, 2 all-reduces and 4 elementwise kernels a layer, at
    /// 3.2 µs each plus 7 µs a layer, over 80 layers, then the LM head:
    /// 3,379.2 µs of launches a step. The host queues them while the GPU
    /// runs the kernels before, so they hide behind the GPU's ~11 ms; with
    /// the GEMMs and attention priced at nothing (scales 0) the GPU's part
    /// is shorter than the launches, and the forward pass lasts as long as
    /// the launches.
    #[test]
    fn eager_mode_launches_overlap_the_gpu() {
        let k = kernels("Llama-3.1-70B", "H100", 4);
        let one = decode(8, 300);
        let eager = k.clone().with_async_scheduling(false).with_enforce_eager(true);
        assert_eq!(eager.eager_launch_us(&one, 8.0), 80.0 * (11.0 * 3.2 + 7.0) + 3.2);
        assert_eq!(eager.step_time_us(&one), k.clone().with_async_scheduling(false).step_time_us(&one));
        let light = KernelConstants { gemm_scale: 0.0, attention_scale: 0.0, ..bare() };
        let graphs = k.clone().with_constants(light).with_async_scheduling(false).step_time_us(&one);
        let eager_light = eager.clone().with_constants(light).step_time_us(&one);
        assert!(graphs < 3_379, "{graphs}");
        assert_eq!(eager_light, 3_379);
        // A mixed step launches a second attention kernel; an MoE layer its
        // router and the measured fused MoE op (one) instead of the MLP's
        // two GEMMs: Mixtral's 32 layers launch 11 a layer too.
        let mixed = StepBatch {
            prefills: vec![PrefillChunk { new_tokens: 100, context_tokens: 0, samples: true }],
            ..one.clone()
        };
        let second_attention = eager.eager_launch_us(&mixed, 108.0) - eager.eager_launch_us(&one, 8.0);
        assert!((second_attention - 80.0 * 3.2).abs() < 1e-9, "{second_attention}");
        let moe = kernels("Mixtral-8x7B", "H100", 4).with_enforce_eager(true);
        let Some(e) = &moe.moe else { panic!("Mixtral is MoE") };
        assert!(matches!(e.routed, Routed::Fused(_)));
        assert!((moe.eager_launch_us(&one, 8.0) - (32.0 * (11.0 * 3.2 + 7.0) + 3.2)).abs() < 1e-9);
    }

    /// The measured CPU terms, by hand: 100 µs a step, 10 µs a scheduled
    /// sequence, 0.5 µs a scheduled token, times a scale of 2. Eight decodes
    /// and a 1,000-token prefill chunk: 9 sequences and 1,008 tokens, so
    /// 2 × (100 + 90 + 504) = 1,388 µs, added to the GPU side without async
    /// scheduling; eight decodes alone: 2 × (100 + 80 + 4) = 368 µs.
    #[test]
    fn the_cpu_side_prices_sequences_and_tokens_times_its_scale() {
        let k = kernels("Llama-2-7b", "H100", 1);
        let mut batch = decode(8, 100);
        let decodes_only = batch.clone();
        batch.prefills.push(PrefillChunk { new_tokens: 1000, context_tokens: 0, samples: true });
        let c = KernelConstants {
            cpu_step_us: 100.0,
            cpu_per_sequence_us: 10.0,
            cpu_per_token_us: 0.5,
            cpu_scale: 2.0,
            ..bare()
        };
        let sync = k.with_constants(c).with_async_scheduling(false);
        assert_eq!(sync.step_time_us(&batch), k.step_time_us(&batch) + 1_388);
        assert_eq!(sync.step_time_us(&decodes_only), k.step_time_us(&decodes_only) + 368);
        // A scale of 1 leaves the measured terms as they are.
        let unscaled = k.with_constants(KernelConstants { cpu_scale: 1.0, ..c }).with_async_scheduling(false);
        assert_eq!(unscaled.step_time_us(&batch), k.step_time_us(&batch) + 694);
    }

    #[test]
    fn the_cpu_terms_are_checked() {
        assert_eq!(
            KernelConstants { cpu_scale: 0.0, ..bare() }.validate().unwrap_err(),
            "cpu_scale: 0 must be a positive factor"
        );
        assert_eq!(
            KernelConstants { cpu_per_token_us: -1.0, ..bare() }.validate().unwrap_err(),
            "cpu_per_token_us: -1 must be a non-negative number of microseconds"
        );
        // Older constants files (before the per-token term and the scale)
        // still read: no per-token cost, a scale of 1.
        let old: KernelConstants = crate::yaml::parse(
            "step_overhead_us: 1\nper_sequence_us: 0\ncpu_step_us: 5\nrequest_overhead_us: 0\ngemm_scale: 1\nattention_scale: 1\n",
        )
        .unwrap();
        assert_eq!((old.cpu_per_token_us, old.cpu_scale), (0.0, 1.0));
    }

    #[test]
    fn chunked_prefill_costs_the_marginal_attention() {
        let k = kernels("CodeLlama-34b", "H100", 2);
        let chunk = |new, ctx| StepBatch {
            prefills: vec![PrefillChunk { new_tokens: new, context_tokens: ctx, samples: false }],
            ..StepBatch::default()
        };
        let whole = k.context_attention(&chunk(2048, 0));
        let second_half = k.context_attention(&chunk(1024, 1024));
        let first_half = k.context_attention(&chunk(1024, 0));
        assert!(second_half > first_half, "{first_half} {second_half}");
        assert!(second_half < whole);
        assert!(k.step_time_us(&chunk(2048, 0)) > k.step_time_us(&decode(64, 1000)));
    }

    #[test]
    fn tp_moe_and_h200_are_priced() {
        let tp1 = kernels("CodeLlama-34b", "H100", 1).step_time_us(&decode(32, 600));
        let tp2 = kernels("CodeLlama-34b", "H100", 2).step_time_us(&decode(32, 600));
        assert!(tp2 < tp1 * 3 / 4, "{tp1} {tp2}");
        let h200 = kernels("CodeLlama-34b", "H200", 2).step_time_us(&decode(32, 600));
        assert!(h200 < tp2, "{tp2} {h200}");
        let moe = kernels("Qwen3-30B-A3B", "H100", 1);
        assert!(moe.step_time_us(&decode(1, 100)) < moe.step_time_us(&decode(64, 100)));
        assert!(kernels("Qwen2.5-7B", "H100", 1).step_time_us(&decode(4, 100)) > 0);
    }

    #[test]
    fn vllm_0_14_fp8_gemms_price_fp8_layers_slower_and_only_on_h100() {
        let m = model("Llama-3.1-70B");
        let (h100, h200) = (hardware::lookup("H100").unwrap(), hardware::lookup("H200").unwrap());
        let build =
            |g: &Gpu, dtype, release| Kernels::new_for_release(&m, g, 4, dtype, 2, MoeRouting::Skewed, bare(), release);
        // 256 decodes: m = 256, where 0.14's FP8 GEMMs are 1.3-1.7x 0.24's.
        let step = |k: Kernels| k.step_time_us(&decode(256, 500));
        let new = step(build(&h100, Dtype::Fp8, Fp8GemmRelease::Vllm024).unwrap());
        let old = step(build(&h100, Dtype::Fp8, Fp8GemmRelease::Vllm014).unwrap());
        assert!(old > new * 11 / 10, "{old} {new}");
        // BF16 layers do not move.
        let bf16 = |r| step(build(&h100, Dtype::Bf16, r).unwrap());
        assert_eq!(bf16(Fp8GemmRelease::Vllm014), bf16(Fp8GemmRelease::Vllm024));
        assert!(build(&h200, Dtype::Fp8, Fp8GemmRelease::Vllm014).is_err());
        assert_eq!(Fp8GemmRelease::parse("0.14"), Ok(Fp8GemmRelease::Vllm014));
        assert!(Fp8GemmRelease::parse("0.12").is_err());
    }

    #[test]
    fn fp8_gemms_and_fused_moe_price_their_layers() {
        let h100 = hardware::lookup("H100").unwrap();
        let m = model("Llama-3.1-70B");
        let bf16 = Kernels::new(&m, &h100, 4, Dtype::Bf16, 2, MoeRouting::Skewed, bare())
            .unwrap()
            .step_time_us(&decode(32, 500));
        let fp8 = Kernels::new(&m, &h100, 4, Dtype::Fp8, 2, MoeRouting::Skewed, bare())
            .unwrap()
            .step_time_us(&decode(32, 500));
        // Half the weight bytes to stream: FP8 decode is well under BF16's.
        assert!(fp8 * 10 < bf16 * 8, "{bf16} {fp8}");
        // Mixtral-8x7B on one GPU: the measured fused MoE kernel, 256.3 µs a
        // layer at one token, against per-expert GEMMs in FP8.
        let k = Kernels::new(&model("Mixtral-8x7B"), &h100, 1, Dtype::Bf16, 2, MoeRouting::Skewed, bare()).unwrap();
        let Some(e) = &k.moe else { panic!("Mixtral is MoE") };
        assert!(matches!(e.routed, Routed::Fused(_)));
        assert!((k.moe(1.0, e) - k.tables.at_m(&e.router_and_shared, 1.0) - 256.3).abs() < 1e-9);
        // Per-tensor FP8 experts take the block-FP8 fused line where it has
        // the shape (Mixtral-8x7B's, Llama-4-Scout's 16 × 5120 × 8192 at
        // TP 2), else per-expert FP8 GEMMs.
        let k8 = Kernels::new(&model("Mixtral-8x7B"), &h100, 1, Dtype::Fp8, 2, MoeRouting::Skewed, bare()).unwrap();
        assert!(matches!(k8.moe.as_ref().unwrap().routed, Routed::Fused(_)));
        // MiniMax-M2.5's block-FP8 experts at TP 8 on H200, where the table
        // stops at TP 4: TP 4's fused line at half the time (each GPU holds
        // half as much of every expert).
        let minimax = model("MiniMax-M2.5");
        let h200 = hardware::lookup("H200").unwrap();
        let at = |tp| Kernels::new(&minimax, &h200, tp, Dtype::Fp8Block, 2, MoeRouting::Skewed, bare()).unwrap();
        let (k4, k8) = (at(4), at(8));
        let (e4, e8) = (k4.moe.as_ref().unwrap(), k8.moe.as_ref().unwrap());
        let (Routed::Fused(l4), Routed::Fused(l8)) = (&e4.routed, &e8.routed) else { panic!("fused at TP 4 and 8") };
        assert!((k8.tables.moe_us(*l8, 64.0) * 2.0 - k4.tables.moe_us(*l4, 64.0)).abs() < 1e-9);
        let scout = model("Llama-4-Scout-17B-16E-Instruct");
        let k8 = Kernels::new(&scout, &h100, 2, Dtype::Fp8, 2, MoeRouting::Skewed, bare()).unwrap();
        assert!(matches!(k8.moe.as_ref().unwrap().routed, Routed::Fused(_)));
        // Qwen3-235B-A22B's block-FP8 experts on two H200s: the measured
        // block-FP8 fused MoE, 337.3 µs a layer at 128 tokens.
        let h200 = hardware::lookup("H200").unwrap();
        let k =
            Kernels::new(&model("Qwen3-235B-A22B"), &h200, 2, Dtype::Fp8Block, 2, MoeRouting::Skewed, bare()).unwrap();
        let Some(e) = &k.moe else { panic!("Qwen3-235B-A22B is MoE") };
        assert!(matches!(e.routed, Routed::Fused(_)));
        assert!((k.moe(128.0, e) - k.tables.at_m(&e.router_and_shared, 128.0) - 337.3).abs() < 1e-9);
    }

    #[test]
    fn uncovered_deployments_are_refused() {
        let m = model("Llama-3.1-8B");
        let b200 = hardware::lookup("RTX4090").unwrap();
        assert_eq!(
            Kernels::new(&m, &b200, 1, Dtype::Bf16, 2, MoeRouting::Skewed, bare()).unwrap_err(),
            KernelsError::Gpu("RTX4090".into())
        );
        // A100 and L40S were measured in BF16 only.
        for gpu in ["A100-80G", "L40S"] {
            let g = hardware::lookup(gpu).unwrap();
            for dtype in [Dtype::Fp8, Dtype::Fp8Block] {
                let e = Kernels::new(&m, &g, 1, dtype, 2, MoeRouting::Skewed, bare()).unwrap_err();
                assert_eq!(e.to_string(), format!("no measured {dtype} GEMMs on {gpu}: its tables hold BF16 only"));
            }
        }
        let h100 = hardware::lookup("H100").unwrap();
        assert!(matches!(
            Kernels::new(&m, &h100, 6, Dtype::Bf16, 2, MoeRouting::Skewed, bare()),
            Err(KernelsError::Tp(6, _))
        ));
        // The measured all-reduce is vLLM's custom one, within a node.
        let e =
            Kernels::new(&model("Llama-3.1-70B"), &h100, 16, Dtype::Bf16, 2, MoeRouting::Skewed, bare()).unwrap_err();
        assert_eq!(e, KernelsError::InterNode { tp: 16, nodes: 2, per_node: 8, gpu: "H100".into() });
        assert!(e.to_string().starts_with("no measured all-reduce across nodes: tp 16 spans 2 nodes of 8 H100"));
    }

    /// Every catalog model with grouped attention prices on H100 and H200,
    /// BF16 and FP8, at every TP degree that divides its heads and has
    /// all-reduce measurements: no per-model tables. Latent attention is
    /// refused, naming what the tables lack.
    #[test]
    fn every_catalog_model_prices_on_h100_and_h200() {
        let c = KernelConstants::fitted("H100").unwrap();
        for id in catalog::model_ids() {
            let m = model(id);
            if m.attention != Attention::Grouped {
                let err =
                    Kernels::new(&m, &hardware::lookup("H100").unwrap(), 1, Dtype::Bf16, 2, MoeRouting::Skewed, c)
                        .unwrap_err();
                assert!(err.to_string().starts_with("no measured latent-attention (MLA) kernels"), "{id}: {err}");
                continue;
            }
            if unmeasured(&m) {
                let err =
                    Kernels::new(&m, &hardware::lookup("H100").unwrap(), 1, Dtype::Bf16, 2, MoeRouting::Skewed, c)
                        .unwrap_err();
                assert!(matches!(err, KernelsError::Unmeasured(_)), "{id}: {err}");
                continue;
            }
            for gpu in ["H100", "H200"] {
                let g = hardware::lookup(gpu).unwrap();
                let tps = [1, 2, 4, 8].into_iter().filter(|tp| m.num_heads.is_multiple_of(*tp));
                for (tp, dtype) in tps.flat_map(|tp| [(tp, Dtype::Bf16), (tp, Dtype::Fp8), (tp, Dtype::Fp8Block)]) {
                    let k = Kernels::new(&m, &g, tp, dtype, 2, MoeRouting::Skewed, c)
                        .unwrap_or_else(|e| panic!("{id} {gpu} tp{tp} {dtype}: {e}"));
                    assert_prices(&k, &format!("{id} {gpu} tp{tp} {dtype}"));
                }
            }
        }
    }

    /// A decode of 32 sequences costs over a millisecond and a 2,048-token
    /// prefill more than that: the deployment prices both kinds of step.
    fn assert_prices(k: &Kernels, what: &str) {
        let prefill = StepBatch {
            prefills: vec![PrefillChunk { new_tokens: 2048, context_tokens: 0, samples: true }],
            ..StepBatch::default()
        };
        let (d, p) = (k.step_time_us(&decode(32, 1000)), k.step_time_us(&prefill));
        assert!(d > 1_000 && p > d, "{what}: decode {d} µs, prefill {p} µs");
    }

    /// Every catalog model with grouped attention that fits prices on A100
    /// and L40S in BF16 at every TP degree that divides its heads (the
    /// vLLM 0.14.0 tables: GEMMs, attention, all-reduce at TP 2/4/8, fused
    /// MoE where its shape was measured), with the constants these GPUs get.
    #[test]
    fn every_catalog_model_prices_on_a100_and_l40s() {
        for gpu in ["A100-80G", "L40S"] {
            let c = KernelConstants::fitted(gpu).unwrap();
            let h100 = KernelConstants::fitted("H100").unwrap();
            assert_eq!(c, KernelConstants { gemm_scale: 1.0, attention_scale: 1.0, ..h100 });
            let g = hardware::lookup(gpu).unwrap();
            for id in catalog::model_ids() {
                let m = model(id);
                if m.attention != Attention::Grouped || unmeasured(&m) {
                    continue;
                }
                for tp in [1, 2, 4, 8].into_iter().filter(|tp| m.num_heads.is_multiple_of(*tp)) {
                    let k = match Kernels::new(&m, &g, tp, Dtype::Bf16, 2, MoeRouting::Skewed, c) {
                        // Gemma 3's 256-wide heads: not in these GPUs' tables.
                        Err(e) if m.head_dim == 256 => {
                            assert!(e.to_string().starts_with("no measured attention kernel with head_dim 256"));
                            continue;
                        }
                        k => k.unwrap_or_else(|e| panic!("{id} {gpu} tp{tp}: {e}")),
                    };
                    assert_prices(&k, &format!("{id} {gpu} tp{tp}"));
                }
            }
        }
    }

    /// What the tables hold no kernels for: linear attention, MXFP4 experts,
    /// MoE models with dense layers.
    fn unmeasured(m: &ModelArch) -> bool {
        m.linear.is_some() || m.moe.as_ref().is_some_and(|e| e.packed_experts.is_some() || e.dense_layers > 0)
    }

    /// A100 and L40S against H100, same shapes: a lone decode of Llama-3.1-8B
    /// streams 16 GB of weights, so it takes about the bandwidth ratio longer
    /// (H100 3.35 TB/s, A100 2.04, L40S 0.86); Mixtral-8x7B's experts on one
    /// A100 are the measured fused MoE kernel.
    #[test]
    fn a100_and_l40s_are_slower_than_h100_by_their_bandwidth() {
        let lone = |gpu: &str| kernels("Llama-3.1-8B", gpu, 1).step_time_us(&decode(1, 500)) as f64;
        let (h100, a100, l40s) = (lone("H100"), lone("A100-80G"), lone("L40S"));
        assert!((1.3..2.0).contains(&(a100 / h100)), "{h100} {a100}");
        assert!((2.8..4.5).contains(&(l40s / h100)), "{h100} {l40s}");
        let k = kernels("Mixtral-8x7B", "A100-80G", 2);
        assert!(matches!(k.moe.as_ref().unwrap().routed, Routed::Fused(_)));
        // L40S at TP4 pays NCCL's all-reduce over PCIe (vLLM disables its
        // custom one on more than two PCIe-only GPUs): more than TP2's.
        let t = |tp| kernels("Llama-3.1-70B", "L40S", tp).tables.allreduce_us(tp, 8192.0 * 256.0);
        assert!(t(4) > 2.0 * t(2), "{} {}", t(2), t(4));
    }
}
