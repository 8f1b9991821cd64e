//! `replicas:` and `router:` resolved into the simulator's
//! [`RouterConfig`]: policy and scorer names checked, weights and intervals
//! bounded, every mistake named by its key.

use super::error::{InvalidValue, invalid};
use super::spec::RouterSpec;
use crate::sim::{Affinity, RouterConfig, RoutingPolicy, Scorer};

/// Most replicas one scenario may declare: each is a whole engine in memory,
/// and a router decision walks them all.
pub(super) const MAX_REPLICAS: u32 = 1024;

/// vLLM's DP coordinator publishes the ranks' queue lengths to the front
/// end at most every 100 ms (`vllm/v1/engine/coordinator.py`,
/// `min_stats_update_interval_ms`).
const DP_STATS_INTERVAL_US: u64 = 100_000;

/// The front end of `dp` data-parallel ranks: vLLM's DP load balancer.
pub(super) fn data_parallel_balancer() -> RouterConfig {
    let policy = RoutingPolicy::named("vllm-dp").expect("vLLM's balancer is a listed policy");
    RouterConfig { policy, refresh_interval_us: DP_STATS_INTERVAL_US, ..RouterConfig::default() }
}

/// Resolves `dp`: data-parallel ranks balanced by vLLM itself, so neither
/// replicas nor a router may be given with it.
pub(super) fn resolve_dp(dp: Option<u32>, replicas: Option<u32>, router: bool) -> Result<u32, InvalidValue> {
    let dp = dp.unwrap_or(1);
    if dp == 0 || dp > MAX_REPLICAS {
        return invalid("dp", format!("{dp} must be between 1 and {MAX_REPLICAS}"));
    }
    if dp > 1 && replicas.is_some_and(|r| r > 1) {
        return invalid(
            "dp",
            "dp > 1 with replicas > 1 (data-parallel groups behind a router) is not modelled; give one or the other",
        );
    }
    if dp > 1 && router {
        return invalid(
            "router",
            "dp ranks are balanced by vLLM's own DP load balancer (policy vllm-dp, 100 ms stats); drop `router` or use replicas",
        );
    }
    Ok(dp)
}

/// Resolves `replicas` and `router`.
pub(super) fn resolve(replicas: Option<u32>, router: Option<RouterSpec>) -> Result<(u32, RouterConfig), InvalidValue> {
    let replicas = replicas.unwrap_or(1);
    if replicas == 0 || replicas > MAX_REPLICAS {
        return invalid("replicas", format!("{replicas} must be between 1 and {MAX_REPLICAS}"));
    }
    let Some(spec) = router else { return Ok((replicas, RouterConfig::default())) };
    let name = spec.policy.as_deref().unwrap_or("round-robin");
    let Some(policy) = RoutingPolicy::named(name) else {
        let available = RoutingPolicy::names().collect::<Vec<_>>().join(", ");
        return invalid("router.policy", format!("unknown policy `{name}`; available: {available}"));
    };
    let policy = if policy.takes_scorers() {
        let scorers = scorers(name, spec.scorers.as_deref())?;
        policy.with_scorers(scorers)
    } else if spec.scorers.is_some() {
        let takers: Vec<_> =
            RoutingPolicy::names().filter(|&n| RoutingPolicy::named(n).is_some_and(|p| p.takes_scorers())).collect();
        return invalid(
            "router.scorers",
            format!("only the `{}` policy takes scorers, not `{name}`", takers.join("`, `")),
        );
    } else {
        policy
    };
    let affinity = match spec.affinity.as_deref() {
        None | Some("node") => Affinity::Node,
        Some("request") => Affinity::Request,
        Some("sibling-group") => Affinity::SiblingGroup,
        Some(other) => {
            return invalid("router.affinity", format!("`{other}`: use `node`, `request` or `sibling-group`"));
        }
    };
    let refresh_interval_us = match spec.refresh_interval_ms {
        None => 0,
        Some(ms) => crate::workload::checked_seconds_to_us(ms / 1e3).map_err(|e| InvalidValue {
            field: "router.refresh_interval_ms".to_owned(),
            reason: format!("{ms} ms: {e}"),
        })?,
    };
    if spec.max_queue == Some(0) {
        return invalid(
            "router.max_queue",
            "must be positive (1 rejects a request when every replica has one waiting)",
        );
    }
    let env = super::router_env::resolve(spec.env.as_ref(), spec.refresh_interval_ms.is_some())?;
    let gateway = super::gateway::resolve(spec.admission, spec.flow_control, spec.saturation)?;
    let config = RouterConfig {
        policy,
        affinity,
        refresh_interval_us,
        max_queue: spec.max_queue,
        seed: spec.seed.unwrap_or(0),
        env,
        gateway,
    };
    Ok((replicas, config))
}

