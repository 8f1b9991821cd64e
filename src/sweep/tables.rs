//! The sweep's tables as Arrow record batches, and the Parquet settings they
//! are written with. Types are the ones DuckDB reads without casts: times as
//! `f64` seconds, counts as `i64`, text as UTF-8 (dictionary-encoded where it
//! repeats), nullable where a value may not exist.
//!
//! Every table starts with the run's grid columns: `run_id`, `scenario`,
//! `concurrency` (null = open loop), `seed`, `rate_scale`, then one column per
//! override key, named by its key path and typed by its values.

use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int64Builder, ListBuilder, StringBuilder, StringDictionaryBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use serde_json::Value;

use super::grid::{Cell, Plan};
use crate::sim::FinishedRequest;
use crate::workload::NodeKind;

/// Rows per record batch a worker sends to the collector.
pub(crate) const BATCH_ROWS: usize = 8192;

/// The Arrow type of an override column, from its values: integers, numbers,
/// booleans, or text (anything else, as JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverrideType {
    Int,
    Float,
    Bool,
    Text,
}

impl OverrideType {
    pub(crate) fn of(values: &[&Value]) -> OverrideType {
        if values.iter().all(|v| v.is_i64()) {
            OverrideType::Int
        } else if values.iter().all(|v| v.is_number()) {
            OverrideType::Float
        } else if values.iter().all(|v| v.is_boolean()) {
            OverrideType::Bool
        } else {
            OverrideType::Text
        }
    }

    fn data_type(self) -> DataType {
        match self {
            OverrideType::Int => DataType::Int64,
            OverrideType::Float => DataType::Float64,
            OverrideType::Bool => DataType::Boolean,
            OverrideType::Text => DataType::Utf8,
        }
    }
}

/// The grid columns' names and types, shared by every table of a plan.
#[derive(Debug, Clone)]
pub(crate) struct GridColumns {
    overrides: Vec<(String, OverrideType)>,
}

impl GridColumns {
    pub(crate) fn new(plan: &Plan) -> GridColumns {
        let overrides = plan
            .override_keys
            .iter()
            .enumerate()
            .map(|(k, key)| {
                let values: Vec<&Value> = plan.cells.iter().map(|c| &c.overrides[k].1).collect();
                (key.clone(), OverrideType::of(&values))
            })
            .collect();
        GridColumns { overrides }
    }

    pub(crate) fn fields(&self) -> Vec<Field> {
        let mut f = vec![
            Field::new("run_id", DataType::Utf8, false),
            Field::new("scenario", DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)), false),
            Field::new("concurrency", DataType::Int64, true),
            Field::new("seed", DataType::Int64, false),
            Field::new("rate_scale", DataType::Float64, false),
        ];
        for (key, t) in &self.overrides {
            f.push(Field::new(key, t.data_type(), true));
        }
        f
    }

    /// Columns holding `cell`'s grid values, `rows` times.
    pub(crate) fn columns(&self, cell: &Cell, rows: usize) -> Vec<ArrayRef> {
        // Sized to the rows: a default builder reserves 1024 rows, which the
        // runs table (one row per run) would keep for every run of a batch.
        let mut run_id = StringBuilder::with_capacity(rows, rows * cell.run_id.len());
        let mut scenario = StringDictionaryBuilder::<Int32Type>::with_capacity(rows, 1, cell.scenario.len());
        let mut concurrency = Int64Builder::with_capacity(rows);
        let mut seed = Int64Builder::with_capacity(rows);
        let mut rate_scale = Float64Builder::with_capacity(rows);
        for _ in 0..rows {
            run_id.append_value(&cell.run_id);
            scenario.append_value(&cell.scenario);
            concurrency.append_option(cell.concurrency.map(i64::from));
            seed.append_value(cell.seed as i64);
            rate_scale.append_value(cell.rate_scale);
        }
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(run_id.finish()),
            Arc::new(scenario.finish()),
            Arc::new(concurrency.finish()),
            Arc::new(seed.finish()),
            Arc::new(rate_scale.finish()),
        ];
        for (k, (_, t)) in self.overrides.iter().enumerate() {
            let v = &cell.overrides[k].1;
            let col: ArrayRef = match t {
                OverrideType::Int => Arc::new(arrow_array::Int64Array::from(vec![v.as_i64(); rows])),
                OverrideType::Float => Arc::new(arrow_array::Float64Array::from(vec![v.as_f64(); rows])),
                OverrideType::Bool => Arc::new(arrow_array::BooleanArray::from(vec![v.as_bool(); rows])),
                OverrideType::Text => {
                    let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    Arc::new(arrow_array::StringArray::from(vec![Some(text); rows]))
                }
            };
            cols.push(col);
        }
        cols
    }
}

