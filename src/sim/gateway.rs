//! The gateway in front of the serving router (llm-d's Gateway API
//! Inference Extension, as BLIS models it): admission when a request is
//! sent (`admission.rs`), and flow control, a queue each llm call waits in
//! until the cluster has room for its class (`flow_control.rs`). Both read
//! one saturation signal (below); `hooks.rs` ties them to the simulation.
//! Absent (`router.admission` and `router.flow_control` not given), none of
//! this runs and a run is what it was without it.
//!
//! Why the queue holds llm calls and not whole requests: GIE sits on the
//! HTTP path and queues each call it proxies, so an agent DAG's later calls
//! queue again (and a session's follow-up waits behind a burst that came
//! after it started). A call's TTFT counts from when it became ready, so its
//! wait in the queue is in its TTFT, as a client measures it.

mod admission;
mod flow_control;
mod hooks;

pub use admission::{AdmissionConfig, AdmissionPolicy};
pub use flow_control::{Fairness, FlowControlConfig, QueueOrder};

use self::admission::{Admission, Rejection};
use self::flow_control::FlowQueue;
use super::replica::Replica;
use crate::histogram::Histogram;

/// GIE's saturation detector default queue depth (gateway-api-inference-
/// extension `pkg/epp/saturationdetector`: `QueueDepthThreshold` 5), as
/// BLIS's `utilization` detector takes it.
pub const DEFAULT_QUEUE_DEPTH_THRESHOLD: f64 = 5.0;
/// GIE's default KV cache utilization threshold (`KVCacheUtilThreshold`
/// 0.8, same source).
pub const DEFAULT_KV_CACHE_UTIL_THRESHOLD: f64 = 0.8;

/// How saturated the serving replicas are: the mean over them of
/// `max(waiting / queue_depth_threshold, kv_used / kv_total / kv_cache_util_threshold)`
/// (1: saturated), read live.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Saturation {
    /// Requests waiting on a replica that count as full.
    pub queue_depth_threshold: f64,
    /// KV cache utilization that counts as full.
    pub kv_cache_util_threshold: f64,
}

impl Default for Saturation {
    fn default() -> Self {
        Saturation {
            queue_depth_threshold: DEFAULT_QUEUE_DEPTH_THRESHOLD,
            kv_cache_util_threshold: DEFAULT_KV_CACHE_UTIL_THRESHOLD,
        }
    }
}

impl Saturation {
    /// The saturation of `replicas` now (1 with none: nothing can take a call).
    pub(super) fn of(&self, replicas: &[Replica]) -> f64 {
        if replicas.is_empty() {
            return 1.0;
        }
        let sum: f64 = replicas
            .iter()
            .map(|r| {
                let (used, total) = r.engine.kv_blocks();
                let kv = if total > 0 { f64::from(used) / f64::from(total) } else { 1.0 };
                (f64::from(r.waiting()) / self.queue_depth_threshold).max(kv / self.kv_cache_util_threshold)
            })
            .sum();
        sum / replicas.len() as f64
    }
}

/// `router.admission`, `router.flow_control` and `router.saturation`, resolved.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GatewayConfig {
    /// Admission at send (`None`: every request, as without a gateway).
    pub admission: Option<AdmissionConfig>,
    /// The gateway queue (`None`: calls go to the router when ready).
    pub flow_control: Option<FlowControlConfig>,
    /// The saturation both read.
    pub saturation: Saturation,
}

/// What the gateway did over a run (in the metrics JSON's `gateway` block).
#[derive(Debug, Clone, Default)]
pub struct GatewayStats {
    /// Requests admitted at send.
    pub admitted: u64,
    /// Requests rejected at send: the token bucket held too few tokens.
    pub rejected_token_bucket: u64,
    /// Requests rejected at send: sheddable while the cluster was saturated.
    pub rejected_saturation: u64,
    /// Requests rejected at send: sheddable while its tenant was over budget.
    pub rejected_tenant_budget: u64,
    /// Llm calls that entered the gateway queue.
    pub queued: u64,
    /// Llm calls dispatched from it to the router.
    pub dispatched: u64,
    /// Requests ended by a call shed from the full queue.
    pub shed: u64,
    /// Requests ended by a call whose TTL ran out in the queue (calls of
    /// one request that expire at one tick count once).
    pub expired: u64,
    /// The most calls the queue held at once.
    pub max_depth: u64,
    /// Each dispatched call's wait in the queue, µs.
    pub queue_wait_us: Histogram,
}

/// The gateway's state over a run.
#[derive(Debug)]
pub(super) struct Gateway {
    saturation: Saturation,
    admission: Option<Admission>,
    queue: Option<FlowQueue>,
    pub(super) stats: GatewayStats,
    /// A tick is in the event queue.
    tick_pending: bool,
    /// Dispatch is running (a call it sends may end its request, which
    /// tries dispatch again: that one returns at once), or the run is over.
    pumping: bool,
    /// Scratch for expired and removed calls.
    scratch: Vec<flow_control::Entry>,
}

impl Gateway {
    /// The gateway of `config` in front of replicas offering `sequences`
    /// (`replicas × max_num_seqs`) in all.
    pub(super) fn new(config: GatewayConfig, sequences: u64) -> Gateway {
        Gateway {
            saturation: config.saturation,
            admission: config.admission.map(|a| Admission::new(a, sequences)),
            queue: config.flow_control.map(FlowQueue::new),
            stats: GatewayStats::default(),
            tick_pending: false,
            pumping: false,
            scratch: Vec::new(),
        }
    }

    /// Whether llm calls wait in a queue.
    pub(super) fn queues(&self) -> bool {
        self.queue.is_some()
    }

    /// The run is over (a horizon left calls queued): nothing more is
    /// dispatched while the requests still in flight are reported unfinished.
    pub(super) fn close(&mut self) {
        self.pumping = true;
    }
}

/// The error string of a request rejected at admission.
fn rejection_reason(r: Rejection, admission: &AdmissionConfig) -> String {
    match (r, &admission.policy) {
        (Rejection::TokenBucket, AdmissionPolicy::TokenBucket { capacity, refill_per_s }) => format!(
            "rejected: the token bucket holds fewer tokens than the prompt (router.admission: capacity {capacity}, \
             refill_per_s {refill_per_s})"
        ),
        (Rejection::Saturation, AdmissionPolicy::ShedByClass { threshold }) => format!(
            "rejected: sheddable class while the cluster's saturation is at or above {threshold} \
             (router.admission.saturation_threshold)"
        ),
        (Rejection::TenantBudget, _) => {
            "rejected: sheddable, and its tenant has more requests in flight than its share \
             (router.admission.tenant_budgets)"
                .to_owned()
        }
        _ => unreachable!("a rejection comes from the policy that makes it"),
    }
}
