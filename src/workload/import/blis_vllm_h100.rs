//! `convert blis-vllm-h100`: BLIS's real vLLM runs on H100
//! (`../shared/data/blis-vllm-h100`: `experiments.csv` and
//! `requests/<experiment>.csv`) into a workload, a baseline and a scenario,
//! and BLIS's published predictions for them.

use std::path::Path;

use super::common::{
    ConvertError, Converted, MAX_TOKENS, column, count_in, in_arrival_order, llm_request, read_csv, seconds_in, spread,
    token_ids,
};
use crate::workload::types::RequestId;

/// BLIS's published prediction for one metric of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// `e2e_mean`, `ttft_p99`, … as the source names them.
    pub metric: String,
    /// What BLIS's evaluation measured, ms.
    pub actual_ms: f64,
    /// What BLIS (`blis-trained-physics`) predicted, ms.
    pub predicted_ms: f64,
    /// −1 for the whole run, else the load stage.
    pub stage: i32,
}

/// BLIS's predictions for a blis-vllm-h100 experiment, whole run (stage
/// −1) and per load stage, from `aggregates_eval38.csv` (column
/// `pred_ms_blis-trained-physics`, rows whose `same_run_as_requests_file` is
/// this experiment's request file); empty where BLIS published none.
pub fn blis_published(data: &Path, experiment: &str) -> Result<Vec<Published>, ConvertError> {
    let path = data.join("aggregates_eval38.csv");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let file = path.display().to_string();
    let (headers, rows) = read_csv(&path)?;
    let col = |name: &str| column(&path, &headers, name);
    let (c_run, c_stage, c_metric, c_actual, c_pred) = (
        col("same_run_as_requests_file")?,
        col("stage_index")?,
        col("metric")?,
        col("actual_ms")?,
        col("pred_ms_blis-trained-physics")?,
    );
    let wanted = format!("requests/{experiment}.csv");
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        if r[c_run] != wanted || r[c_pred].trim().is_empty() {
            continue;
        }
        let number = |c: usize, name: &str| {
            r[c].trim().parse::<f64>().map_err(|_| ConvertError {
                file: file.clone(),
                line: i as u64 + 2,
                field: name.to_owned(),
                reason: format!("`{}` is not a number", r[c]),
            })
        };
        out.push(Published {
            metric: r[c_metric].clone(),
            actual_ms: number(c_actual, "actual_ms")?,
            predicted_ms: number(c_pred, "pred_ms_blis-trained-physics")?,
            stage: r[c_stage].trim().parse().map_err(|_| ConvertError {
                file: file.clone(),
                line: i as u64 + 2,
                field: "stage_index".to_owned(),
                reason: format!("`{}` is not a stage", r[c_stage]),
            })?,
        });
    }
    Ok(out)
}

/// An experiment's load stages as send-time windows, s: `experiments.csv`'s
/// `stages` (`5rps x 600s;10rps x 600s`: each `RATErps x DURATIONs`, one
/// after the other from the first send).
pub fn stages(data: &Path, experiment: &str) -> Result<Vec<(f64, f64)>, ConvertError> {
    let path = data.join("experiments.csv");
    let file = path.display().to_string();
    let (headers, rows) = read_csv(&path)?;
    let (c_exp, c_stages) = (column(&path, &headers, "experiment")?, column(&path, &headers, "stages")?);
    let Some(i) = rows.iter().position(|r| r[c_exp] == experiment) else {
        return Err(ConvertError {
            file,
            line: 0,
            field: "experiment".to_owned(),
            reason: format!("no experiment `{experiment}`"),
        });
    };
    let bad = |text: &str| ConvertError {
        file: file.clone(),
        line: i as u64 + 2,
        field: "stages".to_owned(),
        reason: format!("`{text}` is not RATErps x DURATIONs"),
    };
    let mut out = Vec::new();
    let mut start = 0.0;
    for stage in rows[i][c_stages].split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let duration = stage
            .split_once('x')
            .and_then(|(_, d)| d.trim().strip_suffix('s'))
            .and_then(|d| d.trim().parse::<f64>().ok())
            .filter(|d| d.is_finite() && *d > 0.0 && *d <= crate::workload::types::MAX_TIME_S)
            .ok_or_else(|| bad(stage))?;
        out.push((start, start + duration));
        start += duration;
    }
    Ok(out)
}

