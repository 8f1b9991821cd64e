//! YAML (and JSON, which YAML accepts) into serde types, with errors reduced
//! to what a one-line message needs: the 1-based line and the parser's first
//! sentence, without its source snippet or its own "at line … column …".

use serde::de::DeserializeOwned;

/// A document that does not parse into the requested type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// 1-based line (0 when the parser does not know).
    pub line: u64,
    /// What is wrong.
    pub message: String,
}

/// Parses `text` strictly: unknown keys (where the type denies them),
/// duplicate keys and wrong types are errors.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str(text).map_err(|e| {
        let line = e.location().map_or(0, |l| l.line());
        let message = e.without_snippet().to_string();
        let message = message.lines().next().unwrap_or("");
        let message = message.find(" at line ").map_or(message, |i| &message[..i]);
        YamlError { line, message: message.to_owned() }
    })
}
