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
/// they take turns, the longer when async scheduling overlaps them.
///
/// The CPU side is the host work on the path from one step's GPU work to the
/// next: the engine core's `Scheduler.schedule()`, the executor's broadcast
/// of the `SchedulerOutput` (a pickle, vllm/distributed/device_communicators/
/// shm_broadcast.py `MessageQueue.enqueue`), the GPU worker's input
/// preparation (vllm/v1/worker/gpu_model_runner.py `_update_states`,
/// `_prepare_inputs`) and `Scheduler.update_from_output()`. The front end
/// (detokenization, `OutputProcessor.process_outputs`) runs in the API
/// server's process and the output encoding in the engine core's output
/// thread (vllm/v1/engine/core.py `process_output_sockets`), while the busy
/// loop waits on the GPU: neither is on that path in either mode.
///
/// Without async scheduling (vllm/v1/engine/core.py `EngineCore.step`) a
/// step is schedule → execute → wait → update_from_output: the GPU idles
/// through the whole CPU side, and a step lasts the sum. With it (vLLM 0.14+,
/// `EngineCore.step_with_batch_queue`, a batch queue of 2:
/// vllm/v1/executor/multiproc_executor.py `max_concurrent_batches`), when the
/// GPU finishes step N the busy loop runs update_from_output(N), then
/// schedule(N+2) and its broadcast, and the worker prepares N+2, all while
/// the GPU runs N+1 (already scheduled and prepared; the worker takes N+1's
/// sampled tokens on the GPU, `AsyncScheduler` counting them as
/// placeholders): the whole CPU side is one serial chain hidden behind one
/// step's GPU time, and the GPU idles only for what the chain exceeds it by.
fn overlap(gpu_us: f64, cpu_us: f64, async_scheduling: bool) -> f64 {
    if async_scheduling { gpu_us.max(cpu_us) } else { gpu_us + cpu_us }
}

/// The CPU side of a step of `batch` (see [`overlap`]), µs: measured terms
/// per step, per scheduled sequence and per scheduled token, times one
/// factor from the measuring host to the real runs' hosts.
fn cpu_side_us(step_us: f64, per_sequence_us: f64, per_token_us: f64, scale: f64, batch: &StepBatch) -> f64 {
    let sequences = batch.prefills.len() as f64 + f64::from(batch.decodes);
    let tokens = f64::from(batch.decodes) + batch.prefills.iter().map(|c| f64::from(c.new_tokens)).sum::<f64>();
    scale * (step_us + per_sequence_us * sequences + per_token_us * tokens)
}

/// Serde's default for a factor: 1.
fn one() -> f64 {
    1.0
}

/// vLLM's PyTorch top-k/top-p path (`apply_top_k_top_p`: a sort of every
/// sampling row over the whole vocabulary, then a cumulative softmax), µs
/// per logit: 3.812 ms for a batch of 256 rows × a vocabulary of 131,072
/// (vllm-project/vllm#32558, "Triton-based top-p/top-k masking", PyTorch
/// column, `topk_whole`; the same thread's smaller batches, about 1.07 ms at
/// 64 and 2.1–2.4 ms at 128, sit 11–21 % above this line). The sampler runs
/// on every TP rank over the full vocabulary, so TP does not shrink it.
pub(crate) const SORT_SAMPLER_US_PER_LOGIT: f64 = 3812.0 / (256.0 * 131_072.0);

/// GPU time of vLLM's sort-based top-k/top-p sampler for `sequences`
/// sampling rows over a vocabulary of `vocab`, µs: proportional to the
/// logits sorted ([`SORT_SAMPLER_US_PER_LOGIT`]). Only releases that run
/// this path pay it (see [`crate::scenario::Sampling`]); greedy requests take
/// the argmax path and skip it.
pub(crate) fn sort_sampler_us(sequences: f64, vocab: f64) -> f64 {
    sequences * vocab * SORT_SAMPLER_US_PER_LOGIT
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
        self.model_kind().name()
    }

    /// Which of the latency models it is.
    pub fn model_kind(&self) -> ModelKind {
        match self {
            StepPricer::Roofline(_) => ModelKind::Roofline,
            StepPricer::Kernels(_) => ModelKind::Kernels,
            StepPricer::Linear(_) => ModelKind::Linear,
        }
    }
}

/// The latency models, named once: scenarios (`latency_model: NAME` or
/// `{kind: NAME, …}`), messages and outputs read their names here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// [`Kernels`]: measured kernel tables.
    Kernels,
    /// [`Roofline`]: the analytical roofline.
    Roofline,
    /// [`Linear`]: fitted coefficients.
    Linear,
}

impl ModelKind {
    /// Every model, in the order messages list them.
    pub const ALL: [ModelKind; 3] = [ModelKind::Kernels, ModelKind::Roofline, ModelKind::Linear];

    /// Its name in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Kernels => "kernels",
            ModelKind::Roofline => "roofline",
            ModelKind::Linear => "linear",
        }
    }

    /// The model called `name`.
    pub fn parse(name: &str) -> Option<ModelKind> {
        ModelKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Every name, joined with `, ` for messages.
    pub fn names() -> String {
        ModelKind::ALL.map(ModelKind::name).join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3 decodes and chunks of 100 and 20 tokens: 5 sequences, 123 tokens.
    /// 1.5 × (40 + 5 × 2 + 123 × 0.25) = 1.5 × 80.75 = 121.125 µs.
    #[test]
    fn the_cpu_side_counts_sequences_and_tokens() {
        let chunk = |new_tokens| PrefillChunk { new_tokens, context_tokens: 0, samples: false };
        let batch = StepBatch { prefills: vec![chunk(100), chunk(20)], decodes: 3, decode_context_tokens: 300 };
        assert_eq!(cpu_side_us(40.0, 2.0, 0.25, 1.5, &batch), 121.125);
        assert_eq!(cpu_side_us(40.0, 2.0, 0.25, 1.0, &StepBatch::EMPTY), 40.0);
        // Taking turns the sides add; overlapped the longer one shows.
        assert_eq!(overlap(1000.0, 121.125, false), 1121.125);
        assert_eq!(overlap(1000.0, 121.125, true), 1000.0);
        assert_eq!(overlap(100.0, 121.125, true), 121.125);
    }
}

/// Helpers for the latency models' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::StepBatch;
    use crate::arch::{ModelArch, catalog};

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
