//! BLIS's training experiments (`../shared/data/blis-vllm-h100`:
//! `trainval15_experiment_configs.json` and `aggregates_trainval.csv`): real
//! vLLM runs known only by their workload spec and their aggregate latencies.
//! Each becomes a deployment, the inference-perf workload it ran, and the
//! measured aggregates (whole run and per load stage) with BLIS's
//! predictions beside them. The runs that also have per-request data
//! (`requests/`) are replayed from it instead (see `blis_vllm_h100`).
//!
//! The workload is inference-perf's `shared_prefix` generator as these runs
//! used it (the folder's README, `aggregates/*/results_config.yaml`): the
//! inference-perf of these runs did not know the spec's
//! `num_unique_system_prompts`, `num_users_per_system_prompt` and
//! `enable_multi_turn_chat` (they arrived in inference-perf 4f57a0b, Feb 5
//! 2026), so every resolved config shows its defaults, 10 groups × 10
//! prompts, and no turn grows a context (the per-request runs' prompts stay
//! at 580–604 tokens for 9,000 requests). Request `i` sends prompt `i mod
//! 100` (its group's system prompt, then its question), `output_len` tokens
//! forced with `ignore_eos`; each load stage sends `rate × duration`
//! requests, exponential gaps rescaled to fill the stage (inference-perf's
//! `constant` load; the per-request runs' gaps have a coefficient of
//! variation of 1.01–1.07).

use std::path::Path;

use serde::Deserialize;

use super::common::{ConvertError, column, read_csv};
pub use super::inference_perf::Stage;
use super::inference_perf::{Load, SharedPrefixRun};
use crate::workload::types::Request;

/// Tokens the server counts beyond `system_prompt_len + question_len`
/// (tokenizer and BOS): the mean over the per-request runs of the same
/// folder, 27.2 with 100-token system prompts (Llama-2-7b codegen 25.6,
/// general 28.5; CodeLlama-34b general 27.2, codegen 27.4) and 36.3 with 150
/// (roleplay 35.8 and 36.7).
fn extra_prompt_tokens(system_prompt_len: u32) -> u32 {
    if system_prompt_len >= 150 { 36 } else { 27 }
}

/// inference-perf's `shared_prefix` defaults (`num_groups`,
/// `num_prompts_per_group`), which every resolved config of these runs shows.
const GROUPS: u64 = 10;
const PROMPTS_PER_GROUP: u64 = 10;

/// inference-perf's `shared_prefix` data spec: prompt and output lengths.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct SharedPrefix {
    pub(super) system_prompt_len: u32,
    pub(super) question_len: u32,
    pub(super) output_len: u32,
}

/// An inference-perf run: its data spec and load stages.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct InferencePerf {
    pub(super) shared_prefix: SharedPrefix,
    pub(super) stages: Vec<Stage>,
}

#[derive(Debug, Clone, Deserialize)]
struct WorkloadSpec {
    inference_perf: InferencePerf,
    seed: u64,
}

#[derive(Debug, Clone, Deserialize)]
struct ExperimentSpec {
    id: String,
    model: String,
    hardware: String,
    tp: u32,
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    total_kv_blocks: u32,
    cpu_kv_blocks: u32,
    workload: WorkloadSpec,
}

#[derive(Debug, Deserialize)]
struct ConfigsFile {
    experiments: Vec<ExperimentSpec>,
}

/// One measured aggregate.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    /// −1 for the whole run, else the load stage.
    pub stage: i32,
    /// `e2e_mean`, `ttft_p99`, `itl_mean`, … as the file names them.
    pub metric: String,
    /// Measured, ms.
    pub actual_ms: f64,
    /// BLIS's prediction (`pred_ms_blis-evolved`), ms.
    pub blis_ms: Option<f64>,
}

/// One training experiment, ready to replay.
#[derive(Debug, Clone)]
pub struct TrainvalRun {
    /// The deployment, as a scenario file.
    pub scenario_yaml: String,
    /// The requests it sent.
    pub workload: Vec<Request>,
    /// Each load stage's `[start, end)`, seconds.
    pub stages: Vec<(f64, f64)>,
    /// What the real run measured.
    pub aggregates: Vec<Aggregate>,
    /// What the replay assumed.
    pub notes: Vec<String>,
}

fn err(file: &Path, line: u64, field: &str, reason: impl Into<String>) -> ConvertError {
    ConvertError { file: file.display().to_string(), line, field: field.to_owned(), reason: reason.into() }
}

