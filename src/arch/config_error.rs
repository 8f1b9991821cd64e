//! Why a `config.json` cannot be used: the key at fault and the reason,
//! for the model reader (`model.rs`) and the layer reader (`layers.rs`).

/// A `config.json` the simulator cannot use. Fatal for the scenario.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ModelConfigError {
    /// The config key at fault.
    pub field: String,
    /// Why.
    pub reason: String,
}

/// The error for `field`.
pub(super) fn bad(field: &str, reason: impl Into<String>) -> ModelConfigError {
    ModelConfigError { field: field.to_owned(), reason: reason.into() }
}
