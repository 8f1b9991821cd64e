//! NVIDIA aiconfigurator's measured deployments
//! (`../shared/data/aiconfigurator-vllm-h100-h200/silicon_sample.csv`): one
//! row per benchmark run — a model served by vLLM on H100 or H200 SXM at a
//! TP degree, driven closed loop at a concurrency with fixed prompt and
//! output lengths of random tokens, and its measured mean TTFT and TPOT.
//! Only aggregated vLLM rows (`backend vllm`, `mode agg`) on H100/H200 for a
//! model in the catalog are replayed.
//!
//! The protocol as replayed (the rows give concurrency, `isl`, `osl`, not
//! the prompt count or the engine flags): `vllm bench serve` with a random
//! dataset, every request ready at once and at most `concurrency` in
//! flight, `10 × concurrency` prompts of `isl` distinct random tokens (no
//! prefix-cache hits; an MoE model's experts equally likely, `moe_routing:
//! balanced`), `osl` output tokens (`ignore_eos`), vLLM's serving
//! defaults otherwise — which, for a release before 0.14 (`backend_version`),
//! means no async scheduling: a step's CPU side is not hidden behind the
//! GPU. A row naming no release (the Llama-3.1-70B rows) runs with it,
//! vLLM's default since 0.14. TPOT (mean over requests of (E2E − TTFT) / (osl − 1))
//! is steady-state decode and barely depends on the prompt count; TTFT
//! depends on how the first wave of prefills queues, which the rows do not
//! say, so it is compared with that caveat.

use std::path::Path;

use super::blis_trainval::Aggregate;
use super::convert::{ConvertError, column, llm_request, read_csv, token_ids};
use crate::workload::types::{Request, RequestId};

/// The columns that say how an MoE model's experts and attention were laid
/// out over the GPUs.
const LAYOUT_COLUMNS: [&str; 3] = ["moe_tp_size", "moe_ep_size", "attention_dp_size"];

/// Prompts a run sends, per unit of concurrency (assumed; see the module docs).
const PROMPTS_PER_USER: u64 = 10;

/// One measured deployment, ready to replay.
#[derive(Debug, Clone)]
pub struct SiliconRun {
    /// The deployment, as a scenario file.
    pub scenario_yaml: String,
    /// The requests, all ready at 0.
    pub workload: Vec<Request>,
    /// Requests in flight at most.
    pub concurrency: u32,
    /// Measured mean TTFT and TPOT (whole run).
    pub aggregates: Vec<Aggregate>,
}

/// One row, as read.
struct Row {
    /// Its line in the file.
    line: usize,
    model: &'static str,
    gpu: &'static str,
    /// `fp8`, `fp8_block` or none (16-bit).
    fp8: Option<&'static str>,
    tp: u64,
    isl: u64,
    osl: u64,
    concurrency: u64,
    ttft_ms: f64,
    tpot_ms: f64,
    /// The vLLM release ran without async scheduling (before 0.14).
    sync_scheduling: bool,
}

fn rows(data: &Path) -> Result<Vec<Row>, ConvertError> {
    let path = data.join("silicon_sample.csv");
    let (headers, rows) = read_csv(&path)?;
    let file = path.display().to_string();
    // Row `i` is on line i + 2 (after the header).
    let err = |i: usize, field: &str, reason: String| ConvertError {
        file: file.clone(),
        line: i as u64 + 2,
        field: field.to_owned(),
        reason,
    };
    let col = |name: &str| column(&path, &headers, name);
    let c = [
        "silicon_data_source",
        "backend",
        "model_path",
        "system",
        "precision",
        "mode",
        "isl",
        "osl",
        "tp_size",
        "batch_size",
        "silicon_ttft_ms",
        "silicon_tpot_ms",
    ]
    .map(col);
    let [c_source, c_backend, c_model, c_system, c_precision, c_mode, c_isl, c_osl, c_tp, c_batch, c_ttft, c_tpot] = c;
    let (c_source, c_backend, c_model, c_system, c_precision, c_mode) =
        (c_source?, c_backend?, c_model?, c_system?, c_precision?, c_mode?);
    let (c_isl, c_osl, c_tp, c_batch, c_ttft, c_tpot) = (c_isl?, c_osl?, c_tp?, c_batch?, c_ttft?, c_tpot?);
    // Optional: a row without a release runs as vLLM's current defaults; a
    // file without the MoE layout columns has dense rows only.
    let c_version = col("backend_version").ok();
    let c_layout = LAYOUT_COLUMNS.map(|name| col(name).ok());
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let gpu = match r[c_system].as_str() {
            "h100_sxm" => "H100",
            "h200_sxm" => "H200",
            _ => continue,
        };
        if r[c_backend] != "vllm" || r[c_mode] != "agg" {
            continue;
        }
        let Some((model, config)) = crate::scenario::catalog::model_config(&r[c_model]) else { continue };
        let tp =
            r[c_tp].trim().parse::<u64>().map_err(|_| err(i, "tp_size", format!("`{}` is not a count", r[c_tp])))?;
        // An MoE model's experts sharded like its attention (moe_tp = tp, no
        // expert or attention data parallelism) is what a replay prices.
        let moe = crate::scenario::ModelArch::from_config_json(model, config).is_ok_and(|m| m.moe.is_some());
        let mut layout = [None; 3];
        for (slot, (c, field)) in layout.iter_mut().zip(c_layout.iter().zip(LAYOUT_COLUMNS)) {
            let Some(&c) = c.as_ref() else { continue };
            let cell = r[c].trim();
            if !cell.is_empty() {
                *slot = Some(cell.parse::<u64>().map_err(|_| err(i, field, format!("`{cell}` is not a count")))?);
            }
        }
        if moe
            && (layout[0].is_some_and(|t| t != tp)
                || layout[1].is_some_and(|e| e > 1)
                || layout[2].is_some_and(|a| a > 1))
        {
            continue;
        }
        let int = |c: usize, field: &str| {
            r[c].trim().parse::<u64>().map_err(|_| err(i, field, format!("`{}` is not a count", r[c])))
        };
        let num = |c: usize, field: &str| {
            r[c].trim().parse::<f64>().map_err(|_| err(i, field, format!("`{}` is not a number", r[c])))
        };
        // The benchmark's concurrency; rows without it give the batch size
        // (per rank, and these rows have no attention DP: the same number).
        let concurrency = match r[c_source]
            .split(';')
            .find_map(|p| p.trim().strip_prefix("silicon_concurrency="))
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            Some(c) => c,
            None => int(c_batch, "batch_size")?,
        };
        out.push(Row {
            line: i + 2,
            model,
            gpu,
            fp8: if crate::scenario::catalog::block_fp8_checkpoint(&r[c_model]) {
                Some("fp8_block")
            } else if r[c_precision].starts_with("fp8") || r[c_model].to_ascii_uppercase().contains("FP8") {
                Some("fp8")
            } else {
                None
            },
            tp,
            isl: int(c_isl, "isl")?,
            osl: int(c_osl, "osl")?,
            concurrency,
            ttft_ms: num(c_ttft, "silicon_ttft_ms")?,
            tpot_ms: num(c_tpot, "silicon_tpot_ms")?,
            sync_scheduling: c_version.is_some_and(|c| before_async_default(&r[c])),
        });
    }
    Ok(out)
}

