//! `latency_model:` resolved for one engine (one pool's) into the
//! [`StepPricer`] that prices its steps, with the reason it was chosen: the
//! scenario's own choice (`explicit`), or the default — measured kernels
//! where the GPU's tables cover the deployment, else the roofline, saying
//! what the tables lack.

use std::path::Path;

use super::error::{InvalidValue, invalid};
use super::spec::{EngineSpec, LatencySpec, Sampling};
use super::vllm_version::VllmVersion;
use crate::arch::catalog::SamplingDefaults;
use crate::arch::{Dtype, Gpu, ModelArch, MoeRouting};
use crate::latency::{
    Fp8GemmRelease, KernelConstants, Kernels, KernelsError, Linear, LinearConstants, ModelKind, Roofline,
    RooflineConstants, StepPricer,
};

/// What prices one engine's steps depend on besides `latency_model:` itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PricingInputs<'a> {
    pub(crate) model: &'a ModelArch,
    pub(crate) gpu: &'a Gpu,
    pub(crate) tp: u64,
    /// Data-parallel ranks (an MoE model's experts spread over them).
    pub(crate) dp: u32,
    pub(crate) dtype: Dtype,
    /// The engine arguments (`kv_cache_dtype`, `async_scheduling`, `enforce_eager`).
    pub(crate) engine: &'a EngineSpec,
    pub(crate) vllm_version: VllmVersion,
    /// How the requests sample, and the model's published sampling defaults
    /// (known for catalog models only).
    pub(crate) sampling: Sampling,
    pub(crate) sampling_defaults: Option<SamplingDefaults>,
    pub(crate) moe_routing: MoeRouting,
    /// `fp8_gemm_release`, as written.
    pub(crate) fp8_gemm_release: Option<&'a str>,
}

/// The step pricer of `latency_model` (`None`: the default) for the engine
/// `x` describes, and why that model prices it; `base` is the directory a
/// constants file's path starts from.
pub(crate) fn resolve(
    x: &PricingInputs<'_>,
    latency_model: Option<LatencySpec>,
    base: &Path,
) -> Result<(StepPricer, String), InvalidValue> {
    let PricingInputs { model, gpu, tp, dp, dtype, engine: e, vllm_version, .. } = *x;
    let weight_bytes: u64 = if dtype.is_fp8() { 1 } else { 2 };
    let kv_dtype_bytes = e.kv_cache_dtype.unwrap_or_default().bytes();
    let async_scheduling = e.async_scheduling.unwrap_or(true);
    let fp8_gemm_release = match x.fp8_gemm_release {
        Some(r) => Some(
            Fp8GemmRelease::parse(r).map_err(|reason| InvalidValue { field: "fp8_gemm_release".to_owned(), reason })?,
        ),
        None => None,
    };
    // Requests that sample with the model's top-k/top-p on a release that
    // sorts the vocabulary for it pay the sort (greedy ones take argmax).
    let sort_sampler = x.sampling == Sampling::ModelDefaults
        && x.sampling_defaults.is_some_and(|d| d.filters(model.vocab_size))
        && vllm_version.sorts_top_k_top_p();
    let fp8 = dtype.is_fp8();
    // The most accurate model is the default: measured kernels with the
    // GPU's fitted constants where the tables cover the deployment; where
    // they do not, the roofline, saying what the tables lack. A model the
    // scenario names is used or refused, never swapped.
    let (chosen, latency_reason) = match latency_model {
        Some(chosen) => (chosen, "explicit".to_owned()),
        None => {
            let covered = KernelConstants::fitted(gpu.name)
                .ok_or_else(|| KernelsError::Gpu(gpu.name.to_owned()))
                .and_then(|_| Kernels::check(model, gpu, tp, dtype, kv_dtype_bytes));
            match covered {
                Ok(()) => (
                    LatencySpec::Kernels { constants_file: None, constants: None },
                    format!("measured {} kernel tables", gpu.name),
                ),
                Err(lacking) => (LatencySpec::Roofline { constants_file: None, constants: None }, lacking.to_string()),
            }
        }
    };
    let latency = match chosen {
        LatencySpec::Roofline { .. } | LatencySpec::Linear { .. } if fp8_gemm_release.is_some() => {
            return invalid(
                "fp8_gemm_release",
                format!(
                    "only the kernels latency model has per-release FP8 GEMM tables; this deployment is priced by {}",
                    if matches!(chosen, LatencySpec::Linear { .. }) {
                        ModelKind::Linear.name().to_owned()
                    } else {
                        format!("the roofline ({latency_reason})")
                    }
                ),
            );
        }
        LatencySpec::Roofline { constants_file, constants } => {
            let defaults = RooflineConstants::for_gpu(gpu.name);
            let c = constants_layered(base, defaults, constants_file.as_deref(), constants)?;
            c.validate().map_err(|e| InvalidValue { field: "latency_model.constants".to_owned(), reason: e })?;
            StepPricer::Roofline(Box::new(
                Roofline::new(model, gpu, tp, weight_bytes, fp8, c)
                    .with_kv_cache_bytes(kv_dtype_bytes)
                    .with_expert_parallel(u64::from(dp))
                    .with_async_scheduling(async_scheduling)
                    .with_sort_sampler(sort_sampler),
            ))
        }
        LatencySpec::Kernels { constants_file, constants } => {
            // Everything the kernels cannot price, the roofline can.
            let bad = |e: KernelsError| InvalidValue {
                field: "latency_model".to_owned(),
                reason: format!("{e}; set latency_model: {{kind: roofline}}"),
            };
            if let Some(r) = fp8_gemm_release
                && !r.measured_on(gpu.name)
            {
                return invalid(
                    "fp8_gemm_release",
                    format!("{r}: no FP8 GEMMs of that release measured on {}", gpu.name),
                );
            }
            let fitted =
                KernelConstants::fitted(gpu.name).ok_or_else(|| bad(KernelsError::Gpu(gpu.name.to_owned())))?;
            let c = constants_layered(base, fitted, constants_file.as_deref(), constants)?;
            c.validate().map_err(|e| InvalidValue { field: "latency_model.constants".to_owned(), reason: e })?;
            StepPricer::Kernels(Box::new(
                Kernels::new_for_release(
                    model,
                    gpu,
                    tp,
                    dtype,
                    kv_dtype_bytes,
                    x.moe_routing,
                    c,
                    fp8_gemm_release.unwrap_or_default(),
                )
                .map_err(bad)?
                .with_async_scheduling(async_scheduling)
                .with_enforce_eager(e.enforce_eager.unwrap_or(false))
                .with_sort_sampler(sort_sampler),
            ))
        }
        LatencySpec::Linear { beta, constants_file, constants } => {
            if beta.is_none() && constants_file.is_none() && constants.is_none() {
                return invalid(
                    "latency_model",
                    "the linear model needs its coefficients: beta: [b0, b1, b2], constants_file: FITTED.yaml (as `blis-sweep fit` writes) or constants: {step_us: …}",
                );
            }
            let field = if beta.is_some() && constants_file.is_none() && constants.is_none() {
                "latency_model.beta"
            } else {
                "latency_model.constants"
            };
            let from_beta = match &beta {
                Some(b) => LinearConstants::from_beta(b)
                    .map_err(|reason| InvalidValue { field: "latency_model.beta".to_owned(), reason })?,
                None => LinearConstants::default(),
            };
            let c = constants_layered(base, from_beta, constants_file.as_deref(), constants)?;
            StepPricer::Linear(
                Linear::from_constants(c).map_err(|reason| InvalidValue { field: field.to_owned(), reason })?,
            )
        }
        LatencySpec::Unimplemented(kind) => {
            return invalid("latency_model", format!("`{kind}` is not implemented; available: {}", ModelKind::names()));
        }
    };
    if e.enforce_eager == Some(true) && !matches!(latency, StepPricer::Kernels(_)) {
        return invalid(
            "engine.enforce_eager",
            format!(
                "eager launches are priced by the kernels model only (it counts the kernels a step launches), not the {} model",
                latency.kind()
            ),
        );
    }
    Ok((latency, latency_reason))
}

