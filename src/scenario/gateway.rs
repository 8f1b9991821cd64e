//! `router.admission`, `router.flow_control` and `router.saturation`, as
//! written and resolved into the simulator's [`GatewayConfig`]: names
//! checked, defaults filled in (BLIS's and llm-d's, each named below).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::{InvalidValue, invalid};
use crate::sim::{
    AdmissionConfig, AdmissionPolicy, Fairness, FlowControlConfig, GatewayConfig, QueueOrder, Saturation,
};

/// BLIS's `--dispatch-tick-interval` default, 1 ms.
const DEFAULT_TICK_MS: f64 = 1.0;
/// GIE's legacy admission sheds sheddable requests from saturation 1.
const DEFAULT_SATURATION_THRESHOLD: f64 = 1.0;

/// `router.admission:`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSpec {
    /// `always` (default), `token-bucket` or `shed-by-class`.
    pub policy: Option<String>,
    /// `token-bucket`: tokens the bucket holds (it starts full).
    pub capacity: Option<u64>,
    /// `token-bucket`: tokens added per second.
    pub refill_per_s: Option<u64>,
    /// `shed-by-class`: saturation from which sheddable classes are rejected (default 1).
    pub saturation_threshold: Option<f64>,
    /// Tenant → share of `replicas × max_num_seqs` its sheddable requests may hold.
    pub tenant_budgets: Option<BTreeMap<String, f64>>,
}

/// `router.flow_control:`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowControlSpec {
    /// `round-robin` (default) or `global-strict`: which tenant's flow goes next in a band.
    pub fairness: Option<String>,
    /// `fifo` (default), `priority` or `deadline`: the order inside a flow.
    pub order: Option<String>,
    /// Calls the queue holds at most (default: no cap).
    pub max_queue: Option<u32>,
    /// A call waiting this long leaves expired, ms (default: never).
    pub ttl_ms: Option<f64>,
    /// `u` of the bands' head-of-line ceilings, in (0, 1] (default 1: off).
    pub usage_limit: Option<f64>,
    /// Dispatch and expiry tick while calls wait, ms (default 1).
    pub tick_ms: Option<f64>,
}

/// `router.saturation:`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaturationSpec {
    /// Requests waiting on a replica that count as full (default 5).
    pub queue_depth_threshold: Option<f64>,
    /// KV cache utilization that counts as full (default 0.8).
    pub kv_cache_util_threshold: Option<f64>,
}

fn positive(field: &str, v: Option<f64>, default: f64) -> Result<f64, InvalidValue> {
    match v {
        None => Ok(default),
        Some(x) if x.is_finite() && x > 0.0 => Ok(x),
        Some(x) => invalid(field, format!("{x} must be a positive number")),
    }
}

fn ms_to_us(field: &str, ms: f64) -> Result<u64, InvalidValue> {
    let us = crate::workload::checked_seconds_to_us(ms / 1e3)
        .map_err(|e| InvalidValue { field: field.to_owned(), reason: format!("{ms} ms: {e}") })?;
    if us == 0 {
        return invalid(field, format!("{ms} ms must be at least 1 µs"));
    }
    Ok(us)
}

/// The gateway the three keys ask for; `None` when neither admission nor
/// flow control is given (saturation alone is then an error: nothing reads it).
pub(super) fn resolve(
    admission: Option<AdmissionSpec>,
    flow_control: Option<FlowControlSpec>,
    saturation: Option<SaturationSpec>,
) -> Result<Option<GatewayConfig>, InvalidValue> {
    if admission.is_none() && flow_control.is_none() {
        if saturation.is_some() {
            return invalid("router.saturation", "read only by router.admission or router.flow_control; give one");
        }
        return Ok(None);
    }
    let s = saturation.unwrap_or_default();
    let saturation = Saturation {
        queue_depth_threshold: positive(
            "router.saturation.queue_depth_threshold",
            s.queue_depth_threshold,
            crate::sim::DEFAULT_QUEUE_DEPTH_THRESHOLD,
        )?,
        kv_cache_util_threshold: positive(
            "router.saturation.kv_cache_util_threshold",
            s.kv_cache_util_threshold,
            crate::sim::DEFAULT_KV_CACHE_UTIL_THRESHOLD,
        )?,
    };
    Ok(Some(GatewayConfig {
        admission: admission.map(resolve_admission).transpose()?,
        flow_control: flow_control.map(resolve_flow_control).transpose()?,
        saturation,
    }))
}

