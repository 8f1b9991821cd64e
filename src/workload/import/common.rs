//! What every importer shares: the errors a bad input gives
//! ([`ImportError`] for a trace, [`ConvertError`] for a measured run; both
//! `FILE:LINE: field: reason`), the options and session modes of a trace,
//! what a conversion produces ([`Converted`]), files opened through the
//! spool, JSON lines and CSV rows, fresh token ids and the one-call requests
//! built from them. The importers import this file and nothing of each other
//! but what one source reads of another's data.
//!
//! Where the data has only TTFT and E2E per request, the baseline spreads
//! E2E − TTFT evenly over the remaining tokens (`spread`): per-request means
//! (and so mean ITL) are exact, per-token jitter is not represented.

use std::collections::HashMap;
use std::path::Path;

use crate::workload::types::{LlmCall, NodeKind, NodeResult, Request, RequestId, SubRequest};

/// A converted run.
#[derive(Debug, Clone)]
pub struct Converted {
    /// What was sent.
    pub workload: Vec<Request>,
    /// The same requests with the measured latencies.
    pub baseline: Vec<Request>,
    /// The deployment, as a scenario file.
    pub scenario_yaml: String,
    /// What the conversion assumed (printed for the user).
    pub notes: Vec<String>,
    /// The real client's request timeout, s, where requests hit it: replay
    /// with it (`run --timeout`) for the same load.
    pub client_timeout_s: Option<f64>,
}

impl Converted {
    /// The baseline as result JSONL (the format `calibrate --real` reads):
    /// each request's measured latencies, from its send.
    pub fn baseline_jsonl(&self) -> Vec<u8> {
        baseline_jsonl(&self.baseline)
    }
}

/// Requests carrying measured latencies as result JSONL (the format
/// `calibrate --real` reads): each request's latencies, from its send.
pub fn baseline_jsonl(baseline: &[Request]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in baseline {
        let result = r.sub_requests[0].result.as_ref().expect("baselines carry results");
        let times: Vec<u64> = result
            .token_latency
            .iter()
            .scan(0.0f64, |t, &l| {
                *t += l;
                Some((*t * 1e6).round() as u64)
            })
            .collect();
        crate::workload::writer::write_result_row(&mut out, r, &mut |_| {
            Some(crate::workload::writer::NodeTokens {
                start_us: 0,
                token_times_us: &times,
                replica: None,
                error: None,
            })
        });
    }
    out
}

/// Input data that cannot be converted. Fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {field}: {reason}", if *line == 0 { String::new() } else { format!(":{line}") })]
pub struct ConvertError {
    /// The file.
    pub file: String,
    /// 1-based line (0 when not about one line).
    pub line: u64,
    /// The column or key.
    pub field: String,
    /// Why.
    pub reason: String,
}

/// Tokens one imported call or converted request may carry (4 Mi: a
/// workload row written from it stays under the reader's 32 MiB line
/// limit); real prompts are far shorter.
pub(super) const MAX_TOKENS: u32 = 1 << 22;

/// Sorts `rows` (line, request) by arrival time, file order among equal
/// times, as the workload format requires; a repeated id is an error naming
/// both lines.
pub(super) fn in_arrival_order(mut rows: Vec<(u64, Request)>, file: &str) -> Result<Vec<Request>, ConvertError> {
    let mut seen: HashMap<&RequestId, u64> = HashMap::with_capacity(rows.len());
    for (line, r) in &rows {
        if let Some(first) = seen.insert(&r.request_id, *line) {
            return Err(ConvertError {
                file: file.to_owned(),
                line: *line,
                field: "request_id".to_owned(),
                reason: format!("{} repeats the id of line {first}", r.request_id),
            });
        }
    }
    rows.sort_by(|a, b| a.1.arrival_time.total_cmp(&b.1.arrival_time));
    Ok(rows.into_iter().map(|(_, r)| r).collect())
}

/// `v` as a count of at most `max`, or why not.
pub(super) fn count_in(v: f64, max: u64) -> Result<u64, String> {
    if !(v.is_finite() && v >= 0.0 && v.fract() == 0.0) {
        return Err(format!("{v} is not a count"));
    }
    if v > max as f64 {
        return Err(format!("{v} exceeds {max}"));
    }
    Ok(v as u64)
}

/// `v` seconds, checked to fit the simulator's clock.
pub(super) fn seconds_in(v: f64) -> Result<f64, String> {
    crate::workload::types::checked_seconds_to_us(v).map(|_| v)
}

