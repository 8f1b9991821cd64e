//! `tracev2`: BLIS's trace pair, given as BLIS takes it — a header YAML
//! (`PREFIX.yaml`, strict: unknown keys are errors) and a data CSV beside it
//! (`PREFIX.csv`; columns found by name, so every `trace_version` BLIS writes
//! and the conditional columns `vllm_priority`, `slo_target_us`,
//! `x_request_id`, `adapter`, `think_time_us`, `input_tokens_reset` read
//! alike; extra columns are ignored).
//!
//! Mapping, as `blis replay` builds requests (`../shared/reference/blis-
//! spec.md` §10.3):
//! - A record's prompt is its `prefix_group`'s shared prefix (fresh token
//!   ids drawn once per group, `prefix_length` of the group's first record)
//!   followed by its own tokens: `server_input_tokens` when positive and the
//!   record has no group, else `input_tokens` (the suffix). Its own tokens
//!   and its outputs get fresh ids, so records share KV only through their
//!   group (BLIS's INV-13 condition) and, in accumulate sessions, their
//!   session's growing context.
//! - It arrives at `send_time_us` when positive, else `arrival_time_us`.
//! - `fixed` (default): every record is a one-call request at its own time.
//!   Refused on an accumulate corpus (its inputs are deltas).
//! - `closed-loop`: a session (`session_id`, rounds `0..n`) is one request
//!   DAG, a chain of its rounds: round 0 at its time, round `r` a think time
//!   after round `r − 1` finishes — the recorded `think_time_us` when non-zero,
//!   else the gap between the rounds' arrivals. Records without a session
//!   stay one-call requests.
//! - `fixed-accumulate`: every record at its own time, with its session's
//!   reconstructed context. Needs an accumulate corpus.
//! - `session_context_growth: accumulate`: round `r`'s prompt is round
//!   `r − 1`'s prompt and output followed by its `input_tokens` (a delta); a
//!   positive `input_tokens_reset` re-seeds it at that absolute length (the
//!   group prefix, then fresh tokens: a compacted context is not a prefix of
//!   the old one).
//! - A pool (`--concurrent-sessions N [--total-sessions M] [--shuffle-corpus]`,
//!   closed loop): the corpus's requests (sessions, and records without
//!   one) all arrive at 0 in arrival order, or shuffled by a seeded
//!   Fisher–Yates, cloned in turn to make M (a clone has fresh tokens but its
//!   group prefix), renumbered 0..M; the run's client sends N at a time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::{ImportError, ImportOptions, Requests, SessionMode, open_file, tokens};
use crate::workload::types::{LlmCall, NodeKind, Request, RequestId, SubRequest};

/// The header's keys (`blis-spec.md` §10.1); the informational ones are
/// kept as given.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// 1–3 (BLIS writes 3).
    pub trace_version: u32,
    /// Must be `microseconds`.
    pub time_unit: String,
    /// When the trace was made.
    pub created_at: Option<String>,
    /// `real`, `generated` or `replayed`.
    pub mode: String,
    /// Records with `request_id` below this are warm-up (for calibration).
    #[serde(default)]
    pub warm_up_requests: u64,
    /// The seed of a generated workload.
    pub workload_seed: Option<i64>,
    /// Provenance of a generated workload.
    pub workload_spec: Option<String>,
    /// `""` or `accumulate`.
    #[serde(default)]
    pub session_context_growth: String,
    /// The server the trace was made on (informational).
    pub server: Option<serde_json::Value>,
    /// `{measured_rtt_ms}` (informational).
    pub network: Option<serde_json::Value>,
    /// Per class SLO targets (informational).
    pub goodput_slo_targets: Option<serde_json::Value>,
    /// KV offload config (not modelled; informational).
    pub kv_offload: Option<serde_json::Value>,
    /// Observed KV metrics (informational).
    pub observed_kv_metrics: Option<serde_json::Value>,
}

