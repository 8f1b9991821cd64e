//! `engine.kv_offload:` resolved into the simulator's [`KvOffload`]: the
//! CPU tier's size in blocks (host GiB over the bytes one block takes on
//! one GPU, at this engine's tensor parallelism and KV dtype), the host
//! link's bandwidth, and which blocks are stored.

use super::error::{InvalidValue, invalid};
use super::spec::KvOffloadSpec;
use crate::arch::ModelArch;
use crate::sim::{DiskTier, KvOffload, OffloadPolicy};

/// One GPU's host link when `bandwidth_gbps` is not given: PCIe Gen5 x16
/// as measured on H100 hosts, 50 GB/s one direction = 400 Gbit/s, of the
/// 63 GB/s the link carries after 128b/130b encoding ("PCIe Gen5 and the
/// CPU-GPU Bandwidth Bottleneck", fridayswithfaraday.com, 2025: measured
/// host-device copies run 20–40 % below the theoretical peak).
pub(crate) const DEFAULT_BANDWIDTH_GBPS: f64 = 400.0;

/// The CPU tier of an engine of `tp` GPUs serving `model` with KV elements
/// of `kv_dtype_bytes` bytes in blocks of `block_size` tokens; `None` when
/// `engine.kv_offload` is absent.
pub(crate) fn resolve(
    spec: Option<&KvOffloadSpec>,
    model: &ModelArch,
    tp: u64,
    kv_dtype_bytes: u64,
    block_size: u32,
) -> Result<Option<KvOffload>, InvalidValue> {
    let Some(spec) = spec else { return Ok(None) };
    let block_bytes = model.kv_bytes_per_token(tp, kv_dtype_bytes) * u64::from(block_size);
    let cpu_gib = match (spec.cpu_gib, spec.cpu_blocks) {
        (Some(_), Some(_)) => {
            return invalid("engine.kv_offload.cpu_blocks", "give cpu_gib or cpu_blocks, not both");
        }
        (None, None) => {
            return invalid(
                "engine.kv_offload.cpu_gib",
                "is required (or cpu_blocks): host memory for KV per GPU, GiB",
            );
        }
        (None, Some(0)) => return invalid("engine.kv_offload.cpu_blocks", "must be positive"),
        // Exactly that many blocks: the GiB they take, floored back below.
        (None, Some(n)) => (f64::from(n) + 0.5) * block_bytes as f64 / (1u64 << 30) as f64,
        (Some(gib), None) => gib,
    };
    if !(cpu_gib.is_finite() && cpu_gib > 0.0) {
        return invalid("engine.kv_offload.cpu_gib", format!("{cpu_gib} must be a positive number of GiB"));
    }
    let gbps = spec.bandwidth_gbps.unwrap_or(DEFAULT_BANDWIDTH_GBPS);
    if !(gbps.is_finite() && gbps > 0.0) {
        return invalid("engine.kv_offload.bandwidth_gbps", format!("{gbps} must be a positive number of Gbit/s"));
    }
    let policy = match spec.policy.as_deref() {
        None | Some("all") => OffloadPolicy::All,
        Some("evicted") => OffloadPolicy::Evicted,
        Some(other) => {
            return invalid("engine.kv_offload.policy", format!("`{other}` is not a policy: all | evicted"));
        }
    };
    let blocks = (cpu_gib * (1u64 << 30) as f64 / block_bytes.max(1) as f64).floor();
    if blocks < 1.0 {
        return invalid("engine.kv_offload.cpu_gib", format!("{cpu_gib} GiB holds no KV block of {block_bytes} bytes"));
    }
    if blocks > f64::from(u32::MAX) {
        return invalid("engine.kv_offload.cpu_gib", format!("{cpu_gib} GiB is more than 2^32 blocks"));
    }
    let disk = match (spec.disk_gib, spec.disk_bandwidth_gbps) {
        (None, None) => None,
        (None, Some(_)) => {
            return invalid("engine.kv_offload.disk_bandwidth_gbps", "is given without disk_gib");
        }
        (Some(_), None) => {
            // Drives differ tenfold: no default.
            return invalid(
                "engine.kv_offload.disk_bandwidth_gbps",
                "is required with disk_gib: the disk's read Gbit/s",
            );
        }
        (Some(gib), Some(disk_gbps)) => {
            if !(gib.is_finite() && gib > 0.0) {
                return invalid("engine.kv_offload.disk_gib", format!("{gib} must be a positive number of GiB"));
            }
            if !(disk_gbps.is_finite() && disk_gbps > 0.0) {
                return invalid(
                    "engine.kv_offload.disk_bandwidth_gbps",
                    format!("{disk_gbps} must be a positive number of Gbit/s"),
                );
            }
            let blocks = (gib * (1u64 << 30) as f64 / block_bytes.max(1) as f64).floor();
            if !(1.0..=f64::from(u32::MAX)).contains(&blocks) {
                return invalid(
                    "engine.kv_offload.disk_gib",
                    format!("{gib} GiB holds {blocks} KV blocks of {block_bytes} bytes (1 to 2^32 - 1)"),
                );
            }
            Some(DiskTier { blocks: blocks as u32, bandwidth_bytes_per_s: bytes_per_s(disk_gbps) })
        }
    };
    Ok(Some(KvOffload {
        cpu_blocks: blocks as u32,
        block_bytes,
        bandwidth_bytes_per_s: bytes_per_s(gbps),
        policy,
        disk,
    }))
}