/// Deterministic token ids for a token stream identified by `stream`: the
/// same stream always gives the same ids, different streams (almost surely)
/// different ones. Ids are in `0..32000`.
pub(super) fn token_ids(stream: u64, n: usize) -> impl Iterator<Item = u32> {
    fresh_tokens(stream, 0, n)
}

pub(super) fn llm_request(
    id: RequestId,
    arrival_s: f64,
    input_ids: Vec<u32>,
    output_tokens: u32,
    latencies: Option<Vec<f64>>,
) -> Request {
    Request {
        traffic: Default::default(),
        request_id: id,
        arrival_time: (arrival_s * 1e6).round() / 1e6,
        initial: vec![0],
        sub_requests: vec![SubRequest {
            next: vec![],
            interval: 0.0,
            kind: NodeKind::Llm(LlmCall::for_prompt(input_ids, output_tokens)),
            result: latencies.map(|token_latency| NodeResult { token_latency, error: None, replica: None }),
        }],
    }
}

/// TTFT, then E2E − TTFT spread evenly over the other tokens, seconds.
pub(super) fn spread(ttft_s: f64, e2e_s: f64, output_tokens: u32) -> Vec<f64> {
    let mut v = vec![ttft_s.max(0.0)];
    if output_tokens > 1 {
        let gap = ((e2e_s - ttft_s) / f64::from(output_tokens - 1)).max(0.0);
        v.extend(std::iter::repeat_n(gap, output_tokens as usize - 1));
    }
    v
}

/// The index of column `name` of `path`'s header, or the error naming it.
pub(super) fn column(path: &Path, headers: &[String], name: &str) -> Result<usize, ConvertError> {
    headers.iter().position(|h| h == name).ok_or_else(|| ConvertError {
        file: path.display().to_string(),
        line: 1,
        field: name.to_owned(),
        reason: "missing column".to_owned(),
    })
}

pub(super) fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<Vec<String>>), ConvertError> {
    let file = path.display().to_string();
    let err = |line: u64, reason: String| ConvertError { file: file.clone(), line, field: "csv".to_owned(), reason };
    let mut reader = csv::Reader::from_path(path).map_err(|e| err(0, e.to_string()))?;
    let headers: Vec<String> = reader.headers().map_err(|e| err(1, e.to_string()))?.iter().map(str::to_owned).collect();
    let mut rows = Vec::new();
    for (i, r) in reader.records().enumerate() {
        rows.push(r.map_err(|e| err(i as u64 + 2, e.to_string()))?.iter().map(str::to_owned).collect());
    }
    Ok((headers, rows))
}

/// How a trace's sessions are replayed (the seed's session modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMode {
    /// Every record at its own recorded time, as recorded (`blis replay`'s
    /// default for TraceV2).
    Fixed,
    /// A session is one request DAG: each call is sent when the calls it
    /// follows have finished and the tool time after them has passed.
    ClosedLoop,
    /// Each call is its own request, sent at its recorded offset in the
    /// session whatever the simulated service did, with the same growing
    /// context: the real cross-session overlap, no feedback.
    FixedAccumulate,
}

impl SessionMode {
    /// The mode called `name` (`closed-loop`, `fixed-accumulate`).
    pub fn parse(name: &str) -> Result<SessionMode, String> {
        match name {
            "fixed" => Ok(SessionMode::Fixed),
            "closed-loop" => Ok(SessionMode::ClosedLoop),
            "fixed-accumulate" => Ok(SessionMode::FixedAccumulate),
            other => Err(format!("unknown session mode `{other}`; available: fixed, closed-loop, fixed-accumulate")),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            SessionMode::Fixed => "fixed",
            SessionMode::ClosedLoop => "closed-loop",
            SessionMode::FixedAccumulate => "fixed-accumulate",
        }
    }
}

/// What an importer may be told besides the file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ImportOptions {
    /// Sessions started per second (Poisson), for traces of sessions whose
    /// recorded start times are not one run's (agent-calls).
    pub session_rate: Option<f64>,
    /// How sessions are replayed (`None`: the format's default).
    pub session_mode: Option<SessionMode>,
    /// Seeds session arrivals and the corpus shuffle.
    pub seed: u64,
    /// TraceV2: the data CSV, when not beside the header.
    pub trace_data: Option<std::path::PathBuf>,
    /// TraceV2: replay a pool of this many sessions at once, a new one
    /// admitted as one completes (closed loop; the run's client caps it).
    pub concurrent_sessions: Option<u32>,
    /// TraceV2 pool: sessions in all (default: the corpus), the corpus
    /// cloned (fresh tokens but for group prefixes) to fill.
    pub total_sessions: Option<u32>,
    /// TraceV2 pool: a seeded Fisher–Yates shuffle of the corpus first.
    pub shuffle_corpus: bool,
    /// TraceV2: the `adapter` column is each call's LoRA adapter (the
    /// deployment serves adapters); else it is read and ignored, as before
    /// LoRA was modelled.
    pub adapters: bool,
    /// TraceV2: the `vllm_priority` column is each call's priority (the
    /// engines schedule by priority); else it is read and ignored.
    pub priorities: bool,
    /// Weka: the main agent alone, its subagents left out (BLIS's replay).
    pub drop_subagents: bool,
    /// Weka: replayed as an AgentX load (lanes of plays) instead of
    /// sessions arriving at a rate ([`crate::agentx`] runs it).
    pub agentic: Option<crate::workload::agentic::Agentic>,
    /// Session traces: the longest think time between a session's calls,
    /// seconds (0 = uncapped; `None`: the format's default).
    pub max_think_time: Option<f64>,
}

