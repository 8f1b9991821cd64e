//! Traces in formats users already have, read as request sources: each
//! importer streams [`Request`]s the simulator consumes directly (`run --input
//! FORMAT:PATH`, a plan's `workload: {import: FORMAT, path: …}`), and
//! `blis-sweep import` writes them as workload JSONL when wanted. One file per
//! format; each documents its mapping and rejects a bad row with
//! `FILE:LINE: column: reason`.
//!
//! - [`mooncake`]: Mooncake's FAST'25 traces (`timestamp` ms, lengths,
//!   `hash_ids` of 512-token blocks), prompts kept as block identities.
//! - [`azure`]: the Azure LLM inference traces of 2023 (Splitwise).
//! - [`agent_calls`]: agent sessions from `lmcache-agent-trace`'s per-call
//!   table, each a request DAG (or, `fixed-accumulate`, one request per call at
//!   its recorded time).
//! - [`tracev2`]: BLIS's trace pair (header YAML + data CSV), with its
//!   session modes.
//! - [`llmservingsim_dataset`]: LLMServingSim's request datasets (arrival
//!   ns, lengths, the prompts' token ids), as the ISPASS'26 artifact ships
//!   them.
//!
//! Real vLLM runs with their measurements (`blis-sweep convert`, fit, the
//! calibration matrix) come in through [`measured`], the one list of their
//! sources: a workload, a baseline and a scenario each ([`blis_vllm_h100`],
//! [`llmservingsim`]), or the aggregates of a run ([`blis_trainval`],
//! [`blis_eval`], [`silicon`], [`ispass26`]); [`common`] holds what they
//! share.

pub mod agent_calls;
pub mod azure;
pub mod blis_eval;
pub mod blis_trainval;
pub mod blis_vllm_h100;
pub mod common;
pub mod ispass26;
pub mod llmservingsim;
pub mod llmservingsim_dataset;
pub mod measured;
pub mod mooncake;
pub mod silicon;
pub mod tracev2;

use std::path::Path;

use super::types::Request;

/// The formats `--input FORMAT:PATH` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFormat {
    /// See [`mooncake`].
    Mooncake,
    /// See [`azure`].
    Azure,
    /// See [`agent_calls`].
    AgentCalls,
    /// See [`tracev2`]: the path is the header, the data beside it.
    TraceV2,
    /// See [`llmservingsim_dataset`].
    LlmservingsimDataset,
}

impl ImportFormat {
    /// Every format, as named on the command line.
    pub const ALL: [ImportFormat; 5] = [
        ImportFormat::Mooncake,
        ImportFormat::Azure,
        ImportFormat::AgentCalls,
        ImportFormat::TraceV2,
        ImportFormat::LlmservingsimDataset,
    ];

    /// The name `--input` and plans use.
    pub fn name(self) -> &'static str {
        match self {
            ImportFormat::Mooncake => "mooncake",
            ImportFormat::Azure => "azure",
            ImportFormat::AgentCalls => "agent-calls",
            ImportFormat::TraceV2 => "tracev2",
            ImportFormat::LlmservingsimDataset => "llmservingsim-dataset",
        }
    }

    /// The format called `name`, or a message listing them.
    pub fn parse(name: &str) -> Result<ImportFormat, String> {
        Self::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
            format!("unknown format `{name}`; available: {}", Self::ALL.map(ImportFormat::name).join(", "))
        })
    }
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
}

/// The most sessions a TraceV2 pool replays (`total_sessions`). The pool is
/// built as the run reads it and the capped client reads no further ahead
/// than it can send, so memory stays flat (10^5 sessions: 16 MB) — except
/// where the client must read on: at a `--horizon`, every session not sent
/// is read and reported unfinished, and with a rejecting router
/// (`max_queue`). There 10^6 sessions of a 5-record corpus took 1.6 GB
/// (10^8 once asked for 8.8 GB up front and aborted), hence the bound.
pub const MAX_POOL_SESSIONS: u32 = 1_000_000;

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

/// Opens `path` as `format`.
pub fn open(format: ImportFormat, path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    match format {
        ImportFormat::Mooncake => mooncake::open(path),
        ImportFormat::Azure => azure::open(path),
        ImportFormat::AgentCalls => agent_calls::open(path, options),
        ImportFormat::TraceV2 => tracev2::open(path, options),
        ImportFormat::LlmservingsimDataset => llmservingsim_dataset::open(path),
    }
}

/// Opens `path` for reading, or names it. A pipe or FIFO is copied on its
/// first open and read from the copy on every open ([`crate::spool`]): an
/// importer's trace is read more than once (a count pass, then the runs).
fn open_file(path: &Path) -> Result<std::io::BufReader<crate::spool::Input>, ImportError> {
    crate::spool::open(path)
        .map(|f| std::io::BufReader::with_capacity(1 << 20, f))
        .map_err(|e| ImportError::new(&path.display().to_string(), 0, "file", format!("cannot open: {e}")))
}

/// Streams the non-blank lines of a JSON-lines trace through `row(file,
/// line, text)`: one request a line, a read error named by its line. The
/// JSON-lines importers' one reading loop.
fn json_lines<F>(path: &Path, mut row: F) -> Result<Requests, ImportError>
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

/// Fresh token ids of stream `stream` from position `from`: deterministic,
/// in `0..32000` (a Llama-2-sized vocabulary); distinct streams share no
/// block of them.
pub(crate) fn fresh_tokens(stream: u64, from: u64, n: usize) -> impl Iterator<Item = u32> {
    (from..from + n as u64).map(move |k| {
        let mut z = stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k.wrapping_add(0x6A09_E667_F3BC_C909);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % 32_000) as u32
    })
}

/// An llm call of these lengths and nothing else.
fn lengths(input: u32, output: u32) -> super::types::LlmCall {
    super::types::LlmCall {
        input_tokens: input,
        output_tokens: output,
        input_token_ids: None,
        output_token_ids: None,
        seeded: None,
        model: None,
        prompt_blocks: None,
    }
}

/// A one-node request: one llm call.
fn one_call(id: u64, arrival_s: f64, call: super::types::LlmCall) -> Request {
    Request {
        request_id: super::types::RequestId::Int(id),
        arrival_time: (arrival_s * 1e6).round() / 1e6,
        initial: vec![0],
        sub_requests: vec![super::types::SubRequest {
            next: vec![],
            interval: 0.0,
            kind: super::types::NodeKind::Llm(call),
            result: None,
        }],
    }
}

/// Tokens one imported call may carry (4 Mi, as for converted runs: a
/// workload row written from it stays under the reader's 32 MiB line
/// limit); real prompts are far shorter.
const MAX_TOKENS: u32 = 1 << 22;

/// Checks a token count read from a trace: at least `min`, at most
/// [`MAX_TOKENS`].
fn tokens(v: i64, min: i64) -> Result<u32, String> {
    if v < min {
        return Err(format!("{v} is below {min}"));
    }
    u32::try_from(v).ok().filter(|&n| n <= MAX_TOKENS).ok_or_else(|| format!("{v} exceeds {MAX_TOKENS}"))
}
