//! `autoscale:` resolved into the simulator's [`AutoscaleConfig`]: the
//! replica count of an aggregated deployment following a metric (see
//! `src/sim/autoscale.rs` for what it models). Refused, with the reason,
//! where it is not modelled: a P/D deployment's pools (`pools:`),
//! data-parallel ranks (`dp`), and request affinity (a session pinned to a
//! replica that drains and stops would have nowhere to go).

use super::cluster::MAX_REPLICAS;
use super::error::{InvalidValue, invalid};
use super::pool::Pool;
use super::spec::AutoscaleSpec;
use crate::sim::{Affinity, AutoscaleConfig, ScaleMetric};

/// Kubernetes HPA's default sync period (`--horizontal-pod-autoscaler-sync-period`, 15 s).
const DEFAULT_SCRAPE_INTERVAL_S: f64 = 15.0;

/// Kubernetes HPA's default downscale stabilisation window
/// (`--horizontal-pod-autoscaler-downscale-stabilization`, 5 min).
const DEFAULT_SCALE_DOWN_DELAY_S: f64 = 300.0;

/// The shortest scrape interval: bounds the autoscaler's work (36,000
/// scrapes over an hour, each a walk of the routable replicas).
const MIN_SCRAPE_INTERVAL_S: f64 = 0.1;

fn required<T>(value: Option<T>, key: &str, what: &str) -> Result<T, InvalidValue> {
    value.ok_or_else(|| InvalidValue { field: format!("autoscale.{key}"), reason: format!("missing: give {what}") })
}

/// A duration of `key`, s, as µs: finite, ≥ `min_s`.
fn seconds(value: f64, key: &str, min_s: f64) -> Result<u64, InvalidValue> {
    let field = format!("autoscale.{key}");
    if !(value.is_finite() && value >= min_s) {
        return invalid(&field, format!("{value} s must be a number of at least {min_s} s"));
    }
    crate::workload::checked_seconds_to_us(value).map_err(|e| InvalidValue { field, reason: format!("{value} s: {e}") })
}

