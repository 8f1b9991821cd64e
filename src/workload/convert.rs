//! Converters that bring real vLLM measurements into the simulator's formats:
//! a workload JSONL (what was sent), a baseline result JSONL (what the real
//! server measured, in the result format) and a scenario (how it was served).
//!
//! Where the data has only TTFT and E2E per request, the baseline spreads
//! E2E − TTFT evenly over the remaining tokens: per-request means (and so mean
//! ITL) are exact, per-token jitter is not represented.

use std::collections::HashMap;
use std::path::Path;

use super::types::{LlmCall, NodeKind, NodeResult, Request, RequestId, SubRequest};

/// A converted run.
#[derive(Debug, Clone)]
pub struct Converted {
    /// What was sent.
    pub workload: Vec<Request>,
    /// The same requests with the measured latencies.
    pub baseline: Vec<Request>,
    /// The deployment, as a scenario file.
    pub scenario_yaml: String,
    /// What the conversion assumed (printed for the user).
    pub notes: Vec<String>,
    /// The real client's request timeout, s, where requests hit it: replay
    /// with it (`run --timeout`) for the same load.
    pub client_timeout_s: Option<f64>,
}

impl Converted {
    /// The baseline as result JSONL (the format `calibrate --real` reads):
    /// each request's measured latencies, from its send.
    pub fn baseline_jsonl(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for r in &self.baseline {
            let result = r.sub_requests[0].result.as_ref().expect("baselines carry results");
            let times: Vec<u64> = result
                .token_latency
                .iter()
                .scan(0.0f64, |t, &l| {
                    *t += l;
                    Some((*t * 1e6).round() as u64)
                })
                .collect();
            super::writer::write_result_row(&mut out, r, &mut |_| {
                Some(super::writer::NodeTokens { start_us: 0, token_times_us: &times, replica: None, error: None })
            });
        }
        out
    }
}

/// Input data that cannot be converted. Fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {field}: {reason}", if *line == 0 { String::new() } else { format!(":{line}") })]
pub struct ConvertError {
    /// The file.
    pub file: String,
    /// 1-based line (0 when not about one line).
    pub line: u64,
    /// The column or key.
    pub field: String,
    /// Why.
    pub reason: String,
}

/// A folder of real runs that [`convert`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// `../shared/data/blis-vllm-h100`: see [`blis_vllm_h100`].
    BlisVllmH100,
    /// `../shared/data/llmservingsim-vllm-bench`: see [`llmservingsim`].
    Llmservingsim,
}

impl Source {
    /// The name plans and the command line use.
    pub fn name(self) -> &'static str {
        match self {
            Source::BlisVllmH100 => "blis-vllm-h100",
            Source::Llmservingsim => "llmservingsim",
        }
    }
}

/// The runs in `data`, sorted: the request files of a blis-vllm-h100
/// folder, the run folders of an llmservingsim one.
pub fn list(source: Source, data: &Path) -> Result<Vec<String>, ConvertError> {
    let (dir, suffix) = match source {
        Source::BlisVllmH100 => (data.join("requests"), ".csv"),
        Source::Llmservingsim => (data.join("runs"), ""),
    };
    let entries = std::fs::read_dir(&dir).map_err(|e| ConvertError {
        file: dir.display().to_string(),
        line: 0,
        field: "folder".to_owned(),
        reason: e.to_string(),
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter_map(|n| if suffix.is_empty() { Some(n) } else { n.strip_suffix(suffix).map(str::to_owned) })
        .collect();
    names.sort();
    Ok(names)
}

/// Converts run `name` of `data`.
pub fn convert(source: Source, data: &Path, name: &str) -> Result<Converted, ConvertError> {
    match source {
        Source::BlisVllmH100 => blis_vllm_h100(data, name),
        Source::Llmservingsim => llmservingsim(data, name),
    }
}

/// BLIS's published prediction for one metric of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// `e2e_mean`, `ttft_p99`, … as the source names them.
    pub metric: String,
    /// What BLIS's evaluation measured, ms.
    pub actual_ms: f64,
    /// What BLIS (`blis-trained-physics`) predicted, ms.
    pub predicted_ms: f64,
}

/// BLIS's whole-run predictions for a blis-vllm-h100 experiment, from
/// `aggregates_eval38.csv` (column `pred_ms_blis-trained-physics`, rows whose
/// `same_run_as_requests_file` is this experiment's request file and
/// `stage_index` −1); empty where BLIS published none.
pub fn blis_published(data: &Path, experiment: &str) -> Result<Vec<Published>, ConvertError> {
    let path = data.join("aggregates_eval38.csv");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let file = path.display().to_string();
    let (headers, rows) = read_csv(&path)?;
    let col = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| ConvertError {
            file: file.clone(),
            line: 1,
            field: name.to_owned(),
            reason: "missing column".to_owned(),
        })
    };
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
        if r[c_run] != wanted || r[c_stage].trim() != "-1" || r[c_pred].trim().is_empty() {
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
        });
    }
    Ok(out)
}

/// Tokens one converted request may carry (4 Mi: its JSONL line stays under
/// the reader's 32 MiB limit); real prompts are far shorter.
const MAX_TOKENS: u64 = 1 << 22;

/// Sorts `rows` (line, request) by arrival time, file order among equal
/// times, as the workload format requires; a repeated id is an error naming
/// both lines.
fn in_arrival_order(mut rows: Vec<(u64, Request)>, file: &str) -> Result<Vec<Request>, ConvertError> {
    let mut seen: HashMap<&RequestId, u64> = HashMap::with_capacity(rows.len());
    for (line, r) in &rows {
        if let Some(first) = seen.insert(&r.request_id, *line) {
            return Err(ConvertError {
                file: file.to_owned(),
                line: *line,
                field: "request_id".to_owned(),
                reason: format!("{} repeats the id of line {first}", r.request_id),
            });
        }
    }
    rows.sort_by(|a, b| a.1.arrival_time.total_cmp(&b.1.arrival_time));
    Ok(rows.into_iter().map(|(_, r)| r).collect())
}

