//! Which share of a sweep's grid this process runs (`--shard`), for a sweep
//! spread over machines, and the output folder's record of how many shares
//! the sweep has (`OUTPUT/shards.json`).
//!
//! Shard `I` of `N` runs the grid's runs whose index is `I` modulo `N`. The
//! index under a scheduler is the task's own (`SLURM_ARRAY_TASK_ID`,
//! `JOB_COMPLETION_INDEX`), so task 2 is shard 2 whichever submission runs
//! it. The count is never read from the scheduler: a Slurm array resubmitted
//! for one cancelled task (`sbatch --array=2`) reports an array of one
//! (`SLURM_ARRAY_TASK_COUNT=1`, `MIN=MAX=2`), a stepped array (`0-6:2`) a
//! count that is not its largest index's, and a Kubernetes Indexed Job no
//! count at all. It is what the user states (`--shard-count`) or, once any
//! shard has started, what that shard recorded; a shard whose count differs
//! from the record is refused before it writes anything.

use std::path::{Path, PathBuf};

/// The record's name in the sweep's output folder.
const RECORD: &str = "shards.json";

/// What `--shard` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardSpec {
    /// `--shard I/N`.
    Given {
        /// `I`.
        index: usize,
        /// `N`.
        count: usize,
    },
    /// `--shard auto`, with `--shard-count` if given.
    Auto {
        /// `--shard-count`.
        count: Option<usize>,
    },
}

/// Why a shard cannot be worked out, or does not fit its output folder.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// `--shard auto` outside a scheduler.
    #[error(
        "--shard auto: neither JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) nor SLURM_ARRAY_TASK_ID (a Slurm array) is set"
    )]
    NoScheduler,
    /// `--shard auto` with no count stated and none recorded yet.
    #[error(
        "--shard auto: give --shard-count N, the sweep's number of shards (the array's size, the Job's completions): the scheduler's own count is not the sweep's (a resubmitted task sees an array of one), and {record} does not exist yet"
    )]
    NoCount {
        /// The record that would have said it.
        record: String,
    },
    /// A scheduler variable that is not a number.
    #[error("--shard auto: {var} `{value}` is not a non-negative integer")]
    NotANumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// An index past the count, or a count of 0.
    #[error("--shard: need 0 <= I < N, got {index}/{count}")]
    OutOfRange {
        /// `I`.
        index: usize,
        /// `N`.
        count: usize,
    },
    /// The scheduler's task set does not fit the sweep's shards.
    #[error("--shard auto: {0}")]
    Inconsistent(String),
    /// `--shard I/N` and `--shard-count` say different counts.
    #[error("--shard {index}/{count}: --shard-count {stated} says another number of shards")]
    TwoCounts {
        /// `I`.
        index: usize,
        /// `N`.
        count: usize,
        /// `--shard-count`.
        stated: usize,
    },
    /// The output folder was sharded another number of ways.
    #[error(
        "{record}: this output holds a sweep of {recorded} shards, this shard says {count}: use --shard-count {recorded}, or another output folder"
    )]
    CountMismatch {
        /// The record.
        record: String,
        /// Its count.
        recorded: usize,
        /// This shard's.
        count: usize,
    },
    /// The record cannot be read or written, or does not parse.
    #[error("{path}: {reason}")]
    Record {
        /// The record.
        path: String,
        /// Why.
        reason: String,
    },
}

/// This process's shard `(I, N)`: from `spec`, the scheduler's variables
/// (`env`) and the record in `output` (read only: [`record`] writes it).
pub fn resolve(
    spec: ShardSpec,
    env: &dyn Fn(&str) -> Option<String>,
    output: &Path,
) -> Result<(usize, usize), ShardError> {
    let record = recorded(output)?;
    let (index, count) = match spec {
        ShardSpec::Given { index, count } => (index, count),
        ShardSpec::Auto { count: stated } => {
            let count = match stated.or(record) {
                Some(n) => n,
                None => return Err(ShardError::NoCount { record: path(output) }),
            };
            (scheduler_index(env, count)?, count)
        }
    };
    if count == 0 || index >= count {
        return Err(ShardError::OutOfRange { index, count });
    }
    if let Some(recorded) = record
        && recorded != count
    {
        return Err(ShardError::CountMismatch { record: path(output), recorded, count });
    }
    Ok((index, count))
}

