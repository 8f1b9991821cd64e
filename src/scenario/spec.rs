//! The scenario file exactly as written (YAML, or JSON, which YAML accepts):
//! plain serde structs, every key optional where vLLM has a default, unknown
//! keys rejected with their line. [`super::resolve`] turns this into a typed
//! [`super::Deployment`].

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

/// One deployment, as the user wrote it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSpec {
    /// Display name; defaults to the file stem.
    pub name: Option<String>,
    /// Catalog id of the model.
    pub model: Option<String>,
    /// Path to a HuggingFace `config.json`, relative to the scenario file.
    pub model_config: Option<String>,
    /// Catalog name of the GPU.
    pub hardware: String,
    /// Tensor-parallel degree (default 1).
    pub tp: Option<u64>,
    /// `fp16`, `bf16`, `fp8` or `fp8_block` (default: the checkpoint's dtype).
    pub dtype: Option<Dtype>,
    /// How an MoE model's tokens spread over its experts: `skewed` (default,
    /// as text routes) or `balanced` (every expert equally likely, as a
    /// benchmark of random tokens routes).
    pub moe_routing: Option<MoeRouting>,
    /// Whose measured FP8 GEMMs price FP8 linear layers under the kernels
    /// model: `"0.24"` (default) or `"0.14"` (H100 only; measured slower),
    /// the table nearest the release the run used.
    pub fp8_gemm_release: Option<String>,
    /// How the requests sample: `model_defaults` (default: the client sends
    /// no sampling parameters and vLLM applies the checkpoint's
    /// `generation_config.json`, as inference-perf's requests do) or
    /// `greedy` (`temperature: 0`, as InferenceX sends). Prices the sampler
    /// (see `sort_sampler_us` in src/latency.rs).
    pub sampling: Option<Sampling>,
    /// vLLM engine arguments.
    #[serde(default)]
    pub engine: EngineSpec,
    /// Which latency model prices a step (default: `kernels` with the GPU's
    /// fitted constants where kernel tables exist for it, else `roofline`).
    pub latency_model: Option<LatencySpec>,
    /// Identical replicas of the engine behind a router (default 1).
    pub replicas: Option<u32>,
    /// Latency targets the runs are judged by (`slo_met`, goodput).
    pub slo: Option<crate::metrics::Slo>,
    /// Data-parallel engine ranks of `tp` GPUs each behind vLLM's DP load
    /// balancer (default 1); an MoE model's ranks step together with its
    /// experts spread over all `dp × tp` GPUs (`--enable-expert-parallel`).
    pub dp: Option<u32>,
    /// How requests are admitted and spread over the replicas.
    pub router: Option<RouterSpec>,
}

/// `router:`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterSpec {
    /// A policy of the router's list (`RoutingPolicy::names`; default
    /// `round-robin`).
    pub policy: Option<String>,
    /// The `weighted` policy's scorers.
    pub scorers: Option<Vec<ScorerSpec>>,
    /// `node` (default) or `request`.
    pub affinity: Option<String>,
    /// How old the router's view of the replicas may be, ms (default 0: live).
    pub refresh_interval_ms: Option<f64>,
    /// Reject a request arriving when every replica has this many waiting.
    pub max_queue: Option<u32>,
    /// Seed of the router's stream, for the policies that draw (default 0).
    pub seed: Option<u64>,
}

/// One scorer of `router.scorers`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScorerSpec {
    /// `queue`, `kv-utilization`, `prefix-cache` or `running-requests`.
    pub name: String,
    /// Its weight (> 0).
    pub weight: f64,
}

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

/// How a deployment's requests sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampling {
    /// No sampling parameters sent: the model's `generation_config.json`
    /// defaults apply (top-k/top-p where it sets them).
    #[default]
    ModelDefaults,
    /// `temperature: 0`: vLLM takes the argmax and skips top-k/top-p.
    Greedy,
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

