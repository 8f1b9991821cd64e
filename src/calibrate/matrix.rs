//! The calibration matrix: a plan that replays real vLLM runs, each with its
//! own converted workload and deployment, and compares every one with what
//! the real server measured. One run per experiment, in parallel; the output
//! is `calibration.parquet` (experiment × metric: real, simulated, error, and
//! BLIS's published prediction where there is one), `calibration.md` (the
//! same as a table) and `reports/<experiment>.json` (`calibrate`'s report).
//!
//! Runs known only by their aggregates (`source: blis-trainval`, and
//! `source: blis-eval`, whose workloads are assumed from the profile each
//! names) are compared on those, whole run and per load stage
//! ([`super::aggregates`]). Every run that swept its rate over two or more stages
//! also gets its error against load ([`crate::calibrate::load`]):
//! `calibration_stages.parquet` (experiment × stage × metric) and the "Error
//! against load" section of `calibration.md`.
//!
//! ```yaml
//! name: calibration
//! calibration:
//!   - {source: blis-vllm-h100, data: ../../shared/data/blis-vllm-h100}
//!   - {source: blis-trainval, data: ../../shared/data/blis-vllm-h100}
//!   - {source: blis-eval, data: ../../shared/data/blis-vllm-h100, experiments: [38-llama-3-1-8b-tp1-general-lite-1-1]}
//!   - {source: llmservingsim, data: ../../shared/data/llmservingsim-vllm-bench, experiments: [RTX4090__Llama-3.1-8B]}
//! overrides: {latency_model: {kind: kernels, constants_file: fit.yaml}}   # optional, every scenario
//! output: ../results/calibration
//! ```

mod markdown;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use rayon::prelude::*;
use serde::Deserialize;
use serde_json::Value;

use super::aggregates::AggregateComparison;
use super::fit::{replay, replay_after_warmups};
use super::ispass::IspassComparison;
use super::load::{self, StageComparison};
use super::report::{CalibrateOptions, Report, compare};
use super::{observed, stats::MetricReport};
use crate::scenario::{self, ScenarioSpec};
use crate::sweep::error::PlanError;
use crate::sweep::error::SweepError;
use crate::sweep::grid::set_path;
use crate::sweep::output_dir::{TmpFile, write_atomic};
use crate::sweep::tables::writer_properties;
use crate::workload::import::blis_vllm_h100::{self, Published};
use crate::workload::import::measured::{self, Source};
use crate::workload::import::{blis_eval, blis_trainval, ispass26, silicon};

/// The plan file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CalibrationSpec {
    name: String,
    calibration: Vec<SourceSpec>,
    #[serde(default)]
    overrides: BTreeMap<String, Value>,
    output: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceSpec {
    source: Source,
    data: String,
    #[serde(default)]
    experiments: Vec<String>,
}

/// A resolved calibration plan.
#[derive(Debug, Clone)]
pub struct CalibrationPlan {
    /// Its name.
    pub name: String,
    /// Output directory.
    pub output: PathBuf,
    /// Directory relative paths in overrides start from.
    base: PathBuf,
    overrides: BTreeMap<String, Value>,
    /// The experiments, in plan order.
    pub experiments: Vec<Experiment>,
}

/// One real run.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// Where it comes from.
    pub source: Source,
    /// The source's data folder.
    pub data: PathBuf,
    /// The run's name in the source.
    pub name: String,
}

/// Whether a plan file's text is a calibration plan (it has `calibration:`).
pub fn is_calibration_plan(text: &str) -> bool {
    crate::yaml::parse::<Value>(text).is_ok_and(|v| v.get("calibration").is_some())
}

