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

use std::collections::VecDeque;

use super::kv_cache::{KvCache, SeqBlocks, block_hashes};
use crate::latency::{LatencyModel, PrefillChunk, StepBatch};
use crate::workload::LlmCall;

/// vLLM engine arguments the scheduler and KV cache obey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most requests running at once.
    pub max_num_seqs: u32,
    /// Token budget of one step.
    pub max_num_batched_tokens: u32,
    /// Longest sequence (prompt + output) served.
    pub max_model_len: u32,
    /// Tokens per KV block.
    pub block_size: u32,
    /// KV blocks on each GPU, including vLLM's one reserved null block.
    pub num_gpu_blocks: u32,
    /// Automatic prefix caching.
    pub enable_prefix_caching: bool,
    /// Cap on one prefill chunk; 0 = none.
    pub long_prefill_token_threshold: u32,
    /// vLLM's async scheduling: step N+1 is scheduled while step N runs, so
    /// a request that arrives during a step waits for the next one too.
    pub async_scheduling: bool,
}

/// Counters over the whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Steps executed.
    pub steps: u64,
    /// Preemptions (a request preempted twice counts twice).
    pub preemptions: u64,
    /// Tokens looked up in the prefix cache at admission.
    pub prefix_queries: u64,
    /// Of those, tokens found.
    pub prefix_hits: u64,
    /// Tokens computed (prefill and decode).
    pub computed_tokens: u64,
}

/// Who a request belongs to, in the driver's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) slot: u32,
    pub(crate) node: u32,
}

/// What a step did, reported to the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EngineEvent {
    /// First admission of the request (scheduling delay ends here).
    Scheduled(Owner),
    /// The request emitted its last token and left the engine.
    Finished(Departure),
}

/// A request leaving the engine (finished, or cut off by the horizon), with
/// the emission time of every token it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Departure {
    pub(crate) owner: Owner,
    pub(crate) token_times_us: Vec<u64>,
    pub(crate) preemptions: u32,
    pub(crate) cached_tokens: u32,
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

struct Seq {
    owner: Owner,
    /// Sequence length so far: prompt plus tokens generated.
    num_tokens: u32,
    /// Prompt plus every output token.
    total_len: u32,
    num_computed: u32,
    /// `num_tokens` at the last admission: below it the request is prefilling.
    prefill_end: u32,
    /// Seeded tokens whose KV is resident at first admission.
    seeded_kv: u32,
    hashes: Vec<u64>,
    blocks: SeqBlocks,
    preemptions: u32,
    cached_tokens: u32,
    admitted: bool,
    /// The client gave up while a step computing it was in flight: it
    /// leaves, unreported, when that step ends.
    aborted: bool,
    /// Emission time of each token so far; sized for all of them up front.
    token_times_us: Vec<u64>,
}

/// The scheduler, KV cache and latency model of one engine.
pub(crate) struct Engine<L> {
    config: EngineConfig,
    kv: KvCache,
    latency: L,
    seqs: Vec<Option<Seq>>,
    free_slots: Vec<u32>,
    waiting: VecDeque<u32>,
    running: Vec<u32>,
    scheduled: Vec<(u32, u32)>,
    batch: StepBatch,
    hits: Vec<u32>,
    /// Whether this step preempted anything (then nothing is admitted).
    preempted_this_step: bool,
    /// Whether a step is in flight (between `start_step` and `finish_step`).
    stepping: bool,
    stats: EngineStats,
}

impl<L: LatencyModel> Engine<L> {
    /// The engine arguments.
    pub(crate) fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub(crate) fn new(config: EngineConfig, latency: L) -> Self {
        // vLLM takes one block out of the pool as the null block.
        let usable = config.num_gpu_blocks.saturating_sub(1);
        let kv = KvCache::new(usable, config.block_size, config.enable_prefix_caching);
        Engine {
            config,
            kv,
            latency,
            seqs: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            scheduled: Vec::new(),
            batch: StepBatch::default(),
            hits: Vec::new(),
            preempted_this_step: false,
            stepping: false,
            stats: EngineStats::default(),
        }
    }

    pub(crate) fn request_overhead_us(&self) -> u64 {
        self.latency.request_overhead_us()
    }