/// The task's index, checked against the sweep's `count` shards.
fn scheduler_index(env: &dyn Fn(&str) -> Option<String>, count: usize) -> Result<usize, ShardError> {
    let number = |var: &'static str| -> Result<Option<usize>, ShardError> {
        env(var).map(|v| v.trim().parse().map_err(|_| ShardError::NotANumber { var, value: v.clone() })).transpose()
    };
    let last = count.saturating_sub(1);
    if let Some(index) = number("JOB_COMPLETION_INDEX")? {
        if index >= count {
            return Err(ShardError::Inconsistent(format!(
                "JOB_COMPLETION_INDEX {index} is not below --shard-count {count}: give the Job completions: {count}"
            )));
        }
        return Ok(index);
    }
    let Some(id) = number("SLURM_ARRAY_TASK_ID")? else { return Err(ShardError::NoScheduler) };
    let (min, max) = (number("SLURM_ARRAY_TASK_MIN")?, number("SLURM_ARRAY_TASK_MAX")?);
    // Read for their checks only: neither says which shard this is.
    let (tasks, _step) = (number("SLURM_ARRAY_TASK_COUNT")?, number("SLURM_ARRAY_TASK_STEP")?);
    if let Some(tasks) = tasks.filter(|&t| t > count) {
        return Err(ShardError::Inconsistent(format!(
            "the array has {tasks} tasks for the sweep's {count} shards: submit it as --array=0-{last}"
        )));
    }
    if min.is_some_and(|m| id < m) || max.is_some_and(|m| id > m) {
        return Err(ShardError::Inconsistent(format!(
            "SLURM_ARRAY_TASK_ID {id} is outside SLURM_ARRAY_TASK_MIN..MAX {}..{}",
            min.map_or("?".to_owned(), |m| m.to_string()),
            max.map_or("?".to_owned(), |m| m.to_string())
        )));
    }
    // Every task of an array reaching past the shards refuses, not only
    // those past it: half a sweep written is worse than none.
    let highest = max.unwrap_or(id).max(id);
    if highest >= count {
        return Err(ShardError::Inconsistent(format!(
            "the array reaches task {highest}, past the sweep's {count} shards (0..{last}): submit it as --array=0-{last}, or give --shard-count {}",
            highest + 1
        )));
    }
    Ok(id)
}

/// The count `output` records, if a shard has started there.
pub fn recorded(output: &Path) -> Result<Option<usize>, ShardError> {
    let file = output.join(RECORD);
    let bad = |reason: String| ShardError::Record { path: file.display().to_string(), reason };
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    match value.get("shard_count").and_then(serde_json::Value::as_u64) {
        Some(n) if n > 0 => Ok(Some(n as usize)),
        _ => Err(bad("shard_count: expected a positive integer".to_owned())),
    }
}

fn path(output: &Path) -> String {
    output.join(RECORD).display().to_string()
}

