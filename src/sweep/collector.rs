//! The collector: one thread that owns every Parquet part and run record of
//! the sweep. Workers send it record batches and run outcomes over a bounded
//! channel; it writes each run's rows to its own Parquet part
//! (`requests/part-<run_id>.parquet`, under a temporary name until the run
//! is complete), then the run's JSON files, `status.json` last: a run is
//! finished exactly when its `status.json` exists, which is what a restart
//! after `kill -9` checks. One part per run keeps every file's bytes
//! independent of `--jobs` and of what else ran at the same time.
//!
//! On the first error (its own, or one a worker reports) it raises the
//! sweep's cancel flag, so workers stop instead of simulating runs whose
//! results could not be kept, removes the temporary parts it had open, and
//! drains the channel so no worker blocks. Runs finished before stay valid.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use crossbeam_channel::Receiver;
use parquet::arrow::ArrowWriter;

use super::executor::SweepError;
use super::output_dir::{Layout, Table, TmpFile, io_err, write_atomic};
use super::resume::RunStatus;
use super::tables::writer_properties;
use crate::metrics::Metrics;

/// What workers tell the collector.
pub(crate) enum Message {
    /// Rows of run `run_id` for `table`.
    Rows { run_id: String, table: Table, batch: RecordBatch },
    /// Run `run_id` is over.
    Done { run_id: String, status: Box<RunStatus>, metrics: Option<Box<Metrics>>, wall_s: f64 },
    /// A worker could not write a file of its own: the sweep stops.
    Fatal(SweepError),
}

/// What the collector did, for the benchmark and the progress line.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CollectorStats {
    /// Rows written, all tables.
    pub(crate) rows: u64,
    /// Seconds spent handling messages (not waiting for them).
    pub(crate) busy_s: f64,
}

/// Runs the collector until every sender is gone. `on_done(run_id, status,
/// wall_s, requests)` is called after each run's files are in place. Returns
/// the first error, after which it sets `cancel` and drains the channel.
pub(crate) fn collect(
    layout: &Layout,
    schemas: &[(Table, SchemaRef)],
    rx: Receiver<Message>,
    cancel: &AtomicBool,
    on_done: &mut dyn FnMut(&str, &RunStatus, f64, u64),
) -> Result<CollectorStats, SweepError> {
    let mut stats = CollectorStats::default();
    let props: Vec<_> = schemas.iter().map(|(_, s)| writer_properties(s)).collect();
    let open_part = |table: Table, run_id: &str| -> Result<ArrowWriter<TmpFile>, SweepError> {
        let k = schemas.iter().position(|(t, _)| *t == table).expect("a table of this sweep");
        let file = TmpFile::create(&layout.part(table, run_id))?;
        let tmp = file.tmp().to_owned();
        ArrowWriter::try_new(file, schemas[k].1.clone(), Some(props[k].clone()))
            .map_err(|e| io_err(&tmp)(std::io::Error::other(e)))
    };
    let parquet_err = |table: Table, run_id: &str| {
        let path = layout.part(table, run_id);
        move |e: parquet::errors::ParquetError| io_err(&path)(std::io::Error::other(e))
    };
    // Open parts by (run, table); looked up by key only, never iterated for
    // output. Dropped, a part's temporary file is removed.
    let mut open: HashMap<(String, Table), ArrowWriter<TmpFile>> = HashMap::new();
    let mut first_error = None;
    for message in rx {
        if first_error.is_some() {
            continue;
        }
        let busy = std::time::Instant::now();
        let result = match message {
            Message::Fatal(e) => Err(e),
            Message::Rows { run_id, table, batch } => (|| {
                stats.rows += batch.num_rows() as u64;
                let key = (run_id, table);
                if !open.contains_key(&key) {
                    let writer = open_part(table, &key.0)?;
                    open.insert(key.clone(), writer);
                }
                open.get_mut(&key).expect("just opened").write(&batch).map_err(parquet_err(table, &key.0))
            })(),
            Message::Done { run_id, status, metrics, wall_s } => (|| {
                let ok = status.status == "ok";
                for &(table, _) in schemas {
                    let writer = match open.remove(&(run_id.clone(), table)) {
                        Some(w) if ok => Some(w),
                        // A failed run's rows are not kept (dropped, the
                        // temporary file goes): a part holds a whole run.
                        Some(_) => None,
                        // An ok run with no llm node still gets its (empty) parts.
                        None if ok => Some(open_part(table, &run_id)?),
                        None => None,
                    };
                    if let Some(w) = writer {
                        w.into_inner().map_err(parquet_err(table, &run_id))?.commit()?;
                    }
                }
                let dir = layout.run_dir(&run_id);
                std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
                let json_err = |e: serde_json::Error| io_err(&dir)(e.into());
                if let Some(m) = &metrics {
                    let mut json = serde_json::to_string_pretty(m).map_err(json_err)?;
                    json.push('\n');
                    write_atomic(&dir.join("metrics.json"), json.as_bytes())?;
                }
                write_atomic(&dir.join("timing.json"), format!("{{\"wall_s\": {wall_s}}}\n").as_bytes())?;
                let mut json = serde_json::to_string_pretty(&status).map_err(json_err)?;
                json.push('\n');
                write_atomic(&layout.status(&run_id), json.as_bytes())?;
                on_done(&run_id, &status, wall_s, metrics.as_ref().map_or(0, |m| m.injected_requests));
                Ok(())
            })(),
        };
        stats.busy_s += busy.elapsed().as_secs_f64();
        if let Err(e) = result {
            cancel.store(true, Ordering::Relaxed);
            // Unfinished parts go now (their temporary files with them).
            open.clear();
            first_error = Some(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}
