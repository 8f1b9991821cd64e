//! Measured vLLM kernel timings, and interpolation between the measured
//! points. The tables are NVIDIA aiconfigurator's kernel database for vLLM
//! 0.24 on H100 SXM and H200 SXM (`../shared/data/aiconfigurator-vllm-h100-
//! h200/csv_bf16`) and for vLLM 0.14.0 on A100 SXM and L40S
//! (`../shared/data/aiconfigurator-vllm-a100-l40s/csv_bf16`; BF16 only),
//! compacted into dense grids by `python3 scripts/import-kernel-tables.py`
//! and embedded in the binary; the JSON is parsed once per GPU per process.
//!
//! Interpolation is multilinear in the axis values: GEMM time is affine in m,
//! n and k between neighbouring grid points (bilinear in n and k reproduces
//! a cost in n·k exactly), attention time in batch and length likewise. Below
//! an axis's first point a lookup uses that point (a kernel's launch floor);
//! past its last it extrapolates from the last two points.
//!
//! H100 also has FP8 GEMMs as vLLM 0.14 ran them (aiconfigurator's vLLM
//! 0.14.0 table, `../shared/data/aiconfigurator-vllm-a100-l40s`), for runs
//! on releases before 0.20: stored on their own measured axes and resampled
//! onto the 0.24 table's axes when parsed, so every GEMM column of a step
//! shares one m axis.

use std::sync::{Arc, OnceLock};

use serde::Deserialize;

use crate::arch::MoeRouting;

/// Kernel tables of one GPU.
#[derive(Deserialize)]
pub(super) struct KernelTables {
    gemm: Gemm,
    /// Absent on A100 and L40S (BF16 tables only), as are the block-FP8 and
    /// balanced-routing MoE tables.
    #[serde(default)]
    gemm_fp8: Option<Gemm>,
    /// FP8 GEMMs as vLLM 0.14 ran them (H100 only), on their own axes as
    /// measured; read through [`Self::gemm_table`], on the `gemm` axes.
    #[serde(default)]
    gemm_fp8_vllm014: Option<Gemm>,
    /// `gemm_fp8_vllm014` resampled on the `gemm` axes, at its first use
    /// (17 M instructions, a tenth of a 10k run's, when done for every
    /// process whatever its dtype).
    #[serde(skip)]
    gemm_fp8_vllm014_resampled: OnceLock<Option<Gemm>>,
    moe: Moe,
    #[serde(default)]
    moe_fp8_block: Option<Moe>,
    #[serde(default)]
    moe_balanced: Option<Moe>,
    #[serde(default)]
    moe_fp8_block_balanced: Option<Moe>,
    context_attention: Attention,
    generation_attention: Attention,
    allreduce: AllReduce,
}

impl std::fmt::Debug for KernelTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelTables")
            .field("gemm_points", &self.gemm.us.len())
            .field("moe_shapes", &self.moe.shapes.len())
            .field("context_shapes", &self.context_attention.shapes.len())
            .field("generation_shapes", &self.generation_attention.shapes.len())
            .finish()
    }
}

#[derive(Debug, Deserialize)]
struct Gemm {
    m: Vec<f64>,
    n: Vec<f64>,
    k: Vec<f64>,
    us: Vec<f64>,
}

#[derive(Debug, Deserialize)]
struct Moe {
    tokens: Vec<f64>,
    shapes: Vec<MoeShape>,
}

#[derive(Debug, Deserialize)]
struct MoeShape {
    hidden: u64,
    inter: u64,
    topk: u64,
    experts: u64,
    moe_tp: u64,
    moe_ep: u64,
    us: Vec<f64>,
}

/// GEMM precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GemmDtype {
    /// BF16 (and FP16: the same tensor-core rate).
    Bf16,
    /// FP8 weights and activations, per-tensor scales.
    Fp8,
    /// The same, as vLLM 0.14 ran them (slower kernels; H100 only).
    Fp8Vllm014,
}

