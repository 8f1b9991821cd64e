//! One vLLM V1 engine: the scheduler of `vllm/v1/core/sched/scheduler.py`
//! over the paged KV cache, priced by a latency model.
//!
//! A step, as vLLM schedules it: with a budget of `max_num_batched_tokens`,
//! every running request in order gets what it still needs to compute (its
//! next prefill chunk, capped by `long_prefill_token_threshold`, or one decode
//! token). When its KV blocks cannot be allocated, the most recently admitted
//! running request is preempted (recompute: blocks freed, back to the front of
//! the waiting queue, tokens already generated kept) until it fits or it is
//! the victim itself. Then, unless something was preempted, waiting requests
//! are admitted first-come first-served while the budget, `max_num_seqs` and
//! the free blocks allow, each starting after its longest prefix-cache hit.
//! A request whose computed tokens catch up with its sequence samples one
//! token at the end of the step.
//!
//! Here: the request state and the running half of a step. A request
//! enters in `add.rs`, waits for admission in `admit.rs`, and leaves at a
//! step's end (`finish.rs`) or otherwise (`exits.rs`). KV that comes from or
//! goes to anywhere but this GPU cache passes through the connector seam
//! (`connector.rs`: none, NIXL P/D, the CPU tier of `offload.rs` and
//! `cpu_tier.rs`); the step's records are in `batch.rs`, the engine
//! arguments in `config.rs`, LoRA adapters in `lora.rs`, speculative
//! decoding's drafts and acceptance in `speculative.rs`. Requests decoding
//! one token a step with room in their blocks are accounted for by the step,
//! not one by one (`steady.rs`).

mod add;
mod admit;
mod batch;
mod config;
mod connector;
mod cpu_tier;
mod exits;
mod finish;
mod lora;
mod offload;
mod priority;
mod span;
mod speculative;
mod stats;
mod steady;
mod token_times;

use std::collections::VecDeque;

use batch::Entry;
pub(crate) use batch::{Batch, Departure, EngineEvent, Owner};
pub use config::EngineConfig;
pub use connector::ConnectorKind;
use connector::KvConnector;
pub(crate) use connector::KvTransfer;
use lora::LoraState;
pub(crate) use lora::adapter_id;
pub use lora::{LoraConfig, LoraLoad};
pub use offload::{DiskTier, KvOffload, OffloadPolicy};
pub use priority::SchedulingPolicy;
pub use span::{AttentionSpan, Reach};
pub(crate) use speculative::request_key;
pub use speculative::{EaglePrefixRule, SpecDecode, SpecMethod, SpecStats};
pub use stats::EngineStats;
use token_times::{StepLog, TokenRuns};

use super::kv_cache::{KvCache, SeqBlocks, block_hashes, block_hashes_with_next, prompt_block_hashes};
use crate::latency::{LatencyModel, PrefillChunk};
use crate::workload::LlmCall;

