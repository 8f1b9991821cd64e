//! Steady decodes, accounted for by the step instead of by the request.
//!
//! Most of a serving run is requests decoding one token a step: each step
//! the scheduler gives such a request one token of the budget, its KV fits
//! in the blocks it holds, and at the step's end it samples one token. A
//! plain FCFS engine (no LoRA, speculation or offload; not traced) marks a
//! request *steady* at a step's end when that will go on for at least the
//! next step to be scheduled, and until when: the step its next KV block is
//! needed, or the one that samples its last token, whichever comes first
//! (its *due* step, known from its counters). At a block's due step it takes
//! the block and stays steady when the order of this step's allocations
//! cannot matter ([`Engine::take_steady_block`]). While steady, the scheduling
//! loop only takes its token from the budget (in running order: exact
//! vLLM order for the requests after it), and neither scheduling nor the
//! step's end reads its `Seq`: the step's price adds the steady requests'
//! count and context from two sums. Before its due step, or whenever
//! anything else needs its state (a preemption, an abort, a budget that ran
//! out before its turn, the run's end), it is *settled*: its counters and
//! token runs get the steps it was steady for, and a step of those still in
//! flight gets its entry back, so that step's end delivers its token as an
//! explicit entry's. From then it is an ordinary running request again.
//!
//! Measured on the 20k chat requests (cachegrind): a decode's scheduling
//! and step end were ~140 instructions a request a step, and two cold
//! cache lines.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;

/// Buckets of the wheel of due steps: a due step is most often within a
/// block's worth of steps (16 by default), and never before the next.
const WHEEL: u64 = 64;

/// The steady requests' due steps, as (step, slot): those within
/// [`WHEEL`] steps in a wheel of buckets by step, the rest in a heap. (A
/// binary heap for all was 7 % of the 100k chat run's `perf` samples: a
/// push and a pop of a ~200-entry heap every block's worth of steps a
/// request.)
#[derive(Debug, Default)]
pub(super) struct DueSteps {
    wheel: Vec<Vec<(u64, u32)>>,
    later: BinaryHeap<Reverse<(u64, u32)>>,
    /// The buffer [`DueSteps::take`] hands out, given back emptied.
    pub(super) spare: Vec<(u64, u32)>,
}

impl DueSteps {
    /// `slot` is due at step `due`, pushed while `now` is the next step.
    /// (Always inlined: left to rustc it became a call once the engine grew,
    /// 6 M more instructions on 10k chat requests, cachegrind.)
    #[inline(always)]
    fn push(&mut self, now: u64, due: u64, slot: u32) {
        if due - now >= WHEEL {
            self.later.push(Reverse((due, slot)));
            return;
        }
        if self.wheel.is_empty() {
            self.wheel.resize_with(WHEEL as usize, Vec::new);
        }
        self.wheel[(due % WHEEL) as usize].push((due, slot));
    }

    /// What is due at step `now` (or before), in the order pushed, the
    /// heap's after the wheel's.
    fn take(&mut self, now: u64) -> Vec<(u64, u32)> {
        let mut out = std::mem::take(&mut self.spare);
        if let Some(bucket) = self.wheel.get_mut((now % WHEEL) as usize) {
            // Every step's bucket is emptied when it is scheduled, so all in
            // it are due now; kept otherwise.
            bucket.retain(|&(due, slot)| {
                let ripe = due <= now;
                if ripe {
                    out.push((due, slot));
                }
                !ripe
            });
        }
        while let Some(&Reverse((due, slot))) = self.later.peek() {
            if due > now {
                break;
            }
            self.later.pop();
            out.push((due, slot));
        }
        out
    }
}

impl Engine {
    /// Whether this engine keeps steady decodes (see the module docs).
    pub(super) fn steady_on(&self) -> bool {
        self.plain && self.config.scheduling_policy == SchedulingPolicy::Fcfs && !self.tracing
    }

    /// Settles every steady request whose due step is the one being
    /// scheduled now (or earlier).
    pub(super) fn settle_due(&mut self) {
        let now = self.scheduled_steps;
        let mut due = self.due_steps.take(now);
        for &(step, slot) in &due {
            // A stale entry (settled since, maybe steady again with another
            // due step, or the slot reused) is passed over.
            let Some(seq) = self.seqs[slot as usize].as_ref().filter(|s| s.steady_due == step) else { continue };
            if !self.steady[slot as usize] {
                continue;
            }
            if step < seq.steady_last && self.take_steady_block(slot) {
                continue;
            }
            self.settle(slot);
        }
        due.clear();
        self.due_steps.spare = due;
    }

