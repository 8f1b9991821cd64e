//! `pools:`, `kv_transfer:` and `pd:` resolved: each pool through the same
//! parts as a scenario without pools (its keys over the top-level ones),
//! their roles checked together, the KV link's defaults taken from the GPU
//! catalog. Every mistake is named by its key under `pools.<name>.`.

use super::error::{InvalidValue, invalid};
use super::pool::{Pool, PoolSettings, Scenario};
use super::spec::{KvTransferSpec, PdSpec, PoolSpec, Pools};
use crate::arch::Gpu;
use crate::sim::{ConnectorKind, KvTransferConfig, PdDecider, Role};

/// NCCL's own model of one NVLink step (NVIDIA/nccl `src/graph/tuning.cc`,
/// `hwLat[NCCL_HW_NVLINK][NCCL_ALGO_RING][NCCL_PROTO_LL]`), µs: the wire's
/// fixed time on NVLink. The software's delays are the scheduler's: a read
/// starts when the decode replica schedules the request and is seen at the
/// first scheduling after it lands.
const NVLINK_LATENCY_US: f64 = 0.47;

/// 1 byte/s in Gbit/s.
const GBIT_PER_BYTE_S: f64 = 8.0 / 1e9;

/// The interconnects `kv_transfer.interconnect` names.
const INTERCONNECTS: [&str; 2] = ["nvlink", "rdma"];

/// Resolves `pools:` (with `kv_transfer:` and `pd:`).
pub(super) fn resolve(
    scenario: &Scenario,
    pools: Pools,
) -> Result<(Vec<Pool>, KvTransferConfig, PdDecider), InvalidValue> {
    let spec = scenario.spec;
    for (key, given) in [("replicas", spec.replicas.is_some()), ("dp", spec.dp.is_some())] {
        if given {
            return invalid(key, format!("with `pools:`, give `{key}` per pool"));
        }
    }
    if pools.0.is_empty() {
        return invalid("pools", "give at least one pool, e.g. {default: {role: mixed}}");
    }
    let mut resolved = Vec::with_capacity(pools.0.len());
    for (name, p) in pools.0 {
        resolved.push(pool(scenario, &name, p).map_err(|e| under(&format!("pools.{name}"), e))?);
    }
    let has = |role: Role| resolved.iter().any(|p: &Pool| p.role == role);
    let (prefill, decode) = (has(Role::Prefill), has(Role::Decode));
    if !has(Role::Mixed) && !decode {
        return invalid("pools", "no pool serves requests: add a `mixed` or `decode` pool");
    }
    if prefill != decode {
        let (given, missing) = if prefill { ("prefill", "decode") } else { ("decode", "prefill") };
        return invalid("pools", format!("a {given} pool needs a {missing} pool to send its requests to"));
    }
    one_router(&resolved, spec.router.is_some())?;
    if !prefill {
        if spec.kv_transfer.is_some() || spec.pd.is_some() {
            let key = if spec.kv_transfer.is_some() { "kv_transfer" } else { "pd" };
            return invalid(key, "only a deployment with a prefill pool moves KV");
        }
        return Ok((resolved, KvTransferConfig::UNUSED, PdDecider::Always));
    }
    for p in resolved.iter_mut().filter(|p| p.role != Role::Mixed) {
        if p.engine.kv_offload.is_some() {
            // vLLM would need a MultiConnector (Nixl + offloading): not modelled.
            return invalid(
                "engine.kv_offload",
                "KV offload on a prefill or decode pool is not modelled (one KV connector per engine)",
            );
        }
        p.engine.kv_connector = ConnectorKind::Nixl;
    }
    let link = link(&resolved, spec.kv_transfer.clone().unwrap_or_default())?;
    let pd = decider(spec.pd.clone().unwrap_or_default())?;
    Ok((resolved, link, pd))
}

/// One pool: its keys over the scenario's.
fn pool(scenario: &Scenario, name: &str, p: PoolSpec) -> Result<Pool, InvalidValue> {
    let role_name = p.role.as_deref().unwrap_or(name);
    let Some(role) = Role::ALL.into_iter().find(|r| r.name() == role_name) else {
        let names = Role::ALL.map(Role::name).join(", ");
        return match p.role {
            Some(r) => invalid("role", format!("unknown role `{r}`; use {names}")),
            None => invalid("role", format!("missing: the pool's name is not a role, so give one of {names}")),
        };
    };
    if p.dp.is_some_and(|dp| dp > 1) {
        return invalid("dp", "dp > 1 inside a pool is not modelled; give the pool replicas instead");
    }
    let spec = scenario.spec;
    let engine = match p.engine {
        Some(e) => e.over(&spec.engine),
        None => spec.engine.clone(),
    };
    let hardware = p.hardware.as_deref().unwrap_or(&spec.hardware);
    let settings = PoolSettings {
        hardware,
        tp: p.tp.or(spec.tp),
        dtype: p.dtype.or(spec.dtype),
        engine: &engine,
        latency_model: p.latency_model.or_else(|| spec.latency_model.clone()),
        replicas: p.replicas,
        dp: None,
        router: p.router.or_else(|| spec.router.clone()),
    };
    scenario.pool(name, role, settings)
}

