//! One deployment: model, GPU, tensor parallelism, dtype, vLLM engine
//! arguments and latency model. [`spec`] mirrors the file; [`load`] and
//! [`resolve`] turn it into a [`Deployment`] of typed, validated values with
//! vLLM's defaults filled in, so nothing downstream sees strings.
//!
//! [`resolve`] orchestrates the parts, each in its own file: the model and
//! GPU here; `engine` (engine arguments, vLLM's defaults, the KV capacity),
//! `latency` (the step pricer, the default choice and its reason) and
//! `cluster` (replicas, router, data parallelism). The engine and latency
//! parts take one engine's model, GPU, tp, dtype and specs, so each pool of
//! a deployment can be resolved by them alike.

mod autoscale;
mod cluster;
mod engine;
mod error;
mod gateway;
mod kv_capacity;
mod kv_offload;
mod latency;
mod lora;
mod pool;
mod pools;
mod router_env;
pub mod spec;
mod speculative;
mod vllm_version;

use std::path::Path;

use error::invalid;
pub use error::{InvalidValue, ScenarioError};
pub use lora::unserved_adapter;
pub use pool::Pool;
use pool::{PoolSettings, Scenario};
pub use router_env::RouterEnvSpec;
pub use spec::{LatencySpec, Sampling, ScenarioSpec};
pub use vllm_version::{DEFAULT_VLLM_VERSION, ReleaseBehaviour, VllmVersion};

use crate::arch::{ModelArch, catalog};
use crate::latency::StepPricer;
use crate::sim::{Client, KvTransferConfig, PdDecider, PoolConfig, Role, RunConfig};

/// A resolved deployment, ready to simulate.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// Display name.
    pub name: String,
    /// Model architecture.
    pub model: ModelArch,
    /// The latency targets its runs are judged by.
    pub slo: Option<crate::metrics::Slo>,
    /// Every pool (one mixed pool, `default`, without `pools:`), at least
    /// one of which serves requests (mixed or decode).
    pub pools: Vec<Pool>,
    /// How prompt KV moves from prefill to decode replicas.
    pub kv_transfer: KvTransferConfig,
    /// Which requests a P/D deployment splits.
    pub pd: PdDecider,
}

impl Deployment {
    /// How to run this deployment: its engine, latency model, replicas and
    /// router, with an open-loop client, no horizon, timeout or step trace
    /// (override with struct update syntax).
    pub fn run_config(&self) -> RunConfig<StepPricer> {
        let pools = self
            .pools
            .iter()
            .map(|p| PoolConfig {
                name: p.name.clone(),
                role: p.role,
                engine: p.engine.clone(),
                replicas: p.engines(),
                router: p.effective_router(),
                lockstep: p.lockstep,
                latency: p.latency.clone(),
                // The prompt's KV once (unsharded), at the pool's KV dtype.
                kv_bytes_per_token: self.model.kv_bytes_per_token(1, p.kv_cache_dtype.bytes()),
            })
            .collect();
        RunConfig {
            pools,
            kv_transfer: self.kv_transfer,
            pd: self.pd,
            client: Client::OpenLoop,
            measurement: crate::sim::Measurement::default(),
            horizon_us: None,
            replay_horizon: false,
            timeout_us: None,
            step_trace: false,
            autoscale: self.pools[0].autoscale,
        }
    }
}

impl Deployment {
    /// The first pool that serves requests (mixed or decode): the whole
    /// deployment when the scenario has no `pools:`. What a one-line summary
    /// of a deployment (its GPU, TP, engine, latency model) describes.
    pub fn serving(&self) -> &Pool {
        self.pools.iter().find(|p| p.role != Role::Prefill).expect("a deployment has a pool that serves requests")
    }