/// The aggregate-only experiments (no per-request file), by the names
/// `aggregates_trainval.csv` gives them, sorted.
pub fn list(data: &Path) -> Result<Vec<String>, ConvertError> {
    let path = data.join("aggregates_trainval.csv");
    let (headers, rows) = read_csv(&path)?;
    let col = |name: &str| column(&path, &headers, name);
    let (c_name, c_same) = (col("experiment")?, col("same_run_as_requests_file")?);
    let mut names: Vec<String> =
        rows.iter().filter(|r| r[c_same].trim().is_empty()).map(|r| r[c_name].clone()).collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Reads experiment `name` (an `aggregates_trainval.csv` name, whose leading
/// number is the configs file's `id`).
pub fn load(data: &Path, name: &str) -> Result<TrainvalRun, ConvertError> {
    let configs_path = data.join("trainval15_experiment_configs.json");
    let text = std::fs::read_to_string(&configs_path).map_err(|e| err(&configs_path, 0, "file", e.to_string()))?;
    let configs: ConfigsFile =
        serde_json::from_str(&text).map_err(|e| err(&configs_path, e.line() as u64, "json", e.to_string()))?;
    let id = name.split('-').next().unwrap_or_default();
    let Some(x) = configs.experiments.iter().find(|e| e.id == id) else {
        return Err(err(&configs_path, 0, "experiments", format!("no experiment with id {id} (for {name})")));
    };
    let (model, config) = crate::arch::catalog::model_config(&x.model)
        .ok_or_else(|| err(&configs_path, 0, "model", format!("{} is not in the catalog", x.model)))?;
    let dtype = if x.model.to_ascii_uppercase().contains("FP8") { "\ndtype: fp8" } else { "" };
    let blocks = pool_blocks(x.total_kv_blocks, config, x.tp);
    // The real server's CPU KV tier (vLLM's OffloadingConnector; 8 GiB per
    // GPU on every run that has one), in the blocks its log reported.
    let offload = if x.cpu_kv_blocks > 0 {
        format!("  kv_offload: {{cpu_blocks: {}}}\n", x.cpu_kv_blocks)
    } else {
        String::new()
    };
    let scenario_yaml = format!(
        "name: {name}\nmodel: {model}\nhardware: {hw}\ntp: {tp}{dtype}\nengine:\n  max_num_seqs: {seqs}\n  \
         max_num_batched_tokens: {mbt}\n  num_gpu_blocks: {blocks}\n  enable_prefix_caching: true\n  vllm_version: 0.15.1\n{offload}",
        hw = x.hardware,
        tp = x.tp,
        seqs = x.max_num_seqs,
        mbt = x.max_num_batched_tokens,
        blocks = blocks,
    );
    let ip = &x.workload.inference_perf;
    let p = &ip.shared_prefix;
    ip.generator().check().map_err(|(field, reason)| err(&configs_path, 0, &field, reason))?;
    let (workload, stages) = inference_perf(ip, x.workload.seed);
    let notes = workload_notes(p);
    let aggregates = read_aggregates(&data.join("aggregates_trainval.csv"), name, "pred_ms_blis-evolved")?;
    Ok(TrainvalRun { scenario_yaml, workload, stages, aggregates, notes })
}

/// The pool's blocks for a logged capacity of `logged` blocks of `config`'s
/// model at `tp`. The BLIS team took the capacity from vllm.log's "GPU KV
/// cache size: N tokens", which vLLM reports as the pool's blocks over its KV
/// cache groups (`kv_cache_utils.py` `_report_kv_cache_config`: `num_blocks //
/// len(kv_cache_groups) * block_size`): a hybrid model's pool (Llama 4: 4
/// groups) holds that many blocks per group.
fn pool_blocks(logged: u32, config: &str, tp: u32) -> u64 {
    let groups = crate::arch::ModelArch::from_config_json("m", config)
        .map_or(1, |m| m.kv_layout(u64::from(tp), 2, 16, true).groups.len() as u64);
    u64::from(logged) * groups
}

/// What a replay of `p` assumes about the workload, for the run's notes.
pub(super) fn workload_notes(p: &SharedPrefix) -> Vec<String> {
    vec![
        format!(
            "inference-perf shared_prefix as its defaults resolved it: request i sends prompt i mod {} ({GROUPS} system \
             prompts of {} tokens x {PROMPTS_PER_GROUP}), {} + {} + {} tokens, {} output tokens (ignore_eos); no multi-turn context",
            GROUPS * PROMPTS_PER_GROUP,
            p.system_prompt_len,
            p.system_prompt_len,
            p.question_len,
            extra_prompt_tokens(p.system_prompt_len),
            p.output_len
        ),
        "arrivals: each stage's rate x duration requests, exponential gaps rescaled to the stage".to_owned(),
    ]
}

impl InferencePerf {
    /// inference-perf's generator as these runs resolved it (see the module
    /// doc): its default 10 x 10 prompts, single turn, constant load, stages
    /// back to back, the server's tokenizer overhead counted in the question.
    pub(super) fn generator(&self) -> SharedPrefixRun {
        let p = &self.shared_prefix;
        SharedPrefixRun {
            groups: GROUPS,
            prompts_per_group: PROMPTS_PER_GROUP,
            system_prompt_len: p.system_prompt_len,
            question_len: p.question_len.saturating_add(extra_prompt_tokens(p.system_prompt_len)),
            output_len: p.output_len,
            multi_turn: false,
            load: Load::Constant,
            interval_s: 0.0,
            stages: self.stages.clone(),
        }
    }
}

/// The requests of an inference-perf `shared_prefix` run, and its stages.
pub(super) fn inference_perf(spec: &InferencePerf, seed: u64) -> (Vec<Request>, Vec<(f64, f64)>) {
    spec.generator().requests(seed)
}

/// The measured aggregates of `name` in `path` (an `aggregates_*.csv` of
/// BLIS's: one row per experiment, stage and metric), with BLIS's
/// prediction from column `blis_column`.
pub(super) fn read_aggregates(path: &Path, name: &str, blis_column: &str) -> Result<Vec<Aggregate>, ConvertError> {
    let (headers, rows) = read_csv(path)?;
    let col = |name: &str| column(path, &headers, name);
    let (c_name, c_stage, c_metric, c_actual, c_blis) =
        (col("experiment")?, col("stage_index")?, col("metric")?, col("actual_ms")?, col(blis_column)?);
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate().filter(|(_, r)| r[c_name] == name) {
        let line = i as u64 + 2;
        let number = |c: usize, field: &str| {
            r[c].trim().parse::<f64>().map_err(|_| err(path, line, field, format!("`{}` is not a number", r[c])))
        };
        let stage = r[c_stage].trim().parse::<i32>().map_err(|_| err(path, line, "stage_index", "not an integer"))?;
        let blis = if r[c_blis].trim().is_empty() { None } else { Some(number(c_blis, blis_column)?) };
        out.push(Aggregate {
            stage,
            metric: r[c_metric].clone(),
            actual_ms: number(c_actual, "actual_ms")?,
            blis_ms: blis,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-4-Scout's pool has 4 KV cache groups (36 chunked local layers,
    /// 12 global, groups of 12): the 8,253 blocks vLLM 0.15.1 logged as
    /// tokens (`GPU KV cache size`) are 33,012 in its pool. One group: as
    /// logged.
    #[test]
    fn a_logged_capacity_is_the_pool_over_its_groups() {
        let scout = crate::arch::catalog::model_config("Llama-4-Scout-17B-16E-Instruct").unwrap().1;
        assert_eq!(pool_blocks(8253, scout, 2), 33_012);
        let llama = crate::arch::catalog::model_config("Llama-2-7b").unwrap().1;
        assert_eq!(pool_blocks(7462, llama, 1), 7462);
    }

    #[test]
    fn stages_hold_rate_times_duration_requests_and_prompts_repeat_over_the_pool() {
        let spec = InferencePerf {
            shared_prefix: SharedPrefix { system_prompt_len: 100, question_len: 50, output_len: 20 },
            stages: vec![Stage { rate: 5.0, duration: 10.0 }, Stage { rate: 20.0, duration: 5.0 }],
        };
        let (requests, stages) = inference_perf(&spec, 42);
        assert_eq!(stages, [(0.0, 10.0), (10.0, 15.0)]);
        assert_eq!(requests.len(), 150);
        let in_first = requests.iter().filter(|r| r.arrival_time < 10.0).count();
        assert_eq!(in_first, 50);
        assert!(requests[0].arrival_time == 0.0 && requests[50].arrival_time == 10.0);
        assert!(requests[49].arrival_time < 10.0 && requests[149].arrival_time < 15.0);
        assert!(requests.windows(2).all(|w| w[0].arrival_time <= w[1].arrival_time));
        let ids = |k: usize| match &requests[k].sub_requests[0].kind {
            crate::workload::NodeKind::Llm(c) => c.input_token_ids.clone().unwrap(),
            _ => unreachable!(),
        };
        // Prompt i mod 100: the same prompt 100 requests later; the same
        // system prompt ten prompts later; 100 + 50 + 27 tokens.
        assert_eq!(ids(0), ids(100));
        assert_eq!(ids(1)[..100], ids(11)[..100]);
        assert_ne!(ids(1)[100..], ids(11)[100..]);
        assert_ne!(ids(1)[..100], ids(2)[..100]);
        assert_eq!(ids(0).len(), 177);
    }
}
