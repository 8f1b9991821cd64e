//! Latencies per request and per llm node, read from either side of a
//! calibration: a result JSONL (ours, or a real vLLM baseline in the same
//! format) or a BLIS TraceV2 pair (header YAML + data CSV). Both become the
//! same [`Observations`], so the comparison does not care where they came from.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use crate::workload::NodeKind;
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
    let io = |p: &Path| {
        let file = p.display().to_string();
        move |source| ObservedError::Io { file: file.clone(), source }
    };
    let header_text = std::fs::read_to_string(header).map_err(io(header))?;
    let header_value: serde_json::Value = crate::yaml::parse(&header_text).map_err(|e| ObservedError::Trace {
        file: header.display().to_string(),
        line: e.line,
        field: "yaml".to_owned(),
        reason: e.message,
    })?;
    let mut obs = Observations {
        header_warm_up: header_value.get("warm_up_requests").and_then(serde_json::Value::as_u64).map(|v| v as usize),
        header_rtt_ms: header_value.pointer("/network/measured_rtt_ms").and_then(serde_json::Value::as_f64),
        ..Observations::default()
    };
    let file = data.display().to_string();
    let mut reader = csv::Reader::from_path(data)
        .map_err(|e| ObservedError::Io { file: file.clone(), source: std::io::Error::other(e) })?;
    let headers = reader
        .headers()
        .map_err(|e| ObservedError::Io { file: file.clone(), source: std::io::Error::other(e) })?
        .clone();
    let column = |name: &str| headers.iter().position(|h| h == name);
    let need = |name: &str| {
        column(name).ok_or_else(|| ObservedError::Trace {
            file: file.clone(),
            line: 1,
            field: name.to_owned(),
            reason: "missing column".to_owned(),
        })
    };
    let (c_id, c_send, c_first, c_last) =
        (need("request_id")?, need("send_time_us")?, need("first_chunk_time_us")?, need("last_chunk_time_us")?);
    let (c_status, c_in, c_out) = (column("status"), need("input_tokens")?, need("output_tokens")?);
    let (c_server_in, c_prefix) = (column("server_input_tokens"), column("prefix_length"));
    for (index, record) in reader.records().enumerate() {
        let line = index as u64 + 2;
        let record = record.map_err(|e| ObservedError::Trace {
            file: file.clone(),
            line,
            field: "csv".to_owned(),
            reason: e.to_string(),
        })?;
        let num = |c: usize, name: &str| -> Result<f64, ObservedError> {
            let v = record.get(c).unwrap_or("").trim();
            if v.is_empty() {
                return Ok(0.0);
            }
            v.parse::<f64>().map_err(|_| ObservedError::Trace {
                file: file.clone(),
                line,
                field: name.to_owned(),
                reason: format!("`{v}` is not a number"),
            })
        };
        let id = record.get(c_id).unwrap_or("").trim().to_owned();
        let (send, first, last) =
            (num(c_send, "send_time_us")?, num(c_first, "first_chunk_time_us")?, num(c_last, "last_chunk_time_us")?);
        let ok = c_status.is_none_or(|c| record.get(c) == Some("ok"));
        let server_in = c_server_in.map(|c| num(c, "server_input_tokens")).transpose()?.unwrap_or(0.0);
        let prefix = c_prefix.map(|c| num(c, "prefix_length")).transpose()?.unwrap_or(0.0);
        let input = if server_in > 0.0 { server_in } else { num(c_in, "input_tokens")? + prefix };
        let output = num(c_out, "output_tokens")?;
        // Negative durations (clock skew) make a record unusable, as in BLIS.
        let valid = ok && first >= send && last >= first;
        if valid {
            obs.nodes.insert(
                (id.clone(), 0),
                NodeObs {
                    ttft_us: first - send,
                    itl_us: None,
                    input_tokens: input as u64,
                    output_tokens: output as u64,
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
                output_tokens: output as u64,
                llm_nodes,
            },
        );
        obs.order.push(id);
    }
    Ok(obs)
}
