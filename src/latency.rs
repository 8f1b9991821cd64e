//! Latency models: what one engine step costs. Each model is one file and
//! implements [`LatencyModel`]; the scenario picks one and the engine calls it
//! once per step with the chunks it scheduled. Models are pure functions of
//! the batch: no clock, no state, no allocation.

mod batch;
mod common;
mod kernel_tables;
mod kernels;
mod linear;
mod lora;
mod roofline;
mod speculative;

pub use batch::{DUMMY_BATCH, LatencyModel, PrefillChunk, StepBatch};
pub use kernels::{Fp8GemmRelease, KernelConstants, Kernels, KernelsError};
pub use linear::{Linear, LinearConstants};
pub use lora::LoraPricing;
pub use roofline::{Roofline, RooflineConstants};
pub use speculative::DraftCost;

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
    /// The model's tunable constants by name.
    pub fn constants(&self) -> serde_json::Map<String, serde_json::Value> {
        let v = match self {
            StepPricer::Roofline(m) => serde_json::to_value(m.constants()),
            StepPricer::Kernels(m) => serde_json::to_value(m.constants()),
            StepPricer::Linear(m) => serde_json::to_value(m.constants()),
        };
        match v.expect("constants serialize") {
            serde_json::Value::Object(map) => map,
            _ => unreachable!("every model's constants are a struct, which serializes to a map"),
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
            StepPricer::Linear(_) => {
                let c: LinearConstants = serde_json::from_value(v).map_err(|e| e.to_string())?;
                Ok(StepPricer::Linear(Linear::from_constants(c)?))
            }
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
        StepBatch { decodes: n, decode_context_tokens: u64::from(n) * u64::from(ctx), ..StepBatch::default() }
    }
}
