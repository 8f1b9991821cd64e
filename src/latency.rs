//! Latency models: what one engine step costs. Each model is one file and
//! implements [`LatencyModel`]; the scenario picks one and the engine calls it
//! once per step with the chunks it scheduled. Models are pure functions of
//! the batch: no clock, no state, no allocation.

mod linear;
mod roofline;

pub use linear::Linear;
pub use roofline::Roofline;

/// One request's share of a step: `new_tokens` computed on top of
/// `context_tokens` already in its KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledChunk {
    /// Tokens computed this step (1 for a decode).
    pub new_tokens: u32,
    /// Tokens of this request already computed before this step.
    pub context_tokens: u32,
    /// A decode step (one generated token), as opposed to a prefill chunk.
    pub is_decode: bool,
    /// The step ends with this request sampling a token (decodes, and the
    /// chunk that completes a prefill), so the LM head runs for it.
    pub samples: bool,
}

/// Prices an engine step.
pub trait LatencyModel {
    /// Duration of a step that computes `batch`, in microseconds (≥ 1 for a
    /// non-empty batch).
    fn step_time_us(&self, batch: &[ScheduledChunk]) -> u64;
}

/// The latency model a scenario chose.
#[derive(Debug, Clone)]
pub enum StepPricer {
    /// See [`Roofline`].
    Roofline(Roofline),
    /// See [`Linear`].
    Linear(Linear),
}

impl LatencyModel for StepPricer {
    fn step_time_us(&self, batch: &[ScheduledChunk]) -> u64 {
        match self {
            StepPricer::Roofline(m) => m.step_time_us(batch),
            StepPricer::Linear(m) => m.step_time_us(batch),
        }
    }
}
