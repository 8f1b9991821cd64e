//! When each request's tokens came out, without a store per token per
//! request: the engine logs each finished step's end time once
//! ([`StepLog`]), and a request keeps the steps it sampled in as runs of
//! consecutive log entries ([`TokenRuns`]); its times are copied out of the
//! log when it leaves. A decode step used to append a `u64` to each running
//! request's own buffer, a cold cache line every eighth step for each of
//! ~230 running requests: the costliest instruction of `finish_step`
//! (`perf record` on the 100k chat run: over half its samples).

/// The end time of every step this engine finished, from index `base` on.
#[derive(Debug)]
pub(super) struct StepLog {
    base: u64,
    times: Vec<u64>,
    /// Length at which [`StepLog::wants_trim`] says to trim: doubled past
    /// what a trim kept, so a request that pins old entries is not scanned
    /// for at every step.
    trim_at: usize,
}

/// Entries the log holds before it first looks for ones to forget (32 KiB).
const TRIM_AT: usize = 4096;

impl Default for StepLog {
    fn default() -> Self {
        StepLog { base: 0, times: Vec::new(), trim_at: TRIM_AT }
    }
}

impl StepLog {
    /// Logs a step that ended at `now_us`; returns its index.
    #[inline]
    pub(super) fn push(&mut self, now_us: u64) -> u64 {
        self.times.push(now_us);
        self.base + self.times.len() as u64 - 1
    }

    /// The index the next [`StepLog::push`] returns.
    pub(super) fn next(&self) -> u64 {
        self.base + self.times.len() as u64
    }

    /// Whether the log has grown enough to look for entries to forget.
    #[inline]
    pub(super) fn wants_trim(&self) -> bool {
        self.times.len() >= self.trim_at
    }

    /// Forgets the entries before `keep_from`, which no live request's runs
    /// reach back to.
    pub(super) fn trim(&mut self, keep_from: u64) {
        let n = (keep_from.saturating_sub(self.base) as usize).min(self.times.len());
        self.times.drain(..n);
        self.base += n as u64;
        self.trim_at = TRIM_AT.max(2 * self.times.len());
    }

    fn times(&self, start: u64, end: u64) -> &[u64] {
        &self.times[(start - self.base) as usize..(end - self.base) as usize]
    }
}

/// The logged steps one request sampled in: closed runs `[start, end)`, in
/// order, then the open one, which the next logged step extends. `end`
/// first (`repr(C)`): all a decode step touches, it ends the engine's
/// `Seq`'s first cache line.
#[derive(Debug, Default)]
#[repr(C)]
pub(super) struct TokenRuns {
    end: u64,
    start: u64,
    closed: Vec<(u64, u64)>,
}

impl TokenRuns {
    /// `count` tokens sampled in logged step `step` (more than one when
    /// drafts were accepted).
    #[inline]
    pub(super) fn record(&mut self, step: u64, count: u32) {
        if count == 1 && self.end == step {
            self.end += 1;
        } else {
            self.record_apart(step, count);
        }
    }

    #[cold]
    fn record_apart(&mut self, step: u64, count: u32) {
        if self.start < self.end {
            self.closed.push((self.start, self.end));
        }
        if count == 1 {
            (self.start, self.end) = (step, step + 1);
        } else {
            // Each token its own run of the one step.
            self.closed.extend(std::iter::repeat_n((step, step + 1), count as usize));
            (self.start, self.end) = (step + 1, step + 1);
        }
    }

    /// One token sampled in each of the `count` logged steps from `from` on
    /// (a steady decode's, `steady.rs`).
    pub(super) fn record_span(&mut self, from: u64, count: u64) {
        if count == 0 {
            return;
        }
        if self.end != from {
            if self.start < self.end {
                self.closed.push((self.start, self.end));
            }
            self.start = from;
        }
        self.end = from + count;
    }

    /// The first logged step it needs, if it has sampled anything.
    pub(super) fn first_step(&self) -> Option<u64> {
        match self.closed.first() {
            Some(&(start, _)) => Some(start),
            None => (self.start < self.end).then_some(self.start),
        }
    }

    /// Its token times, in order, from `log`, in `buffer` (emptied first)
    /// where one is given; it is left empty.
    pub(super) fn take(&mut self, log: &StepLog, buffer: Option<Vec<u64>>) -> Vec<u64> {
        let runs = std::mem::take(&mut self.closed);
        let count = runs.iter().map(|r| r.1 - r.0).sum::<u64>() + (self.end - self.start);
        // A spare buffer too small is dropped rather than grown: growing
        // copies its old contents (`realloc`), and most spares were too
        // small (three of four in the 20k chat run). The new one is rounded
        // up so that it fits most later requests when it comes back.
        let mut times = match buffer {
            Some(mut b) if b.capacity() >= count as usize => {
                b.clear();
                b
            }
            _ => Vec::with_capacity((count as usize).next_power_of_two()),
        };
        // (An empty open run may point below what the log still holds: a
        // request that sampled nothing yet, the log trimmed since.)
        for (start, end) in runs.into_iter().chain(std::iter::once((self.start, self.end))).filter(|r| r.0 < r.1) {
            times.extend_from_slice(log.times(start, end));
        }
        (self.start, self.end) = (0, 0);
        times
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Engine, EngineConfig, EngineEvent, KvTransfer, Owner};
    use super::*;
    use crate::workload::LlmCall;