    /// Each replica's pool, in the simulator's replica order (the order of
    /// `replica` in results and of [`crate::sim::RunSummary::replicas`]):
    /// the pools that serve requests first, then the prefill pools, each in
    /// the order given, a pool's replicas (or data-parallel ranks) together.
    pub fn replica_pools(&self) -> Vec<&Pool> {
        let roles: Vec<Role> = self.pools.iter().map(|p| p.role).collect();
        Role::layout_order(&roles)
            .into_iter()
            .map(|i| &self.pools[i])
            .flat_map(|p| std::iter::repeat_n(p, p.engines() as usize))
            .collect()
    }

    /// GPUs it occupies: over its pools, `tp` per engine, times the
    /// data-parallel ranks, times the replicas.
    pub fn gpus(&self) -> u64 {
        self.pools.iter().map(Pool::gpus).sum()
    }

    /// A run's metrics as this deployment reports them: the latency model
    /// that priced it, and its LoRA adapter loads when it serves adapters
    /// (the one place both `run` and a sweep finish them).
    pub fn label_metrics(
        &self,
        m: crate::metrics::Metrics,
        stats: &crate::sim::EngineStats,
    ) -> crate::metrics::Metrics {
        let m = m.priced_by(self.serving().latency.kind(), &self.serving().latency_reason);
        if self.pools.iter().any(|p| p.engine.lora.is_some()) { m.with_lora(stats) } else { m }
    }

    /// Its pools and each replica's, as the metrics and tables name them.
    pub fn pool_layout(&self) -> crate::metrics::PoolLayout {
        let pools = self
            .pools
            .iter()
            .map(|p| crate::metrics::PoolInfo { name: p.name.clone(), role: p.role, gpus: p.gpus() })
            .collect();
        // Pool names are unique (the keys of `pools:`).
        let of = |r: &Pool| self.pools.iter().position(|p| p.name == r.name).expect("a replica's pool is a pool");
        crate::metrics::PoolLayout::new(pools, self.replica_pools().into_iter().map(of).collect())
    }
}

/// Reads and resolves a scenario file.
pub fn load(path: &Path) -> Result<Deployment, ScenarioError> {
    let file = path.display().to_string();
    let text = crate::yaml::read_file(path)?;
    let spec: ScenarioSpec = crate::yaml::parse_file(path, &text)?;
    let stem = path.file_stem().map_or_else(|| "scenario".to_owned(), |s| s.to_string_lossy().into_owned());
    let base = path.parent().unwrap_or(Path::new("."));
    resolve(spec, base, &stem).map_err(|InvalidValue { field, reason }| ScenarioError::Invalid {
        line: line_of(&text, &field),
        file,
        field,
        reason,
    })
}

/// Line of `field`: its segments followed down the file's nesting (each
/// key looked for inside the block of the one before it), else its
/// innermost segment found as a key anywhere.
fn line_of(text: &str, field: &str) -> u64 {
    let lines: Vec<&str> = text.lines().collect();
    let key_at = |l: &str, key: &str| {
        let l = l.trim_start().trim_start_matches(['{', '"', '\'']);
        l.starts_with(key) && l[key.len()..].trim_start_matches(['"', '\'']).starts_with(':')
    };
    let indent = |l: &str| l.len() - l.trim_start().len();
    // Down the nesting: `pools.decode.engine.max_num_seqs` finds the
    // decode pool's, not the top-level engine's.
    let mut found: Option<usize> = None;
    for key in field.split('.') {
        let (from, parent_indent) = match found {
            None => (0, None),
            Some(i) => (i + 1, Some(indent(lines[i]))),
        };
        let hit = lines[from..]
            .iter()
            .take_while(|l| parent_indent.is_none_or(|p| l.trim().is_empty() || indent(l) > p))
            .position(|l| key_at(l, key) && (parent_indent.is_some() || indent(l) == 0));
        match hit {
            Some(k) => found = Some(from + k),
            None => break,
        }
    }
    if field.contains('.')
        && let Some(i) = found
    {
        return i as u64 + 1;
    }
    // The innermost key written on a line of its own; keys inside a flow
    // mapping (`latency_model: {constants: …}`) are on their parent's line.
    field.rsplit('.').find_map(|key| lines.iter().position(|l| key_at(l, key))).map_or(1, |i| i as u64 + 1)
}