/// Reads and resolves a calibration plan; every source folder is listed now,
/// so a missing one stops the sweep before it starts.
pub fn load(file: &Path) -> Result<CalibrationPlan, PlanError> {
    let text = crate::yaml::read_file(file)?;
    let spec: CalibrationSpec = crate::yaml::parse_file(file, &text)?;
    let base = file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let invalid = |field: String, reason: String| PlanError::Invalid {
        file: crate::yaml::locate(file, &text, &field),
        field,
        reason,
    };
    let mut experiments = Vec::new();
    for (i, s) in spec.calibration.iter().enumerate() {
        let data = base.join(&s.data);
        let available =
            measured::list(s.source, &data).map_err(|e| invalid(format!("calibration[{i}].data"), e.to_string()))?;
        let names = if s.experiments.is_empty() { available.clone() } else { s.experiments.clone() };
        for name in names {
            if !available.contains(&name) {
                return Err(invalid(
                    format!("calibration[{i}].experiments"),
                    format!("no run `{name}` in {}", data.display()),
                ));
            }
            experiments.push(Experiment { source: s.source, data: data.clone(), name });
        }
    }
    if experiments.is_empty() {
        return Err(invalid("calibration".to_owned(), "no runs to replay".to_owned()));
    }
    Ok(CalibrationPlan {
        name: spec.name,
        output: base.join(&spec.output),
        base,
        overrides: spec.overrides,
        experiments,
    })
}

/// One experiment replayed.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The experiment.
    pub experiment: Experiment,
    /// Model, GPU, TP, latency model and DP ranks of its scenario.
    pub deployment: Option<(String, String, u64, &'static str, u32)>,
    /// The comparison, or why the experiment could not run.
    pub report: Result<Comparison, String>,
    /// BLIS's published predictions for it.
    pub blis: Vec<Published>,
    /// A measured deployment's protocol and what its replay found.
    pub silicon: Option<SiliconInfo>,
    /// Its error per load stage, where it swept two or more.
    pub stages: Vec<StageComparison>,
}

/// How a measured deployment (`source: silicon`) was replayed.
#[derive(Debug, Clone)]
pub struct SiliconInfo {
    /// The protocol that most probably measured it.
    pub protocol: silicon::Protocol,
    /// Its concurrent requests cannot all hold their KV at once in the
    /// replayed deployment's cache ([`silicon::kv_bound`]): a capacity row,
    /// scored on TTFT (the queue for KV), not on TPOT.
    pub capacity: bool,
    /// What the replay assumed beyond the row.
    pub notes: Vec<String>,
}

/// How a replayed run compares with the real one.
#[derive(Debug, Clone)]
pub enum Comparison {
    /// Request by request (and llm node), from per-request data.
    PerRequest(Box<Report>),
    /// Aggregate by aggregate, whole run (stage −1) and per load stage.
    Aggregates(Vec<AggregateComparison>),
    /// An ISPASS'26 run: its means and curve, other simulators' beside ours.
    Ispass(Box<IspassComparison>),
}

impl Comparison {
    /// What was compared, for a log line.
    pub fn describe(&self) -> String {
        match self {
            Comparison::PerRequest(r) => format!("{} requests compared", r.trace_info.matched_pairs),
            Comparison::Aggregates(a) => format!("{} aggregates compared", a.len()),
            Comparison::Ispass(c) => format!("{} aggregates compared", c.aggregates.len()),
        }
    }
}

/// Replays every experiment of `plan` on `jobs` threads; `on_done` hears of
/// each as it finishes. Outcomes come back in plan order.
pub fn run(
    plan: &CalibrationPlan,
    jobs: usize,
    on_done: &(dyn Fn(&Outcome) + Sync),
) -> Result<Vec<Outcome>, SweepError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .build()
        .map_err(|e| SweepError::Io { path: "thread pool".to_owned(), error: std::io::Error::other(e) })?;
    Ok(pool.install(|| {
        plan.experiments
            .par_iter()
            .map(|e| {
                let outcome = replay_one(plan, e);
                on_done(&outcome);
                outcome
            })
            .collect()
    }))
}