#[derive(Debug, Deserialize)]
struct Attention {
    batch: Vec<f64>,
    len: Vec<f64>,
    shapes: Vec<AttentionShape>,
}

#[derive(Debug, Deserialize)]
struct AttentionShape {
    num_heads: u64,
    num_kv_heads: u64,
    head_dim: u64,
    us: Vec<f64>,
}

#[derive(Debug, Deserialize)]
struct AllReduce {
    elements: Vec<f64>,
    by_tp: Vec<AllReduceTp>,
}

#[derive(Debug, Deserialize)]
struct AllReduceTp {
    tp: u64,
    us: Vec<f64>,
}

/// Which attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AttentionKind {
    /// Prefill (context) attention; length = prompt tokens.
    Context,
    /// Decode (generation) attention; length = tokens in the KV cache.
    Generation,
}

/// How a model's attention maps onto a measured head shape. Heads are
/// independent, so `g` groups of (h/g query, kv/g KV) heads over `b`
/// sequences cost what (h/g, kv/g) over `g·b` sequences costs: `batch_factor`
/// is g. Where no measured shape has the model's ratio of query to KV heads,
/// the nearest one with the same KV heads is used and prefill time scaled
/// by the query-head ratio (`context_scale`; prefill is compute-bound in
/// query heads, decode is bound by KV reads and is not scaled).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct AttentionFit {
    shape: usize,
    /// Sequences of the measured shape per sequence of the model.
    pub(super) batch_factor: f64,
    /// Multiplier on prefill times.
    pub(super) context_scale: f64,
}

/// A measured fused-MoE line (see [`KernelTables::moe_line`]): the table
/// (precision and routing), the shape in it, and how many times wider the
/// deployment's expert split is than the one measured (1: measured as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MoeLine(MoeDtype, MoeRouting, usize, u64);

/// Fused-MoE kernel precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MoeDtype {
    /// BF16 experts.
    Bf16,
    /// FP8 experts with 128 × 128 block scales.
    Fp8Block,
}

/// GPUs with measured kernel tables, by catalog name.
pub(super) const MEASURED_GPUS: [&str; 8] = ["H100", "H200", "A100-80G", "L40S", "B200", "GB200", "B300", "GB300"];

/// The tables of `gpu` (catalog name), parsed on first use.
pub(super) fn for_gpu(gpu: &str) -> Option<Arc<KernelTables>> {
    static H100: OnceLock<Arc<KernelTables>> = OnceLock::new();
    static H200: OnceLock<Arc<KernelTables>> = OnceLock::new();
    static A100: OnceLock<Arc<KernelTables>> = OnceLock::new();
    static L40S: OnceLock<Arc<KernelTables>> = OnceLock::new();
    static B200: OnceLock<Arc<KernelTables>> = OnceLock::new();
    static GB200: OnceLock<Arc<KernelTables>> = OnceLock::new();
    static B300: OnceLock<Arc<KernelTables>> = OnceLock::new();
    static GB300: OnceLock<Arc<KernelTables>> = OnceLock::new();
    let (cell, text) = match gpu {
        "H100" => (&H100, include_str!("kernels/h100.json")),
        "H200" => (&H200, include_str!("kernels/h200.json")),
        "A100-80G" => (&A100, include_str!("kernels/a100.json")),
        "L40S" => (&L40S, include_str!("kernels/l40s.json")),
        "B200" => (&B200, include_str!("kernels/b200.json")),
        "GB200" => (&GB200, include_str!("kernels/gb200.json")),
        "B300" => (&B300, include_str!("kernels/b300.json")),
        "GB300" => (&GB300, include_str!("kernels/gb300.json")),
        _ => return None,
    };
    Some(
        cell.get_or_init(|| {
            let tables: KernelTables = serde_json::from_str(text).expect("embedded kernel tables parse");
            Arc::new(tables)
        })
        .clone(),
    )
}

