//! Service-level objectives and goodput.
//!
//! An SLO names latency targets in ms: `ttft_p99_ms`, `itl_p99_ms`,
//! `tpot_p99_ms`, `e2e_p99_ms` (any of them), checked two ways:
//! - `slo_met`: the run's TTFT, ITL (token-weighted), TPOT (one per llm call
//!   of two or more tokens) and E2E at `percentile` (default 99, as the names
//!   say) are within their targets;
//! - per request, as DistServe and vLLM's benchmark define goodput: a request
//!   is good when it completed, every llm node's TTFT and TPOT ((last − first
//!   token) / (tokens − 1), vLLM's benchmark's per-request TPOT) are within
//!   the targets, and its E2E is. Per request the ITL target is judged on
//!   the same TPOT (a request's mean ITL), as it was before `tpot_p99_ms`. `slo_attainment` is the share of
//!   requests that are good (of all requests sent, failed ones not good),
//!   `goodput_rps` good requests per second.
//!   With `classes`, a request is judged by its SLO class's targets and
//!   by its own `slo_target` ([`super::classes`]); `slo_met` keeps the
//!   targets above.
//!
//! Both are judged on the requests sent in the measurement window
//! ([`crate::sim::Window`]), and per second of the window. A request that
//! failed (unservable, rejected by the router, timed out, cut by the
//! horizon) misses every target: it counts above every latency, so the
//! percentile over all the window's requests is within a target only when
//! the completed requests' percentile at `p · requests / completed` is, and
//! never when more than `100 − p` % of them failed.
//!
//! A capacity probe asks more of a run ([`Verdict`]): the window must be long
//! enough to hold the load (ten mean request lifetimes, see
//! [`MIN_TURNOVER`]), and the requests completed within it must keep up with
//! those sent.

use serde::{Deserialize, Serialize};

use super::histogram::Histogram;
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
    /// Target time per output token of an llm call, ms (absent from plans
    /// written before it: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p99_ms: Option<f64>,
    /// Target E2E, ms.
    pub e2e_p99_ms: Option<f64>,
    /// The percentile `slo_met` checks the targets at (default 99).
    pub percentile: Option<f64>,
    /// Per SLO class, its own targets (see [`super::classes`]): a
    /// request's goodput is judged by its class's; `slo_met` by the above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<super::classes::ClassSlos>,
}

impl Slo {
    /// Checks the values: positive finite targets, at least one, a
    /// percentile in (0, 100]. The message names the key.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let targets = self.targets();
        for (key, v) in targets {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err((key.to_owned(), format!("{v} must be a positive number of ms")));
            }
        }
        if targets.iter().all(|(_, v)| v.is_none()) {
            let reason = "give at least one of ttft_p99_ms, itl_p99_ms, tpot_p99_ms, e2e_p99_ms".to_owned();
            return Err(("ttft_p99_ms".to_owned(), reason));
        }
        if let Some(p) = self.percentile
            && !(p > 0.0 && p <= 100.0)
        {
            return Err(("percentile".to_owned(), format!("{p} must be in (0, 100]")));
        }
        self.classes.as_ref().map_or(Ok(()), super::classes::ClassSlos::validate)
    }

    /// The targets by key, in the order the tables and messages list them.
    pub fn targets(&self) -> [(&'static str, Option<f64>); 4] {
        [
            ("ttft_p99_ms", self.ttft_p99_ms),
            ("itl_p99_ms", self.itl_p99_ms),
            ("tpot_p99_ms", self.tpot_p99_ms),
            ("e2e_p99_ms", self.e2e_p99_ms),
        ]
    }

    /// The percentile `slo_met` checks.
    pub fn at(&self) -> f64 {
        self.percentile.unwrap_or(99.0)
    }

    /// Whether `r` meets every per-request target: its class's (each
    /// dimension the class leaves out, the SLO's) and its own E2E target.
    pub(super) fn good(&self, r: &FinishedRequest) -> bool {
        if r.status != RequestStatus::Completed {
            return false;
        }
        let own = self.classes.as_ref().and_then(|c| c.get(r.request.traffic.class()));
        let pick = |own: Option<f64>, all: Option<f64>| own.or(all);
        let (ttft, itl, tpot_target, e2e) = match own {
            None => (self.ttft_p99_ms, self.itl_p99_ms, self.tpot_p99_ms, self.e2e_p99_ms),
            Some(c) => (
                pick(c.ttft_p99_ms, self.ttft_p99_ms),
                pick(c.itl_p99_ms, self.itl_p99_ms),
                pick(c.tpot_p99_ms, self.tpot_p99_ms),
                pick(c.e2e_p99_ms, self.e2e_p99_ms),
            ),
        };
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
            if !within(ttft, first - start) || !within(itl, tpot) || !within(tpot_target, tpot) {
                return false;
            }
        }
        r.finish_us.is_none_or(|f| {
            within(e2e, f - r.send_us) && r.request.traffic.slo_target_us.is_none_or(|t| f - r.send_us <= t)
        })
    }
}