/// The most sessions a TraceV2 pool replays (`total_sessions`). The pool is
/// built as the run reads it and the capped client reads no further ahead
/// than it can send, so memory stays flat (10^5 sessions: 16 MB) — except
/// where the client must read on: at a `--horizon`, every session not sent
/// is read and reported unfinished, and with a rejecting router
/// (`max_queue`). There 10^6 sessions of a 5-record corpus took 1.6 GB
/// (10^8 once asked for 8.8 GB up front and aborted), hence the bound.
pub const MAX_POOL_SESSIONS: u32 = 1_000_000;

/// Session starts as a Poisson process at `options.session_rate`
/// (seeded by `options.seed`), for traces whose sessions carry no start
/// times of one run (agent-calls, weka).
pub(super) struct PoissonStarts {
    rate: f64,
    rng: rand_xoshiro::Xoshiro256PlusPlus,
    next_s: f64,
}

impl PoissonStarts {
    /// The starts for `format`'s `file`, or why there are none: no rate
    /// (`why` says why the format needs one) or not a positive one.
    pub(super) fn new(options: &ImportOptions, file: &str, format: &str, why: &str) -> Result<Self, ImportError> {
        use rand::SeedableRng;
        let rate = options.session_rate.ok_or_else(|| {
            ImportError::new(
                file,
                0,
                "session_rate",
                format!(
                    "{format} needs a session rate (sessions started per second: --session-rate, or session_rate in a \
                     plan); {why}"
                ),
            )
        })?;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ImportError::new(file, 0, "session_rate", format!("{rate} must be a positive number")));
        }
        Ok(PoissonStarts { rate, rng: rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(options.seed), next_s: 0.0 })
    }

    /// The rate, sessions per second.
    pub(super) fn rate(&self) -> f64 {
        self.rate
    }

    /// The next session's start, s (the first at 0), to the µs.
    pub(super) fn next_start(&mut self) -> f64 {
        use rand::RngExt;
        let start = self.next_s;
        self.next_s += -(1.0 - self.rng.random::<f64>()).ln() / self.rate;
        (start * 1e6).round() / 1e6
    }
}

/// A row an importer cannot take. Fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {column}: {reason}", if *line == 0 { String::new() } else { format!(":{line}") })]
pub struct ImportError {
    /// The file.
    pub file: String,
    /// 1-based line (0 when not about one line).
    pub line: u64,
    /// The column or field.
    pub column: String,
    /// Why.
    pub reason: String,
}

impl ImportError {
    pub(crate) fn new(file: &str, line: u64, column: &str, reason: impl Into<String>) -> ImportError {
        ImportError { file: file.to_owned(), line, column: column.to_owned(), reason: reason.into() }
    }
}

/// A stream of imported requests, in arrival order.
pub type Requests = Box<dyn Iterator<Item = Result<Request, ImportError>> + Send>;

/// What a trace file is read through.
pub(super) type Input = std::io::BufReader<crate::spool::Input>;

/// Opens `path` for reading, or names it. A pipe or FIFO is copied on its
/// first open and read from the copy on every open ([`crate::spool`]): an
/// importer's trace is read more than once (a count pass, then the runs).
pub(super) fn open_file(path: &Path) -> Result<Input, ImportError> {
    crate::spool::open(path)
        .map(|f| std::io::BufReader::with_capacity(1 << 20, f))
        .map_err(|e| ImportError::new(&path.display().to_string(), 0, "file", format!("cannot open: {e}")))
}

