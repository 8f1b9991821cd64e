//! `agent-calls`: agent sessions from the per-call table of
//! `../shared/data/lmcache-agent-trace/agent_calls.csv` (one row per real LLM
//! call of mini-SWE-agent, Magentic-One or tau-bench: `session_id`,
//! `call_index`, `timestamp_us`, `est_input_tokens`, `est_output_tokens`,
//! `shared_prefix_chars_with_prev_call`, `prev_input_is_prefix`,
//! `prev_output_appears_in_input`; rows of a session together, in
//! `call_index` order).
//!
//! Mapping, per session (calls in `call_index` order, which is timestamp
//! order):
//! - Sessions were recorded days apart, so they start as a Poisson process at
//!   `session_rate` sessions/s (seeded), in file order.
//! - Prompts: call 0 gets fresh token ids; call `j` keeps the previous call's
//!   prompt where the trace says they share it — all of it (and then the
//!   previous call's output, when `prev_output_appears_in_input`) when
//!   `prev_input_is_prefix`, else its first `shared_prefix_chars / 4` tokens —
//!   then fresh ids up to its length. Outputs get fresh ids, so the prefix
//!   cache finds the previous output where the next prompt repeats it.
//! - Timing: a call's service on the hosted model is estimated as
//!   [`SERVICE_BASE_S`] + [`SERVICE_PER_TOKEN_S`] × its output tokens; the
//!   rest of the gap to the next call is a tool-call node.
//! - A call whose prompt was not recorded (`est_input_tokens` 0) continues
//!   the previous call's context: its prompt is that call's prompt and
//!   output (one token for a session's first call). A reply with no text
//!   (a bare tool call) is one output token.
//! - Overlap: call `j` that was sent before call `j − 1`'s estimated end and
//!   does not contain its output ran beside it (Magentic-One's interleaved
//!   agents): it forks from `j − 1`'s predecessors, delayed by the recorded
//!   gap. A call sent later joins every branch that ended before it.
//! - `closed-loop` (default): the session is one request DAG. With
//!   `fixed-accumulate` every call is its own one-node request, sent at the
//!   session's start plus its recorded offset, with the same prompts.

use std::path::Path;

use super::common::{ImportError, ImportOptions, Requests, SessionMode, open_file, tokens};
use crate::workload::types::{LlmCall, NodeKind, Request, RequestId, SubRequest};

/// Time to the first token assumed for the hosted model that served the
/// recorded calls. An assumption, not a measurement (the table records when
/// calls were sent, not how long they took): with [`SERVICE_PER_TOKEN_S`] the
/// estimate fits in the recorded gap after 90 % of the calls in
/// `agent_calls.csv`; of the rest all but one of 1,550 carry the previous
/// output, so they followed it (the tool time is then 0).
pub const SERVICE_BASE_S: f64 = 0.2;
/// Per output token (200 tokens/s), with [`SERVICE_BASE_S`].
pub const SERVICE_PER_TOKEN_S: f64 = 0.005;

/// One row.
#[derive(Debug, Clone)]
struct Call {
    line: u64,
    t_us: u64,
    input: u32,
    output: u32,
    shared_tokens: u32,
    prev_is_prefix: bool,
    prev_output_in: bool,
}

impl Call {
    fn est_end_us(&self) -> u64 {
        self.t_us + ((SERVICE_BASE_S + SERVICE_PER_TOKEN_S * f64::from(self.output)) * 1e6).round() as u64
    }
}

