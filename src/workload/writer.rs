//! The one place workload and result JSONL rows are written. A result row
//! repeats the request's DAG field by field and adds `token_latency` (seconds)
//! to every llm node, plus `error` where a node could not (fully) run.
//!
//! Token latencies are derived from absolute token times in integer
//! microseconds, so every value written is an exact multiple of 1 µs.

use std::io::{self, Write};

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;

use super::types::{NodeKind, Request, RequestId};

/// What the simulator knows of one llm node when the request is written.
#[derive(Debug, Clone, Copy)]
pub struct NodeTokens<'a> {
    /// When the node entered the scheduler, µs.
    pub start_us: u64,
    /// Absolute emission time of each output token, µs, ascending.
    pub token_times_us: &'a [u64],
    /// Why the node did not (fully) run.
    pub error: Option<&'a str>,
}

/// Writes `request` as a workload row (no results), newline-terminated.
pub fn write_workload_row(out: &mut impl Write, request: &Request) -> io::Result<()> {
    write_row(out, request, &mut |_| None)
}

/// Writes `request` as a result row. `tokens(i)` gives node `i`'s outcome;
/// it is asked for llm nodes only.
pub fn write_result_row<'a>(
    out: &mut impl Write,
    request: &Request,
    tokens: &mut dyn FnMut(usize) -> Option<NodeTokens<'a>>,
) -> io::Result<()> {
    write_row(out, request, tokens)
}

fn write_row<'a>(
    out: &mut impl Write,
    request: &Request,
    tokens: &mut dyn FnMut(usize) -> Option<NodeTokens<'a>>,
) -> io::Result<()> {
    let sub_requests: Vec<SubOut<'_>> = request
        .sub_requests
        .iter()
        .enumerate()
        .map(|(i, sub)| {
            let (llm, duration) = match &sub.kind {
                NodeKind::Llm(call) => (Some(call), None),
                NodeKind::ToolCall { duration } => (None, Some(*duration)),
            };
            let result = llm.and_then(|_| tokens(i));
            SubOut {
                kind: if llm.is_some() { "llm" } else { "tool_call" },
                input_tokens: llm.map_or(0, |c| c.input_tokens),
                output_tokens: llm.map_or(0, |c| c.output_tokens),
                next: &sub.next,
                interval: sub.interval,
                duration,
                input_token_ids: llm.and_then(|c| c.input_token_ids.as_deref()),
                output_token_ids: llm.and_then(|c| c.output_token_ids.as_deref()),
                known_tokens: llm.and_then(|c| c.seeded.map(|s| s.known_tokens)),
                kv_tokens: llm.and_then(|c| c.seeded.map(|s| s.kv_tokens)),
                model: llm.and_then(|c| c.model.as_deref()),
                token_latency: result.map(|r| Latencies { start_us: r.start_us, times: r.token_times_us }),
                error: result.and_then(|r| r.error),
            }
        })
        .collect();
    let row = RowOut {
        request_id: &request.request_id,
        arrival_time: request.arrival_time,
        initial: &request.initial,
        sub_requests,
    };
    serde_json::to_writer(&mut *out, &row).map_err(io::Error::other)?;
    out.write_all(b"\n")
}

#[derive(Serialize)]
struct RowOut<'a> {
    request_id: &'a RequestId,
    arrival_time: f64,
    initial: &'a [u32],
    sub_requests: Vec<SubOut<'a>>,
}

#[derive(Serialize)]
struct SubOut<'a> {
    kind: &'static str,
    input_tokens: u32,
    output_tokens: u32,
    next: &'a [u32],
    interval: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_token_ids: Option<&'a [u32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_token_ids: Option<&'a [u32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    known_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_latency: Option<Latencies<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::Int(n) => s.serialize_u64(*n),
            RequestId::Str(v) => s.serialize_str(v),
        }
    }
}

/// Absolute token times rendered as latencies: first from the node's start,
/// then gaps.
struct Latencies<'a> {
    start_us: u64,
    times: &'a [u64],
}

impl Serialize for Latencies<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.times.len()))?;
        let mut previous = self.start_us;
        for &t in self.times {
            seq.serialize_element(&((t - previous) as f64 / 1e6))?;
            previous = t;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::reader::{Format, Reader};

    const LINE: &str = r#"{"request_id":"a","arrival_time":1.5,"initial":[0],"sub_requests":[{"kind":"llm","input_tokens":4,"output_tokens":2,"next":[1],"interval":0.0},{"kind":"tool_call","input_tokens":0,"output_tokens":0,"next":[],"interval":0.25,"duration":0.5}]}"#;

    #[test]
    fn workload_rows_round_trip() {
        let request = Reader::new(LINE.as_bytes(), "t", Format::Workload).next().unwrap().unwrap();
        let mut out = Vec::new();
        write_workload_row(&mut out, &request).unwrap();
        assert_eq!(String::from_utf8(out).unwrap().trim_end(), LINE);
    }

    #[test]
    fn result_rows_carry_latencies_and_read_back() {
        let request = Reader::new(LINE.as_bytes(), "t", Format::Workload).next().unwrap().unwrap();
        let times = [1_512_000, 1_520_500];
        let mut out = Vec::new();
        write_result_row(&mut out, &request, &mut |_| {
            Some(NodeTokens { start_us: 1_500_000, token_times_us: &times, error: None })
        })
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#""token_latency":[0.012,0.0085]"#), "{text}");
        let back = Reader::new(text.as_bytes(), "t", Format::Results).next().unwrap().unwrap();
        assert_eq!(back.sub_requests[0].result.as_ref().unwrap().token_latency, vec![0.012, 0.0085]);
    }
}