/// The pools that serve requests stand behind one router, prefill pools
/// behind another: a router given twice must be the same.
fn one_router(pools: &[Pool], top_level: bool) -> Result<(), InvalidValue> {
    for group in [[Role::Mixed, Role::Decode].as_slice(), &[Role::Prefill]] {
        let mut members = pools.iter().filter(|p| group.contains(&p.role));
        let Some(first) = members.next() else { continue };
        if let Some(other) = members.find(|p| p.router != first.router) {
            let why = if top_level { "" } else { " (or once at the top level)" };
            return invalid(
                &format!("pools.{}.router", other.name),
                format!(
                    "differs from pool `{}`'s: {} pools stand behind one router; give it once{why}",
                    first.name,
                    if group.len() == 1 { "prefill" } else { "the serving (mixed and decode)" }
                ),
            );
        }
    }
    Ok(())
}

/// `kv_transfer:`: the link into each decode replica.
fn link(pools: &[Pool], spec: KvTransferSpec) -> Result<KvTransferConfig, InvalidValue> {
    let gpus: Vec<&Gpu> = pools.iter().filter(|p| p.role != Role::Mixed).map(|p| &p.gpu).collect();
    let one_model = gpus.iter().all(|g| g.name == gpus[0].name);
    let all_gpus: u64 = pools.iter().map(Pool::gpus).sum();
    let interconnect = match spec.interconnect.as_deref() {
        Some(i) if INTERCONNECTS.contains(&i) => i,
        Some(other) => {
            return invalid(
                "kv_transfer.interconnect",
                format!("unknown interconnect `{other}`; use {}", INTERCONNECTS.join(" or ")),
            );
        }
        None if one_model && all_gpus <= gpus[0].gpus_per_node => "nvlink",
        None => "rdma",
    };
    // Each GPU of the decode replica reads its own shard over its own port,
    // in parallel with the others (as many as the narrower side has).
    let parallel = pools.iter().filter(|p| p.role != Role::Mixed).map(|p| p.tp).min().unwrap_or(1) as f64;
    let (per_gpu_bytes_s, latency_us) = match interconnect {
        "nvlink" => {
            if !one_model {
                return invalid(
                    "kv_transfer.interconnect",
                    "nvlink joins GPUs of one node, but the prefill and decode pools use different GPUs; use rdma",
                );
            }
            (gpus[0].interconnect_bandwidth, NVLINK_LATENCY_US)
        }
        _ => {
            let slowest = gpus.iter().filter_map(|g| g.inter_node).min_by(|a, b| a.bandwidth.total_cmp(&b.bandwidth));
            match slowest {
                Some(net) if gpus.iter().all(|g| g.inter_node.is_some()) => (net.bandwidth, net.latency_us),
                _ if spec.bandwidth_gbps.is_some() && spec.latency_us.is_some() => (0.0, 0.0),
                _ => {
                    return invalid(
                        "kv_transfer",
                        "the GPU catalog knows no network between nodes for these GPUs; give bandwidth_gbps and latency_us",
                    );
                }
            }
        }
    };
    let bandwidth_gbps = spec.bandwidth_gbps.unwrap_or(per_gpu_bytes_s * GBIT_PER_BYTE_S * parallel);
    if !(bandwidth_gbps.is_finite() && bandwidth_gbps > 0.0) {
        return invalid("kv_transfer.bandwidth_gbps", format!("{bandwidth_gbps} must be a positive number"));
    }
    let latency_us = spec.latency_us.unwrap_or(latency_us);
    if !(latency_us.is_finite() && (0.0..=1e9).contains(&latency_us)) {
        return invalid("kv_transfer.latency_us", format!("{latency_us} must be between 0 and 1e9"));
    }
    Ok(KvTransferConfig { bandwidth_gbps, latency_us: latency_us.round() as u64 })
}

/// `pd:`: which requests are split.
fn decider(spec: PdSpec) -> Result<PdDecider, InvalidValue> {
    match (spec.decider.as_deref().unwrap_or("always"), spec.threshold_tokens) {
        ("always", None) => Ok(PdDecider::Always),
        ("always", Some(_)) => invalid("pd.threshold_tokens", "only the `prefix-threshold` decider takes a threshold"),
        ("prefix-threshold", Some(t)) => Ok(PdDecider::PrefixThreshold { threshold_tokens: t }),
        ("prefix-threshold", None) => invalid(
            "pd.threshold_tokens",
            "missing: the uncached prompt tokens from which a prompt is prefilled remotely",
        ),
        (other, _) => invalid("pd.decider", format!("unknown decider `{other}`; use always or prefix-threshold")),
    }
}

/// `e` of a key under `prefix`.
fn under(prefix: &str, e: InvalidValue) -> InvalidValue {
    InvalidValue { field: format!("{prefix}.{}", e.field), reason: e.reason }
}