/// One data record: the columns replay and calibration read.
#[derive(Debug, Clone)]
pub struct TraceRecord {
    /// 1-based line in the CSV.
    pub line: u64,
    /// `request_id`.
    pub request_id: u64,
    session: String,
    round: u64,
    group: String,
    /// `prefix_length`.
    pub prefix_length: u32,
    /// The prompt tokens replay gives the record besides its group prefix:
    /// `server_input_tokens` when positive and ungrouped, else `input_tokens`.
    input: u32,
    /// `input_tokens` as written (the suffix after the group prefix).
    pub input_tokens: u32,
    /// `server_input_tokens` (0 = unknown).
    pub server_input_tokens: u64,
    /// `output_tokens`.
    pub output: u32,
    /// When it was sent: `send_time_us` when positive, else `arrival_time_us`.
    pub arrival_us: u64,
    /// `send_time_us` as written (0 = none).
    pub send_us: u64,
    /// `first_chunk_time_us` (0 = none).
    pub first_chunk_us: u64,
    /// `last_chunk_time_us` (0 = none).
    pub last_chunk_us: u64,
    /// `status` (`ok` when the column is absent).
    pub status: String,
    think_us: u64,
    reset: u32,
}

type Record = TraceRecord;

/// The data file beside `header`: the same path with `.csv`.
pub fn data_path(header: &Path) -> PathBuf {
    header.with_extension("csv")
}

/// Reads the pair at `header` (data beside it).
pub(super) fn open(header: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    let head = read_header(header)?;
    let accumulate = head.session_context_growth == "accumulate";
    let data = options.trace_data.clone().unwrap_or_else(|| data_path(header));
    let records = read_records(&data)?;
    let file = data.display().to_string();
    let pool = options.concurrent_sessions.is_some();
    let mode = options.session_mode.unwrap_or(if pool { SessionMode::ClosedLoop } else { SessionMode::Fixed });
    if pool && mode != SessionMode::ClosedLoop {
        return Err(ImportError::new(
            &file,
            0,
            "session_mode",
            format!("a pool of concurrent sessions replays closed-loop, not {}", mode.name()),
        ));
    }
    if accumulate && mode == SessionMode::Fixed {
        return Err(ImportError::new(
            &header.display().to_string(),
            0,
            "session_context_growth",
            "an accumulate corpus holds per-round deltas: replay it with --session-mode closed-loop or fixed-accumulate",
        ));
    }
    if !accumulate && mode == SessionMode::FixedAccumulate {
        return Err(ImportError::new(
            &header.display().to_string(),
            0,
            "session_context_growth",
            "fixed-accumulate needs an accumulate corpus (session_context_growth: accumulate)",
        ));
    }
    let by_arrival = |mut v: Vec<(u64, Request)>| {
        v.sort_by(|a, b| a.1.arrival_time.total_cmp(&b.1.arrival_time).then(a.0.cmp(&b.0)));
        v.into_iter().map(|(_, r)| r).collect::<Vec<Request>>()
    };
    let corpus = by_arrival(build(&records, accumulate, mode, &file, 0)?);
    let Some(_) = options.concurrent_sessions else {
        return Ok(Box::new(corpus.into_iter().map(Ok)));
    };
    // The pool: every session sent at once, in corpus order (shuffled if
    // asked); the run's client admits `concurrent_sessions` at a time.
    let mut order: Vec<usize> = (0..corpus.len()).collect();
    if options.shuffle_corpus {
        // Its own stream, apart from anything else the seed drives.
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(options.seed ^ 0x5EED_C0DE_5EED_C0DE);
        for i in (1..order.len()).rev() {
            let j = rng.random_range(0..=i);
            order.swap(i, j);
        }
    }
    let total = options.total_sessions.map_or(corpus.len(), |m| m as usize);
    if corpus.is_empty() && total > 0 {
        // Nothing to clone (a data file of the header row alone).
        return Err(ImportError::new(
            &file,
            0,
            "total_sessions",
            format!("{total} sessions asked of a trace with no records"),
        ));
    }
    let mut clones: Vec<Vec<Request>> = vec![corpus];
    let mut out = Vec::with_capacity(total);
    for k in 0..total {
        let cycle = k / order.len().max(1);
        while clones.len() <= cycle {
            let salt = clones.len() as u64;
            clones.push(by_arrival(build(&records, accumulate, mode, &file, salt)?));
        }
        let mut request = clones[cycle][order[k % order.len()]].clone();
        request.request_id = RequestId::Int(k as u64);
        request.arrival_time = 0.0;
        out.push(Ok(request));
    }
    Ok(Box::new(out.into_iter()))
}

