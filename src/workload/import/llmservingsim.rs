//! `convert llmservingsim`: LLMServingSim's real vLLM runs
//! (`../shared/data/llmservingsim-vllm-bench`: `runs/<run>/` and its
//! workload) into a workload, a baseline and a scenario.

use std::collections::HashMap;
use std::path::Path;

use super::common::{
    ConvertError, Converted, MAX_TOKENS, count_in, in_arrival_order, llm_request, seconds_in, spread, token_ids,
};
use crate::workload::types::RequestId;

/// One run of `llmservingsim-vllm-bench` (`runs/<run>/` + its workload).
///
/// Prompts become token ids block by block from the workload's `hash_ids_16`
/// (equal ids at the same position are equal prefixes, as in the source), the
/// tail of a prompt after its last full block gets ids of its own. Times are
/// vLLM's engine-side timestamps: TTFT = first token − queued, latency =
/// last token − queued.
pub fn llmservingsim(data: &Path, run: &str) -> Result<Converted, ConvertError> {
    let run_dir = data.join("runs").join(run);
    let meta_path = run_dir.join("meta.json");
    let meta_file = meta_path.display().to_string();
    let bad = |file: &str, line: u64, field: &str, reason: String| ConvertError {
        file: file.to_owned(),
        line,
        field: field.to_owned(),
        reason,
    };
    let meta: serde_json::Value = std::fs::read_to_string(&meta_path)
        .map_err(|e| bad(&meta_file, 0, "file", e.to_string()))
        .and_then(|t| serde_json::from_str(&t).map_err(|e| bad(&meta_file, e.line() as u64, "json", e.to_string())))?;
    let kw = &meta["engine_kwargs"];
    let text = |v: &serde_json::Value, name: &str| {
        v.as_str().map(str::to_owned).ok_or_else(|| bad(&meta_file, 0, name, "missing".to_owned()))
    };
    let model = text(&meta["model"], "model")?;
    let dataset = text(&meta["dataset_path"], "dataset_path")?;
    let count = |name: &str| kw[name].as_u64();
    // An engine count as the scenario reader takes it (`u32`, ≥ 1), refused
    // here rather than written into a scenario `run` refuses.
    let engine = |name: &str| -> Result<Option<u32>, ConvertError> {
        match count(name) {
            None => Ok(None),
            Some(n) => u32::try_from(n).ok().filter(|&n| n >= 1).map(Some).ok_or_else(|| {
                bad(
                    &meta_file,
                    0,
                    &format!("engine_kwargs.{name}"),
                    format!("{n} is not an engine count (1 to {})", u32::MAX),
                )
            }),
        }
    };
    let gpu = run.split("__").next().unwrap_or("");
    let workload_path = data.join(&dataset);
    let wl_file = workload_path.display().to_string();
    // A dataset that cannot be read is meta.json's error: its key names it.
    let wl_text = std::fs::read_to_string(&workload_path)
        .map_err(|e| bad(&meta_file, 0, "dataset_path", format!("{wl_file}: {e}")))?;
    let req_path = run_dir.join("requests.jsonl");
    let req_file = req_path.display().to_string();
    let req_text = std::fs::read_to_string(&req_path).map_err(|e| bad(&req_file, 0, "file", e.to_string()))?;
    let mut measured: HashMap<String, (f64, f64, u64)> = HashMap::new();
    for (i, line) in req_text.lines().enumerate() {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(&req_file, i as u64 + 1, "json", e.to_string()))?;
        let num = |k: &str| {
            let at = |reason: String| bad(&req_file, i as u64 + 1, k, reason);
            v[k].as_f64().ok_or_else(|| at("missing".to_owned())).and_then(|x| seconds_in(x).map_err(at))
        };
        let (queued, first, last) = (num("queued_ts")?, num("first_token_ts")?, num("last_token_ts")?);
        let out = v["output_toks"]
            .as_u64()
            .ok_or_else(|| bad(&req_file, i as u64 + 1, "output_toks", "missing".to_owned()))?;
        let (ttft, e2e) = (first - queued, last - queued);
        if !(ttft >= 0.0 && e2e >= ttft) {
            return Err(bad(
                &req_file,
                i as u64 + 1,
                "first_token_ts",
                "queued ≤ first token ≤ last token is broken".to_owned(),
            ));
        }
        measured.insert(text(&v["request_id"], "request_id")?, (ttft, e2e, out));
    }
    let mut workload = Vec::new();
    let mut baseline = Vec::new();
    for (i, line) in wl_text.lines().enumerate() {
        let lineno = i as u64 + 1;
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(&wl_file, lineno, "json", e.to_string()))?;
        let tokens = |k: &str| -> Result<u64, ConvertError> {
            let n = v[k].as_u64().ok_or_else(|| bad(&wl_file, lineno, k, "missing, or not a count".to_owned()))?;
            count_in(n as f64, u64::from(MAX_TOKENS)).map_err(|reason| bad(&wl_file, lineno, k, reason))
        };
        let input = tokens("input_toks")? as usize;
        let output = tokens("output_toks")? as u32;
        if output == 0 {
            return Err(bad(
                &wl_file,
                lineno,
                "output_toks",
                "must be at least 1 (an llm call generates a token)".to_owned(),
            ));
        }
        let arrival = v["arrival_time_ns"]
            .as_f64()
            .ok_or_else(|| bad(&wl_file, lineno, "arrival_time_ns", "missing".to_owned()))
            .and_then(|ns| seconds_in(ns / 1e9).map_err(|reason| bad(&wl_file, lineno, "arrival_time_ns", reason)))?;
        let hashes: Vec<u64> = v["hash_ids_16"]
            .as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
            .unwrap_or_default();
        let mut ids: Vec<u32> = hashes.iter().flat_map(|&h| token_ids(h, 16)).take(input).collect();
        let rest = input - ids.len();
        ids.extend(token_ids(1u64 << 40 | i as u64, rest));
        let name = format!("bench-{i}");
        let Some(&(ttft, e2e, out)) = measured.get(&name) else {
            return Err(bad(&wl_file, lineno, "request_id", format!("{name} has no measurement in {req_file}")));
        };
        if out != u64::from(output) {
            return Err(bad(
                &wl_file,
                lineno,
                "output_toks",
                format!("{name}: {out} measured in {req_file}, {output} here"),
            ));
        }
        let id = RequestId::Int(i as u64);
        workload.push((lineno, llm_request(id.clone(), arrival, ids.clone(), output, None)));
        baseline.push((lineno, llm_request(id, arrival, ids, output, Some(spread(ttft, e2e, output)))));
    }
    let workload = in_arrival_order(workload, &wl_file)?;
    let baseline = in_arrival_order(baseline, &wl_file)?;
    let mut notes = vec!["the baseline spreads latency - TTFT evenly over the output tokens after the first (the data has first and last token times only)".to_owned()];
    let tp = count("tensor_parallel_size").unwrap_or(1);
    let dp = count("data_parallel_size").unwrap_or(1);
    let expert_parallel = kw["enable_expert_parallel"].as_bool().unwrap_or(false);
    if dp > 1 && !expert_parallel {
        notes.push(format!("vLLM ran data parallel {dp} without expert parallelism; simulated with the experts spread over the ranks as under expert parallelism"));
    }
    let blocks = meta.pointer("/kv_cache/num_gpu_blocks").and_then(serde_json::Value::as_u64);
    let scenario_yaml = format!(
        "# {run}: real vLLM {version} run (../shared/data/llmservingsim-vllm-bench), converted by\n\
         # `blis-sweep convert llmservingsim`.{dp_note}\n\
         name: {run}\nmodel: {model}\nhardware: {gpu}\ntp: {tp}\n{dp_key}dtype: bf16\nengine:\n  max_num_seqs: {seqs}\n  \
         max_num_batched_tokens: {mbt}\n  block_size: 16\n  gpu_memory_utilization: 0.9\n{blocks}  enable_prefix_caching: true\n{engine_version}",
        version = meta["vllm_version"].as_str().unwrap_or("?"),
        // The release it ran, when the run says (`meta.json`), so the engine
        // behaves as that release's scheduler did.
        engine_version = meta["vllm_version"].as_str().map_or_else(String::new, |v| format!("  vllm_version: {v}\n")),
        dp_note = if dp > 1 {
            format!("\n# vLLM ran DP{dp} + EP: {dp} engine ranks of tp {tp} behind its DP load balancer.")
        } else {
            String::new()
        },
        dp_key = if dp > 1 { format!("dp: {dp}\n") } else { String::new() },
        seqs = engine("max_num_seqs")?.unwrap_or(256),
        mbt = engine("max_num_batched_tokens")?.unwrap_or(2048),
        blocks = blocks.map_or_else(String::new, |b| format!("  num_gpu_blocks: {b}\n")),
    );
    Ok(Converted { workload, baseline, scenario_yaml, notes, client_timeout_s: None })
}
