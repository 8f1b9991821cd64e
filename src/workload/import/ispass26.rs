//! LLMServingSim 2.0's ISPASS'26 artifact (`../shared/data/llmservingsim-ispass26`):
//! real vLLM on one node of four H100 SXM, Llama-3.1-70B and Mixtral-8x7B
//! (base models), each replaying a 300-request ShareGPT stream at ~10 req/s.
//! Known only by aggregates: mean TTFT, mean TPOT and output throughput per
//! deployment (`reference/figure_8/<id>_latency.tsv`, the `vLLM` row; the
//! `TokenSim`, `Vidur`, `APEX` rows are the authors' runs of those
//! simulators) and per-second output-token curves
//! (`reference/figure_5_H100/<id>_throughput.tsv`).
//!
//! A deployment (`config/<id>_config.json`, LLMServingSim's description of
//! the real setup) becomes a scenario: every instance is TP `npu_num /
//! npu_group` (the simulator's `npus_per_group`), one pipeline stage; several
//! instances are replicas behind a round-robin router (what LLMServingSim
//! simulates; how the real MD run split requests is not recorded). An
//! instance with a `pd_type` (PDD: a prefill and a decode instance) is
//! refused: prefill/decode disaggregation is not modelled. Its workload is
//! the artifact's `workloads/` file for its model (`evaluation/figure_5.sh`
//! and `figure_8.sh`: `DENSE_DATASET` for Llama, the MoE dataset for
//! Mixtral), read by [`super::llmservingsim_dataset`]: real token ids, output
//! pinned to `output_toks`.
//!
//! Engine settings are not recorded for the H100 runs; the artifact's other
//! real-vLLM logs (RTX A6000, vLLM 0.11.1 and 0.13.0rc2) ran
//! `enforce_eager: True`, block size 16, chunked prefill, and (figure 7)
//! `max_model_len` 2,048, `max_num_batched_tokens` 2,048, `max_num_seqs`
//! 128. The replay assumes the same (the data's README infers it too), with
//! vLLM's 0.9 memory utilisation, no async scheduling (off by default before
//! 0.14) and the scheduler of 0.15.1, the oldest release modelled. Prefix
//! caching is on only where the deployment's id says so (`SD+PC`); the
//! artifact names the plain runs apart from it. Whether Mixtral ran with
//! expert parallelism is not recorded: it is replayed as TP4 (experts split
//! by TP, as vLLM does without `--enable-expert-parallel`).

use std::path::Path;

use serde_json::Value;

use super::common::ConvertError;
use crate::workload::types::Request;

/// Mean TTFT, mean TPOT (ms) and output throughput (tokens/s) of one run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Means {
    /// Output tokens per second over the run.
    pub throughput_tok_s: f64,
    /// Mean time to first token, ms.
    pub ttft_ms: f64,
    /// Mean over requests of (last − first token) / (output − 1), ms.
    pub tpot_ms: f64,
}

/// One deployment, ready to replay.
#[derive(Debug, Clone)]
pub struct IspassRun {
    /// The deployment, as a scenario file.
    pub scenario_yaml: String,
    /// The requests it was sent.
    pub workload: Vec<Request>,
    /// vLLM's measured means (figure 8), where the artifact has them.
    pub measured: Option<Means>,
    /// Other simulators' means for the same deployment (figure 8's
    /// `TokenSim`, `Vidur`, `APEX` rows), where given (not `X`).
    pub simulators: Vec<(String, Means)>,
    /// Measured output tokens in each second (figure 5; entry k − 1 is
    /// second k, the file's row 0 is always 0 and dropped), where the
    /// artifact has the curve.
    pub curve: Option<Vec<f64>>,
    /// What the replay assumed, beyond the module docs.
    pub notes: Vec<String>,
}

fn err(file: &Path, line: u64, field: &str, reason: impl Into<String>) -> ConvertError {
    ConvertError { file: file.display().to_string(), line, field: field.to_owned(), reason: reason.into() }
}

/// The deployments in `data` (`config/<id>_config.json`), sorted.
pub fn list(data: &Path) -> Result<Vec<String>, ConvertError> {
    let dir = data.join("config");
    let entries = std::fs::read_dir(&dir).map_err(|e| err(&dir, 0, "folder", e.to_string()))?;
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix("_config.json").map(str::to_owned)).collect();
    names.sort();
    Ok(names)
}