    pub(crate) fn stats(&self) -> &EngineStats {
        &self.stats
    }

    pub(crate) fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    pub(crate) fn num_running(&self) -> usize {
        self.running.len()
    }

    pub(crate) fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub(crate) fn check_kv(&self) -> Result<(), String> {
        self.kv.check()
    }

    /// Queues an llm call, or says why it can never be served.
    pub(crate) fn add(&mut self, owner: Owner, call: &LlmCall) -> Result<(), String> {
        let total_len = call.input_tokens + call.output_tokens;
        if total_len > self.config.max_model_len {
            return Err(format!(
                "unservable: input_tokens + output_tokens = {total_len} exceeds max_model_len = {}",
                self.config.max_model_len
            ));
        }
        // The last sampled token is never computed, so the KV cache must hold
        // total_len − 1 tokens at the end.
        let blocks_needed = (total_len - 1).div_ceil(self.config.block_size);
        if blocks_needed > self.kv.num_blocks() {
            return Err(format!(
                "unservable: needs {blocks_needed} KV blocks of {} tokens, the cache has {}",
                self.config.block_size,
                self.kv.num_blocks()
            ));
        }
        let (known, seeded_kv) = call.seeded.map_or((0, 0), |s| (s.known_tokens, s.kv_tokens));
        let mut hashes = Vec::new();
        if self.config.enable_prefix_caching
            && let Some(input) = &call.input_token_ids
        {
            let output = call.output_token_ids.iter().flatten();
            block_hashes(input.iter().chain(output).copied(), self.config.block_size, &mut hashes);
        }
        let num_tokens = known.max(call.input_tokens);
        let seq = Seq {
            owner,
            num_tokens,
            total_len,
            num_computed: 0,
            prefill_end: num_tokens,
            seeded_kv,
            hashes,
            blocks: SeqBlocks::default(),
            preemptions: 0,
            cached_tokens: 0,
            admitted: false,
            aborted: false,
            token_times_us: Vec::with_capacity(call.tokens_to_emit() as usize),
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
        Ok(())
    }

    /// Schedules one step and returns its duration in µs, or `None` when
    /// there is nothing to run.
    pub(crate) fn start_step(&mut self, events: &mut Vec<EngineEvent>) -> Option<u64> {
        self.scheduled.clear();
        self.batch.clear();
        self.preempted_this_step = false;
        let lpt = self.config.long_prefill_token_threshold;
        let clamp = |n: u32, budget: u32| {
            let n = if lpt > 0 { n.min(lpt) } else { n };
            n.min(budget)
        };
        let mut budget = self.config.max_num_batched_tokens;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let slot = self.running[i];
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            let n = clamp(seq.num_tokens - seq.num_computed, budget);
            let target = seq.num_computed + n;
            if !self.kv.allocate(&mut seq.blocks, &seq.hashes, &[], target) && !self.preempt_for(slot, target) {
                break;
            }
            self.schedule(slot, n);
            budget -= n;
            i += 1;
        }
        if !self.preempted_this_step {
            self.admit_waiting(&mut budget, events);
        }
        if self.scheduled.is_empty() {
            return None;
        }
        self.stats.steps += 1;
        self.stepping = true;
        Some(self.latency.step_time_us(&self.batch))
    }

    /// Adds `n` tokens of `slot` to this step, and its chunk to the batch the
    /// latency model prices.
    fn schedule(&mut self, slot: u32, n: u32) {
        let seq = self.seqs[slot as usize].as_ref().expect("live slot");
        if seq.num_computed >= seq.prefill_end {
            self.batch.decodes += 1;
            self.batch.decode_context_tokens += u64::from(seq.num_computed);
        } else {
            self.batch.prefills.push(PrefillChunk {
                new_tokens: n,
                context_tokens: seq.num_computed,
                samples: seq.num_computed + n == seq.num_tokens,
            });
        }
        self.scheduled.push((slot, n));
        self.stats.computed_tokens += u64::from(n);
    }

