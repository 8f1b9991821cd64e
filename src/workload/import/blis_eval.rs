//! BLIS's held-out evaluation runs (`aggregates_eval38.csv` in
//! `../shared/data/blis-vllm-h100`): 33 real vLLM 0.15.1 runs on H100,
//! A100-80GB and L40S, each known by its deployment (model, GPU, TP,
//! `max_num_batched_tokens`, `gpu_memory_utilization`, CPU offload) and its
//! aggregate latencies, whole run and per load stage, with BLIS's
//! predictions beside them. Two of them are the very runs in `requests/`
//! (`same_run_as_requests_file`), replayed request by request there; this
//! source lists the other 31.
//!
//! Their workloads were not published (only in a GitHub discussion), but
//! each names an inference-perf profile, and wherever BLIS's data gives a
//! profile's spec it is the same for every model (`trainval15_experiment_
//! configs.json`, `experiments.csv`): [`PROFILES`]. Each run is replayed with
//! its named profile — an assumption, stated in every run's notes. The eval
//! rows agree with it where they can be checked: each has one load stage per
//! stage of its profile, and the output length the real client counted
//! ((mean E2E − mean TTFT) / mean ITL + 1) is 236–250 tokens on the
//! 247–251-token profiles and 1,389–1,426 on the 1,448-token ones.
//!
//! The replay is [`super::blis_trainval`]'s: the same inference-perf
//! `shared_prefix` workload (prompt pool, arrivals, seed 42 as every
//! training config has it) and the same aggregate columns; only the
//! deployment differs: the KV cache is sized from `gpu_mem_util` as vLLM's
//! profiling run sizes it ([`crate::scenario`]'s KV capacity), since no block
//! count was published for these runs.

use std::path::Path;

use super::blis_trainval::{self, InferencePerf, SharedPrefix, Stage, TrainvalRun};
use super::common::{ConvertError, column, read_csv};

/// One inference-perf profile as BLIS ran it: system prompt, question and
/// output tokens, and the load stages (requests/s, seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// The name the `workload` column gives.
    pub name: &'static str,
    /// `system_prompt_len`.
    pub system_prompt_len: u32,
    /// `question_len`.
    pub question_len: u32,
    /// `output_len` (forced with `ignore_eos`).
    pub output_len: u32,
    /// (rate, duration) per load stage.
    pub stages: &'static [(f64, f64)],
}

/// The profiles, each as every run of BLIS's that names it and publishes a
/// spec ran it:
/// - `general-lite`: training runs 17, 60, 62 and 65;
/// - `codegen`: training runs 20, 61 and 63 and the per-request runs
///   `20260217-155451` and `20260218-150956`;
/// - `roleplay`: training runs 21 and 64 and per-request runs
///   `20260217-162547` and `20260218-155500`;
/// - `reasoning-lite`: training runs 48, 66 and 67;
/// - `general`: per-request runs `20260217-231439` and `20260218-150304`;
/// - `reasoning`: per-request runs `20260217-170634` and `20260218-160939`
///   (`experiments.csv`: 4 req/s for 1,200 s).
pub const PROFILES: [Profile; 6] = [
    Profile {
        name: "general-lite",
        system_prompt_len: 100,
        question_len: 447,
        output_len: 248,
        stages: &[(2.5, 600.0), (6.0, 600.0)],
    },
    Profile {
        name: "codegen",
        system_prompt_len: 100,
        question_len: 466,
        output_len: 247,
        stages: &[(5.0, 600.0), (10.0, 600.0)],
    },
    Profile { name: "roleplay", system_prompt_len: 150, question_len: 600, output_len: 251, stages: &[(6.0, 1200.0)] },
    Profile {
        name: "reasoning-lite",
        system_prompt_len: 100,
        question_len: 934,
        output_len: 1448,
        stages: &[(1.0, 1200.0)],
    },
    Profile {
        name: "general",
        system_prompt_len: 100,
        question_len: 447,
        output_len: 248,
        stages: &[(8.0, 600.0), (20.0, 600.0)],
    },
    Profile {
        name: "reasoning",
        system_prompt_len: 100,
        question_len: 934,
        output_len: 1448,
        stages: &[(4.0, 1200.0)],
    },
];

