//! Latency models: what one engine step costs. Each model is one file and
//! implements [`LatencyModel`]; the scenario picks one and the engine calls it
//! once per step with the chunks it scheduled. Models are pure functions of
//! the batch: no clock, no state, no allocation.

mod kernel_tables;
mod kernels;
mod linear;
mod roofline;

pub use kernels::{Fp8GemmRelease, KernelConstants, Kernels, KernelsError};
pub use linear::Linear;
pub use roofline::{Roofline, RooflineConstants};

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
}

impl StepBatch {
    /// A step that computes nothing.
    pub const EMPTY: StepBatch = StepBatch { prefills: Vec::new(), decodes: 0, decode_context_tokens: 0 };

    /// Empties the batch, keeping its allocation.
    pub fn clear(&mut self) {
        self.prefills.clear();
        self.decodes = 0;
        self.decode_context_tokens = 0;
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

/// A step's duration from its GPU side and its CPU side, µs: their sum when
/// they take turns, the longer when async scheduling overlaps them (the CPU
/// prepares step N+1 and finishes step N−1 while the GPU runs step N; the
/// GPU idles only for what the CPU side exceeds it by).
fn overlap(gpu_us: f64, cpu_us: f64, async_scheduling: bool) -> f64 {
    if async_scheduling { gpu_us.max(cpu_us) } else { gpu_us + cpu_us }
}

/// What an idle data-parallel rank runs so the others' collectives complete:
/// one token (vLLM's `execute_dummy_batch`, `_dummy_run(1)`).
pub static DUMMY_BATCH: StepBatch = StepBatch { prefills: Vec::new(), decodes: 1, decode_context_tokens: 0 };

/// The latency model a scenario chose.
#[derive(Debug, Clone)]
pub enum StepPricer {
    /// See [`Roofline`].
    Roofline(Box<Roofline>),
    /// See [`Kernels`].
    Kernels(Box<Kernels>),
    /// See [`Linear`].
    Linear(Linear),
}

impl LatencyModel for StepPricer {
    fn step_time_us(&self, batch: &StepBatch) -> u64 {
        match self {
            StepPricer::Roofline(m) => m.step_time_us(batch),
            StepPricer::Kernels(m) => m.step_time_us(batch),
            StepPricer::Linear(m) => m.step_time_us(batch),
        }
    }

    fn lockstep_time_us(&self, ranks: &[&StepBatch]) -> u64 {
        match self {
            StepPricer::Roofline(m) => m.lockstep_time_us(ranks),
            StepPricer::Kernels(m) => m.lockstep_time_us(ranks),
            StepPricer::Linear(m) => m.lockstep_time_us(ranks),
        }
    }

    fn request_overhead_us(&self) -> u64 {
        match self {
            StepPricer::Roofline(m) => m.request_overhead_us(),
            StepPricer::Kernels(m) => m.request_overhead_us(),
            StepPricer::Linear(m) => m.request_overhead_us(),
        }
    }
}

impl StepPricer {
    /// The model's tunable constants by name; `None` for a model without
    /// named constants (linear).
    pub fn constants(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        let v = match self {
            StepPricer::Roofline(m) => serde_json::to_value(m.constants()),
            StepPricer::Kernels(m) => serde_json::to_value(m.constants()),
            StepPricer::Linear(_) => return None,
        };
        match v.expect("constants serialize") {
            serde_json::Value::Object(map) => Some(map),
            _ => None,
        }
    }

    /// The same model with its constants replaced by `constants` (every key
    /// of [`Self::constants`]); the first invalid one's name and why.
    pub fn with_constants(&self, constants: &serde_json::Map<String, serde_json::Value>) -> Result<StepPricer, String> {
        let v = serde_json::Value::Object(constants.clone());
        match self {
            StepPricer::Roofline(m) => {
                let c: RooflineConstants = serde_json::from_value(v).map_err(|e| e.to_string())?;
                c.validate()?;
                Ok(StepPricer::Roofline(Box::new(m.with_constants(c))))
            }
            StepPricer::Kernels(m) => {
                let c: KernelConstants = serde_json::from_value(v).map_err(|e| e.to_string())?;
                c.validate()?;
                Ok(StepPricer::Kernels(Box::new(m.with_constants(c))))
            }
            StepPricer::Linear(_) => Err("the linear model has no named constants".to_owned()),
        }
    }

    /// The model's name as a scenario's `latency_model.kind` spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            StepPricer::Roofline(_) => "roofline",
            StepPricer::Kernels(_) => "kernels",
            StepPricer::Linear(_) => "linear",
        }
    }
}

/// Helpers for the latency models' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::StepBatch;
    use crate::scenario::{ModelArch, catalog};

    /// A catalog model's architecture.
    pub(crate) fn model(id: &str) -> ModelArch {
        let (_, text) = catalog::model_config(id).unwrap();
        ModelArch::from_config_json(id, text).unwrap()
    }

    /// A step of `n` decodes, each after `ctx` tokens.
    pub(crate) fn decode(n: u32, ctx: u32) -> StepBatch {
        StepBatch { prefills: vec![], decodes: n, decode_context_tokens: u64::from(n) * u64::from(ctx) }
    }
}