/// Streams the non-blank lines of a JSON-lines trace through `row(file,
/// line, text)`: one request a line, a read error named by its line. The
/// JSON-lines importers' one reading loop.
pub(super) fn json_lines<F>(path: &Path, mut row: F) -> Result<Requests, ImportError>
where
    F: FnMut(&str, u64, &str) -> Result<Request, ImportError> + Send + 'static,
{
    use std::io::BufRead;
    let file = path.display().to_string();
    let mut lines = open_file(path)?.lines();
    let mut line = 0u64;
    Ok(Box::new(std::iter::from_fn(move || {
        loop {
            line += 1;
            let text = match lines.next()? {
                Ok(t) => t,
                Err(e) => return Some(Err(ImportError::new(&file, line, "file", e.to_string()))),
            };
            if !text.trim().is_empty() {
                return Some(row(&file, line, &text));
            }
        }
    })))
}

/// Streams the records of a CSV trace, past its header, through `row(file,
/// line, record)`: one request a record, a read error named by its line,
/// nothing after the first error. The CSV importers' one streaming loop
/// (the counterpart of [`json_lines`]).
pub(super) fn csv_records<F>(reader: csv::Reader<Input>, path: &Path, mut row: F) -> Requests
where
    F: FnMut(&str, u64, &csv::StringRecord) -> Result<Request, ImportError> + Send + 'static,
{
    let file = path.display().to_string();
    let mut records = reader.into_records().enumerate();
    let mut failed = false;
    Box::new(std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let (i, record) = records.next()?;
        let line = i as u64 + 2;
        let built =
            record.map_err(|e| ImportError::new(&file, line, "csv", e.to_string())).and_then(|r| row(&file, line, &r));
        failed = built.is_err();
        Some(built)
    }))
}

/// Fresh token ids of stream `stream` from position `from`: deterministic,
/// in `0..32000` (a Llama-2-sized vocabulary); distinct streams share no
/// block of them.
pub(super) fn fresh_tokens(stream: u64, from: u64, n: usize) -> impl Iterator<Item = u32> {
    (from..from + n as u64).map(move |k| {
        let mut z = stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k.wrapping_add(0x6A09_E667_F3BC_C909);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % 32_000) as u32
    })
}

/// A one-node request: one llm call.
pub(super) fn one_call(id: u64, arrival_s: f64, call: crate::workload::types::LlmCall) -> Request {
    Request {
        traffic: Default::default(),
        request_id: crate::workload::types::RequestId::Int(id),
        arrival_time: (arrival_s * 1e6).round() / 1e6,
        initial: vec![0],
        sub_requests: vec![crate::workload::types::SubRequest {
            next: vec![],
            interval: 0.0,
            kind: crate::workload::types::NodeKind::Llm(call),
            result: None,
        }],
    }
}

/// Checks a token count read from a trace: at least `min`, at most
/// [`MAX_TOKENS`].
pub(super) fn tokens(v: i64, min: i64) -> Result<u32, String> {
    if v < min {
        return Err(format!("{v} is below {min}"));
    }
    u32::try_from(v).ok().filter(|&n| n <= MAX_TOKENS).ok_or_else(|| format!("{v} exceeds {MAX_TOKENS}"))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// `text` written to a scratch file and opened by `open` with `options`:
    /// an importer's unit tests on inline inputs.
    pub(in crate::workload::import) fn open_text(
        open: fn(&Path, &ImportOptions) -> Result<Requests, ImportError>,
        text: &str,
        options: &ImportOptions,
    ) -> Result<Vec<Request>, ImportError> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!("blis-import-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(N.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string());
        std::fs::write(&path, text).unwrap();
        let r = open(&path, options).and_then(|rows| rows.collect());
        let _ = std::fs::remove_file(&path);
        r
    }

    /// A request's llm calls (it has no tool calls).
    pub(in crate::workload::import) fn llm_calls(r: &Request) -> Vec<&LlmCall> {
        r.sub_requests
            .iter()
            .map(|n| match &n.kind {
                NodeKind::Llm(c) => c,
                NodeKind::ToolCall { .. } => panic!("no tool calls"),
            })
            .collect()
    }

    #[test]
    fn spreading_keeps_ttft_and_e2e() {
        let v = spread(0.1, 0.5, 5);
        assert_eq!(v.len(), 5);
        assert_eq!(v[0], 0.1);
        assert!((v.iter().sum::<f64>() - 0.5).abs() < 1e-12);
        assert_eq!(spread(0.2, 0.2, 1), vec![0.2]);
    }

    #[test]
    fn token_ids_are_deterministic_per_stream() {
        let a: Vec<u32> = token_ids(3, 8).collect();
        assert_eq!(a, token_ids(3, 8).collect::<Vec<_>>());
        assert_ne!(a, token_ids(4, 8).collect::<Vec<_>>());
        assert!(a.iter().all(|&t| t < 32_000));
    }
}
