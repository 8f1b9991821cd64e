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
    // The key path of a value of the wrong type (`engine.max_num_seqs`),
    // which the parser's own message leaves out.
    let mut path = String::new();
    serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| {
        let line = e.location().map_or(0, |l| l.line());
        let message = e.without_snippet().to_string();
        let message = message.lines().next().unwrap_or("");
        let message = message.find(" at line ").map_or(message, |i| &message[..i]);
        let message = match (path.as_str(), message_key(message)) {
            // Field first, as every other message: `output: missing`,
            // `workload: given twice`.
            ("" | "." | "?", Some((key, reason))) => format!("{key}: {reason}"),
            (p, Some((key, reason))) if message.starts_with("missing field") => format!("{p}.{key}: {reason}"),
            ("" | "." | "?", None) => message.to_owned(),
            (p, _) if message.contains(p) => message.to_owned(),
            (p, _) => format!("{p}: {message}"),
        };
        YamlError { line, message }
    })
}

/// The key a parser's message is about, and the message told about it: a
/// missing field or a key given twice (the parser names no path for them).
fn message_key(message: &str) -> Option<(&str, &'static str)> {
    if let Some(rest) = message.strip_prefix("missing field `") {
        return Some((rest.split('`').next()?, "missing"));
    }
    let rest = message.strip_prefix("duplicate mapping key: ")?;
    Some((rest.split(',').next()?.trim(), "given twice"))
}

/// `file:LINE` where the key path `field` (`grid.overrides.tp`,
/// `scenarios[1].engine`) is written in `text`, or `file` when it cannot be
/// found: for errors found after parsing, which know the key but not the
/// line. Each key is searched for after the one before it, so a key that
/// appears in several sections is found in the right one.
pub fn locate(file: &std::path::Path, text: &str, field: &str) -> String {
    let mut at = 0;
    let mut found = false;
    let keys: Vec<&str> = field.split('.').collect();
    let mut k = 0;
    while k < keys.len() {
        // A key may hold dots itself (`grid.overrides.engine.max_num_seqs`
        // is the key `engine.max_num_seqs` under `overrides`): the longest
        // run of segments written as one key wins.
        let hit = (k + 1..=keys.len()).rev().find_map(|end| {
            let key = keys[k..end].join(".");
            let key = key.split('[').next().unwrap_or(&key).to_owned();
            if key.is_empty() {
                return None;
            }
            find_key(&text[at..], &key).map(|i| (end, i + key.len()))
        });
        match hit {
            Some((end, len)) => {
                at += len;
                found = true;
                k = end;
            }
            None if keys[k].split('[').next().unwrap_or("").is_empty() => k += 1,
            None => break,
        }
    }
    if !found {
        return file.display().to_string();
    }
    let line = text[..at].matches('\n').count() + 1;
    format!("{}:{line}", file.display())
}

/// Where `key:` (as a whole word) first appears in `text`.
fn find_key(text: &str, key: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(key) {
        let start = from + i;
        let end = start + key.len();
        let before = text[..start].chars().next_back();
        let word_start = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let colon = text[end..].trim_start_matches([' ', '"', '\'']).starts_with(':');
        if word_start && colon {
            return Some(start);
        }
        from = end;
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Doc {
        engine: Engine,
    }
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Engine {
        max_num_seqs: u32,
    }

    #[test]
    fn a_type_error_names_its_key() {
        // Defect 9.11: `s.yaml:4: invalid u32` named no field.
        let e = parse::<Doc>("engine:\n  max_num_seqs: -3\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.starts_with("engine.max_num_seqs: "), "{}", e.message);
    }

    #[test]
    fn keys_are_located_in_order() {
        let text = "name: t\nworkload:\n  generate: {rate: 0, num_requests: 1}\n  timeout: -1\ngrid:\n  seed: [1]\n";
        let f = std::path::Path::new("p.yaml");
        assert_eq!(locate(f, text, "workload.timeout"), "p.yaml:4");
        assert_eq!(locate(f, text, "workload.generate.rate"), "p.yaml:3");
        assert_eq!(locate(f, text, "grid.seed"), "p.yaml:6");
        assert_eq!(locate(f, text, "nothing"), "p.yaml");
        let text = "grid:\n  seed: [1]\n  overrides:\n    tp: [1]\n    engine.max_num_seqs: [0]\n";
        assert_eq!(locate(f, text, "grid.overrides.engine.max_num_seqs"), "p.yaml:5");
        assert_eq!(locate(f, text, "grid.overrides.tp"), "p.yaml:4");
    }

    #[test]
    fn a_missing_or_repeated_key_is_named_first() {
        let e = parse::<Doc>("engine: {}\n").unwrap_err();
        assert!(e.message.starts_with("engine.max_num_seqs: missing"), "{}", e.message);
        let e = parse::<Doc>("other: 1\n").unwrap_err();
        assert!(e.message.starts_with("engine: missing"), "{}", e.message);
        let e = parse::<Doc>("engine: {max_num_seqs: 1}\nengine: {max_num_seqs: 2}\n").unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (2, "engine: given twice"));
    }
}