/// Resolves a parsed scenario; `base` is the directory relative paths start
/// from and `default_name` the name used when the scenario has none.
pub fn resolve(mut spec: ScenarioSpec, base: &Path, default_name: &str) -> Result<Deployment, InvalidValue> {
    let (model, sampling_defaults) = resolve_model(&spec, base)?;
    if let Some(slo) = &spec.slo {
        slo.validate().map_err(|(key, reason)| InvalidValue { field: format!("slo.{key}"), reason })?;
    }
    let name = spec.name.clone().unwrap_or_else(|| default_name.to_owned());
    let pool_specs = spec.pools.take();
    let scenario = Scenario { model: &model, sampling_defaults, spec: &spec, base };
    let (pools, kv_transfer, pd) = match pool_specs {
        None => {
            if spec.kv_transfer.is_some() || spec.pd.is_some() {
                let key = if spec.kv_transfer.is_some() { "kv_transfer" } else { "pd" };
                return invalid(key, "only a deployment with a prefill pool moves KV; add `pools:`");
            }
            let settings = PoolSettings {
                hardware: &spec.hardware,
                tp: spec.tp,
                dtype: spec.dtype,
                engine: &spec.engine,
                latency_model: spec.latency_model.clone(),
                replicas: spec.replicas,
                dp: spec.dp,
                router: spec.router.clone(),
            };
            let mut pool = scenario.pool("default", Role::Mixed, settings)?;
            autoscale::apply(spec.autoscale.as_ref(), spec.replicas, &mut pool)?;
            (vec![pool], KvTransferConfig::UNUSED, PdDecider::Always)
        }
        Some(p) => {
            if let Some(name) = p.0.iter().find(|(_, s)| s.autoscale.is_some()).map(|(n, _)| n) {
                return invalid(
                    &format!("pools.{name}.autoscale"),
                    "autoscaling a pool of a P/D deployment is not modelled; autoscale an aggregated deployment (no `pools:`)",
                );
            }
            if spec.autoscale.is_some() {
                return invalid(
                    "autoscale",
                    "autoscaling the pools of a P/D deployment (`pools:`) is not modelled; autoscale an aggregated deployment",
                );
            }
            pools::resolve(&scenario, p)?
        }
    };
    Ok(Deployment { slo: spec.slo, name, model, pools, kv_transfer, pd })
}

