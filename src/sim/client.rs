//! The benchmark client: how requests reach the engine (all at their
//! arrival, under a concurrency cap, or from closed-loop users), and what it
//! holds while a run goes. Sending is in `send.rs`.

use std::collections::VecDeque;

use crate::workload::Request;

/// How requests reach the engine: the behaviour of the benchmark client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Client {
    /// Every request is sent at its arrival time.
    #[default]
    OpenLoop,
    /// At most `limit` requests (whole DAGs) in flight: a request is sent at
    /// its arrival time or, if `limit` are in flight, when one finishes
    /// (first come, first sent), like a benchmark client with a concurrency cap.
    Capped {
        /// Requests in flight at most (≥ 1).
        limit: u32,
    },
    /// `users` virtual users, each sending its next request `think_time_us`
    /// after its previous one finished; arrival times are ignored and every
    /// user starts at time 0.
    ClosedLoop {
        /// Virtual users (≥ 1).
        users: u32,
        /// Pause between a user's response and its next request, µs.
        think_time_us: u64,
    },
}

/// The client as a run goes.
#[derive(Debug, Default)]
pub(super) struct ClientState {
    pub(super) mode: Client,
    /// Capped client: arrived requests waiting for a free slot, with their arrival.
    pub(super) unsent: VecDeque<(Request, u64)>,
    /// Closed loop: when each idle user that has sent before sends next,
    /// ascending.
    pub(super) users_free_at: VecDeque<u64>,
    /// Closed loop: users that have not sent yet (all free at time 0, before
    /// those in `users_free_at`). A count, not a queue entry each: a run never
    /// needs more users than it has requests, however many are asked for.
    pub(super) users_not_started: u64,
    /// The client gives up on a request this long after sending it, µs.
    pub(super) timeout_us: Option<u64>,
}
