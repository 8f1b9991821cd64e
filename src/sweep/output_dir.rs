//! The output folder: where each file goes ([`Layout`]), files that are
//! never seen half-written ([`TmpFile`], over [`AtomicFile`]), and the folder's plan
//! identity, checked before a sweep writes anything.
//!
//! **Identity.** `.blis-sweep.json` names the plan whose results the folder
//! holds: its `plan_hash`, the hash of the plan file's bytes and of every
//! scenario file it names (a folder from before this file existed is
//! identified by its `manifest.json`). A sweep of another plan is refused,
//! since its runs would not share a grid with the ones there (the tables'
//! schema is the same for every plan, but a folder's `runs.parquet` and
//! `manifest.json` describe one plan); with `--force` every file of the
//! other plan is removed first. An edited plan that keeps its override keys
//! and every run the folder holds (values added, comments or order changed)
//! is the same plan grown: it resumes, reusing those runs. Any other edit is
//! refused: it would drop finished runs, which only `--force` may. The workload is not
//! part of the identity: its content is in every run id, so a workload
//! rewritten in place gives new runs, and the runs of the old content (ids no
//! longer in the plan) are removed like any other run not in the plan.
//! With `--force` the summaries (`runs.parquet`, `manifest.json`,
//! `capacity.parquet`, `report.html`) are removed before any run starts, so
//! an interrupted forced sweep never leaves old ones beside its new runs.
//!
//! **Temporary files** are named `.NAME.tmp-<pid>` beside their target, so
//! two processes never share one, and removed on every error path. A sweep
//! holds the folder's lock ([`super::lock`]) before it looks at anything, so
//! every temporary file it finds then was left by a process that died, and
//! is removed.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::SweepError;
use super::grid::Plan;
use crate::atomic::AtomicFile;

/// The per-run tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Table {
    /// One row per request DAG.
    Requests,
    /// One row per llm call.
    Nodes,
    /// Per-token latencies (`--tokens`).
    Tokens,
}

impl Table {
    pub(crate) const ALL: [Table; 3] = [Table::Requests, Table::Nodes, Table::Tokens];

    pub(crate) fn dir(self) -> &'static str {
        match self {
            Table::Requests => "requests",
            Table::Nodes => "nodes",
            Table::Tokens => "tokens",
        }
    }
}

/// The identity file's name.
const IDENTITY: &str = ".blis-sweep.json";

/// The files a sweep writes from all its runs at its end (the runs table and
/// manifest, a capacity search's table, the report): `--force` removes them
/// before any run starts.
const SUMMARIES: [&str; 5] = ["runs.parquet", "manifest.json", "capacity.parquet", "report.html", "classes.parquet"];

/// Paths of the sweep's outputs.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) root: PathBuf,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SweepError + '_ {
    move |error| SweepError::Io { path: path.display().to_string(), error }
}

fn is_tmp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

