//! `engine.speculative:` resolved for one engine: the method, `k`, the
//! per-position acceptance rates (given, or `rate: r` as α_j = r^j) in parts
//! per million, the seed, and the drafter's price from the model, the draft
//! model and the GPU ([`crate::latency::DraftCost`]). EAGLE and MTP run
//! with either scheduling; n-gram and draft models with synchronous
//! scheduling only, as in vLLM; see [`resolve`].

use super::error::{InvalidValue, invalid};
use super::spec::EngineSpec;
use crate::arch::{Gpu, ModelArch, catalog};
use crate::latency::DraftCost;
use crate::sim::{SpecDecode, SpecMethod};

/// Most drafts a step: a sanity bound (vLLM sets none; published EAGLE and
/// MTP deployments use 1–7), so that a typo cannot size per-position
/// counters by the billion.
const MAX_K: u32 = 32;

/// The speculative decoding of `e` for `model` on `tp` GPUs of `gpu`, one
/// of `dp` ranks; `None` when not asked for.
pub(super) fn resolve(
    e: &EngineSpec,
    model: &ModelArch,
    gpu: &Gpu,
    tp: u64,
    dp: u32,
) -> Result<Option<SpecDecode>, InvalidValue> {
    let Some(s) = &e.speculative else { return Ok(None) };
    let Some(name) = &s.method else {
        return invalid("engine.speculative.method", format!("missing: one of {}", SpecMethod::NAMES.join(", ")));
    };
    let Some(method) = SpecMethod::parse(name) else {
        return invalid(
            "engine.speculative.method",
            format!("unknown method `{name}`; one of {}", SpecMethod::NAMES.join(", ")),
        );
    };
    let k = match s.k {
        None => return invalid("engine.speculative.k", "missing: the drafts proposed per step (1 or more)"),
        Some(k) if !(1..=MAX_K).contains(&k) => {
            return invalid("engine.speculative.k", format!("{k} must be in 1..={MAX_K}"));
        }
        Some(k) => k,
    };
    let acceptance: Vec<f64> = match (&s.acceptance, s.rate) {
        (Some(_), Some(_)) => {
            return invalid("engine.speculative.rate", "give either `acceptance: [α1..αk]` or `rate: r`, not both");
        }
        (None, None) => {
            return invalid("engine.speculative.acceptance", "missing: give `acceptance: [α1..αk]` or `rate: r`");
        }
        (None, Some(r)) => {
            if !(0.0..=1.0).contains(&r) {
                return invalid("engine.speculative.rate", format!("{r} must be in [0, 1]"));
            }
            (1..=k).map(|j| r.powi(j as i32)).collect()
        }
        (Some(a), None) => {
            if a.len() != k as usize {
                return invalid(
                    "engine.speculative.acceptance",
                    format!("{} rates for k = {k}: give one per draft position", a.len()),
                );
            }
            for (j, &x) in a.iter().enumerate() {
                if !(0.0..=1.0).contains(&x) {
                    return invalid("engine.speculative.acceptance", format!("α{} = {x} must be in [0, 1]", j + 1));
                }
                if j > 0 && x > a[j - 1] {
                    return invalid(
                        "engine.speculative.acceptance",
                        format!(
                            "α{} = {x} exceeds α{} = {}: position j is accepted only if j − 1 is, so the rates cannot rise",
                            j + 1,
                            j,
                            a[j - 1]
                        ),
                    );
                }
            }
            a.clone()
        }
    };
    // vLLM 0.15.1 (config/vllm.py) schedules asynchronously only with EAGLE
    // and MTP drafts: it refuses async with the others, and turns its
    // default off for them. Made explicit here, so the scenario says which
    // scheduling it models.
    if !matches!(method, SpecMethod::Eagle | SpecMethod::Mtp) && e.async_scheduling != Some(false) {
        return invalid(
            "engine.async_scheduling",
            format!(
                "vLLM schedules {name} drafts synchronously only (async scheduling supports EAGLE/MTP drafts); set engine.async_scheduling: false"
            ),
        );
    }
    if dp > 1 && model.moe.is_some() {
        return invalid(
            "engine.speculative",
            "not modelled for data-parallel ranks of an MoE model, whose lockstep steps are priced without the drafter",
        );
    }
    let draft = match (method, &s.draft_model) {
        (SpecMethod::DraftModel, None) => {
            return invalid("engine.speculative.draft_model", "missing: the draft's catalog model name");
        }
        (SpecMethod::DraftModel, Some(name)) => {
            let Some((id, text)) = catalog::model_config(name) else {
                return invalid(
                    "engine.speculative.draft_model",
                    format!("unknown model `{name}`; the catalog has {}", catalog::model_ids().join(", ")),
                );
            };
            let arch = ModelArch::from_config_json(id, text).map_err(|e| InvalidValue {
                field: "engine.speculative.draft_model".to_owned(),
                reason: e.to_string(),
            })?;
            if arch.vocab_size != model.vocab_size {
                return invalid(
                    "engine.speculative.draft_model",
                    format!(
                        "`{id}` has a vocabulary of {}, {} has {}: a draft must share the target's tokenizer",
                        arch.vocab_size, model.name, model.vocab_size
                    ),
                );
            }
            DraftCost::draft_model(&arch, gpu, tp, k)
        }
        (_, Some(_)) => {
            return invalid("engine.speculative.draft_model", format!("only for method draft_model, not `{name}`"));
        }
        (SpecMethod::Eagle, None) => DraftCost::eagle(model, gpu, tp, k),
        (SpecMethod::Mtp, None) => DraftCost::mtp(model, gpu, tp, k),
        (SpecMethod::Ngram, None) => DraftCost::FREE,
    };
    let ppm = acceptance.iter().map(|a| (a * 1e6).round() as u32).collect();
    Ok(Some(SpecDecode::new(method, k, ppm, s.seed.unwrap_or(0), draft)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::hardware;

    fn run(yaml: &str) -> Result<Option<SpecDecode>, InvalidValue> {
        let e: EngineSpec = serde_saphyr::from_str(yaml).unwrap();
        let (id, text) = catalog::model_config("Llama-3.1-8B").unwrap();
        let model = ModelArch::from_config_json(id, text).unwrap();
        resolve(&e, &model, &hardware::lookup("H100").unwrap(), 1, 1)
    }

    fn field(yaml: &str) -> String {
        run(yaml).unwrap_err().field
    }

    #[test]
    fn rate_gives_powers_in_ppm() {
        let s =
            run("async_scheduling: false\nspeculative: {method: eagle, k: 3, rate: 0.5, seed: 9}").unwrap().unwrap();
        assert_eq!(s.acceptance_ppm, vec![500_000, 250_000, 125_000]);
        assert_eq!((s.k, s.seed, s.method, s.lookahead()), (3, 9, SpecMethod::Eagle, 3));
        let n = run("async_scheduling: false\nspeculative: {method: ngram, k: 2, acceptance: [0.6, 0.3]}")
            .unwrap()
            .unwrap();
        assert_eq!((n.lookahead(), n.draft), (0, DraftCost::FREE));
        assert!(run("{}").unwrap().is_none());
        // EAGLE and MTP with vLLM's default, async scheduling.
        let a = run("speculative: {method: eagle, k: 2, rate: 0.5}").unwrap().unwrap();
        assert_eq!((a.k, a.lookahead()), (2, 2));
        assert!(run("async_scheduling: true\nspeculative: {method: mtp, k: 1, rate: 0.5}").unwrap().is_some());
    }

    #[test]
    fn bad_values_name_their_field() {
        let off = "async_scheduling: false\n";
        assert_eq!(field(&format!("{off}speculative: {{k: 3, rate: 0.5}}")), "engine.speculative.method");
        assert_eq!(
            field(&format!("{off}speculative: {{method: medusa, k: 3, rate: 0.5}}")),
            "engine.speculative.method"
        );
        assert_eq!(field(&format!("{off}speculative: {{method: eagle, k: 0, rate: 0.5}}")), "engine.speculative.k");
        assert_eq!(field(&format!("{off}speculative: {{method: eagle, rate: 0.5}}")), "engine.speculative.k");
        assert_eq!(field(&format!("{off}speculative: {{method: eagle, k: 2, rate: 1.5}}")), "engine.speculative.rate");
        assert_eq!(
            field(&format!("{off}speculative: {{method: eagle, k: 2, acceptance: [0.5]}}")),
            "engine.speculative.acceptance"
        );
        assert_eq!(
            field(&format!("{off}speculative: {{method: eagle, k: 2, acceptance: [0.5, 0.7]}}")),
            "engine.speculative.acceptance"
        );
        assert_eq!(field(&format!("{off}speculative: {{method: eagle, k: 2}}")), "engine.speculative.acceptance");
        assert_eq!(
            field(&format!("{off}speculative: {{method: draft_model, k: 2, rate: 0.5}}")),
            "engine.speculative.draft_model"
        );
        assert_eq!(
            field(&format!("{off}speculative: {{method: draft_model, k: 2, rate: 0.5, draft_model: Llama-2-7b}}")),
            "engine.speculative.draft_model"
        );
        assert_eq!(field("speculative: {method: ngram, k: 2, rate: 0.5}"), "engine.async_scheduling");
        assert_eq!(
            field("async_scheduling: true\nspeculative: {method: draft_model, k: 2, rate: 0.5, draft_model: x}"),
            "engine.async_scheduling"
        );
    }
}