/// The experiment's scenario with the plan's overrides, resolved.
fn deployment(plan: &CalibrationPlan, name: &str, scenario_yaml: &str) -> Result<scenario::Deployment, String> {
    let mut value: Value =
        crate::yaml::parse(scenario_yaml).map_err(|x| format!("{name}: converted scenario: {}", x.message))?;
    for (key, v) in &plan.overrides {
        set_path(&mut value, key, v.clone());
    }
    let spec: ScenarioSpec =
        serde_json::from_value(value).map_err(|x| format!("overrides: {x} (scenario of {name})"))?;
    scenario::resolve(spec, &plan.base, name).map_err(|x| format!("{name}: scenario: {x}"))
}

fn replay_one(plan: &CalibrationPlan, e: &Experiment) -> Outcome {
    let mut outcome = Outcome {
        experiment: e.clone(),
        deployment: None,
        report: Err(String::new()),
        blis: Vec::new(),
        silicon: None,
        stages: Vec::new(),
    };
    if e.source == Source::Silicon {
        outcome.report = (|| {
            let run =
                silicon::load(&e.data, &e.name, crate::calibrate::replay::kv_blocks).map_err(|x| x.to_string())?;
            let d = deployment(plan, &e.name, &run.scenario_yaml)?;
            let p = d.serving();
            outcome.deployment = Some((d.model.name.clone(), p.gpu.name.to_owned(), p.tp, p.latency.kind(), p.dp));
            let capacity = silicon::kv_bound(
                u64::from(run.concurrency),
                run.max_request_tokens,
                p.engine.num_gpu_blocks,
                p.engine.block_size,
            );
            outcome.silicon = Some(SiliconInfo { protocol: run.protocol, capacity, notes: run.notes.clone() });
            let sim = replay_after_warmups(&d, p.latency.clone(), &run.warmups, &run.workload, run.concurrency);
            Ok(Comparison::Aggregates(crate::calibrate::aggregates::compare(&sim, &[], &run.aggregates)))
        })();
        return outcome;
    }
    if e.source == Source::Ispass26 {
        outcome.report = (|| {
            let run = ispass26::load(&e.data, &e.name).map_err(|x| x.to_string())?;
            let d = deployment(plan, &e.name, &run.scenario_yaml)?;
            let p = d.serving();
            outcome.deployment = Some((d.model.name.clone(), p.gpu.name.to_owned(), p.tp, p.latency.kind(), p.dp));
            Ok(Comparison::Ispass(Box::new(crate::calibrate::ispass::compare(&d, &run))))
        })();
        return outcome;
    }
    if matches!(e.source, Source::BlisTrainval | Source::BlisEval) {
        outcome.report = (|| {
            let run = if e.source == Source::BlisEval {
                blis_eval::load(&e.data, &e.name)
            } else {
                blis_trainval::load(&e.data, &e.name)
            };
            let run = run.map_err(|x| x.to_string())?;
            let d = deployment(plan, &e.name, &run.scenario_yaml)?;
            let p = d.serving();
            outcome.deployment = Some((d.model.name.clone(), p.gpu.name.to_owned(), p.tp, p.latency.kind(), p.dp));
            let sim = replay(&d, p.latency.clone(), &run.workload, None);
            let rows = crate::calibrate::aggregates::compare(&sim, &run.stages, &run.aggregates);
            outcome.stages = load::from_aggregates(&rows, &sim, &run.stages);
            Ok(Comparison::Aggregates(rows))
        })();
        return outcome;
    }
    let result = (|| -> Result<Comparison, String> {
        let converted = measured::convert(e.source, &e.data, &e.name).map_err(|x| x.to_string())?;
        if e.source == Source::BlisVllmH100 {
            outcome.blis = blis_vllm_h100::blis_published(&e.data, &e.name).map_err(|x| x.to_string())?;
        }
        let d = deployment(plan, &e.name, &converted.scenario_yaml)?;
        let p = d.serving();
        outcome.deployment = Some((d.model.name.clone(), p.gpu.name.to_owned(), p.tp, p.latency.kind(), p.dp));
        let timeout_us = converted.client_timeout_s.map(crate::workload::seconds_to_us);
        let sim = replay(&d, p.latency.clone(), &converted.workload, timeout_us);
        let baseline = converted.baseline_jsonl();
        let real =
            observed::from_results(baseline.as_slice(), &format!("{} baseline", e.name)).map_err(|x| x.to_string())?;
        if e.source == Source::BlisVllmH100 {
            let stages = blis_vllm_h100::stages(&e.data, &e.name).map_err(|x| x.to_string())?;
            let blis: Vec<(i32, String, f64)> =
                outcome.blis.iter().map(|p| (p.stage, p.metric.clone(), p.predicted_ms)).collect();
            outcome.stages = load::from_requests(&real, &sim, &stages, &blis);
        }
        Ok(Comparison::PerRequest(Box::new(compare(&real, &sim, &CalibrateOptions::default()))))
    })();
    outcome.report = result;
    outcome
}