/// Whether `name` is a run id (16 hex digits): only those are removed as
/// runs of another plan, never a file someone else put in the folder.
fn is_run_id(name: &str) -> bool {
    name.len() == 16 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Layout {
    pub(crate) fn run_dir(&self, run_id: &str) -> PathBuf {
        self.root.join("runs").join(run_id)
    }
    pub(crate) fn part(&self, table: Table, run_id: &str) -> PathBuf {
        self.root.join(table.dir()).join(format!("part-{run_id}.parquet"))
    }
    pub(crate) fn status(&self, run_id: &str) -> PathBuf {
        self.run_dir(run_id).join("status.json")
    }

    /// Removes what an earlier execution of run `run_id` wrote, `status.json`
    /// first: from then on the run counts as not finished, whatever happens.
    pub(crate) fn discard(&self, run_id: &str) -> Result<(), SweepError> {
        let dir = self.run_dir(run_id);
        let files = std::iter::once(self.status(run_id))
            .chain(Table::ALL.map(|t| self.part(t, run_id)))
            .chain(["metrics.json", "timing.json", "results.jsonl", "steps.jsonl"].map(|n| dir.join(n)));
        for path in files {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err(&path)(e)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Creates the folders, removes what dead processes left (temporary
    /// files, spooled workloads) and checks the folder's plan identity, then
    /// records this plan's. With `force`, another plan's results are removed
    /// instead of refused. Call with the lock held.
    pub(crate) fn claim(&self, plan: &Plan, force: bool) -> Result<(), SweepError> {
        for dir in std::iter::once(self.root.join("runs")).chain(Table::ALL.map(|t| self.root.join(t.dir()))) {
            std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        }
        self.remove_leftovers()?;
        let found = self.identity()?;
        if let Some(found) = found.filter(|h| *h != plan.plan_hash)
            && !self.grown_into(plan)?
        {
            if !force {
                return Err(SweepError::OtherPlan {
                    dir: self.root.display().to_string(),
                    found,
                    ours: plan.plan_hash.clone(),
                });
            }
            // Every run goes (the ones of this plan are redone anyway, with
            // `--force`).
            self.remove_runs_except(&HashSet::new())?;
        }
        if force {
            // Every run is redone: the summaries describe the old runs, and
            // a sweep stopped part-way must not leave them beside new ones.
            // They go before any run starts; the sweep's end writes them anew.
            for name in SUMMARIES {
                remove_if_there(&self.root.join(name))?;
            }
        }
        let identity = serde_json::json!({
            "name": plan.name,
            "plan": plan.file.display().to_string(),
            "plan_hash": plan.plan_hash,
            "columns": plan.override_keys,
        });
        write_atomic(&self.root.join(IDENTITY), format!("{identity}\n").as_bytes())
    }

    /// Whether the folder's plan was edited into `plan` without losing
    /// anything: the same table columns (override keys), and every run in the
    /// folder still one of `plan`'s (values were added, or only comments or
    /// the order changed). Such a folder is resumed as it is.
    fn grown_into(&self, plan: &Plan) -> Result<bool, SweepError> {
        let Ok(text) = std::fs::read_to_string(self.root.join(IDENTITY)) else { return Ok(false) };
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else { return Ok(false) };
        if value.get("columns") != Some(&serde_json::json!(plan.override_keys)) {
            return Ok(false);
        }
        let ours: HashSet<&str> = plan.cells.iter().map(|c| c.run_id.as_str()).collect();
        let runs = self.root.join("runs");
        for e in std::fs::read_dir(&runs).map_err(io_err(&runs))? {
            let name = e.map_err(io_err(&runs))?.file_name().to_string_lossy().into_owned();
            if is_run_id(&name) && !ours.contains(name.as_str()) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The plan hash the folder is marked with; `unknown` for sweep results
    /// without one; `None` for a folder without results.
    fn identity(&self) -> Result<Option<String>, SweepError> {
        let hash_in = |name: &str| -> Option<String> {
            let text = std::fs::read_to_string(self.root.join(name)).ok()?;
            let value: serde_json::Value = serde_json::from_str(&text).ok()?;
            value["plan_hash"].as_str().map(str::to_owned)
        };
        if let Some(h) = hash_in(IDENTITY).or_else(|| hash_in("manifest.json")) {
            return Ok(Some(h));
        }
        // Results: a summary, a part, a run folder (only those count, not
        // whatever else someone put there).
        let mut any = self.root.join("runs.parquet").exists();
        for dir in std::iter::once("runs").chain(Table::ALL.map(Table::dir)) {
            let path = self.root.join(dir);
            for e in std::fs::read_dir(&path).map_err(io_err(&path))? {
                let e = e.map_err(io_err(&path))?;
                let name = e.file_name().to_string_lossy().into_owned();
                let kind = e.file_type().map_err(io_err(&e.path()))?;
                any |= if dir == "runs" {
                    kind.is_dir() && is_run_id(&name)
                } else {
                    kind.is_file() && name.starts_with("part-") && name.ends_with(".parquet")
                };
            }
        }
        Ok(any.then(|| "unknown".to_owned()))
    }

    /// Removes temporary files and spooled workloads: with the lock held, the
    /// processes that wrote them are gone.
    fn remove_leftovers(&self) -> Result<(), SweepError> {
        let mut dirs: Vec<_> =
            std::iter::once(self.root.clone()).chain(Table::ALL.map(|t| self.root.join(t.dir()))).collect();
        let runs = self.root.join("runs");
        for e in std::fs::read_dir(&runs).map_err(io_err(&runs))? {
            let e = e.map_err(io_err(&runs))?;
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
        for dir in dirs {
            for e in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
                let e = e.map_err(io_err(&dir))?;
                let name = e.file_name().to_string_lossy().into_owned();
                let spool = name.starts_with(".workload-") && dir == self.root;
                if (is_tmp_name(&name) || spool) && e.file_type().is_ok_and(|t| t.is_file()) {
                    remove_if_there(&e.path())?;
                }
            }
        }
        Ok(())
    }

    /// Removes the parts and run folders of every run not in `keep`.
    pub(crate) fn remove_runs_except(&self, keep: &HashSet<&str>) -> Result<(), SweepError> {
        for table in Table::ALL {
            let dir = self.root.join(table.dir());
            for e in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
                let e = e.map_err(io_err(&dir))?;
                let name = e.file_name().to_string_lossy().into_owned();
                let id = name.strip_prefix("part-").and_then(|n| n.strip_suffix(".parquet"));
                if id.is_some_and(|id| is_run_id(id) && !keep.contains(id)) {
                    remove_if_there(&e.path())?;
                }
            }
        }
        let runs = self.root.join("runs");
        for e in std::fs::read_dir(&runs).map_err(io_err(&runs))? {
            let e = e.map_err(io_err(&runs))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if is_run_id(&name) && !keep.contains(name.as_str()) {
                std::fs::remove_dir_all(e.path()).map_err(io_err(&e.path()))?;
            }
        }
        Ok(())
    }
}

fn remove_if_there(path: &Path) -> Result<(), SweepError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(path)(e)),
        _ => Ok(()),
    }
}

/// A sweep output written through [`AtomicFile`] (renamed into place by
/// [`TmpFile::commit`]; dropped uncommitted, an error or a cancelled run, the
/// temporary file is removed), its errors naming the file.
#[derive(Debug)]
pub(crate) struct TmpFile(AtomicFile);

impl TmpFile {
    pub(crate) fn create(path: &Path) -> Result<TmpFile, SweepError> {
        AtomicFile::create(path).map(TmpFile).map_err(io_err(path))
    }

    /// The file being written.
    pub(crate) fn tmp(&self) -> &Path {
        self.0.tmp()
    }

    /// The file it becomes.
    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }

    pub(crate) fn commit(self) -> Result<(), SweepError> {
        let path = self.0.path().to_owned();
        self.0.commit().map_err(io_err(&path))
    }
}

impl Write for TmpFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SweepError> {
    let mut file = TmpFile::create(path)?;
    file.write_all(bytes).map_err(io_err(path))?;
    file.commit()
}