/// The artifact's workload file for a catalog model (`evaluation/figure_5.sh`,
/// `figure_8.sh` at f4ab208).
fn workload_file(model: &str) -> Option<&'static str> {
    match model {
        "Llama-3.1-70B" => Some("sharegpt_req300_rate10_llama.jsonl"),
        "Mixtral-8x7B" => Some("sharegpt_req300_rate10_mixtral.jsonl"),
        _ => None,
    }
}

/// Reads deployment `name`.
pub fn load(data: &Path, name: &str) -> Result<IspassRun, ConvertError> {
    let config = data.join("config").join(format!("{name}_config.json"));
    let text = std::fs::read_to_string(&config).map_err(|e| err(&config, 0, "file", e.to_string()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| err(&config, e.line() as u64, "json", e.to_string()))?;
    let nodes = v["nodes"].as_array().filter(|n| !n.is_empty()).ok_or_else(|| err(&config, 0, "nodes", "missing"))?;
    if nodes.len() != 1 {
        return Err(err(&config, 0, "nodes", format!("{} nodes; one node's instances are modelled", nodes.len())));
    }
    let instances = nodes[0]["instances"]
        .as_array()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| err(&config, 0, "instances", "missing"))?;
    // Each instance's role: none (aggregated), `prefill` or `decode`.
    let mut roles = [0usize; 3];
    for i in instances {
        match &i["pd_type"] {
            Value::Null => roles[0] += 1,
            Value::String(r) if r == "prefill" => roles[1] += 1,
            Value::String(r) if r == "decode" => roles[2] += 1,
            other => {
                return Err(err(&config, 0, "pd_type", format!("{other}: use null, \"prefill\" or \"decode\"")));
            }
        }
    }
    let disaggregated = roles[1] + roles[2] > 0;
    if disaggregated && (roles[0] > 0 || roles[1] == 0 || roles[2] == 0) {
        return Err(err(
            &config,
            0,
            "pd_type",
            "a disaggregated deployment needs prefill and decode instances and no aggregated one",
        ));
    }
    let field = |i: &Value, key: &str| -> Result<String, ConvertError> {
        match &i[key] {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            _ => Err(err(&config, 0, &format!("instances.{key}"), "missing")),
        }
    };
    let first = &instances[0];
    for i in instances {
        for key in ["model_name", "hardware", "npu_num", "npu_group"] {
            if field(i, key)? != field(first, key)? {
                return Err(err(
                    &config,
                    0,
                    &format!("instances.{key}"),
                    "instances differ; only identical replicas are modelled",
                ));
            }
        }
    }
    let model_name = field(first, "model_name")?;
    let model = crate::arch::catalog::model_config(&model_name)
        .map(|(id, _)| id)
        .ok_or_else(|| err(&config, 0, "instances.model_name", format!("{model_name} is not in the catalog")))?;
    let wl = workload_file(model).ok_or_else(|| {
        err(&config, 0, "instances.model_name", format!("the artifact has no workload for {model_name}"))
    })?;
    let hardware = field(first, "hardware")?;
    if hardware != "H100" {
        return Err(err(&config, 0, "instances.hardware", format!("{hardware}: only the H100 runs have measurements")));
    }
    let count = |key: &str| {
        first[key]
            .as_u64()
            .filter(|&n| n >= 1)
            .ok_or_else(|| err(&config, 0, &format!("instances.{key}"), "not a count"))
    };
    let (npus, groups) = (count("npu_num")?, count("npu_group")?);
    if groups != 1 || !npus.is_power_of_two() {
        return Err(err(
            &config,
            0,
            "instances.npu_group",
            format!("{npus} NPUs in {groups} groups: only one TP group of 1, 2, 4 or 8 GPUs an instance is modelled"),
        ));
    }
    let replicas = instances.len();
    let prefix_caching = name.contains("+PC");
    let mut notes = vec![
        "vLLM version and engine flags unrecorded: enforce_eager, 2,048-token budget and context, 128 sequences, no async scheduling assumed (the artifact's A6000 logs)".to_owned(),
    ];
    if disaggregated {
        notes.push(format!(
            "{} prefill and {} decode instance(s) on one node, KV over NVLink (the catalog's 450 GB/s a GPU each way): the run's KV connector is not recorded",
            roles[1], roles[2]
        ));
    } else if replicas > 1 {
        notes.push(format!(
            "{replicas} replicas behind a round-robin router: how the real run split requests is not recorded"
        ));
    }
    if model == "Mixtral-8x7B" {
        notes.push("expert parallelism unrecorded: replayed as TP4 (experts split by TP)".to_owned());
    }
    let replicas_yaml = if disaggregated {
        format!(
            "pools:\n  prefill: {{role: prefill, replicas: {}}}\n  decode: {{role: decode, replicas: {}}}\nkv_transfer: {{interconnect: nvlink}}\n",
            roles[1], roles[2]
        )
    } else if replicas > 1 {
        format!("replicas: {replicas}\nrouter: {{policy: round-robin}}\n")
    } else {
        String::new()
    };
    let scenario_yaml = format!(
        "# {name}: real vLLM on {npus}x H100 per instance (LLMServingSim 2.0, ISPASS'26 artifact)\n\
         name: {name}\nmodel: {model}\nhardware: H100\ntp: {npus}\ndtype: bf16\n{replicas_yaml}engine:\n  \
         max_num_seqs: 128\n  max_num_batched_tokens: 2048\n  max_model_len: 2048\n  block_size: 16\n  \
         gpu_memory_utilization: 0.9\n  enable_prefix_caching: {prefix_caching}\n  async_scheduling: false\n  \
         enforce_eager: true\n  vllm_version: 0.15.1\n",
    );
    let wl_path = data.join("workloads").join(wl);
    let workload = super::llmservingsim_dataset::open(&wl_path)
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ConvertError { file: e.file, line: e.line, field: e.column, reason: e.reason })?;
    let (measured, simulators) = match figure_8(&data.join("reference/figure_8").join(format!("{name}_latency.tsv")))? {
        Some((vllm, others)) => (Some(vllm), others),
        None => (None, Vec::new()),
    };
    let curve = figure_5(&data.join("reference/figure_5_H100").join(format!("{name}_throughput.tsv")))?;
    if measured.is_none() && curve.is_none() {
        return Err(err(&config, 0, "reference", format!("{name} has neither measured means nor a throughput curve")));
    }
    Ok(IspassRun { scenario_yaml, workload, measured, simulators, curve, notes })
}

