//! What every importer of measured runs shares: the error a bad input
//! gives ([`ConvertError`], `FILE:LINE: field: reason`), what a conversion
//! produces ([`Converted`]), CSV rows and their columns, fresh token ids and
//! the one-call requests built from them.
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
        let mut out = Vec::new();
        for r in &self.baseline {
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

/// Tokens one converted request may carry (4 Mi: its JSONL line stays under
/// the reader's 32 MiB limit); real prompts are far shorter.
pub(super) const MAX_TOKENS: u64 = 1 << 22;

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
    super::fresh_tokens(stream, 0, n)
}

pub(super) fn llm_request(
    id: RequestId,
    arrival_s: f64,
    input_ids: Vec<u32>,
    output_tokens: u32,
    latencies: Option<Vec<f64>>,
) -> Request {
    Request {
        request_id: id,
        arrival_time: (arrival_s * 1e6).round() / 1e6,
        initial: vec![0],
        sub_requests: vec![SubRequest {
            next: vec![],
            interval: 0.0,
            kind: NodeKind::Llm(LlmCall {
                input_tokens: input_ids.len() as u32,
                output_tokens,
                input_token_ids: Some(input_ids),
                output_token_ids: None,
                seeded: None,
                model: None,
                prompt_blocks: None,
            }),
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

#[cfg(test)]
mod tests {
    use super::*;

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