    fn admit_waiting(&mut self, budget: &mut u32, events: &mut Vec<EngineEvent>) {
        let lpt = self.config.long_prefill_token_threshold;
        let block_size = self.kv.block_size();
        while *budget > 0 && self.running.len() < self.config.max_num_seqs as usize {
            let Some(&slot) = self.waiting.front() else { break };
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            self.hits.clear();
            // At least the last token is always recomputed: its logits are needed.
            let max_hit_blocks = ((seq.num_tokens - 1) / block_size) as usize;
            self.kv.find_cached(&seq.hashes, max_hit_blocks, &mut self.hits);
            let hit_tokens = self.hits.len() as u32 * block_size;
            let seeded = if seq.admitted { 0 } else { seq.seeded_kv };
            let computed = hit_tokens.max(seeded).min(seq.num_tokens - 1);
            let mut n = seq.num_tokens - computed;
            if lpt > 0 {
                n = n.min(lpt);
            }
            n = n.min(*budget);
            if !self.kv.allocate(&mut seq.blocks, &seq.hashes, &self.hits, computed + n) {
                break;
            }
            self.waiting.pop_front();
            self.running.push(slot);
            if self.config.enable_prefix_caching {
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
            self.schedule(slot, n);
            *budget -= n;
        }
    }

    /// Every request still in the engine, with the tokens it has emitted, in
    /// slot order; the engine is left empty. For runs cut off by a horizon.
    pub(crate) fn drain(&mut self) -> Vec<Departure> {
        self.waiting.clear();
        self.running.clear();
        self.free_slots.clear();
        self.seqs.drain(..).flatten().filter(|s| !s.aborted).map(Seq::departure).collect()
    }

    /// The client gave up on `owner` (vLLM aborts a request whose client
    /// disconnects): it leaves the queues and its KV blocks are freed — at
    /// once, or when the step in flight that computes it ends. Returns what it
    /// emitted so far; `None` if it is not in the engine.
    pub(crate) fn abort(&mut self, owner: Owner) -> Option<Departure> {
        let slot = self.seqs.iter().position(|s| s.as_ref().is_some_and(|s| s.owner == owner && !s.aborted))? as u32;
        let in_flight = self.stepping && self.scheduled.iter().any(|&(s, _)| s == slot);
        let seq = self.seqs[slot as usize].as_mut().expect("found");
        let departure = Departure {
            owner,
            token_times_us: std::mem::take(&mut seq.token_times_us),
            preemptions: seq.preemptions,
            cached_tokens: seq.cached_tokens,
        };
        if in_flight {
            seq.aborted = true;
        } else {
            self.kv.free(&mut seq.blocks);
            self.seqs[slot as usize] = None;
            self.free_slots.push(slot);
            self.waiting.retain(|&s| s != slot);
        }
        // Out of the running list now, so no later step schedules it.
        self.running.retain(|&s| s != slot);
        Some(departure)
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
            if self.kv.allocate(&mut seq.blocks, &seq.hashes, &[], target) {
                return true;
            }
        }
    }

    fn preempt(&mut self, slot: u32) {
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        self.kv.free(&mut seq.blocks);
        seq.num_computed = 0;
        seq.preemptions += 1;
        self.stats.preemptions += 1;
        self.waiting.push_front(slot);
    }

    /// Applies the scheduled step: computed tokens advance, requests that
    /// caught up sample a token, finished requests leave and free their blocks.
    pub(crate) fn finish_step(&mut self, now_us: u64, events: &mut Vec<EngineEvent>) {
        self.stepping = false;
        let mut any_finished = false;
        for k in 0..self.scheduled.len() {
            let (slot, n) = self.scheduled[k];
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            if seq.aborted {
                self.kv.free(&mut seq.blocks);
                self.seqs[slot as usize] = None;
                self.free_slots.push(slot);
                any_finished = true;
                continue;
            }
            seq.num_computed += n;
            if seq.num_computed < seq.num_tokens {
                continue;
            }
            seq.num_tokens += 1;
            seq.token_times_us.push(now_us);
            if seq.num_tokens == seq.total_len {
                self.kv.free(&mut seq.blocks);
                let seq = self.seqs[slot as usize].take().expect("live slot");
                events.push(EngineEvent::Finished(seq.departure()));
                self.free_slots.push(slot);
                any_finished = true;
            }
        }
        if any_finished {
            let seqs = &self.seqs;
            self.running.retain(|&s| seqs[s as usize].is_some());
        }
    }
}
