//! Reading a sweep's output folder for the report — or a sharded sweep's
//! parent folder, its `shard=I/` folders read as one sweep: the manifest
//! (the shards' runs interleaved, shard by shard, back into grid order: a
//! shard holds the cells whose grid index is I modulo N), a run's metrics,
//! a Parquet table's rows (every column, as JSON values; the shards' rows
//! one after another) and the runs table's columns a point needs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::points::{METRICS, RunRow};
use super::{ReportError, file_err};
use crate::metrics::Metrics;

/// The folders a report reads.
pub(super) struct Folders {
    /// The folder the report is written into.
    pub(super) root: PathBuf,
    /// `root`, or its `shard=I` folders in the order of I.
    pub(super) dirs: Vec<PathBuf>,
}

impl Folders {
    /// `dir`'s: itself when it holds a manifest (or no shards), else its
    /// shards (`shard=I/` with a manifest each).
    pub(super) fn of(dir: &Path) -> Folders {
        let shards = shards(dir);
        let dirs = if dir.join("manifest.json").exists() || shards.is_empty() {
            vec![dir.to_path_buf()]
        } else {
            shards.iter().map(|s| dir.join(s)).collect()
        };
        Folders { root: dir.to_path_buf(), dirs }
    }

    /// Sharded: more than the root.
    pub(super) fn sharded(&self) -> bool {
        self.dirs.first() != Some(&self.root)
    }

