//! Typed, validated request DAGs. A [`Request`] can only be built by the
//! reader, which has already checked every rule of the format, so code
//! downstream never re-checks indices or token counts.

use std::fmt;

use super::traffic::Traffic;

/// A request identifier as it appeared in the file: the format allows
/// integers and strings, and results echo it back unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    /// A non-negative integer id, e.g. `17`.
    Int(u64),
    /// A string id, e.g. `"request_17"`.
    Str(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Int(n) => write!(f, "{n}"),
            RequestId::Str(s) => f.write_str(s),
        }
    }
}

/// The longest time any input may give (an arrival, interval, tool duration,
/// timeout, think time, horizon): 10^8 s, 3.2 years; the longest production
/// traces we know (Azure, Mooncake) span days. Bounding each input keeps the
/// µs clock (64 bits: 5.8 × 10^5 years) from overflowing even when 10^5 such
/// times are added up along one run.
pub(crate) const MAX_TIME_S: f64 = 1e8;

/// Seconds (as written in the files) to integer microseconds, rounded to the
/// nearest microsecond: the simulator's clock resolution. Inputs are checked
/// with [`checked_seconds_to_us`] first; out-of-range values saturate.
pub fn seconds_to_us(seconds: f64) -> u64 {
    (seconds.clamp(0.0, MAX_TIME_S) * 1e6).round() as u64
}

/// `seconds` in µs, or why it is not a time the simulator takes: NaN, ±∞,
/// negative, or beyond [`MAX_TIME_S`].
pub fn checked_seconds_to_us(seconds: f64) -> Result<u64, String> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("{seconds} is not a finite, non-negative number of seconds"));
    }
    if seconds > MAX_TIME_S {
        return Err(format!("{seconds} s is beyond the simulator's clock (at most {MAX_TIME_S:e} s, 3.2 years)"));
    }
    Ok(seconds_to_us(seconds))
}

/// One request: a DAG of sub-requests that arrives at `arrival_time`.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Unique id, echoed in results.
    pub request_id: RequestId,
    /// Arrival time in seconds from the start of the run, as written.
    pub arrival_time: f64,
    /// Root sub-request indices, ascending.
    pub initial: Vec<u32>,
    /// The nodes of the DAG (never empty).
    pub sub_requests: Vec<SubRequest>,
    /// Its SLO class, tenant and target (none given by default). An
    /// extension of the format.
    pub traffic: Traffic,
}

impl Request {
    /// Arrival time in integer microseconds.
    pub fn arrival_us(&self) -> u64 {
        seconds_to_us(self.arrival_time)
    }

    /// Divides the arrival time by `rate_scale` (2 = twice the rate); an
    /// arrival pushed past the clock's range is an error naming the request.
    pub fn scale_arrival(&mut self, rate_scale: f64) -> Result<(), String> {
        let scaled = self.arrival_time / rate_scale;
        checked_seconds_to_us(scaled).map_err(|reason| {
            format!(
                "request {}: arrival_time {} / rate_scale {rate_scale}: {reason}",
                self.request_id, self.arrival_time
            )
        })?;
        self.arrival_time = scaled;
        Ok(())
    }
}

/// One node of a request DAG.
#[derive(Debug, Clone, PartialEq)]
pub struct SubRequest {
    /// Successor indices.
    pub next: Vec<u32>,
    /// Delay before the node starts, seconds, as written (default 0).
    pub interval: f64,
    /// What the node does.
    pub kind: NodeKind,
    /// Present only when read from a result file.
    pub result: Option<NodeResult>,
}

impl SubRequest {
    /// The node's interval in integer microseconds.
    pub fn interval_us(&self) -> u64 {
        seconds_to_us(self.interval)
    }
}

/// The two kinds of node the format knows.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// A call to the served model.
    Llm(LlmCall),
    /// A tool call: wall-clock time only, no device.
    ToolCall {
        /// Seconds, as written (default 0).
        duration: f64,
    },
}

/// An llm sub-request: self-contained prompt and output lengths.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmCall {
    /// Full prompt length of this step.
    pub input_tokens: u32,
    /// Tokens to generate (≥ 1).
    pub output_tokens: u32,
    /// Prompt token ids (length `input_tokens`), for prefix caching.
    pub input_token_ids: Option<Vec<u32>>,
    /// Output token ids (length `output_tokens`).
    pub output_token_ids: Option<Vec<u32>>,
    /// Seeded progress, when the workload starts this step part-way.
    pub seeded: Option<SeededProgress>,
    /// Provenance only; never affects simulation.
    pub model: Option<String>,
    /// The LoRA adapter the call is served with (vLLM's `model` name of a
    /// loaded adapter); `None`: the base model. An extension of the format.
    pub lora: Option<String>,
    /// The prompt as block identities instead of token ids (an imported
    /// trace's prefix hashes, e.g. Mooncake's 512-token blocks): equal ids at
    /// equal positions are equal content. Held as is, never expanded into
    /// token ids but in a workload file written from it.
    pub prompt_blocks: Option<PromptBlocks>,
    /// vLLM's per-request `priority` (lower is served first, ties by
    /// arrival); read only by an engine with `scheduling_policy: priority`.
    pub priority: i32,
}

/// A prompt given as identities of fixed-size token blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptBlocks {
    /// Tokens per block (the last block may be partial).
    pub block_tokens: u32,
    /// One identity per block, `ceil(input_tokens / block_tokens)` of them.
    pub ids: Vec<u64>,
}