/// The seed of every training config's workload (`"seed": 42` in all 15).
const SEED: u64 = 42;

/// The CPU KV tier per GPU of a run with `cpu_offload`: not published for
/// these runs; every one of BLIS's training runs that had a tier had 8 GiB
/// per GPU (`trainval15_experiment_configs.json` `cpu_kv_blocks` × the
/// block's bytes: 1023 × 8 MiB for Llama-2-7b, 6553 × 1.25 MiB for
/// Llama-3.1-70B at tp 4, ...).
const CPU_TIER_GIB: u32 = 8;

/// What no eval row gives, set as in every run of BLIS's that does give it
/// (`experiments.csv`, the training configs): 128 sequences, 4,096-token
/// context, 16-token blocks.
const MAX_NUM_SEQS: u32 = 128;
const MAX_MODEL_LEN: u32 = 4096;

const FILE: &str = "aggregates_eval38.csv";

/// BLIS's headline simulator on this set (the data's README reports its
/// accuracy from this column).
pub const BLIS_COLUMN: &str = "pred_ms_blis-trained-physics";

fn err(file: &Path, line: u64, field: &str, reason: impl Into<String>) -> ConvertError {
    ConvertError { file: file.display().to_string(), line, field: field.to_owned(), reason: reason.into() }
}

