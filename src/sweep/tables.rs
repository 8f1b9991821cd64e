//! The sweep's tables as Arrow record batches, and the Parquet settings they
//! are written with. Types are the ones DuckDB reads without casts: counts
//! as BIGINT, flags as BOOLEAN, text as VARCHAR (dictionary-encoded where it
//! repeats), nullable where a value may not exist. One time unit a table:
//! seconds (`_s`) in the per-request tables, milliseconds (`_ms`) in
//! `runs.parquet`; rates are per second.
//!
//! Every table starts with the same columns whatever the plan
//! ([`columns::RunColumns`]: the run, its deployment as resolved, its grid
//! values), then its own:
//! - `requests`: one row per request DAG ([`requests`]: E2E, send wait, status);
//! - `nodes`: one row per llm call ([`nodes`]: TTFT, ITL, scheduling delay,
//!   its pool and role, a split call's prefill replica and KV transfer);
//! - `tokens` (`--tokens`): one row per llm call with its token latencies;
//! - `runs.parquet`: one row per run, its metrics ([`super::summary`]);
//! - `classes.parquet`: one row per run × SLO class and × tenant, when runs
//!   have them ([`classes`]).
//!
//! `request_id` is VARCHAR in every plan, the id as the workload wrote it,
//! with `request_index` (BIGINT, input order) beside it
//! ([`columns::RequestKey`]): a type that followed the workload's ids broke
//! one glob over a plan with integer and one with text ids.

mod classes;
mod columns;
mod nodes;
mod requests;
mod tokens;

use arrow_schema::{DataType, Schema};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

/// A table's batch: the run's columns (`run`, each `rows` long), then the
/// table's own, in schema order.
fn batch(
    schema: &arrow_schema::SchemaRef,
    run: Vec<arrow_array::ArrayRef>,
    rows: usize,
    own: impl IntoIterator<Item = arrow_array::ArrayRef>,
) -> arrow_array::RecordBatch {
    debug_assert!(run.iter().all(|c| c.len() == rows));
    let mut cols = run;
    cols.extend(own);
    arrow_array::RecordBatch::try_new(schema.clone(), cols).expect("columns match the schema")
}

pub(crate) use classes::ClassTable;
pub(crate) use columns::{DeploymentRow, RowsBuilder, RunColumns, overrides_field, overrides_json};
pub(crate) use nodes::NodeRows;
pub(crate) use requests::RequestRows;
pub(crate) use tokens::TokenRows;

/// Rows per record batch a worker sends to the collector.
pub(crate) const BATCH_ROWS: usize = 8192;

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
    // The run's columns are one value repeated: a one-entry dictionary and a
    // run-length-encoded page each, nothing left to compress, so no zstd
    // context is made for them (made per column chunk, they were a fifth of
    // the time of a sweep of one-request runs).
    let run_columns: Vec<String> = RunColumns::fields().iter().map(|f| f.name().clone()).collect();
    for f in schema.fields() {
        if run_columns.contains(f.name()) {
            let path = ColumnPath::from(f.name().as_str());
            b = b
                .set_column_compression(path.clone(), Compression::UNCOMPRESSED)
                .set_column_dictionary_enabled(path, true);
            continue;
        }
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