/// Gbit/s → bytes/s.
fn bytes_per_s(gbps: f64) -> u64 {
    (gbps * 1e9 / 8.0).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama() -> ModelArch {
        let (id, text) = crate::arch::catalog::model_config("Llama-3.1-8B").expect("in the catalog");
        ModelArch::from_config_json(id, text).unwrap()
    }

    #[test]
    fn sixty_four_gib_of_llama_8b_blocks() {
        let spec = KvOffloadSpec { cpu_gib: Some(64.0), ..KvOffloadSpec::default() };
        let o = resolve(Some(&spec), &llama(), 1, 2, 16).unwrap().unwrap();
        // 128 KiB a token × 16 = 2 MiB a block: 64 GiB / 2 MiB = 32,768.
        assert_eq!(o.block_bytes, 2 << 20);
        assert_eq!(o.cpu_blocks, 32_768);
        assert_eq!(o.bandwidth_bytes_per_s, 50_000_000_000);
        assert_eq!(o.policy, OffloadPolicy::All);
        // tp 2 halves a block on each GPU: twice the blocks.
        assert_eq!(resolve(Some(&spec), &llama(), 2, 2, 16).unwrap().unwrap().cpu_blocks, 65_536);
        // A block count, as a vLLM log gives it, is that many blocks.
        let blocks = KvOffloadSpec { cpu_blocks: Some(1023), ..KvOffloadSpec::default() };
        assert_eq!(resolve(Some(&blocks), &llama(), 1, 2, 16).unwrap().unwrap().cpu_blocks, 1023);
    }

    #[test]
    fn bad_values_name_their_field() {
        let bad = |spec: KvOffloadSpec| resolve(Some(&spec), &llama(), 1, 2, 16).unwrap_err().field;
        let ok = KvOffloadSpec { cpu_gib: Some(1.0), ..KvOffloadSpec::default() };
        assert_eq!(bad(KvOffloadSpec::default()), "engine.kv_offload.cpu_gib");
        assert_eq!(bad(KvOffloadSpec { cpu_gib: Some(-1.0), ..ok.clone() }), "engine.kv_offload.cpu_gib");
        assert_eq!(bad(KvOffloadSpec { cpu_gib: Some(1e-6), ..ok.clone() }), "engine.kv_offload.cpu_gib");
        assert_eq!(bad(KvOffloadSpec { bandwidth_gbps: Some(0.0), ..ok.clone() }), "engine.kv_offload.bandwidth_gbps");
        assert_eq!(bad(KvOffloadSpec { policy: Some("lru".into()), ..ok.clone() }), "engine.kv_offload.policy");
        assert_eq!(bad(KvOffloadSpec { cpu_blocks: Some(8), ..ok.clone() }), "engine.kv_offload.cpu_blocks");
        let none = KvOffloadSpec { cpu_blocks: Some(0), ..KvOffloadSpec::default() };
        assert_eq!(bad(none), "engine.kv_offload.cpu_blocks");
        assert_eq!(resolve(None, &llama(), 1, 2, 16).unwrap(), None);
        let disk = |gib, gbps| KvOffloadSpec { disk_gib: gib, disk_bandwidth_gbps: gbps, ..ok.clone() };
        assert_eq!(bad(disk(Some(8.0), None)), "engine.kv_offload.disk_bandwidth_gbps");
        assert_eq!(bad(disk(None, Some(8.0))), "engine.kv_offload.disk_bandwidth_gbps");
        assert_eq!(bad(disk(Some(0.0), Some(8.0))), "engine.kv_offload.disk_gib");
        let o = resolve(Some(&disk(Some(8.0), Some(56.0))), &llama(), 1, 2, 16).unwrap().unwrap();
        assert_eq!(o.disk, Some(DiskTier { blocks: 4096, bandwidth_bytes_per_s: 7_000_000_000 }));
    }
}
