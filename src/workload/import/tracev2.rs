//! `tracev2`: BLIS's trace pair, given as BLIS takes it — a header YAML
//! (`PREFIX.yaml`, strict: unknown keys are errors) and a data CSV beside it
//! (`PREFIX.csv`; columns found by name, so every `trace_version` BLIS writes
//! and the conditional columns `vllm_priority`, `slo_target_us`,
//! `x_request_id`, `adapter`, `think_time_us`, `input_tokens_reset` read
//! alike; extra columns are ignored). `time_unit` is `microseconds` or
//! `blis observe`'s `us`; send and chunk times written as Unix-epoch µs are
//! rebased so the first send falls at its record's `arrival_time_us`.
//! `slo_class`, `tenant_id` and `slo_target_us` are the request's
//! [`Traffic`] (a session's: its first record's); an empty `vllm_priority`
//! is its class's vLLM priority. Columns BLIS acts on and this engine does
//! not model (`deadline_us`, `vllm_priority` where the engines schedule
//! first come first served, a `slo_class` not among the five, served as
//! standard, ...) are read and named by
//! [`unmodelled_columns`] for the run summary. `adapter` (a LoRA adapter's name; empty: the base model)
//! becomes the call's `lora` when the deployment serves adapters
//! (`ImportOptions::adapters`), and is one of those columns otherwise.
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
//! - blis-sweep's own trailing columns `prefix_parent` (an earlier record's
//!   `request_id`) and `prefix_parent_length` (tokens), written by
//!   `run --trace-output`: the prompt (of the same length) opens with that
//!   many tokens of that record's prompt and output instead, so a tree of
//!   shared prefixes replays as it ran. A third, `token_ids` (`prompt+output`
//!   when absent, `prompt` or `none`), says which ids the engine knows (the
//!   prefix cache hashes only those): the others are left out of the call.
//! - blis-sweep's trailing `dag` column (on a session's round 0, written by
//!   `run --trace-output` for a request that forks or joins): in
//!   `closed-loop` the session is that DAG — its nodes in order,
//!   `;`-separated, each `rK` (round K's llm call) or `tD` (a tool call of
//!   D µs), then `+I` (an interval of I µs), then `>J|J…` (successors' node
//!   indices) — instead of a chain of its rounds; every round is named once,
//!   the roots are the nodes nothing points to, and the think times of
//!   rounds after the first are not used (BLIS, which ignores the column,
//!   replays the rounds as a chain).
//! - It arrives at `send_time_us` when positive, else `arrival_time_us`;
//!   a first round's `think_time_us` (ignored by BLIS) is a wait before the
//!   call: the request arrives that much earlier, its first call that much
//!   after (a root `interval`).
//! - `fixed` (default): every record is a one-call request at its own time.
//!   Refused on an accumulate corpus (its inputs are deltas).
//! - `closed-loop`: a session (`session_id`, rounds `0..n`) is one request
//!   DAG, a chain of its rounds: round 0 at its time, round `r` a think time
//!   after round `r − 1` finishes — as BLIS, the recorded `think_time_us`
//!   (0 included) when any round after the first has one, else the gaps
//!   between the rounds' `arrival_time_us`. Records without a session stay
//!   one-call requests.
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

mod stream;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::common::{ImportError, ImportOptions, Requests, SessionMode, open_file, tokens};
use crate::workload::types::{LlmCall, NodeKind, Request, RequestId, SubRequest};
use crate::workload::{SloClass, Traffic};

/// The header's keys (`blis-spec.md` §10.1); the informational ones are
/// kept as given.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// 1–3 (BLIS writes 3).
    pub trace_version: u32,
    /// `microseconds`, or `us` as `blis observe` writes it (also `µs`).
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
    /// `arrival_time_us` as written (the gaps between a session's rounds).
    arrival_time_us: u64,
    /// `send_time_us` (0 = none), rebased when written as Unix-epoch µs.
    pub send_us: u64,
    /// `first_chunk_time_us` (0 = none).
    pub first_chunk_us: u64,
    /// `last_chunk_time_us` (0 = none).
    pub last_chunk_us: u64,
    /// `status` (`ok` when the column is absent).
    pub status: String,
    think_us: u64,
    reset: u32,
    /// blis-sweep's `prefix_parent` (as a position in the records) and
    /// `prefix_parent_length`: the prompt opens with that many tokens of
    /// that earlier record's prompt and output.
    parent: Option<(usize, u32)>,
    /// blis-sweep's `token_ids`: whether the prompt's and the output's ids
    /// are known to the engine (`prompt+output`, the default, `prompt`,
    /// `none`); the prefix cache hashes only known ones.
    ids: (bool, bool),
    /// blis-sweep's `dag`: the session's request DAG.
    dag: Option<Vec<DagNode>>,
    /// `adapter`: the LoRA adapter it is served with (empty: none).
    adapter: Option<String>,
    /// `vllm_priority` (empty: its `slo_class`'s, else 0), or why it is not
    /// a 32-bit integer; used only where the engines schedule by priority.
    priority: Result<i32, String>,
    /// `slo_class`, `tenant_id` and `slo_target_us` (empty or 0: none).
    traffic: Traffic,
}

type Record = TraceRecord;

