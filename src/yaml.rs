//! YAML (and JSON, which YAML accepts) into serde types, with errors reduced
//! to what a one-line message needs: the 1-based line and the parser's first
//! sentence, without its source snippet or its own "at line … column …".
//! [`read_file`] and [`parse_file`] put the file in front, for the input
//! files that scenarios and plans read.

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

/// An input file that cannot be read, or does not parse. Fatal for it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("{file}: {source}")]
    Io {
        /// The path.
        file: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid YAML/JSON for what it should hold.
    #[error("{file}:{line}: {message}")]
    Parse {
        /// The path.
        file: String,
        /// 1-based line (0 if unknown).
        line: u64,
        /// The parser's message.
        message: String,
    },
}

/// Reads a whole input file.
pub fn read_file(path: &std::path::Path) -> Result<String, FileError> {
    std::fs::read_to_string(path).map_err(|source| FileError::Io { file: path.display().to_string(), source })
}

/// [`parse`], with `path` named in the error.
pub fn parse_file<T: DeserializeOwned>(path: &std::path::Path, text: &str) -> Result<T, FileError> {
    parse(text).map_err(|e| FileError::Parse { file: path.display().to_string(), line: e.line, message: e.message })
}
