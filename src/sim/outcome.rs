//! What a run measures about each request, and how it leaves the
//! simulation: [`FinishedRequest`] (every node's outcome, with its token
//! times) through a [`ResultSink`]. Rows of files are written elsewhere
//! (`crate::output`): the core knows no file format.

use super::step_trace::EngineStep;
use crate::workload::Request;

/// Why a node did not run to completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeError {
    /// The engine can never serve this call (too long for `max_model_len` or
    /// for the KV cache); the message says which.
    Unservable(String),
    /// Not run because predecessor `0` failed.
    Skipped(u32),
    /// The horizon was reached before the node finished.
    Unfinished,
    /// The client stopped waiting (its request timeout) before the node
    /// finished.
    TimedOut,
    /// The router refused the request on arrival; the message says why.
    Rejected(String),
    /// Shed from the gateway queue (`router.flow_control.max_queue`), or
    /// aborted because another call of its request was; the message says why.
    Shed(String),
    /// Its TTL ran out in the gateway queue (`router.flow_control.ttl_ms`),
    /// or another call of its request's did; the message says how long it waited.
    Expired(String),
    /// A real server's call failed (`observe`): an HTTP error, a dropped
    /// stream, or token counts in its `usage` that are not the workload's;
    /// the message says which. The simulator never produces it.
    Server(String),
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::Unservable(why) => f.write_str(why),
            NodeError::Skipped(p) => write!(f, "not run: predecessor {p} failed"),
            NodeError::Unfinished => f.write_str("unfinished: the horizon was reached"),
            NodeError::TimedOut => f.write_str("timed out: the client stopped waiting"),
            NodeError::Rejected(why) | NodeError::Shed(why) | NodeError::Expired(why) | NodeError::Server(why) => {
                f.write_str(why)
            }
        }
    }
}

/// Everything measured about one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeOutcome {
    /// When it started (entered the scheduler, for llm nodes), µs.
    pub start_us: Option<u64>,
    /// When the engine first admitted it, µs.
    pub scheduled_us: Option<u64>,
    /// Emission time of each output token, µs.
    pub token_times_us: Vec<u64>,
    /// When it finished, µs.
    pub finish_us: Option<u64>,
    /// Why it did not run to completion, if so.
    pub error: Option<NodeError>,
    /// Prompt tokens found in the prefix cache at first admission.
    pub cached_tokens: u32,
    /// Times the engine preempted it.
    pub preemptions: u32,
    /// The replica the router sent it to, in a cluster of more than one
    /// (a split node's decode replica).
    pub replica: Option<u32>,
    /// A split node's prefill replica (prefill/decode disaggregation).
    pub prefill_replica: Option<u32>,
    /// A split node's KV transfer: from the decode replica's request for it
    /// until it landed (waiting for the link included), µs.
    pub kv_transfer_us: u64,
    /// A split node's KV moved from its prefill replica, bytes.
    pub kv_transfer_bytes: u64,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestStatus {
    /// Every node ran.
    Completed,
    /// A node was unservable.
    Unservable,
    /// The horizon cut it short.
    Unfinished,
    /// The client's request timeout cut it short.
    TimedOut,
    /// The router refused it on arrival (`router.max_queue`,
    /// `router.admission`): nothing ran.
    Rejected,
    /// A call of it was shed from the full gateway queue
    /// (`router.flow_control.max_queue`); the rest was aborted.
    Shed,
    /// A call of it waited in the gateway queue past its TTL
    /// (`router.flow_control.ttl_ms`); the rest was aborted.
    Expired,
    /// A call of it failed at a real server (`observe`: [`NodeError::Server`]).
    Failed,
}

impl RequestStatus {
    /// Every status, in declaration order (`status as usize` indexes it).
    pub const ALL: [RequestStatus; 8] = [
        RequestStatus::Completed,
        RequestStatus::Unservable,
        RequestStatus::Unfinished,
        RequestStatus::TimedOut,
        RequestStatus::Rejected,
        RequestStatus::Shed,
        RequestStatus::Expired,
        RequestStatus::Failed,
    ];

    /// Its name in metrics and tables.
    pub fn name(self) -> &'static str {
        match self {
            RequestStatus::Completed => "completed",
            RequestStatus::Unservable => "unservable",
            RequestStatus::Unfinished => "unfinished",
            RequestStatus::TimedOut => "timed_out",
            RequestStatus::Rejected => "rejected",
            RequestStatus::Shed => "shed",
            RequestStatus::Expired => "expired",
            RequestStatus::Failed => "failed",
        }
    }
}