/// One node of a `dag` column.
#[derive(Debug, Clone, PartialEq)]
struct DagNode {
    /// `Some(K)`: the llm call of round K; `None`: a tool call.
    round: Option<u32>,
    /// A tool call's duration, µs.
    duration_us: u64,
    interval_us: u64,
    next: Vec<u32>,
}

/// A `dag` column's nodes, checked alone (successors in range, no node
/// its own successor or one listed twice, no cycle, times within the
/// clock); its rounds are checked against the session's in [`build`].
fn parse_dag(text: &str) -> Result<Vec<DagNode>, String> {
    let time = |v: &str, what: &str| -> Result<u64, String> {
        let us: u64 = v.parse().map_err(|_| format!("`{v}` is not a whole number of µs ({what})"))?;
        crate::workload::checked_seconds_to_us(us as f64 / 1e6).map_err(|e| format!("{what} {us} µs: {e}"))
    };
    let mut nodes = Vec::new();
    for (i, item) in text.split(';').enumerate() {
        let at = |reason: String| format!("node {i} (`{item}`): {reason}");
        let (head, next) = item.split_once('>').unwrap_or((item, ""));
        let (what, interval) = head.split_once('+').unwrap_or((head, "0"));
        let (round, duration_us) = match what.trim().split_at_checked(1) {
            Some(("r", k)) => (Some(k.parse::<u32>().map_err(|_| at(format!("`{k}` is not a round index")))?), 0),
            Some(("t", d)) => (None, time(d, "duration").map_err(at)?),
            _ => return Err(at("a node is `rK` (round K's llm call) or `tD` (a tool call of D µs)".to_owned())),
        };
        let next = match next.trim() {
            "" => Vec::new(),
            list => list
                .split('|')
                .map(|j| j.trim().parse::<u32>().map_err(|_| at(format!("`{j}` is not a node index"))))
                .collect::<Result<Vec<u32>, String>>()?,
        };
        nodes.push(DagNode { round, duration_us, interval_us: time(interval.trim(), "interval").map_err(at)?, next });
    }
    let n = nodes.len();
    let mut listed_by = vec![usize::MAX; n];
    for (i, node) in nodes.iter().enumerate() {
        for &j in &node.next {
            let j = j as usize;
            if j >= n || j == i || listed_by[j] == i {
                return Err(format!("node {i}: successor {j} is out of range ({n} nodes), itself or listed twice"));
            }
            listed_by[j] = i;
        }
    }
    let subs: Vec<SubRequest> = nodes.iter().map(|d| d.sub_request(NodeKind::ToolCall { duration: 0.0 })).collect();
    if let Some(i) = crate::workload::reader::find_cycle(&subs) {
        return Err(format!("node {i}: the nodes form a cycle"));
    }
    let subs: Vec<SubRequest> =
        nodes.iter().map(|d| d.sub_request(NodeKind::ToolCall { duration: d.duration_us as f64 / 1e6 })).collect();
    crate::workload::reader::check_path_times(&subs).map_err(|(_, reason)| reason)?;
    Ok(nodes)
}

impl DagNode {
    fn sub_request(&self, kind: NodeKind) -> SubRequest {
        SubRequest { next: self.next.clone(), interval: self.interval_us as f64 / 1e6, kind, result: None }
    }
}

/// The spellings of microseconds a header may give: BLIS's `run` and
/// `replay` write `microseconds`, its `observe` writes `us`
/// (`cmd/observe_cmd.go`); BLIS reads the key without checking it.
const TIME_UNITS: [&str; 4] = ["microseconds", "us", "µs", "μs"];

/// A send time at or past this many µs is a Unix-epoch time (2001-09-09),
/// as `blis observe` writes send and chunk times; a relative trace would
/// have to span 31 years to reach it.
const EPOCH_US: u64 = 1_000_000_000_000_000;

/// Conditional and metadata columns BLIS acts on that blis-sweep's engine
/// does not model: named in the run summary when a record gives them a
/// value ("present, not modelled").
const UNMODELLED: [&str; 8] = [
    "slo_class",
    "vllm_priority",
    "deadline_us",
    "adapter",
    "reason_ratio",
    "image_tokens",
    "audio_tokens",
    "video_tokens",
];

/// The data file beside `header`: the same path with `.csv`.
pub fn data_path(header: &Path) -> PathBuf {
    header.with_extension("csv")
}