/// The metrics of the table, as (name in BLIS's files, report metric, statistic).
const METRICS: [(&str, &str, Stat); 10] = [
    ("ttft_mean", "ttft", Stat::Mean),
    ("ttft_p90", "ttft", Stat::P90),
    ("ttft_p99", "ttft", Stat::P99),
    ("ttft_mape", "ttft", Stat::Mape),
    ("itl_mean", "itl", Stat::Mean),
    ("itl_mape", "itl", Stat::Mape),
    ("e2e_mean", "e2e", Stat::Mean),
    ("e2e_p90", "e2e", Stat::P90),
    ("e2e_p99", "e2e", Stat::P99),
    ("e2e_mape", "e2e", Stat::Mape),
];

#[derive(Debug, Clone, Copy)]
enum Stat {
    Mean,
    P90,
    P99,
    Mape,
}

/// (real ms, simulated ms, error): error is sim / real − 1, or the
/// per-request MAPE (real and simulated absent).
fn value(m: &MetricReport, stat: Stat) -> (Option<f64>, Option<f64>, f64) {
    let w = &m.workload_level;
    let (real, sim) = match stat {
        Stat::Mean => (w.real_mean, w.sim_mean),
        Stat::P90 => (w.real_p90, w.sim_p90),
        Stat::P99 => (w.real_p99, w.sim_p99),
        Stat::Mape => return (None, None, m.request_level.mape),
    };
    let error = if real > 0.0 { sim / real - 1.0 } else { 0.0 };
    (Some(real / 1e3), Some(sim / 1e3), error)
}

/// Writes `calibration.parquet`, `calibration_stages.parquet`,
/// `calibration.md` and `reports/` for
/// `outcomes` under the plan's output directory.
pub fn write(plan: &CalibrationPlan, outcomes: &[Outcome]) -> Result<(), SweepError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |error: std::io::Error| SweepError::Io { path, error }
    };
    let reports = plan.output.join("reports");
    std::fs::create_dir_all(&reports).map_err(io(&reports))?;
    for o in outcomes {
        let text = match &o.report {
            Ok(Comparison::PerRequest(report)) => serde_json::to_string_pretty(report),
            Ok(Comparison::Aggregates(rows)) => serde_json::to_string_pretty(rows),
            Ok(Comparison::Ispass(c)) => serde_json::to_string_pretty(c),
            Err(_) => continue,
        };
        let path = reports.join(format!("{}.json", o.experiment.name));
        write_atomic(&path, text.expect("reports serialize").as_bytes())?;
    }
    write_parquet(&plan.output.join("calibration.parquet"), &table(outcomes))?;
    write_parquet(&plan.output.join("calibration_stages.parquet"), &stage_table(outcomes))?;
    let md = plan.output.join("calibration.md");
    write_atomic(&md, markdown::markdown(&plan.name, outcomes).as_bytes())
}