/// What a run says against its SLO.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct SloOutcome {
    pub(super) met: bool,
    pub(super) attainment: f64,
    pub(super) goodput_rps: f64,
}

/// The window's requests as the verdicts need them.
pub(super) struct Counts<'a> {
    pub(super) requests: u64,
    pub(super) completed: u64,
    pub(super) good: u64,
    pub(super) ttft: &'a Histogram,
    pub(super) itl: &'a Histogram,
    /// One TPOT per llm call of two or more tokens.
    pub(super) tpot: &'a Histogram,
    pub(super) e2e: &'a Histogram,
}

/// A window must last this many mean request lifetimes (E2E) to show a
/// load: by Little's law the requests still in flight when it closes are
/// then at most a tenth of those sent in it, so its throughput is measured
/// to 10 % (a choice: closer would need ten times longer workloads).
pub const MIN_TURNOVER: f64 = 10.0;

/// How far the throughput completed within the window may fall short of the
/// load sent in it: the [`MIN_TURNOVER`] bound on what is still in flight,
/// plus the share of requests the SLO lets miss (`1 − p/100`).
fn throughput_tolerance(slo: &Slo) -> f64 {
    1.0 / MIN_TURNOVER + (1.0 - slo.at() / 100.0)
}

/// What a capacity probe's window shows, with an SLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every target met, the load held and served.
    Met,
    /// A latency target missed at the SLO's percentile.
    Missed,
    /// More than `100 − p` % of the window's requests failed (unservable,
    /// rejected, timed out, unfinished): no percentile can be met.
    RequestsFailed,
    /// The requests completed within the window fell short of those sent by
    /// more than the SLO allows: the server did not keep up.
    Overloaded,
    /// The window holds no request, or lasts fewer than [`MIN_TURNOVER`]
    /// mean request lifetimes: the workload is too short to show this load.
    TooShort,
}

impl Verdict {
    /// As the tables write it.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "missed",
            Verdict::RequestsFailed => "requests_failed",
            Verdict::Overloaded => "overloaded",
            Verdict::TooShort => "too_short",
        }
    }
}

/// The SLO target that binds a run: of the targets the SLO gives, the one
/// whose value over the window's requests, at the percentile the verdict
/// judges, is the largest share of its target (past it when the verdict is
/// `missed`; the closest to it when `met`). The first in
/// [`Slo::targets`]' order on a tie.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    /// The target's key, as the SLO writes it (`tpot_p99_ms`).
    pub metric: String,
    /// The window's value at the judged percentile, ms.
    pub value_ms: f64,
    /// The target, ms.
    pub target_ms: f64,
}

impl Binding {
    /// The share of the target left: 1 − value / target (negative past it).
    pub fn margin(&self) -> f64 {
        1.0 - self.value_ms / self.target_ms
    }
}

/// Each target the SLO gives with the window's value at the judged
/// percentile (µs), or the verdict when no percentile can be judged.
fn judged(s: Slo, c: &Counts<'_>) -> Result<Vec<(&'static str, f64, f64)>, Verdict> {
    if c.requests == 0 {
        return Err(Verdict::TooShort);
    }
    if c.completed == 0 {
        return Err(Verdict::RequestsFailed);
    }
    // The failed requests sit above every target: the p-th percentile over
    // all of them is the completed ones' at p · requests / completed.
    let p = s.at() * c.requests as f64 / c.completed as f64;
    if p > 100.0 {
        return Err(Verdict::RequestsFailed);
    }
    let histograms = [c.ttft, c.itl, c.tpot, c.e2e];
    Ok(s.targets()
        .into_iter()
        .zip(histograms)
        .filter_map(|((key, target), h)| Some((key, h.percentile(p), target?)))
        .collect())
}