impl PromptBlocks {
    /// The prompt's `len` tokens as stand-in token ids: token `k` is a hash of
    /// its block's identity and its offset in the block, so two prompts share
    /// a prefix of tokens exactly where they share block identities.
    pub fn tokens(&self, len: u32) -> impl Iterator<Item = u32> + '_ {
        let per = self.block_tokens.max(1);
        (0..len).map(move |k| {
            let id = self.ids.get((k / per) as usize).copied().unwrap_or(u64::MAX);
            let mut z = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(k % per);
            z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            // Token ids stay below 2^31, as a vocabulary's do.
            ((z ^ (z >> 29)) & 0x7FFF_FFFF) as u32
        })
    }
}

impl LlmCall {
    /// A call of `input_tokens` prompt and `output_tokens` output tokens and
    /// nothing else: no token ids, seeded progress, model or prompt blocks
    /// (add them with the `with_` builders).
    pub fn new(input_tokens: u32, output_tokens: u32) -> LlmCall {
        LlmCall {
            input_tokens,
            output_tokens,
            input_token_ids: None,
            output_token_ids: None,
            seeded: None,
            model: None,
            lora: None,
            prompt_blocks: None,
            priority: 0,
        }
    }

    /// A call of the prompt `prompt` (its token ids, so `input_tokens` is
    /// its length) and `output_tokens` output tokens.
    pub fn for_prompt(prompt: Vec<u32>, output_tokens: u32) -> LlmCall {
        LlmCall::new(prompt.len() as u32, output_tokens).with_input_ids(prompt)
    }

    /// With these prompt token ids (of length `input_tokens`).
    pub fn with_input_ids(self, ids: impl Into<Option<Vec<u32>>>) -> LlmCall {
        LlmCall { input_token_ids: ids.into(), ..self }
    }

    /// With these output token ids (of length `output_tokens`).
    pub fn with_output_ids(self, ids: impl Into<Option<Vec<u32>>>) -> LlmCall {
        LlmCall { output_token_ids: ids.into(), ..self }
    }

    /// Started part-way, as the workload seeds it.
    pub fn with_seeded(self, seeded: Option<SeededProgress>) -> LlmCall {
        LlmCall { seeded, ..self }
    }

    /// With the model it names (provenance only).
    pub fn with_model(self, model: Option<String>) -> LlmCall {
        LlmCall { model, ..self }
    }

    /// Served with the LoRA adapter `lora` (`None`: the base model).
    pub fn with_lora(self, lora: Option<String>) -> LlmCall {
        LlmCall { lora, ..self }
    }

    /// With vLLM's request `priority` (lower is served first).
    pub fn with_priority(self, priority: i32) -> LlmCall {
        LlmCall { priority, ..self }
    }

    /// With its prompt given as block identities.
    pub fn with_prompt_blocks(self, blocks: PromptBlocks) -> LlmCall {
        LlmCall { prompt_blocks: Some(blocks), ..self }
    }

    /// The prompt's token ids, given or stood in for by its blocks; `None`
    /// when the workload gives neither (no prefix caching for it).
    pub fn prompt_ids(&self) -> Option<Box<dyn Iterator<Item = u32> + '_>> {
        match (&self.input_token_ids, &self.prompt_blocks) {
            (Some(ids), _) => Some(Box::new(ids.iter().copied())),
            (None, Some(b)) => Some(Box::new(b.tokens(self.input_tokens))),
            (None, None) => None,
        }
    }

    /// Output tokens the engine still has to emit: those not already known
    /// through seeded progress.
    pub fn tokens_to_emit(&self) -> u32 {
        let total = self.input_tokens + self.output_tokens;
        let known = self.seeded.map_or(0, |s| s.known_tokens);
        total - known.max(self.input_tokens)
    }
}

/// Seeded progress: the first `known_tokens` of the step's sequence (prompt,
/// then output) already exist, and the first `kv_tokens` of those already have
/// KV resident. Invariant (checked by the reader):
/// `kv_tokens ≤ known_tokens ≤ input_tokens + output_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededProgress {
    /// Tokens of the sequence that already exist.
    pub known_tokens: u32,
    /// Tokens whose KV is already resident.
    pub kv_tokens: u32,
}

/// What a result file adds to a node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeResult {
    /// Seconds: entry 0 from entering the scheduler to the first token, then
    /// inter-token gaps. Empty for tool calls.
    pub token_latency: Vec<f64>,
    /// Why the node did not (fully) run, if it did not.
    pub error: Option<String>,
    /// The replica that served it, when a cluster of more than one did.
    pub replica: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constructor leaves everything but the lengths unset; the builders
    /// set one field each.
    #[test]
    fn a_call_is_its_lengths_plus_what_is_added() {
        let bare = LlmCall::new(5, 2);
        assert_eq!((bare.input_tokens, bare.output_tokens), (5, 2));
        assert!(bare.input_token_ids.is_none() && bare.output_token_ids.is_none() && bare.prompt_ids().is_none());
        let full = LlmCall::for_prompt(vec![1, 2, 3], 2).with_output_ids(vec![9, 9]).with_model(Some("m".to_owned()));
        assert_eq!(full.input_tokens, 3);
        assert_eq!(full.prompt_ids().map(|ids| ids.collect::<Vec<_>>()), Some(vec![1, 2, 3]));
        assert_eq!((full.output_token_ids, full.model, full.seeded), (Some(vec![9, 9]), Some("m".to_owned()), None));
    }
}
