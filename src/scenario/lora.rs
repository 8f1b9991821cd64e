//! `engine.lora:` resolved for one engine: vLLM's defaults filled in
//! (`vllm/config/lora.py` `LoRAConfig`: `max_loras` 1, `max_lora_rank` 16,
//! `max_cpu_loras` = `max_loras`), its checks, what a load costs, and the
//! model and GPU numbers the LoRA kernels are priced from, into the
//! simulator's [`LoraConfig`].

use super::error::{InvalidValue, invalid};
use super::spec::LoraSpec;
use crate::arch::{Attention, Gpu, ModelArch};
use crate::latency::LoraPricing;
use crate::sim::{LoraConfig, LoraLoad};
use crate::workload::{LlmCall, NodeKind, Request};

/// The ranks vLLM accepts (`LoRAConfig.max_lora_rank`'s `Literal`).
const RANKS: [u32; 9] = [1, 8, 16, 32, 64, 128, 256, 320, 512];
/// Host to GPU: PCIe Gen5 ×16, 64 GB/s a direction (NVIDIA H100 SXM5
/// datasheet: "PCIe Gen5: 128GB/s", both directions), in Gbit/s.
const CPU_BANDWIDTH_GBPS: f64 = 512.0;
/// Disk to host: one PCIe Gen4 NVMe SSD's sequential read, 7 GB/s (Samsung
/// PM1733 datasheet: 7,000 MB/s), in Gbit/s.
const DISK_BANDWIDTH_GBPS: f64 = 56.0;

/// The LoRA settings of an engine of `tp` GPUs of `gpu` serving `model`
/// (`None` when `spec` is absent).
pub(super) fn resolve(
    model: &ModelArch,
    gpu: &Gpu,
    tp: u64,
    spec: Option<&LoraSpec>,
) -> Result<Option<LoraConfig>, InvalidValue> {
    let Some(spec) = spec else { return Ok(None) };
    if model.moe.is_some() || matches!(model.attention, Attention::Latent { .. }) {
        return invalid(
            "engine.lora",
            format!("LoRA is modelled for dense models with grouped attention; {} is not one", model.name),
        );
    }
    let max_loras = spec.max_loras.unwrap_or(1);
    if max_loras == 0 {
        return invalid("engine.lora.max_loras", "must be at least 1");
    }
    let max_lora_rank = spec.max_lora_rank.unwrap_or(16);
    if !RANKS.contains(&max_lora_rank) {
        return invalid("engine.lora.max_lora_rank", format!("{max_lora_rank}: vLLM accepts one of {RANKS:?}"));
    }
    let max_cpu_loras = spec.max_cpu_loras.unwrap_or(max_loras);
    if max_cpu_loras < max_loras {
        return invalid(
            "engine.lora.max_cpu_loras",
            format!("{max_cpu_loras} is below max_loras = {max_loras}; vLLM requires max_cpu_loras >= max_loras"),
        );
    }
    let load = match (spec.load_ms, spec.cpu_bandwidth_gbps, spec.disk_bandwidth_gbps) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return invalid("engine.lora.load_ms", "give load_ms or the bandwidths, not both");
        }
        (Some(ms), None, None) => {
            if !(ms.is_finite() && (0.0..=3.6e6).contains(&ms)) {
                return invalid("engine.lora.load_ms", format!("{ms} must be a number of ms in [0, 3600000]"));
            }
            LoraLoad::Fixed { us: (ms * 1e3).round() as u64 }
        }
        (None, cpu, disk) => LoraLoad::Bandwidth {
            cpu_bytes_per_s: bytes_per_s("engine.lora.cpu_bandwidth_gbps", cpu.unwrap_or(CPU_BANDWIDTH_GBPS))?,
            disk_bytes_per_s: bytes_per_s("engine.lora.disk_bandwidth_gbps", disk.unwrap_or(DISK_BANDWIDTH_GBPS))?,
        },
    };
    // `every_running_counts` and `skipped_queue_first` are the release's:
    // set where the release is known.
    Ok(Some(LoraConfig {
        max_loras,
        max_lora_rank,
        max_cpu_loras,
        load,
        pricing: pricing(model, gpu, tp),
        every_running_counts: false,
        skipped_queue_first: false,
    }))
}

/// Gbit/s as bytes/s, checked.
fn bytes_per_s(field: &str, gbps: f64) -> Result<u64, InvalidValue> {
    if !(gbps.is_finite() && gbps > 0.0 && gbps <= 1e6) {
        return invalid(field, format!("{gbps} must be a positive number of Gbit/s (at most 1000000)"));
    }
    Ok(((gbps * 1e9 / 8.0).round() as u64).max(1))
}

