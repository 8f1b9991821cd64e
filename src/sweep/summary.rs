//! The sweep's summaries, rebuilt from every run's files when the runs are
//! over (including runs an earlier invocation finished): `runs.parquet`, one
//! row per run with every metric a column, and `manifest.json`, the plan and
//! every run's parameters and status. Both are streamed: runs are read and
//! written [`BATCH_CELLS`] at a time (one row group each), through one
//! Parquet writer and one buffered JSON file, so memory does not grow with
//! the size of the grid. (Measured on 100,000 finished runs: peak RSS 152 MB
//! for the whole re-run, most of it the plan; 3.6 GB before.)

use std::io::Write;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use serde_json::Value;

use super::error::SweepError;
use super::grid::Plan;
use super::output_dir::{Layout, TmpFile, io_err};
use super::resume::{RunStatus, TOOL};
use super::tables::{ClassTable, DeploymentRow, RowsBuilder, RunColumns, writer_properties};
use crate::metrics::{Metrics, Scalar};

/// Runs per record batch of `runs.parquet`.
pub(crate) const BATCH_CELLS: usize = 4096;

/// Failed runs, for the report.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    /// How many runs did not finish `ok`.
    pub(crate) count: usize,
    /// The first of them in grid order: (run_id, error).
    pub(crate) first: Option<(String, String)>,
}

/// A metric's column in the runs table.
struct MetricColumn {
    /// Its key in `metrics.json`.
    key: String,
    kind: Scalar,
    /// Factor to the table's unit (seconds become milliseconds).
    scale: f64,
    builder: MetricBuilder,
}

enum MetricBuilder {
    Count(Int64Builder),
    Number(Float64Builder),
    Flag(BooleanBuilder),
}

/// The metric columns: every scalar metric but `replicas` (a deployment
/// column), durations in milliseconds like the latencies (`sim_duration_s`
/// becomes `sim_duration_ms`).
fn metric_columns() -> (Vec<Field>, Vec<MetricColumn>) {
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (key, kind) in Metrics::scalars() {
        if key == "replicas" {
            continue;
        }
        let (name, scale) = match key.strip_suffix("_s") {
            Some(stem) => (format!("{stem}_ms"), 1e3),
            None => (key.replace('.', "_"), 1.0),
        };
        let (data_type, builder) = match kind {
            Scalar::Count => (DataType::Int64, MetricBuilder::Count(Int64Builder::new())),
            Scalar::Number => (DataType::Float64, MetricBuilder::Number(Float64Builder::new())),
            Scalar::Flag => (DataType::Boolean, MetricBuilder::Flag(BooleanBuilder::new())),
        };
        fields.push(Field::new(name, data_type, true));
        columns.push(MetricColumn { key, kind, scale, builder });
    }
    (fields, columns)
}

/// Builds the `runs` table a batch of rows at a time.
struct RunRows {
    schema: SchemaRef,
    run_columns: RowsBuilder,
    status: StringBuilder,
    error: StringBuilder,
    wall: Float64Builder,
    metrics: Vec<MetricColumn>,
}

impl RunRows {
    fn new() -> RunRows {
        let mut fields = RunColumns::fields();
        fields.push(Field::new("status", DataType::Utf8, false));
        fields.push(Field::new("error", DataType::Utf8, true));
        fields.push(Field::new("wall_ms", DataType::Float64, false));
        let (metric_fields, metrics) = metric_columns();
        fields.extend(metric_fields);
        RunRows {
            schema: Arc::new(Schema::new(fields)),
            metrics,
            run_columns: RowsBuilder::runs(),
            status: StringBuilder::new(),
            error: StringBuilder::new(),
            wall: Float64Builder::new(),
        }
    }

    fn push(&mut self, run: &RunColumns, status: &RunStatus, metrics: Option<&Metrics>, wall_s: f64) {
        self.run_columns.push_run(run);
        self.status.append_value(&status.status);
        self.error.append_option(status.error.as_deref());
        self.wall.append_value(wall_s * 1e3);
        let values = match metrics.map(serde_json::to_value) {
            Some(Ok(Value::Object(map))) => Some(map),
            _ => None,
        };
        for m in &mut self.metrics {
            // A key `object.field` is a field of a nested object.
            let v = match m.key.split_once('.') {
                Some((object, field)) => values.as_ref().and_then(|map| map.get(object)).and_then(|o| o.get(field)),
                None => values.as_ref().and_then(|map| map.get(&m.key)),
            };
            match &mut m.builder {
                MetricBuilder::Count(b) => b.append_option(v.and_then(Value::as_u64).map(|n| n as i64)),
                MetricBuilder::Number(b) => b.append_option(v.and_then(Value::as_f64).map(|x| x * m.scale)),
                MetricBuilder::Flag(b) => b.append_option(v.and_then(Value::as_bool)),
            }
            debug_assert!(v.is_none_or(|v| v.is_null() || m.kind != Scalar::Count || v.is_u64()));
        }
    }

