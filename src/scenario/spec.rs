//! The scenario file exactly as written (YAML, or JSON, which YAML accepts):
//! plain serde structs, every key optional where vLLM has a default, unknown
//! keys rejected with their line. [`super::resolve`] turns this into a typed
//! [`super::Deployment`].

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::arch::{Dtype, KvCacheDtype, MoeRouting};

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
    /// Pools of replicas, each with its own role and deployment (the keys
    /// above are every pool's defaults); absent: one mixed pool of the keys
    /// above.
    pub pools: Option<Pools>,
    /// How prompt KV moves from prefill to decode replicas.
    pub kv_transfer: Option<KvTransferSpec>,
    /// Which requests a prefill/decode deployment splits.
    pub pd: Option<PdSpec>,
    /// The replica count follows a metric (aggregated deployments only).
    pub autoscale: Option<AutoscaleSpec>,
}

/// `pools:`, as written: a mapping from each pool's name to its settings,
/// in the order written.
#[derive(Debug, Clone, Default)]
pub struct Pools(pub Vec<(String, PoolSpec)>);

impl<'de> Deserialize<'de> for Pools {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PoolsVisitor;
        impl<'de> Visitor<'de> for PoolsVisitor {
            type Value = Pools;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping from pool names to pools, e.g. {prefill: {role: prefill, replicas: 2}}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pools, A::Error> {
                let mut pools: Vec<(String, PoolSpec)> = Vec::new();
                while let Some((name, pool)) = map.next_entry::<String, PoolSpec>()? {
                    if pools.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format!("pool `{name}` is given twice")));
                    }
                    pools.push((name, pool));
                }
                Ok(Pools(pools))
            }
        }
        d.deserialize_map(PoolsVisitor)
    }
}

/// One pool of `pools:`: what it does and how it is deployed. Keys it
/// omits take the scenario's top-level value (`engine` key by key).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// `mixed`, `prefill` or `decode` (default: the pool's name, when it is
    /// one of those).
    pub role: Option<String>,
    /// Identical replicas (default 1).
    pub replicas: Option<u32>,
    /// Catalog name of the GPU.
    pub hardware: Option<String>,
    /// Tensor-parallel degree.
    pub tp: Option<u64>,
    /// Data-parallel ranks (only 1 is modelled inside a pool).
    pub dp: Option<u32>,
    /// Serving dtype.
    pub dtype: Option<Dtype>,
    /// vLLM engine arguments, over the top-level ones.
    pub engine: Option<EngineSpec>,
    /// Which latency model prices its steps.
    pub latency_model: Option<LatencySpec>,
    /// How requests are spread over its replicas (the pools that serve
    /// requests share one router; prefill pools another).
    pub router: Option<RouterSpec>,
    /// Read to refuse it with its reason (a P/D pool is not autoscaled).
    pub autoscale: Option<AutoscaleSpec>,
}

/// `kv_transfer:`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvTransferSpec {
    /// `nvlink` (within a node) or `rdma` (InfiniBand/RoCE between nodes);
    /// default `nvlink` when every pool fits one node of one GPU model.
    pub interconnect: Option<String>,
    /// The decode replica's inbound bandwidth, Gbit/s (default: the
    /// interconnect's per-GPU bandwidth from the GPU catalog, times the GPUs
    /// that read in parallel).
    pub bandwidth_gbps: Option<f64>,
    /// Fixed time of one transfer, µs (default: the link's, from NCCL's model).
    pub latency_us: Option<f64>,
}

/// `pd:`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PdSpec {
    /// `always` (default) or `prefix-threshold`.
    pub decider: Option<String>,
    /// `prefix-threshold`: uncached prompt tokens from which a request is
    /// prefilled remotely.
    pub threshold_tokens: Option<u32>,
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
    /// The router's real view: latencies, scrape timer, KV-event delay.
    pub env: Option<super::router_env::RouterEnvSpec>,
    /// Which requests the gateway admits when they are sent.
    pub admission: Option<super::gateway::AdmissionSpec>,
    /// The gateway queue ready llm calls wait in.
    pub flow_control: Option<super::gateway::FlowControlSpec>,
    /// The saturation admission and flow control read.
    pub saturation: Option<super::gateway::SaturationSpec>,
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
    /// KV offload to a CPU tier (vLLM's `OffloadingConnector`); absent: off.
    pub kv_offload: Option<KvOffloadSpec>,
    /// `--enable-lora` with its limits: serve LoRA adapters (absent: off).
    pub lora: Option<LoraSpec>,
    /// `--speculative-config` (see [`SpeculativeSpec`]).
    pub speculative: Option<SpeculativeSpec>,
    /// `--scheduling-policy`: `fcfs` (default) or `priority`.
    pub scheduling_policy: Option<String>,
    /// `--disable-hybrid-kv-cache-manager`: every attention layer keeps full
    /// KV (one group; sliding-window and chunked layers sized as full).
    pub disable_hybrid_kv_cache_manager: Option<bool>,
}

/// `engine.kv_offload:`, as written (resolved in `kv_offload.rs`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvOffloadSpec {
    /// Host memory for KV per GPU, GiB (vLLM's `cpu_bytes_to_use` per rank).
    pub cpu_gib: Option<f64>,
    /// Or the tier's size in blocks, as a vLLM log reports it
    /// (`num_cpu_blocks`; BLIS's `cpu_kv_blocks`).
    pub cpu_blocks: Option<u32>,
    /// One GPU's host link, Gbit/s one direction (default: PCIe Gen5 x16
    /// as measured, 400 Gbit/s = 50 GB/s).
    pub bandwidth_gbps: Option<f64>,
    /// `all` (every computed block, vLLM's) or `evicted` (only blocks HBM
    /// evicts).
    pub policy: Option<String>,
    /// A local disk tier below the CPU one, GiB per GPU (LMCache's
    /// `local_disk`); absent: none.
    pub disk_gib: Option<f64>,
    /// The disk's read bandwidth per GPU, Gbit/s (required with `disk_gib`).
    pub disk_bandwidth_gbps: Option<f64>,
}