/// The per-GPU shapes of the LoRA-target modules (see `latency/lora.rs`):
/// column-parallel qkv and gate_up keep their input whole and 1/tp of
/// their output, row-parallel o and down the reverse.
fn pricing(model: &ModelArch, gpu: &Gpu, tp: u64) -> LoraPricing {
    let h = model.hidden_size;
    let q = model.num_heads * model.head_dim;
    let qkv_out = q / tp + 2 * model.num_kv_heads.div_ceil(tp) * model.head_dim;
    let inter = model.intermediate_size / tp;
    // (d_in, d_out) of qkv, o, gate_up, down.
    let modules = [(h, qkv_out), (q / tp, h), (h, 2 * inter), (inter, h)];
    LoraPricing {
        layers: model.num_layers,
        dims_per_layer: modules.iter().map(|(i, o)| i + o).sum(),
        activation_elements_per_layer: modules.iter().map(|(i, o)| i + 2 * o).sum(),
        peak_flops: gpu.bf16_flops as u64,
        bandwidth: gpu.memory_bandwidth as u64,
    }
}

/// Why `request` cannot run on `deployment`: the field (`sub_requests[K].lora`)
/// and the reason, for its first llm node naming a LoRA adapter when some
/// pool has no `engine.lora` (vLLM answers an unknown model name with 404).
pub fn unserved_adapter(deployment: &super::Deployment, request: &Request) -> Option<(String, String)> {
    let pool = deployment.pools.iter().find(|p| p.engine.lora.is_none())?;
    request.sub_requests.iter().enumerate().find_map(|(k, sub)| match &sub.kind {
        NodeKind::Llm(LlmCall { lora: Some(name), .. }) => Some((
            format!("sub_requests[{k}].lora"),
            format!(
                "adapter `{name}`, but pool `{}` of the scenario has no engine.lora (vLLM answers 404 for a model it does not serve)",
                pool.name
            ),
        )),
        _ => None,
    })
}

/// GPU memory vLLM sets aside for the adapters' slots: `max_loras` adapters
/// of `max_lora_rank`, bytes per GPU (allocated before the KV cache is
/// sized, so the cache shrinks by it).
pub(super) fn reserved_bytes(lora: Option<&LoraConfig>) -> f64 {
    lora.map_or(0.0, |l| (u64::from(l.max_loras) * l.pricing.adapter_bytes(l.max_lora_rank)) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::hardware;
    use crate::latency::test_support::model;

    fn spec(yaml: &str) -> LoraSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn resolved(yaml: &str) -> Result<Option<LoraConfig>, InvalidValue> {
        let model = model("Llama-3.1-8B");
        resolve(&model, &hardware::lookup("H100").unwrap(), 1, Some(&spec(yaml)))
    }

    #[test]
    fn defaults_are_vllms_and_loads_follow_the_bandwidths() {
        let c = resolved("{}").unwrap().unwrap();
        assert_eq!((c.max_loras, c.max_lora_rank, c.max_cpu_loras), (1, 16, 1));
        // Rank 16 on Llama-3.1-8B: 68 MiB (71,303,168 bytes); at 64 GB/s
        // 1,115 µs, from disk at 7 GB/s 10,187 µs more.
        assert_eq!(c.pricing.adapter_bytes(16), 71_303_168);
        assert_eq!((c.load_us(false), c.load_us(true)), (1_115, 1_115 + 10_187));
        let fixed = resolved("{max_loras: 4, max_cpu_loras: 8, load_ms: 2.5}").unwrap().unwrap();
        assert_eq!((fixed.load_us(false), fixed.load_us(true)), (2_500, 2_500));
    }

    #[test]
    fn bad_values_name_their_key() {
        for (yaml, field) in [
            ("{max_loras: 0}", "engine.lora.max_loras"),
            ("{max_lora_rank: 12}", "engine.lora.max_lora_rank"),
            ("{max_loras: 4, max_cpu_loras: 2}", "engine.lora.max_cpu_loras"),
            ("{load_ms: 1, cpu_bandwidth_gbps: 10}", "engine.lora.load_ms"),
            ("{load_ms: -1}", "engine.lora.load_ms"),
            ("{disk_bandwidth_gbps: 0}", "engine.lora.disk_bandwidth_gbps"),
        ] {
            assert_eq!(resolved(yaml).unwrap_err().field, field, "{yaml}");
        }
        let moe = model("Mixtral-8x7B");
        let err = resolve(&moe, &hardware::lookup("H100").unwrap(), 2, Some(&spec("{}"))).unwrap_err();
        assert_eq!(err.field, "engine.lora");
    }
}