/// `g` at every (m, n, k) point of `onto`'s axes: trilinear in its own
/// measured points, clamped below its first point and extrapolated past its
/// last, as every lookup is.
fn resample(g: &Gemm, onto: &Gemm) -> Gemm {
    let plane = g.n.len() * g.k.len();
    let at = |m: f64, n: f64, k: f64| {
        let (m0, m1, tm) = bracket(&g.m, m);
        let at_m = |i: usize| bilinear(&g.n, &g.k, &g.us[i * plane..(i + 1) * plane], n, k);
        lerp(at_m(m0), at_m(m1), tm).max(0.0)
    };
    let mut us = Vec::with_capacity(onto.us.len());
    for &m in &onto.m {
        for &n in &onto.n {
            for &k in &onto.k {
                us.push(at(m, n, k));
            }
        }
    }
    Gemm { m: onto.m.clone(), n: onto.n.clone(), k: onto.k.clone(), us }
}

/// Index pair and weight for `x` on `axis`: clamped below, extrapolated above.
fn bracket(axis: &[f64], x: f64) -> (usize, usize, f64) {
    let n = axis.len();
    if n == 1 || x <= axis[0] {
        return (0, 0, 0.0);
    }
    let hi = axis.partition_point(|&a| a < x).min(n - 1);
    let lo = hi - 1;
    (lo, hi, (x - axis[lo]) / (axis[hi] - axis[lo]))
}

fn lerp(a: f64, b: f64, t: f64) -> f64 {
    a + (b - a) * t
}

/// Bilinear lookup in a row-major `xs × ys` grid.
fn bilinear(xs: &[f64], ys: &[f64], values: &[f64], x: f64, y: f64) -> f64 {
    let (x0, x1, tx) = bracket(xs, x);
    let (y0, y1, ty) = bracket(ys, y);
    let at = |i: usize, j: usize| values[i * ys.len() + j];
    lerp(lerp(at(x0, y0), at(x0, y1), ty), lerp(at(x1, y0), at(x1, y1), ty), tx)
}

impl KernelTables {
    /// The table of `dtype`; `None` where this GPU's tables hold no GEMMs of
    /// it (A100 and L40S: BF16 only; vLLM 0.14's FP8: H100 only; see
    /// [`Self::has_gemm`]).
    fn gemm_table(&self, dtype: GemmDtype) -> Option<&Gemm> {
        match dtype {
            GemmDtype::Bf16 => Some(&self.gemm),
            GemmDtype::Fp8 => self.gemm_fp8.as_ref(),
            GemmDtype::Fp8Vllm014 => self
                .gemm_fp8_vllm014_resampled
                .get_or_init(|| self.gemm_fp8_vllm014.as_ref().map(|g| resample(g, &self.gemm)))
                .as_ref(),
        }
    }

    /// Whether GEMMs of `dtype` were measured on this GPU.
    pub(super) fn has_gemm(&self, dtype: GemmDtype) -> bool {
        match dtype {
            GemmDtype::Fp8Vllm014 => self.gemm_fp8_vllm014.is_some(),
            _ => self.gemm_table(dtype).is_some(),
        }
    }

    /// BF16 GEMM of an m×k activation by a k×n weight, µs.
    pub(super) fn gemm_us(&self, m: f64, n: f64, k: f64) -> f64 {
        let g = &self.gemm;
        let (m0, m1, tm) = bracket(&g.m, m);
        let plane = g.n.len() * g.k.len();
        let at_m = |i: usize| bilinear(&g.n, &g.k, &g.us[i * plane..(i + 1) * plane], n, k);
        lerp(at_m(m0), at_m(m1), tm).max(0.0)
    }

    /// GEMM times of an n×k weight at every measured m, to sum with other
    /// shapes and read back with [`Self::at_m`]: a deployment's GEMM shapes are
    /// fixed, so a step's layer needs one lookup in m, not one per GEMM.
    /// (A dtype without a table, [`Self::has_gemm`], prices as BF16;
    /// callers check first, as [`super::Kernels::check`] does.)
    pub(super) fn gemm_column(&self, dtype: GemmDtype, n: f64, k: f64) -> Vec<f64> {
        let g = self.gemm_table(dtype).unwrap_or(&self.gemm);
        let plane = g.n.len() * g.k.len();
        (0..g.m.len()).map(|i| bilinear(&g.n, &g.k, &g.us[i * plane..(i + 1) * plane], n, k)).collect()
    }