/// `engine.lora:`, as written (resolved in `scenario/lora.rs`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraSpec {
    /// `--max-loras` (default 1).
    pub max_loras: Option<u32>,
    /// `--max-lora-rank` (default 16).
    pub max_lora_rank: Option<u32>,
    /// `--max-cpu-loras` (default `max_loras`).
    pub max_cpu_loras: Option<u32>,
    /// Every adapter load takes this long, ms (instead of the bandwidths).
    pub load_ms: Option<f64>,
    /// Host-to-GPU bandwidth for an adapter in the CPU cache, Gbit/s.
    pub cpu_bandwidth_gbps: Option<f64>,
    /// Disk-to-host bandwidth for an adapter that is not, Gbit/s.
    pub disk_bandwidth_gbps: Option<f64>,
}

/// `engine.speculative:`, as written; resolved by `speculative.rs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeSpec {
    /// `eagle`, `mtp`, `ngram` or `draft_model`.
    pub method: Option<String>,
    /// Drafts proposed per step (`num_speculative_tokens`).
    pub k: Option<u32>,
    /// Per-position acceptance rates α_1..α_k (non-increasing, in [0, 1]).
    pub acceptance: Option<Vec<f64>>,
    /// One rate r: α_j = r^j.
    pub rate: Option<f64>,
    /// `draft_model`: the draft's catalog model name.
    pub draft_model: Option<String>,
    /// Seed of the acceptance draws (default 0).
    pub seed: Option<u64>,
}

impl EngineSpec {
    /// These arguments over `base`: each one given here wins (a pool's
    /// `engine:` over the scenario's).
    pub fn over(self, base: &EngineSpec) -> EngineSpec {
        EngineSpec {
            max_num_seqs: self.max_num_seqs.or(base.max_num_seqs),
            max_num_batched_tokens: self.max_num_batched_tokens.or(base.max_num_batched_tokens),
            max_model_len: self.max_model_len.or(base.max_model_len),
            block_size: self.block_size.or(base.block_size),
            gpu_memory_utilization: self.gpu_memory_utilization.or(base.gpu_memory_utilization),
            kv_cache_dtype: self.kv_cache_dtype.or(base.kv_cache_dtype),
            num_gpu_blocks: self.num_gpu_blocks.or(base.num_gpu_blocks),
            enable_prefix_caching: self.enable_prefix_caching.or(base.enable_prefix_caching),
            long_prefill_token_threshold: self.long_prefill_token_threshold.or(base.long_prefill_token_threshold),
            async_scheduling: self.async_scheduling.or(base.async_scheduling),
            enforce_eager: self.enforce_eager.or(base.enforce_eager),
            vllm_version: self.vllm_version.or_else(|| base.vllm_version.clone()),
            scheduler_reserve_full_isl: self.scheduler_reserve_full_isl.or(base.scheduler_reserve_full_isl),
            lone_request_skips_prefill_threshold: self
                .lone_request_skips_prefill_threshold
                .or(base.lone_request_skips_prefill_threshold),
            free_uncached_blocks_first: self.free_uncached_blocks_first.or(base.free_uncached_blocks_first),
            kv_offload: self.kv_offload.or_else(|| base.kv_offload.clone()),
            lora: self.lora.or_else(|| base.lora.clone()),
            speculative: self.speculative.or_else(|| base.speculative.clone()),
            scheduling_policy: self.scheduling_policy.or_else(|| base.scheduling_policy.clone()),
            disable_hybrid_kv_cache_manager: self
                .disable_hybrid_kv_cache_manager
                .or(base.disable_hybrid_kv_cache_manager),
        }
    }
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
    /// [+ beta[3]·decode_context_tokens]`, microseconds: BLIS's
    /// coefficients, or the same as named constants (keys of
    /// `LinearConstants`, as `blis-sweep fit` writes them), a file of them
    /// and inline keys each overriding the one before.
    Linear {
        /// Coefficients, µs.
        beta: Option<Vec<f64>>,
        /// Path to a constants YAML, relative to the scenario file.
        constants_file: Option<String>,
        /// Constants given inline.
        constants: Option<serde_json::Value>,
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
    Linear { beta: Option<Vec<f64>>, constants_file: Option<String>, constants: Option<serde_json::Value> },
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
                    Some(ModelKind::Linear) => Err(E::custom(
                        "`linear` needs coefficients: use {kind: linear, beta: [b0, b1, b2]} or {kind: linear, constants_file: FITTED.yaml}",
                    )),
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
                    LatencyTable::Linear { beta, constants_file, constants } => {
                        LatencySpec::Linear { beta, constants_file, constants }
                    }
                })
            }
        }
        d.deserialize_any(SpecVisitor)
    }
}

/// `autoscale:`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoscaleSpec {
    /// Fewest replicas (≥ 1).
    pub min: Option<u32>,
    /// Most replicas.
    pub max: Option<u32>,
    /// `queue_depth`, `kv_utilization` or `rps`.
    pub metric: Option<String>,
    /// The metric's target per replica.
    pub target: Option<f64>,
    /// How often the metric is read, s (default 15, HPA's).
    pub scrape_interval_s: Option<f64>,
    /// A new replica's start-up (model load), s.
    pub scale_up_delay_s: Option<f64>,
    /// How long a lower count must be wanted before it is applied, s
    /// (default 300, HPA's downscale stabilisation window).
    pub scale_down_delay_s: Option<f64>,
}