/// Reads the pair at `header` (data beside it).
pub(super) fn open(header: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    let head = read_header(header)?;
    let accumulate = head.session_context_growth == "accumulate";
    let data = options.trace_data.clone().unwrap_or_else(|| data_path(header));
    let pool = options.concurrent_sessions.is_some();
    let mode = options.session_mode.unwrap_or(if pool { SessionMode::ClosedLoop } else { SessionMode::Fixed });
    if !pool && mode == SessionMode::Fixed && !accumulate {
        let (reader, cols) = data_columns(&data)?;
        if let Some(scan) = stream::scan(&data, &cols) {
            return Ok(stream::requests(reader, cols, &data, options, scan));
        }
    }
    let mut records = read_records(&data)?;
    let file = data.display().to_string();
    for r in &mut records {
        as_served(r, options, &file)?;
    }
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
    if let Some(r) = records.iter().find(|r| r.parent.is_some())
        && accumulate
    {
        return Err(ImportError::new(
            &file,
            r.line,
            "prefix_parent",
            "an accumulate corpus builds its prompts from the session's context: drop prefix_parent or session_context_growth",
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
    // Built lazily, one clone of the corpus at a time, as the run reads (not
    // all up front: 10^8 sessions took 8.8 GB before anything ran), within
    // `MAX_POOL_SESSIONS` (see there).
    let total = options.total_sessions.map_or(corpus.len() as u64, u64::from);
    if total > u64::from(super::common::MAX_POOL_SESSIONS) {
        return Err(ImportError::new(
            &file,
            0,
            "total_sessions",
            format!("{total} is more than a pool replays (at most {})", super::common::MAX_POOL_SESSIONS),
        ));
    }
    if corpus.is_empty() && total > 0 {
        // Nothing to clone (a data file of the header row alone).
        return Err(ImportError::new(
            &file,
            0,
            "total_sessions",
            format!("{total} sessions asked of a trace with no records"),
        ));
    }
    let (mut cycle, mut clone, mut k) = (0u64, corpus, 0u64);
    let mut failed = false;
    Ok(Box::new(std::iter::from_fn(move || {
        if failed || k >= total || order.is_empty() {
            return None;
        }
        let n = order.len() as u64;
        if k / n != cycle {
            cycle = k / n;
            clone = match build(&records, accumulate, mode, &file, cycle) {
                Ok(built) => by_arrival(built),
                Err(e) => {
                    failed = true;
                    return Some(Err(e));
                }
            };
        }
        let mut request = clone[order[(k % n) as usize]].clone();
        request.request_id = RequestId::Int(k);
        request.arrival_time = 0.0;
        k += 1;
        Some(Ok(request))
    })))
}

/// The header at `path`, checked.
pub fn read_header(path: &Path) -> Result<Header, ImportError> {
    let file = path.display().to_string();
    // (Through the spool: a header on a pipe is read by every pass.)
    let bytes =
        crate::spool::read(path).map_err(|e| ImportError::new(&file, 0, "file", format!("cannot read: {e}")))?;
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            // Name the line and the key it is on.
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = valid.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
            let start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let key = std::str::from_utf8(&valid[start..])
                .ok()
                .and_then(|l| l.split_once(':'))
                .map(|(k, _)| k.trim())
                .filter(|k| !k.is_empty() && !k.starts_with('#'))
                .unwrap_or("header")
                .to_owned();
            return Err(ImportError::new(
                &file,
                line,
                &key,
                format!("invalid UTF-8 at byte {} of the file", e.utf8_error().valid_up_to()),
            ));
        }
    };
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
    if !TIME_UNITS.contains(&head.time_unit.as_str()) {
        return Err(ImportError::new(
            &file,
            line("time_unit"),
            "time_unit",
            format!("`{}`: only microseconds (`microseconds`, `us` or `µs`)", head.time_unit),
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
    let (mut reader, cols) = data_columns(path)?;
    let mut out = Vec::new();
    let mut ids: HashMap<u64, u64> = HashMap::new();
    // Parents by request id, resolved once every record is read.
    let mut parents: Vec<Option<(u64, u32)>> = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let line = i as u64 + 2;
        let record = record.map_err(|e| ImportError::new(&file, line, "csv", e.to_string()))?;
        let (r, parent) = parse_record(&file, line, &record, &cols, &mut |id| match ids.insert(id, line) {
            Some(first) => Err(format!("{id} repeats the id of line {first}")),
            None => Ok(()),
        })?;
        parents.push(parent);
        out.push(r);
    }
    rebase_epoch(&mut out, &file)?;
    resolve_parents(&mut out, &parents, &ids, &file)?;
    Ok(out)
}

/// Where each column the reader knows is in a data file (`None`: absent;
/// the required ones are always there).
struct Columns {
    id: usize,
    session: Option<usize>,
    round: Option<usize>,
    group: Option<usize>,
    prefix: Option<usize>,
    input: usize,
    output: usize,
    server_input: Option<usize>,
    arrival: usize,
    send: Option<usize>,
    think: Option<usize>,
    reset: Option<usize>,
    parent: Option<usize>,
    parent_len: Option<usize>,
    ids: Option<usize>,
    dag: Option<usize>,
    adapter: Option<usize>,
    priority: Option<usize>,
    class: Option<usize>,
    tenant: Option<usize>,
    target: Option<usize>,
    first_chunk: Option<usize>,
    last_chunk: Option<usize>,
    status: Option<usize>,
}

/// The data file at `path`, past its header row, and where its columns are.
fn data_columns(path: &Path) -> Result<(csv::Reader<super::common::Input>, Columns), ImportError> {
    let file = path.display().to_string();
    let mut reader = csv::Reader::from_reader(open_file(path)?);
    let headers = reader.headers().map_err(|e| ImportError::new(&file, 1, "header", e.to_string()))?.clone();
    let find = |name: &str| headers.iter().position(|h| h.trim() == name);
    let need = |name: &str| find(name).ok_or_else(|| ImportError::new(&file, 1, name, "missing column"));
    // Session and group columns may be absent (a trace of independent
    // requests written by a tool that leaves them out).
    let cols = Columns {
        id: need("request_id")?,
        session: find("session_id"),
        round: find("round_index"),
        group: find("prefix_group"),
        prefix: find("prefix_length"),
        input: need("input_tokens")?,
        output: need("output_tokens")?,
        server_input: find("server_input_tokens"),
        arrival: need("arrival_time_us")?,
        send: find("send_time_us"),
        think: find("think_time_us"),
        reset: find("input_tokens_reset"),
        parent: find("prefix_parent"),
        parent_len: find("prefix_parent_length"),
        ids: find("token_ids"),
        dag: find("dag"),
        adapter: find("adapter"),
        priority: find("vllm_priority"),
        class: find("slo_class"),
        tenant: find("tenant_id"),
        target: find("slo_target_us"),
        first_chunk: find("first_chunk_time_us"),
        last_chunk: find("last_chunk_time_us"),
        status: find("status"),
    };
    Ok((reader, cols))
}

/// The record on `line`, checked (`new_id` refuses an id seen before), with
/// its `prefix_parent` (request id and length) unresolved; times as
/// written (see [`rebase_epoch`]).
fn parse_record(
    file: &str,
    line: u64,
    record: &csv::StringRecord,
    c: &Columns,
    new_id: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<(Record, Option<(u64, u32)>), ImportError> {
    let at = |column: &str, reason: String| ImportError::new(file, line, column, reason);
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
    let request_id = non_negative(Some(c.id), "request_id")?;
    new_id(request_id).map_err(|e| at("request_id", e))?;
    let server_in = non_negative(c.server_input, "server_input_tokens")?;
    let group = c.group.map_or("", field).to_owned();
    let prefix_length = tokens(int(c.prefix, "prefix_length")?, 0).map_err(|e| at("prefix_length", e))?;
    let input_tokens = tokens(int(Some(c.input), "input_tokens")?, 0).map_err(|e| at("input_tokens", e))?;
    let mut input = input_tokens;
    if server_in > 0 && group.is_empty() {
        input = tokens(server_in as i64, 1).map_err(|e| at("server_input_tokens", e))?;
    }
    let output = tokens(int(Some(c.output), "output_tokens")?, 1).map_err(|e| at("output_tokens", e))?;
    let send = non_negative(c.send, "send_time_us")?;
    let arrival_time_us = non_negative(Some(c.arrival), "arrival_time_us")?;
    // A class BLIS does not name either (older traces write e.g.
    // `interactive`) is served as standard and named in the run summary.
    let slo_class = SloClass::parse(c.class.map_or("", field));
    let traffic = Traffic {
        slo_class,
        tenant: Some(c.tenant.map_or("", field)).filter(|t| !t.is_empty()).map(str::to_owned),
        slo_target_us: Some(non_negative(c.target, "slo_target_us")?).filter(|&t| t > 0),
    };
    let parent = match c.parent.map(field) {
        None | Some("") => None,
        Some(_) => Some((
            non_negative(c.parent, "prefix_parent")?,
            tokens(int(c.parent_len, "prefix_parent_length")?, 1).map_err(|e| at("prefix_parent_length", e))?,
        )),
    };
    let r = Record {
        line,
        request_id,
        session: c.session.map_or("", field).to_owned(),
        round: non_negative(c.round, "round_index")?,
        group,
        prefix_length,
        input,
        input_tokens,
        server_input_tokens: server_in,
        output,
        arrival_us: 0,
        arrival_time_us,
        send_us: send,
        first_chunk_us: non_negative(c.first_chunk, "first_chunk_time_us")?,
        last_chunk_us: non_negative(c.last_chunk, "last_chunk_time_us")?,
        status: c.status.map_or("ok", field).to_owned(),
        think_us: non_negative(c.think, "think_time_us")?,
        reset: tokens(int(c.reset, "input_tokens_reset")?, 0).map_err(|e| at("input_tokens_reset", e))?,
        parent: None,
        ids: match c.ids.map_or("", field) {
            "" | "prompt+output" => (true, true),
            "prompt" => (true, false),
            "none" => (false, false),
            v => return Err(at("token_ids", format!("`{v}`: prompt+output, prompt or none"))),
        },
        dag: match c.dag.map_or("", field) {
            "" => None,
            _ if c.session.map_or("", field).is_empty() => {
                return Err(at("dag", "a request DAG is a session's: this record has no session_id".to_owned()));
            }
            text => Some(parse_dag(text).map_err(|e| at("dag", e))?),
        },
        adapter: Some(c.adapter.map_or("", field)).filter(|a| !a.is_empty()).map(str::to_owned),
        priority: match c.priority.map_or("", field) {
            "" => Ok(slo_class.map_or(0, SloClass::vllm_priority)),
            v => v.parse::<i32>().map_err(|_| format!("`{v}` is not a 32-bit integer")),
        },
        traffic,
    };
    Ok((r, parent))
}

/// Record `r` as the options serve it: without its adapter unless adapters
/// are served; `vllm_priority` is its call's priority where the engines
/// schedule by it, else it is read and ignored, as before priorities were
/// modelled (the class's priority stays: the JSONL reader gives it alike).
fn as_served(r: &mut Record, options: &ImportOptions, file: &str) -> Result<(), ImportError> {
    if !options.adapters {
        r.adapter = None;
    }
    match (&r.priority, options.priorities) {
        (Err(e), true) => return Err(ImportError::new(file, r.line, "vllm_priority", e.clone())),
        (_, false) => r.priority = Ok(r.traffic.slo_class.map_or(0, SloClass::vllm_priority)),
        (Ok(_), true) => {}
    }
    Ok(())
}

/// Send and chunk times written as Unix-epoch µs (`blis observe`: arrival
/// times relative to the run, the rest absolute) are rebased so that the
/// first send falls at its record's `arrival_time_us` (every time from the
/// first when the arrivals are absolute too), as BLIS's calibrate
/// measures from the first send; then each record's arrival is its send
/// time when positive, else its `arrival_time_us` (BLIS's `injectionTime`).
fn rebase_epoch(records: &mut [Record], file: &str) -> Result<(), ImportError> {
    // A trace with every time absolute (arrivals too) starts at its first
    // time, whichever column holds it.
    if records.iter().any(|r| r.arrival_time_us >= EPOCH_US) {
        let times = |r: &Record| [r.arrival_time_us, r.send_us].into_iter().filter(|&t| t > 0).min();
        let first = records.iter().filter_map(times).min().unwrap_or(0);
        for r in records.iter_mut() {
            for t in [&mut r.arrival_time_us, &mut r.send_us, &mut r.first_chunk_us, &mut r.last_chunk_us] {
                if *t > 0 {
                    *t = t.saturating_sub(first);
                }
            }
        }
    }
    let first =
        records.iter().filter(|r| r.send_us > 0).min_by_key(|r| r.send_us).map(|r| (r.send_us, r.arrival_time_us));
    if let Some((send, arrival)) = first
        && send >= EPOCH_US
    {
        let offset = send - arrival.min(send);
        for r in records.iter_mut() {
            for t in [&mut r.send_us, &mut r.first_chunk_us, &mut r.last_chunk_us] {
                if *t > 0 {
                    *t = t.saturating_sub(offset);
                }
            }
        }
    }
    for r in records.iter_mut() {
        r.arrival_us = if r.send_us > 0 { r.send_us } else { r.arrival_time_us };
        crate::workload::checked_seconds_to_us(r.arrival_us as f64 / 1e6).map_err(|e| {
            ImportError::new(file, r.line, if r.send_us > 0 { "send_time_us" } else { "arrival_time_us" }, e)
        })?;
    }
    Ok(())
}

/// Each `prefix_parent` as the position of an earlier record, its length
/// checked against both sequences.
fn resolve_parents(
    records: &mut [Record],
    parents: &[Option<(u64, u32)>],
    ids: &HashMap<u64, u64>,
    file: &str,
) -> Result<(), ImportError> {
    if parents.iter().all(Option::is_none) {
        return Ok(());
    }
    // The prompt length replay gives each record: its group's prefix (the
    // group's first positive `prefix_length`) and its own tokens.
    let mut group_len: HashMap<&str, u32> = HashMap::new();
    for r in records.iter() {
        if !r.group.is_empty() && r.prefix_length > 0 {
            group_len.entry(r.group.as_str()).or_insert(r.prefix_length);
        }
    }
    let prompt = |r: &Record| {
        (u64::from(group_len.get(r.group.as_str()).copied().unwrap_or(0)) + u64::from(r.input))
            .min(u64::from(super::common::MAX_TOKENS))
    };
    let lengths: Vec<(u64, u64)> = records.iter().map(|r| (prompt(r), prompt(r) + u64::from(r.output))).collect();
    for (i, parent) in parents.iter().enumerate() {
        let Some((id, len)) = *parent else { continue };
        let at = |reason: String| ImportError::new(file, records[i].line, "prefix_parent", reason);
        let p = match ids.get(&id) {
            Some(&line) => (line - 2) as usize,
            None => return Err(at(format!("{id} is no record's request_id"))),
        };
        if p >= i {
            return Err(at(format!("{id} is not an earlier record")));
        }
        if u64::from(len) > lengths[i].0 || u64::from(len) > lengths[p].1 {
            return Err(ImportError::new(
                file,
                records[i].line,
                "prefix_parent_length",
                format!(
                    "{len} tokens: longer than this prompt ({}) or record {id}'s prompt and output ({})",
                    lengths[i].0, lengths[p].1
                ),
            ));
        }
        records[i].parent = Some((p, len));
    }
    Ok(())
}

/// The columns of the data CSV at `path` that BLIS acts on and blis-sweep
/// does not model, in [`UNMODELLED`]'s order, where some record gives one a
/// value (non-empty, non-zero); `adapter` only when the deployment serves
/// no adapters (`adapters` false).
pub fn unmodelled_columns(path: &Path, adapters: bool, priorities: bool) -> Result<Vec<&'static str>, ImportError> {
    let file = path.display().to_string();
    let mut reader = csv::Reader::from_reader(open_file(path)?);
    let headers = reader.headers().map_err(|e| ImportError::new(&file, 1, "header", e.to_string()))?.clone();
    let columns: Vec<(&'static str, usize)> = UNMODELLED
        .iter()
        .filter(|&&name| !(adapters && name == "adapter"))
        .filter(|&&name| !(priorities && name == "vllm_priority"))
        .filter_map(|&name| Some((name, headers.iter().position(|h| h.trim() == name)?)))
        .collect();
    let mut seen = vec![false; columns.len()];
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| ImportError::new(&file, i as u64 + 2, "csv", e.to_string()))?;
        for (k, &(_, c)) in columns.iter().enumerate() {
            let v = record.get(c).unwrap_or("").trim();
            // A class is modelled when it is one of the five.
            let known_class = columns[k].0 == "slo_class" && SloClass::parse(v).is_some();
            if !v.is_empty() && v.parse::<f64>() != Ok(0.0) && !known_class {
                seen[k] = true;
            }
        }
    }
    Ok(columns.iter().zip(seen).filter(|(_, s)| *s).map(|((name, _), _)| *name).collect())
}

/// A stream id for a name (FNV-1a), apart from records' ids.
fn stream_of(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h | 1 << 63
}

/// A record's call as built: its prompt and output lengths, and their ids
/// where anything can use them (empty where not: see [`token_ids`]).
#[derive(Debug, Default)]
struct Tokens {
    prompt_len: u32,
    output_len: u32,
    prompt: Vec<u32>,
    output: Vec<u32>,
}

/// Each record's prompt and output, by position in `records`; a non-zero
/// `salt` (a clone of the corpus) gives every record new tokens but its
/// group prefix. Ids are drawn only where something can use them: where the
/// engine knows them (`token_ids`), where a later record's prompt is built
/// from them (a `prefix_parent`; a record with one is built whole, its
/// length depending on its parent's) and in an accumulate corpus (a
/// session's context); a record whose ids the engine is not given and
/// nothing copies gets its lengths alone (fresh ids would be drawn, hashed by nothing and
/// dropped: 2 KB a chat record, the whole trace held at once).
fn token_ids(records: &[Record], accumulate: bool, salt: u64) -> Vec<Tokens> {
    let mut parent = vec![false; records.len()];
    for r in records {
        if let Some((p, _)) = r.parent {
            parent[p] = true;
        }
    }
    let mut groups: HashMap<&str, Vec<u32>> = HashMap::new();
    for r in records {
        if !r.group.is_empty() && r.prefix_length > 0 && !groups.contains_key(r.group.as_str()) {
            groups.insert(
                &r.group,
                super::common::fresh_tokens(stream_of(&r.group), 0, r.prefix_length as usize).collect(),
            );
        }
    }
    // Accumulate: each session's context so far (prompt and output of its
    // previous round), in round order.
    // Otherwise file order, so that a `prefix_parent` (an earlier record)
    // is built first.
    let mut order: Vec<usize> = (0..records.len()).collect();
    if accumulate {
        order.sort_by_key(|&i| (records[i].session.clone(), records[i].round, i));
    }
    let mut context: HashMap<&str, Vec<u32>> = HashMap::new();
    let mut out: Vec<Tokens> = std::iter::repeat_with(Tokens::default).take(records.len()).collect();
    for i in order {
        let r = &records[i];
        if !(parent[i] || accumulate || r.parent.is_some()) {
            let group = groups.get(r.group.as_str()).map_or(&[][..], Vec::as_slice);
            out[i] = standalone_tokens(r, group.len() as u32, group, salt);
            continue;
        }
        let stream = r.request_id ^ salt.wrapping_mul(0xA076_1D64_78BD_642F);
        let own = |n: u32| super::common::fresh_tokens(stream, 0, n as usize);
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
            _ => match r.parent {
                // The parent's sequence is built (an earlier record); the
                // prompt keeps the length BLIS gives it (group prefix and
                // own tokens), its first `len` tokens copied.
                Some((parent, len)) => {
                    let total = group.len() + r.input as usize;
                    let Tokens { prompt, output, .. } = &out[parent];
                    let mut p: Vec<u32> = prompt.iter().chain(output.iter()).take(len as usize).copied().collect();
                    p.extend(own(total.saturating_sub(p.len()) as u32));
                    p
                }
                None => {
                    let mut p = group.to_vec();
                    p.extend(own(r.input));
                    p
                }
            },
        };
        prompt.truncate(super::common::MAX_TOKENS as usize);
        let output: Vec<u32> = super::common::fresh_tokens(stream, 1 << 40, r.output as usize).collect();
        if accumulate && !r.session.is_empty() {
            let mut ctx = prompt.clone();
            ctx.extend_from_slice(&output);
            context.insert(&r.session, ctx);
        }
        out[i] = Tokens { prompt_len: prompt.len() as u32, output_len: output.len() as u32, prompt, output };
    }
    out
}

/// The tokens of record `r`, which nothing else's are built from and which
/// copies none (no accumulate corpus, no `prefix_parent` either way): its
/// group's prefix (`group_len` tokens, `group`: drawn where ids are) and its
/// own fresh tokens, ids drawn only where the engine knows them
/// ([`token_ids`] on such a record; the streamed path's whole tokenizing).
fn standalone_tokens(r: &Record, group_len: u32, group: &[u32], salt: u64) -> Tokens {
    let max = super::common::MAX_TOKENS;
    if !r.ids.0 {
        let prompt_len = (u64::from(group_len) + u64::from(r.input)).min(u64::from(max)) as u32;
        return Tokens { prompt_len, output_len: r.output, ..Tokens::default() };
    }
    let stream = r.request_id ^ salt.wrapping_mul(0xA076_1D64_78BD_642F);
    let mut prompt = group.to_vec();
    prompt.extend(super::common::fresh_tokens(stream, 0, r.input as usize));
    prompt.truncate(max as usize);
    let output: Vec<u32> = super::common::fresh_tokens(stream, 1 << 40, r.output as usize).collect();
    Tokens { prompt_len: prompt.len() as u32, output_len: output.len() as u32, prompt, output }
}

/// A first round's `think_time_us` (which BLIS ignores: round 0 has no
/// predecessor) is the wait between the client sending the request and
/// this call (a root `interval`, as `run --trace-output` writes it): the
/// request arrives that much before the call is sent, and E2E counts it.
fn root_wait(r: &Record) -> u64 {
    if r.round == 0 { r.think_us.min(r.arrival_us) } else { 0 }
}

/// Record `r`'s call: its prompt and output, their ids where the engine
/// knows them, and its adapter.
fn call(t: Tokens, r: &Record) -> LlmCall {
    let (known_prompt, known_output) = r.ids;
    LlmCall::new(t.prompt_len, t.output_len)
        .with_input_ids(known_prompt.then_some(t.prompt))
        .with_output_ids((known_prompt && known_output).then_some(t.output))
        .with_lora(r.adapter.clone())
        .with_priority(r.priority.clone().unwrap_or(0))
}

/// Record `r` as a request of its own, with its line.
fn single(r: &Record, ids: Tokens) -> (u64, Request) {
    let wait = root_wait(r);
    let mut request = super::common::one_call(r.request_id, (r.arrival_us - wait) as f64 / 1e6, call(ids, r));
    request.sub_requests[0].interval = wait as f64 / 1e6;
    request.traffic = r.traffic.clone();
    (r.line, request)
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
        if let Some(&i) = rounds[1..].iter().find(|&&i| records[i].dag.is_some()) {
            return Err(ImportError::new(
                file,
                records[i].line,
                "dag",
                format!("session {name}: only round 0 carries the session's DAG"),
            ));
        }
        let first = &records[rounds[0]];
        if let Some(dag) = &first.dag {
            out.push((first.line, dag_request(records, &rounds, dag, &mut ids, file, name)?));
            continue;
        }
        // As BLIS (`sessionHasRecordedThinkTime`): the recorded think times,
        // 0 included, when a round after the first has one; else the gaps
        // between the rounds' `arrival_time_us`.
        let recorded = rounds[1..].iter().any(|&i| records[i].think_us > 0);
        let wait = root_wait(first);
        let mut nodes = Vec::with_capacity(rounds.len());
        for (k, &i) in rounds.iter().enumerate() {
            let r = &records[i];
            let think_us = if k == 0 {
                wait
            } else if recorded {
                r.think_us
            } else {
                r.arrival_time_us.saturating_sub(records[rounds[k - 1]].arrival_time_us)
            };
            nodes.push(SubRequest {
                next: if k + 1 < rounds.len() { vec![k as u32 + 1] } else { vec![] },
                interval: think_us as f64 / 1e6,
                kind: NodeKind::Llm(call(std::mem::take(&mut ids[i]), r)),
                result: None,
            });
        }
        let request = Request {
            traffic: first.traffic.clone(),
            request_id: RequestId::Int(first.request_id),
            arrival_time: (first.arrival_us - wait) as f64 / 1e6,
            initial: vec![0],
            sub_requests: nodes,
        };
        out.push((first.line, request));
    }
    Ok(out)
}