/// Reads `path` (a few thousand rows: read whole, then built session by
/// session as the stream is consumed).
pub(super) fn open(path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    let file = path.display().to_string();
    let rate = options.session_rate.ok_or_else(|| {
        ImportError::new(
            &file,
            0,
            "session_rate",
            "agent-calls needs a session rate (sessions started per second: --session-rate, or session_rate in a \
             plan); its sessions were recorded days apart",
        )
    })?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(ImportError::new(&file, 0, "session_rate", format!("{rate} must be a positive number")));
    }
    let sessions = read(path)?;
    let starts = super::common::poisson_starts(sessions.len(), rate, options.seed);
    // A slow rate pushes the last sessions past the clock (1e-9/s: 10^9 s
    // apart; 1e-320/s: an infinite gap). Refused here, naming the rate,
    // rather than written as arrivals the reader rejects (or `null`).
    let max_s = crate::workload::types::MAX_TIME_S;
    for (k, (start, calls)) in starts.iter().zip(&sessions).enumerate() {
        let span_s = calls.last().map_or(0, |c| c.t_us - calls[0].t_us) as f64 / 1e6;
        let end_s = start + span_s;
        if !end_s.is_finite() || end_s > max_s {
            return Err(ImportError::new(
                &file,
                0,
                "session_rate",
                format!(
                    "{rate:e} sessions/s starts session {} of {} at {start:e} s, and it ends past the simulator's clock \
                     ({max_s:e} s): {} sessions need a rate of at least about {:e}/s",
                    k + 1,
                    sessions.len(),
                    sessions.len(),
                    sessions.len() as f64 / max_s
                ),
            ));
        }
    }
    match options.session_mode.unwrap_or(SessionMode::ClosedLoop) {
        SessionMode::Fixed => Err(ImportError::new(
            &file,
            0,
            "session_mode",
            "agent-calls sessions grow their context: replay them closed-loop or fixed-accumulate",
        )),
        SessionMode::ClosedLoop => {
            let mut k = 0;
            Ok(Box::new(std::iter::from_fn(move || {
                let calls = sessions.get(k)?;
                let request = session_dag(k as u64, starts[k], calls);
                k += 1;
                Some(Ok(request))
            })))
        }
        SessionMode::FixedAccumulate => {
            let mut requests: Vec<(u64, Request)> = Vec::new();
            for (k, calls) in sessions.iter().enumerate() {
                let (prompts, outputs) = token_ids(k as u64, calls);
                for (j, c) in calls.iter().enumerate() {
                    let offset_us = c.t_us - calls[0].t_us;
                    let arrival = starts[k] + offset_us as f64 / 1e6;
                    let call = llm(c, prompts[j].clone(), outputs[j].clone());
                    requests.push((c.line, super::common::one_call(0, arrival, call)));
                }
            }
            // Arrival order; file order among equal arrivals. Ids follow.
            requests.sort_by(|a, b| a.1.arrival_time.total_cmp(&b.1.arrival_time).then(a.0.cmp(&b.0)));
            Ok(Box::new(requests.into_iter().enumerate().map(|(i, (_, mut r))| {
                r.request_id = RequestId::Int(i as u64);
                Ok(r)
            })))
        }
    }
}

/// The rows of `path`, grouped by session.
fn read(path: &Path) -> Result<Vec<Vec<Call>>, ImportError> {
    let file = path.display().to_string();
    let mut reader = csv::Reader::from_reader(open_file(path)?);
    let headers = reader.headers().map_err(|e| ImportError::new(&file, 1, "header", e.to_string()))?.clone();
    let column = |name: &str| {
        headers.iter().position(|h| h.trim() == name).ok_or_else(|| ImportError::new(&file, 1, name, "missing column"))
    };
    let c_session = column("session_id")?;
    let c_index = column("call_index")?;
    let c_time = column("timestamp_us")?;
    let c_in = column("est_input_tokens")?;
    let c_out = column("est_output_tokens")?;
    let c_shared = column("shared_prefix_chars_with_prev_call")?;
    let c_prefix = column("prev_input_is_prefix")?;
    let c_out_in = column("prev_output_appears_in_input")?;
    let mut sessions: Vec<Vec<Call>> = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let line = i as u64 + 2;
        let at = |column: &str, reason: String| ImportError::new(&file, line, column, reason);
        let record = record.map_err(|e| at("csv", e.to_string()))?;
        let field = |c: usize| record.get(c).unwrap_or("").trim();
        let int = |c: usize, name: &str| -> Result<i64, ImportError> {
            field(c).parse::<i64>().map_err(|_| at(name, format!("`{}` is not an integer", field(c))))
        };
        let flag = |c: usize, name: &str| -> Result<bool, ImportError> {
            match field(c) {
                "0" => Ok(false),
                "1" => Ok(true),
                other => Err(at(name, format!("`{other}` is not 0 or 1"))),
            }
        };
        let session = field(c_session);
        if session.is_empty() {
            return Err(at("session_id", "empty".to_owned()));
        }
        let index = int(c_index, "call_index")?;
        if ids.last().map(String::as_str) != Some(session) {
            if ids.iter().any(|s| s == session) {
                return Err(at("session_id", format!("{session} appears again after other sessions' rows")));
            }
            ids.push(session.to_owned());
            sessions.push(Vec::new());
        }
        let calls = sessions.last_mut().expect("pushed");
        if index != calls.len() as i64 {
            return Err(at("call_index", format!("{index} where {} was next in session {session}", calls.len())));
        }
        let t_us = u64::try_from(int(c_time, "timestamp_us")?)
            .map_err(|_| at("timestamp_us", "must not be negative".to_owned()))?;
        if let Some(prev) = calls.last()
            && t_us < prev.t_us
        {
            return Err(at("timestamp_us", format!("{t_us} is before the session's previous call ({})", prev.t_us)));
        }
        if let Some(first) = calls.first() {
            crate::workload::checked_seconds_to_us((t_us - first.t_us) as f64 / 1e6)
                .map_err(|e| at("timestamp_us", e))?;
        }
        let shared_chars = int(c_shared, "shared_prefix_chars_with_prev_call")?;
        if shared_chars < 0 {
            return Err(at("shared_prefix_chars_with_prev_call", "must not be negative".to_owned()));
        }
        let mut call = Call {
            line,
            t_us,
            input: tokens(int(c_in, "est_input_tokens")?, 0).map_err(|e| at("est_input_tokens", e))?,
            // A reply with no text (283 taubench rows: a bare tool call) still
            // generated a token.
            output: tokens(int(c_out, "est_output_tokens")?, 0).map_err(|e| at("est_output_tokens", e))?.max(1),
            shared_tokens: u32::try_from(shared_chars / 4).unwrap_or(u32::MAX),
            prev_is_prefix: flag(c_prefix, "prev_input_is_prefix")?,
            prev_output_in: flag(c_out_in, "prev_output_appears_in_input")?,
        };
        if call.input == 0 {
            // The prompt was not recorded (53 magagent rows): the call is taken
            // to continue the previous one's context, prompt and output.
            (call.input, call.prev_is_prefix, call.prev_output_in) = match calls.last() {
                Some(prev) => (prev.input.saturating_add(prev.output).min(super::common::MAX_TOKENS), true, true),
                None => (1, false, false),
            };
        }
        calls.push(call);
    }
    Ok(sessions)
}

