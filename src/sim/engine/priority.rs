//! vLLM's `--scheduling-policy priority` (`v1/core/sched/request_queue.py`
//! `PriorityRequestQueue`, `scheduler.py`): the waiting queue is served in
//! (priority, arrival) order — lower priority value first, ties by arrival
//! (vLLM's `arrival_time`, then request id; here the order `add` was
//! called, which is unique). A preempted request and a skipped one (remote
//! KV loading) re-enter by that key, not at the front: a heap has no front.
//! Admission still stops at the first request that cannot get blocks, as in
//! FCFS. When a running request cannot grow, the victim is the running
//! request of greatest (priority, arrival), not the most recently admitted;
//! if it was already scheduled in this step its tokens go back to the step's
//! budget and leave the batch (`scheduler.py`: `token_budget +=
//! num_scheduled_tokens[...]`, `req_index -= 1`).
//!
//! Here the waiting `VecDeque` is kept sorted by that key, so the FCFS
//! admission pass, which keeps a skipped request in its place, serves it
//! exactly as vLLM's heap pops it and re-adds the skipped ones.
//!
//! Not combined with LoRA, speculative decoding or KV offload (a scenario
//! refuses them together): a victim's step entry is undone only for what a
//! plain step records.

use super::*;

/// vLLM's `--scheduling-policy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SchedulingPolicy {
    /// First come first served (vLLM's default).
    #[default]
    Fcfs,
    /// By each request's `priority` (lower first), ties by arrival.
    Priority,
}

impl SchedulingPolicy {
    /// The name vLLM's flag and the scenario key use.
    pub fn name(self) -> &'static str {
        match self {
            SchedulingPolicy::Fcfs => "fcfs",
            SchedulingPolicy::Priority => "priority",
        }
    }

    /// The policy named `name`, as vLLM's flag spells it.
    pub fn parse(name: &str) -> Option<SchedulingPolicy> {
        match name {
            "fcfs" => Some(SchedulingPolicy::Fcfs),
            "priority" => Some(SchedulingPolicy::Priority),
            _ => None,
        }
    }
}

/// The order key of a request in the waiting queue: `Request.__lt__`'s
/// (priority, arrival time, request id), the id here the order of `add`.
fn key(seq: &Seq) -> (i32, u64, u64) {
    (seq.priority, seq.arrival.0, seq.arrival.1)
}

impl Engine {
    /// Puts `slot` in the waiting queue: at the back under FCFS, at its
    /// key's place under Priority.
    pub(super) fn enqueue(&mut self, slot: u32) {
        match self.config.scheduling_policy {
            SchedulingPolicy::Fcfs => self.waiting.push_back(slot),
            SchedulingPolicy::Priority => self.insert_by_key(slot),
        }
    }

    /// Priority: `slot` into the sorted waiting queue (a preempted request's
    /// `prepend_request`, which the heap turns into `add_request`).
    pub(super) fn insert_by_key(&mut self, slot: u32) {
        let seqs = &self.seqs;
        let k = key(seqs[slot as usize].as_ref().expect("live slot"));
        let at = self.waiting.partition_point(|&s| key(seqs[s as usize].as_ref().expect("live slot")) < k);
        self.waiting.insert(at, slot);
    }

    /// Priority: the index in `running` of the victim, the request of
    /// greatest (priority, arrival).
    pub(super) fn priority_victim(&self) -> usize {
        // `max(self.running, key=lambda r: (r.priority, r.arrival_time))`:
        // no request id in the key, and Python's `max` keeps the first of
        // equals (Rust's `max_by_key` the last).
        let key_of = |i: usize| {
            let seq = self.seqs[self.running[i] as usize].as_ref().expect("live slot");
            (seq.priority, seq.arrival.0)
        };
        let mut victim = 0;
        for i in 1..self.running.len() {
            if key_of(i) > key_of(victim) {
                victim = i;
            }
        }
        victim
    }

