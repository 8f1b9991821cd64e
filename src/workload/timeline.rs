//! Absolute times of a result row, walked from its arrival as the format's
//! `scripts/results.py` does: a root starts `interval` after arrival, any
//! other node `interval` after its last predecessor finishes; an llm node's
//! token k is at its start plus its first k+1 latencies, and it finishes with
//! its last token; a tool call finishes `duration` after it starts. A node
//! that carries an `error` ends the walk along its branch. Times are summed in
//! integer microseconds.

use super::types::{NodeKind, Request, seconds_to_us};

/// When one node ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTimes {
    /// Start (entering the scheduler, for llm nodes), µs.
    pub start_us: u64,
    /// Absolute time of each token, µs (empty for tool calls).
    pub token_times_us: Vec<u64>,
    /// Finish, µs.
    pub finish_us: u64,
    /// The node carries an `error`.
    pub failed: bool,
}

/// The times of every node of a result row; `None` for nodes never reached
/// (behind a failed one). Rows without results give all `None`.
pub fn node_times(request: &Request) -> Vec<Option<NodeTimes>> {
    let n = request.sub_requests.len();
    let mut out: Vec<Option<NodeTimes>> = vec![None; n];
    let mut pending = vec![0u32; n];
    for sub in &request.sub_requests {
        for &j in &sub.next {
            pending[j as usize] += 1;
        }
    }
    // Finishes are never before arrival, so every node's start can begin there.
    let mut ready = vec![seconds_to_us(request.arrival_time); n];
    let mut stack: Vec<usize> = request.initial.iter().rev().map(|&i| i as usize).collect();
    while let Some(i) = stack.pop() {
        let sub = &request.sub_requests[i];
        let Some(result) = sub.result.as_ref() else { return vec![None; n] };
        let start = ready[i] + sub.interval_us();
        let mut token_times_us = Vec::new();
        let finish = match &sub.kind {
            NodeKind::ToolCall { duration } => start + seconds_to_us(*duration),
            NodeKind::Llm(_) => {
                let mut t = start;
                token_times_us.reserve(result.token_latency.len());
                for &latency in &result.token_latency {
                    t += seconds_to_us(latency);
                    token_times_us.push(t);
                }
                t
            }
        };
        let failed = result.error.is_some();
        out[i] = Some(NodeTimes { start_us: start, token_times_us, finish_us: finish, failed });
        if failed {
            continue;
        }
        for &j in sub.next.iter().rev() {
            let j = j as usize;
            ready[j] = ready[j].max(finish);
            pending[j] -= 1;
            if pending[j] == 0 {
                stack.push(j);
            }
        }
    }
    out
}