/// The header at `path`, checked.
pub fn read_header(path: &Path) -> Result<Header, ImportError> {
    let file = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| ImportError::new(&file, 0, "file", format!("cannot read: {e}")))?;
    let head: Header = crate::yaml::parse(&text).map_err(|e| ImportError::new(&file, e.line, "header", e.message))?;
    let line = |key: &str| {
        text.lines()
            .position(|l| l.starts_with(key) && l[key.len()..].trim_start().starts_with(':'))
            .map_or(0, |i| i as u64 + 1)
    };
    if !(1..=3).contains(&head.trace_version) {
        return Err(ImportError::new(
            &file,
            line("trace_version"),
            "trace_version",
            format!("{} is not 1, 2 or 3", head.trace_version),
        ));
    }
    if head.time_unit != "microseconds" {
        return Err(ImportError::new(
            &file,
            line("time_unit"),
            "time_unit",
            format!("`{}`: only microseconds", head.time_unit),
        ));
    }
    if !["real", "generated", "replayed"].contains(&head.mode.as_str()) {
        return Err(ImportError::new(
            &file,
            line("mode"),
            "mode",
            format!("`{}`: real, generated or replayed", head.mode),
        ));
    }
    if !["", "accumulate"].contains(&head.session_context_growth.as_str()) {
        return Err(ImportError::new(
            &file,
            line("session_context_growth"),
            "session_context_growth",
            format!("`{}`: empty or accumulate", head.session_context_growth),
        ));
    }
    Ok(head)
}

