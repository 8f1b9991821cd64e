//! One pool of a deployment resolved from its settings (its own keys or
//! the scenario's): GPU, tensor parallelism, dtype, engine, latency model,
//! replicas and router, through the parts in `engine.rs`, `latency.rs` and
//! `cluster.rs`. A scenario without `pools:` is one such pool.

use std::path::Path;

use super::error::{InvalidValue, invalid};
use super::spec::{self, LatencySpec, ScenarioSpec};
use super::vllm_version::VllmVersion;
use super::{cluster, engine, latency};
use crate::arch::{Dtype, Gpu, KvCacheDtype, ModelArch, catalog, hardware};
use crate::latency::StepPricer;
use crate::sim::{EngineConfig, Role, RouterConfig};

/// One pool of a deployment, resolved.
#[derive(Debug, Clone)]
pub struct Pool {
    /// As `pools:` names it (`default` without `pools:`).
    pub name: String,
    /// What its replicas do.
    pub role: Role,
    /// GPU datasheet.
    pub gpu: Gpu,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Serving dtype.
    pub dtype: Dtype,
    /// The vLLM release whose scheduler its engines behave as.
    pub vllm_version: VllmVersion,
    /// Scheduler and KV-cache settings.
    pub engine: EngineConfig,
    /// `gpu_memory_utilization` used for the KV capacity.
    pub gpu_memory_utilization: f64,
    /// `kv_cache_dtype`.
    pub kv_cache_dtype: KvCacheDtype,
    /// True when `num_gpu_blocks` was computed rather than given.
    pub kv_capacity_computed: bool,
    /// The step pricer.
    pub latency: StepPricer,
    /// Why that latency model prices it (see [`Deployment::latency_reason`]).
    pub latency_reason: String,
    /// Identical replicas.
    pub replicas: u32,
    /// The router the scenario asked for.
    pub router: RouterConfig,
    /// Data-parallel ranks of one engine (1: none).
    pub dp: u32,
    /// Its data-parallel ranks step together (an MoE model).
    pub lockstep: bool,
    /// Its replica count follows a metric (`autoscale:`; then `replicas`
    /// is its `max`, and [`Pool::gpus`] its most).
    pub autoscale: Option<crate::sim::AutoscaleConfig>,
}

impl Pool {
    /// Engines the simulator runs for it: its data-parallel ranks, else its
    /// replicas.
    pub fn engines(&self) -> u32 {
        if self.dp > 1 { self.dp } else { self.replicas.max(1) }
    }

    /// The router in front of its engines: vLLM's DP load balancer over the
    /// ranks with `dp > 1`, else the scenario's.
    pub fn effective_router(&self) -> RouterConfig {
        if self.dp > 1 { cluster::data_parallel_balancer() } else { self.router.clone() }
    }

    /// GPUs it occupies.
    pub fn gpus(&self) -> u64 {
        self.tp * u64::from(self.dp.max(1)) * u64::from(self.replicas.max(1))
    }
}

/// What every pool of a scenario shares.
pub(super) struct Scenario<'a> {
    pub(super) model: &'a ModelArch,
    pub(super) sampling_defaults: Option<catalog::SamplingDefaults>,
    pub(super) spec: &'a ScenarioSpec,
    pub(super) base: &'a Path,
}

/// One pool's settings, its own or the scenario's defaults.
pub(super) struct PoolSettings<'a> {
    pub(super) hardware: &'a str,
    pub(super) tp: Option<u64>,
    pub(super) dtype: Option<Dtype>,
    pub(super) engine: &'a spec::EngineSpec,
    pub(super) latency_model: Option<LatencySpec>,
    pub(super) replicas: Option<u32>,
    pub(super) dp: Option<u32>,
    pub(super) router: Option<spec::RouterSpec>,
}