/// One request in the engine. Laid out by hand, hot fields first
/// (`repr(C)`), 64-byte aligned: each running request is read twice a step
/// (scheduling and the step's end); its counters, its blocks and the end of
/// its open run of token steps (`TokenRuns` puts it first), all that a
/// decode step reads and writes, fill the first cache line. Left to rustc,
/// the counters trailed the `Vec`s, spread over up to four lines
/// (cachegrind on 20k chat requests: a fifth fewer L1 misses laid out so);
/// with the run's end on the second line, the step's end touched two lines
/// a request.
#[repr(C, align(64))]
struct Seq {
    /// Sequence length known so far: prompt plus tokens sampled and applied.
    num_tokens: u32,
    /// Prompt plus every output token.
    total_len: u32,
    /// Tokens computed or scheduled to be (vLLM advances
    /// `num_computed_tokens` when it schedules them).
    num_computed: u32,
    /// Tokens to be sampled by scheduled steps not applied yet (vLLM's
    /// `num_output_placeholders`; async scheduling only).
    pending: u32,
    /// Tokens scheduled in steps not applied yet (`num_in_flight_tokens`).
    in_flight_tokens: u32,
    /// `num_tokens` at the last admission: below it the request is prefilling.
    prefill_end: u32,
    blocks: SeqBlocks,
    /// The steps it sampled its tokens in (their times are in the engine's
    /// `step_log`).
    tokens: TokenRuns,
    /// Speculative decoding: the drafts proposed for its next step.
    drafts: u32,
    /// The client gave up: it leaves at the next step boundary, unreported.
    aborted: bool,
    /// Finished, its blocks kept for a send (`EngineEvent::Held`).
    held: bool,
    admitted: bool,
    /// Skipped for `max_loras` and not admitted since, with
    /// `LoraConfig::skipped_queue_first`: in vLLM's `skipped_waiting`.
    lora_skipped: bool,
    hashes: Vec<u64>,
    owner: Owner,
    /// Seeded tokens whose KV is resident at first admission.
    seeded_kv: u32,
    preemptions: u32,
    cached_tokens: u32,
    /// What its `kv_transfer_params` ask.
    transfer: KvTransfer,
    /// Where its remotely computed prompt KV stands.
    remote: RemoteKv,
    /// Its LoRA adapter's index in the engine's `LoraState` (0: the base model).
    lora: u32,
    /// Speculative decoding: its stream of acceptance draws (from its key)
    /// and its prompt length.
    spec_stream: u64,
    prompt_len: u32,
    /// Its `priority` and arrival number (the order of `add`): its key in
    /// the waiting queue under `SchedulingPolicy::Priority`.
    priority: i32,
    arrival: (u64, u64),
    /// Steady (`steady.rs`): the first step scheduled for it by the step
    /// instead of by itself, the next one that needs it (its due step: a
    /// block to take, or its last token), and the step of its last token.
    steady_from: u64,
    steady_due: u64,
    steady_last: u64,
}

// The end of the open run of token steps stays on `Seq`'s first line.
const _: () = assert!(std::mem::offset_of!(Seq, tokens) + std::mem::size_of::<u64>() <= 64);

/// A remote prefill's KV (vLLM's `WAITING_FOR_REMOTE_KVS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RemoteKv {
    /// None expected, or it has been used.
    None,
    /// Blocks allocated, the read under way: the request is skipped in the
    /// waiting queue.
    Loading,
    /// Landed: the request is admitted with it computed.
    Loaded,
}

impl Seq {
    fn departure(mut self, log: &StepLog, buffer: Option<Vec<u64>>) -> Departure {
        Departure {
            owner: self.owner,
            token_times_us: self.tokens.take(log, buffer),
            preemptions: self.preemptions,
            cached_tokens: self.cached_tokens,
        }
    }
}

/// The scheduler and KV cache of one engine. The latency model that prices
/// its steps is passed in: it is stateless, and one serves every replica.
pub(crate) struct Engine {
    config: EngineConfig,
    kv: KvCache,
    seqs: Vec<Option<Seq>>,
    free_slots: Vec<u32>,
    waiting: VecDeque<u32>,
    running: Vec<u32>,
    /// The step executing (valid while `stepping`).
    executing: Batch,
    /// Async scheduling: the step scheduled to run after `executing`.
    queued: Batch,
    has_queued: bool,
    /// Where the next step is scheduled into.
    building: Batch,
    hits: Vec<u32>,
    /// Aborted while a step was executing: freed at its end.
    pending_aborts: Vec<u32>,
    /// Requests that left at a step's end (kept for its buffer).
    left: Vec<u32>,
    /// Whether this step preempted anything (then nothing is admitted).
    preempted_this_step: bool,
    /// Whether a step is executing (between starting it and `finish_step`).
    stepping: bool,
    /// Record admissions and preemptions for the step trace.
    tracing: bool,
    stats: EngineStats,
    /// Who else holds KV for this engine.
    connector: Box<dyn KvConnector>,
    /// LoRA adapters (`engine.lora`; `None`: off).
    lora: Option<LoraState>,
    /// Speculative decoding's lookahead KV slots (0 when off).
    lookahead: u32,
    /// Of those, what a waiting request is admitted with (the release's rule).
    admission_lookahead: u32,
    /// How EAGLE changes prefix hits (the release's rule).
    eagle_prefix: EaglePrefixRule,
    /// Requests added so far: the next one's arrival number.
    arrivals: u64,
    /// When each step finished, for the requests' token times.
    step_log: StepLog,
    /// Emptied token-time buffers of requests that left, handed back by
    /// the results' consumer (`ResultSink::reclaim`): a departure's times
    /// go in one of these before a fresh allocation (2 KB a chat request,
    /// allocated and freed in a different order under several replicas:
    /// glibc's bins were 10 % of the 8-replica run).
    spare_times: Vec<Vec<u64>>,
    /// No LoRA, speculation or KV offload: the per-request loops of a step
    /// run without their hooks.
    plain: bool,
    /// Steps committed by `schedule` so far: the next one's index (as the
    /// step log numbers them when they end).
    scheduled_steps: u64,
    /// By slot: a steady decode (`steady.rs`).
    steady: Vec<bool>,
    /// How many are steady, and the sum of their computed tokens as of the
    /// next step to be scheduled.
    steady_count: u32,
    steady_context: u64,
    /// The steady requests' due steps (a wheel by step, a heap past it).
    due_steps: steady::DueSteps,
}