/// Every record of the data CSV at `path`, columns found by name.
pub fn read_records(path: &Path) -> Result<Vec<TraceRecord>, ImportError> {
    let file = path.display().to_string();
    let mut reader = csv::Reader::from_reader(open_file(path)?);
    let headers = reader.headers().map_err(|e| ImportError::new(&file, 1, "header", e.to_string()))?.clone();
    let find = |name: &str| headers.iter().position(|h| h.trim() == name);
    let need = |name: &str| find(name).ok_or_else(|| ImportError::new(&file, 1, name, "missing column"));
    let c_id = need("request_id")?;
    // Session and group columns may be absent (a trace of independent
    // requests written by a tool that leaves them out).
    let c_session = find("session_id");
    let c_round = find("round_index");
    let c_group = find("prefix_group");
    let c_prefix = find("prefix_length");
    let c_in = need("input_tokens")?;
    let c_out = need("output_tokens")?;
    let c_server_in = find("server_input_tokens");
    let c_arrival = need("arrival_time_us")?;
    let c_send = find("send_time_us");
    let c_think = find("think_time_us");
    let c_reset = find("input_tokens_reset");
    let (c_first, c_last, c_status) = (find("first_chunk_time_us"), find("last_chunk_time_us"), find("status"));
    let mut out = Vec::new();
    let mut ids: HashMap<u64, u64> = HashMap::new();
    for (i, record) in reader.records().enumerate() {
        let line = i as u64 + 2;
        let at = |column: &str, reason: String| ImportError::new(&file, line, column, reason);
        let record = record.map_err(|e| at("csv", e.to_string()))?;
        let field = |c: usize| record.get(c).unwrap_or("").trim();
        let int = |c: Option<usize>, name: &str| -> Result<i64, ImportError> {
            match c.map(field) {
                None | Some("") => Ok(0),
                Some(v) => v.parse::<i64>().map_err(|_| at(name, format!("`{v}` is not an integer"))),
            }
        };
        let non_negative = |c: Option<usize>, name: &str| -> Result<u64, ImportError> {
            u64::try_from(int(c, name)?).map_err(|_| at(name, "must not be negative".to_owned()))
        };
        let request_id = non_negative(Some(c_id), "request_id")?;
        if let Some(first) = ids.insert(request_id, line) {
            return Err(at("request_id", format!("{request_id} repeats the id of line {first}")));
        }
        let server_in = non_negative(c_server_in, "server_input_tokens")?;
        let group = c_group.map_or("", field).to_owned();
        let prefix_length = tokens(int(c_prefix, "prefix_length")?, 0).map_err(|e| at("prefix_length", e))?;
        let input_tokens = tokens(int(Some(c_in), "input_tokens")?, 0).map_err(|e| at("input_tokens", e))?;
        let mut input = input_tokens;
        if server_in > 0 && group.is_empty() {
            input = tokens(server_in as i64, 1).map_err(|e| at("server_input_tokens", e))?;
        }
        let output = tokens(int(Some(c_out), "output_tokens")?, 1).map_err(|e| at("output_tokens", e))?;
        let send = non_negative(c_send, "send_time_us")?;
        let arrival_us = if send > 0 { send } else { non_negative(Some(c_arrival), "arrival_time_us")? };
        crate::workload::checked_seconds_to_us(arrival_us as f64 / 1e6)
            .map_err(|e| at(if send > 0 { "send_time_us" } else { "arrival_time_us" }, e))?;
        out.push(Record {
            line,
            request_id,
            session: c_session.map_or("", field).to_owned(),
            round: non_negative(c_round, "round_index")?,
            group,
            prefix_length,
            input,
            input_tokens,
            server_input_tokens: server_in,
            output,
            arrival_us,
            send_us: send,
            first_chunk_us: non_negative(c_first, "first_chunk_time_us")?,
            last_chunk_us: non_negative(c_last, "last_chunk_time_us")?,
            status: c_status.map_or("ok", field).to_owned(),
            think_us: non_negative(c_think, "think_time_us")?,
            reset: tokens(int(c_reset, "input_tokens_reset")?, 0).map_err(|e| at("input_tokens_reset", e))?,
        });
    }
    Ok(out)
}

/// A stream id for a name (FNV-1a), apart from records' ids.
fn stream_of(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h | 1 << 63
}

/// Each record's prompt and output ids, by position in `records`; a
/// non-zero `salt` (a clone of the corpus) gives every record new tokens but
/// its group prefix.
fn token_ids(records: &[Record], accumulate: bool, salt: u64) -> Vec<(Vec<u32>, Vec<u32>)> {
    let mut groups: HashMap<&str, Vec<u32>> = HashMap::new();
    for r in records {
        if !r.group.is_empty() && r.prefix_length > 0 && !groups.contains_key(r.group.as_str()) {
            groups.insert(&r.group, super::fresh_tokens(stream_of(&r.group), 0, r.prefix_length as usize).collect());
        }
    }
    // Accumulate: each session's context so far (prompt and output of its
    // previous round), in round order.
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_by_key(|&i| (records[i].session.clone(), records[i].round, i));
    let mut context: HashMap<&str, Vec<u32>> = HashMap::new();
    let mut out = vec![(Vec::new(), Vec::new()); records.len()];
    for i in order {
        let r = &records[i];
        let stream = r.request_id ^ salt.wrapping_mul(0xA076_1D64_78BD_642F);
        let own = |n: u32| super::fresh_tokens(stream, 0, n as usize);
        let group = groups.get(r.group.as_str()).map_or(&[][..], Vec::as_slice);
        let mut prompt: Vec<u32> = match context.get(r.session.as_str()) {
            Some(ctx) if accumulate && !r.session.is_empty() && r.round > 0 && r.reset == 0 => {
                let mut p = ctx.clone();
                p.extend(own(r.input));
                p
            }
            _ if accumulate && r.reset > 0 => {
                let mut p = group.to_vec();
                p.truncate(r.reset as usize);
                let rest = r.reset as usize - p.len();
                p.extend(own(rest as u32));
                p
            }
            _ => {
                let mut p = group.to_vec();
                p.extend(own(r.input));
                p
            }
        };
        prompt.truncate(super::MAX_TOKENS as usize);
        let output: Vec<u32> = super::fresh_tokens(stream, 1 << 40, r.output as usize).collect();
        if accumulate && !r.session.is_empty() {
            let mut ctx = prompt.clone();
            ctx.extend_from_slice(&output);
            context.insert(&r.session, ctx);
        }
        out[i] = (prompt, output);
    }
    out
}