    /// Priority: the scheduling preempted the request it was growing, the
    /// least urgent, and scheduled nothing, while requests after it still
    /// run (under FCFS the victim is the last one, so this cannot happen).
    /// vLLM's engine core runs the empty step and calls `schedule()` again at
    /// once: done here, the preemptions reported with the step it builds.
    /// Each call preempts at least one running request, so this ends.
    ///
    /// Only with no step in flight (sync scheduling, or async from idle).
    /// With one in flight (`queue_step`), `step_with_batch_queue` (core.py,
    /// 0.15.1 through 0.33.0) queues the empty output behind it, which fills
    /// the batch queue (or executed nothing), so it blocks on the step in
    /// flight and applies its output (`update_from_output`) before the next
    /// `schedule()`: here the step's end schedules again (`start_step`), with
    /// the victim's in-flight token in its sequence. Re-scheduled at once,
    /// the victim would come back one token short and fit in blocks vLLM
    /// does not have (`prio_c` async, 0.15.1 and 0.19.0, t 17).
    pub(super) fn schedule_again(&mut self, latency: &impl LatencyModel, events: &mut Vec<EngineEvent>) -> bool {
        let carried = std::mem::take(&mut self.building.preempted);
        let scheduled = self.schedule(latency, events);
        self.building.preempted.splice(0..0, carried);
        scheduled
    }