    /// At a steady `slot`'s block boundary (the step being scheduled computes
    /// a token its blocks have no room for): takes the block now and stays
    /// steady until the next boundary or its last token, when no allocation
    /// of this step can fail, whatever its order. That holds when the free
    /// blocks cover this one plus the most the running requests could ask:
    /// each one's tokens this step need at most ⌈n / block_size⌉ new blocks,
    /// ≤ n / block_size + 1, and the n sum to at most the token budget. And
    /// only while no block has a hash (`KvCache::pooled`): any free block is
    /// as good as another, and none is evicted. Otherwise (false) it is
    /// settled and allocates in its turn, exactly (a settle and a re-steady
    /// every 16 tokens were 6 % of the 20k chat run's instructions).
    fn take_steady_block(&mut self, slot: u32) -> bool {
        let block_size = self.config.block_size;
        let most_asked = self.running.len() as u64 + u64::from(self.config.max_num_batched_tokens / block_size) + 1;
        if !self.kv.pooled() || u64::from(self.kv.num_free()) < most_asked + 1 {
            return false;
        }
        let now = self.scheduled_steps;
        let seq = self.seqs[slot as usize].as_mut().expect("a steady request is live");
        let taken = self.kv.take_pooled(&mut seq.blocks);
        debug_assert!(taken, "the free blocks were counted");
        seq.steady_due = (now + u64::from(block_size)).min(seq.steady_last);
        self.due_steps.push(now, seq.steady_due, slot);
        true
    }

    /// Settles `slot` if it is steady.
    #[inline]
    pub(super) fn settle_if_steady(&mut self, slot: u32) {
        if self.steady.get(slot as usize).copied().unwrap_or(false) {
            self.settle(slot);
        }
    }

    /// Settles every steady request.
    pub(super) fn settle_all(&mut self) {
        for slot in 0..self.steady.len() as u32 {
            self.settle_if_steady(slot);
        }
    }

    /// `slot`, steady since step `steady_from`, was scheduled one token in
    /// every step committed since (`scheduled_steps` of them in all) and
    /// sampled one in every one of those that ended: its counters and runs
    /// get them; the steps still in flight get its entry (the executing one,
    /// then the queued one). It is no longer steady.
    fn settle(&mut self, slot: u32) {
        let (scheduled, ended) = (self.scheduled_steps, self.step_log.next());
        self.steady[slot as usize] = false;
        let seq = self.seqs[slot as usize].as_mut().expect("a steady request is live");
        let from = seq.steady_from;
        let steps = scheduled - from;
        let done = ended.saturating_sub(from).min(steps);
        let in_flight = (steps - done) as u32;
        seq.num_computed += steps as u32;
        seq.num_tokens += done as u32;
        seq.pending += in_flight;
        seq.in_flight_tokens += in_flight;
        seq.tokens.record_span(from, done);
        self.steady_count -= 1;
        self.steady_context -= u64::from(seq.num_computed);
        for step in from + done..scheduled {
            let batch = if step == ended {
                &mut self.executing
            } else {
                debug_assert!(step == ended + 1 && self.has_queued, "at most two steps in flight");
                &mut self.queued
            };
            batch.entries.push(Entry {
                slot,
                tokens: 1,
                samples: true,
                dead: false,
                drafts: 0,
                pos: 0,
                preempted: false,
            });
        }
    }

    /// At a step's end, after `slot`'s entry: makes it steady from the next
    /// step to be scheduled when that step and at least the one after are
    /// sure to be a one-token decode for it.
    #[inline]
    pub(super) fn try_steady(&mut self, slot: u32, room: super::super::kv_cache::Room) {
        // Already steady: its entry was the one queued before it became so.
        if self.steady[slot as usize] {
            return;
        }
        let next = self.scheduled_steps;
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        // Decoding and running (a preempted request restarted at 0), with
        // exactly one token to compute (the last sampled), and no block hash
        // left to register as blocks fill.
        if seq.num_computed < seq.prefill_end
            || seq.num_tokens + seq.pending != seq.num_computed + 1
            || seq.aborted
            || seq.held
            || !room.registered_all(&seq.blocks, &seq.hashes)
        {
            return;
        }
        let capacity = seq.blocks.blocks.len() as u64 * u64::from(self.config.block_size);
        let computed = u64::from(seq.num_computed);
        // Step `next + m` computes token `computed + m + 1`: the first that
        // needs another block is at m = capacity − computed.
        let block_due = (next + capacity).saturating_sub(computed);
        // Step `next + m` samples token `num_tokens + pending + m + 1`: the
        // last one at m = total − known − 1, scheduled as an entry (its end
        // finishes the request).
        let known = u64::from(seq.num_tokens + seq.pending);
        let last = (next + u64::from(seq.total_len)).saturating_sub(known + 1);
        let due = block_due.min(last);
        if due <= next {
            return;
        }
        seq.steady_from = next;
        seq.steady_due = due;
        seq.steady_last = last;
        self.steady[slot as usize] = true;
        self.steady_count += 1;
        self.steady_context += computed;
        self.due_steps.push(next, due, slot);
    }