/// A request leaving the simulation.
#[derive(Debug)]
pub struct FinishedRequest {
    /// Position in the input (0-based), for writing results in input order.
    pub index: u64,
    /// The request as read.
    pub request: Request,
    /// One outcome per sub-request.
    pub nodes: Vec<NodeOutcome>,
    /// Arrival, µs (as read; 0 for every request of a closed loop).
    pub arrival_us: u64,
    /// When the client sent it, µs: its arrival, or later when a concurrency
    /// cap or a closed loop made it wait. E2E counts from here. A request
    /// the client still held when a horizon ended the run: the horizon.
    pub send_us: u64,
    /// When its last node finished, µs (completed requests).
    pub finish_us: Option<u64>,
    /// How it ended.
    pub status: RequestStatus,
    /// Sent inside the measurement window ([`super::Window`]): the
    /// requests SLOs, goodput and capacity are judged on.
    pub in_window: bool,
}

/// Where finished requests go: the result writer, the metrics, a test's `Vec`.
pub trait ResultSink {
    /// Called once per request, in completion order.
    fn request_done(&mut self, request: FinishedRequest);

    /// Called once per engine step when the step trace is on
    /// (`Simulation::set_step_trace`), in execution order.
    fn engine_step(&mut self, _step: &EngineStep) {}

    /// Moves emptied token-time buffers of requests already passed on into
    /// `into` while it holds fewer than `SPARE_BUFFERS` (16), for an engine to
    /// reuse. A sink that keeps its requests has none.
    fn reclaim(&mut self, _into: &mut Vec<Vec<u64>>) {}
}

/// Spare token-time buffers an engine keeps at most (see
/// [`ResultSink::reclaim`]): more than the requests a step finishes.
pub(crate) const SPARE_BUFFERS: usize = 16;

impl ResultSink for Vec<FinishedRequest> {
    fn request_done(&mut self, request: FinishedRequest) {
        self.push(request);
    }
}

/// The simulator's clock ends here, µs: half of `u64` (2^63 µs, 2.9 × 10^5
/// years), so that one more input time (each at most 10^8 s, the readers'
/// bound) added to any time the run reached cannot
/// wrap, and every difference of two times fits an `i64`.
pub const CLOCK_LIMIT_US: u64 = u64::MAX / 2;

/// A sum of times that passes [`CLOCK_LIMIT_US`]: the run cannot be
/// simulated (its times would saturate and every latency after it be
/// wrong), so it stops with this error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockOverflow {
    /// A closed-loop user's think time after its `requests`-th send.
    #[error(
        "the think time after each response adds up past the simulator's clock ({:.1e} s) after {requests} requests",
        CLOCK_LIMIT_US as f64 / 1e6
    )]
    ThinkTime {
        /// Requests sent when the clock ran out.
        requests: u64,
    },
    /// A node's `interval` (after its predecessors, or the send) or a tool
    /// call's `duration` ends past the clock.
    #[error(
        "request_id {request_id}: sub_requests[{node}].{field}: the request's times add up past the simulator's clock ({:.1e} s)",
        CLOCK_LIMIT_US as f64 / 1e6
    )]
    Node {
        /// The request's id, as read.
        request_id: String,
        /// The node.
        node: u32,
        /// `interval` or `duration`.
        field: &'static str,
    },
    /// The client's request timeout, counted from a send.
    #[error("the request timeout after a send lies past the simulator's clock ({:.1e} s)", CLOCK_LIMIT_US as f64 / 1e6)]
    Timeout,
    /// An engine step or the server's front-end delay.
    #[error("the engine's time passes the simulator's clock ({:.1e} s)", CLOCK_LIMIT_US as f64 / 1e6)]
    Engine,
}

/// `t + d`, if it stays within [`CLOCK_LIMIT_US`].
pub(crate) fn clock_add(t: u64, d: u64) -> Option<u64> {
    t.checked_add(d).filter(|&s| s <= CLOCK_LIMIT_US)
}

/// `t + d`, or the clock's end with `what` kept in `overflow` as the run's
/// first error (the run stops with it; its later times would be wrong).
pub(crate) fn later_or_overflow(
    overflow: &mut Option<ClockOverflow>,
    t: u64,
    d: u64,
    what: impl FnOnce() -> ClockOverflow,
) -> u64 {
    clock_add(t, d).unwrap_or_else(|| {
        overflow.get_or_insert_with(what);
        CLOCK_LIMIT_US
    })
}