/// The model of a scenario, and its published sampling defaults (known for
/// catalog models only: a config.json path carries no
/// generation_config.json).
fn resolve_model(
    spec: &ScenarioSpec,
    base: &Path,
) -> Result<(ModelArch, Option<catalog::SamplingDefaults>), InvalidValue> {
    let mut sampling_defaults = None;
    let model = match (&spec.model_config, &spec.model) {
        (Some(path), _) => {
            let full = base.join(path);
            let text = std::fs::read_to_string(&full).map_err(|e| InvalidValue {
                field: "model_config".to_owned(),
                reason: format!("{}: {e}", full.display()),
            })?;
            let name = spec.model.clone().unwrap_or_else(|| path.clone());
            ModelArch::from_config_json(&name, &text).map_err(|e| InvalidValue {
                field: "model_config".to_owned(),
                reason: format!("{}: {e}", full.display()),
            })?
        }
        (None, Some(id)) => {
            let Some((id, text)) = catalog::model_config(id) else {
                return invalid(
                    "model",
                    format!(
                        "unknown model `{id}`; the catalog has {} (or give model_config: path/to/config.json)",
                        catalog::model_ids().join(", ")
                    ),
                );
            };
            sampling_defaults = catalog::sampling_defaults(id);
            ModelArch::from_config_json(id, text)
                .map_err(|e| InvalidValue { field: "model".to_owned(), reason: e.to_string() })?
        }
        (None, None) => {
            return invalid("model", "missing: give `model` (a catalog id) or `model_config` (a config.json path)");
        }
    };
    Ok((model, sampling_defaults))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::RoutingPolicy;

    fn spec(yaml: &str) -> ScenarioSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn blocks(model: &str, tp: u64) -> u32 {
        let s = spec(&format!(
            "model: {model}\nhardware: H100\ntp: {tp}\ndtype: fp16\nengine: {{max_num_seqs: 128, max_num_batched_tokens: 2048}}\n"
        ));
        resolve(s, Path::new("."), "t").unwrap().serving().engine.num_gpu_blocks
    }

    /// The sampler is priced where the requests sample with the model's
    /// top-k/top-p on a release that sorts for it: Llama-2-7b (top-p 0.9) on
    /// 0.15.1 by default; not `sampling: greedy`, not a release from 0.16,
    /// not CodeLlama-34b (whose generation config sets neither).
    #[test]
    fn the_sampler_follows_the_requests_the_model_and_the_release() {
        use crate::latency::LatencyModel;
        let step = |model: &str, extra: &str| {
            let s = spec(&format!("model: {model}\nhardware: H100\n{extra}"));
            let d = resolve(s, Path::new("."), "t").unwrap();
            d.serving().latency.step_time_us(&crate::latency::StepBatch {
                decodes: 64,
                decode_context_tokens: 64_000,
                spec_tokens: 0,
                ..Default::default()
            })
        };
        let old = "engine: {vllm_version: 0.15.1}\n";
        let sampled = step("Llama-2-7b", old);
        let greedy = step("Llama-2-7b", &format!("sampling: greedy\n{old}"));
        // 64 rows × 32,000 logits × 3,812 µs / (256 × 131,072) = 232.6 µs.
        assert!((sampled as f64 - greedy as f64 - 232.6).abs() <= 1.0, "{sampled} {greedy}");
        assert_eq!(step("Llama-2-7b", "engine: {vllm_version: 0.16.0}\n"), greedy);
        assert_eq!(step("Llama-2-7b", ""), greedy);
        assert_eq!(step("CodeLlama-34b", old), step("CodeLlama-34b", &format!("sampling: greedy\n{old}")));
        assert!(
            serde_saphyr::from_str::<ScenarioSpec>("model: Llama-2-7b\nhardware: H100\nsampling: nucleus\n").is_err()
        );
    }

    /// vLLM 0.15.1 on H100 at utilisation 0.9 reported these block counts
    /// (`../shared/data/blis-vllm-h100/experiments.csv`, kv_blocks_total_gpu).
    #[test]
    fn kv_capacity_matches_measured_vllm() {
        let llama = blocks("Llama-2-7b", 1);
        assert_eq!(llama, 7462);
        let codellama = f64::from(blocks("CodeLlama-34b", 2));
        assert!((codellama / 26602.0 - 1.0).abs() < 0.005, "{codellama}");
    }

    #[test]
    fn defaults_follow_vllm() {
        let d = resolve(spec("model: Llama-3.1-8B\nhardware: H100\n"), Path::new("."), "x").unwrap();
        assert_eq!(
            (d.serving().engine.max_num_seqs, d.serving().engine.max_num_batched_tokens, d.serving().engine.block_size),
            (1024, 8192, 16)
        );
        assert!(d.serving().engine.enable_prefix_caching);
        assert_eq!(d.name, "x");
        let a100 = resolve(spec("model: Llama-3.1-8B\nhardware: A100-SXM\n"), Path::new("."), "x").unwrap();
        assert_eq!((a100.serving().engine.max_num_seqs, a100.serving().engine.max_num_batched_tokens), (256, 2048));
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases = [
            ("model: Nope\nhardware: H100\n", "model"),
            ("model: Llama-2-7b\nhardware: V100\n", "hardware"),
            ("model: Llama-2-7b\nhardware: H100\ntp: 3\n", "tp"),
            ("model: Llama-2-70b\nhardware: RTX4090\n", "tp"),
            ("model: Llama-2-7b\nhardware: H100\nlatency_model: vidur\n", "latency_model"),
            ("model: Llama-2-7b\nhardware: RTX4090\nlatency_model: kernels\n", "latency_model"),
            ("model: Llama-2-7b\nhardware: A100\ndtype: fp8\nlatency_model: kernels\n", "latency_model"),
            (
                "model: Llama-2-7b\nhardware: H100\nengine: {max_num_seqs: 512, max_num_batched_tokens: 256}\n",
                "engine.max_num_batched_tokens",
            ),
            // Eager launches are counted from the kernels model's kernels.
            ("model: Llama-2-7b\nhardware: RTX4090\nengine: {enforce_eager: true}\n", "engine.enforce_eager"),
        ];
        for (yaml, field) in cases {
            let e = resolve(spec(yaml), Path::new("."), "x").unwrap_err();
            assert_eq!(e.field, field, "{yaml}: {}", e.reason);
        }
    }

    #[test]
    fn dp_makes_lockstep_ranks_with_the_experts_spread_over_them() {
        let moe = "model: Qwen3-30B-A3B\nhardware: H100\nlatency_model: {kind: roofline}\n";
        let one = resolve(spec(moe), Path::new("."), "x").unwrap();
        let two = resolve(spec(&format!("{moe}dp: 2\n")), Path::new("."), "x").unwrap();
        // Each rank holds half the experts, so more KV fits beside them.
        assert!(
            two.serving().engine.num_gpu_blocks
                > one.serving().engine.num_gpu_blocks + one.serving().engine.num_gpu_blocks / 4
        );
        let c = &two.run_config().pools[0];
        assert_eq!((c.replicas, c.lockstep, &c.router.policy), (2, true, &RoutingPolicy::named("vllm-dp").unwrap()));
        assert_eq!(c.router.refresh_interval_us, 100_000);
        let c1 = &one.run_config().pools[0];
        assert_eq!((c1.replicas, c1.lockstep), (1, false));
        // A dense model's ranks are independent engines behind the same balancer.
        let dense = resolve(spec("model: Llama-3.1-8B\nhardware: H100\ndp: 3\n"), Path::new("."), "x").unwrap();
        let c = &dense.run_config().pools[0];
        assert_eq!((c.replicas, c.lockstep, &c.router.policy), (3, false, &RoutingPolicy::named("vllm-dp").unwrap()));
        let tp1 = resolve(spec("model: Llama-3.1-8B\nhardware: H100\n"), Path::new("."), "x").unwrap();
        assert_eq!(dense.serving().engine.num_gpu_blocks, tp1.serving().engine.num_gpu_blocks);
        for (yaml, field) in [
            (format!("{moe}dp: 0\n"), "dp"),
            (format!("{moe}dp: 2\nreplicas: 2\n"), "dp"),
            (format!("{moe}dp: 2\nrouter: {{policy: round-robin}}\n"), "router"),
            ("model: Qwen3-30B-A3B\nhardware: H100\ndp: 2\n".to_owned(), "dp"),
        ] {
            let e = resolve(spec(&yaml), Path::new("."), "x").unwrap_err();
            assert_eq!(e.field, field, "{yaml}: {}", e.reason);
        }
    }

    /// DeepSeek-V3 (671 B, FP8 block weights, 16-bit embeddings and LM head)
    /// on 8 GPUs: 78.3 GiB a GPU. The routed experts are on its 58 MoE
    /// layers, not on its 3 dense ones (counting them on all 61 underflowed
    /// to 2^31 GiB).
    #[test]
    fn deepseek_v3_weighs_78_gib_a_gpu_on_8() {
        let text = include_str!("../tests/data/defects/16-deepseek-v3-size/dsv3-config.json");
        let m = ModelArch::from_config_json("DeepSeek-V3", text).unwrap();
        let gib = engine::weight_bytes_per_gpu(&m, 8, 1, 1) / (1u64 << 30) as f64;
        let by_hand = (671_026_404_352.0 + 2.0 * 129_280.0 * 7168.0) / 8.0 / (1u64 << 30) as f64;
        assert!((gib - by_hand).abs() < 1e-9 && (gib - 78.33).abs() < 0.01, "{gib}");
    }

    /// The default model says why it prices a deployment; a named one is
    /// `explicit`, and a named kernels model the tables cannot price is
    /// refused with what they lack.
    #[test]
    fn the_latency_model_says_why_it_was_chosen() {
        let why = |yaml: &str| {
            let d = resolve(spec(yaml), Path::new("."), "x").unwrap();
            format!("{}: {}", d.serving().latency.kind(), d.serving().latency_reason)
        };
        assert_eq!(why("model: Llama-3.1-70B\nhardware: H100\ntp: 4\n"), "kernels: measured H100 kernel tables");
        assert_eq!(
            why("model: Llama-3.1-70B\nhardware: H100\ntp: 4\nengine: {kv_cache_dtype: fp8}\n"),
            "roofline: no measured attention kernels over an FP8 KV cache: the tables hold 16-bit KV (kvbf16)"
        );
        assert_eq!(why("model: Llama-3.1-70B\nhardware: H100\ntp: 4\nlatency_model: roofline\n"), "roofline: explicit");
        assert!(
            why("model: Llama-3.1-70B\nhardware: H100\ntp: 16\n")
                .starts_with("roofline: no measured all-reduce across nodes: tp 16 spans 2 nodes of 8 H100")
        );
        assert_eq!(why("model: Llama-3.1-8B\nhardware: A100\n"), "kernels: measured A100-80G kernel tables");
        assert_eq!(why("model: Llama-3.1-8B\nhardware: L40S\n"), "kernels: measured L40S kernel tables");
        assert_eq!(
            why("model: Llama-3.1-8B\nhardware: A100\ndtype: fp8\n"),
            "roofline: no measured fp8 GEMMs on A100-80G: its tables hold BF16 only"
        );
        assert!(
            why("model: Llama-3.1-8B\nhardware: RTX4090\n")
                .starts_with("roofline: no measured kernel tables for RTX4090")
        );
        let e = resolve(
            spec("model: Llama-3.1-70B\nhardware: H100\ntp: 16\nlatency_model: kernels\n"),
            Path::new("."),
            "x",
        )
        .unwrap_err();
        assert_eq!(e.field, "latency_model");
        assert!(
            e.reason.starts_with("no measured all-reduce across nodes: tp 16 spans 2 nodes of 8 H100"),
            "{}",
            e.reason
        );
        assert!(e.reason.ends_with("; set latency_model: {kind: roofline}"), "{}", e.reason);
    }

    /// A group beyond one node of a GPU the catalog gives no network is
    /// refused, naming the node's size.
    #[test]
    fn groups_beyond_a_node_without_a_network_are_refused() {
        let err = |yaml: &str| resolve(spec(yaml), Path::new("."), "x").unwrap_err();
        let e = err("model: Llama-3.1-70B\nhardware: L40S\ntp: 16\n");
        assert_eq!(e.field, "tp");
        assert!(e.reason.starts_with("16 GPUs span 2 nodes of 8 L40S, and the catalog has no network"), "{}", e.reason);
        let e = err("model: Qwen3-30B-A3B\nhardware: L40S\ntp: 4\ndp: 4\nlatency_model: roofline\n");
        assert_eq!(e.field, "dp");
        // Within a node, or across nodes of HGX GPUs, they run.
        assert!(resolve(spec("model: Llama-3.1-8B\nhardware: L40S\ntp: 8\n"), Path::new("."), "x").is_ok());
        assert!(resolve(spec("model: Llama-3.1-70B\nhardware: H100\ntp: 32\n"), Path::new("."), "x").is_ok());
    }

    #[test]
    fn line_of_finds_nested_keys() {
        let text = "model: a\nengine:\n  max_num_seqs: 4\n";
        assert_eq!(line_of(text, "engine.max_num_seqs"), 3);
        assert_eq!(line_of(text, "hardware"), 1);
        let text = "model: a\nlatency_model: {kind: kernels, constants: {gemm_scale: 0}}\n";
        assert_eq!(line_of(text, "latency_model.constants"), 2);
    }
}
