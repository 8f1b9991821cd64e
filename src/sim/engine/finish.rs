//! The end of an executing step (vLLM's `update_from_output`): sampled tokens
//! delivered (several at once when drafts are accepted, rejected drafts
//! rolled back), blocks registered, finished requests out.

use super::*;

impl Engine {
    /// The executing step ends at `now` (vLLM's `update_from_output`):
    /// requests that sampled get their token, finished requests leave and
    /// free their blocks in step order; then aborts that came in during the
    /// step take effect.
    pub(crate) fn finish_step(&mut self, now_us: u64, events: &mut Vec<EngineEvent>) {
        self.stepping = false;
        let step = self.step_log.push(now_us);
        // Without LoRA, speculation or offload (`Engine::plain`) the loop
        // is compiled apart, skipping their checks a request a step.
        let mut left = std::mem::take(&mut self.left);
        if self.plain {
            self.finish_entries::<true>(step, &mut left, events);
        } else {
            self.finish_entries::<false>(step, &mut left, events);
        }
        // Out of the queues, found by value: a step finishes one or two of
        // ~200 running requests, and a `retain` over all of them read each
        // one's `Seq` (2 % of the instructions of the 20k chat run).
        for &slot in &left {
            if let Some(at) = self.running.iter().position(|&s| s == slot) {
                self.running.remove(at);
            } else if let Some(at) = self.waiting.iter().position(|&s| s == slot) {
                self.waiting.remove(at);
            }
        }
        left.clear();
        self.left = left;
        debug_assert!(
            self.running.iter().chain(&self.waiting).all(|&s| self.seqs[s as usize].as_ref().is_some_and(|q| !q.held)),
            "a request that left is still queued"
        );
        for slot in std::mem::take(&mut self.pending_aborts) {
            self.remove(slot);
        }
        if self.step_log.wants_trim() {
            // The oldest step a live request's tokens came out in.
            let first = self.first_needed_step();
            self.step_log.trim(first.unwrap_or(self.step_log.next()));
        }
    }

    /// Each entry of the executing step gets its tokens (logged as step
    /// `step`); finished requests leave, their slots added to `left`.
    /// `PLAIN`: no LoRA, speculation or offload.
    #[inline(always)]
    fn finish_entries<const PLAIN: bool>(&mut self, step: u64, left: &mut Vec<u32>, events: &mut Vec<EngineEvent>) {
        // Read once, not through `self` a request (the loop writes through
        // `seq`, which the compiler cannot tell apart from the config).
        let async_scheduling = self.config.async_scheduling;
        let hash_lookahead = self.kv.hash_lookahead();
        let room = self.kv.room();
        let steady_on = PLAIN && self.steady_on();
        for k in 0..self.executing.entries.len() {
            let Entry { slot, tokens, samples, dead, drafts, pos, preempted } = self.executing.entries[k];
            if dead {
                continue;
            }
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            seq.in_flight_tokens -= tokens;
            if !samples {
                continue;
            }
            // The rejected drafts' placeholders go with the emitted ones
            // (a preempted request's were reset).
            if !preempted {
                seq.pending = seq.pending.saturating_sub(1 + drafts);
            }
            let mut emitted = 1;
            if !PLAIN && let Some(s) = &self.config.speculative {
                if drafts > 0 {
                    let remaining = seq.total_len - seq.num_tokens;
                    let rejected;
                    (emitted, rejected) = s.verify(&mut self.stats.spec, seq.spec_stream, pos, drafts, remaining);
                    // Not for a request preempted since (async), whose count
                    // restarted at 0 (`if request.num_computed_tokens > 0`).
                    if !preempted {
                        seq.num_computed -= rejected;
                    }
                }
                if !self.config.async_scheduling {
                    // The drafter proposes k for its next step (async: done
                    // when this step was scheduled).
                    seq.drafts = s.k;
                }
            }
            seq.num_tokens += emitted;
            // (An aborted request's runs were taken at its abort; it leaves
            // at the end of this step, so what is recorded here is dropped
            // with it. Not checked: `aborted` is off the first cache line.)
            seq.tokens.record(step, emitted);
            if async_scheduling && seq.num_computed > 0 && !room.registered_all(&seq.blocks, &seq.hashes) {
                // With placeholders, the blocks a sampled token completes are
                // registered when it arrives, before a finished request frees
                // them; not for a request preempted since (vLLM 0.15.1
                // async_scheduler.py `_update_request_with_output`; 0.33.0
                // scheduler.py `update_from_output`).
                let known = seq.num_tokens.saturating_sub(hash_lookahead);
                let upto = (seq.num_computed - seq.in_flight_tokens).min(known);
                self.kv.register(&mut seq.blocks, &seq.hashes, upto);
            }
            if seq.num_tokens == seq.total_len {
                left.push(slot);
                if self.has_queued
                    && (self.config.speculative.is_some()
                        || self.config.scheduling_policy == SchedulingPolicy::Priority)
                {
                    // Async: not sure this step would finish it, vLLM
                    // scheduled it again; that output is dropped. (Under
                    // Priority too: preempted with its last token in flight
                    // and admitted again in the same scheduling, when the
                    // preemptions emptied `running`; `schedule_again` no
                    // longer runs with a step in flight.)
                    for e in self.queued.entries.iter_mut().filter(|e| e.slot == slot) {
                        e.dead = true;
                    }
                }
                if !PLAIN && let Some(l) = &mut self.lora {
                    l.leave(seq.lora);
                    // Preempted after this step was scheduled: it finishes
                    // from the waiting queue.
                    if seq.num_computed == 0 {
                        l.unwait(seq.lora);
                    }
                }
                if !seq.aborted && self.connector.request_finished(seq.transfer) {
                    // Reported, but its blocks stay for the send.
                    seq.held = true;
                    let departure = Departure {
                        owner: seq.owner,
                        token_times_us: seq.tokens.take(&self.step_log, self.spare_times.pop()),
                        preemptions: seq.preemptions,
                        cached_tokens: seq.cached_tokens,
                    };
                    events.push(EngineEvent::Held { owner: seq.owner, slot });
                    events.push(EngineEvent::Finished(departure));
                    continue;
                }
                self.kv.free(&mut seq.blocks);
                let seq = self.seqs[slot as usize].take().expect("live slot");
                if seq.aborted {
                    self.pending_aborts.retain(|&s| s != slot);
                } else {
                    events.push(EngineEvent::Finished(seq.departure(&self.step_log, self.spare_times.pop())));
                }
                self.free_slots.push(slot);
            } else if steady_on {
                self.try_steady(slot, room);
            }
        }
    }
}
