//! What an AgentX run measures: the end of the warm-up (the last token of
//! every lane's warm-up calls), then every llm call sent in the profile
//! window that follows, call by call — a play is hours long, so the window
//! counts calls, not plays, and takes a call still running at the end as
//! unfinished rather than dropping its play.

use std::io;

use crate::histogram::Histogram;
pub use crate::metrics::AgentxReport;
use crate::sim::{FinishedRequest, NodeError, RunSummary, Sink};
use crate::workload::NodeKind;

/// Finds when the warm-up ended.
pub(super) struct WarmupEnd {
    /// Warm-up nodes of each lane's first play (lane = input index).
    nodes: Vec<u32>,
    /// Per lane: the end of its warm-up, once every warm-up call is over.
    ends: Vec<Option<u64>>,
}

impl WarmupEnd {
    pub(super) fn new(nodes: Vec<u32>) -> WarmupEnd {
        let ends = vec![None; nodes.len()];
        WarmupEnd { nodes, ends }
    }

    /// When the last lane's warm-up ended, if every lane's has.
    pub(super) fn end_us(&self) -> Option<u64> {
        self.ends.iter().try_fold(0u64, |m, e| e.map(|e| m.max(e)))
    }
}

/// A node that will not run further: finished, failed or skipped (a node
/// the horizon cut short is not over).
fn over(n: &crate::sim::NodeOutcome) -> bool {
    n.finish_us.is_some() || n.error.as_ref().is_some_and(|e| !matches!(e, NodeError::Unfinished))
}

impl Sink for WarmupEnd {
    fn request_done(&mut self, r: &FinishedRequest) -> io::Result<()> {
        let Some(&n) = self.nodes.get(r.index as usize) else { return Ok(()) };
        let warm = &r.nodes[..(n as usize).min(r.nodes.len())];
        if warm.iter().all(over) {
            let last = warm.iter().filter_map(|w| w.token_times_us.last().copied().or(w.finish_us)).max();
            self.ends[r.index as usize] = Some(last.unwrap_or(r.send_us));
        }
        Ok(())
    }
}

/// Collects the profile window `[from_us, to_us)`.
pub(super) struct Profile {
    from_us: u64,
    to_us: u64,
    layout: super::Layout,
    /// The main agent's calls alone.
    main_ttft: Histogram,
    main_e2e: Histogram,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    calls: u64,
    unfinished_calls: u64,
    failed_calls: u64,
    input_tokens: u64,
    cached_tokens: u64,
    window_output_tokens: u64,
    plays_sent: u64,
    plays_completed: u64,
    /// Every play's (send, end) — its end the run's for a play still out.
    spans: Vec<(u64, Option<u64>)>,
    end: Option<RunSummary>,
}

impl Profile {
    pub(super) fn new(from_us: u64, to_us: u64, layout: super::Layout) -> Profile {
        Profile {
            from_us,
            to_us,
            layout,
            main_ttft: Histogram::default(),
            main_e2e: Histogram::default(),
            ttft: Histogram::default(),
            itl: Histogram::default(),
            e2e: Histogram::default(),
            calls: 0,
            unfinished_calls: 0,
            failed_calls: 0,
            input_tokens: 0,
            cached_tokens: 0,
            window_output_tokens: 0,
            plays_sent: 0,
            plays_completed: 0,
            spans: Vec::new(),
            end: None,
        }
    }