/// `v` as a count of at most `max`, or why not.
fn count_in(v: f64, max: u64) -> Result<u64, String> {
    if !(v.is_finite() && v >= 0.0 && v.fract() == 0.0) {
        return Err(format!("{v} is not a count"));
    }
    if v > max as f64 {
        return Err(format!("{v} exceeds {max}"));
    }
    Ok(v as u64)
}

/// `v` seconds, checked to fit the simulator's clock.
fn seconds_in(v: f64) -> Result<f64, String> {
    super::types::checked_seconds_to_us(v).map(|_| v)
}

/// Deterministic token ids for a token stream identified by `stream`: the
/// same stream always gives the same ids, different streams (almost surely)
/// different ones. Ids are in `0..32000`.
fn token_ids(stream: u64, n: usize) -> impl Iterator<Item = u32> {
    (0..n as u64).map(move |k| {
        let mut z = stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k.wrapping_add(0x6A09_E667_F3BC_C909);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % 32_000) as u32
    })
}

fn llm_request(
    id: RequestId,
    arrival_s: f64,
    input_ids: Vec<u32>,
    output_tokens: u32,
    latencies: Option<Vec<f64>>,
) -> Request {
    Request {
        request_id: id,
        arrival_time: (arrival_s * 1e6).round() / 1e6,
        initial: vec![0],
        sub_requests: vec![SubRequest {
            next: vec![],
            interval: 0.0,
            kind: NodeKind::Llm(LlmCall {
                input_tokens: input_ids.len() as u32,
                output_tokens,
                input_token_ids: Some(input_ids),
                output_token_ids: None,
                seeded: None,
                model: None,
                prompt_blocks: None,
            }),
            result: latencies.map(|token_latency| NodeResult { token_latency, error: None, replica: None }),
        }],
    }
}

/// TTFT, then E2E − TTFT spread evenly over the other tokens, seconds.
fn spread(ttft_s: f64, e2e_s: f64, output_tokens: u32) -> Vec<f64> {
    let mut v = vec![ttft_s.max(0.0)];
    if output_tokens > 1 {
        let gap = ((e2e_s - ttft_s) / f64::from(output_tokens - 1)).max(0.0);
        v.extend(std::iter::repeat_n(gap, output_tokens as usize - 1));
    }
    v
}

fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<Vec<String>>), ConvertError> {
    let file = path.display().to_string();
    let err = |line: u64, reason: String| ConvertError { file: file.clone(), line, field: "csv".to_owned(), reason };
    let mut reader = csv::Reader::from_path(path).map_err(|e| err(0, e.to_string()))?;
    let headers: Vec<String> = reader.headers().map_err(|e| err(1, e.to_string()))?.iter().map(str::to_owned).collect();
    let mut rows = Vec::new();
    for (i, r) in reader.records().enumerate() {
        rows.push(r.map_err(|e| err(i as u64 + 2, e.to_string()))?.iter().map(str::to_owned).collect());
    }
    Ok((headers, rows))
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
    let Some(row) = col("experiment").and_then(|c| rows.iter().find(|r| r[c] == experiment)) else {
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
    let number = |name: &str| -> Result<u64, ConvertError> {
        let v = get(name)?;
        v.trim().parse().map_err(|_| ConvertError {
            file: exp_file.clone(),
            line: 0,
            field: name.to_owned(),
            reason: format!("`{v}` is not a count"),
        })
    };
    let bounded = |name: &str| -> Result<u64, ConvertError> {
        let v = number(name)?;
        count_in(v as f64, MAX_TOKENS).map_err(|reason| ConvertError {
            file: exp_file.clone(),
            line: 0,
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
    let rcol = |name: &str| {
        rh.iter().position(|h| h == name).ok_or_else(|| ConvertError {
            file: req_file.clone(),
            line: 1,
            field: name.to_owned(),
            reason: "missing column".to_owned(),
        })
    };
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
            "input_tokens" => count_in(v, MAX_TOKENS).map(|n| n as f64),
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
        tp = number("tensor_parallelism")?,
        seqs = number("max_num_seqs")?,
        mbt = number("max_num_batched_tokens")?,
        mml = number("max_model_len")?,
        bs = number("block_size")?,
        blocks = number("kv_blocks_total_gpu")?,
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
            count_in(n as f64, MAX_TOKENS).map_err(|reason| bad(&wl_file, lineno, k, reason))
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
        seqs = count("max_num_seqs").unwrap_or(256),
        mbt = count("max_num_batched_tokens").unwrap_or(2048),
        blocks = blocks.map_or_else(String::new, |b| format!("  num_gpu_blocks: {b}\n")),
    );
    Ok(Converted { workload, baseline, scenario_yaml, notes, client_timeout_s: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreading_keeps_ttft_and_e2e() {
        let v = spread(0.1, 0.5, 5);
        assert_eq!(v.len(), 5);
        assert_eq!(v[0], 0.1);
        assert!((v.iter().sum::<f64>() - 0.5).abs() < 1e-12);
        assert_eq!(spread(0.2, 0.2, 1), vec![0.2]);
    }

    #[test]
    fn token_ids_are_deterministic_per_stream() {
        let a: Vec<u32> = token_ids(3, 8).collect();
        assert_eq!(a, token_ids(3, 8).collect::<Vec<_>>());
        assert_ne!(a, token_ids(4, 8).collect::<Vec<_>>());
        assert!(a.iter().all(|&t| t < 32_000));
    }
}