/// A table's rows: (line, cells).
type Rows = Vec<(u64, Vec<String>)>;

/// Named means: other simulators' rows.
type Named = Vec<(String, Means)>;

/// Reads a tab-separated table with the header `columns`; `None` when the
/// file does not exist.
fn tsv(path: &Path, columns: &[&str]) -> Result<Option<Rows>, ConvertError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(path, 0, "file", e.to_string())),
    };
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split('\t').map(str::trim).collect();
    if header != columns {
        return Err(err(path, 1, "header", format!("expected `{}`", columns.join("\\t"))));
    }
    let mut rows = Vec::new();
    for (i, l) in lines.enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let cells: Vec<String> = l.split('\t').map(|c| c.trim().to_owned()).collect();
        if cells.len() != columns.len() {
            return Err(err(path, i as u64 + 2, "row", format!("{} cells, {} columns", cells.len(), columns.len())));
        }
        rows.push((i as u64 + 2, cells));
    }
    Ok(Some(rows))
}

/// Figure 8's means: vLLM's, and the other simulators' (rows of `X` left out).
fn figure_8(path: &Path) -> Result<Option<(Means, Named)>, ConvertError> {
    const COLUMNS: [&str; 4] = ["framework", "throughput_tok_s", "mean_ttft_ms", "mean_tpot_ms"];
    let Some(rows) = tsv(path, &COLUMNS)? else { return Ok(None) };
    let (mut vllm, mut others) = (None, Vec::new());
    for (line, cells) in rows {
        if cells[1..].iter().all(|c| c == "X") {
            continue;
        }
        let num = |k: usize| {
            cells[k]
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| err(path, line, COLUMNS[k], format!("`{}` is not a positive number", cells[k])))
        };
        let means = Means { throughput_tok_s: num(1)?, ttft_ms: num(2)?, tpot_ms: num(3)? };
        if cells[0] == "vLLM" {
            vllm = Some(means);
        } else {
            others.push((cells[0].clone(), means));
        }
    }
    let vllm = vllm.ok_or_else(|| err(path, 0, "framework", "no `vLLM` row"))?;
    Ok(Some((vllm, others)))
}