/// Builds the `requests` table of one run: one row per llm node.
pub(crate) struct RequestRows {
    schema: SchemaRef,
    grid: GridColumns,
    request_id: StringBuilder,
    node: Int64Builder,
    replica: Int64Builder,
    times: [Float64Builder; 10],
    counts: [Int64Builder; 4],
    error: StringBuilder,
    rows: usize,
    gaps: Vec<u64>,
}

/// Time columns, in order.
const TIME_COLUMNS: [&str; 10] = [
    "arrival_s",
    "send_s",
    "start_s",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "itl_mean_s",
    "itl_p99_s",
    "e2e_s",
    "scheduling_delay_s",
];
/// Count columns, in order.
const COUNT_COLUMNS: [&str; 4] = ["input_tokens", "output_tokens", "cached_tokens", "preemptions"];

impl RequestRows {
    pub(crate) fn schema(grid: &GridColumns) -> SchemaRef {
        let mut fields = grid.fields();
        fields.push(Field::new("request_id", DataType::Utf8, false));
        fields.push(Field::new("node", DataType::Int64, false));
        // The replica the router sent the node to (0 with one replica); null
        // for a node never routed (rejected, or behind a failed node).
        fields.push(Field::new("replica", DataType::Int64, true));
        for name in TIME_COLUMNS {
            let nullable = !matches!(name, "arrival_s" | "send_s");
            fields.push(Field::new(name, DataType::Float64, nullable));
        }
        for name in COUNT_COLUMNS {
            fields.push(Field::new(name, DataType::Int64, false));
        }
        fields.push(Field::new("error", DataType::Utf8, true));
        Arc::new(Schema::new(fields))
    }

    pub(crate) fn new(grid: &GridColumns) -> RequestRows {
        RequestRows {
            schema: Self::schema(grid),
            grid: grid.clone(),
            request_id: StringBuilder::new(),
            node: Int64Builder::new(),
            replica: Int64Builder::new(),
            times: std::array::from_fn(|_| Float64Builder::new()),
            counts: std::array::from_fn(|_| Int64Builder::new()),
            error: StringBuilder::new(),
            rows: 0,
            gaps: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Adds one row per llm node of `r`.
    pub(crate) fn push(&mut self, r: &FinishedRequest) {
        let s = |us: u64| us as f64 / 1e6;
        let e2e = r.finish_us.map(|f| s(f - r.send_us));
        let id = r.request.request_id.to_string();
        for (i, (sub, node)) in r.request.sub_requests.iter().zip(&r.nodes).enumerate() {
            let NodeKind::Llm(call) = &sub.kind else { continue };
            let times = &node.token_times_us;
            self.gaps.clear();
            self.gaps.extend(times.windows(2).map(|w| w[1] - w[0]));
            let itl_mean = (!self.gaps.is_empty()).then(|| s(self.gaps.iter().sum::<u64>()) / self.gaps.len() as f64);
            let itl_p99 = (!self.gaps.is_empty()).then(|| percentile(&mut self.gaps, 99.0) / 1e6);
            let first = times.first().copied();
            let values = [
                Some(s(r.arrival_us)),
                Some(s(r.send_us)),
                node.start_us.map(s),
                first.map(s),
                node.finish_us.map(s),
                first.zip(node.start_us).map(|(f, st)| s(f - st)),
                itl_mean,
                itl_p99,
                e2e,
                node.scheduled_us.zip(node.start_us).map(|(sc, st)| s(sc - st)),
            ];
            for (b, v) in self.times.iter_mut().zip(values) {
                b.append_option(v);
            }
            let counts = [call.input_tokens, call.output_tokens, node.cached_tokens, node.preemptions];
            for (b, v) in self.counts.iter_mut().zip(counts) {
                b.append_value(i64::from(v));
            }
            self.request_id.append_value(&id);
            self.node.append_value(i as i64);
            self.replica.append_option(node.start_us.map(|_| i64::from(node.replica.unwrap_or(0))));
            self.error.append_option(node.error.as_ref().map(|e| e.to_string()));
            self.rows += 1;
        }
    }

    /// The rows so far as a batch, for `cell`; the builder starts over.
    pub(crate) fn finish(&mut self, cell: &Cell) -> RecordBatch {
        let mut cols = self.grid.columns(cell, self.rows);
        cols.push(Arc::new(self.request_id.finish()));
        cols.push(Arc::new(self.node.finish()));
        cols.push(Arc::new(self.replica.finish()));
        for b in &mut self.times {
            cols.push(Arc::new(b.finish()));
        }
        for b in &mut self.counts {
            cols.push(Arc::new(b.finish()));
        }
        cols.push(Arc::new(self.error.finish()));
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), cols).expect("columns match the schema")
    }
}

