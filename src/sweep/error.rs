//! Why a sweep could not complete: the one fatal error of every part of the
//! sweep (reading its inputs, claiming and writing its output folder,
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