impl Engine {
    /// Where spare token-time buffers go (see `Engine::spare_times`).
    pub(crate) fn spare_times(&mut self) -> &mut Vec<Vec<u64>> {
        &mut self.spare_times
    }

    /// The engine arguments.
    pub(crate) fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub(crate) fn new(config: EngineConfig) -> Self {
        // vLLM takes one block out of the pool as the null block.
        let usable = config.num_gpu_blocks.saturating_sub(1);
        let mut kv = KvCache::with_groups(
            usable,
            config.block_size,
            config.enable_prefix_caching,
            config.free_uncached_blocks_first,
            &config.kv_groups,
        );
        let connector = connector(config.kv_connector, config.kv_offload, config.block_size);
        let cpu_tier_blocks = config.kv_offload.map_or(0, |o| u64::from(o.cpu_blocks));
        if connector.records_evictions() {
            kv.record_evictions();
        }
        kv.set_window_rules(
            config.window_admission_cap,
            config.window_lags_in_flight,
            config.prefix_cache_retention_interval,
            config.max_num_batched_tokens,
            config.async_scheduling,
            config.max_model_len,
        );
        if config.speculative.as_ref().is_some_and(|s| s.prefix_rule == EaglePrefixRule::HashNextToken) {
            kv.set_hash_lookahead(1);
        }
        let mut stats = EngineStats { cpu_tier_blocks, ..EngineStats::default() };
        if let Some(s) = &config.speculative {
            // Sized once: the metrics report speculation by these counters.
            stats.spec.by_accepted = vec![0; s.k as usize + 1];
        }
        // (With KV cache groups every scheduled request allocates: a window
        // may free blocks at any step.)
        let config_plain = config.lora.is_none()
            && config.speculative.is_none()
            && config.kv_offload.is_none()
            && !kv.hybrid()
            && config.attention_span.is_full();
        Engine {
            connector,
            lora: config.lora.map(LoraState::new),
            lookahead: config.speculative.as_ref().map_or(0, SpecDecode::lookahead),
            admission_lookahead: config
                .speculative
                .as_ref()
                .filter(|s| s.lookahead_at_admission)
                .map_or(0, SpecDecode::lookahead),
            eagle_prefix: config.speculative.as_ref().map_or(EaglePrefixRule::None, |s| s.prefix_rule),
            config,
            kv,
            seqs: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            executing: Batch::default(),
            queued: Batch::default(),
            has_queued: false,
            building: Batch::default(),
            hits: Vec::new(),
            pending_aborts: Vec::new(),
            left: Vec::new(),
            preempted_this_step: false,
            stepping: false,
            tracing: false,
            stats,
            arrivals: 0,
            step_log: StepLog::default(),
            spare_times: Vec::new(),
            plain: config_plain,
            scheduled_steps: 0,
            steady: Vec::new(),
            steady_count: 0,
            steady_context: 0,
            due_steps: steady::DueSteps::default(),
        }
    }

    /// Records admissions and preemptions in each [`Batch`].
    pub(crate) fn set_tracing(&mut self, on: bool) {
        // A traced step names every request it scheduled.
        if on {
            self.settle_all();
        }
        self.tracing = on;
    }

    /// Its LoRA adapters, for a router (`None` without `engine.lora`).
    pub(crate) fn lora(&self) -> Option<&LoraState> {
        self.lora.as_ref()
    }

