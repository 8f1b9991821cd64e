//! `classes.parquet`: one row per run × SLO class and per run × tenant, from
//! each run's `per_class` and `per_tenant` metrics ([`crate::metrics`]'s
//! `classes`). Written by the summary, and only when some run has them, so
//! every other sweep's folder is what it was. DuckDB joins it to `runs` by
//! `run_id`. Latencies in ms like `runs.parquet`.
//!
//! Own columns: `group` (`class` or `tenant`), `name` (the class or tenant),
//! `requests`, `completed`, `statuses` (the other ways its requests ended,
//! a JSON object by name, e.g. `{"rejected": 3}`; `{}` when none), its
//! output tokens, TTFT/ITL/E2E p50, p90, p99 and mean, output tokens per
//! second, `slo_attainment` and `goodput_rps` (with an SLO, else null) and
//! `jain_tenants` (the run's index, on its tenant rows; null on class rows).

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int64Builder, StringBuilder, StringDictionaryBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use parquet::arrow::ArrowWriter;

use super::columns::{RowsBuilder, RunColumns};
use crate::metrics::{GroupMetrics, Metrics};
use crate::sweep::error::SweepError;
use crate::sweep::output_dir::{TmpFile, io_err};

/// Count columns, in order.
const COUNTS: [&str; 3] = ["requests", "completed", "output_tokens"];
/// Latency columns (ms), in order: each of TTFT, ITL, E2E's p50, p90, p99, mean.
const LATENCIES: [&str; 12] = [
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "ttft_mean_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "itl_mean_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
    "e2e_mean_ms",
];
/// Rate and share columns, in order (nullable but the first).
const NUMBERS: [&str; 4] = ["throughput_tok_s", "slo_attainment", "goodput_rps", "jain_tenants"];

/// Builds `classes.parquet` rows, many runs at a time.
pub(crate) struct ClassRows {
    schema: SchemaRef,
    run: RowsBuilder,
    group: StringDictionaryBuilder<Int32Type>,
    name: StringBuilder,
    counts: [Int64Builder; 3],
    statuses: StringBuilder,
    latencies: [Float64Builder; 12],
    numbers: [Float64Builder; 4],
    rows: usize,
}

impl ClassRows {
    pub(crate) fn schema() -> SchemaRef {
        let mut fields = RunColumns::fields();
        let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        fields.push(Field::new("group", dict, false));
        fields.push(Field::new("name", DataType::Utf8, false));
        fields.extend(COUNTS.map(|n| Field::new(n, DataType::Int64, false)));
        fields.push(Field::new("statuses", DataType::Utf8, false));
        fields.extend(LATENCIES.map(|n| Field::new(n, DataType::Float64, false)));
        fields.extend(NUMBERS.map(|n| Field::new(n, DataType::Float64, n != "throughput_tok_s")));
        Arc::new(Schema::new(fields))
    }

    pub(crate) fn new() -> ClassRows {
        ClassRows {
            schema: Self::schema(),
            run: RowsBuilder::runs(),
            group: StringDictionaryBuilder::new(),
            name: StringBuilder::new(),
            counts: std::array::from_fn(|_| Int64Builder::new()),
            statuses: StringBuilder::new(),
            latencies: std::array::from_fn(|_| Float64Builder::new()),
            numbers: std::array::from_fn(|_| Float64Builder::new()),
            rows: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Whether a run's metrics have rows here.
    pub(crate) fn has_rows(m: &Metrics) -> bool {
        !m.per_class.is_empty() || !m.per_tenant.is_empty()
    }

    /// Adds the rows of one run: its classes, then its tenants.
    pub(crate) fn push(&mut self, run: &RunColumns, m: &Metrics) {
        let jain = m.fairness.map(|f| f.jain_tenants);
        for (name, g) in &m.per_class.0 {
            self.push_group(run, "class", name, g, None);
        }
        for (name, g) in &m.per_tenant.0 {
            self.push_group(run, "tenant", name, g, jain);
        }
    }

    fn push_group(&mut self, run: &RunColumns, group: &str, name: &str, g: &GroupMetrics, jain: Option<f64>) {
        self.run.push_run(run);
        self.group.append_value(group);
        self.name.append_value(name);
        for (b, v) in self.counts.iter_mut().zip([g.requests, g.completed, g.output_tokens]) {
            b.append_value(v as i64);
        }
        self.statuses.append_value(serde_json::to_string(&g.statuses).unwrap_or_default());
        let l = [g.ttft_ms, g.itl_ms, g.e2e_ms].map(|s| [s.p50, s.p90, s.p99, s.mean]);
        for (b, v) in self.latencies.iter_mut().zip(l.into_iter().flatten()) {
            b.append_value(v);
        }
        for (b, v) in self.numbers.iter_mut().zip([Some(g.throughput_tok_s), g.slo_attainment, g.goodput_rps, jain]) {
            b.append_option(v);
        }
        self.rows += 1;
    }

    /// The rows so far as a batch; the builder starts over.
    pub(crate) fn finish(&mut self) -> RecordBatch {
        let mut cols = self.run.finish();
        cols.push(Arc::new(self.group.finish()));
        cols.push(Arc::new(self.name.finish()));
        cols.extend(self.counts.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        cols.push(Arc::new(self.statuses.finish()));
        cols.extend(self.latencies.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        cols.extend(self.numbers.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), cols).expect("columns match the schema")
    }
}

/// `classes.parquet` as the summary writes it, a batch of runs at a time:
/// opened (under a temporary name) at the first run that has rows, put in
/// place at the end; with no such run, an earlier invocation's is removed.
pub(crate) struct ClassTable {
    path: PathBuf,
    open: Option<(ClassRows, ArrowWriter<TmpFile>, PathBuf)>,
}

impl ClassTable {
    pub(crate) fn new(path: PathBuf) -> ClassTable {
        ClassTable { path, open: None }
    }

    /// Adds a run's rows, if its metrics have any.
    pub(crate) fn push(&mut self, run: &RunColumns, metrics: Option<&Metrics>) -> Result<(), SweepError> {
        let Some(m) = metrics.filter(|m| ClassRows::has_rows(m)) else { return Ok(()) };
        if self.open.is_none() {
            let file = TmpFile::create(&self.path)?;
            let tmp = file.tmp().to_owned();
            let schema = ClassRows::schema();
            let w = ArrowWriter::try_new(file, schema.clone(), Some(super::writer_properties(&schema)))
                .map_err(|e| io_err(&tmp)(std::io::Error::other(e)))?;
            self.open = Some((ClassRows::new(), w, tmp));
        }
        if let Some((rows, _, _)) = &mut self.open {
            rows.push(run, m);
        }
        Ok(())
    }

    /// Writes the rows so far as one row group.
    pub(crate) fn flush(&mut self) -> Result<(), SweepError> {
        let Some((rows, w, tmp)) = self.open.as_mut().filter(|o| o.0.len() > 0) else { return Ok(()) };
        let err = |e: parquet::errors::ParquetError| io_err(tmp)(std::io::Error::other(e));
        w.write(&rows.finish()).map_err(err)?;
        w.flush().map_err(err)
    }

    /// Puts the table in place, or removes a stale one when no run had rows.
    pub(crate) fn finish(mut self) -> Result<(), SweepError> {
        self.flush()?;
        match self.open {
            Some((_, w, tmp)) => w.into_inner().map_err(|e| io_err(&tmp)(std::io::Error::other(e)))?.commit(),
            None => match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(&self.path)(e)),
                _ => Ok(()),
            },
        }
    }
}
