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
//! KV that comes from or goes to anywhere but this GPU cache passes through
//! the connector seam (`connector.rs`); the step's records are in
//! `batch.rs`, the engine arguments in `config.rs`, LoRA adapters in
//! `lora.rs`, speculative decoding's drafts and acceptance in
//! `speculative.rs`.

mod batch;
mod config;
mod connector;
mod cpu_tier;
mod lora;
mod offload;
mod speculative;

use std::collections::VecDeque;

use batch::Entry;
pub(crate) use batch::{Batch, Departure, EngineEvent, Owner};
pub use config::{EngineConfig, EngineStats};
pub use connector::ConnectorKind;
use connector::KvConnector;
pub(crate) use connector::KvTransfer;
use lora::LoraState;
pub use lora::{LoraConfig, LoraLoad};
pub(crate) use lora::{adapter_id, salt as salt_with_adapter};
pub use offload::{DiskTier, KvOffload, OffloadPolicy};
pub(crate) use speculative::request_key;
pub use speculative::{SpecDecode, SpecMethod, SpecStats};

use super::kv_cache::{KvCache, SeqBlocks, block_hashes};
use crate::latency::{LatencyModel, PrefillChunk};
use crate::workload::LlmCall;

struct Seq {
    owner: Owner,
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
    /// Seeded tokens whose KV is resident at first admission.
    seeded_kv: u32,
    hashes: Vec<u64>,
    blocks: SeqBlocks,
    preemptions: u32,
    cached_tokens: u32,
    admitted: bool,
    /// The client gave up: it leaves at the next step boundary, unreported.
    aborted: bool,
    /// What its `kv_transfer_params` ask.
    transfer: KvTransfer,
    /// Where its remotely computed prompt KV stands.
    remote: RemoteKv,
    /// Finished, its blocks kept for a send (`EngineEvent::Held`).
    held: bool,
    /// Emission time of each token so far; sized for all of them up front.
    token_times_us: Vec<u64>,
    /// Its LoRA adapter's index in the engine's `LoraState` (0: the base model).
    lora: u32,
    /// Speculative decoding: its stream of acceptance draws (from its key),
    /// its prompt length, and the drafts proposed for its next step.
    spec_stream: u64,
    prompt_len: u32,
    drafts: u32,
}

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
    fn departure(self) -> Departure {
        Departure {
            owner: self.owner,
            token_times_us: self.token_times_us,
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
}

impl Engine {
    /// The engine arguments.
    pub(crate) fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub(crate) fn new(config: EngineConfig) -> Self {
        // vLLM takes one block out of the pool as the null block.
        let usable = config.num_gpu_blocks.saturating_sub(1);
        let mut kv =
            KvCache::new(usable, config.block_size, config.enable_prefix_caching, config.free_uncached_blocks_first);
        let connector = connector::connector(config.kv_connector, config.kv_offload, config.block_size);
        let cpu_tier_blocks = config.kv_offload.map_or(0, |o| u64::from(o.cpu_blocks));
        if connector.records_evictions() {
            kv.record_evictions();
        }
        let mut stats = EngineStats { cpu_tier_blocks, ..EngineStats::default() };
        if let Some(s) = &config.speculative {
            // Sized once: the metrics report speculation by these counters.
            stats.spec.by_accepted = vec![0; s.k as usize + 1];
        }
        Engine {
            connector,
            lora: config.lora.map(LoraState::new),
            lookahead: config.speculative.as_ref().map_or(0, SpecDecode::lookahead),
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
            preempted_this_step: false,
            stepping: false,
            tracing: false,
            stats,
        }
    }

    /// Records admissions and preemptions in each [`Batch`].
    pub(crate) fn set_tracing(&mut self, on: bool) {
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

    /// Prompt tokens of `call` in this engine's prefix cache now (what
    /// llm-d's prefix-cache scorer estimates for a replica).
    pub(crate) fn cached_prompt_tokens(&self, call: &LlmCall) -> u32 {
        let Some(input) = call.prompt_ids().filter(|_| self.config.enable_prefix_caching) else { return 0 };
        let mut hashes = Vec::new();
        block_hashes(input, self.config.block_size, &mut hashes);
        if let Some(name) = &call.lora {
            lora::salt(&mut hashes, adapter_id(name));
        }
        self.kv.cached_prefix(&hashes) as u32 * self.config.block_size
    }

    /// Leading blocks of `hashes` this engine could serve without
    /// recomputing them: its GPU prefix cache's, then those the connector
    /// (a CPU tier) holds past them.
    pub(crate) fn cached_prefix_blocks(&self, hashes: &[u64]) -> usize {
        let gpu = self.kv.cached_prefix(hashes);
        gpu + self.connector.held_after(hashes, gpu)
    }

    pub(crate) fn check_kv(&self) -> Result<(), String> {
        if let Some(l) = &self.lora {
            let seqs = &self.seqs;
            let adapter = |s: &u32| seqs[*s as usize].as_ref().map_or(u32::MAX, |q| q.lora);
            l.check_waiting(self.waiting.iter().map(adapter))?;
        }
        self.kv.check()
    }

    /// Queues an llm call, with what its `kv_transfer_params` ask, or says
    /// why it can never be served. A `SendAfterPrefill` request is the
    /// proxy's prefill request: `max_tokens: 1`. `spec_key` is its
    /// speculative-decoding acceptance key ([`request_key`]).
    pub(crate) fn add(
        &mut self,
        owner: Owner,
        call: &LlmCall,
        transfer: KvTransfer,
        spec_key: u64,
    ) -> Result<(), String> {
        let (known, seeded_kv) = call.seeded.map_or((0, 0), |s| (s.known_tokens, s.kv_tokens));
        let num_tokens = known.max(call.input_tokens);
        // A prefill request is checked as the prefill server checks it: its
        // prompt and the one token it generates.
        let (total_len, tokens_to_emit, what) = if transfer == KvTransfer::SendAfterPrefill {
            let total = (call.input_tokens + call.output_tokens).min(num_tokens + 1);
            (total, 1, "the prompt + the prefill request's 1 output token")
        } else {
            (call.input_tokens + call.output_tokens, call.tokens_to_emit(), "input_tokens + output_tokens")
        };
        if total_len > self.config.max_model_len {
            return Err(format!(
                "unservable: {what} = {total_len} exceeds max_model_len = {}",
                self.config.max_model_len
            ));
        }
        // The last sampled token is never computed, so the KV cache must hold
        // total_len − 1 tokens at the end.
        let mut blocks_needed = total_len.saturating_sub(1).div_ceil(self.config.block_size);
        if let Some(s) = &self.config.speculative {
            // Its last step may schedule k drafts and reserve k lookahead slots;
            // with async scheduling, counted as if the k drafts in flight
            // were accepted.
            let optimistic = if self.config.async_scheduling { s.k } else { 0 };
            let most = (total_len.saturating_sub(1) + s.k + optimistic + self.lookahead).min(self.config.max_model_len);
            blocks_needed = most.div_ceil(self.config.block_size);
        }
        if blocks_needed > self.kv.num_blocks() {
            return Err(format!(
                "unservable: needs {blocks_needed} KV blocks of {} tokens, the cache has {}",
                self.config.block_size,
                self.kv.num_blocks()
            ));
        }
        if num_tokens == 0 {
            // vLLM's input processor refuses an empty prompt.
            return Err("unservable: the prompt is empty (input_tokens = 0)".to_owned());
        }
        let (adapter, lora) = match (&call.lora, &mut self.lora) {
            (None, _) => (0, 0),
            // vLLM answers 404 for a model name it does not serve.
            (Some(name), None) => {
                return Err(format!("unservable: LoRA adapter `{name}` on an engine without engine.lora"));
            }
            (Some(name), Some(l)) => {
                let id = adapter_id(name);
                (id, l.enter(id))
            }
        };
        let mut hashes = Vec::new();
        if self.config.enable_prefix_caching
            && let Some(input) = call.prompt_ids()
        {
            let output = call.output_token_ids.iter().flatten().copied();
            block_hashes(input.chain(output), self.config.block_size, &mut hashes);
            if adapter != 0 {
                lora::salt(&mut hashes, adapter);
            }
        }
        let seq = Seq {
            owner,
            num_tokens,
            total_len,
            num_computed: 0,
            pending: 0,
            in_flight_tokens: 0,
            prefill_end: num_tokens,
            seeded_kv,
            hashes,
            blocks: SeqBlocks::with_capacity(blocks_needed as usize),
            preemptions: 0,
            cached_tokens: 0,
            admitted: false,
            aborted: false,
            transfer,
            remote: RemoteKv::None,
            held: false,
            token_times_us: Vec::with_capacity(tokens_to_emit as usize),
            lora,
            spec_stream: self.config.speculative.as_ref().map_or(0, |s| s.stream(spec_key)),
            prompt_len: num_tokens,
            drafts: 0,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.seqs[s as usize] = Some(seq);
                s
            }
            None => {
                self.seqs.push(Some(seq));
                self.seqs.len() as u32 - 1
            }
        };
        self.waiting.push_back(slot);
        if let Some(l) = &mut self.lora {
            l.wait(lora);
        }
        Ok(())
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
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let slot = self.running[i];
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
            let mut n = seq.num_tokens + seq.pending + seq.drafts - seq.num_computed;
            if lpt > 0 {
                n = n.min(lpt);
            }
            n = n.min(budget);
            // vLLM also caps n at max_model_len − num_computed − 1, which
            // binds only on drafts: `add` refuses sequences longer than
            // max_model_len. With async scheduling num_computed counts the
            // in-flight drafts as accepted, and the cap may leave nothing:
            // the request waits a step (scheduler.py `num_new_tokens == 0`).
            if seq.drafts > 0 {
                n = n.min(self.config.max_model_len.saturating_sub(seq.num_computed + 1));
                if n == 0 {
                    i += 1;
                    continue;
                }
            }
            let target = seq.num_computed + n;
            let known = seq.num_tokens;
            // Slots for the tokens and the drafts' lookahead (kv_cache_manager.py
            // `num_tokens_need_slot`, capped at max_model_len).
            let slots = (target + self.lookahead).min(self.config.max_model_len.max(target));
            if !self.kv.allocate(&mut seq.blocks, &seq.hashes, &[], slots, known) && !self.preempt_for(slot, slots) {
                break;
            }
            self.schedule_tokens(slot, n);
            budget -= n;
            i += 1;
        }
        // A scheduling that preempted admits nothing (vLLM's `if not
        // preempted_reqs`), but one that preempted every running request and
        // scheduled nothing is followed at once by the engine core's next
        // `schedule()`, which admits: done here, or an engine whose blocks
        // are held by requests not running (remote KV landing) would idle.
        if !self.preempted_this_step || (self.running.is_empty() && self.building.entries.is_empty()) {
            self.admit_waiting(&mut budget, lpt, events);
        }
        if self.building.entries.is_empty() {
            return false;
        }
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

    /// Adds `n` tokens of `slot` to the step being built, and its chunk to
    /// the batch the latency model prices. Like vLLM's
    /// `_update_after_schedule`, the tokens count as computed from now on.
    /// Inlined into the scheduling loops, where it runs once per request per
    /// step: left as a call it cost 8 % of `cargo bench --bench sim -- one
    /// 100000`.
    #[inline(always)]
    fn schedule_tokens(&mut self, slot: u32, n: u32) {
        let async_scheduling = self.config.async_scheduling;
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        if seq.num_computed >= seq.prefill_end {
            self.building.priced.decodes += 1;
            self.building.priced.decode_context_tokens += u64::from(seq.num_computed);
        }
        let known_end = seq.num_tokens + seq.pending;
        let samples = seq.num_computed + n >= known_end;
        if let Some(l) = &mut self.lora {
            l.note(seq.lora, n, &mut self.building.priced);
        }
        // Tokens past the known sequence are drafts (scheduler.py
        // `num_scheduled_spec_tokens`); none without speculation.
        let drafts = (seq.num_computed + n).saturating_sub(known_end);
        seq.drafts = 0;
        self.building.priced.spec_tokens += drafts;
        if samples && let Some(s) = &self.config.speculative {
            self.building.draft_seqs += 1;
            self.building.draft_context += u64::from(seq.num_computed + n);
            if async_scheduling {
                // AsyncScheduler._update_after_schedule: k placeholder drafts
                // for the next step, proposed on the GPU during this one.
                seq.drafts = s.k;
            }
        }
        // The acceptance position: num_computed_tokens now, + 1 − the prompt.
        let pos = (seq.num_computed + 1).wrapping_sub(seq.prompt_len);
        if seq.num_computed < seq.prefill_end {
            self.building.priced.prefills.push(PrefillChunk {
                new_tokens: n,
                context_tokens: seq.num_computed,
                samples,
            });
        }
        let before = seq.num_computed;
        seq.num_computed += n;
        seq.in_flight_tokens += n;
        if self.config.kv_offload.is_some() {
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

    /// Admits waiting requests first come first served. When nothing runs,
    /// requests whose remote KV has landed go first: they hold their blocks,
    /// and a head of the queue that cannot grow beside them would otherwise
    /// preempt itself, be admitted again and start over forever (a livelock
    /// vLLM shares: nothing in its scheduler frees the landed blocks).
    fn admit_waiting(&mut self, budget: &mut u32, lpt: u32, events: &mut Vec<EngineEvent>) {
        let seqs = &self.seqs;
        let landed = |s: &u32| seqs[*s as usize].as_ref().is_some_and(|q| q.remote == RemoteKv::Loaded);
        if self.running.is_empty() && self.waiting.iter().any(landed) {
            self.admit_pass(budget, lpt, events, true);
        }
        self.admit_pass(budget, lpt, events, false);
        if self.config.kv_offload.is_some() && self.running.is_empty() && self.unstick_landed() {
            self.admit_waiting(budget, lpt, events);
        }
    }

    /// KV offload: nothing runs, and requests whose CPU-tier load landed
    /// hold blocks none of them can grow past (a load may cover only part of
    /// a prompt), with no other load to land: nothing would ever free them
    /// (vLLM would stall). The last of them is preempted instead (blocks
    /// freed, recomputed). False when that is not the case.
    fn unstick_landed(&mut self) -> bool {
        let state = |s: u32| self.seqs[s as usize].as_ref().expect("live slot").remote;
        if self.waiting.iter().any(|&s| state(s) == RemoteKv::Loading) {
            return false;
        }
        let Some(&slot) = self.waiting.iter().rev().find(|&&s| state(s) == RemoteKv::Loaded) else { return false };
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        self.kv.free(&mut seq.blocks);
        seq.num_computed = 0;
        seq.remote = RemoteKv::None;
        seq.preemptions += 1;
        self.stats.preemptions += 1;
        true
    }

    /// One pass over the waiting queue; with `landed_only`, only requests
    /// whose remote KV has landed.
    fn admit_pass(&mut self, budget: &mut u32, lpt: u32, events: &mut Vec<EngineEvent>, landed_only: bool) {
        let block_size = self.kv.block_size();
        // Position in the waiting queue: requests whose remote KV is still
        // being read are skipped and keep their place (scheduler.py
        // `skipped_waiting_requests`).
        let mut i = 0;
        // A request that cannot get blocks ends admission (FCFS), except when
        // nothing runs: then nothing would ever free the blocks that requests
        // whose remote KV landed hold behind it, so those are admitted past
        // it (vLLM issues #30659 and #45387: it otherwise stalls for good; the
        // minimal fix of #45406 changes only this case).
        let mut stuck = landed_only;
        while *budget > 0 && self.running.len() < self.config.max_num_seqs as usize {
            let Some(&slot) = self.waiting.get(i) else { break };
            self.offload_evictions();
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            if seq.remote == RemoteKv::Loading || (stuck && seq.remote != RemoteKv::Loaded) {
                i += 1;
                continue;
            }
            // Its adapter would make the step's max_loras + 1: skipped,
            // keeping its place.
            if let Some(l) = &self.lora
                && !l.admits(seq.lora)
            {
                if l.none_admissible() {
                    break;
                }
                i += 1;
                continue;
            }
            self.hits.clear();
            let hit_tokens;
            let computed;
            let landed = seq.remote == RemoteKv::Loaded;
            if landed {
                // scheduler.py `_update_waiting_for_remote_kv`: the blocks
                // hold the whole prompt; the last token is recomputed for its
                // logits.
                hit_tokens = seq.cached_tokens;
                computed = seq.num_computed.min(seq.num_tokens - 1);
            } else {
                // At least the last token is always recomputed: its logits are needed.
                let max_hit_blocks = ((seq.num_tokens - 1) / block_size) as usize;
                self.kv.find_cached(&seq.hashes, max_hit_blocks, &mut self.hits);
                hit_tokens = self.hits.len() as u32 * block_size;
                // A preempted request looks in the CPU tier again, as vLLM
                // asks the connector whenever nothing is computed.
                if !seq.admitted || self.config.kv_offload.is_some() {
                    let (external, load_async) =
                        self.connector.matched_tokens(seq.transfer, &seq.hashes, seq.num_tokens, hit_tokens);
                    if load_async && external > 0 {
                        // Blocks for the prompt now, nothing computed: the
                        // request waits in WAITING_FOR_REMOTE_KVS, keeping its
                        // place. Only hit blocks are registered: the rest are
                        // registered when their KV has landed.
                        let target = hit_tokens + external;
                        if !self.kv.allocate(&mut seq.blocks, &seq.hashes, &self.hits, target, hit_tokens) {
                            if self.running.is_empty() {
                                (stuck, i) = (true, i + 1);
                                continue;
                            }
                            break;
                        }
                        seq.remote = RemoteKv::Loading;
                        seq.num_computed = target;
                        if self.config.enable_prefix_caching {
                            self.stats.prefix_queries += u64::from(seq.num_tokens);
                            self.stats.prefix_hits += u64::from(hit_tokens);
                        }
                        if self.config.kv_offload.is_some() {
                            self.stats.cpu_hit_tokens += u64::from(external);
                            self.stats.disk_hit_tokens += u64::from(self.connector.matched_below());
                            self.stats.cpu_loads += 1;
                            self.stats.cpu_load_bytes += self.connector.load_bytes(external);
                        }
                        if !seq.admitted {
                            // vLLM's num_cached_tokens counts what is loaded.
                            seq.cached_tokens = if self.config.kv_offload.is_some() { target } else { hit_tokens };
                            events.push(EngineEvent::Scheduled(seq.owner));
                        }
                        seq.admitted = true;
                        self.connector.after_alloc(seq.owner, slot, external, events);
                        i += 1;
                        continue;
                    }
                }
                let seeded = if seq.admitted { 0 } else { seq.seeded_kv };
                computed = hit_tokens.max(seeded).min(seq.num_tokens - 1);
            }
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            let mut n = seq.num_tokens - computed;
            if lpt > 0 {
                n = n.min(lpt);
            }
            n = n.min(*budget);
            // kv_cache_manager.py allocate_slots(full_sequence_must_fit):
            // blocks for min(num_tokens, max_model_len) must be free.
            if self.config.scheduler_reserve_full_isl
                && !landed
                && !self.kv.fits(&self.hits, seq.num_tokens.min(self.config.max_model_len))
            {
                if self.running.is_empty() {
                    (stuck, i) = (true, i + 1);
                    continue;
                }
                break;
            }
            // vLLM reserves the lookahead only for a request that arrives
            // with tokens computed (`effective_lookahead_tokens`): here, one
            // whose remote KV landed.
            let slots = computed + n + if landed { self.lookahead } else { 0 };
            let slots = slots.min(self.config.max_model_len.max(computed + n));
            if !self.kv.allocate(&mut seq.blocks, &seq.hashes, &self.hits, slots, seq.num_tokens) {
                // (A landed request's blocks hold its whole prompt, unless it
                // came from the CPU tier, which may hold only part of it:
                // then it too is passed when nothing runs.)
                if self.running.is_empty() {
                    (stuck, i) = (true, i + 1);
                    continue;
                }
                break;
            }
            if i == 0 {
                self.waiting.pop_front();
            } else {
                self.waiting.remove(i);
            }
            if let Some(l) = &mut self.lora {
                l.unwait(seq.lora);
            }
            self.running.push(slot);
            // Landed until admitted: a load from the CPU tier may cover only
            // part of the prompt, so growing past it can fail, and the
            // request must then keep its blocks and its landed state.
            seq.remote = RemoteKv::None;
            if self.config.enable_prefix_caching && !landed {
                self.stats.prefix_queries += u64::from(seq.num_tokens);
                self.stats.prefix_hits += u64::from(hit_tokens);
            }
            seq.num_computed = computed;
            seq.prefill_end = seq.num_tokens;
            if !seq.admitted {
                seq.admitted = true;
                seq.cached_tokens = hit_tokens;
                events.push(EngineEvent::Scheduled(seq.owner));
            }
            if self.tracing {
                self.building.admitted.push((slot, computed));
            }
            if self.config.kv_offload.is_some() && !landed {
                // `_get_reqs_to_store` starts at a new request's first block:
                // its GPU-hit blocks are stored again if the tier lost them.
                let full = ((computed / block_size) as usize).min(seq.hashes.len());
                self.stats.cpu_stored_blocks += u64::from(self.connector.computed(&seq.hashes[..full]));
            }
            self.schedule_tokens(slot, n);
            *budget -= n;
        }
    }

    /// Every request still in the engine, with the tokens it has emitted, in
    /// slot order; the engine is left empty. For runs cut off by a horizon.
    pub(crate) fn drain(&mut self) -> Vec<Departure> {
        self.waiting.clear();
        self.running.clear();
        self.free_slots.clear();
        self.has_queued = false;
        self.stepping = false;
        if let Some(l) = &mut self.lora {
            l.clear_requests();
        }
        self.seqs.drain(..).flatten().filter(|s| !s.aborted && !s.held).map(Seq::departure).collect()
    }

    /// The remote KV of the request in `slot` has landed: its blocks are
    /// registered in the prefix cache and it is admitted at its turn, only
    /// its last token computed (scheduler.py `_update_from_kv_xfer_finished`
    /// then `_update_waiting_for_remote_kv`).
    pub(crate) fn kv_loaded(&mut self, slot: u32) {
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        debug_assert_eq!(seq.remote, RemoteKv::Loading);
        seq.remote = RemoteKv::Loaded;
        self.kv.register(&mut seq.blocks, &seq.hashes, seq.num_computed);
    }

    /// The send of a finished request's KV (held in `slot`) completed: its
    /// blocks are freed (nixl_connector.py: freed when the decode side
    /// reports the read done).
    pub(crate) fn release(&mut self, slot: u32) {
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        debug_assert!(seq.held);
        self.kv.free(&mut seq.blocks);
        self.seqs[slot as usize] = None;
        self.free_slots.push(slot);
    }

    /// The client gave up on `owner` (vLLM aborts a request whose client
    /// disconnects). Returns what it emitted so far; `None` if it is not in
    /// the engine. The engine sees the abort at the next step boundary, as
    /// vLLM's engine core handles aborts between steps: then the request
    /// leaves its queue and its KV blocks are freed.
    pub(crate) fn abort(&mut self, owner: Owner) -> Option<Departure> {
        let slot = self.seqs.iter().position(|s| s.as_ref().is_some_and(|s| s.owner == owner && !s.aborted))? as u32;
        let seq = self.seqs[slot as usize].as_mut().expect("found");
        let departure = Departure {
            owner,
            token_times_us: std::mem::take(&mut seq.token_times_us),
            preemptions: seq.preemptions,
            cached_tokens: seq.cached_tokens,
        };
        seq.aborted = true;
        if self.stepping {
            self.pending_aborts.push(slot);
        } else {
            self.remove(slot);
        }
        Some(departure)
    }

    /// vLLM's `finish_requests(.., FINISHED_ABORTED)`: `slot` leaves its
    /// queue, its blocks are freed, and a queued step computes nothing for it.
    fn remove(&mut self, slot: u32) {
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        if let Some(l) = &mut self.lora {
            l.leave(seq.lora);
            if self.waiting.contains(&slot) {
                l.unwait(seq.lora);
            }
        }
        self.kv.free(&mut seq.blocks);
        self.seqs[slot as usize] = None;
        self.free_slots.push(slot);
        self.running.retain(|&s| s != slot);
        self.waiting.retain(|&s| s != slot);
        if self.has_queued {
            for e in self.queued.entries.iter_mut().filter(|e| e.slot == slot) {
                e.dead = true;
            }
        }
    }

    /// vLLM's preemption loop: preempts the most recently admitted running
    /// request until `slot` can hold `target` tokens. False when `slot` itself
    /// had to go.
    fn preempt_for(&mut self, slot: u32, target: u32) -> bool {
        loop {
            let victim = self.running.pop().expect("the request itself is running");
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
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        self.kv.free(&mut seq.blocks);
        seq.num_computed = 0;
        seq.pending = 0;
        seq.drafts = 0;
        seq.preemptions += 1;
        self.stats.preemptions += 1;
        self.waiting.push_front(slot);
        if self.stepping && self.config.speculative.is_some() {
            // Async: the step in flight computes for it still.
            for e in self.executing.entries.iter_mut().filter(|e| e.slot == slot) {
                e.preempted = true;
            }
        }
        if let Some(l) = &mut self.lora {
            l.wait(seq.lora);
        }
        if self.tracing {
            self.building.preempted.push(slot);
        }
    }

    /// The executing step ends at `now` (vLLM's `update_from_output`):
    /// requests that sampled get their token, finished requests leave and
    /// free their blocks in step order; then aborts that came in during the
    /// step take effect.
    pub(crate) fn finish_step(&mut self, now_us: u64, events: &mut Vec<EngineEvent>) {
        self.stepping = false;
        let mut any_finished = false;
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
            if let Some(s) = &self.config.speculative {
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
            if !seq.aborted {
                let n = seq.token_times_us.len() + emitted as usize;
                seq.token_times_us.resize(n, now_us);
            }
            if self.config.async_scheduling && seq.num_computed > 0 {
                // With placeholders, the blocks a sampled token completes are
                // registered when it arrives, before a finished request frees
                // them; not for a request preempted since (vLLM 0.15.1
                // async_scheduler.py `_update_request_with_output`; 0.33.0
                // scheduler.py `update_from_output`).
                let upto = (seq.num_computed - seq.in_flight_tokens).min(seq.num_tokens);
                self.kv.register(&mut seq.blocks, &seq.hashes, upto);
            }
            if seq.num_tokens == seq.total_len {
                any_finished = true;
                if self.has_queued && self.config.speculative.is_some() {
                    // Async: not sure this step would finish it, vLLM
                    // scheduled it again; that output is dropped.
                    for e in self.queued.entries.iter_mut().filter(|e| e.slot == slot) {
                        e.dead = true;
                    }
                }
                if let Some(l) = &mut self.lora {
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
                        token_times_us: std::mem::take(&mut seq.token_times_us),
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
                    events.push(EngineEvent::Finished(seq.departure()));
                }
                self.free_slots.push(slot);
            }
        }
        if any_finished {
            let seqs = &self.seqs;
            let gone = |s: u32| seqs[s as usize].as_ref().is_none_or(|q| q.held);
            self.running.retain(|&s| !gone(s));
            self.waiting.retain(|&s| !gone(s));
        }
        for slot in std::mem::take(&mut self.pending_aborts) {
            self.remove(slot);
        }
    }
}