    /// The report, given the lanes and the warm-up's end.
    pub(super) fn report(&self, lanes: u32) -> AgentxReport {
        let ms = |h: &Histogram, p: f64| if h.count() == 0 { 0.0 } else { h.percentile(p) / 1e3 };
        let mean = |h: &Histogram| if h.count() == 0 { 0.0 } else { h.mean() / 1e3 };
        let window_s = (self.to_us - self.from_us) as f64 / 1e6;
        let end_us = self.end.as_ref().map_or(self.to_us, |e| e.sim_end_us);
        let stats = self.end.as_ref().map(|e| &e.stats);
        AgentxReport {
            lanes,
            warmup_end_s: self.from_us as f64 / 1e6,
            profile_s: window_s,
            plays_sent: self.plays_sent,
            plays_completed: self.plays_completed,
            max_plays_in_flight: max_in_flight(&self.spans, end_us),
            calls: self.calls,
            unfinished_calls: self.unfinished_calls,
            failed_calls: self.failed_calls,
            ttft_mean_ms: mean(&self.ttft),
            ttft_p50_ms: ms(&self.ttft, 50.0),
            ttft_p90_ms: ms(&self.ttft, 90.0),
            ttft_p99_ms: ms(&self.ttft, 99.0),
            itl_mean_ms: mean(&self.itl),
            itl_p50_ms: ms(&self.itl, 50.0),
            itl_p90_ms: ms(&self.itl, 90.0),
            itl_p99_ms: ms(&self.itl, 99.0),
            e2e_mean_ms: mean(&self.e2e),
            e2e_p50_ms: ms(&self.e2e, 50.0),
            e2e_p90_ms: ms(&self.e2e, 90.0),
            e2e_p99_ms: ms(&self.e2e, 99.0),
            main_calls: self.main_ttft.count(),
            main_ttft_mean_ms: mean(&self.main_ttft),
            main_ttft_p90_ms: ms(&self.main_ttft, 90.0),
            main_e2e_mean_ms: mean(&self.main_e2e),
            input_tokens: self.input_tokens,
            prefix_reuse: if self.input_tokens == 0 {
                0.0
            } else {
                self.cached_tokens as f64 / self.input_tokens as f64
            },
            output_tokens_per_sec: self.window_output_tokens as f64 / window_s,
            kv_cache_hit_rate: stats.map_or(0.0, |s| {
                if s.prefix_queries == 0 { 0.0 } else { s.prefix_hits as f64 / s.prefix_queries as f64 }
            }),
        }
    }
}

/// When a play left: its last node's end (a failed node's: its start, when
/// it failed); `None` for one the horizon cut short.
pub(super) fn left_at(r: &FinishedRequest) -> Option<u64> {
    if r.status == crate::sim::RequestStatus::Unfinished {
        return None;
    }
    Some(r.nodes.iter().filter_map(|n| n.finish_us.or(n.start_us)).max().unwrap_or(r.send_us).max(r.send_us))
}

/// The most plays out at once.
fn max_in_flight(spans: &[(u64, Option<u64>)], end_us: u64) -> u64 {
    let mut events: Vec<(u64, i8)> = Vec::with_capacity(spans.len() * 2);
    for &(send, finish) in spans {
        events.push((send, 1));
        events.push((finish.unwrap_or(end_us).max(send), -1));
    }
    // A play that ends when another is sent frees its lane first.
    events.sort_unstable();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, d) in events {
        now += i64::from(d);
        most = most.max(now);
    }
    most as u64
}

impl Sink for Profile {
    fn request_done(&mut self, r: &FinishedRequest) -> io::Result<()> {
        self.plays_sent += 1;
        if r.finish_us.is_some() && r.status == crate::sim::RequestStatus::Completed {
            self.plays_completed += 1;
        }
        self.spans.push((r.send_us, left_at(r)));
        let mains = self.layout.mains(r.index) as usize;
        for (k, (sub, n)) in r.request.sub_requests.iter().zip(&r.nodes).enumerate() {
            let NodeKind::Llm(call) = &sub.kind else { continue };
            self.window_output_tokens +=
                n.token_times_us.iter().filter(|&&t| t >= self.from_us && t < self.to_us).count() as u64;
            let Some(start) = n.start_us else { continue };
            if start < self.from_us || start >= self.to_us {
                continue;
            }
            match &n.error {
                None if n.token_times_us.len() == call.output_tokens as usize => {
                    let times = &n.token_times_us;
                    self.calls += 1;
                    self.ttft.record(times[0] - start);
                    self.itl.record_gaps(times);
                    self.e2e.record(times[times.len() - 1] - start);
                    if k < mains {
                        self.main_ttft.record(times[0] - start);
                        self.main_e2e.record(times[times.len() - 1] - start);
                    }
                    self.input_tokens += u64::from(call.input_tokens);
                    self.cached_tokens += u64::from(n.cached_tokens);
                }
                None | Some(NodeError::Unfinished) => self.unfinished_calls += 1,
                Some(_) => self.failed_calls += 1,
            }
        }
        Ok(())
    }

    fn finish(&mut self, end: &RunSummary) -> io::Result<()> {
        self.end = Some(end.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plays_in_flight_count_a_freed_lane_before_its_next_play() {
        assert_eq!(max_in_flight(&[(0, Some(10)), (10, Some(20)), (0, None)], 30), 2);
        assert_eq!(max_in_flight(&[(0, Some(10)), (5, Some(20)), (0, None)], 30), 3);
        assert_eq!(max_in_flight(&[], 0), 0);
    }
}