/// A latency model's constants: `defaults`, then a constants file (as
/// `blis-sweep fit` writes), then inline keys, each overriding the one before.
fn constants_layered<C: serde::Serialize + serde::de::DeserializeOwned>(
    base: &Path,
    defaults: C,
    file: Option<&str>,
    inline: Option<serde_json::Value>,
) -> Result<C, InvalidValue> {
    let bad = |field: &str, reason: String| InvalidValue { field: field.to_owned(), reason };
    let mut merged = serde_json::to_value(defaults).expect("constants serialize");
    let mut overlay = |v: serde_json::Value, field: &str| -> Result<(), InvalidValue> {
        let serde_json::Value::Object(map) = v else {
            return Err(bad(field, "expected a mapping of constants".to_owned()));
        };
        merged.as_object_mut().expect("a struct serializes to a map").extend(map);
        Ok(())
    };
    if let Some(f) = file {
        let path = base.join(f);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| bad("latency_model.constants_file", format!("{}: {e}", path.display())))?;
        let v: serde_json::Value = crate::yaml::parse(&text).map_err(|e| {
            bad("latency_model.constants_file", format!("{}:{}: {}", path.display(), e.line, e.message))
        })?;
        overlay(v, "latency_model.constants_file")?;
    }
    if let Some(v) = inline {
        overlay(v, "latency_model.constants")?;
    }
    serde_json::from_value(merged).map_err(|e| bad("latency_model.constants", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each listed model parses by its name, bare and as `kind:` (whose tags
    /// serde spells from the variants, so this keeps the two in step).
    #[test]
    fn every_listed_model_parses_by_its_name() {
        let parse = |yaml: &str| serde_saphyr::from_str::<LatencySpec>(yaml);
        for kind in ModelKind::ALL {
            let name = kind.name();
            let mapped = parse(&format!("{{kind: {name}, beta: [1, 2, 3]}}"))
                .or_else(|_| parse(&format!("{{kind: {name}}}")))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let bare = parse(name);
            let found = match mapped {
                LatencySpec::Kernels { .. } => ModelKind::Kernels,
                LatencySpec::Roofline { .. } => ModelKind::Roofline,
                LatencySpec::Linear { .. } => ModelKind::Linear,
                LatencySpec::Unimplemented(other) => panic!("{name} parsed as unimplemented `{other}`"),
            };
            assert_eq!(found, kind);
            // A bare name needs no parameters, except linear's coefficients.
            assert_eq!(bare.is_ok(), kind != ModelKind::Linear, "{name}");
        }
        assert_eq!(parse("vidur").unwrap(), LatencySpec::Unimplemented("vidur".to_owned()));
    }
}