    /// A column of [`Self::gemm_column`] (or a sum of them) at `m` rows.
    /// (Every GEMM table shares its m axis.)
    pub(super) fn at_m(&self, column: &[f64], m: f64) -> f64 {
        let (m0, m1, t) = bracket(&self.gemm.m, m);
        lerp(column[m0], column[m1], t).max(0.0)
    }

    /// The measured fused-MoE kernel of `dtype` for this expert shape, split
    /// `moe_tp` ways (vLLM shards experts like the dense MLP under TP).
    pub(super) fn moe_line(
        &self,
        (dtype, routing): (MoeDtype, MoeRouting),
        hidden: u64,
        inter: u64,
        topk: u64,
        experts: u64,
        moe_tp: u64,
    ) -> Option<MoeLine> {
        let shapes = &self.moe_table(dtype, routing)?.shapes;
        let at = |tp: u64| {
            shapes.iter().position(|s| {
                (s.hidden, s.inter, s.topk, s.experts, s.moe_tp, s.moe_ep) == (hidden, inter, topk, experts, tp, 1)
            })
        };
        if let Some(i) = at(moe_tp) {
            return Some(MoeLine(dtype, routing, i, 1));
        }
        // Not measured at this split (H200's block-FP8 table stops at TP 4):
        // the widest measured split that divides it, each GPU's share of
        // every expert's weights and FLOPs smaller by the ratio, and so its
        // time (MiniMax-M2.5 at TP 8 on H200: one GEMM per expert for 256
        // experts priced TPOT +385 %).
        (1..moe_tp)
            .rev()
            .filter(|&tp| moe_tp.is_multiple_of(tp))
            .find_map(|tp| at(tp).map(|i| MoeLine(dtype, routing, i, moe_tp / tp)))
    }

    /// `None` where the GPU's tables lack this precision or routing (A100
    /// and L40S: BF16 with skewed routing only); its experts are then priced
    /// per expert.
    fn moe_table(&self, dtype: MoeDtype, routing: MoeRouting) -> Option<&Moe> {
        match (dtype, routing) {
            (MoeDtype::Bf16, MoeRouting::Skewed) => Some(&self.moe),
            (MoeDtype::Fp8Block, MoeRouting::Skewed) => self.moe_fp8_block.as_ref(),
            (MoeDtype::Bf16, MoeRouting::Balanced) => self.moe_balanced.as_ref(),
            (MoeDtype::Fp8Block, MoeRouting::Balanced) => self.moe_fp8_block_balanced.as_ref(),
        }
    }

    /// One fused-MoE layer (every routed expert's gate-up, activation and
    /// down projection) over `tokens` tokens, µs.
    pub(super) fn moe_us(&self, line: MoeLine, tokens: f64) -> f64 {
        let table = self.moe_table(line.0, line.1).expect("a MoeLine is made only from a table that exists");
        let (i0, i1, t) = bracket(&table.tokens, tokens);
        let us = &table.shapes[line.2].us;
        lerp(us[i0], us[i1], t).max(0.0) / line.3 as f64
    }

    fn attention(&self, kind: AttentionKind) -> &Attention {
        match kind {
            AttentionKind::Context => &self.context_attention,
            AttentionKind::Generation => &self.generation_attention,
        }
    }