impl Scenario<'_> {
    /// Resolves one pool of the scenario.
    pub(super) fn pool(&self, name: &str, role: Role, p: PoolSettings) -> Result<Pool, InvalidValue> {
        let (model, spec, base) = (self.model, self.spec, self.base);
        let Some(gpu) = hardware::lookup(p.hardware) else {
            return invalid(
                "hardware",
                format!("unknown GPU `{}`; the catalog has {}", p.hardware, hardware::names().join(", ")),
            );
        };
        let tp = p.tp.unwrap_or(1);
        if tp == 0 || model.num_heads % tp != 0 {
            return invalid(
                "tp",
                format!("{tp} must be positive and divide num_attention_heads = {}", model.num_heads),
            );
        }
        if tp > gpu.gpus_per_node && gpu.inter_node.is_none() {
            return invalid("tp", beyond_one_node(&gpu, tp));
        }
        let dtype = p.dtype.unwrap_or(if model.checkpoint_bytes == 2 { Dtype::Bf16 } else { Dtype::Fp16 });
        let limits = engine::batch_limits(&gpu, p.engine)?;
        let dp = cluster::resolve_dp(p.dp, p.replicas, p.router.is_some())?;
        // An MoE model's ranks share their experts over all `tp × dp` GPUs.
        let ep = tp * u64::from(dp);
        if dp > 1 && model.moe.is_some() && ep > gpu.gpus_per_node && gpu.inter_node.is_none() {
            return invalid("dp", beyond_one_node(&gpu, ep));
        }
        let resolved = engine::resolve(model, &gpu, tp, dp, dtype, p.engine, limits)?;
        let pricing = latency::PricingInputs {
            model,
            gpu: &gpu,
            tp,
            dp,
            dtype,
            engine: p.engine,
            vllm_version: resolved.vllm_version,
            sampling: spec.sampling.unwrap_or_default(),
            sampling_defaults: self.sampling_defaults,
            moe_routing: spec.moe_routing.unwrap_or_default(),
            fp8_gemm_release: spec.fp8_gemm_release.as_deref(),
        };
        let (latency, latency_reason) = latency::resolve(&pricing, p.latency_model, base)?;
        if dp > 1 && model.moe.as_ref().is_some_and(|m| m.dense_layers > 0) {
            return invalid(
                "dp",
                "dp > 1 on an MoE model with dense leading layers (first_k_dense_replace) is not modelled: ranks in lockstep price every layer as MoE",
            );
        }
        if dp > 1 && model.moe.is_some() && !matches!(latency, StepPricer::Roofline(_)) {
            return invalid(
                "dp",
                format!(
                    "dp = {dp} on an MoE model is priced by the roofline model only (the {} model has no expert-parallel MoE); set latency_model: {{kind: roofline}}",
                    latency.kind()
                ),
            );
        }
        let (replicas, router) = cluster::resolve(p.replicas, p.router)?;
        let lockstep = dp > 1 && model.moe.is_some();
        Ok(Pool {
            name: name.to_owned(),
            role,
            replicas,
            router,
            dp,
            lockstep,
            autoscale: None,
            gpu,
            tp,
            dtype,
            engine: resolved.engine,
            vllm_version: resolved.vllm_version,
            gpu_memory_utilization: resolved.gpu_memory_utilization,
            kv_cache_dtype: resolved.kv_cache_dtype,
            kv_capacity_computed: resolved.kv_capacity_computed,
            latency,
            latency_reason,
        })
    }
}

/// Why a group of `gpus` of `gpu` that spans nodes is refused: the catalog
/// knows no network between its nodes.
fn beyond_one_node(gpu: &Gpu, gpus: u64) -> String {
    format!(
        "{gpus} GPUs span {} nodes of {} {}, and the catalog has no network between {} nodes (only NVLink/PCIe within one); at most {} GPUs in one group",
        gpus.div_ceil(gpu.gpus_per_node.max(1)),
        gpu.gpus_per_node,
        gpu.name,
        gpu.name,
        gpu.gpus_per_node
    )
}
