//! What a latency model prices: one engine step's batch ([`StepBatch`]),
//! and the trait every model implements ([`LatencyModel`]).

/// One prefill chunk of a step: `new_tokens` of a request's prompt (or, after
/// a preemption, of its prompt and outputs) computed on top of
/// `context_tokens` already in its KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillChunk {
    /// Tokens computed this step.
    pub new_tokens: u32,
    /// Tokens of this request already computed before this step.
    pub context_tokens: u32,
    /// The chunk completes the prefill, so the request samples a token (the
    /// LM head runs for it).
    pub samples: bool,
}

/// What one engine step computes. Decodes (one token each, and each samples)
/// are summarised: every latency model needs only their count and the KV they
/// read, and summing them as they are scheduled keeps a step free of
/// per-request allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepBatch {
    /// Prefill chunks, in schedule order.
    pub prefills: Vec<PrefillChunk>,
    /// Requests decoding one token.
    pub decodes: u32,
    /// Sum over the decoding requests of their tokens already computed (the
    /// context their attention reads).
    pub decode_context_tokens: u64,
    /// Tokens computed by requests served with a LoRA adapter (0 without
    /// `engine.lora`).
    pub lora_tokens: u32,
    /// Distinct LoRA adapters in the step.
    pub lora_adapters: u32,
    /// The rank the LoRA kernels run at (`max_lora_rank`; 0 without adapters).
    pub lora_rank: u32,
    /// Speculative decoding: draft tokens verified this step, summed over
    /// the decoding requests (each decode computes 1 + its drafts; 0 when
    /// off).
    pub spec_tokens: u32,
}

impl StepBatch {
    /// A step that computes nothing.
    pub const EMPTY: StepBatch = StepBatch {
        prefills: Vec::new(),
        decodes: 0,
        decode_context_tokens: 0,
        lora_tokens: 0,
        lora_adapters: 0,
        lora_rank: 0,
        spec_tokens: 0,
    };

    /// Empties the batch, keeping its allocation.
    pub fn clear(&mut self) {
        self.prefills.clear();
        self.decodes = 0;
        self.decode_context_tokens = 0;
        self.lora_tokens = 0;
        self.lora_adapters = 0;
        self.lora_rank = 0;
        self.spec_tokens = 0;
    }

    /// Whether the step computes nothing.
    pub fn is_empty(&self) -> bool {
        self.prefills.is_empty() && self.decodes == 0
    }
}

/// Prices an engine step.
pub trait LatencyModel {
    /// Duration of a step that computes `batch`, in microseconds (≥ 1).
    fn step_time_us(&self, batch: &StepBatch) -> u64;

    /// Time between a request reaching the server and the engine seeing it
    /// (HTTP, tokenization), µs.
    fn request_overhead_us(&self) -> u64 {
        0
    }

    /// Duration of one step of data-parallel ranks that run in lockstep (an
    /// MoE model's DP ranks meet in every MoE layer), one batch per rank; an
    /// idle rank's batch is empty and it runs vLLM's dummy batch of one
    /// token. The default is the slowest rank, as for ranks that share
    /// nothing but a barrier; a model that knows expert parallelism prices
    /// the shared MoE layers on every rank's tokens.
    fn lockstep_time_us(&self, ranks: &[&StepBatch]) -> u64 {
        ranks.iter().map(|b| self.step_time_us(if b.is_empty() { &DUMMY_BATCH } else { b })).max().unwrap_or(1)
    }
}

/// What an idle data-parallel rank runs so the others' collectives complete:
/// one token (vLLM's `execute_dummy_batch`, `_dummy_run(1)`).
pub static DUMMY_BATCH: StepBatch = StepBatch {
    prefills: Vec::new(),
    decodes: 1,
    decode_context_tokens: 0,
    lora_tokens: 0,
    lora_adapters: 0,
    lora_rank: 0,
    spec_tokens: 0,
};