/// Writes `batch` to `path` as Parquet, under a temporary name renamed at
/// the end.
fn write_parquet(path: &Path, batch: &RecordBatch) -> Result<(), SweepError> {
    let file = TmpFile::create(path)?;
    let tmp = file.tmp().to_owned();
    let parquet_err = |e: parquet::errors::ParquetError| SweepError::Io {
        path: tmp.display().to_string(),
        error: std::io::Error::other(e),
    };
    let mut writer =
        ArrowWriter::try_new(file, batch.schema(), Some(writer_properties(&batch.schema()))).map_err(parquet_err)?;
    writer.write(batch).map_err(parquet_err)?;
    writer.into_inner().map_err(parquet_err)?.commit()
}

/// One whole-run metric of one experiment, as the table and the markdown
/// show it.
struct Row {
    metric: String,
    real_ms: Option<f64>,
    sim_ms: Option<f64>,
    /// sim / real − 1, or the per-request MAPE.
    error: f64,
    blis_ms: Option<f64>,
    blis_error: Option<f64>,
    /// Requests (or request pairs) behind it.
    pairs: i64,
}

/// The whole-run rows of an experiment that ran.
fn rows(o: &Outcome) -> Vec<Row> {
    match &o.report {
        Err(_) => Vec::new(),
        Ok(Comparison::PerRequest(report)) => METRICS
            .iter()
            .filter_map(|&(name, metric, stat)| {
                let m = report.metrics.get(metric)?;
                let (real_ms, sim_ms, error) = value(m, stat);
                let published = o.blis.iter().find(|p| p.stage == -1 && p.metric == name);
                Some(Row {
                    metric: name.to_owned(),
                    real_ms,
                    sim_ms,
                    error,
                    blis_ms: published.map(|p| p.predicted_ms),
                    blis_error: published.map(|p| p.predicted_ms / p.actual_ms - 1.0),
                    pairs: m.count as i64,
                })
            })
            .collect(),
        Ok(Comparison::Aggregates(all)) => aggregate_rows(all),
        Ok(Comparison::Ispass(c)) => aggregate_rows(&c.aggregates),
    }
}

/// The whole-run rows of aggregates.
fn aggregate_rows(all: &[AggregateComparison]) -> Vec<Row> {
    all.iter()
        .filter(|a| a.stage == -1)
        .map(|a| {
            let rel = |v: f64| if a.real_ms > 0.0 { v / a.real_ms - 1.0 } else { 0.0 };
            Row {
                metric: a.metric.clone(),
                real_ms: Some(a.real_ms),
                sim_ms: Some(a.sim_ms),
                error: rel(a.sim_ms),
                blis_ms: a.blis_ms,
                blis_error: a.blis_ms.map(rel),
                pairs: a.requests as i64,
            }
        })
        .collect()
}

/// The columns that name a run, first in both tables: experiment, source,
/// model, hardware, tp, latency model.
fn run_fields() -> Vec<Field> {
    let text = |name: &str| Field::new(name, DataType::Utf8, false);
    vec![
        text("experiment"),
        text("source"),
        text("model"),
        text("hardware"),
        Field::new("tp", DataType::Int64, false),
        text("latency_model"),
    ]
}