/// Records that the sweep in `output` has `count` shards, or checks that the
/// record says so. The record appears whole or not at all (written aside,
/// then linked into place, which fails if another shard's got there first:
/// then that one is read and compared).
pub(crate) fn record(output: &Path, count: usize) -> Result<(), ShardError> {
    let file = output.join(RECORD);
    let fail = |e: std::io::Error| ShardError::Record { path: file.display().to_string(), reason: e.to_string() };
    std::fs::create_dir_all(output).map_err(fail)?;
    let tmp: PathBuf = output.join(format!(".{RECORD}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, format!("{{\"shard_count\":{count}}}\n")).map_err(fail)?;
    let linked = std::fs::hard_link(&tmp, &file);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match recorded(output)? {
            Some(recorded) if recorded != count => {
                Err(ShardError::CountMismatch { record: file.display().to_string(), recorded, count })
            }
            _ => Ok(()),
        },
        Err(e) => Err(fail(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(name, _)| *name == k).map(|(_, v)| (*v).to_owned())
    }

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("blis-sweep-shard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    const ARRAY_0_3: &[(&str, &str)] = &[
        ("SLURM_ARRAY_TASK_ID", "2"),
        ("SLURM_ARRAY_TASK_COUNT", "4"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_MAX", "3"),
        ("SLURM_ARRAY_TASK_STEP", "1"),
    ];
    /// `sbatch --array=2`: the task resubmitted alone.
    const RESUBMITTED_2: &[(&str, &str)] = &[
        ("SLURM_ARRAY_TASK_ID", "2"),
        ("SLURM_ARRAY_TASK_COUNT", "1"),
        ("SLURM_ARRAY_TASK_MIN", "2"),
        ("SLURM_ARRAY_TASK_MAX", "2"),
        ("SLURM_ARRAY_TASK_STEP", "1"),
    ];

    #[test]
    fn a_task_is_the_shard_of_its_own_index_whichever_submission_runs_it() {
        let out = folder("index");
        let auto = |count| ShardSpec::Auto { count };
        assert_eq!(resolve(auto(Some(4)), &vars(ARRAY_0_3), &out).unwrap(), (2, 4));
        assert_eq!(resolve(auto(Some(4)), &vars(RESUBMITTED_2), &out).unwrap(), (2, 4));
        // No count stated, none recorded: refused, never the array's own.
        let e = resolve(auto(None), &vars(RESUBMITTED_2), &out).unwrap_err();
        assert!(e.to_string().contains("give --shard-count N"), "{e}");
        // Once a shard recorded it, a resubmitted task takes it from there.
        record(&out, 4).unwrap();
        assert_eq!(resolve(auto(None), &vars(RESUBMITTED_2), &out).unwrap(), (2, 4));
        let k8s: &[(&str, &str)] = &[("JOB_COMPLETION_INDEX", "3")];
        assert_eq!(resolve(auto(None), &vars(k8s), &out).unwrap(), (3, 4));
        assert!(matches!(resolve(auto(None), &vars(&[]), &out), Err(ShardError::NoScheduler)));
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn an_array_that_does_not_fit_the_shards_is_refused_by_every_task() {
        let out = folder("fit");
        // `--array=0-6:2` for 4 shards: tasks 0 and 2 refuse as 4 and 6 do.
        for id in ["0", "2", "4", "6"] {
            let env = move |k: &str| match k {
                "SLURM_ARRAY_TASK_ID" => Some(id.to_owned()),
                "SLURM_ARRAY_TASK_COUNT" => Some("4".to_owned()),
                "SLURM_ARRAY_TASK_MIN" => Some("0".to_owned()),
                "SLURM_ARRAY_TASK_MAX" => Some("6".to_owned()),
                "SLURM_ARRAY_TASK_STEP" => Some("2".to_owned()),
                _ => None,
            };
            let e = resolve(ShardSpec::Auto { count: Some(4) }, &env, &out).unwrap_err();
            assert!(e.to_string().contains("submit it as --array=0-3"), "task {id}: {e}");
        }
        let k8s: &[(&str, &str)] = &[("JOB_COMPLETION_INDEX", "8")];
        assert!(resolve(ShardSpec::Auto { count: Some(8) }, &vars(k8s), &out).is_err());
        // More tasks than shards (ids from 0: --array=0-4 for 4 shards is
        // caught by its MAX too), and a bad value of any variable.
        let many: &[(&str, &str)] = &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "5")];
        let e = resolve(ShardSpec::Auto { count: Some(4) }, &vars(many), &out).unwrap_err();
        assert!(e.to_string().contains("5 tasks for the sweep's 4 shards"), "{e}");
        let step: &[(&str, &str)] = &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_STEP", "-2")];
        assert!(matches!(
            resolve(ShardSpec::Auto { count: Some(4) }, &vars(step), &out),
            Err(ShardError::NotANumber { var: "SLURM_ARRAY_TASK_STEP", .. })
        ));
        let bad: &[(&str, &str)] = &[("SLURM_ARRAY_TASK_ID", "x")];
        assert!(matches!(
            resolve(ShardSpec::Auto { count: Some(4) }, &vars(bad), &out),
            Err(ShardError::NotANumber { .. })
        ));
        assert!(resolve(ShardSpec::Given { index: 3, count: 3 }, &vars(&[]), &out).is_err());
        assert!(!out.exists(), "resolving writes nothing");
    }

    #[test]
    fn a_shard_whose_count_is_not_the_recorded_one_is_refused() {
        let out = folder("record");
        record(&out, 4).unwrap();
        record(&out, 4).unwrap();
        assert!(matches!(record(&out, 8), Err(ShardError::CountMismatch { recorded: 4, count: 8, .. })));
        let e = resolve(ShardSpec::Given { index: 1, count: 8 }, &vars(&[]), &out).unwrap_err();
        assert!(e.to_string().contains("holds a sweep of 4 shards"), "{e}");
        assert_eq!(resolve(ShardSpec::Given { index: 1, count: 4 }, &vars(&[]), &out).unwrap(), (1, 4));
        std::fs::write(out.join(RECORD), "{}").unwrap();
        assert!(matches!(record(&out, 4), Err(ShardError::Record { .. })));
        let names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [RECORD], "no temporary file left");
        let _ = std::fs::remove_dir_all(&out);
    }
}
