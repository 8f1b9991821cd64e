//! `weka`: the Weka KV-cache-tester agentic-coding traces (Claude Code
//! sessions; SemiAnalysis's `cc-traces-weka-*` corpora, the input of
//! aiperf's AgentX benchmark). One JSON object per session: `id`,
//! `block_size` (tokens per `hash_ids` block, 64), `hash_id_scope: local`,
//! and `requests`, which interleaves main-agent calls (`type: n` or `s`: `t`
//! s from the session start, `in`/`out` tokens, `hash_ids`, `api_time` s)
//! with `type: subagent` entries holding their own `requests`. A file holds
//! one session per line (JSON lines, as the Hugging Face corpora ship), or
//! is one session (`.json`), or is a folder of such files (sorted by name).
//!
//! Mapping: each session is one request DAG ([`super::weka_dag`] builds it):
//! - main turns chain; turn `i` starts `max(0, t_i − end_{i−1})` after the
//!   turns (and subagent chains) it waited for, where a call's recorded end
//!   is `t + api_time` (`t` alone when `api_time` is missing, so the gap is
//!   start to start);
//! - each subagent's calls are split into chains by their hash ids (a call
//!   continues the chain whose last prompt its own extends, once that call
//!   has ended; a call that overlaps every chain forks a new one), each
//!   chain spawned from the main turn before the entry at its recorded
//!   offset, and joined to the first later main turn that started after the
//!   chain's recorded end: a short chain gates an earlier turn, a long one a
//!   later turn, one that outlives the session runs in the background (the
//!   request still waits for it). A subagent before any main turn starts
//!   with the session;
//! - prompts are the block identities (`hash_ids`, scoped to the session, so
//!   two sessions never share a block), and the tokens past them (the
//!   prompt's unhashed tail) are the call's own: the prefix cache hits
//!   exactly where the hash ids say; compaction (a prompt that keeps only a
//!   prefix of the last one) hits only that prefix;
//! - sessions start as a Poisson process at `--session-rate` (seeded), in
//!   file order; `--drop-subagents` replays the main agent alone (BLIS's
//!   replay: a subagent's wall time folds into the next turn's gap);
//!   `--max-think-time S` caps every idle gap (0, the default: uncapped).
//!
//! The recorded `model` names are not copied (they would not route); `in`
//! and `out` are read as given, never derived from the hash ids.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::common::{ImportError, ImportOptions, PoissonStarts, Requests, open_file};
use super::weka_dag::{self, Build, Call, Session, SubagentEntry};