/// Builds the `tokens` table of one run: one row per llm node, with its
/// `token_latency_s` list (entry 0 from entering the scheduler to the first
/// token, then the gaps), the same numbers as a result row's `token_latency`.
pub(crate) struct TokenRows {
    schema: SchemaRef,
    grid: GridColumns,
    request_id: StringBuilder,
    node: Int64Builder,
    latency: ListBuilder<Float64Builder>,
    rows: usize,
}

impl TokenRows {
    pub(crate) fn schema(grid: &GridColumns) -> SchemaRef {
        let mut fields = grid.fields();
        fields.push(Field::new("request_id", DataType::Utf8, false));
        fields.push(Field::new("node", DataType::Int64, false));
        fields.push(Field::new("token_latency_s", DataType::new_list(DataType::Float64, true), false));
        Arc::new(Schema::new(fields))
    }

    pub(crate) fn new(grid: &GridColumns) -> TokenRows {
        TokenRows {
            schema: Self::schema(grid),
            grid: grid.clone(),
            request_id: StringBuilder::new(),
            node: Int64Builder::new(),
            latency: ListBuilder::new(Float64Builder::new()),
            rows: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    pub(crate) fn push(&mut self, r: &FinishedRequest) {
        let id = r.request.request_id.to_string();
        for (i, (sub, node)) in r.request.sub_requests.iter().zip(&r.nodes).enumerate() {
            if !matches!(sub.kind, NodeKind::Llm(_)) {
                continue;
            }
            let mut previous = node.start_us.unwrap_or(0);
            for &t in &node.token_times_us {
                self.latency.values().append_value((t - previous) as f64 / 1e6);
                previous = t;
            }
            self.latency.append(true);
            self.request_id.append_value(&id);
            self.node.append_value(i as i64);
            self.rows += 1;
        }
    }

    pub(crate) fn finish(&mut self, cell: &Cell) -> RecordBatch {
        let mut cols = self.grid.columns(cell, self.rows);
        cols.push(Arc::new(self.request_id.finish()));
        cols.push(Arc::new(self.node.finish()));
        cols.push(Arc::new(self.latency.finish()));
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), cols).expect("columns match the schema")
    }
}

/// The `p`-th percentile of `values` (non-empty), interpolating linearly
/// between the closest ranks like numpy; found by selection (linear time)
/// rather than a full sort. Reorders `values`.
fn percentile(values: &mut [u64], p: f64) -> f64 {
    let rank = p / 100.0 * (values.len() - 1) as f64;
    let hi_rank = rank.ceil() as usize;
    let (below, &mut hi, _) = values.select_nth_unstable(hi_rank);
    let lo = if rank.floor() as usize == hi_rank { hi } else { below.iter().copied().max().unwrap_or(hi) };
    lo as f64 + (hi as f64 - lo as f64) * (rank - rank.floor())
}

/// Parquet settings: zstd, and for float columns no dictionary and
/// BYTE_STREAM_SPLIT, which measured 2–3x faster to write and 28 % smaller
/// for random doubles (`../shared/reference/rust-stack.md` §4).
pub(crate) fn writer_properties(schema: &Schema) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("valid level")))
        // Min/max per column chunk is what DuckDB's filter pushdown uses;
        // per-page statistics cost writer time for little.
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Chunk)
        .set_max_row_group_row_count(Some(1 << 17));
    for f in schema.fields() {
        // Request ids are (nearly) unique: a dictionary attempt is wasted work.
        if f.name() == "request_id" {
            b = b.set_column_dictionary_enabled(ColumnPath::from("request_id"), false);
        }
        let path = match f.data_type() {
            DataType::Float64 => Some(ColumnPath::from(f.name().as_str())),
            // A list's values sit at `name.list.element`/`name.list.item`.
            DataType::List(item) if item.data_type() == &DataType::Float64 => {
                Some(ColumnPath::new(vec![f.name().clone(), "list".to_owned(), item.name().clone()]))
            }
            _ => None,
        };
        if let Some(path) = path {
            b = b
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::BYTE_STREAM_SPLIT);
        }
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selected_percentiles_match_a_sort() {
        let mut state = 12345u64;
        for n in [1usize, 2, 3, 7, 100, 257] {
            let mut v: Vec<u64> = (0..n)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    state >> 50
                })
                .collect();
            let mut sorted = v.clone();
            sorted.sort_unstable();
            for p in [0.0, 50.0, 90.0, 99.0, 100.0] {
                let rank = p / 100.0 * (n - 1) as f64;
                let (lo, hi) = (sorted[rank.floor() as usize] as f64, sorted[rank.ceil() as usize] as f64);
                let expected = lo + (hi - lo) * (rank - rank.floor());
                assert!((percentile(&mut v, p) - expected).abs() < 1e-9, "n {n} p {p}");
            }
        }
        // numpy.percentile([1, 2, 3, 4, 10], 90) = 7.6
        assert!((percentile(&mut [10, 1, 3, 2, 4], 90.0) - 7.6).abs() < 1e-9);
    }
}
