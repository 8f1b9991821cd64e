//! Latencies per request and per llm node, read from either side of a
//! calibration: a result JSONL (ours, or a real vLLM baseline in the same
//! format) or a BLIS TraceV2 pair (header YAML + data CSV). Both become the
//! same [`Observations`], so the comparison does not care where they came from.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use crate::workload::NodeKind;
use crate::workload::import::common::ImportError;
use crate::workload::import::tracev2;
use crate::workload::reader::{Format, ReadError, Reader};
use crate::workload::timeline::node_times;

/// One request's end-to-end view.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestObs {
    /// Position in its file (warm-up exclusion counts these).
    pub index: usize,
    /// When it was sent, µs.
    pub send_us: f64,
    /// Last token of its last node − send, µs (`None` if it did not complete).
    pub e2e_us: Option<f64>,
    /// Output tokens it produced.
    pub output_tokens: u64,
    /// Its llm nodes that have observations, ascending.
    pub llm_nodes: Vec<u32>,
}

/// One llm node's view.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeObs {
    /// Entering the scheduler (or send) to first token, µs.
    pub ttft_us: f64,
    /// Mean inter-token gap, µs (≥ 2 tokens).
    pub itl_us: Option<f64>,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Output tokens requested.
    pub output_tokens: u64,
}

/// Everything read from one side, keyed by request id (and node).
#[derive(Debug, Clone, Default)]
pub struct Observations {
    /// By request id.
    pub requests: HashMap<String, RequestObs>,
    /// By (request id, node index).
    pub nodes: HashMap<(String, u32), NodeObs>,
    /// Request ids in file order (the report iterates this, never the maps).
    pub order: Vec<String>,
    /// Warm-up count and RTT (ms) from a TraceV2 header, if any.
    pub header_warm_up: Option<usize>,
    /// Measured RTT from a TraceV2 header, ms.
    pub header_rtt_ms: Option<f64>,
}

/// A side that cannot be read. Fatal.
#[derive(Debug, thiserror::Error)]
pub enum ObservedError {
    /// A result JSONL breaks the format.
    #[error(transparent)]
    Results(#[from] ReadError),
    /// A file cannot be read.
    #[error("{file}: {source}")]
    Io {
        /// The path.
        file: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A TraceV2 file is malformed.
    #[error("{file}:{line}: {field}: {reason}")]
    Trace {
        /// The path.
        file: String,
        /// 1-based line.
        line: u64,
        /// Column or key.
        field: String,
        /// Why.
        reason: String,
    },
}

/// Reads a result JSONL.
pub fn from_results(input: impl BufRead, file: &str) -> Result<Observations, ObservedError> {
    let mut obs = Observations::default();
    for (index, row) in Reader::new(input, file, Format::Results).enumerate() {
        let request = row?;
        let id = request.request_id.to_string();
        let times = node_times(&request);
        let send_us = request.arrival_time * 1e6;
        let complete = times.iter().all(|t| t.as_ref().is_some_and(|t| !t.failed));
        let last = times.iter().flatten().map(|t| t.finish_us).max();
        let mut output_tokens = 0;
        let mut llm_nodes = Vec::new();
        for (i, (sub, t)) in request.sub_requests.iter().zip(&times).enumerate() {
            let (NodeKind::Llm(call), Some(t)) = (&sub.kind, t) else { continue };
            output_tokens += t.token_times_us.len() as u64;
            let Some(&first) = t.token_times_us.first() else { continue };
            let gaps = t.token_times_us.len().saturating_sub(1);
            let itl_us = (gaps > 0).then(|| (t.token_times_us[gaps] - first) as f64 / gaps as f64);
            llm_nodes.push(i as u32);
            obs.nodes.insert(
                (id.clone(), i as u32),
                NodeObs {
                    ttft_us: (first - t.start_us) as f64,
                    itl_us,
                    input_tokens: u64::from(call.input_tokens),
                    output_tokens: u64::from(call.output_tokens),
                },
            );
        }
        let e2e_us = if complete { last.map(|l| l as f64 - send_us) } else { None };
        obs.requests.insert(id.clone(), RequestObs { index, send_us, e2e_us, output_tokens, llm_nodes });
        obs.order.push(id);
    }
    Ok(obs)
}

/// Reads a TraceV2 pair: `warm_up_requests` and `network.measured_rtt_ms`
/// from the header (other keys are informational), and per request
/// `request_id`, `send_time_us`, `first_chunk_time_us`, `last_chunk_time_us`,
/// `status`, `input_tokens` (or `server_input_tokens` when > 0, plus
/// `prefix_length`), `output_tokens` from the data CSV, located by header name.
pub fn from_trace(header: &Path, data: &Path) -> Result<Observations, ObservedError> {
    // The format is read in one place, the TraceV2 importer.
    let bad = |e: ImportError| ObservedError::Trace { file: e.file, line: e.line, field: e.column, reason: e.reason };
    let head = tracev2::read_header(header).map_err(bad)?;
    let mut obs = Observations {
        header_warm_up: Some(head.warm_up_requests as usize),
        header_rtt_ms: head.network.as_ref().and_then(|n| n.get("measured_rtt_ms")).and_then(serde_json::Value::as_f64),
        ..Observations::default()
    };
    for (index, r) in tracev2::read_records(data).map_err(bad)?.into_iter().enumerate() {
        let id = r.request_id.to_string();
        let (send, first, last) = (r.send_us as f64, r.first_chunk_us as f64, r.last_chunk_us as f64);
        let input = if r.server_input_tokens > 0 {
            r.server_input_tokens
        } else {
            u64::from(r.input_tokens) + u64::from(r.prefix_length)
        };
        // Negative durations (clock skew) make a record unusable, as in BLIS.
        let valid = r.status == "ok" && first >= send && last >= first;
        if valid {
            obs.nodes.insert(
                (id.clone(), 0),
                NodeObs {
                    ttft_us: first - send,
                    itl_us: None,
                    input_tokens: input,
                    output_tokens: u64::from(r.output),
                },
            );
        }
        let llm_nodes = if valid { vec![0] } else { vec![] };
        obs.requests.insert(
            id.clone(),
            RequestObs {
                index,
                send_us: send,
                e2e_us: valid.then_some(last - send),
                output_tokens: u64::from(r.output),
                llm_nodes,
            },
        );
        obs.order.push(id);
    }
    Ok(obs)
}
