//! The engines' steps: starting one (the queued one under async
//! scheduling, else a newly scheduled one; data-parallel ranks together),
//! its end and what it delivered, and the step trace's records of them.

use super::engine::{Batch, Departure, EngineEvent};
use super::event::Event;
use super::outcome::{ClockOverflow, ResultSink};
use super::simulation::Simulation;
use super::step_trace::NodeRef;
use crate::latency::LatencyModel;

/// An idle data-parallel rank's batch: nothing (it runs the dummy batch).
static IDLE_RANK: crate::latency::StepBatch = crate::latency::StepBatch::EMPTY;

impl<L: LatencyModel> Simulation<L> {
    /// If replica `replica`'s engine is idle, starts its next step: the one
    /// queued (async scheduling), else a newly scheduled one; with async
    /// scheduling, the step after it is then scheduled at once.
    pub(super) fn start_step(&mut self, replica: u32, sink: &mut dyn ResultSink) {
        if self.cluster.instances[replica as usize].engine.stepping() {
            return;
        }
        if let Some(d) = self.begin_step(replica as usize) {
            self.launch(replica, d, sink);
        }
    }

    /// Data-parallel ranks in lockstep: when none is executing and one has
    /// work, every rank with work starts its step and the others run a dummy
    /// batch; all end together, after the step the latency model prices for
    /// all ranks at once (vLLM's DP engines of an MoE model meet in every MoE
    /// layer; `DPEngineCoreProc` runs `execute_dummy_batch` on an idle rank
    /// while any rank has requests).
    pub(super) fn start_lockstep(&mut self, ranks: std::ops::Range<u32>, sink: &mut dyn ResultSink) {
        let range = ranks.start as usize..ranks.end as usize;
        if self.cluster.instances[range.clone()].iter().any(|i| i.engine.stepping()) {
            return;
        }
        let mut started = std::mem::take(&mut self.lockstep_started);
        started.clear();
        for r in range.clone() {
            if self.begin_step(r).is_some() {
                started.push(r as u32);
            }
        }
        if !started.is_empty() {
            let batches: Vec<&crate::latency::StepBatch> = self.cluster.instances[range.clone()]
                .iter()
                .map(|i| if i.engine.stepping() { &i.engine.executing().priced } else { &IDLE_RANK })
                .collect();
            // LoRA loads and kernels are each rank's own, beside the shared step.
            let lora_us = self.cluster.instances[range.clone()]
                .iter()
                .filter(|i| i.engine.stepping())
                .map(|i| i.engine.executing().lora_us)
                .max()
                .unwrap_or(0);
            let duration = self.cluster.pool_of(ranks.start).latency.lockstep_time_us(&batches) + lora_us;
            for &r in &started {
                self.launch(r, duration, sink);
            }
        }
        self.lockstep_started = started;
    }

    /// Starts replica `r`'s queued step or schedules a new one; its duration,
    /// or `None` when it has nothing to run.
    fn begin_step(&mut self, r: usize) -> Option<u64> {
        let mut events = std::mem::take(&mut self.events);
        let instance = &mut self.cluster.instances[r];
        let latency = &self.cluster.pools[instance.pool as usize].latency;
        let duration = match instance.engine.start_queued() {
            Some(d) => {
                std::mem::swap(&mut instance.trace_executing, &mut instance.trace_queued);
                Some(d)
            }
            None if instance.engine.has_work() => {
                let d = instance.engine.start_step(latency, &mut events);
                if self.tracing {
                    self.trace_scheduling(r, d.is_some(), false);
                }
                d
            }
            None => None,
        };
        self.scheduled(r, &mut events);
        self.events = events;
        duration
    }

    /// Replica `replica`'s step, just begun, executes for `duration_us`:
    /// its end is queued, it is traced, and with async scheduling the step
    /// after it is scheduled at once.
    fn launch(&mut self, replica: u32, duration_us: u64, sink: &mut dyn ResultSink) {
        let r = replica as usize;
        let end = self.later(self.now, duration_us, || ClockOverflow::Engine);
        self.queue.push(end, Event::StepEnd { replica });
        let cluster = self.cluster.instances.len() > 1;
        let instance = &mut self.cluster.instances[r];
        if self.tracing {
            instance.trace_executing.index = instance.steps_started;
            instance.trace_executing.start_us = self.now;
            instance.trace_executing.duration_us = duration_us;
            instance.trace_executing.replica = cluster.then_some(replica);
            sink.engine_step(&instance.trace_executing);
        }
        instance.steps_started += 1;
        if instance.engine.config().async_scheduling {
            let mut events = std::mem::take(&mut self.events);
            let instance = &mut self.cluster.instances[r];
            let latency = &self.cluster.pools[instance.pool as usize].latency;
            let queued = instance.engine.queue_step(latency, &mut events);
            if self.tracing {
                self.trace_scheduling(r, queued, true);
            }
            self.scheduled(r, &mut events);
            self.events = events;
        }
    }