/// One session as the file has it (aiperf's `WekaTrace` schema, from
/// kv-cache-tester: unknown keys are errors).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
// Every key is read (unknown ones are errors); a replay uses some.
#[allow(dead_code)]
struct TraceRow {
    id: String,
    #[serde(default)]
    models: Vec<String>,
    block_size: i64,
    hash_id_scope: String,
    #[serde(default)]
    tool_tokens: i64,
    #[serde(default)]
    system_tokens: i64,
    requests: Vec<Entry>,
    #[serde(default)]
    totals: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum Entry {
    #[serde(rename = "n")]
    Normal(CallRow),
    #[serde(rename = "s")]
    Streaming(CallRow),
    #[serde(rename = "subagent")]
    Subagent(SubagentRow),
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum InnerEntry {
    #[serde(rename = "n")]
    Normal(CallRow),
    #[serde(rename = "s")]
    Streaming(CallRow),
}

/// A main or subagent call (`n` and `s` differ only in `ttft`, which a
/// replay does not use).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
// Every key is read (unknown ones are errors); a replay uses some.
#[allow(dead_code)]
struct CallRow {
    t: f64,
    #[serde(default)]
    model: String,
    #[serde(rename = "in")]
    input: i64,
    #[serde(rename = "out")]
    output: i64,
    #[serde(default)]
    hash_ids: Vec<i64>,
    #[serde(default)]
    input_types: Vec<String>,
    #[serde(default)]
    output_types: Vec<String>,
    #[serde(default)]
    stop: String,
    #[serde(default)]
    api_time: Option<f64>,
    #[serde(default)]
    think_time: Option<f64>,
    #[serde(default)]
    ttft: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
// Every key is read (unknown ones are errors); a replay uses some.
#[allow(dead_code)]
struct SubagentRow {
    t: f64,
    agent_id: String,
    subagent_type: String,
    #[serde(default)]
    duration_ms: Option<i64>,
    #[serde(default)]
    total_tokens: Option<i64>,
    #[serde(default)]
    tool_use_count: Option<i64>,
    status: String,
    requests: Vec<InnerEntry>,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default)]
    tool_tokens: i64,
    #[serde(default)]
    system_tokens: i64,
}

/// The largest `block_size` taken: 2^16 tokens (kv-cache-tester records
/// 64; a block larger than any prompt is a corrupt value).
const MAX_BLOCK_TOKENS: i64 = 1 << 16;

/// One session of `file` at `line` (the file's line, or 1 for a `.json`
/// file), checked.
pub fn parse_session(file: &str, line: u64, text: &str) -> Result<Session, ImportError> {
    let bad = |column: &str, reason: String| ImportError::new(file, line, column, reason);
    let row: TraceRow = serde_json::from_str(text).map_err(|e| {
        let msg = e.to_string();
        let column = match msg.split('`').nth(1) {
            Some(k) if !msg.starts_with("unknown field") && !msg.starts_with("unknown variant") => k.to_owned(),
            _ => "json".to_owned(),
        };
        bad(&column, msg)
    })?;
    if row.hash_id_scope != "local" {
        return Err(bad(
            "hash_id_scope",
            format!("`{}`: only `local` (ids scoped to the session) is defined", row.hash_id_scope),
        ));
    }
    if !(1..=MAX_BLOCK_TOKENS).contains(&row.block_size) {
        return Err(bad(
            "block_size",
            format!("{} is not a block size (1 to {MAX_BLOCK_TOKENS} tokens)", row.block_size),
        ));
    }
    if row.id.is_empty() {
        return Err(bad("id", "empty".to_owned()));
    }
    let mut entries = Vec::with_capacity(row.requests.len());
    for (k, e) in row.requests.into_iter().enumerate() {
        let at = |field: &str| format!("requests[{k}].{field}");
        entries.push(match e {
            Entry::Normal(c) | Entry::Streaming(c) => weka_dag::Entry::Main(call(c, &at).map_err(|(f, r)| bad(&f, r))?),
            Entry::Subagent(s) => {
                let t = time(s.t).map_err(|r| bad(&at("t"), r))?;
                let mut calls = Vec::with_capacity(s.requests.len());
                for (j, inner) in s.requests.into_iter().enumerate() {
                    let (InnerEntry::Normal(c) | InnerEntry::Streaming(c)) = inner;
                    let at = |field: &str| format!("requests[{k}].requests[{j}].{field}");
                    calls.push(call(c, &at).map_err(|(f, r)| bad(&f, r))?);
                }
                weka_dag::Entry::Subagent(SubagentEntry { t, agent_id: s.agent_id, calls })
            }
        });
    }
    if !entries.iter().any(|e| match e {
        weka_dag::Entry::Main(_) => true,
        weka_dag::Entry::Subagent(s) => !s.calls.is_empty(),
    }) {
        return Err(bad("requests", "no calls".to_owned()));
    }
    Ok(Session { id: row.id, file: file.to_owned(), line, block_tokens: row.block_size as u32, entries })
}

fn time(t: f64) -> Result<f64, String> {
    crate::workload::checked_seconds_to_us(t).map(|_| t)
}

/// A call row, checked; errors name the field by its path in the session.
fn call(c: CallRow, at: &dyn Fn(&str) -> String) -> Result<Call, (String, String)> {
    let t = time(c.t).map_err(|r| (at("t"), r))?;
    let api = match c.api_time {
        Some(a) => Some(time(a).map_err(|r| (at("api_time"), r))?),
        None => None,
    };
    let input = super::common::tokens(c.input, 1).map_err(|r| (at("in"), r))?;
    // A call recorded with no output (an aborted stream) still computes
    // one token: the engine cannot serve a call of zero.
    let output = super::common::tokens(c.output.max(1), 1).map_err(|r| (at("out"), r))?;
    let end = t + api.unwrap_or(0.0);
    time(end).map_err(|r| (at("api_time"), format!("t + api_time: {r}")))?;
    Ok(Call { t, end, input, output, hash_ids: c.hash_ids, model: c.model })
}

/// The session files of `path`: the file itself, or a folder's `.json`
/// and `.jsonl` files sorted by name.
fn files(path: &Path) -> Result<Vec<PathBuf>, ImportError> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let name = path.display().to_string();
    let entries =
        std::fs::read_dir(path).map_err(|e| ImportError::new(&name, 0, "folder", format!("cannot read: {e}")))?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json" || x == "jsonl"))
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(ImportError::new(&name, 0, "folder", "no .json or .jsonl session files"));
    }
    Ok(out)
}