/// Every call's prompt and output token ids for session `k`.
fn token_ids(k: u64, calls: &[Call]) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let mut drawn = 0u64;
    let mut draw = |n: usize| -> Vec<u32> {
        let ids: Vec<u32> = super::common::fresh_tokens(k, drawn, n).collect();
        drawn += n as u64;
        ids
    };
    let mut prompts: Vec<Vec<u32>> = Vec::with_capacity(calls.len());
    let mut outputs: Vec<Vec<u32>> = Vec::with_capacity(calls.len());
    for (j, c) in calls.iter().enumerate() {
        let len = c.input as usize;
        let mut prompt = Vec::with_capacity(len);
        if j > 0 {
            let prev = &prompts[j - 1];
            if c.prev_is_prefix {
                prompt.extend_from_slice(&prev[..prev.len().min(len)]);
                if c.prev_output_in {
                    let room = len - prompt.len();
                    prompt.extend_from_slice(&outputs[j - 1][..outputs[j - 1].len().min(room)]);
                }
            } else {
                let shared = (c.shared_tokens as usize).min(prev.len()).min(len);
                prompt.extend_from_slice(&prev[..shared]);
            }
        }
        let rest = len - prompt.len();
        prompt.extend(draw(rest));
        prompts.push(prompt);
        outputs.push(draw(c.output as usize));
    }
    (prompts, outputs)
}

fn llm(c: &Call, prompt: Vec<u32>, output: Vec<u32>) -> LlmCall {
    LlmCall::new(c.input, c.output).with_input_ids(prompt).with_output_ids(output)
}

