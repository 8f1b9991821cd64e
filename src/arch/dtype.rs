//! Number formats a deployment serves in: the weights' dtype, the KV cache's
//! dtype (vLLM's `--kv-cache-dtype`), and how MoE tokens spread over experts.
//! Facts of the model as deployed, read by the latency models and the KV
//! capacity; the scenario file names them (serde derives parse its values).

use std::fmt;

use serde::Deserialize;

/// Serving dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
    /// FP8 weights (vLLM `quantization: fp8`, per-tensor scales);
    /// activations and KV stay 16-bit.
    Fp8,
    /// FP8 weights with 128 × 128 block scales (a checkpoint whose
    /// `quantization_config` has `weight_block_size`: Qwen3 and DeepSeek
    /// `-FP8` releases).
    #[serde(rename = "fp8_block")]
    Fp8Block,
}

impl Dtype {
    /// Whether the weights are 8-bit.
    pub fn is_fp8(self) -> bool {
        matches!(self, Dtype::Fp8 | Dtype::Fp8Block)
    }
}

/// How tokens spread over an MoE model's experts, for pricing the fused MoE
/// kernel (aiconfigurator measured it both ways).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MoeRouting {
    /// Mildly uneven, as text routes (a power law, α = 1.01).
    #[default]
    Skewed,
    /// Every expert equally likely, as random tokens route.
    Balanced,
}

/// vLLM's `--kv-cache-dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvCacheDtype {
    /// The model's dtype (16 bits here).
    #[default]
    Auto,
    /// FP8 (E4M3 on CUDA).
    Fp8,
    /// FP8 E4M3.
    Fp8E4m3,
    /// FP8 E5M2.
    Fp8E5m2,
}

impl KvCacheDtype {
    /// Bytes one KV element takes.
    pub fn bytes(self) -> u64 {
        match self {
            KvCacheDtype::Auto => 2,
            KvCacheDtype::Fp8 | KvCacheDtype::Fp8E4m3 | KvCacheDtype::Fp8E5m2 => 1,
        }
    }
}

impl fmt::Display for KvCacheDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Fp8 => "fp8",
            KvCacheDtype::Fp8E4m3 => "fp8_e4m3",
            KvCacheDtype::Fp8E5m2 => "fp8_e5m2",
        })
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dtype::Fp16 => "fp16",
            Dtype::Bf16 => "bf16",
            Dtype::Fp8 => "fp8",
            Dtype::Fp8Block => "fp8_block",
        })
    }
}
