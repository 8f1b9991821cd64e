//! The collector: one thread that owns every output file of the sweep.
//! Workers send it record batches and run outcomes over a bounded channel;
//! it writes each run's rows to its own Parquet part
//! (`requests/part-<run_id>.parquet`, under a temporary name until the run
//! is complete), then the run's JSON files, `status.json` last: a run is
//! finished exactly when its `status.json` exists, which is what a restart
//! after `kill -9` checks. One part per run keeps every file's bytes
//! independent of `--jobs` and of what else ran at the same time.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use crossbeam_channel::Receiver;
use parquet::arrow::ArrowWriter;

use super::tables::{RunStatus, writer_properties};
use crate::metrics::Metrics;

/// The per-run tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Table {
    Requests,
    Tokens,
}

impl Table {
    fn dir(self) -> &'static str {
        match self {
            Table::Requests => "requests",
            Table::Tokens => "tokens",
        }
    }
}

/// What workers tell the collector.
pub(crate) enum Message {
    /// Rows of run `run_id` for `table`.
    Rows { run_id: String, table: Table, batch: RecordBatch },
    /// Run `run_id` is over.
    Done { run_id: String, status: RunStatus, metrics: Option<Box<Metrics>>, wall_s: f64 },
}

/// Paths of the sweep's outputs.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) root: PathBuf,
}

impl Layout {
    pub(crate) fn run_dir(&self, run_id: &str) -> PathBuf {
        self.root.join("runs").join(run_id)
    }
    pub(crate) fn part(&self, table: Table, run_id: &str) -> PathBuf {
        self.root.join(table.dir()).join(format!("part-{run_id}.parquet"))
    }
    fn part_tmp(&self, table: Table, run_id: &str) -> PathBuf {
        self.root.join(table.dir()).join(format!(".part-{run_id}.parquet.tmp"))
    }
    pub(crate) fn status(&self, run_id: &str) -> PathBuf {
        self.run_dir(run_id).join("status.json")
    }

    /// Creates the directories and removes temporary files a killed sweep left.
    pub(crate) fn prepare(&self, tables: &[Table]) -> std::io::Result<()> {
        std::fs::create_dir_all(self.root.join("runs"))?;
        for table in tables {
            let dir = self.root.join(table.dir());
            std::fs::create_dir_all(&dir)?;
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                if path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".tmp")) {
                    std::fs::remove_file(path)?;
                }
            }
        }
        Ok(())
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
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
/// the first I/O error, after which it drains the channel so workers never
/// block.
pub(crate) fn collect(
    layout: &Layout,
    schemas: &[(Table, SchemaRef)],
    rx: Receiver<Message>,
    on_done: &mut dyn FnMut(&str, &RunStatus, f64, u64),
) -> std::io::Result<CollectorStats> {
    let mut stats = CollectorStats::default();
    let props: Vec<_> = schemas.iter().map(|(_, s)| writer_properties(s)).collect();
    let open_part = |table: Table, run_id: &str| -> std::io::Result<ArrowWriter<File>> {
        let k = schemas.iter().position(|(t, _)| *t == table).expect("a table of this sweep");
        let file = File::create(layout.part_tmp(table, run_id))?;
        ArrowWriter::try_new(file, schemas[k].1.clone(), Some(props[k].clone())).map_err(std::io::Error::other)
    };
    // Open parts by (run, table); looked up by key only, never iterated for output.
    let mut open: HashMap<(String, Table), ArrowWriter<File>> = HashMap::new();
    let mut first_error = None;
    for message in rx {
        if first_error.is_some() {
            continue;
        }
        let busy = std::time::Instant::now();
        let result = match message {
            Message::Rows { run_id, table, batch } => (|| {
                stats.rows += batch.num_rows() as u64;
                let key = (run_id, table);
                if !open.contains_key(&key) {
                    let writer = open_part(table, &key.0)?;
                    open.insert(key.clone(), writer);
                }
                open.get_mut(&key).expect("just opened").write(&batch).map_err(std::io::Error::other)
            })(),
            Message::Done { run_id, status, metrics, wall_s } => (|| {
                for &(table, _) in schemas {
                    let writer = match open.remove(&(run_id.clone(), table)) {
                        Some(w) => Some(w),
                        // An ok run with no llm node still gets its (empty) parts.
                        None if status.status == "ok" => Some(open_part(table, &run_id)?),
                        None => None,
                    };
                    if let Some(w) = writer {
                        w.close().map_err(std::io::Error::other)?;
                        std::fs::rename(layout.part_tmp(table, &run_id), layout.part(table, &run_id))?;
                    }
                }
                let dir = layout.run_dir(&run_id);
                std::fs::create_dir_all(&dir)?;
                if let Some(m) = &metrics {
                    let mut json = serde_json::to_string_pretty(m).map_err(std::io::Error::other)?;
                    json.push('\n');
                    write_atomic(&dir.join("metrics.json"), json.as_bytes())?;
                }
                write_atomic(&dir.join("timing.json"), format!("{{\"wall_s\": {wall_s}}}\n").as_bytes())?;
                let mut json = serde_json::to_string_pretty(&status).map_err(std::io::Error::other)?;
                json.push('\n');
                write_atomic(&layout.status(&run_id), json.as_bytes())?;
                on_done(&run_id, &status, wall_s, metrics.as_ref().map_or(0, |m| m.injected_requests));
                Ok(())
            })(),
        };
        stats.busy_s += busy.elapsed().as_secs_f64();
        if let Err(e) = result {
            first_error = Some(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}