/// Session `k` as one request DAG (see the module doc).
fn session_dag(k: u64, start_s: f64, calls: &[Call]) -> Request {
    let (prompts, outputs) = token_ids(k, calls);
    let mut nodes: Vec<SubRequest> = Vec::with_capacity(2 * calls.len());
    let mut llm_node = vec![0usize; calls.len()];
    let mut tool_node: Vec<Option<usize>> = vec![None; calls.len()];
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); calls.len()];
    let mut interval_us = vec![0u64; calls.len()];
    let mut sinks: Vec<usize> = Vec::new();
    let mut initial = Vec::new();
    for (j, (c, (prompt, output))) in calls.iter().zip(prompts.into_iter().zip(outputs)).enumerate() {
        let t0 = calls[0].t_us;
        if j > 0 {
            let prev = &calls[j - 1];
            let parallel = !c.prev_output_in && c.t_us < prev.est_end_us();
            if parallel {
                preds[j] = preds[j - 1].clone();
                interval_us[j] = interval_us[j - 1] + (c.t_us - prev.t_us);
            } else {
                preds[j] = sinks.iter().copied().filter(|&s| s == j - 1 || calls[s].est_end_us() <= c.t_us).collect();
            }
        }
        if preds[j].is_empty() {
            interval_us[j] = c.t_us - t0;
        }
        sinks.retain(|s| !preds[j].contains(s));
        sinks.push(j);
        llm_node[j] = nodes.len();
        nodes.push(SubRequest {
            next: Vec::new(),
            interval: interval_us[j] as f64 / 1e6,
            kind: NodeKind::Llm(llm(c, prompt, output)),
            result: None,
        });
        if preds[j].is_empty() {
            initial.push(llm_node[j] as u32);
        }
        for &p in &preds[j] {
            let tool = match tool_node[p] {
                Some(t) => t,
                None => {
                    let gap_us = c.t_us.saturating_sub(calls[p].est_end_us());
                    let t = nodes.len();
                    nodes.push(SubRequest {
                        next: Vec::new(),
                        interval: 0.0,
                        kind: NodeKind::ToolCall { duration: gap_us as f64 / 1e6 },
                        result: None,
                    });
                    nodes[llm_node[p]].next.push(t as u32);
                    tool_node[p] = Some(t);
                    t
                }
            };
            nodes[tool].next.push(llm_node[j] as u32);
        }
    }
    Request {
        traffic: Default::default(),
        request_id: RequestId::Int(k),
        arrival_time: start_s,
        initial,
        sub_requests: nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(t_ms: u64, input: u32, output: u32, prefix: bool, out_in: bool) -> Call {
        Call {
            line: 0,
            t_us: t_ms * 1000,
            input,
            output,
            shared_tokens: 0,
            prev_is_prefix: prefix,
            prev_output_in: out_in,
        }
    }

    #[test]
    fn a_linear_session_alternates_calls_and_tool_time() {
        // Call 0 ends (est.) at 0.2 + 10 × 0.005 = 0.25 s; call 1 at 1.0 s.
        let calls = [call(0, 100, 10, false, false), call(1000, 150, 5, true, true)];
        let r = session_dag(3, 2.5, &calls);
        assert_eq!((r.request_id.clone(), r.arrival_time, r.initial.clone()), (RequestId::Int(3), 2.5, vec![0]));
        assert_eq!(r.sub_requests.len(), 3);
        assert_eq!(r.sub_requests[0].next, vec![2]);
        let NodeKind::ToolCall { duration } = r.sub_requests[2].kind else { panic!() };
        assert!((duration - 0.75).abs() < 1e-9, "{duration}");
        assert_eq!(r.sub_requests[2].next, vec![1]);
        // Call 1's prompt is call 0's prompt, then its output, then new tokens.
        let (NodeKind::Llm(a), NodeKind::Llm(b)) = (&r.sub_requests[0].kind, &r.sub_requests[1].kind) else { panic!() };
        let (pa, oa, pb) = (
            a.input_token_ids.as_ref().unwrap(),
            a.output_token_ids.as_ref().unwrap(),
            b.input_token_ids.as_ref().unwrap(),
        );
        assert_eq!(pb.len(), 150);
        assert_eq!(&pb[..100], &pa[..]);
        assert_eq!(&pb[100..110], &oa[..]);
        assert_ne!(pb[110..], pa[..40]);
    }

    #[test]
    fn overlapping_calls_fork_and_a_later_call_joins_them() {
        // 0 at 0 s (ends 0.7 s); 1 at 0.1 s, without 0's output: beside it;
        // 2 at 5 s follows both.
        let calls = [call(0, 50, 100, false, false), call(100, 60, 10, false, false), call(5000, 80, 10, false, true)];
        let r = session_dag(0, 0.0, &calls);
        // Both first calls are roots; the second 0.1 s later.
        assert_eq!(r.initial, vec![0, 1]);
        assert_eq!(r.sub_requests[1].interval, 0.1);
        // The third waits for both, through each one's tool time.
        let third = r.sub_requests.iter().position(|n| matches!(&n.kind, NodeKind::Llm(c) if c.input_tokens == 80));
        let third = third.unwrap() as u32;
        let tools: Vec<&SubRequest> = r.sub_requests.iter().filter(|n| n.next.contains(&third)).collect();
        assert_eq!(tools.len(), 2);
        assert!(tools.iter().all(|t| matches!(t.kind, NodeKind::ToolCall { .. })));
    }
}