/// One experiment of `blis-vllm-h100` (`experiments.csv` + `requests/<name>.csv`).
///
/// Follows the data's README: output length is the profile's `output_len`
/// (the recorded counts are unreliable), failed requests (`has_error`) are
/// skipped, and prompts come from inference-perf's pool (see [`prompt_pool`]),
/// each opening with its group's shared system prompt as token ids.
pub fn blis_vllm_h100(data: &Path, experiment: &str) -> Result<Converted, ConvertError> {
    let exp_path = data.join("experiments.csv");
    let exp_file = exp_path.display().to_string();
    let (headers, rows) = read_csv(&exp_path)?;
    let col = |name: &str| headers.iter().position(|h| h == name);
    let found = col("experiment").and_then(|c| rows.iter().position(|r| r[c] == experiment));
    let Some(row) = found.map(|i| &rows[i]) else {
        let names: Vec<&str> =
            col("experiment").map(|c| rows.iter().map(|r| r[c].as_str()).collect()).unwrap_or_default();
        return Err(ConvertError {
            file: exp_file,
            line: 0,
            field: "experiment".to_owned(),
            reason: format!("no experiment `{experiment}`; the file has {}", names.join(", ")),
        });
    };
    let get = |name: &str| -> Result<String, ConvertError> {
        col(name).map(|c| row[c].clone()).ok_or_else(|| ConvertError {
            file: exp_file.clone(),
            line: 1,
            field: name.to_owned(),
            reason: "missing column".to_owned(),
        })
    };
    // The experiment's line (the header is line 1; rows hold no newlines).
    let row_line = found.map_or(0, |i| i as u64 + 2);
    let number = |name: &str| -> Result<u64, ConvertError> {
        let v = get(name)?;
        v.trim().parse().map_err(|_| ConvertError {
            file: exp_file.clone(),
            line: row_line,
            field: name.to_owned(),
            reason: format!("`{v}` is not a count"),
        })
    };
    // An engine count as the scenario reader takes it (`u32`, ≥ 1): a value
    // `run` would refuse is refused here, before anything is written.
    let engine = |name: &str| -> Result<u32, ConvertError> {
        let v = number(name)?;
        u32::try_from(v).ok().filter(|&n| n >= 1).ok_or_else(|| ConvertError {
            file: exp_file.clone(),
            line: row_line,
            field: name.to_owned(),
            reason: format!("{v} is not an engine count (1 to {})", u32::MAX),
        })
    };
    let bounded = |name: &str| -> Result<u64, ConvertError> {
        let v = number(name)?;
        count_in(v as f64, u64::from(MAX_TOKENS)).map_err(|reason| ConvertError {
            file: exp_file.clone(),
            line: row_line,
            field: name.to_owned(),
            reason,
        })
    };
    let output_len = bounded("output_len")? as u32;
    if output_len == 0 {
        return Err(ConvertError {
            file: exp_file,
            line: 0,
            field: "output_len".to_owned(),
            reason: "must be at least 1 (an llm call generates a token)".to_owned(),
        });
    }
    let system_len = bounded("system_prompt_len")? as usize;
    let (groups, prompts) = match prompt_pool(&data.join("aggregates").join(experiment).join("results_config.yaml"))? {
        Some((groups, per_group)) => (groups, Some(groups * per_group)),
        None => (number("num_unique_system_prompts")?.max(1), None),
    };
    let req_path = data.join("requests").join(format!("{experiment}.csv"));
    let req_file = req_path.display().to_string();
    let (rh, rrows) = read_csv(&req_path)?;
    let rcol = |name: &str| column(&req_path, &rh, name);
    let (c_index, c_arrival, c_input, c_error, c_ttft, c_e2e) = (
        rcol("index")?,
        rcol("arrival_time_us")?,
        rcol("input_tokens")?,
        rcol("has_error")?,
        rcol("ttft_s")?,
        rcol("e2e_s")?,
    );
    let number_at = |r: &[String], i: usize, c: usize, name: &str| -> Result<f64, ConvertError> {
        let at = |reason: String| ConvertError {
            file: req_file.clone(),
            line: i as u64 + 2,
            field: name.to_owned(),
            reason,
        };
        let v = r[c].trim().parse::<f64>().map_err(|_| at(format!("`{}` is not a number", r[c])))?;
        // Counts must be whole and bounded (they size token-id vectors);
        // times must fit the clock (µs for the arrival).
        match name {
            "index" => count_in(v, u64::MAX >> 11).map(|n| n as f64),
            "input_tokens" => count_in(v, u64::from(MAX_TOKENS)).map(|n| n as f64),
            "arrival_time_us" => seconds_in(v / 1e6).map(|_| v),
            _ => seconds_in(v),
        }
        .map_err(at)
    };
    // Failed requests (the client's timeout) record no input length; a pooled
    // prompt's length is known from any request that sent it and succeeded.
    let mut pool_lengths = std::collections::BTreeMap::new();
    let mut failed_e2e = f64::INFINITY;
    for (i, r) in rrows.iter().enumerate() {
        if r[c_error].trim() == "1" {
            failed_e2e = failed_e2e.min(number_at(r, i, c_e2e, "e2e_s").unwrap_or(f64::INFINITY));
        } else if let Some(p) = prompts {
            let index = number_at(r, i, c_index, "index")? as u64;
            pool_lengths.entry(index % p).or_insert(number_at(r, i, c_input, "input_tokens")? as usize);
        }
    }
    // The client gave up at this many whole seconds (aiohttp's 300 s for these runs).
    let client_timeout_s = failed_e2e.is_finite().then(|| failed_e2e.floor());
    let mut workload = Vec::new();
    let mut baseline = Vec::new();
    let (mut skipped, mut failed_replayed) = (0, 0);
    let line_of = |i: usize| i as u64 + 2;
    for (i, r) in rrows.iter().enumerate() {
        let f = |c: usize, name: &str| number_at(r, i, c, name);
        let index = f(c_index, "index")? as u64;
        let failed = r[c_error].trim() == "1";
        let input = if failed {
            match prompts.and_then(|p| pool_lengths.get(&(index % p))) {
                Some(&n) => n,
                None => {
                    skipped += 1;
                    continue;
                }
            }
        } else {
            f(c_input, "input_tokens")? as usize
        };
        let shared = system_len.min(input.saturating_sub(1));
        // inference-perf sends prompt `index % prompts` (system prompt of its
        // group, then its question); without the pool, every question is new.
        let (group, question) = match prompts {
            Some(p) => ((index % p) % groups, 1_000_000 + index % p),
            None => (index % groups, 1_000_000 + index),
        };
        let ids: Vec<u32> = token_ids(group, shared).chain(token_ids(question, input - shared)).collect();
        let arrival = f(c_arrival, "arrival_time_us")? / 1e6;
        workload.push((line_of(i), llm_request(RequestId::Int(index), arrival, ids.clone(), output_len, None)));
        if failed {
            failed_replayed += 1;
            continue;
        }
        let latencies = spread(f(c_ttft, "ttft_s")?, f(c_e2e, "e2e_s")?, output_len);
        baseline.push((line_of(i), llm_request(RequestId::Int(index), arrival, ids, output_len, Some(latencies))));
    }
    let workload = in_arrival_order(workload, &req_file)?;
    let baseline = in_arrival_order(baseline, &req_file)?;
    let model = get("model")?;
    let scenario_yaml = format!(
        "# {experiment}: real vLLM 0.15.1 run on H100 SXM (../shared/data/blis-vllm-h100), converted by\n\
         # `blis-sweep convert blis-vllm-h100`. num_gpu_blocks is the count vLLM logged.\n\
         name: {experiment}\nmodel: {model}\nhardware: H100\ntp: {tp}\ndtype: fp16\nengine:\n  max_num_seqs: {seqs}\n  \
         max_num_batched_tokens: {mbt}\n  max_model_len: {mml}\n  block_size: {bs}\n  gpu_memory_utilization: 0.9\n  \
         num_gpu_blocks: {blocks}\n  enable_prefix_caching: true\n  vllm_version: 0.15.1\n",
        tp = engine("tensor_parallelism")?,
        seqs = engine("max_num_seqs")?,
        mbt = engine("max_num_batched_tokens")?,
        mml = engine("max_model_len")?,
        bs = engine("block_size")?,
        blocks = engine("kv_blocks_total_gpu")?,
    );
    let notes = vec![
        match client_timeout_s {
            Some(t) => format!(
                "{failed_replayed} failed requests (has_error: the client gave up after {t} s) replayed with their pooled \
                 prompt's length and a {t} s client timeout, but not compared; {skipped} with no known length skipped"
            ),
            None => "no failed requests".to_owned(),
        },
        format!("output length = the profile's output_len ({output_len}); the recorded counts are unreliable"),
        match prompts {
            Some(p) => format!(
                "request i sends prompt i mod {p} (inference-perf's pool of {groups} groups x {} prompts, results_config.yaml), \
                 so prompts repeat and hit the prefix cache; prompt p opens with group p mod {groups}'s {system_len}-token \
                 system prompt (the data does not say which group)",
                p / groups
            ),
            None => format!(
                "no results_config.yaml: {groups} shared system prompts of {system_len} tokens assigned round-robin, every question new"
            ),
        },
        "the baseline spreads E2E - TTFT evenly over the output tokens after the first (the data has no per-token times)".to_owned(),
    ];
    Ok(Converted { workload, baseline, scenario_yaml, notes, client_timeout_s })
}