    /// The rows so far; the builder starts over.
    fn finish(&mut self) -> RecordBatch {
        let mut cols = self.run_columns.finish();
        cols.push(Arc::new(self.status.finish()));
        cols.push(Arc::new(self.error.finish()));
        cols.push(Arc::new(self.wall.finish()));
        for m in &mut self.metrics {
            cols.push(match &mut m.builder {
                MetricBuilder::Count(b) => Arc::new(b.finish()),
                MetricBuilder::Number(b) => Arc::new(b.finish()),
                MetricBuilder::Flag(b) => Arc::new(b.finish()),
            });
        }
        RecordBatch::try_new(self.schema.clone(), cols).expect("columns match the schema")
    }
}

/// One run's entry in `manifest.json`.
#[derive(serde::Serialize)]
struct ManifestRun<'a> {
    run_id: &'a str,
    scenario: &'a str,
    concurrency: Option<u32>,
    seed: u64,
    rate_scale: f64,
    overrides: serde_json::Map<String, Value>,
    status: &'a str,
    error: Option<&'a str>,
    /// `open_loop`, `capped` (arrivals kept, requests in flight capped) or
    /// `closed_loop` (users; arrival times ignored).
    client: &'static str,
    /// What an arrival-driven run offered, req/s: the workload's own rate
    /// ([`WorkloadSource::base_rate`](super::source::WorkloadSource::base_rate),
    /// at the plan's first seed, as a capacity search measures it) × its
    /// `rate_scale`; null for a closed loop, or a workload without a rate.
    offered_rps: Option<f64>,
}