fn resolve_admission(spec: AdmissionSpec) -> Result<AdmissionConfig, InvalidValue> {
    let name = spec.policy.as_deref().unwrap_or("always");
    let bucket_keys = spec.capacity.is_some() || spec.refill_per_s.is_some();
    let policy = match name {
        "always" | "shed-by-class" if bucket_keys => {
            let key = if spec.capacity.is_some() { "capacity" } else { "refill_per_s" };
            return invalid(
                &format!("router.admission.{key}"),
                format!("only the token-bucket policy takes it, not `{name}`"),
            );
        }
        "always" | "token-bucket" if spec.saturation_threshold.is_some() => {
            return invalid(
                "router.admission.saturation_threshold",
                format!("only the shed-by-class policy takes it, not `{name}`"),
            );
        }
        "always" => AdmissionPolicy::Always,
        "token-bucket" => {
            let Some(capacity) = spec.capacity.filter(|&c| c > 0) else {
                return invalid("router.admission.capacity", "token-bucket needs a capacity of at least 1 token");
            };
            let Some(refill_per_s) = spec.refill_per_s else {
                return invalid("router.admission.refill_per_s", "token-bucket needs a refill (tokens per second)");
            };
            AdmissionPolicy::TokenBucket { capacity, refill_per_s }
        }
        "shed-by-class" => AdmissionPolicy::ShedByClass {
            threshold: positive(
                "router.admission.saturation_threshold",
                spec.saturation_threshold,
                DEFAULT_SATURATION_THRESHOLD,
            )?,
        },
        other => {
            return invalid(
                "router.admission.policy",
                format!("unknown policy `{other}`; available: always, token-bucket, shed-by-class"),
            );
        }
    };
    let mut tenant_budgets = Vec::new();
    for (tenant, share) in spec.tenant_budgets.unwrap_or_default() {
        if !(share.is_finite() && share > 0.0 && share <= 1.0) {
            return invalid(
                "router.admission.tenant_budgets",
                format!("`{tenant}`: share {share} must be in (0, 1] (of replicas × max_num_seqs)"),
            );
        }
        tenant_budgets.push((tenant, share));
    }
    Ok(AdmissionConfig { policy, tenant_budgets })
}