    /// Every step takes 1 ms.
    struct Fixed;

    impl crate::latency::LatencyModel for Fixed {
        fn step_time_us(&self, _: &crate::latency::StepBatch) -> u64 {
            1000
        }
    }

    /// Runs `e` a step at a time from `now` for `steps` steps, adding a
    /// 4-token request of `output` tokens as node `next` before each; returns
    /// the departures by node and the time it stopped.
    fn run(e: &mut Engine, now: u64, steps: u32, output: u32, next: &mut u32) -> (Vec<(u32, Vec<u64>)>, u64) {
        let (mut out, mut now, ev) = (Vec::new(), now, &mut Vec::new());
        for _ in 0..steps {
            if output > 0 {
                let call = LlmCall::new(4, output);
                e.add(Owner { slot: *next, node: *next }, &call, KvTransfer::Local, now, u64::from(*next)).unwrap();
                *next += 1;
            }
            now += e.start_step(&Fixed, ev).expect("work to do");
            e.finish_step(now, ev);
            for event in ev.drain(..) {
                if let EngineEvent::Finished(d) = event {
                    out.push((d.owner.node, d.token_times_us));
                }
            }
        }
        (out, now)
    }

    #[test]
    fn a_long_request_keeps_its_times_and_the_log_is_trimmed_once_it_leaves() {
        // Node 0: 9,000 tokens, one a step, past two trims' worth of log,
        // beside a 2-token request added every step.
        let now = 5_000;
        let mut e = Engine::new(EngineConfig { async_scheduling: false, ..EngineConfig::new(8, 64, 20_000, 16, 2048) });
        let call = LlmCall::new(4, 9000);
        e.add(Owner { slot: 0, node: 0 }, &call, KvTransfer::Local, now, 0).unwrap();
        let mut next = 1;
        let (done, end) = run(&mut e, now, 9000, 2, &mut next);
        let (_, times) = done.iter().find(|d| d.0 == 0).expect("node 0 finished");
        // A token at the end of every step, the first step its prefill's.
        let expected: Vec<u64> = (1..=9000).map(|k| now + 1000 * k).collect();
        assert_eq!(*times, expected);
        assert_eq!(end, now + 9_000_000);
        // Every short request's times: its steps' ends, one apart.
        assert!(done.iter().filter(|d| d.0 != 0).all(|(_, t)| t.len() == 2 && t[1] == t[0] + 1000));
        // Pinned by node 0, the log held every step; gone, it is trimmed.
        assert!(e.step_log.times.len() >= 9000);
        run(&mut e, end, 2 * TRIM_AT as u32, 2, &mut next);
        assert!(e.step_log.times.len() <= 2 * TRIM_AT, "{}", e.step_log.times.len());
    }

    #[test]
    fn runs_give_back_every_time_in_order_with_repeats_and_gaps() {
        let mut log = StepLog::default();
        let steps: Vec<u64> = (0..10).map(|k| log.push(100 * k)).collect();
        let mut r = TokenRuns::default();
        assert_eq!(r.first_step(), None);
        // Steps 1, 2, 3; skipped 4; 5; three at once in 6; 7; skipped 8, 9.
        for (s, n) in [(1, 1), (2, 1), (3, 1), (5, 1), (6, 3), (7, 1)] {
            r.record(steps[s], n);
        }
        assert_eq!(r.first_step(), Some(1));
        assert_eq!(r.take(&log, None), [100, 200, 300, 500, 600, 600, 600, 700]);
        assert_eq!(r.take(&log, None), Vec::<u64>::new());
    }

    #[test]
    fn a_trim_keeps_what_live_runs_need_and_indices_stay() {
        let mut log = StepLog::default();
        for k in 0..5000 {
            log.push(k);
        }
        assert!(log.wants_trim());
        let mut r = TokenRuns::default();
        r.record(4990, 1);
        log.trim(r.first_step().unwrap());
        assert!(!log.wants_trim());
        let next = log.push(5000);
        assert_eq!(next, 5000);
        assert_eq!(log.next(), 5001);
        r.record(next, 1);
        assert_eq!(r.take(&log, None), [4990, 5000]);
        // One that sampled nothing leaves with no times, the log trimmed
        // past where its empty run points.
        assert_eq!(TokenRuns::default().take(&log, Some(vec![1, 2])), Vec::<u64>::new());
    }
}