fn table(outcomes: &[Outcome]) -> RecordBatch {
    let text = |name: &str| Field::new(name, DataType::Utf8, false);
    let mut fields = run_fields();
    fields.extend([
        text("metric"),
        Field::new("real_ms", DataType::Float64, true),
        Field::new("simulated_ms", DataType::Float64, true),
        Field::new("error", DataType::Float64, false),
        Field::new("blis_ms", DataType::Float64, true),
        Field::new("blis_error", DataType::Float64, true),
        Field::new("pairs", DataType::Int64, false),
    ]);
    let schema = Arc::new(Schema::new(fields));
    let mut cols: Vec<StringBuilder> = (0..7).map(|_| StringBuilder::new()).collect();
    let mut tp = Int64Builder::new();
    let (mut real, mut sim, mut err, mut blis, mut blis_err) = (
        Float64Builder::new(),
        Float64Builder::new(),
        Float64Builder::new(),
        Float64Builder::new(),
        Float64Builder::new(),
    );
    let mut pairs = Int64Builder::new();
    for o in outcomes {
        let Some((model, gpu, t, kind, _)) = &o.deployment else { continue };
        for r in rows(o) {
            let names = [o.experiment.name.as_str(), o.experiment.source.name(), model, gpu, kind, &r.metric];
            for (b, v) in cols.iter_mut().zip(names) {
                b.append_value(v);
            }
            tp.append_value(*t as i64);
            real.append_option(r.real_ms);
            sim.append_option(r.sim_ms);
            err.append_value(r.error);
            blis.append_option(r.blis_ms);
            blis_err.append_option(r.blis_error);
            pairs.append_value(r.pairs);
        }
    }
    let mut strings = cols.into_iter().map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let mut arrays: Vec<ArrayRef> = strings.by_ref().take(4).collect();
    arrays.push(Arc::new(tp.finish()));
    arrays.extend(strings.take(2));
    for mut b in [real, sim, err, blis, blis_err] {
        arrays.push(Arc::new(b.finish()));
    }
    arrays.push(Arc::new(pairs.finish()));
    RecordBatch::try_new(schema, arrays).expect("columns match the schema")
}

/// The error against load: one row per experiment × stage × metric, for the
/// experiments that swept two or more stages.
fn stage_table(outcomes: &[Outcome]) -> RecordBatch {
    let text = |name: &str| Field::new(name, DataType::Utf8, false);
    let mut fields = run_fields();
    fields.extend([
        Field::new("stage", DataType::Int64, false),
        Field::new("rate_rps", DataType::Float64, false),
        Field::new("saturated", DataType::Boolean, false),
        text("metric"),
        Field::new("real_ms", DataType::Float64, false),
        Field::new("simulated_ms", DataType::Float64, false),
        Field::new("error", DataType::Float64, false),
        Field::new("blis_ms", DataType::Float64, true),
        Field::new("blis_error", DataType::Float64, true),
        Field::new("requests", DataType::Int64, false),
    ]);
    let schema = Arc::new(Schema::new(fields));
    let mut names: Vec<StringBuilder> = (0..6).map(|_| StringBuilder::new()).collect();
    let (mut tp, mut stage, mut requests) = (Int64Builder::new(), Int64Builder::new(), Int64Builder::new());
    let mut saturated = arrow_array::builder::BooleanBuilder::new();
    let mut floats: Vec<Float64Builder> = (0..6).map(|_| Float64Builder::new()).collect();
    for o in outcomes {
        let Some((model, gpu, t, kind, _)) = &o.deployment else { continue };
        for r in &o.stages {
            let cells = [o.experiment.name.as_str(), o.experiment.source.name(), model, gpu, kind, &r.metric];
            for (b, v) in names.iter_mut().zip(cells) {
                b.append_value(v);
            }
            tp.append_value(*t as i64);
            stage.append_value(i64::from(r.stage));
            saturated.append_value(r.saturated);
            requests.append_value(r.requests as i64);
            let values =
                [Some(r.rate_rps), Some(r.real_ms), Some(r.sim_ms), Some(r.error()), r.blis_ms, r.blis_error()];
            for (b, v) in floats.iter_mut().zip(values) {
                b.append_option(v);
            }
        }
    }
    let mut names = names.into_iter().map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let mut floats = floats.into_iter().map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let mut arrays: Vec<ArrayRef> = names.by_ref().take(4).collect();
    arrays.push(Arc::new(tp.finish()));
    arrays.push(names.next().expect("latency_model"));
    arrays.push(Arc::new(stage.finish()));
    arrays.push(floats.next().expect("rate_rps"));
    arrays.push(Arc::new(saturated.finish()));
    arrays.push(names.next().expect("metric"));
    arrays.extend(floats);
    arrays.push(Arc::new(requests.finish()));
    RecordBatch::try_new(schema, arrays).expect("columns match the schema")
}