fn call(prompt: Vec<u32>, output: Vec<u32>) -> LlmCall {
    LlmCall {
        input_tokens: prompt.len() as u32,
        output_tokens: output.len() as u32,
        input_token_ids: Some(prompt),
        output_token_ids: Some(output),
        seeded: None,
        model: None,
        prompt_blocks: None,
    }
}

/// (sort key: first line, request) pairs for `mode`.
fn build(
    records: &[Record],
    accumulate: bool,
    mode: SessionMode,
    file: &str,
    salt: u64,
) -> Result<Vec<(u64, Request)>, ImportError> {
    // Each record's ids are moved into its call, once.
    let mut ids = token_ids(records, accumulate, salt);
    let single = |r: &Record, ids: (Vec<u32>, Vec<u32>)| {
        (r.line, super::one_call(r.request_id, r.arrival_us as f64 / 1e6, call(ids.0, ids.1)))
    };
    if mode != SessionMode::ClosedLoop {
        return Ok(records.iter().zip(ids).map(|(r, ids)| single(r, ids)).collect());
    }
    let mut sessions: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if r.session.is_empty() {
            out.push(single(r, std::mem::take(&mut ids[i])));
            continue;
        }
        let k = *index.entry(&r.session).or_insert_with(|| {
            sessions.push((&r.session, Vec::new()));
            sessions.len() - 1
        });
        sessions[k].1.push(i);
    }
    for (name, mut rounds) in sessions {
        rounds.sort_by_key(|&i| records[i].round);
        for (k, &i) in rounds.iter().enumerate() {
            if records[i].round != k as u64 {
                return Err(ImportError::new(
                    file,
                    records[i].line,
                    "round_index",
                    format!("session {name} has round {} where {k} was next", records[i].round),
                ));
            }
        }
        let first = &records[rounds[0]];
        let mut nodes = Vec::with_capacity(rounds.len());
        for (k, &i) in rounds.iter().enumerate() {
            let r = &records[i];
            let think_us = if k == 0 {
                0
            } else if r.think_us > 0 {
                r.think_us
            } else {
                r.arrival_us.saturating_sub(records[rounds[k - 1]].arrival_us)
            };
            nodes.push(SubRequest {
                next: if k + 1 < rounds.len() { vec![k as u32 + 1] } else { vec![] },
                interval: think_us as f64 / 1e6,
                kind: {
                    let (prompt, output) = std::mem::take(&mut ids[i]);
                    NodeKind::Llm(call(prompt, output))
                },
                result: None,
            });
        }
        let request = Request {
            request_id: RequestId::Int(first.request_id),
            arrival_time: first.arrival_us as f64 / 1e6,
            initial: vec![0],
            sub_requests: nodes,
        };
        out.push((first.line, request));
    }
    Ok(out)
}