/// Rebuilds `runs.parquet` and `manifest.json`, `batch_cells` runs at a time.
pub(crate) fn write_summary(plan: &Plan, layout: &Layout, batch_cells: usize) -> Result<Failures, SweepError> {
    let mut failures = Failures::default();
    let runs_path = layout.root.join("runs.parquet");
    let manifest_path = layout.root.join("manifest.json");
    let mut manifest = TmpFile::create(&manifest_path)?;
    let mut head = serde_json::json!({
        "name": plan.name,
        "plan": plan.file.display().to_string(),
        "plan_hash": plan.plan_hash,
        "tool": TOOL,
    });
    // The SLO the runs were judged by, for the report's lines (only when
    // there is one, so other manifests stay as they were).
    if let Some(slo) = &plan.slo {
        head["slo"] = serde_json::to_value(slo).expect("an SLO serializes");
    }
    // A capacity search's target load, for the report's answer and bars.
    if let Some(t) = plan.search.as_ref().and_then(|s| s.target) {
        head["capacity_target"] = serde_json::json!(t);
    }
    // The head's keys, then `runs`, one run per line, written as they come.
    let mut text = serde_json::to_string_pretty(&head).map_err(|e| io_err(&manifest_path)(e.into()))?;
    text.truncate(text.len() - 2);
    text.push_str(",\n  \"runs\": [");
    let manifest_err = |tmp: &std::path::Path, e: std::io::Error| io_err(tmp)(e);
    manifest.write_all(text.as_bytes()).map_err(|e| manifest_err(&manifest_path, e))?;

    let runs = TmpFile::create(&runs_path)?;
    let runs_tmp = runs.tmp().to_owned();
    let parquet_err = |e: parquet::errors::ParquetError| io_err(&runs_tmp)(std::io::Error::other(e));
    let mut rows = RunRows::new();
    let mut writer =
        ArrowWriter::try_new(runs, rows.schema.clone(), Some(writer_properties(&rows.schema))).map_err(parquet_err)?;
    let mut classes = ClassTable::new(layout.root.join("classes.parquet"));
    // The base rate of each workload (by its index in the plan), read once.
    let first_seed = plan.cells.first().map_or(0, |c| c.seed);
    let mut base_rates: std::collections::BTreeMap<Option<usize>, Option<f64>> = std::collections::BTreeMap::new();
    for (i, chunk) in plan.cells.chunks(batch_cells.max(1)).enumerate() {
        for (j, cell) in chunk.iter().enumerate() {
            let dir = layout.run_dir(&cell.run_id);
            let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
            let status = RunStatus::read(layout, &cell.run_id).unwrap_or_else(RunStatus::missing);
            if status.status != "ok" {
                failures.count += 1;
                if failures.first.is_none() {
                    failures.first = Some((cell.run_id.clone(), status.error.clone().unwrap_or_default()));
                }
            }
            let metrics: Option<Metrics> = read("metrics.json").and_then(|t| serde_json::from_str(&t).ok());
            let wall_s = read("timing.json")
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|v| v["wall_s"].as_f64())
                .unwrap_or(0.0);
            let deployment = status.deployment.clone().unwrap_or_else(|| DeploymentRow::from_spec(&cell.spec));
            let run = RunColumns::new(&plan.name, cell, deployment);
            rows.push(&run, &status, metrics.as_ref(), wall_s);
            classes.push(&run, metrics.as_ref())?;
            let client = match cell.client(plan) {
                crate::sim::Client::OpenLoop => "open_loop",
                crate::sim::Client::Capped { .. } => "capped",
                crate::sim::Client::ClosedLoop { .. } => "closed_loop",
            };
            let offered_rps = if client == "closed_loop" {
                None
            } else {
                let base = *base_rates
                    .entry(cell.workload)
                    .or_insert_with(|| plan.workload_of(cell).base_rate(first_seed).ok());
                base.map(|b| b * cell.rate_scale)
            };
            let entry = ManifestRun {
                run_id: &cell.run_id,
                scenario: &cell.scenario,
                concurrency: cell.concurrency,
                seed: cell.seed,
                rate_scale: cell.rate_scale,
                overrides: cell.overrides.iter().cloned().collect(),
                status: &status.status,
                error: status.error.as_deref(),
                client,
                offered_rps,
            };
            let sep = if i == 0 && j == 0 { "\n    " } else { ",\n    " };
            manifest.write_all(sep.as_bytes()).map_err(|e| manifest_err(&manifest_path, e))?;
            serde_json::to_writer(&mut manifest, &entry).map_err(|e| manifest_err(&manifest_path, e.into()))?;
        }
        writer.write(&rows.finish()).map_err(parquet_err)?;
        // One row group per batch: the writer would otherwise hold up to
        // 2^17 runs' pages until the group is full.
        writer.flush().map_err(parquet_err)?;
        classes.flush()?;
    }
    let close = if plan.cells.is_empty() { "]\n}\n" } else { "\n  ]\n}\n" };
    manifest.write_all(close.as_bytes()).map_err(|e| manifest_err(&manifest_path, e))?;
    let runs = writer.into_inner().map_err(parquet_err)?;
    runs.commit()?;
    classes.finish()?;
    manifest.commit()?;
    Ok(failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan of 23 cheap cells in a temporary folder, some runs finished
    /// (with metrics), one failed, the rest missing.
    fn fixture(name: &str) -> (Plan, Layout, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("blis-sweep-summary-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("w.jsonl"), "").unwrap();
        let scenario = "{model: Llama-3.1-8B, hardware: H100, latency_model: {kind: linear, beta: [1000, 2, 10]}}";
        let plan = format!(
            "name: many\nworkload: {{path: w.jsonl}}\nscenarios: [{scenario}]\n\
             grid:\n  seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]\n  \
             overrides: {{engine.max_num_seqs: [8]}}\noutput: out\n"
        );
        std::fs::write(dir.join("plan.yaml"), plan).unwrap();
        let plan = crate::sweep::grid::load(&dir.join("plan.yaml")).unwrap();
        let layout = Layout { root: dir.join("out") };
        for (i, cell) in plan.cells.iter().enumerate() {
            let run = layout.run_dir(&cell.run_id);
            std::fs::create_dir_all(&run).unwrap();
            let status = match i % 5 {
                0 => continue,
                1 => RunStatus::failed(format!("run {i} failed"), DeploymentRow::from_spec(&cell.spec)),
                _ => RunStatus::ok(Default::default(), DeploymentRow::from_spec(&cell.spec)),
            };
            std::fs::write(run.join("status.json"), serde_json::to_string(&status).unwrap()).unwrap();
            let metrics = Metrics { injected_requests: i as u64, ttft_mean_ms: i as f64 / 3.0, ..Metrics::default() };
            std::fs::write(run.join("metrics.json"), serde_json::to_string(&metrics).unwrap()).unwrap();
            std::fs::write(run.join("timing.json"), format!("{{\"wall_s\": {i}.5}}")).unwrap();
        }
        (plan, layout, dir)
    }

    fn read_back(path: &std::path::Path) -> Vec<RecordBatch> {
        let file = std::fs::File::open(path).unwrap();
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn batched_summaries_equal_one_batch() {
        let (plan, layout, dir) = fixture("batches");
        let one = write_summary(&plan, &layout, usize::MAX).unwrap();
        assert_eq!((one.count, one.first.as_ref().map(|f| f.1.as_str())), (10, Some("the run did not finish")));
        let whole = read_back(&layout.root.join("runs.parquet"));
        let schema = whole[0].schema();
        let whole = arrow_select::concat::concat_batches(&schema, &whole).unwrap();
        assert_eq!(whole.num_rows(), 23);
        let manifest = std::fs::read(layout.root.join("manifest.json")).unwrap();
        let parsed: Value = serde_json::from_slice(&manifest).unwrap();
        assert_eq!(parsed["runs"].as_array().unwrap().len(), 23);
        assert_eq!(parsed["runs"][1]["status"], "failed");
        assert_eq!(parsed["runs"][2]["overrides"]["engine.max_num_seqs"], 8);
        for batch in [1, 3, 22] {
            write_summary(&plan, &layout, batch).unwrap();
            let parts = read_back(&layout.root.join("runs.parquet"));
            assert_eq!(arrow_select::concat::concat_batches(&schema, &parts).unwrap(), whole, "batch {batch}");
            assert_eq!(std::fs::read(layout.root.join("manifest.json")).unwrap(), manifest, "batch {batch}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