/// vLLM engine arguments, by their vLLM names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSpec {
    /// `--max-num-seqs`.
    pub max_num_seqs: Option<u32>,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: Option<u32>,
    /// `--max-model-len`.
    pub max_model_len: Option<u32>,
    /// `--block-size`.
    pub block_size: Option<u32>,
    /// `--gpu-memory-utilization`.
    pub gpu_memory_utilization: Option<f64>,
    /// `--kv-cache-dtype`: `auto` (the model's 16 bits) or an FP8 format
    /// (one byte an element: twice the tokens in the same memory).
    pub kv_cache_dtype: Option<KvCacheDtype>,
    /// `--num-gpu-blocks-override`.
    pub num_gpu_blocks: Option<u32>,
    /// `--enable-prefix-caching` / `--no-enable-prefix-caching`.
    pub enable_prefix_caching: Option<bool>,
    /// `--long-prefill-token-threshold`.
    pub long_prefill_token_threshold: Option<u32>,
    /// `--async-scheduling` / `--no-async-scheduling` (default on, as in
    /// vLLM since vllm-project/vllm#27614, before the 0.15 the data covers).
    pub async_scheduling: Option<bool>,
    /// `--enforce-eager`: no CUDA graphs; every kernel is launched from the
    /// host each step (priced by the kernels model only).
    pub enforce_eager: Option<bool>,
    /// The vLLM release whose scheduler behaviour to model (default: the
    /// newest the conformance suite checks); the next three keys override
    /// what it sets.
    pub vllm_version: Option<String>,
    /// `--scheduler-reserve-full-isl` (vLLM ≥ 0.19): admit a waiting request
    /// only if its whole prompt fits in the KV cache.
    pub scheduler_reserve_full_isl: Option<bool>,
    /// A lone running or waiting request ignores
    /// `long_prefill_token_threshold` (vLLM ≥ 0.31; no vLLM flag).
    pub lone_request_skips_prefill_threshold: Option<bool>,
    /// Freed KV blocks without a prefix-cache hash are reused first
    /// (vLLM ≥ 0.28; no vLLM flag).
    pub free_uncached_blocks_first: Option<bool>,
}

/// `latency_model:` either a bare name (`roofline`) or a mapping with `kind:`
/// and that model's parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum LatencySpec {
    /// The analytical roofline model, with optional constants: a file of them
    /// (as `blis-sweep fit` writes) and inline keys, each overriding the GPU's
    /// defaults.
    Roofline {
        /// Path to a constants YAML, relative to the scenario file.
        constants_file: Option<String>,
        /// Constants given inline (keys of `RooflineConstants`).
        constants: Option<serde_json::Value>,
    },
    /// The measured-kernel model, with optional constants as for the roofline
    /// (keys of `KernelConstants`), each overriding the GPU's fitted ones.
    Kernels {
        /// Path to a constants YAML, relative to the scenario file.
        constants_file: Option<String>,
        /// Constants given inline.
        constants: Option<serde_json::Value>,
    },
    /// `step_us = beta[0] + beta[1]·prefill_tokens + beta[2]·decode_tokens
    /// [+ beta[3]·decode_context_tokens]`, microseconds.
    Linear {
        /// Coefficients, µs.
        beta: Vec<f64>,
    },
    /// A model this build knows by name but does not implement.
    Unimplemented(String),
}

/// The mapping form, by `kind:`. Its tags are [`crate::latency::ModelKind`]'s
/// names (serde spells them from the variants; a test checks they agree).
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum LatencyTable {
    Roofline { constants_file: Option<String>, constants: Option<serde_json::Value> },
    Kernels { constants_file: Option<String>, constants: Option<serde_json::Value> },
    Linear { beta: Vec<f64> },
}

impl<'de> Deserialize<'de> for LatencySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SpecVisitor;
        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = LatencySpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a latency model name or a mapping with `kind:`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LatencySpec, E> {
                use crate::latency::ModelKind;
                match ModelKind::parse(v) {
                    Some(ModelKind::Roofline) => Ok(LatencySpec::Roofline { constants_file: None, constants: None }),
                    Some(ModelKind::Kernels) => Ok(LatencySpec::Kernels { constants_file: None, constants: None }),
                    Some(ModelKind::Linear) => {
                        Err(E::custom("`linear` needs coefficients: use {kind: linear, beta: [b0, b1, b2]}"))
                    }
                    None => Ok(LatencySpec::Unimplemented(v.to_owned())),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LatencySpec, A::Error> {
                let table = LatencyTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(match table {
                    LatencyTable::Roofline { constants_file, constants } => {
                        LatencySpec::Roofline { constants_file, constants }
                    }
                    LatencyTable::Kernels { constants_file, constants } => {
                        LatencySpec::Kernels { constants_file, constants }
                    }
                    LatencyTable::Linear { beta } => LatencySpec::Linear { beta },
                })
            }
        }
        d.deserialize_any(SpecVisitor)
    }
}
