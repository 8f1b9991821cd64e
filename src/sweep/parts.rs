//! One run's table parts (`requests/`, `nodes/`, and `tokens/` with
//! `--tokens`), built and encoded by the worker that simulates the run:
//! Parquet encoding runs in parallel with the simulations instead of on one
//! thread for the whole sweep. Rows are gathered [`BATCH_ROWS`] at a time
//! into record batches and written to each part under its temporary name;
//! the finished files go to the collector, which puts them in place before
//! the run's `status.json`. Dropped unfinished (a failed or cancelled run),
//! the temporary files are removed: a part holds a whole run or nothing.

use std::time::Instant;

use arrow_array::{ArrayRef, RecordBatch};
use parquet::arrow::ArrowWriter;

use super::error::SweepError;
use super::output_dir::{Layout, Table, TmpFile, io_err};
use super::tables::{BATCH_ROWS, NodeRows, RequestRows, RunColumns, TokenRows, writer_properties};
use crate::sim::FinishedRequest;

/// A part being written.
struct Part {
    table: Table,
    writer: ArrowWriter<TmpFile>,
}

/// One run's parts.
pub(crate) struct RunParts {
    run: RunColumns,
    /// The run's columns, as long as the longest batch so far.
    run_cache: Vec<ArrayRef>,
    requests: RequestRows,
    nodes: NodeRows,
    tokens: Option<TokenRows>,
    parts: Vec<Part>,
    /// Rows written so far, all tables.
    pub(crate) rows: u64,
    /// Seconds spent encoding and writing.
    pub(crate) encode_s: f64,
}

impl RunParts {
    /// Opens the run's parts (under temporary names).
    pub(crate) fn open(layout: &Layout, run: RunColumns, tokens: bool) -> Result<RunParts, SweepError> {
        let tables: &[Table] = if tokens { &Table::ALL } else { &[Table::Requests, Table::Nodes] };
        let mut parts = Vec::new();
        for &table in tables {
            let schema = match table {
                Table::Requests => RequestRows::schema(),
                Table::Nodes => NodeRows::schema(),
                Table::Tokens => TokenRows::schema(),
            };
            let file = TmpFile::create(&layout.part(table, run.run_id()))?;
            let props = writer_properties(&schema);
            let tmp = file.tmp().to_owned();
            let writer =
                ArrowWriter::try_new(file, schema, Some(props)).map_err(|e| io_err(&tmp)(std::io::Error::other(e)))?;
            parts.push(Part { table, writer });
        }
        let pools = run.pools();
        Ok(RunParts {
            run,
            run_cache: Vec::new(),
            requests: RequestRows::new(),
            nodes: NodeRows::new(pools),
            tokens: tokens.then(TokenRows::new),
            parts,
            rows: 0,
            encode_s: 0.0,
        })
    }

    /// Adds `r`'s rows; writes a batch when one is full.
    pub(crate) fn push(&mut self, r: &FinishedRequest) -> Result<(), SweepError> {
        self.requests.push(r);
        self.nodes.push(r);
        if let Some(t) = &mut self.tokens {
            t.push(r);
        }
        let full = self.requests.len() >= BATCH_ROWS
            || self.nodes.len() >= BATCH_ROWS
            || self.tokens.as_ref().is_some_and(|t| t.len() >= BATCH_ROWS);
        if full { self.flush() } else { Ok(()) }
    }

    /// The run's columns for `rows` rows: slices of arrays built once (they
    /// are constant), so a batch allocates nothing for them; built as long as
    /// the first batch needs (a one-request run builds one row).
    fn run_columns(&mut self, rows: usize) -> Vec<ArrayRef> {
        if self.run_cache.first().is_none_or(|c| c.len() < rows) {
            self.run_cache = self.run.columns(rows);
        }
        self.run_cache.iter().map(|c| c.slice(0, rows)).collect()
    }

    /// Writes the rows gathered so far.
    fn flush(&mut self) -> Result<(), SweepError> {
        let start = Instant::now();
        for k in 0..self.parts.len() {
            let rows = match self.parts[k].table {
                Table::Requests => self.requests.len(),
                Table::Nodes => self.nodes.len(),
                Table::Tokens => self.tokens.as_ref().map_or(0, TokenRows::len),
            };
            if rows == 0 {
                continue;
            }
            let run = self.run_columns(rows);
            let batch: RecordBatch = match (self.parts[k].table, &mut self.tokens) {
                (Table::Requests, _) => self.requests.finish(run),
                (Table::Nodes, _) => self.nodes.finish(run),
                (Table::Tokens, Some(t)) => t.finish(run),
                (Table::Tokens, None) => continue,
            };
            let part = &mut self.parts[k];
            self.rows += batch.num_rows() as u64;
            part.writer.write(&batch).map_err(|e| io_err(part.writer.inner().path())(std::io::Error::other(e)))?;
        }
        self.encode_s += start.elapsed().as_secs_f64();
        Ok(())
    }

    /// Writes the rest and closes the parts; the collector commits them.
    pub(crate) fn finish(mut self) -> Result<(Vec<TmpFile>, u64, f64), SweepError> {
        self.flush()?;
        let start = Instant::now();
        let mut files = Vec::new();
        for part in self.parts {
            let path = part.writer.inner().path().to_owned();
            files.push(part.writer.into_inner().map_err(|e| io_err(&path)(std::io::Error::other(e)))?);
        }
        Ok((files, self.rows, self.encode_s + start.elapsed().as_secs_f64()))
    }
}