/// The eval runs without per-request data, by their `experiment` names, sorted.
pub fn list(data: &Path) -> Result<Vec<String>, ConvertError> {
    let path = data.join(FILE);
    let (headers, rows) = read_csv(&path)?;
    let (c_name, c_same) =
        (column(&path, &headers, "experiment")?, column(&path, &headers, "same_run_as_requests_file")?);
    let mut names: Vec<String> =
        rows.iter().filter(|r| r[c_same].trim().is_empty()).map(|r| r[c_name].clone()).collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// The profile a `workload` column names.
pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// Reads eval run `name`: its deployment, its assumed workload and its
/// measured aggregates.
pub fn load(data: &Path, name: &str) -> Result<TrainvalRun, ConvertError> {
    let path = data.join(FILE);
    let (headers, rows) = read_csv(&path)?;
    let col = |c: &str| column(&path, &headers, c);
    let c_name = col("experiment")?;
    let Some((i, row)) = rows.iter().enumerate().find(|(_, r)| r[c_name] == name) else {
        return Err(err(&path, 0, "experiment", format!("no run `{name}`")));
    };
    let line = i as u64 + 2;
    let field = |c: &str| -> Result<&str, ConvertError> { Ok(row[col(c)?].trim()) };
    let bad = |c: &str, why: String| err(&path, line, c, why);
    if !field("same_run_as_requests_file")?.is_empty() {
        return Err(bad(
            "same_run_as_requests_file",
            format!(
                "{name} is the run in {}: replay it with source blis-vllm-h100",
                field("same_run_as_requests_file")?
            ),
        ));
    }
    let hf_model = field("model")?;
    let model = crate::arch::catalog::model_config(hf_model)
        .map(|(id, _)| id)
        .ok_or_else(|| bad("model", format!("{hf_model} is not in the catalog")))?;
    let hardware = field("hardware")?;
    if crate::arch::hardware::lookup(hardware).is_none() {
        return Err(bad("hardware", format!("{hardware} is not in the GPU catalog")));
    }
    let dtype = match field("precision")? {
        "FP16" => "fp16",
        "BF16" => "bf16",
        other => return Err(bad("precision", format!("{other}: only FP16 and BF16 runs are replayed"))),
    };
    let int = |c: &str| -> Result<u32, ConvertError> {
        let v = field(c)?;
        v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| bad(c, format!("`{v}` is not a positive integer")))
    };
    let (tp, mbt) = (int("tp")?, int("max_num_batched_tokens")?);
    if !field("dp")?.is_empty() && int("dp")? != 1 {
        return Err(bad("dp", format!("{}: data-parallel eval runs are not replayed", field("dp")?)));
    }
    let util = field("gpu_mem_util")?;
    let util_value = util.parse::<f64>().ok().filter(|u| *u > 0.0 && *u <= 1.0);
    if util_value.is_none() {
        return Err(bad("gpu_mem_util", format!("`{util}` is not a fraction in (0, 1]")));
    }
    let workload_name = field("workload")?;
    let p = profile(workload_name).ok_or_else(|| {
        let known: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
        bad("workload", format!("no known spec for profile `{workload_name}`; known: {}", known.join(", ")))
    })?;
    let cpu_offload = field("cpu_offload")?.eq_ignore_ascii_case("true");
    let offload = if cpu_offload { format!("  kv_offload: {{cpu_gib: {CPU_TIER_GIB}}}\n") } else { String::new() };
    let scenario_yaml = format!(
        "name: {name}\nmodel: {model}\nhardware: {hardware}\ntp: {tp}\ndtype: {dtype}\nengine:\n  max_num_seqs: {MAX_NUM_SEQS}\n  \
         max_num_batched_tokens: {mbt}\n  max_model_len: {MAX_MODEL_LEN}\n  gpu_memory_utilization: {util}\n  \
         enable_prefix_caching: true\n  vllm_version: 0.15.1\n{offload}"
    );
    let spec = InferencePerf {
        shared_prefix: SharedPrefix {
            system_prompt_len: p.system_prompt_len,
            question_len: p.question_len,
            output_len: p.output_len,
        },
        stages: p.stages.iter().map(|&(rate, duration)| Stage { rate, duration }).collect(),
    };
    let (workload, stages) = blis_trainval::inference_perf(&spec, SEED);
    let mut notes = vec![format!(
        "ASSUMED workload: the eval specs are unpublished; profile `{}` as BLIS's runs that publish it ran it \
         ({} + {} prompt tokens, {} output, stages {})",
        p.name,
        p.system_prompt_len,
        p.question_len,
        p.output_len,
        p.stages.iter().map(|(r, d)| format!("{r} req/s x {d} s")).collect::<Vec<_>>().join(", ")
    )];
    notes.extend(blis_trainval::workload_notes(&spec.shared_prefix));
    notes.push(format!(
        "KV blocks computed from gpu_memory_utilization {util} (none published); max_num_seqs {MAX_NUM_SEQS} and \
         max_model_len {MAX_MODEL_LEN} assumed as in BLIS's other runs"
    ));
    if cpu_offload {
        notes.push(format!(
            "the real server offloaded KV to CPU memory (cpu_offload): a {CPU_TIER_GIB} GiB tier per GPU ASSUMED \
             (its size was not published; every training run with a tier had {CPU_TIER_GIB} GiB per GPU)"
        ));
    }
    let aggregates = blis_trainval::read_aggregates(&path, name, BLIS_COLUMN)?;
    Ok(TrainvalRun { scenario_yaml, workload, stages, aggregates, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each profile has one load stage per stage the eval rows report
    /// (0 and 1 for the two-stage profiles), and the names are unique.
    #[test]
    fn profiles_are_named_once_and_have_their_stages() {
        for p in &PROFILES {
            assert_eq!(PROFILES.iter().filter(|q| q.name == p.name).count(), 1, "{}", p.name);
            let two = ["general-lite", "codegen", "general"].contains(&p.name);
            assert_eq!(p.stages.len(), if two { 2 } else { 1 }, "{}", p.name);
        }
        assert_eq!(profile("general-lite").unwrap().stages, &[(2.5, 600.0), (6.0, 600.0)]);
        assert!(profile("chat").is_none());
    }
}
