//! Why a plan cannot run ([`PlanError`], found before any run starts) or a
//! sweep could not complete ([`SweepError`]): the fatal errors of every part
//! of the sweep (reading its inputs, claiming and writing its output folder,
//! collecting its runs). A run's own failure is not here: it becomes that
//! run's row.

use crate::workload::reader::ReadError;

/// Why a sweep could not complete. Fatal.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The workload file breaks the format (found before any run starts).
    #[error(transparent)]
    Workload(#[from] ReadError),
    /// An imported trace has a bad row (found before any run starts).
    #[error(transparent)]
    Import(#[from] crate::workload::import::common::ImportError),
    /// An output or input file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// The OS error. (Not a `source`: the message holds it already, and
        /// the CLI prints the chain.)
        error: std::io::Error,
    },
    /// Another sweep is writing to the output folder.
    #[error(
        "{dir}: in use by blis-sweep pid {pid}{host}; wait for it to end, or remove {lock} if that process is gone"
    )]
    Busy {
        /// The output folder.
        dir: String,
        /// The owner's pid (`unknown` if its lock is unreadable).
        pid: String,
        /// ` on HOST` when it runs on another host, else empty.
        host: String,
        /// The lock file.
        lock: String,
    },
    /// This shard does not fit the output folder's record of the sweep's
    /// shards, or the record cannot be written.
    #[error(transparent)]
    Shard(#[from] super::shard::ShardError),
    /// The output folder holds another plan's results.
    #[error(
        "{dir}: holds the results of another plan (plan_hash {found}, this plan's is {ours}); use --force to replace them or choose another output"
    )]
    OtherPlan {
        /// The output folder.
        dir: String,
        /// The plan hash the folder is marked with (`unknown` without a mark).
        found: String,
        /// This plan's.
        ours: String,
    },
}

/// A plan that cannot be run at all. Fatal: no run starts.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A file (the plan, a scenario) cannot be read or does not parse.
    #[error(transparent)]
    File(#[from] crate::yaml::FileError),
    /// A value is wrong for the plan as a whole.
    #[error("{file}: {field}: {reason}")]
    Invalid {
        /// The plan file.
        file: String,
        /// The key, e.g. `grid.overrides.tp`.
        field: String,
        /// Why.
        reason: String,
    },
}