/// Whether vLLM release `version` (`0.12.0`) predates async scheduling by
/// default: it arrived in 0.14.0 (vllm-project/vllm#27614; up to then
/// `SchedulerConfig.async_scheduling` defaults to False).
fn before_async_default(version: &str) -> bool {
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) < (0, 14),
        _ => false,
    }
}

fn name(r: &Row) -> String {
    let dtype = r.fp8.unwrap_or("bf16");
    format!("{}-{}-tp{}-{dtype}-{}x{}-c{}-line{}", r.gpu, r.model, r.tp, r.isl, r.osl, r.concurrency, r.line)
}

/// The replayable rows, by name (`GPU-model-tpN-dtype-ISLxOSL-cC-lineL`), in file order.
pub fn list(data: &Path) -> Result<Vec<String>, ConvertError> {
    Ok(rows(data)?.iter().map(name).collect())
}

/// Reads row `name`.
pub fn load(data: &Path, wanted: &str) -> Result<SiliconRun, ConvertError> {
    let all = rows(data)?;
    let Some(r) = all.iter().find(|r| name(r) == wanted) else {
        return Err(ConvertError {
            file: data.join("silicon_sample.csv").display().to_string(),
            line: 0,
            field: "id".to_owned(),
            reason: format!("no replayable row `{wanted}`"),
        });
    };
    let too_big = |field: &str, v: u64| ConvertError {
        file: data.join("silicon_sample.csv").display().to_string(),
        line: 0,
        field: field.to_owned(),
        reason: format!("{v} is beyond what a replay holds"),
    };
    if r.isl > 1 << 20 || r.osl > 1 << 20 {
        return Err(too_big("isl", r.isl.max(r.osl)));
    }
    if r.isl == 0 || r.osl == 0 {
        return Err(ConvertError {
            file: data.join("silicon_sample.csv").display().to_string(),
            line: r.line as u64,
            field: if r.isl == 0 { "isl" } else { "osl" }.to_owned(),
            reason: "must be at least 1 token".to_owned(),
        });
    }
    if r.concurrency == 0 || r.concurrency > 1 << 16 {
        return Err(too_big("silicon_concurrency", r.concurrency));
    }
    // Every prompt is held in memory: at most 2^30 prompt tokens in all.
    if PROMPTS_PER_USER * r.concurrency * r.isl > 1 << 30 {
        return Err(too_big("isl", r.isl));
    }
    let dtype = r.fp8.map(|d| format!("\ndtype: {d}")).unwrap_or_default();
    // The scheduler is modelled as of 0.15 whatever the release; only the
    // CPU side's overlap follows it.
    let engine = if r.sync_scheduling { "engine:\n  async_scheduling: false\n" } else { "" };
    // Random tokens route evenly over an MoE model's experts.
    let scenario_yaml = format!(
        "name: {wanted}\nmodel: {}\nhardware: {}\ntp: {}{dtype}\nmoe_routing: balanced\n{engine}",
        r.model, r.gpu, r.tp
    );
    let prompts = PROMPTS_PER_USER * r.concurrency;
    let workload = (0..prompts)
        .map(|k| {
            let ids: Vec<u32> = token_ids(5_000_000 + k, r.isl as usize).collect();
            llm_request(RequestId::Int(k), 0.0, ids, r.osl as u32, None)
        })
        .collect();
    let aggregate =
        |metric: &str, actual_ms: f64| Aggregate { stage: -1, metric: metric.to_owned(), actual_ms, blis_ms: None };
    Ok(SiliconRun {
        scenario_yaml,
        workload,
        concurrency: r.concurrency as u32,
        aggregates: vec![aggregate("ttft_mean", r.ttft_ms), aggregate("tpot_mean", r.tpot_ms)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_before_0_14_ran_without_async_scheduling() {
        assert!(before_async_default("0.12.0"));
        assert!(before_async_default("0.11.2"));
        assert!(!before_async_default("0.14.0"));
        assert!(!before_async_default("0.19.0"));
        // Unknown: vLLM's current default.
        assert!(!before_async_default(""));
        assert!(!before_async_default("main"));
    }
}