/// inference-perf's prompt pool of a `shared_prefix` run: (`num_groups`,
/// `num_prompts_per_group`) from the config it resolved, `None` if the file
/// is absent. The generator builds that many prompts once and sends request
/// i the prompt i mod (groups × per group): the measured `input_tokens`
/// repeat with exactly this period.
fn prompt_pool(path: &Path) -> Result<Option<(u64, u64)>, ConvertError> {
    let file = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ConvertError { file, line: 0, field: "file".to_owned(), reason: e.to_string() }),
    };
    let v: serde_json::Value = crate::yaml::parse(&text).map_err(|e| ConvertError {
        file: file.clone(),
        line: e.line,
        field: "yaml".to_owned(),
        reason: e.message,
    })?;
    let count = |key: &str| {
        // At most 2^20 each: the pool's size (their product) keys prompts.
        v["data"]["shared_prefix"][key].as_u64().filter(|&n| n > 0 && n <= 1 << 20).ok_or_else(|| ConvertError {
            file: crate::yaml::locate(path, &text, &format!("data.shared_prefix.{key}")),
            line: 0,
            field: format!("data.shared_prefix.{key}"),
            reason: "missing, or not a count from 1 to 1048576".to_owned(),
        })
    };
    Ok(Some((count("num_groups")?, count("num_prompts_per_group")?)))
}