    pub(crate) fn stats(&self) -> &EngineStats {
        &self.stats
    }

    pub(crate) fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    pub(crate) fn stepping(&self) -> bool {
        self.stepping
    }

    pub(crate) fn num_running(&self) -> usize {
        self.running.len()
    }

    pub(crate) fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The step executing now.
    pub(crate) fn executing(&self) -> &Batch {
        &self.executing
    }

    /// The step scheduled last (by [`Engine::start_step`] or
    /// [`Engine::queue_step`]).
    pub(crate) fn last_scheduled(&self) -> &Batch {
        if self.has_queued { &self.queued } else { &self.executing }
    }

    /// Requests preempted by the last scheduling when it scheduled nothing
    /// (a request that cannot grow preempts itself): no step runs, and they
    /// are reported with the next one.
    pub(crate) fn preempted_unscheduled(&self) -> &[u32] {
        &self.building.preempted
    }

    /// The request in `slot`, for the step trace.
    pub(crate) fn owner(&self, slot: u32) -> Owner {
        self.seqs[slot as usize].as_ref().expect("live slot").owner
    }

    /// KV blocks referenced by requests, and the cache's size.
    pub(crate) fn kv_blocks(&self) -> (u32, u32) {
        (self.kv.num_used(), self.kv.num_blocks())
    }

    /// The KV cache, for a router draining its prefix-index events.
    pub(crate) fn kv_mut(&mut self) -> &mut KvCache {
        &mut self.kv
    }

    pub(crate) fn check_kv(&self) -> Result<(), String> {
        if let Some(l) = &self.lora {
            let seqs = &self.seqs;
            let adapter = |s: &u32| seqs[*s as usize].as_ref().map_or(u32::MAX, |q| q.lora);
            l.check_waiting(self.waiting.iter().map(adapter))?;
        }
        self.kv.check()
    }

    /// Schedules a step and starts executing it; returns its duration in µs,
    /// or `None` when there is nothing to run.
    pub(crate) fn start_step(&mut self, latency: &impl LatencyModel, events: &mut Vec<EngineEvent>) -> Option<u64> {
        debug_assert!(!self.stepping && !self.has_queued);
        if !self.schedule(latency, events) {
            return None;
        }
        std::mem::swap(&mut self.executing, &mut self.building);
        self.stepping = true;
        Some(self.executing.duration_us)
    }

    /// Async scheduling: schedules the step after the one executing, whose
    /// samples are placeholders until it ends. False when there is nothing
    /// to schedule.
    pub(crate) fn queue_step(&mut self, latency: &impl LatencyModel, events: &mut Vec<EngineEvent>) -> bool {
        debug_assert!(self.stepping && !self.has_queued);
        if !self.schedule(latency, events) {
            return false;
        }
        std::mem::swap(&mut self.queued, &mut self.building);
        self.has_queued = true;
        true
    }

    /// Async scheduling: the queued step starts executing; returns its
    /// duration, or `None` when none was queued.
    pub(crate) fn start_queued(&mut self) -> Option<u64> {
        debug_assert!(!self.stepping);
        if !self.has_queued {
            return None;
        }
        std::mem::swap(&mut self.executing, &mut self.queued);
        self.has_queued = false;
        self.stepping = true;
        Some(self.executing.duration_us)
    }