/// The scorers of the policy `policy`, checked.
fn scorers(policy: &str, specs: Option<&[super::spec::ScorerSpec]>) -> Result<Vec<(Scorer, f64)>, InvalidValue> {
    let names = || Scorer::ALL.map(Scorer::name).join(", ");
    let Some(specs) = specs.filter(|s| !s.is_empty()) else {
        return invalid(
            "router.scorers",
            format!("the `{policy}` policy needs scorers, e.g. [{{name: queue, weight: 1}}]; available: {}", names()),
        );
    };
    let mut out: Vec<(Scorer, f64)> = Vec::new();
    for s in specs {
        let Some(scorer) = Scorer::ALL.into_iter().find(|k| k.name() == s.name) else {
            return invalid("router.scorers", format!("unknown scorer `{}`; available: {}", s.name, names()));
        };
        if !(s.weight.is_finite() && s.weight > 0.0) {
            return invalid("router.scorers", format!("`{}`: weight {} must be a positive number", s.name, s.weight));
        }
        if out.iter().any(|(k, _)| *k == scorer) {
            return invalid("router.scorers", format!("`{}` is given twice", s.name));
        }
        out.push((scorer, s.weight));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(yaml: &str) -> Result<(u32, RouterConfig), InvalidValue> {
        let spec: super::super::ScenarioSpec =
            serde_saphyr::from_str(&format!("hardware: H100\n{yaml}")).expect("well-formed");
        resolve(spec.replicas, spec.router)
    }

    #[test]
    fn a_weighted_router_keeps_its_scorers_in_order() {
        let (n, c) = router(
            "replicas: 4\nrouter: {policy: weighted, affinity: request, refresh_interval_ms: 50, max_queue: 8, \
             scorers: [{name: queue, weight: 2}, {name: prefix-cache, weight: 3}]}",
        )
        .unwrap();
        assert_eq!(n, 4);
        assert_eq!(c.policy, RoutingPolicy::weighted(vec![(Scorer::Queue, 2.0), (Scorer::PrefixCache, 3.0)]));
        assert_eq!((c.affinity, c.refresh_interval_us, c.max_queue), (Affinity::Request, 50_000, Some(8)));
        assert_eq!(router("").unwrap(), (1, RouterConfig::default()));
        let (_, c) = router("replicas: 2\nrouter: {policy: power-of-two, seed: 3}").unwrap();
        assert_eq!((c.policy.name(), c.seed), ("power-of-two", 3));
    }

    #[test]
    fn mistakes_name_their_key() {
        for (yaml, field) in [
            ("replicas: 0", "replicas"),
            ("replicas: 5000", "replicas"),
            ("router: {policy: least-loaded}", "router.policy"),
            ("router: {policy: weighted}", "router.scorers"),
            ("router: {policy: weighted, scorers: [{name: queue, weight: 0}]}", "router.scorers"),
            (
                "router: {policy: weighted, scorers: [{name: queue, weight: 1}, {name: queue, weight: 2}]}",
                "router.scorers",
            ),
            ("router: {policy: weighted, scorers: [{name: lora, weight: 1}]}", "router.scorers"),
            ("router: {policy: round-robin, scorers: [{name: queue, weight: 1}]}", "router.scorers"),
            ("router: {affinity: session}", "router.affinity"),
            ("router: {refresh_interval_ms: -1}", "router.refresh_interval_ms"),
            ("router: {max_queue: 0}", "router.max_queue"),
        ] {
            assert_eq!(router(yaml).unwrap_err().field, field, "{yaml}");
        }
    }
}
