//! The gateway's counters in the metrics JSON (`gateway` block): requests
//! admitted and rejected by reason at send, llm calls queued, dispatched,
//! shed and expired in the flow-control queue, the queue's deepest point
//! and its waits. Present only with `router.admission` or
//! `router.flow_control`. A shed or expired call ends its request:
//! `shed` and `expired` count those requests.

use serde::Serialize;

use crate::sim::GatewayStats;

/// A run's gateway counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct GatewayMetrics {
    /// Requests admitted at send.
    pub admitted: u64,
    /// Rejected at send: the token bucket held fewer tokens than the prompt.
    pub rejected_token_bucket: u64,
    /// Rejected at send: sheddable while the cluster was saturated.
    pub rejected_saturation: u64,
    /// Rejected at send: sheddable while its tenant was over its budget.
    pub rejected_tenant_budget: u64,
    /// Llm calls that entered the gateway queue.
    pub queued: u64,
    /// Llm calls dispatched from it.
    pub dispatched: u64,
    /// Requests ended by a call shed from the full queue.
    pub shed: u64,
    /// Requests ended by a call whose TTL ran out in the queue.
    pub expired: u64,
    /// The most calls the queue held at once.
    pub max_depth: u64,
    /// Dispatched calls' wait in the queue, ms: the median.
    pub queue_wait_p50_ms: f64,
    /// The same, 99th percentile.
    pub queue_wait_p99_ms: f64,
}

impl GatewayMetrics {
    /// The metrics of `s`.
    pub fn of(s: &GatewayStats) -> GatewayMetrics {
        GatewayMetrics {
            admitted: s.admitted,
            rejected_token_bucket: s.rejected_token_bucket,
            rejected_saturation: s.rejected_saturation,
            rejected_tenant_budget: s.rejected_tenant_budget,
            queued: s.queued,
            dispatched: s.dispatched,
            shed: s.shed,
            expired: s.expired,
            max_depth: s.max_depth,
            queue_wait_p50_ms: s.queue_wait_us.percentile(50.0) / 1e3,
            queue_wait_p99_ms: s.queue_wait_us.percentile(99.0) / 1e3,
        }
    }
}
