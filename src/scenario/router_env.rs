//! `router.env:` resolved into the simulator's [`RouterEnv`]: each key a
//! bounded number of ms, and the scrape and KV-event keys refused beside
//! `router.refresh_interval_ms`, which sets both the old way.

use serde::Deserialize;

use super::error::{InvalidValue, invalid};
use crate::sim::RouterEnv;

/// The longest latency, scrape interval or event delay a scenario may give,
/// ms: an hour, far past any router's (llm-d's EPP scrapes every 50 ms;
/// Prometheus every 15 s to 1 min), and far from the simulator's clock.
const MAX_MS: f64 = 3.6e6;

/// `router.env:`, as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterEnvSpec {
    /// From the send to the router's admission decision, ms (default 0).
    pub admission_latency_ms: Option<f64>,
    /// From the routing decision to the replica's front end, ms (default 0).
    pub routing_latency_ms: Option<f64>,
    /// The load views' scrape interval, ms (0: live; default: as
    /// `router.refresh_interval_ms`).
    pub metrics_refresh_ms: Option<f64>,
    /// How late KV store/remove events reach the prefix index, ms (0: live;
    /// default: as `router.refresh_interval_ms`).
    pub kv_event_delay_ms: Option<f64>,
    /// Per-replica scrape phases drawn from `router.seed` (default false).
    pub jitter: Option<bool>,
}

/// Resolves `router.env` (`None` when absent); `refresh_interval_given`:
/// whether `router.refresh_interval_ms` is given too.
pub(super) fn resolve(
    spec: Option<&RouterEnvSpec>,
    refresh_interval_given: bool,
) -> Result<Option<RouterEnv>, InvalidValue> {
    let Some(spec) = spec else { return Ok(None) };
    for (key, given) in [("metrics_refresh_ms", spec.metrics_refresh_ms), ("kv_event_delay_ms", spec.kv_event_delay_ms)]
    {
        if given.is_some() && refresh_interval_given {
            return invalid(
                &format!("router.env.{key}"),
                "router.refresh_interval_ms sets both the view's refresh and the prefix index's; give it or \
                 router.env's metrics_refresh_ms / kv_event_delay_ms, not both",
            );
        }
    }
    let metrics_refresh_us = us("metrics_refresh_ms", spec.metrics_refresh_ms)?;
    if spec.jitter == Some(true) && metrics_refresh_us.is_none_or(|i| i == 0) {
        return invalid("router.env.jitter", "jitters the scrape timer: give router.env.metrics_refresh_ms > 0");
    }
    Ok(Some(RouterEnv {
        admission_latency_us: us("admission_latency_ms", spec.admission_latency_ms)?.unwrap_or(0),
        routing_latency_us: us("routing_latency_ms", spec.routing_latency_ms)?.unwrap_or(0),
        metrics_refresh_us,
        kv_event_delay_us: us("kv_event_delay_ms", spec.kv_event_delay_ms)?,
        jitter: spec.jitter.unwrap_or(false),
    }))
}

/// `router.env.KEY` in µs, checked.
fn us(key: &str, ms: Option<f64>) -> Result<Option<u64>, InvalidValue> {
    let Some(ms) = ms else { return Ok(None) };
    if !(ms.is_finite() && (0.0..=MAX_MS).contains(&ms)) {
        return invalid(&format!("router.env.{key}"), format!("{ms} must be a number of ms in [0, {MAX_MS}]"));
    }
    Ok(Some((ms * 1e3).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(yaml: &str, refresh_interval_given: bool) -> Result<Option<RouterEnv>, InvalidValue> {
        let spec: RouterEnvSpec = serde_saphyr::from_str(yaml).unwrap();
        resolve(Some(&spec), refresh_interval_given)
    }

    #[test]
    fn every_key_in_microseconds() {
        let e = env(
            "{admission_latency_ms: 2, routing_latency_ms: 0.5, metrics_refresh_ms: 50, kv_event_delay_ms: 2000, \
             jitter: true}",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            e,
            RouterEnv {
                admission_latency_us: 2000,
                routing_latency_us: 500,
                metrics_refresh_us: Some(50_000),
                kv_event_delay_us: Some(2_000_000),
                jitter: true,
            }
        );
        let e = env("{}", true).unwrap().unwrap();
        assert_eq!(e, RouterEnv::default(), "absent keys: zero latencies, refresh as router.refresh_interval_ms");
        assert_eq!(resolve(None, false).unwrap(), None);
    }

    #[test]
    fn bad_values_are_named_by_their_key() {
        for (yaml, given, field) in [
            ("{admission_latency_ms: -1}", false, "router.env.admission_latency_ms"),
            ("{routing_latency_ms: .nan}", false, "router.env.routing_latency_ms"),
            ("{metrics_refresh_ms: 4e6}", false, "router.env.metrics_refresh_ms"),
            ("{kv_event_delay_ms: -0.5}", false, "router.env.kv_event_delay_ms"),
            ("{metrics_refresh_ms: 50}", true, "router.env.metrics_refresh_ms"),
            ("{kv_event_delay_ms: 0}", true, "router.env.kv_event_delay_ms"),
            ("{jitter: true}", false, "router.env.jitter"),
            ("{jitter: true, metrics_refresh_ms: 0}", false, "router.env.jitter"),
        ] {
            assert_eq!(env(yaml, given).unwrap_err().field, field, "{yaml}");
        }
        // The latencies go with the old interval.
        assert!(env("{admission_latency_ms: 1, routing_latency_ms: 1}", true).is_ok());
    }
}