/// The latency targets over the window's requests, failed ones counted as
/// misses.
fn targets(s: Slo, c: &Counts<'_>) -> Verdict {
    match judged(s, c) {
        Err(v) => v,
        Ok(values) if values.iter().all(|&(_, us, ms)| us <= ms * 1e3) => Verdict::Met,
        Ok(_) => Verdict::Missed,
    }
}

/// The target that binds the window (none when no percentile can be judged).
pub(super) fn binding(s: Slo, c: &Counts<'_>) -> Option<Binding> {
    let mut best: Option<(&'static str, f64, f64)> = None;
    for (key, us, ms) in judged(s, c).ok()? {
        if best.is_none_or(|(_, bus, bms)| us / (ms * 1e3) > bus / (bms * 1e3)) {
            best = Some((key, us, ms));
        }
    }
    best.map(|(key, us, ms)| Binding { metric: key.to_owned(), value_ms: us / 1e3, target_ms: ms })
}

/// `slo_met`, `slo_attainment` and `goodput_rps` of a run.
pub(super) fn outcome(s: Slo, c: &Counts<'_>, w: Option<&WindowMetrics>) -> SloOutcome {
    let duration_s = w.map_or(0.0, |w| w.duration_s);
    SloOutcome {
        met: targets(s, c) == Verdict::Met,
        attainment: if c.requests > 0 { c.good as f64 / c.requests as f64 } else { 0.0 },
        goodput_rps: if duration_s > 0.0 { c.good as f64 / duration_s } else { 0.0 },
    }
}

/// A capacity probe's verdict on its window `w`.
pub(super) fn verdict(s: Slo, c: &Counts<'_>, w: &WindowMetrics) -> Verdict {
    match targets(s, c) {
        Verdict::Met => {}
        other => return other,
    }
    if w.duration_s * 1e3 < MIN_TURNOVER * w.e2e_mean_ms {
        return Verdict::TooShort;
    }
    if w.throughput_rps < w.offered_rps * (1.0 - throughput_tolerance(&s)) {
        return Verdict::Overloaded;
    }
    Verdict::Met
}

/// The measurement window of a run (see [`crate::sim::Window`]): its
/// bounds, its requests and their latencies, and, with an SLO, the verdict
/// a capacity search takes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct WindowMetrics {
    /// When the warm-up ended, s (null: it never did).
    pub start_s: Option<f64>,
    /// The last send, s.
    pub end_s: f64,
    /// Its length, s.
    pub duration_s: f64,
    /// Requests sent in it.
    pub requests: u64,
    /// Of those, completed.
    pub completed: u64,
    /// Of those, unservable, rejected, timed out or unfinished: SLO misses.
    pub failed: u64,
    /// Requests sent per second of the window.
    pub offered_rps: f64,
    /// Requests completed within the window, per second of it.
    pub throughput_rps: f64,
    #[allow(missing_docs)]
    pub ttft_p99_ms: f64,
    #[allow(missing_docs)]
    pub itl_p99_ms: f64,
    /// p99 of the llm calls' TPOT (absent from outputs written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p99_ms: Option<f64>,
    #[allow(missing_docs)]
    pub e2e_p99_ms: f64,
    #[allow(missing_docs)]
    pub e2e_mean_ms: f64,
    /// With an SLO: whether the window shows the load served within it.
    pub verdict: Option<Verdict>,
    /// With an SLO: the target that binds ([`Binding`]; absent from outputs
    /// written before it, and when no percentile can be judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts<'a>(requests: u64, h: &'a Histogram) -> Counts<'a> {
        Counts { requests, completed: h.count(), good: h.count(), ttft: h, itl: h, tpot: h, e2e: h }
    }

    #[test]
    fn failed_requests_count_above_every_target() {
        let slo = Slo { ttft_p99_ms: Some(2.0), ..Slo::default() };
        let mut h = Histogram::default();
        for _ in 0..99 {
            h.record(1_000);
        }
        // One failed request of 100: the 1 % p99 allows.
        assert_eq!(targets(slo, &counts(100, &h)), Verdict::Met);
        // Two: no percentile of the completed ones can hide them.
        assert_eq!(targets(slo, &counts(101, &h)), Verdict::RequestsFailed);
        // A slow completed request moves the shifted percentile past the target.
        h.record(5_000);
        assert_eq!(targets(slo, &counts(101, &h)), Verdict::Missed);
        // No request at all in the window: nothing shown.
        assert_eq!(targets(slo, &counts(0, &Histogram::default())), Verdict::TooShort);
    }
}
