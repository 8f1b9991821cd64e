//! Service-level objectives and goodput.
//!
//! An SLO names latency targets in ms: `ttft_p99_ms`, `itl_p99_ms`,
//! `e2e_p99_ms` (any of them), checked two ways:
//! - `slo_met`: the run's TTFT, ITL (token-weighted) and E2E at `percentile`
//!   (default 99, as the names say) are within their targets;
//! - per request, as DistServe and vLLM's benchmark define goodput: a request
//!   is good when it completed, every llm node's TTFT and mean ITL (its TPOT)
//!   are within the targets, and its E2E is. `slo_attainment` is the share of
//!   requests that are good (of all requests sent, failed ones not good),
//!   `goodput_rps` good requests per second of the run.

use serde::{Deserialize, Serialize};

use crate::sim::{FinishedRequest, RequestStatus};
use crate::workload::NodeKind;

/// An SLO, as a scenario or a plan writes it.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Target TTFT, ms.
    pub ttft_p99_ms: Option<f64>,
    /// Target inter-token latency, ms.
    pub itl_p99_ms: Option<f64>,
    /// Target E2E, ms.
    pub e2e_p99_ms: Option<f64>,
    /// The percentile `slo_met` checks the targets at (default 99).
    pub percentile: Option<f64>,
}

impl Slo {
    /// Checks the values: positive finite targets, at least one, a
    /// percentile in (0, 100]. The message names the key.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let targets =
            [("ttft_p99_ms", self.ttft_p99_ms), ("itl_p99_ms", self.itl_p99_ms), ("e2e_p99_ms", self.e2e_p99_ms)];
        for (key, v) in targets {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err((key, format!("{v} must be a positive number of ms")));
            }
        }
        if targets.iter().all(|(_, v)| v.is_none()) {
            return Err(("ttft_p99_ms", "give at least one of ttft_p99_ms, itl_p99_ms, e2e_p99_ms".to_owned()));
        }
        if let Some(p) = self.percentile
            && !(p > 0.0 && p <= 100.0)
        {
            return Err(("percentile", format!("{p} must be in (0, 100]")));
        }
        Ok(())
    }

    /// The percentile `slo_met` checks.
    pub fn at(&self) -> f64 {
        self.percentile.unwrap_or(99.0)
    }

    /// Whether `r` meets every per-request target.
    pub(super) fn good(&self, r: &FinishedRequest) -> bool {
        if r.status != RequestStatus::Completed {
            return false;
        }
        let within = |target: Option<f64>, us: u64| target.is_none_or(|ms| us as f64 <= ms * 1e3);
        for (sub, node) in r.request.sub_requests.iter().zip(&r.nodes) {
            if !matches!(sub.kind, NodeKind::Llm(_)) {
                continue;
            }
            let (Some(start), Some(&first), Some(&last)) =
                (node.start_us, node.token_times_us.first(), node.token_times_us.last())
            else {
                continue;
            };
            let n = node.token_times_us.len() as u64;
            let tpot = if n >= 2 { (last - first) / (n - 1) } else { 0 };
            if !within(self.ttft_p99_ms, first - start) || !within(self.itl_p99_ms, tpot) {
                return false;
            }
        }
        r.finish_us.is_none_or(|f| within(self.e2e_p99_ms, f - r.send_us))
    }
}

/// What a run says against its SLO.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct SloOutcome {
    pub(super) met: bool,
    pub(super) attainment: f64,
    pub(super) goodput_rps: f64,
}