/// Applies `autoscale` to the aggregated deployment's pool: the pool gets
/// `max` replicas, `initial` of them (`replicas` if given, else `min`)
/// routable at 0.
pub(super) fn apply(spec: Option<&AutoscaleSpec>, replicas: Option<u32>, pool: &mut Pool) -> Result<(), InvalidValue> {
    let Some(s) = spec else { return Ok(()) };
    let min = required(s.min, "min", "the fewest replicas, e.g. `min: 1`")?;
    let max = required(s.max, "max", "the most replicas, e.g. `max: 8`")?;
    if min == 0 || min > MAX_REPLICAS {
        return invalid("autoscale.min", format!("{min} must be between 1 and {MAX_REPLICAS}"));
    }
    if max < min || max > MAX_REPLICAS {
        return invalid("autoscale.max", format!("{max} must be between min ({min}) and {MAX_REPLICAS}"));
    }
    let names = || ScaleMetric::ALL.map(ScaleMetric::name).join(", ");
    let name = required(s.metric.as_deref(), "metric", &format!("one of {}", names()))?;
    let Some(metric) = ScaleMetric::ALL.into_iter().find(|m| m.name() == name) else {
        return invalid("autoscale.metric", format!("unknown metric `{name}`; available: {}", names()));
    };
    let target = required(s.target, "target", "the metric's target per replica, e.g. `target: 4`")?;
    if !(target.is_finite() && target > 0.0) || (metric == ScaleMetric::KvUtilization && target > 1.0) {
        let range = if metric == ScaleMetric::KvUtilization { "in (0, 1]" } else { "a positive number" };
        return invalid("autoscale.target", format!("{target} must be {range} for {}", metric.name()));
    }
    let scrape = s.scrape_interval_s.unwrap_or(DEFAULT_SCRAPE_INTERVAL_S);
    let up = required(s.scale_up_delay_s, "scale_up_delay_s", "a new replica's start-up (model load), s")?;
    let down = s.scale_down_delay_s.unwrap_or(DEFAULT_SCALE_DOWN_DELAY_S);
    let initial = replicas.unwrap_or(min);
    if !(min..=max).contains(&initial) {
        return invalid("replicas", format!("{initial}: an autoscaled pool starts within [min, max] = [{min}, {max}]"));
    }
    if pool.dp > 1 {
        return invalid("autoscale", "dp > 1 (data-parallel ranks of one engine) is not autoscaled; use replicas");
    }
    if pool.router.affinity != Affinity::Node {
        return invalid(
            "autoscale",
            "router.affinity: request and sibling-group pin a session to a replica that may drain and stop; use \
             affinity: node",
        );
    }
    pool.autoscale = Some(AutoscaleConfig {
        min,
        max,
        initial,
        metric,
        target,
        scrape_interval_us: seconds(scrape, "scrape_interval_s", MIN_SCRAPE_INTERVAL_S)?,
        scale_up_delay_us: seconds(up, "scale_up_delay_s", 0.0)?,
        scale_down_delay_us: seconds(down, "scale_down_delay_s", 0.0)?,
        gpus_per_replica: pool.tp,
    });
    // Every replica the pool may have exists from the start (off until provisioned).
    pool.replicas = max;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn resolve(yaml: &str) -> Result<crate::scenario::Deployment, InvalidValue> {
        let spec =
            serde_saphyr::from_str(&format!("model: Llama-3.1-8B\nhardware: H100\n{yaml}")).expect("well-formed");
        crate::scenario::resolve(spec, Path::new("."), "t")
    }

    const GOOD: &str = "autoscale: {min: 1, max: 4, metric: queue_depth, target: 4, scale_up_delay_s: 60}\n";

    #[test]
    fn an_autoscaled_pool_has_max_replicas_and_hpa_defaults() {
        let d = resolve(GOOD).unwrap();
        let c = d.run_config();
        assert_eq!(c.pools[0].replicas, 4);
        let a = c.autoscale.unwrap();
        assert_eq!((a.min, a.max, a.initial, a.metric, a.target), (1, 4, 1, ScaleMetric::QueueDepth, 4.0));
        assert_eq!(
            (a.scrape_interval_us, a.scale_up_delay_us, a.scale_down_delay_us),
            (15_000_000, 60_000_000, 300_000_000)
        );
        assert_eq!(a.gpus_per_replica, 1);
        let d = resolve(&format!("replicas: 3\ntp: 2\n{GOOD}")).unwrap();
        let a = d.run_config().autoscale.unwrap();
        assert_eq!((a.initial, a.gpus_per_replica), (3, 2));
        assert!(resolve("").unwrap().run_config().autoscale.is_none());
    }

    #[test]
    fn mistakes_name_their_key() {
        let ok = "metric: rps, target: 2, scale_up_delay_s: 30";
        for (yaml, field) in [
            (format!("autoscale: {{max: 4, {ok}}}"), "autoscale.min"),
            (format!("autoscale: {{min: 0, max: 4, {ok}}}"), "autoscale.min"),
            (format!("autoscale: {{min: 3, max: 2, {ok}}}"), "autoscale.max"),
            ("autoscale: {min: 1, max: 2, metric: gpu, target: 1, scale_up_delay_s: 1}".to_owned(), "autoscale.metric"),
            ("autoscale: {min: 1, max: 2, metric: rps, target: 0, scale_up_delay_s: 1}".to_owned(), "autoscale.target"),
            (
                "autoscale: {min: 1, max: 2, metric: kv_utilization, target: 80, scale_up_delay_s: 1}".to_owned(),
                "autoscale.target",
            ),
            ("autoscale: {min: 1, max: 2, metric: rps, target: 1}".to_owned(), "autoscale.scale_up_delay_s"),
            (format!("autoscale: {{min: 1, max: 4, scrape_interval_s: 0, {ok}}}"), "autoscale.scrape_interval_s"),
            (format!("autoscale: {{min: 1, max: 4, scale_down_delay_s: -1, {ok}}}"), "autoscale.scale_down_delay_s"),
            (format!("replicas: 5\nautoscale: {{min: 1, max: 4, {ok}}}"), "replicas"),
            (format!("dp: 2\nautoscale: {{min: 1, max: 4, {ok}}}"), "autoscale"),
            (format!("router: {{affinity: request}}\nautoscale: {{min: 1, max: 4, {ok}}}"), "autoscale"),
        ] {
            assert_eq!(resolve(&yaml).unwrap_err().field, field, "{yaml}");
        }
    }
}