    /// The steady requests' share of the step just scheduled: one decode
    /// token each (counted by the step's price and the engine's stats); each
    /// one's context then grows by the token.
    pub(super) fn schedule_steady(&mut self) {
        let count = self.steady_count;
        self.building.steady = count;
        self.building.priced.decodes += count;
        self.building.priced.decode_context_tokens += self.steady_context;
        self.stats.computed_tokens += u64::from(count);
        self.steady_context += u64::from(count);
    }

    /// The first logged step a live request still needs (for trimming the
    /// log): its first run's start, or where it became steady.
    pub(super) fn first_needed_step(&self) -> Option<u64> {
        let steady = &self.steady;
        self.seqs
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| {
                let s = s.as_ref()?;
                let since = steady.get(slot).copied().unwrap_or(false).then_some(s.steady_from);
                match (s.tokens.first_step(), since) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Engine, EngineConfig, EngineEvent, KvTransfer, Owner};
    use crate::latency::{LatencyModel, StepBatch};
    use crate::workload::LlmCall;

    /// A step costs 1 ms and 1 µs a context token (so the steady sums show).
    struct Priced;

    impl LatencyModel for Priced {
        fn step_time_us(&self, b: &StepBatch) -> u64 {
            1000 + b.decode_context_tokens + u64::from(b.decodes)
        }
    }

    /// Runs `requests` (prompt, output) added at once to an engine of
    /// `config` until it is empty: (node, token times) as they left, the
    /// steps, and how many requests were steady at the busiest step.
    fn run(config: EngineConfig, requests: &[(u32, u32)], traced: bool) -> (Vec<(u32, Vec<u64>)>, u64, u32) {
        let mut e = Engine::new(config);
        e.set_tracing(traced);
        for (k, &(prompt, output)) in requests.iter().enumerate() {
            let owner = Owner { slot: k as u32, node: k as u32 };
            e.add(owner, &LlmCall::new(prompt, output), KvTransfer::Local, 0, k as u64).unwrap();
        }
        let (mut out, mut now, mut most, ev) = (Vec::new(), 0, 0, &mut Vec::new());
        let mut duration = e.start_step(&Priced, ev);
        while let Some(d) = duration {
            now += d;
            // Async: the next step is scheduled while this one runs.
            let queued = e.config.async_scheduling && e.queue_step(&Priced, ev);
            most = most.max(e.steady_count);
            e.finish_step(now, ev);
            out.extend(ev.drain(..).filter_map(|event| match event {
                EngineEvent::Finished(d) => Some((d.owner.node, d.token_times_us)),
                _ => None,
            }));
            duration = if queued { e.start_queued() } else { e.start_step(&Priced, ev) };
        }
        assert!(!e.has_work());
        (out, e.stats.steps, most)
    }

    #[test]
    fn due_steps_come_out_at_their_step_near_or_far() {
        let mut d = super::DueSteps::default();
        d.push(0, 3, 7);
        d.push(0, 3, 2);
        d.push(0, 200, 5);
        d.push(1, 64, 9);
        for now in 0..3 {
            assert!(d.take(now).is_empty(), "step {now}");
        }
        assert_eq!(d.take(3), [(3, 7), (3, 2)]);
        assert!(d.take(4).is_empty());
        assert_eq!(d.take(64), [(64, 9)]);
        assert!(d.take(199).is_empty());
        assert_eq!(d.take(200), [(200, 5)]);
    }

    #[test]
    fn steady_requests_behind_a_chunked_prefill_get_the_same_tokens() {
        // A long prompt first, its chunks capped at 4 tokens; eight short
        // ones behind it, a budget of 8 reaching only some of them a step
        // until the prompt is in, then all of them decoding.
        for async_scheduling in [false, true] {
            let config = EngineConfig {
                async_scheduling,
                long_prefill_token_threshold: 4,
                ..EngineConfig::new(16, 8, 4096, 4, 1000)
            };
            let mut requests = vec![(400, 3)];
            requests.extend((0..8).map(|k| (2, 30 + k)));
            let traced = run(config.clone(), &requests, true);
            let steady = run(config, &requests, false);
            assert_eq!(traced.2, 0, "a traced engine keeps no steady decodes");
            assert!(steady.2 >= 4, "too few steady to test: {}", steady.2);
            assert_eq!(traced.0, steady.0, "async {async_scheduling}");
            assert_eq!(traced.1, steady.1);
        }
    }

    #[test]
    fn preempted_steady_requests_restart_as_an_entry_would() {
        // Twelve requests in 40 blocks of 4 tokens: decoding past their
        // blocks, the newest are preempted, some while steady.
        for async_scheduling in [false, true] {
            let config = EngineConfig { async_scheduling, ..EngineConfig::new(16, 64, 4096, 4, 40) };
            let requests: Vec<(u32, u32)> = (0..12).map(|k| (3 + k, 20 + 3 * k)).collect();
            let traced = run(config.clone(), &requests, true);
            let steady = run(config.clone(), &requests, false);
            assert!(steady.2 > 0);
            assert_eq!(traced.0, steady.0, "async {async_scheduling}");
            assert_eq!(traced.1, steady.1);
        }
    }
}