    /// vLLM's `schedule()` into `self.building`: running requests first, then
    /// waiting ones. False when it scheduled nothing.
    fn schedule(&mut self, latency: &impl LatencyModel, events: &mut Vec<EngineEvent>) -> bool {
        self.building.clear();
        self.preempted_this_step = false;
        if let Some(l) = &mut self.lora {
            l.begin_step();
        }
        let mut lpt = self.config.long_prefill_token_threshold;
        // scheduler.py (0.31+): "When it is the only request there is nobody
        // to starve, so let it use the whole budget".
        if self.config.lone_request_skips_prefill_threshold && self.running.len() + self.waiting.len() <= 1 {
            lpt = 0;
        }
        let mut budget = self.config.max_num_batched_tokens;
        self.offload_evictions();
        self.settle_due();
        // The running loop without the hooks of LoRA, speculation and offload
        // when none is on (`Engine::plain`): monomorphized apart, it skips
        // their checks, a few loads each for every running request a step.
        if self.plain {
            self.schedule_running::<true>(&mut budget, lpt);
        } else {
            self.schedule_running::<false>(&mut budget, lpt);
        }
        // A scheduling that preempted admits nothing (vLLM's `if not
        // preempted_reqs`), but one that preempted every running request and
        // scheduled nothing is followed at once by the engine core's next
        // `schedule()`, which admits: done here, or an engine whose blocks
        // are held by requests not running (remote KV landing) would idle.
        if !self.preempted_this_step || (self.running.is_empty() && self.building.entries.is_empty()) {
            if let Some(l) = self.lora.as_mut().filter(|_| self.config.lora.is_some_and(|c| c.every_running_counts)) {
                for &slot in &self.running {
                    l.hold(self.seqs[slot as usize].as_ref().expect("live slot").lora);
                }
            }
            self.admit_waiting(&mut budget, lpt, events);
        }
        if self.building.entries.is_empty() && self.steady_count == 0 {
            // Priority: a request preempted itself ahead of others still
            // running; vLLM's engine core schedules again at once when no
            // step is in flight, else only after that step's output is
            // applied (`priority.rs` `schedule_again`).
            if self.config.scheduling_policy == SchedulingPolicy::Priority
                && self.preempted_this_step
                && !self.running.is_empty()
                && !self.stepping
            {
                return self.schedule_again(latency, events);
            }
            return false;
        }
        self.schedule_steady();
        self.scheduled_steps += 1;
        self.stats.steps += 1;
        self.building.duration_us = latency.step_time_us(&self.building.priced);
        if let Some(l) = &mut self.lora {
            self.building.lora_us = l.finish_step(&self.building.priced, &mut self.stats);
            self.building.duration_us += self.building.lora_us;
        }
        if let Some(s) = &self.config.speculative {
            self.building.duration_us += s.draft.step_us(self.building.draft_seqs, self.building.draft_context);
        }
        self.building.kv_blocks_used = self.kv.num_used();
        true
    }