/// The session of `rounds` (in round order) as the request DAG its round
/// 0's `dag` column gives: every round named once, the roots the nodes no
/// successor list names (ascending), the request sent when the chain's
/// would be (round 0's time less its root wait).
fn dag_request(
    records: &[Record],
    rounds: &[usize],
    dag: &[DagNode],
    ids: &mut [Tokens],
    file: &str,
    name: &str,
) -> Result<Request, ImportError> {
    let first = &records[rounds[0]];
    let at = |reason: String| ImportError::new(file, first.line, "dag", format!("session {name}: {reason}"));
    let mut named = vec![false; rounds.len()];
    for node in dag {
        if let Some(k) = node.round {
            match named.get_mut(k as usize) {
                None => return Err(at(format!("round {k}: the session has {} rounds", rounds.len()))),
                Some(true) => return Err(at(format!("round {k} is named twice"))),
                Some(seen) => *seen = true,
            }
        }
    }
    if let Some(k) = named.iter().position(|seen| !seen) {
        return Err(at(format!("round {k} is not a node of the DAG")));
    }
    let mut has_predecessor = vec![false; dag.len()];
    for node in dag {
        for &j in &node.next {
            has_predecessor[j as usize] = true;
        }
    }
    let sub_requests = dag
        .iter()
        .map(|node| {
            node.sub_request(match node.round {
                Some(k) => {
                    let i = rounds[k as usize];
                    NodeKind::Llm(call(std::mem::take(&mut ids[i]), &records[i]))
                }
                None => NodeKind::ToolCall { duration: node.duration_us as f64 / 1e6 },
            })
        })
        .collect();
    Ok(Request {
        traffic: first.traffic.clone(),
        request_id: RequestId::Int(first.request_id),
        arrival_time: (first.arrival_us - root_wait(first)) as f64 / 1e6,
        initial: (0..dag.len() as u32).filter(|&i| !has_predecessor[i as usize]).collect(),
        sub_requests,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(line: u64, arrival: u64, send: u64, first: u64) -> Record {
        Record {
            line,
            request_id: line,
            session: String::new(),
            round: 0,
            group: String::new(),
            prefix_length: 0,
            input: 10,
            input_tokens: 10,
            server_input_tokens: 0,
            output: 1,
            arrival_us: 0,
            arrival_time_us: arrival,
            send_us: send,
            first_chunk_us: first,
            last_chunk_us: first,
            status: "ok".into(),
            think_us: 0,
            reset: 0,
            parent: None,
            ids: (true, true),
            dag: None,
            adapter: None,
            priority: Ok(0),
            traffic: Traffic::default(),
        }
    }

    #[test]
    fn epoch_send_times_are_rebased_to_the_first_send() {
        let epoch = 1_764_590_400_000_000;
        let mut r = vec![record(2, 5, epoch + 100, epoch + 300), record(3, 900, epoch + 1_000, epoch + 1_500)];
        rebase_epoch(&mut r, "t.csv").unwrap();
        // The first send falls at its record's arrival (5), the rest keep
        // their distance from it.
        assert_eq!((r[0].send_us, r[0].first_chunk_us, r[0].arrival_us), (5, 205, 5));
        assert_eq!((r[1].send_us, r[1].first_chunk_us, r[1].arrival_us), (905, 1_405, 905));
        // Arrivals absolute too: all from the first time.
        let mut r = vec![record(2, epoch + 50, epoch + 100, epoch + 300), record(3, epoch, 0, 0)];
        rebase_epoch(&mut r, "t.csv").unwrap();
        assert_eq!((r[0].arrival_time_us, r[0].send_us, r[0].first_chunk_us), (50, 100, 300));
        assert_eq!((r[1].arrival_time_us, r[1].arrival_us), (0, 0));
        // Relative times are left alone.
        let mut r = vec![record(2, 5, 100, 300), record(3, 0, 0, 0)];
        rebase_epoch(&mut r, "t.csv").unwrap();
        assert_eq!((r[0].send_us, r[0].arrival_us, r[1].arrival_us), (100, 100, 0));
    }

    #[test]
    fn a_dag_column_reads_its_nodes_and_refuses_a_cycle() {
        let dag = parse_dag("r0>1|2;t956842+2000>3;t636920>3;r1+10000").unwrap();
        assert_eq!(dag.len(), 4);
        assert_eq!(dag[0], DagNode { round: Some(0), duration_us: 0, interval_us: 0, next: vec![1, 2] });
        assert_eq!(dag[1], DagNode { round: None, duration_us: 956_842, interval_us: 2_000, next: vec![3] });
        assert_eq!(dag[3], DagNode { round: Some(1), duration_us: 0, interval_us: 10_000, next: vec![] });
        assert!(parse_dag("r0>1;t5>0").unwrap_err().contains("cycle"));
        assert!(parse_dag("r0>0").unwrap_err().contains("itself"));
        assert!(parse_dag("r0>1|1;r1").unwrap_err().contains("listed twice"));
        assert!(parse_dag("r0+1e3").unwrap_err().contains("not a whole number"));
        // Each time within the clock, and their sum along a path.
        assert!(parse_dag("t100000000000001").unwrap_err().contains("beyond"));
        assert!(parse_dag("t90000000000000>1;t90000000000000").unwrap_err().contains("add up"));
    }

    #[test]
    fn a_first_rounds_think_time_is_a_wait_before_its_call() {
        let mut r = record(2, 0, 700_000, 0);
        r.arrival_us = 700_000;
        r.think_us = 500_000;
        assert_eq!(root_wait(&r), 500_000);
        r.round = 1;
        assert_eq!(root_wait(&r), 0);
        // Never before the clock's start.
        r.round = 0;
        r.think_us = 900_000;
        assert_eq!(root_wait(&r), 700_000);
    }

    #[test]
    fn ids_nothing_can_use_are_not_drawn_and_the_lengths_stay() {
        // Record 0 opens group g (8 tokens); record 1 copies 12 tokens of
        // record 0 (its parent); record 2 is in the group, record 3 alone.
        let mut r: Vec<Record> = (0..4).map(|i| record(i, i * 10, 0, 0)).collect();
        for i in [0, 2] {
            r[i].group = "g".into();
            r[i].prefix_length = 8;
        }
        r[1].parent = Some((0, 12));
        r[3].input = 300;
        let known = token_ids(&r, false, 0);
        for x in &mut r {
            x.ids = (false, false);
        }
        let unknown = token_ids(&r, false, 0);
        for (i, (k, u)) in known.iter().zip(&unknown).enumerate() {
            assert_eq!((u.prompt_len, u.output_len), (k.prompt_len, k.output_len), "record {i}");
            assert_eq!((k.prompt.len() as u32, k.output.len() as u32), (k.prompt_len, k.output_len));
        }
        // Drawn: the parent (copied) and the child (its length is its
        // parent's); not drawn: the others, whose ids the engine is not given.
        let drawn: Vec<bool> = unknown.iter().map(|u| !u.prompt.is_empty()).collect();
        assert_eq!(drawn, [true, true, false, false]);
        assert_eq!(unknown[2].prompt_len, 8 + 10);
    }
}
