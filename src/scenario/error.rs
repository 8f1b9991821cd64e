//! What goes wrong resolving a scenario: a file that cannot be read or
//! parsed, or a value that is well-formed but unusable, named by its key.

/// A scenario that cannot be simulated. Fatal: nothing is run.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file cannot be read, or is not valid YAML/JSON for a scenario
    /// (unknown key, wrong type…).
    #[error(transparent)]
    File(#[from] crate::yaml::FileError),
    /// A value is well-formed but unusable (unknown model, TP that does not
    /// divide the heads, a KV cache that does not fit…).
    #[error("{file}:{line}: {field}: {reason}")]
    Invalid {
        /// The path.
        file: String,
        /// 1-based line of the key, where it appears in the file (else 1).
        line: u64,
        /// The key, e.g. `engine.max_num_seqs`.
        field: String,
        /// Why, and what would work.
        reason: String,
    },
}

/// A scenario value that is well-formed but unusable, before it is placed
/// in a file (see [`ScenarioError::Invalid`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidValue {
    /// The key, e.g. `engine.max_num_seqs`.
    pub field: String,
    /// Why, and what would work.
    pub reason: String,
}

pub(super) fn invalid<T>(field: &str, reason: impl Into<String>) -> Result<T, InvalidValue> {
    Err(InvalidValue { field: field.to_owned(), reason: reason.into() })
}