/// Figure 5's per-second output tokens, second 1 onwards.
fn figure_5(path: &Path) -> Result<Option<Vec<f64>>, ConvertError> {
    const COLUMNS: [&str; 2] = ["time_s", "throughput"];
    let Some(rows) = tsv(path, &COLUMNS)? else { return Ok(None) };
    let mut curve = Vec::new();
    for (k, (line, cells)) in rows.into_iter().enumerate() {
        if cells[0].parse::<f64>().ok() != Some(k as f64) {
            return Err(err(path, line, "time_s", format!("`{}`: expected {k} (one row a second from 0)", cells[0])));
        }
        let tokens = cells[1]
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| err(path, line, "throughput", format!("`{}` is not a token count", cells[1])))?;
        if k > 0 {
            curve.push(tokens);
        }
    }
    Ok(Some(curve))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder `name` under the temp dir holding `files`.
    fn folder(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("blis-ispass26-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    fn config(instances: &str) -> String {
        format!(r#"{{"num_nodes": 1, "nodes": [{{"num_instances": 1, "instances": [{instances}]}}]}}"#)
    }

    const LLAMA: &str = r#"{"model_name": "meta-llama/Llama-3.1-70B", "hardware": "H100", "npu_num": 4, "npu_group": 1, "pd_type": null}"#;
    const WORKLOAD: &str =
        "{\"input_toks\": 2, \"output_toks\": 3, \"arrival_time_ns\": 1000, \"input_tok_ids\": [5, 6]}\n";
    const LATENCY: &str = "framework\tthroughput_tok_s\tmean_ttft_ms\tmean_tpot_ms\nTokenSim\tX\tX\tX\nAPEX\t1899.38\t37.454\t22.42\nvLLM\t1858.47\t50.33\t22.665\n";

    #[test]
    fn a_deployment_becomes_replicas_of_tp4_with_its_means_and_curve() {
        let two = format!("{LLAMA}, {LLAMA}");
        let dir = folder(
            "md",
            &[
                ("config/MD_config.json", &config(&two)),
                ("workloads/sharegpt_req300_rate10_llama.jsonl", WORKLOAD),
                ("reference/figure_8/MD_latency.tsv", LATENCY),
                ("reference/figure_5_H100/MD_throughput.tsv", "time_s\tthroughput\n0\t0\n1\t133\n2\t528.5\n"),
            ],
        );
        assert_eq!(list(dir.as_path()).unwrap(), vec!["MD"]);
        let run = load(dir.as_path(), "MD").unwrap();
        assert!(run.scenario_yaml.contains("model: Llama-3.1-70B\nhardware: H100\ntp: 4\n"), "{}", run.scenario_yaml);
        assert!(run.scenario_yaml.contains("replicas: 2\nrouter: {policy: round-robin}\n"));
        assert!(run.scenario_yaml.contains("enable_prefix_caching: false"));
        assert!(run.scenario_yaml.contains("enforce_eager: true"));
        assert_eq!(run.measured, Some(Means { throughput_tok_s: 1858.47, ttft_ms: 50.33, tpot_ms: 22.665 }));
        assert_eq!(run.simulators.len(), 1);
        assert_eq!(run.simulators[0].0, "APEX");
        assert_eq!(run.curve, Some(vec![133.0, 528.5]));
        assert_eq!(run.workload.len(), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn half_disaggregated_deployments_and_bad_tables_are_refused_naming_the_field() {
        let prefill = LLAMA.replace("\"pd_type\": null", "\"pd_type\": \"prefill\"");
        let decode = LLAMA.replace("\"pd_type\": null", "\"pd_type\": \"decode\"");
        let dir = folder(
            "pdd",
            &[
                ("config/PDD_config.json", &config(&prefill)),
                ("config/PD_config.json", &config(&format!("{prefill}, {decode}"))),
                ("reference/figure_5_H100/PD_throughput.tsv", "time_s\tthroughput\n0\t0\n1\t133\n"),
                ("config/SD_config.json", &config(LLAMA)),
                ("config/SM_config.json", &config(LLAMA)),
                ("workloads/sharegpt_req300_rate10_llama.jsonl", WORKLOAD),
                (
                    "reference/figure_8/SD_latency.tsv",
                    "framework\tthroughput_tok_s\tmean_ttft_ms\tmean_tpot_ms\nvLLM\tfast\t1\t2\n",
                ),
            ],
        );
        let e = load(dir.as_path(), "PDD").unwrap_err();
        assert_eq!(e.field, "pd_type");
        assert!(e.reason.contains("needs prefill and decode instances"), "{e}");
        let pd = load(dir.as_path(), "PD").unwrap_or_else(|e| panic!("{e}"));
        assert!(
            pd.scenario_yaml
                .contains("pools:\n  prefill: {role: prefill, replicas: 1}\n  decode: {role: decode, replicas: 1}\n"),
            "{}",
            pd.scenario_yaml
        );
        let e = load(dir.as_path(), "SD").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "throughput_tok_s"), "{e}");
        assert!(e.to_string().contains("SD_latency.tsv:2: throughput_tok_s: "), "{e}");
        // No means and no curve: nothing to compare.
        assert_eq!(load(dir.as_path(), "SM").unwrap_err().field, "reference");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