    /// The folders holding `file`.
    pub(super) fn with(&self, file: &str) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join(file)).filter(|p| p.exists()).collect()
    }

    /// The manifest, the shards' merged: their runs interleaved (the first
    /// of each shard, then the second of each, …), each run's `folder` its
    /// shard's index; the rest the first shard's. Shards of different plans
    /// (`plan_hash`) are an error. `None`: no manifest.
    pub(super) fn manifest(&self) -> Result<Option<Value>, ReportError> {
        let mut merged: Option<Value> = None;
        let mut runs: Vec<Vec<Value>> = Vec::new();
        for (i, dir) in self.dirs.iter().enumerate() {
            let path = dir.join("manifest.json");
            if !path.exists() {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|e| file_err(&path, e))?;
            let mut v: Value = serde_json::from_str(&text).map_err(|e| file_err(&path, e))?;
            let mut own = match v.get_mut("runs").map(Value::take) {
                Some(Value::Array(r)) => r,
                _ => Vec::new(),
            };
            for r in &mut own {
                r["folder"] = Value::from(i);
            }
            runs.push(own);
            match &merged {
                None => merged = Some(v),
                Some(first) if first["plan_hash"] != v["plan_hash"] => {
                    return Err(file_err(
                        &path,
                        format!(
                            "plan_hash {} differs from {}'s {}: shards of different plans",
                            v["plan_hash"],
                            self.dirs[0].join("manifest.json").display(),
                            first["plan_hash"]
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        let Some(mut merged) = merged else { return Ok(None) };
        let mut all = Vec::new();
        for k in 0..runs.iter().map(Vec::len).max().unwrap_or(0) {
            all.extend(runs.iter().filter_map(|r| r.get(k)).cloned());
        }
        merged["runs"] = Value::Array(all);
        Ok(Some(merged))
    }

    /// Every folder's rows of table `file`, one folder after another.
    pub(super) fn rows(&self, file: &str) -> Result<Vec<BTreeMap<String, Value>>, ReportError> {
        let mut rows = Vec::new();
        for path in self.with(file) {
            rows.extend(read_rows(&path)?);
        }
        Ok(rows)
    }
}

/// A sharded sweep's shard folders in `dir` (`shard=I` with a manifest),
/// by I.
fn shards(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut shards: Vec<(usize, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let i = name.strip_prefix("shard=")?.parse().ok()?;
            e.path().join("manifest.json").exists().then_some((i, name))
        })
        .collect();
    shards.sort();
    shards.into_iter().map(|(_, n)| n).collect()
}

/// The metrics of run `run_id`, which the manifest lists as finished: a
/// missing or unreadable file is an error naming it.
pub(super) fn run_metrics(dir: &Path, run_id: &str) -> Result<Metrics, ReportError> {
    let path = dir.join("runs").join(run_id).join("metrics.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::NotFound { "missing".to_owned() } else { e.to_string() };
        file_err(&path, format!("{why}, though manifest.json lists the run as ok; run the sweep again to redo it"))
    })?;
    serde_json::from_str(&text)
        .map_err(|e| file_err(&path, format!("not a run's metrics ({e}); run the sweep again to redo the run")))
}

/// Rows of a Parquet file as JSON values by column name.
pub(super) fn read_rows(path: &Path) -> Result<Vec<BTreeMap<String, Value>>, ReportError> {
    use arrow_array::types::Int32Type;
    use arrow_array::{Array, BooleanArray, DictionaryArray, Float64Array, Int64Array, StringArray};
    let mut rows = Vec::new();
    for batch in decode(path, None)? {
        for i in 0..batch.num_rows() {
            let mut row = BTreeMap::new();
            for (field, col) in batch.schema().fields().iter().zip(batch.columns()) {
                let any = col.as_any();
                let v = if col.is_null(i) {
                    Value::Null
                } else if let Some(a) = any.downcast_ref::<Float64Array>() {
                    serde_json::Number::from_f64(a.value(i)).map_or(Value::Null, Value::Number)
                } else if let Some(a) = any.downcast_ref::<Int64Array>() {
                    Value::from(a.value(i))
                } else if let Some(a) = any.downcast_ref::<StringArray>() {
                    Value::from(a.value(i))
                } else if let Some(a) = any.downcast_ref::<DictionaryArray<Int32Type>>() {
                    a.downcast_dict::<StringArray>()
                        .map_or(Value::Null, |d| Value::from(d.values().value(a.keys().value(i) as usize)))
                } else if let Some(a) = any.downcast_ref::<BooleanArray>() {
                    Value::from(a.value(i))
                } else {
                    Value::Null
                };
                row.insert(field.name().clone(), v);
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The record batches of the Parquet file at `path`. The parquet crate
/// (60.1) can panic on a corrupt file rather than fail (a mutated table's
/// null bitmap read out of bounds in arrow-buffer's bit-chunk iterator,
/// found by fuzzing, about one table in 600): that panic is caught and
/// reported as the file's error. Its message is kept off stderr while the
/// decode runs by a silent panic hook, the previous one put back after: a
/// report is written on one thread, after a sweep's workers have finished.
fn decode(path: &Path, columns: Option<&[&str]>) -> Result<Vec<arrow_array::RecordBatch>, ReportError> {
    let read = || -> Result<Vec<arrow_array::RecordBatch>, ReportError> {
        let file = std::fs::File::open(path).map_err(|e| file_err(path, e))?;
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| match columns {
                Some(names) => {
                    let mask = parquet::arrow::ProjectionMask::columns(b.parquet_schema(), names.iter().copied());
                    b.with_projection(mask).build()
                }
                None => b.build(),
            })
            .map_err(|e| file_err(path, e))?;
        reader.map(|batch| batch.map_err(|e| file_err(path, e))).collect()
    };
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(read);
    std::panic::set_hook(previous);
    result.unwrap_or_else(|_| Err(file_err(path, "not a readable Parquet table (its data is corrupt)")))
}

/// The runs table's columns a point needs, row by row (a column the table
/// lacks reads as null).
pub(super) fn run_rows(path: &Path) -> Result<Vec<RunRow>, ReportError> {
    use arrow_array::types::Int32Type;
    use arrow_array::{Array, ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int64Array, StringArray};
    let head = ["run_id", "scenario", "overrides", "concurrency", "rate_scale", "seed", "status", "gpus", "slo_met"];
    let names: Vec<&str> = head.iter().chain(METRICS.iter()).copied().collect();
    let text = |c: Option<&ArrayRef>, i: usize| -> String {
        let Some(c) = c.filter(|c| !c.is_null(i)) else { return String::new() };
        if let Some(a) = c.as_any().downcast_ref::<StringArray>() {
            a.value(i).to_owned()
        } else if let Some(a) = c.as_any().downcast_ref::<DictionaryArray<Int32Type>>() {
            a.downcast_dict::<StringArray>()
                .map_or_else(String::new, |d| d.values().value(a.keys().value(i) as usize).to_owned())
        } else {
            String::new()
        }
    };
    let int = |c: Option<&ArrayRef>, i: usize| {
        c.filter(|c| !c.is_null(i)).and_then(|c| c.as_any().downcast_ref::<Int64Array>()).map(|a| a.value(i))
    };
    let float = |c: Option<&ArrayRef>, i: usize| {
        let c = c.filter(|c| !c.is_null(i))?;
        c.as_any()
            .downcast_ref::<Float64Array>()
            .map(|a| a.value(i))
            .or_else(|| c.as_any().downcast_ref::<Int64Array>().map(|a| a.value(i) as f64))
    };
    let mut rows = Vec::new();
    for batch in decode(path, Some(&names))? {
        let col = |n: &str| batch.column_by_name(n);
        for i in 0..batch.num_rows() {
            let mut metrics = [None; METRICS.len()];
            for (m, name) in metrics.iter_mut().zip(METRICS) {
                *m = float(col(name), i);
            }
            rows.push(RunRow {
                run_id: text(col("run_id"), i),
                scenario: text(col("scenario"), i),
                overrides: text(col("overrides"), i),
                concurrency: int(col("concurrency"), i),
                rate_scale: float(col("rate_scale"), i).unwrap_or(1.0),
                seed: int(col("seed"), i).unwrap_or(0),
                status: text(col("status"), i),
                gpus: int(col("gpus"), i),
                slo_met: col("slo_met")
                    .filter(|c| !c.is_null(i))
                    .and_then(|c| c.as_any().downcast_ref::<BooleanArray>())
                    .map(|a| a.value(i)),
                metrics,
            });
        }
    }
    Ok(rows)
}