    /// The running requests' half of [`Engine::schedule`], in order, while
    /// the token budget lasts. `PLAIN`: no LoRA, speculation or offload.
    fn schedule_running<const PLAIN: bool>(&mut self, budget_ref: &mut u32, lpt: u32) {
        let mut budget = *budget_ref;
        let room = self.kv.room();
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let slot = self.running[i];
            if PLAIN && self.steady[slot as usize] {
                // A steady decode: its token is the step's (`steady.rs`).
                budget -= 1;
                i += 1;
                continue;
            }
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            // Async: its last token is being sampled by a step in flight
            // (scheduler.py: "Avoid scheduling an extra step when we are sure
            // that the previous step has reached request.max_tokens"). With
            // drafts, `pending` holds the in-flight step's drafts too, and only
            // its first token is sure: vLLM's `num_computed_tokens + 2 −
            // num_output_placeholders`, which is num_tokens + 1 there.
            if seq.pending > 0 && seq.num_tokens + seq.pending.min(1) >= seq.total_len {
                i += 1;
                continue;
            }
            let drafts = if PLAIN { 0 } else { seq.drafts };
            let mut n = seq.num_tokens + seq.pending + drafts - seq.num_computed;
            if lpt > 0 {
                n = n.min(lpt);
            }
            n = n.min(budget);
            // vLLM also caps n at max_model_len − num_computed − 1, which
            // binds only on drafts: `add` refuses sequences longer than
            // max_model_len. With async scheduling num_computed counts the
            // in-flight drafts as accepted, and the cap may leave nothing:
            // the request waits a step (scheduler.py `num_new_tokens == 0`).
            if !PLAIN && seq.drafts > 0 {
                n = n.min(self.config.max_model_len.saturating_sub(seq.num_computed + 1));
                if n == 0 {
                    i += 1;
                    continue;
                }
            }
            let target = seq.num_computed + n;
            let known = seq.num_tokens;
            // Most of a step: a decode whose last block has room (the KV
            // fast path, its settings in registers: `kv_cache::Room`).
            if PLAIN && room.fits(&seq.blocks, &seq.hashes, target, known) {
                self.schedule_tokens::<true>(slot, n);
                budget -= n;
                i += 1;
                continue;
            }
            // Slots for the tokens and the drafts' lookahead (kv_cache_manager.py
            // `num_tokens_need_slot`, capped at max_model_len).
            let slots = if PLAIN || self.lookahead == 0 {
                target
            } else {
                (target + self.lookahead).min(self.config.max_model_len.max(target))
            };
            if self.kv.hybrid() {
                // `remove_skipped_blocks`, before the allocation (even one
                // that fails); from 0.33 by the processed tokens.
                let lag = if self.kv.window_lags_in_flight() { seq.in_flight_tokens } else { 0 };
                self.kv.remove_skipped(&mut seq.blocks, seq.num_computed.saturating_sub(lag));
            }
            if !self.kv.allocate(&mut seq.blocks, &seq.hashes, &[], slots, known)
                && !self.preempt_for(slot, slots, &mut i, &mut budget)
            {
                // It went itself: out of `running` (priority takes it from
                // its place), so `i` is already the next one's.
                if self.config.scheduling_policy == SchedulingPolicy::Priority && self.config.self_preemption_continues
                {
                    continue;
                }
                break;
            }
            self.schedule_tokens::<PLAIN>(slot, n);
            budget -= n;
            i += 1;
        }
        if PLAIN {
            // Steady requests the budget did not reach are not in this step.
            // (Under FCFS what the requests ahead of a steady one ask never
            // grows, so none of these runs reaches it; kept so a budget that
            // does run out stays exact.)
            for k in i..self.running.len() {
                self.settle_if_steady(self.running[k]);
            }
        }
        *budget_ref = budget;
    }

    /// Adds `n` tokens of `slot` to the step being built, and its chunk to
    /// the batch the latency model prices. Like vLLM's
    /// `_update_after_schedule`, the tokens count as computed from now on.
    /// Inlined into the scheduling loops, where it runs once per request per
    /// step: left as a call it cost 8 % of `cargo bench --bench sim -- one
    /// 100000`.
    #[inline(always)]
    fn schedule_tokens<const PLAIN: bool>(&mut self, slot: u32, n: u32) {
        let async_scheduling = self.config.async_scheduling;
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        if seq.num_computed >= seq.prefill_end {
            self.building.priced.decodes += 1;
            self.building.priced.decode_context_tokens +=
                u64::from(self.config.attention_span.attended(seq.num_computed));
        }
        let known_end = seq.num_tokens + seq.pending;
        let samples = seq.num_computed + n >= known_end;
        if !PLAIN && let Some(l) = &mut self.lora {
            l.note(seq.lora, n, &mut self.building.priced);
        }
        // Tokens past the known sequence are drafts (scheduler.py
        // `num_scheduled_spec_tokens`); none without speculation, whose
        // path skips all of this (it cost ~10 % of the 100k chat bench).
        let (mut drafts, mut pos) = (0, 0);
        if !PLAIN && let Some(s) = &self.config.speculative {
            drafts = (seq.num_computed + n).saturating_sub(known_end);
            seq.drafts = 0;
            self.building.priced.spec_tokens += drafts;
            if samples {
                self.building.draft_seqs += 1;
                self.building.draft_context += u64::from(seq.num_computed + n);
                if async_scheduling {
                    // AsyncScheduler._update_after_schedule: k placeholder
                    // drafts for the next step, proposed on the GPU during
                    // this one.
                    seq.drafts = s.k;
                }
            }
            // The acceptance position: num_computed_tokens now, + 1 − the prompt.
            pos = (seq.num_computed + 1).wrapping_sub(seq.prompt_len);
        }
        if seq.num_computed < seq.prefill_end {
            self.building.priced.prefills.push(PrefillChunk {
                new_tokens: n,
                context_tokens: self.config.attention_span.attended(seq.num_computed),
                samples,
            });
        }
        let before = seq.num_computed;
        seq.num_computed += n;
        seq.in_flight_tokens += n;
        if !PLAIN && self.config.kv_offload.is_some() {
            // Full blocks this step completes go to the CPU tier.
            let bs = self.config.block_size;
            let (from, to) = ((before / bs) as usize, ((seq.num_computed / bs) as usize).min(seq.hashes.len()));
            if from < to {
                self.stats.cpu_stored_blocks += u64::from(self.connector.computed(&seq.hashes[from..to]));
            }
        }
        if samples {
            // Placeholders for the sampled token and every draft (vLLM's
            // `num_output_placeholders += 1 + cur_num_spec_tokens`).
            seq.pending += 1 + drafts;
        }
        debug_assert!(async_scheduling || seq.pending <= 1 + drafts);
        self.building.entries.push(Entry { slot, tokens: n, samples, dead: false, drafts, pos, preempted: false });
        self.stats.computed_tokens += u64::from(n);
    }

    /// KV offload with `policy: evicted`: the blocks HBM evicted since the
    /// last call go to the CPU tier.
    fn offload_evictions(&mut self) {
        if self.config.kv_offload.is_some() {
            let (connector, stats) = (&mut self.connector, &mut self.stats);
            self.kv.drain_evictions(|h| stats.cpu_stored_blocks += u64::from(connector.gpu_evicted(h)));
        }
    }

    /// vLLM's preemption loop: preempts the most recently admitted running
    /// request (under Priority: the least urgent, `priority.rs`) until `slot`,
    /// `running[*i]`, can hold `target` tokens. False when `slot` itself had
    /// to go.
    fn preempt_for(&mut self, slot: u32, target: u32, i: &mut usize, budget: &mut u32) -> bool {
        loop {
            let victim = match self.config.scheduling_policy {
                SchedulingPolicy::Fcfs => self.running.pop().expect("the request itself is running"),
                SchedulingPolicy::Priority => {
                    let v = self.priority_victim();
                    // Scheduled earlier in this step: out of it again. Only
                    // then does vLLM step its index back (`req_index -= 1`);
                    // a victim before it that was not scheduled makes it
                    // pass over the next request this step, as here.
                    if let Some(n) = self.unschedule(self.running[v]) {
                        *budget += n;
                        *i -= 1;
                    }
                    self.running.remove(v)
                }
            };
            self.preempt(victim);
            self.preempted_this_step = true;
            if victim == slot {
                return false;
            }
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            let known = seq.num_tokens;
            if self.kv.allocate(&mut seq.blocks, &seq.hashes, &[], target, known) {
                return true;
            }
        }
    }

    /// `_preempt_request`: blocks freed, everything to be recomputed, back to
    /// the front of the waiting queue. A token a step in flight samples for
    /// it is still delivered (vLLM's stale output).
    fn preempt(&mut self, slot: u32) {
        self.settle_if_steady(slot);
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        self.kv.free(&mut seq.blocks);
        seq.num_computed = 0;
        seq.pending = 0;
        seq.drafts = 0;
        seq.preemptions += 1;
        let adapter = seq.lora;
        self.stats.preemptions += 1;
        if self.config.scheduling_policy == SchedulingPolicy::Priority {
            self.insert_by_key(slot);
        } else if self.config.lora.is_some_and(|l| l.skipped_queue_first) {
            // Behind the requests in `skipped_waiting`, which lead the
            // waiting queue (`admit_pass` keeps them its head).
            let seqs = &self.seqs;
            let skipped =
                self.waiting.iter().take_while(|&&s| seqs[s as usize].as_ref().is_some_and(|q| q.lora_skipped));
            let at = skipped.count();
            self.waiting.insert(at, slot);
        } else {
            self.waiting.push_front(slot);
        }
        if self.stepping && self.config.speculative.is_some() {
            // Async: the step in flight computes for it still.
            for e in self.executing.entries.iter_mut().filter(|e| e.slot == slot) {
                e.preempted = true;
            }
        }
        if let Some(l) = &mut self.lora {
            l.wait(adapter);
        }
        if self.tracing {
            self.building.preempted.push(slot);
        }
    }
}

/// The connector of `kind`, or the offloading connector when `offload` is
/// set (a scenario refuses both at once) for blocks of `block_size` tokens.
fn connector(kind: ConnectorKind, offload: Option<KvOffload>, block_size: u32) -> Box<dyn KvConnector> {
    match (kind, offload) {
        (_, Some(o)) => Box::new(offload::OffloadingConnector::new(o, block_size)),
        (ConnectorKind::None, None) => Box::new(connector::NoConnector),
        (ConnectorKind::Nixl, None) => Box::new(connector::NixlConnector),
    }
}
