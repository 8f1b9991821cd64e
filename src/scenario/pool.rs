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
    /// Weight bytes on each GPU (with LoRA slots), as the KV capacity
    /// subtracts them.
    pub weight_bytes_per_gpu: f64,
    /// Layers one KV cache group holds (`ModelArch::kv_layout`).
    pub kv_group_layers: u64,
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
        let gpu = if p.hardware.eq_ignore_ascii_case(hardware::CUSTOM) {
            check_custom(&p)?;
            hardware::custom()
        } else {
            let Some(gpu) = hardware::lookup(p.hardware) else {
                return invalid(
                    "hardware",
                    format!(
                        "unknown GPU `{}`; the catalog has {} (or `custom`, with a fitted linear model)",
                        p.hardware,
                        hardware::names().join(", ")
                    ),
                );
            };
            gpu
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
            weight_bytes_per_gpu: resolved.weight_bytes_per_gpu,
            kv_group_layers: resolved.group_layers,
            latency,
            latency_reason,
        })
    }
}

/// What `hardware: custom` needs the scenario to give, since no datasheet
/// does: a fitted (linear) latency model, the KV blocks and the batch
/// limits (vLLM's defaults depend on the device), and one engine.
fn check_custom(p: &PoolSettings) -> Result<(), InvalidValue> {
    if !matches!(p.latency_model, Some(LatencySpec::Linear { .. })) {
        return invalid(
            "latency_model",
            "hardware: custom has no datasheet to price a step from: give latency_model: {kind: linear, constants_file: FITTED.yaml} (fit one with `blis-sweep fit`) or {kind: linear, beta: [b0, b1, b2]}",
        );
    }
    let e = p.engine;
    let missing = [
        ("engine.num_gpu_blocks", e.num_gpu_blocks.is_none(), "vLLM's /metrics reports it in cache_config_info"),
        ("engine.max_num_seqs", e.max_num_seqs.is_none(), "vLLM's default depends on the device"),
        (
            "engine.max_num_batched_tokens",
            e.max_num_batched_tokens.is_none(),
            "vLLM's default depends on the device (2048 on a CPU)",
        ),
    ];
    if let Some((field, _, why)) = missing.iter().find(|m| m.1) {
        return invalid(field, format!("missing: hardware: custom needs it given ({why})"));
    }
    if e.lora.is_some() {
        return invalid(
            "engine.lora",
            "LoRA on hardware: custom is not modelled: its adapters are priced from a GPU's peaks",
        );
    }
    if p.tp.is_some_and(|tp| tp != 1) || p.dp.is_some_and(|dp| dp != 1) {
        let field = if p.tp.is_some_and(|tp| tp != 1) { "tp" } else { "dp" };
        return invalid(
            field,
            "hardware: custom is one engine priced as a whole by its fitted model: leave tp and dp at 1",
        );
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::latency::{LatencyModel, StepBatch};
    use crate::scenario::{ScenarioSpec, resolve};

    const CUSTOM: &str = "model: llama-3.1-8b\nhardware: custom\n";
    const LIMITS: &str =
        "engine: {num_gpu_blocks: 8192, block_size: 32, max_num_seqs: 64, max_num_batched_tokens: 2048}\n";

    fn resolved(yaml: &str) -> Result<crate::scenario::Deployment, (String, String)> {
        let spec: ScenarioSpec = serde_saphyr::from_str(yaml).unwrap();
        resolve(spec, Path::new("."), "t").map_err(|e| (e.field, e.reason))
    }

    /// A custom device is what its scenario says: the blocks and limits
    /// given, steps priced by the fitted line (named constants over beta).
    #[test]
    fn a_custom_device_runs_on_what_the_scenario_gives() {
        let d = resolved(&format!(
            "{CUSTOM}{LIMITS}latency_model: {{kind: linear, beta: [4000, 2, 50], constants: {{request_overhead_us: 3000}}}}\n"
        ))
        .unwrap();
        let p = d.serving();
        assert_eq!((p.gpu.name, p.engine.num_gpu_blocks, p.engine.block_size), ("custom", 8192, 32));
        assert_eq!((p.engine.max_num_seqs, p.engine.max_num_batched_tokens), (64, 2048));
        assert_eq!(p.latency.step_time_us(&StepBatch { decodes: 2, ..StepBatch::default() }), 4100);
        assert_eq!(p.latency.request_overhead_us(), 3000);
        assert_eq!(p.latency.constants()["step_us"], 4000.0);
    }

    /// Everything a datasheet would have given is asked for by name.
    #[test]
    fn a_custom_device_is_refused_what_it_cannot_have() {
        let linear = "latency_model: {kind: linear, beta: [4000, 2, 50]}\n";
        let field = |yaml: &str| resolved(yaml).unwrap_err().0;
        assert_eq!(field(&format!("{CUSTOM}{LIMITS}")), "latency_model");
        assert_eq!(field(&format!("{CUSTOM}{LIMITS}latency_model: roofline\n")), "latency_model");
        assert_eq!(field(&format!("{CUSTOM}{linear}")), "engine.num_gpu_blocks");
        let no_seqs = "engine: {num_gpu_blocks: 10, max_num_batched_tokens: 2048}\n";
        assert_eq!(field(&format!("{CUSTOM}{linear}{no_seqs}")), "engine.max_num_seqs");
        assert_eq!(field(&format!("{CUSTOM}{LIMITS}{linear}tp: 2\n")), "tp");
        assert_eq!(field(&format!("{CUSTOM}{LIMITS}latency_model: {{kind: linear}}\n")), "latency_model");
        let (f, why) =
            resolved(&format!("{CUSTOM}{LIMITS}latency_model: {{kind: linear, constants: {{step_us: -1}}}}\n"))
                .unwrap_err();
        assert_eq!(f, "latency_model.constants");
        assert!(why.starts_with("step_us"), "{why}");
        assert!(resolved("model: llama-3.1-8b\nhardware: V100\n").unwrap_err().1.contains("`custom`"));
    }
}