fn resolve_flow_control(spec: FlowControlSpec) -> Result<FlowControlConfig, InvalidValue> {
    let fairness = match spec.fairness.as_deref() {
        None | Some("round-robin") => Fairness::RoundRobin,
        Some("global-strict") => Fairness::GlobalStrict,
        Some(other) => {
            return invalid("router.flow_control.fairness", format!("`{other}`: use round-robin or global-strict"));
        }
    };
    let order = match spec.order.as_deref() {
        None | Some("fifo") => QueueOrder::Fifo,
        Some("priority") => QueueOrder::Priority,
        Some("deadline") => QueueOrder::Deadline,
        Some(other) => {
            return invalid("router.flow_control.order", format!("`{other}`: use fifo, priority or deadline"));
        }
    };
    if spec.max_queue == Some(0) {
        return invalid("router.flow_control.max_queue", "must be at least 1 (omit it for no cap)");
    }
    let ttl_us = spec.ttl_ms.map(|ms| ms_to_us("router.flow_control.ttl_ms", ms)).transpose()?;
    let usage_limit = spec.usage_limit.unwrap_or(1.0);
    if !(usage_limit > 0.0 && usage_limit <= 1.0) {
        return invalid(
            "router.flow_control.usage_limit",
            format!("{usage_limit} must be in (0, 1] (1: every band dispatches up to saturation 1)"),
        );
    }
    let tick_us = ms_to_us("router.flow_control.tick_ms", spec.tick_ms.unwrap_or(DEFAULT_TICK_MS))?;
    Ok(FlowControlConfig { fairness, order, max_queue: spec.max_queue, ttl_us, usage_limit, tick_us })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(yaml: &str) -> Result<Option<GatewayConfig>, InvalidValue> {
        let spec: crate::scenario::spec::RouterSpec = serde_saphyr::from_str(yaml).unwrap();
        resolve(spec.admission, spec.flow_control, spec.saturation)
    }

    #[test]
    fn defaults_are_llm_d_s_and_blis_s() {
        assert_eq!(gateway("policy: round-robin").unwrap(), None);
        let g = gateway("flow_control: {}").unwrap().unwrap();
        assert_eq!(g.saturation, Saturation::default());
        let f = g.flow_control.unwrap();
        assert_eq!(
            (f.fairness, f.order, f.max_queue, f.ttl_us, f.usage_limit, f.tick_us),
            (Fairness::RoundRobin, QueueOrder::Fifo, None, None, 1.0, 1000)
        );
        let g = gateway(
            "admission: {policy: token-bucket, capacity: 100, refill_per_s: 10, tenant_budgets: {b: 0.5, a: 0.25}}",
        )
        .unwrap()
        .unwrap();
        let a = g.admission.unwrap();
        assert_eq!(a.policy, AdmissionPolicy::TokenBucket { capacity: 100, refill_per_s: 10 });
        assert_eq!(a.tenant_budgets, [("a".to_owned(), 0.25), ("b".to_owned(), 0.5)]);
        let a = gateway("admission: {policy: shed-by-class}").unwrap().unwrap().admission.unwrap();
        assert_eq!(a.policy, AdmissionPolicy::ShedByClass { threshold: 1.0 });
    }

    #[test]
    fn bad_values_name_their_key() {
        for (yaml, field) in [
            ("admission: {policy: drop-all}", "router.admission.policy"),
            ("admission: {policy: token-bucket, refill_per_s: 1}", "router.admission.capacity"),
            ("admission: {policy: token-bucket, capacity: 0, refill_per_s: 1}", "router.admission.capacity"),
            ("admission: {policy: token-bucket, capacity: 5}", "router.admission.refill_per_s"),
            ("admission: {capacity: 5}", "router.admission.capacity"),
            (
                "admission: {policy: token-bucket, capacity: 5, refill_per_s: 1, saturation_threshold: 1}",
                "router.admission.saturation_threshold",
            ),
            ("admission: {policy: shed-by-class, saturation_threshold: 0}", "router.admission.saturation_threshold"),
            ("admission: {tenant_budgets: {a: 1.5}}", "router.admission.tenant_budgets"),
            ("flow_control: {fairness: lottery}", "router.flow_control.fairness"),
            ("flow_control: {order: lifo}", "router.flow_control.order"),
            ("flow_control: {max_queue: 0}", "router.flow_control.max_queue"),
            ("flow_control: {ttl_ms: -1}", "router.flow_control.ttl_ms"),
            ("flow_control: {ttl_ms: 0}", "router.flow_control.ttl_ms"),
            ("flow_control: {usage_limit: 0}", "router.flow_control.usage_limit"),
            ("flow_control: {tick_ms: 0}", "router.flow_control.tick_ms"),
            ("saturation: {queue_depth_threshold: 5}", "router.saturation"),
            (
                "flow_control: {}\nsaturation: {kv_cache_util_threshold: -1}",
                "router.saturation.kv_cache_util_threshold",
            ),
        ] {
            assert_eq!(gateway(yaml).unwrap_err().field, field, "{yaml}");
        }
    }
}
