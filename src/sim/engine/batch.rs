//! What the scheduler hands the driver and the latency model: who a request
//! belongs to, what a scheduling or a step did ([`EngineEvent`]), a request
//! leaving ([`Departure`]) and one scheduled step ([`Batch`]).

use crate::latency::StepBatch;

/// Who a request belongs to, in the driver's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) slot: u32,
    pub(crate) node: u32,
}

/// What scheduling or a step did, reported to the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EngineEvent {
    /// First admission of the request (scheduling delay ends here).
    Scheduled(Owner),
    /// The request emitted its last token and left the engine.
    Finished(Departure),
    /// Blocks were allocated for `tokens` tokens of `owner`'s prompt that
    /// are read from elsewhere (a remote prefill): the driver times the read
    /// and calls `Engine::kv_loaded(slot)` when it lands.
    KvLoad {
        /// Whose.
        owner: Owner,
        /// Its engine slot.
        slot: u32,
        /// Tokens to read.
        tokens: u32,
    },
    /// Blocks were allocated for prompt tokens of `owner` that the CPU tier
    /// holds (KV offload): the driver queues the `duration_us` read on the
    /// engine's host link and calls `Engine::kv_loaded(slot)` when it lands.
    HostLoad {
        /// Whose.
        owner: Owner,
        /// Its engine slot.
        slot: u32,
        /// The read's time on the link.
        duration_us: u64,
    },
    /// A finished request keeps its blocks in engine slot `slot` until a
    /// send completes (its `Finished` came just before): the driver calls
    /// `Engine::release(slot)` then.
    Held {
        /// Whose.
        owner: Owner,
        /// Its engine slot.
        slot: u32,
    },
}

/// A request leaving the engine (finished, aborted, or cut off by the
/// horizon), with the emission time of every token it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Departure {
    pub(crate) owner: Owner,
    pub(crate) token_times_us: Vec<u64>,
    pub(crate) preemptions: u32,
    pub(crate) cached_tokens: u32,
}

/// One request's share of a step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub(crate) slot: u32,
    pub(crate) tokens: u32,
    /// The step's computation reaches the end of the known sequence: it
    /// samples a token.
    pub(super) samples: bool,
    /// The request was aborted after this step was scheduled.
    pub(super) dead: bool,
    /// Speculative decoding: draft tokens among `tokens`, verified at the
    /// step's end.
    pub(super) drafts: u32,
    /// Speculative decoding: the acceptance position, from
    /// `num_computed_tokens` when the step was scheduled (async scheduling
    /// rolls rejections back only after the next step is scheduled).
    pub(super) pos: u32,
    /// Speculative decoding, async: the request was preempted while this
    /// step ran (its count restarted, maybe readmitted since), so nothing is
    /// rolled back (vLLM processes the output before readmitting it).
    pub(super) preempted: bool,
}

/// One scheduled step: who computes how many tokens, its price, and (when
/// traced) what scheduling it did.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) entries: Vec<Entry>,
    pub(crate) duration_us: u64,
    /// Admissions, with the prefix-cache hit (tokens) of each.
    pub(crate) admitted: Vec<(u32, u32)>,
    /// Preempted slots, in order.
    pub(crate) preempted: Vec<u32>,
    /// KV blocks referenced once scheduled.
    pub(crate) kv_blocks_used: u32,
    /// What the latency model priced: kept with the step, since lockstep
    /// data-parallel ranks are priced together when their steps start.
    pub(crate) priced: StepBatch,
    /// Of `duration_us`, what LoRA adapters add (loads and kernels), µs.
    pub(crate) lora_us: u64,
    /// Speculative decoding: requests that sample, whose drafter proposes
    /// in this step, and their context tokens after it.
    pub(super) draft_seqs: u32,
    pub(super) draft_context: u64,
    /// Steady decodes in the step besides `entries` (`steady.rs`).
    pub(super) steady: u32,
}

impl Batch {
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.admitted.clear();
        self.preempted.clear();
        self.duration_us = 0;
        self.lora_us = 0;
        self.priced.clear();
        self.draft_seqs = 0;
        self.draft_context = 0;
        self.steady = 0;
    }
}