    /// The measured shape standing for `heads` query and `kv_heads` KV heads
    /// of `head_dim` on one GPU; `None` when no shape has this head_dim.
    pub(super) fn fit_attention(
        &self,
        kind: AttentionKind,
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
    ) -> Option<AttentionFit> {
        let shapes = &self.attention(kind).shapes;
        let groups = (1..=kv_heads).filter(|g| kv_heads.is_multiple_of(*g));
        for g in groups.clone().filter(|g| heads.is_multiple_of(*g)) {
            if let Some(i) = shapes
                .iter()
                .position(|s| (s.num_heads, s.num_kv_heads, s.head_dim) == (heads / g, kv_heads / g, head_dim))
            {
                return Some(AttentionFit { shape: i, batch_factor: g as f64, context_scale: 1.0 });
            }
        }
        for g in groups {
            let want = heads as f64 / g as f64;
            let nearest = shapes
                .iter()
                .enumerate()
                .filter(|(_, s)| s.num_kv_heads == kv_heads / g && s.head_dim == head_dim)
                .min_by(|a, b| {
                    let d = |s: &AttentionShape| (s.num_heads as f64 / want).ln().abs();
                    d(a.1).total_cmp(&d(b.1))
                });
            if let Some((i, s)) = nearest {
                let scale = want / s.num_heads as f64;
                return Some(AttentionFit { shape: i, batch_factor: g as f64, context_scale: scale });
            }
        }
        None
    }

    /// One attention kernel over `batch` sequences of `len` tokens, µs.
    pub(super) fn attention_us(&self, kind: AttentionKind, fit: AttentionFit, batch: f64, len: f64) -> f64 {
        let a = self.attention(kind);
        let t = bilinear(&a.batch, &a.len, &a.shapes[fit.shape].us, batch * fit.batch_factor, len).max(0.0);
        match kind {
            AttentionKind::Context => t * fit.context_scale,
            AttentionKind::Generation => t,
        }
    }

    /// Whether an all-reduce over `tp` GPUs was measured.
    pub(super) fn has_allreduce(&self, tp: u64) -> bool {
        self.allreduce.by_tp.iter().any(|t| t.tp == tp)
    }

    /// The TP degrees with all-reduce measurements.
    pub(super) fn allreduce_tps(&self) -> Vec<u64> {
        self.allreduce.by_tp.iter().map(|t| t.tp).collect()
    }