    /// Priority: takes `victim`, already scheduled in the step being built,
    /// out of it again, before it is preempted; returns the tokens it had,
    /// which go back to the step's budget (`None`: it was not scheduled).
    pub(super) fn unschedule(&mut self, victim: u32) -> Option<u32> {
        let j = self.building.entries.iter().position(|e| e.slot == victim)?;
        // Its prefill chunk, if any, is the one after those of the entries
        // before it (only running requests are in the batch yet).
        let seqs = &self.seqs;
        let is_prefill = |slot: u32, n: u32| {
            let s = seqs[slot as usize].as_ref().expect("live slot");
            s.num_computed - n < s.prefill_end
        };
        let chunk = self.building.entries[..j].iter().filter(|e| is_prefill(e.slot, e.tokens)).count();
        let entry = self.building.entries.remove(j);
        let seq = self.seqs[victim as usize].as_mut().expect("live slot");
        let n = entry.tokens;
        seq.num_computed -= n;
        seq.in_flight_tokens -= n;
        if entry.samples {
            seq.pending -= 1;
        }
        let priced = &mut self.building.priced;
        if seq.num_computed < seq.prefill_end {
            priced.prefills.remove(chunk);
        } else {
            priced.decodes -= 1;
            priced.decode_context_tokens -= u64::from(self.config.attention_span.attended(seq.num_computed));
        }
        self.stats.computed_tokens -= u64::from(n);
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priority_engine(blocks: u32) -> Engine {
        Engine::new(EngineConfig {
            scheduling_policy: SchedulingPolicy::Priority,
            ..EngineConfig::for_tests(8, 64, blocks)
        })
    }

    fn owner(node: u32) -> Owner {
        Owner { slot: node, node }
    }

    fn add(e: &mut Engine, node: u32, input: u32, output: u32, priority: i32) {
        let call = LlmCall::new(input, output).with_priority(priority);
        e.add(owner(node), &call, KvTransfer::Local, 0, u64::from(node)).unwrap();
    }

    fn waiting_nodes(e: &Engine) -> Vec<u32> {
        e.waiting.iter().map(|&s| e.owner(s).node).collect()
    }

    #[test]
    fn the_queue_is_ordered_by_priority_then_arrival() {
        let mut e = priority_engine(64);
        for (node, p) in [(0, 5), (1, 0), (2, 5), (3, -1), (4, 0)] {
            add(&mut e, node, 4, 1, p);
        }
        // Lower value first; equal values in the order they were added.
        assert_eq!(waiting_nodes(&e), [3, 1, 4, 0, 2]);
    }

    #[test]
    fn fcfs_ignores_priority() {
        let mut e = Engine::new(EngineConfig::for_tests(8, 64, 64));
        for (node, p) in [(0, 5), (1, 0), (2, -1)] {
            add(&mut e, node, 4, 1, p);
        }
        assert_eq!(waiting_nodes(&e), [0, 1, 2]);
    }

    #[test]
    fn a_preempted_request_reenters_by_its_key_not_at_the_front() {
        let mut e = priority_engine(64);
        add(&mut e, 0, 4, 1, 2);
        add(&mut e, 1, 4, 1, 1);
        let slot = e.waiting.pop_back().unwrap();
        assert_eq!(e.owner(slot).node, 0);
        e.running.push(slot);
        add(&mut e, 2, 4, 1, 3);
        e.running.retain(|&s| s != slot);
        e.preempt(slot);
        // (2, first) sits between (1, second) and (3, third).
        assert_eq!(waiting_nodes(&e), [1, 0, 2]);
    }

    #[test]
    fn the_victim_is_the_greatest_priority_then_the_latest_arrival() {
        let mut e = priority_engine(64);
        for (node, p) in [(0, 1), (1, 7), (2, 7), (3, 0)] {
            add(&mut e, node, 4, 1, p);
        }
        // Running in admission order 0, 1, 2, 3 (not the queue's order).
        let mut slots: Vec<u32> = e.waiting.drain(..).collect();
        slots.sort_by_key(|&s| e.owner(s).node);
        e.running = slots;
        assert_eq!(e.owner(e.running[e.priority_victim()]).node, 2);
        e.running.remove(e.priority_victim());
        assert_eq!(e.owner(e.running[e.priority_victim()]).node, 1);
    }

    #[test]
    fn unscheduling_a_victim_restores_the_batch_and_the_budget() {
        let mut e = priority_engine(64);
        add(&mut e, 0, 20, 4, 0);
        add(&mut e, 1, 30, 4, 0);
        let (a, b) = (e.waiting[0], e.waiting[1]);
        e.waiting.clear();
        e.running = vec![a, b];
        for &s in &[a, b] {
            e.seqs[s as usize].as_mut().unwrap().admitted = true;
        }
        e.building.clear();
        e.schedule_tokens::<false>(a, 20);
        e.schedule_tokens::<false>(b, 30);
        assert_eq!(e.unschedule(a), Some(20));
        let seq = e.seqs[a as usize].as_ref().unwrap();
        assert_eq!((seq.num_computed, seq.in_flight_tokens, seq.pending), (0, 0, 0));
        // What is left is b's chunk alone.
        let mut only_b = Batch::default();
        std::mem::swap(&mut e.building, &mut only_b);
        e.seqs[b as usize].as_mut().unwrap().num_computed = 0;
        e.seqs[b as usize].as_mut().unwrap().in_flight_tokens = 0;
        e.seqs[b as usize].as_mut().unwrap().pending = 0;
        e.schedule_tokens::<false>(b, 30);
        assert_eq!(only_b.priced, e.building.priced);
        assert_eq!(only_b.entries.len(), 1);
        assert_eq!(e.unschedule(a), None, "not in the batch");
    }

    /// Every step takes 1 ms.
    struct Fixed;

    impl LatencyModel for Fixed {
        fn step_time_us(&self, _: &crate::latency::StepBatch) -> u64 {
            1000
        }
    }

    /// A step's (node, tokens), in order.
    type Step = Vec<(u32, u32)>;

    fn nodes(b: &Batch, e: &Engine) -> Step {
        b.entries.iter().map(|x| (e.owner(x.slot).node, x.tokens)).collect()
    }

    /// 3 usable blocks of 16. Node 0 (priority 2, 31-token prompt) is
    /// admitted alone, then node 1 (priority 0, 8 tokens) beside it; at
    /// the third scheduling node 0, first in `running`, needs a third block
    /// for its 33rd token, is its own victim (the least urgent), and the
    /// scheduling schedules nothing. Returns the engine with nothing
    /// executing, the third scheduling's step (`None`: nothing scheduled)
    /// and what it preempted.
    fn self_preemption(async_scheduling: bool) -> (Engine, Option<Step>, Vec<u32>) {
        let mut e = Engine::new(EngineConfig {
            async_scheduling,
            scheduling_policy: SchedulingPolicy::Priority,
            ..EngineConfig::for_tests(8, 64, 4)
        });
        e.set_tracing(true);
        let ev = &mut Vec::new();
        add(&mut e, 0, 31, 10, 2);
        assert!(e.start_step(&Fixed, ev).is_some());
        add(&mut e, 1, 8, 10, 0);
        let third = if async_scheduling {
            assert!(e.queue_step(&Fixed, ev));
            e.finish_step(1000, ev);
            assert!(e.start_queued().is_some());
            assert_eq!(nodes(e.executing(), &e), [(0, 1), (1, 8)]);
            // Scheduled while that step runs: node 0 has 32 tokens, the 33rd
            // in flight.
            let queued = e.queue_step(&Fixed, ev);
            let preempted: Vec<u32> = e.building.preempted.iter().map(|&s| e.owner(s).node).collect();
            let step = queued.then(|| nodes(e.last_scheduled(), &e));
            e.finish_step(2000, ev);
            (step, preempted)
        } else {
            e.finish_step(1000, ev);
            assert!(e.start_step(&Fixed, ev).is_some());
            assert_eq!(nodes(e.executing(), &e), [(0, 1), (1, 8)]);
            e.finish_step(2000, ev);
            let step = e.start_step(&Fixed, ev).map(|_| nodes(e.executing(), &e));
            let preempted = e.executing().preempted.iter().map(|&s| e.owner(s).node).collect();
            if step.is_some() {
                e.finish_step(3000, ev);
            }
            (step, preempted)
        };
        (e, third.0, third.1)
    }

    /// With no step in flight the engine core schedules again at once: the
    /// same call goes on to schedule node 1, and admits nothing (node 0, 33
    /// tokens, needs 3 blocks; node 1 holds one).
    #[test]
    fn a_self_preemption_schedules_again_at_once_with_no_step_in_flight() {
        let (e, step, preempted) = self_preemption(false);
        assert_eq!(step, Some(vec![(1, 1)]));
        assert_eq!(preempted, [0]);
        assert_eq!(waiting_nodes(&e), [0]);
    }

    /// With a step in flight (async) vLLM's engine core applies that step's
    /// output before it schedules again (`step_with_batch_queue`): the
    /// scheduling that preempted schedules nothing, and the next one, at
    /// the step's end, sees node 0 with its 33rd token, which does not fit.
    /// Scheduled again at once, node 0 would come back with 32 tokens in
    /// the 2 free blocks (`prio_c` async, 0.15.1 and 0.19.0, t 17).
    #[test]
    fn a_self_preemption_with_a_step_in_flight_waits_for_its_output() {
        let (mut e, step, preempted) = self_preemption(true);
        assert_eq!(step, None);
        assert_eq!(preempted, [0]);
        assert_eq!(e.preempted_unscheduled().iter().map(|&s| e.owner(s).node).collect::<Vec<_>>(), [0]);
        assert_eq!(e.seqs[e.waiting[0] as usize].as_ref().unwrap().num_tokens, 33);
        assert!(e.start_step(&Fixed, &mut Vec::new()).is_some());
        assert_eq!(nodes(e.executing(), &e), [(1, 1)]);
        assert!(e.executing().admitted.is_empty());
        assert_eq!(waiting_nodes(&e), [0]);
    }

    #[test]
    fn names_round_trip() {
        for p in [SchedulingPolicy::Fcfs, SchedulingPolicy::Priority] {
            assert_eq!(SchedulingPolicy::parse(p.name()), Some(p));
        }
        assert_eq!(SchedulingPolicy::parse("FCFS"), None);
        assert_eq!(SchedulingPolicy::default(), SchedulingPolicy::Fcfs);
    }
}