    /// Records the first admission of the requests replica `r`'s engine
    /// reports, and starts the reads it asks for.
    fn scheduled(&mut self, r: usize, events: &mut Vec<EngineEvent>) {
        for e in events.drain(..) {
            match e {
                EngineEvent::Scheduled(owner) => {
                    // The first admission anywhere: a split request's is its
                    // prefill's.
                    let now = self.now;
                    self.requests.get_mut(owner.slot).nodes[owner.node as usize].scheduled_us.get_or_insert(now);
                }
                EngineEvent::KvLoad { owner, slot: engine_slot, tokens } => self.kv_load(owner, engine_slot, tokens),
                EngineEvent::HostLoad { owner, slot: engine_slot, duration_us } => {
                    self.host_load(r as u32, owner, engine_slot, duration_us)
                }
                EngineEvent::Finished(_) | EngineEvent::Held { .. } => unreachable!("only a step's end finishes"),
            }
        }
    }

    /// Step trace: names the requests of what replica `r`'s engine just
    /// scheduled, in the record of the step executing or of the one queued.
    /// A scheduling that scheduled nothing can still have preempted (a
    /// request that cannot grow preempts itself): those are reported with
    /// the next step. Named now, since a slot can be reused before the step
    /// runs.
    pub(super) fn trace_scheduling(&mut self, r: usize, scheduled: bool, queued: bool) {
        let engine = &self.cluster.instances[r].engine;
        if !scheduled {
            let carried: Vec<NodeRef> =
                engine.preempted_unscheduled().iter().map(|&slot| self.node_ref(r, slot)).collect();
            self.cluster.instances[r].trace_carried.extend(carried);
            return;
        }
        let instance = &mut self.cluster.instances[r];
        let mut record =
            std::mem::take(if queued { &mut instance.trace_queued } else { &mut instance.trace_executing });
        let mut carried = std::mem::take(&mut instance.trace_carried);
        let engine = &self.cluster.instances[r].engine;
        let batch: &Batch = if queued { engine.last_scheduled() } else { engine.executing() };
        record.duration_us = batch.duration_us;
        record.kv_blocks_used = batch.kv_blocks_used;
        record.scheduled.clear();
        record.scheduled.extend(batch.entries.iter().map(|e| (self.node_ref(r, e.slot), e.tokens)));
        record.admitted.clear();
        record.admitted.extend(batch.admitted.iter().map(|&(slot, cached)| (self.node_ref(r, slot), cached)));
        record.preempted.clear();
        record.preempted.append(&mut carried);
        record.preempted.extend(batch.preempted.iter().map(|&slot| self.node_ref(r, slot)));
        let instance = &mut self.cluster.instances[r];
        instance.trace_carried = carried;
        *(if queued { &mut instance.trace_queued } else { &mut instance.trace_executing }) = record;
    }

    /// The request and node replica `r`'s engine holds in `slot`.
    pub(super) fn node_ref(&self, r: usize, slot: u32) -> NodeRef {
        let owner = self.cluster.instances[r].engine.owner(slot);
        let a = self.requests.active[owner.slot as usize].as_ref().expect("live request");
        NodeRef { request_id: a.request.request_id.clone(), node: owner.node }
    }

    pub(super) fn record_departure(&mut self, d: Departure) {
        let a = self.requests.get_mut(d.owner.slot);
        let split = a.progress[d.owner.node as usize].split.is_some();
        let node = &mut a.nodes[d.owner.node as usize];
        node.token_times_us = d.token_times_us;
        if split {
            // The prompt's cache hit is its prefill's; preemptions add up.
            node.preemptions += d.preemptions;
        } else {
            node.preemptions = d.preemptions;
            node.cached_tokens = d.cached_tokens;
        }
    }

    /// Replica `replica`'s executing step ends: tokens are delivered,
    /// finished requests leave (a split node's prefill goes on to its decode
    /// replica).
    pub(super) fn step_end(&mut self, replica: u32, sink: &mut dyn ResultSink) {
        let r = replica as usize;
        let mut events = std::mem::take(&mut self.events);
        sink.reclaim(self.cluster.instances[r].engine.spare_times());
        self.cluster.instances[r].engine.finish_step(self.now, &mut events);
        if self.check_invariants
            && let Err(e) = self.cluster.instances[r].engine.check_kv()
        {
            panic!("KV cache invariant broken on replica {r} at {} µs: {e}", self.now);
        }
        for e in events.drain(..) {
            match e {
                EngineEvent::Held { owner, slot: engine_slot } => self.prefill_held(owner, engine_slot),
                EngineEvent::Finished(d) if self.is_prefill(d.owner) => self.prefill_done(d, sink),
                EngineEvent::Finished(d) => {
                    let owner = d.owner;
                    self.record_departure(d);
                    self.node_done(owner.slot, owner.node, sink);
                }
                EngineEvent::Scheduled(_) | EngineEvent::KvLoad { .. } | EngineEvent::HostLoad { .. } => {
                    unreachable!("scheduling reports these")
                }
            }
        }
        self.events = events;
        self.gateway_pump(sink);
    }
}