    /// All-reduce of `elements` BF16 values across `tp` GPUs, µs (0 on one
    /// GPU or a TP degree without measurements; check [`Self::has_allreduce`]).
    pub(super) fn allreduce_us(&self, tp: u64, elements: f64) -> f64 {
        let a = &self.allreduce;
        let Some(t) = a.by_tp.iter().find(|t| t.tp == tp) else { return 0.0 };
        let (i0, i1, w) = bracket(&a.elements, elements);
        lerp(t.us[i0], t.us[i1], w).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Arc<KernelTables> {
        for_gpu("H100").unwrap()
    }

    // Rows of ../shared/data/aiconfigurator-vllm-h100-h200/csv_bf16/
    // h100_sxm_vllm0.24_gemm_bf16.csv (ms), to the tables' 4 digits.
    const GEMM_32768_4096_4096_US: f64 = 1529.0;
    const GEMM_16384_4096_4096_US: f64 = 739.7;
    const GEMM_1_4096_4096_US: f64 = 15.05;

    #[test]
    fn gemm_at_measured_points_is_the_measurement() {
        let t = h100();
        assert_eq!(t.gemm_us(32768.0, 4096.0, 4096.0), GEMM_32768_4096_4096_US);
        assert_eq!(t.gemm_us(16384.0, 4096.0, 4096.0), GEMM_16384_4096_4096_US);
        // Small m: the least time measured at this m or a larger one (a
        // kernel for more rows serves fewer, padded).
        let small = t.gemm_us(1.0, 4096.0, 4096.0);
        assert!((0.9 * GEMM_1_4096_4096_US..=GEMM_1_4096_4096_US).contains(&small), "{small}");
        assert!(small <= t.gemm_us(64.0, 4096.0, 4096.0));
    }

    #[test]
    fn gemm_between_points_is_between_them() {
        let t = h100();
        // n = 22016 (Llama-2-7b's gate+up) lies between the grid's 16384 and 51200.
        let lo = t.gemm_us(64.0, 16384.0, 4096.0);
        let hi = t.gemm_us(64.0, 51200.0, 4096.0);
        let mid = t.gemm_us(64.0, 22016.0, 4096.0);
        let expect = lo + (hi - lo) * (22016.0 - 16384.0) / (51200.0 - 16384.0);
        assert!((mid - expect).abs() < 1e-9, "{lo} {mid} {hi}");
        // m between 1024 and 1025... and between 2048 and 2049, time rises with m.
        assert!(t.gemm_us(1500.0, 4096.0, 4096.0) > t.gemm_us(1024.0, 4096.0, 4096.0));
        assert!(t.gemm_us(1500.0, 4096.0, 4096.0) < t.gemm_us(2049.0, 4096.0, 4096.0));
    }

    #[test]
    fn gemm_columns_sum_shapes_exactly() {
        let t = h100();
        let (a, b) = (t.gemm_column(GemmDtype::Bf16, 12288.0, 4096.0), t.gemm_column(GemmDtype::Bf16, 4096.0, 11008.0));
        let sum: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        for m in [1.0, 7.5, 100.0, 3000.0, 40000.0] {
            let direct = t.gemm_us(m, 12288.0, 4096.0) + t.gemm_us(m, 4096.0, 11008.0);
            assert!((t.at_m(&sum, m) - direct).abs() < 1e-9 * direct, "{m}");
        }
    }

    #[test]
    fn fp8_gemms_and_fused_moe_are_measured() {
        let t = h100();
        // CutlassFP8ScaledMMLinearKernel, m = 2048, n = k = 4096: 0.07731 ms
        // (gemm_perf.parquet), against 0.08669 ms in BF16.
        let fp8 = t.gemm_column(GemmDtype::Fp8, 4096.0, 4096.0);
        assert_eq!(t.at_m(&fp8, 2048.0), 77.31);
        assert!(t.at_m(&fp8, 2048.0) < t.gemm_us(2048.0, 4096.0, 4096.0));
        // Mixtral-8x7B's experts on one GPU: 256.3 µs at one token, 1054 µs at
        // 64 (moe_perf.parquet, BF16, power law 1.01).
        let line = t.moe_line((MoeDtype::Bf16, MoeRouting::Skewed), 4096, 14336, 2, 8, 1).unwrap();
        assert_eq!(t.moe_us(line, 1.0), 256.3);
        assert_eq!(t.moe_us(line, 64.0), 1054.0);
        // A split not measured: the widest measured one dividing it, scaled
        // (TP 3 from TP 1, a third of the time); a shape not measured: none.
        let three = t.moe_line((MoeDtype::Bf16, MoeRouting::Skewed), 4096, 14336, 2, 8, 3).unwrap();
        assert!((t.moe_us(three, 64.0) * 3.0 - 1054.0).abs() < 1e-9);
        assert!(t.moe_line((MoeDtype::Bf16, MoeRouting::Skewed), 4096, 14336, 2, 7, 1).is_none());
        // Qwen3-235B-A22B's block-FP8 experts over two GPUs: 337.3 µs for 128
        // tokens (vllm_fp8moe_triton_tritonexperts, power law 1.01), against
        // 590.6 µs in BF16.
        let h200 = for_gpu("H200").unwrap();
        let line = |dtype, routing| h200.moe_line((dtype, routing), 4096, 1536, 8, 128, 2).unwrap();
        let block = line(MoeDtype::Fp8Block, MoeRouting::Skewed);
        let bf16 = line(MoeDtype::Bf16, MoeRouting::Skewed);
        assert_eq!((h200.moe_us(block, 128.0), h200.moe_us(bf16, 128.0)), (337.3, 590.6));
        // With every expert equally likely 16 tokens touch more experts:
        // 322.5 µs against 190.2 (balanced vs power law 1.01).
        let balanced = line(MoeDtype::Fp8Block, MoeRouting::Balanced);
        assert_eq!((h200.moe_us(balanced, 16.0), h200.moe_us(block, 16.0)), (322.5, 190.2));
    }

    #[test]
    fn vllm_0_14_fp8_gemms_are_measured_on_h100_only() {
        let t = h100();
        assert!(t.has_gemm(GemmDtype::Fp8Vllm014));
        assert!(!for_gpu("H200").unwrap().has_gemm(GemmDtype::Fp8Vllm014));
        // vllm_default fp8, m = 1024, n = k = 8192 on vLLM 0.14.0: 0.1899 ms
        // (h100_sxm/gemm/vllm/0.14.0/gemm_perf.parquet; m 1024 is on both
        // tables' axes), against 117.9 µs on vLLM 0.24.
        let old = t.gemm_column(GemmDtype::Fp8Vllm014, 8192.0, 8192.0);
        let new = t.gemm_column(GemmDtype::Fp8, 8192.0, 8192.0);
        assert_eq!(t.at_m(&old, 1024.0), 189.9);
        assert_eq!(t.at_m(&new, 1024.0), 117.9);
        // Between the 0.14 table's m points (768, 1024) the resampled column
        // is linear.
        let mid = t.at_m(&old, 896.0);
        assert!((mid - (t.at_m(&old, 768.0) + 189.9) / 2.0).abs() < 1e-9, "{mid}");
    }

    #[test]
    fn gemm_extrapolates_past_the_grid() {
        let t = h100();
        let last = t.gemm_us(16.0, 65536.0, 4096.0);
        let beyond = t.gemm_us(16.0, 128256.0, 4096.0);
        assert!(beyond > 1.5 * last, "{last} {beyond}");
    }

    #[test]
    fn attention_shapes_map_by_head_groups() {
        let t = h100();
        // Llama-2-7b (32 query, 32 KV heads): decode measured up to 8 KV heads,
        // so 4 groups of (8, 8) at four times the batch.
        let fit = t.fit_attention(AttentionKind::Generation, 32, 32, 128).unwrap();
        assert_eq!((fit.batch_factor, fit.context_scale), (4.0, 1.0));
        // ...while prefill was measured at (32, 32) itself.
        let fit = t.fit_attention(AttentionKind::Context, 32, 32, 128).unwrap();
        assert_eq!(fit.batch_factor, 1.0);
        // Qwen2.5-7B (28, 4): ratio 7 is not measured; nearest (24 or 32, 4), scaled.
        let fit = t.fit_attention(AttentionKind::Context, 28, 4, 128).unwrap();
        assert!((fit.context_scale - 28.0 / 24.0).abs() < 1e-9 || (fit.context_scale - 28.0 / 32.0).abs() < 1e-9);
        assert!(t.fit_attention(AttentionKind::Context, 32, 8, 96).is_none());
    }

    #[test]
    fn attention_interpolates_in_batch_and_length() {
        let t = h100();
        let fit = t.fit_attention(AttentionKind::Generation, 32, 8, 128).unwrap();
        let at = |b: f64, l: f64| t.attention_us(AttentionKind::Generation, fit, b, l);
        // Measured points: batch 32 and 64 at kv_len 1023.
        let (a, b) = (at(32.0, 1023.0), at(64.0, 1023.0));
        assert!(((at(48.0, 1023.0)) - (a + b) / 2.0).abs() < 1e-9);
        assert!(at(64.0, 2047.0) > b);
    }

    #[test]
    fn allreduce_is_measured_for_tp_2_4_8() {
        let t = h100();
        assert_eq!(t.allreduce_tps(), vec![2, 4, 8]);
        // 128 elements on TP2 under CUDA graphs: 4.29 µs measured.
        assert!((t.allreduce_us(2, 128.0) - 4.292).abs() < 0.01);
        assert!(t.allreduce_us(2, 4096.0 * 2048.0) > t.allreduce_us(2, 4096.0));
        assert_eq!(t.allreduce_us(3, 4096.0), 0.0);
    }
}