/// Every session of `path`, in file order, each with its file and line.
/// A `.json` file is one session (pretty-printed, as aiperf's fixtures
/// are); any other file one session per non-blank line.
pub fn sessions(path: &Path) -> impl Iterator<Item = Result<Session, ImportError>> + Send + 'static {
    let files = files(path);
    let (files, first_err) = match files {
        Ok(f) => (f, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let mut pending = first_err.into_iter();
    let mut files = files.into_iter();
    let mut current: Option<(String, std::io::Lines<std::io::BufReader<crate::spool::Input>>, u64)> = None;
    std::iter::from_fn(move || {
        if let Some(e) = pending.next() {
            return Some(Err(e));
        }
        use std::io::{BufRead, Read};
        loop {
            if let Some((file, lines, line)) = &mut current {
                *line += 1;
                match lines.next() {
                    Some(Ok(text)) if text.trim().is_empty() => continue,
                    Some(Ok(text)) => return Some(parse_session(file, *line, &text)),
                    Some(Err(e)) => return Some(Err(ImportError::new(file, *line, "file", e.to_string()))),
                    None => current = None,
                }
            }
            let f = files.next()?;
            let name = f.display().to_string();
            let mut reader = match open_file(&f) {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            if f.extension().is_some_and(|x| x == "json") {
                let mut text = String::new();
                if let Err(e) = reader.read_to_string(&mut text) {
                    return Some(Err(ImportError::new(&name, 0, "file", e.to_string())));
                }
                return Some(parse_session(&name, 1, &text));
            }
            current = Some((name, reader.lines(), 0));
        }
    })
}

/// Every session of `path`, for a run that replays them more than once
/// (AgentX plays); a repeated id is an error naming both lines.
pub fn load(path: &Path) -> Result<Vec<Session>, ImportError> {
    let mut seen = std::collections::HashMap::new();
    let mut out = Vec::new();
    for s in sessions(path) {
        let s = s?;
        if let Some((file, line)) = seen.insert(s.id.clone(), (s.file.clone(), s.line)) {
            return Err(ImportError::new(
                &s.file,
                s.line,
                "id",
                format!("session `{}` repeats the id of {file}:{line}", s.id),
            ));
        }
        out.push(s);
    }
    Ok(out)
}

/// Streams `path`'s sessions as request DAGs, starting as a Poisson
/// process at `options.session_rate`.
pub(super) fn open(path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    let file = path.display().to_string();
    let mut starts = PoissonStarts::new(options, &file, "weka", "its sessions carry no start times")?;
    // Idle gaps as recorded unless capped (BLIS's `--max-think-time`, 0 =
    // uncapped, its default for weka).
    let max_think_us = match options.max_think_time {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            return Err(ImportError::new(&file, 0, "max_think_time", format!("{s} is not a number of seconds")));
        }
        Some(s) if s > 0.0 => Some(
            crate::workload::checked_seconds_to_us(s).map_err(|e| ImportError::new(&file, 0, "max_think_time", e))?,
        ),
        _ => None,
    };
    let build = Build { drop_subagents: options.drop_subagents, max_think_us, ..Build::default() };
    let mut seen = std::collections::HashMap::new();
    let mut index = 0u64;
    let mut sessions = sessions(path);
    Ok(Box::new(std::iter::from_fn(move || {
        let session = match sessions.next()? {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        if let Some((first_file, first_line)) = seen.insert(session.id.clone(), (session.file.clone(), session.line)) {
            return Some(Err(ImportError::new(
                &session.file,
                session.line,
                "id",
                format!("session `{}` repeats the id of {first_file}:{first_line}", session.id),
            )));
        }
        let arrival = starts.next_start();
        if crate::workload::checked_seconds_to_us(arrival).is_err() {
            return Some(Err(ImportError::new(
                &session.file,
                session.line,
                "session_rate",
                format!("{:e} sessions/s starts this session past the simulator's clock", starts.rate()),
            )));
        }
        let request = weka_dag::build(&session, arrival, &Build { salt: index, ..build });
        index += 1;
        Some(Ok(request))
    })))
}

/// Share of the sessions' prompt tokens that lie in a hash-id block an
/// earlier call of the same session already had (calls in send order): the
/// prefix-cache hit rate an unbounded cache would reach (the ids are prefix
/// hashes, so a block seen before is a prefix seen before). Subagents'
/// calls count unless `drop_subagents`.
pub fn block_reuse(path: &Path, drop_subagents: bool) -> Result<f64, ImportError> {
    let (mut total, mut reused) = (0u64, 0u64);
    for s in sessions(path) {
        let s = s?;
        let mut calls: Vec<&Call> = Vec::new();
        for e in &s.entries {
            match e {
                weka_dag::Entry::Main(c) => calls.push(c),
                weka_dag::Entry::Subagent(sub) if !drop_subagents => calls.extend(&sub.calls),
                weka_dag::Entry::Subagent(_) => {}
            }
        }
        calls.sort_by(|a, b| a.t.total_cmp(&b.t));
        let per = u64::from(s.block_tokens);
        let mut seen = std::collections::HashSet::new();
        for c in calls {
            let input = u64::from(c.input);
            total += input;
            for (j, &id) in c.hash_ids.iter().enumerate().take(input.div_ceil(per) as usize) {
                if !seen.insert(id) {
                    reused += input.min((j as u64 + 1) * per) - j as u64 * per;
                }
            }
        }
    }
    Ok(if total == 0 { 0.0 } else { reused as f64 / total as f64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: &str = r#"{"id": "s", "models": ["m"], "block_size": 64, "hash_id_scope": "local", "requests": [
        {"t": 0.0, "type": "n", "model": "m", "in": 200, "out": 30, "hash_ids": [1, 2, 3], "api_time": 1.0},
        {"t": 2.0, "type": "subagent", "agent_id": "a", "subagent_type": "Explore", "status": "completed",
         "requests": [{"t": 2.0, "type": "n", "model": "h", "in": 100, "out": 50, "hash_ids": [10, 11], "api_time": 0.5}],
         "models": ["h"]},
        {"t": 6.0, "type": "s", "model": "m", "in": 400, "out": 40, "hash_ids": [1, 2, 3, 4, 5], "api_time": 1.5, "ttft": 0.2}]}"#;

    #[test]
    fn a_session_parses_with_its_subagent() {
        let s = parse_session("f", 3, SESSION).unwrap();
        assert_eq!((s.id.as_str(), s.block_tokens, s.entries.len()), ("s", 64, 3));
        let weka_dag::Entry::Subagent(sub) = &s.entries[1] else { panic!() };
        assert_eq!((sub.calls.len(), sub.calls[0].input, sub.calls[0].end), (1, 100, 2.5));
    }

    #[test]
    fn bad_sessions_name_their_field() {
        for (from, to, field) in [
            (r#""in": 200"#, r#""in": 0"#, "requests[0].in"),
            (r#""t": 6.0"#, r#""t": -1"#, "requests[2].t"),
            (r#""in": 100"#, r#""in": -5"#, "requests[1].requests[0].in"),
            (r#""block_size": 64"#, r#""block_size": 0"#, "block_size"),
            (r#""local""#, r#""global""#, "hash_id_scope"),
            (r#""api_time": 1.5"#, r#""api_time": 1.5, "extra": 1"#, "json"),
            (r#""type": "s""#, r#""type": "x""#, "json"),
        ] {
            let text = SESSION.replacen(from, to, 1);
            let e = parse_session("f", 7, &text).unwrap_err();
            assert_eq!((e.line, e.column.as_str()), (7, field), "{to}: {e}");
        }
        let e = parse_session("f", 2, r#"{"id": "s", "block_size": 64, "hash_id_scope": "local"}"#).unwrap_err();
        assert_eq!(e.column, "requests", "{e}");
    }
}
