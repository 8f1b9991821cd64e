//! `otel`: OpenTelemetry spans of LLM calls (the GenAI semantic conventions)
//! as agent sessions, each one request DAG. A port of the span reading of
//! inference-perf's `otel_trace_to_replay_graph.py` and BLIS's `convert otel`
//! (#1485), with parallel calls kept parallel.
//!
//! Read: a file, a folder of them (every file, in file-name order), or JSON
//! lines. A file is one JSON document or several in a row (JSON lines); each
//! is an OTLP export (`resourceSpans[].scopeSpans[].spans[]`, attributes as
//! `[{key, value: {stringValue|intValue|doubleValue|boolValue}}]`,
//! `startTimeUnixNano`/`endTimeUnixNano`, `traceId`, `status.code`), a
//! `{"spans": [...]}` list (inference-perf's input), a bare array of spans,
//! or one span: the flat forms (`attributes` an object, `start_time` and
//! `end_time` ISO-8601, with or without a zone, a naive one taken as UTC, or
//! integer ns; ids at the top or in `context`, as the OTel Python SDK's
//! `to_json` writes them).
//!
//! Mapping:
//! - An LLM span's name starts with `chat ` or it has
//!   `gen_ai.input.messages`; others are skipped, and so are error spans
//!   (`status.code` 2, `STATUS_CODE_ERROR`, `status_code: ERROR`). An LLM
//!   span needs `gen_ai.usage.input_tokens` and `output_tokens` (or the older
//!   `prompt_tokens` / `completion_tokens`); one without is an error naming
//!   its line. An output of 0 tokens (a bare tool call) counts as 1.
//! - Session: the span's `session_id` attribute, else its trace id. Sessions
//!   are ordered by their first start; each arrives at that start relative to
//!   the earliest (the recorded overlap between sessions), or, with a session
//!   rate, as a Poisson process at that rate (seeded) in that order.
//! - Within a session, spans in start order (span id, then file order, among
//!   equal starts). A call follows the calls that ended before it started
//!   and are not already followed by another such call; calls that overlap
//!   in time are parallel branches (both follow what ended before the first
//!   began) and a later call that starts after both ended joins them. It
//!   starts the recorded gap after the last of them ended, capped at
//!   `max_think_time` (default 15 s, 0 = uncapped, as BLIS); a call that
//!   follows nothing starts at its recorded offset in the session. A missing
//!   end, or one before the start, is taken as the start.
//! - Prompts grow as the session's context: a call's prompt begins with the
//!   prompt and output of the call it follows (the longest, where it joins
//!   several), as much of it as its own length holds, then fresh tokens; so
//!   prefix-cache hits follow the chain, and parallel branches share the
//!   prefix they forked from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::common::{ImportError, ImportOptions, Requests, SessionMode, fresh_tokens, tokens};
use crate::workload::types::{LlmCall, NodeKind, Request, RequestId, SubRequest};

/// Think-time cap when none is given: BLIS's `--max-think-time` default.
pub const DEFAULT_MAX_THINK_S: f64 = 15.0;
/// The most LLM calls one session may have: placing a call among the ones
/// before it keeps a bit set of them per call (n²/8 bytes: 32 MiB here).
/// Agent sessions are far shorter (at most 44 calls in
/// `lmcache-agent-trace/agent_calls.csv`).
const MAX_SESSION_CALLS: usize = 1 << 14;
/// The most prompt and output tokens one session's calls may carry in all:
/// its token ids are built in memory (2^28 ids: 1 GiB).
const MAX_SESSION_TOKENS: u64 = 1 << 28;

/// One LLM span.
#[derive(Debug, Clone)]
struct Call {
    /// Its file and line (for messages) and its place in the input.
    file: usize,
    line: u64,
    order: usize,
    span_id: String,
    start_us: i64,
    end_us: i64,
    input: u32,
    output: u32,
}

/// Reads every span of `path` and builds the sessions as they are consumed.
pub(super) fn open(path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    let shown = path.display().to_string();
    if let Some(mode) = options.session_mode.filter(|&m| m != SessionMode::ClosedLoop) {
        return Err(ImportError::new(
            &shown,
            0,
            "session_mode",
            format!("otel sessions are request DAGs: replay them closed-loop, not {}", mode.name()),
        ));
    }
    let max_think_s = options.max_think_time.unwrap_or(DEFAULT_MAX_THINK_S);
    if !(max_think_s.is_finite() && max_think_s >= 0.0) {
        return Err(ImportError::new(&shown, 0, "max_think_time", format!("{max_think_s} is not a number of seconds")));
    }
    let files = files(path)?;
    let mut sessions: Vec<(String, Vec<Call>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut order = 0usize;
    for (k, file) in files.iter().enumerate() {
        read_file(file, k, &mut order, &mut |session, call| {
            let s = *index.entry(session.clone()).or_insert_with(|| {
                sessions.push((session, Vec::new()));
                sessions.len() - 1
            });
            sessions[s].1.push(call);
        })?;
    }
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    if let Some((name, calls)) = sessions
        .iter()
        .find(|s| s.1.iter().map(|c| u64::from(c.input) + u64::from(c.output)).sum::<u64>() > MAX_SESSION_TOKENS)
    {
        let c = &calls[0];
        return Err(ImportError::new(
            &names[c.file],
            c.line,
            "gen_ai.usage.input_tokens",
            format!("{name}'s calls carry more than {MAX_SESSION_TOKENS} tokens in all (a session is built in memory)"),
        ));
    }
    if let Some((name, calls)) = sessions.iter().find(|s| s.1.len() > MAX_SESSION_CALLS) {
        let c = &calls[MAX_SESSION_CALLS];
        return Err(ImportError::new(
            &names[c.file],
            c.line,
            "session_id",
            format!("{name} has {} LLM calls, more than a session may ({MAX_SESSION_CALLS})", calls.len()),
        ));
    }
    for (_, calls) in &mut sessions {
        calls.sort_by(|a, b| a.start_us.cmp(&b.start_us).then(a.span_id.cmp(&b.span_id)).then(a.order.cmp(&b.order)));
    }
    sessions.sort_by(|a, b| a.1[0].start_us.cmp(&b.1[0].start_us).then(a.1[0].order.cmp(&b.1[0].order)));
    let t0 = sessions.first().map_or(0, |s| s.1[0].start_us);
    let max_us = crate::workload::types::MAX_TIME_S * 1e6;
    for (_, calls) in &sessions {
        let last = calls.iter().map(|c| c.end_us).max().unwrap_or(t0);
        if (last - t0) as f64 > max_us {
            let c = &calls[0];
            return Err(ImportError::new(
                &names[c.file],
                c.line,
                "start_time",
                format!("the spans span {} s, beyond the simulator's clock", (last - t0) as f64 / 1e6),
            ));
        }
    }
    let starts: Vec<f64> = match options.session_rate {
        None => sessions.iter().map(|s| (s.1[0].start_us - t0) as f64 / 1e6).collect(),
        Some(rate) => {
            let mut poisson = super::common::PoissonStarts::new(options, &shown, "otel", "")?;
            let starts: Vec<f64> = sessions.iter().map(|_| poisson.next_start()).collect();
            if let Some(&last) = starts.last()
                && (!last.is_finite() || last > crate::workload::types::MAX_TIME_S / 2.0)
            {
                return Err(ImportError::new(
                    &shown,
                    0,
                    "session_rate",
                    format!("{rate:e} sessions/s starts the last of {} sessions past the clock", sessions.len()),
                ));
            }
            starts
        }
    };
    let mut k = 0usize;
    Ok(Box::new(std::iter::from_fn(move || {
        let (_, calls) = sessions.get(k)?;
        let request = session_dag(k as u64, starts[k], calls, max_think_s);
        k += 1;
        Some(Ok(request))
    })))
}

/// The files of `path`: itself, or a folder's regular files by name.
fn files(path: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let shown = path.display().to_string();
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| ImportError::new(&shown, 0, "file", format!("cannot list: {e}")))?;
    let mut files = Vec::new();
    for e in entries {
        let e = e.map_err(|e| ImportError::new(&shown, 0, "file", format!("cannot list: {e}")))?;
        let p = e.path();
        if p.is_file() {
            files.push(p);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    if files.is_empty() {
        return Err(ImportError::new(&shown, 0, "file", "the folder holds no files"));
    }
    Ok(files)
}

/// 1-based line of byte `offset` of `text`.
fn line_at(text: &str, offset: usize) -> u64 {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() as u64 + 1
}

/// Reads the spans of one file into `put(session, call)`.
fn read_file(
    path: &Path,
    file: usize,
    order: &mut usize,
    put: &mut dyn FnMut(String, Call),
) -> Result<(), ImportError> {
    use std::io::Read;
    let shown = path.display().to_string();
    let mut text = String::new();
    super::common::open_file(path)?
        .read_to_string(&mut text)
        .map_err(|e| ImportError::new(&shown, 0, "file", format!("cannot read: {e}")))?;
    let mut stream = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
    let mut from = 0usize;
    loop {
        let doc = match stream.next() {
            None => break,
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                // A document cut short is named by the line it began on.
                let line = if e.is_eof() {
                    let rest = &text[from..];
                    line_at(&text, from + rest.len() - rest.trim_start().len())
                } else {
                    e.line() as u64
                };
                return Err(ImportError::new(&shown, line, "json", e.to_string()));
            }
        };
        let end = stream.byte_offset();
        // The document's first line: past the whitespace before it.
        let skipped = text[from..end].len() - text[from..end].trim_start().len();
        let doc_text = &text[from + skipped..end];
        let doc_line = line_at(&text, from + skipped);
        from = end;
        let mut spans: Vec<&Value> = Vec::new();
        collect_spans(&doc, &mut spans).map_err(|reason| ImportError::new(&shown, doc_line, "json", reason))?;
        // A span's line: where its id is written in the document (a one-line
        // document is its own line).
        let mut search = 0usize;
        for span in spans {
            let line = match span_id(span) {
                Some(id) if doc_text.contains('\n') => match doc_text[search..].find(&format!("\"{id}\"")) {
                    Some(i) => {
                        search += i;
                        doc_line + line_at(doc_text, search) - 1
                    }
                    None => doc_line,
                },
                _ => doc_line,
            };
            if let Some((session, call)) = llm_call(span, &shown, file, line, *order)? {
                *order += 1;
                put(session, call);
            }
        }
    }
    Ok(())
}

/// The spans of one document, whichever form it has.
fn collect_spans<'a>(doc: &'a Value, out: &mut Vec<&'a Value>) -> Result<(), String> {
    match doc {
        Value::Array(items) => {
            for item in items {
                collect_spans(item, out)?;
            }
            Ok(())
        }
        Value::Object(o) if o.contains_key("resourceSpans") || o.contains_key("resource_spans") => {
            let rs = o.get("resourceSpans").or_else(|| o.get("resource_spans")).and_then(Value::as_array);
            for r in rs.ok_or("resourceSpans: not an array")? {
                let ss = r
                    .get("scopeSpans")
                    .or_else(|| r.get("scope_spans"))
                    .or_else(|| r.get("instrumentationLibrarySpans"));
                for s in ss.and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
                    for span in s.get("spans").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
                        out.push(span);
                    }
                }
            }
            Ok(())
        }
        Value::Object(o) if o.get("spans").is_some_and(Value::is_array) => {
            out.extend(o["spans"].as_array().expect("checked").iter());
            Ok(())
        }
        Value::Object(o) if o.contains_key("name") => {
            out.push(doc);
            Ok(())
        }
        _ => Err("neither a span, a list of spans (`spans`) nor an OTLP export (`resourceSpans`)".to_owned()),
    }
}

fn span_id(span: &Value) -> Option<&str> {
    span.get("spanId")
        .or_else(|| span.get("span_id"))
        .or_else(|| span.get("context").and_then(|c| c.get("span_id")))
        .and_then(Value::as_str)
}

fn trace_id(span: &Value) -> Option<String> {
    span.get("traceId")
        .or_else(|| span.get("trace_id"))
        .or_else(|| span.get("context").and_then(|c| c.get("trace_id")))
        .and_then(scalar_string)
}

fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The span's attribute `key`: a flat object's value, or an OTLP list's
/// `{key, value: {…Value}}` unwrapped.
fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    match span.get("attributes")? {
        Value::Object(o) => o.get(key),
        Value::Array(items) => {
            let item = items.iter().find(|a| a.get("key").and_then(Value::as_str) == Some(key))?;
            let v = item.get("value")?;
            match v {
                Value::Object(o) => {
                    o.iter().find(|(k, _)| k.ends_with("Value") || k.ends_with("_value")).map(|(_, v)| v).or(Some(v))
                }
                _ => Some(v),
            }
        }
        _ => None,
    }
}

fn is_error(span: &Value) -> bool {
    let Some(status) = span.get("status") else { return false };
    let code = status.get("code").or_else(|| status.get("status_code"));
    match code {
        Some(Value::Number(n)) => n.as_i64() == Some(2),
        Some(Value::String(s)) => matches!(s.as_str(), "2" | "ERROR" | "STATUS_CODE_ERROR" | "StatusCode.ERROR"),
        _ => false,
    }
}

/// A span's LLM call and session, `None` for a span that is not one.
fn llm_call(
    span: &Value,
    file_name: &str,
    file: usize,
    line: u64,
    order: usize,
) -> Result<Option<(String, Call)>, ImportError> {
    let at = |column: &str, reason: String| ImportError::new(file_name, line, column, reason);
    if !span.is_object() {
        return Err(at("span", "not an object".to_owned()));
    }
    let name = span.get("name").and_then(Value::as_str).unwrap_or("");
    if !(name.starts_with("chat ") || attribute(span, "gen_ai.input.messages").is_some()) || is_error(span) {
        return Ok(None);
    }
    let count = |keys: [&str; 2]| -> Result<i64, ImportError> {
        let (key, v) = keys
            .iter()
            .find_map(|k| attribute(span, k).map(|v| (*k, v)))
            .ok_or_else(|| at(keys[0], format!("missing from LLM span `{name}` (nor {})", keys[1])))?;
        let n = match v {
            Value::Number(n) => n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        n.ok_or_else(|| at(key, format!("`{v}` is not a token count")))
    };
    let input = tokens(count(["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"])?, 1)
        .map_err(|e| at("gen_ai.usage.input_tokens", e))?;
    let output = tokens(count(["gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"])?, 0)
        .map_err(|e| at("gen_ai.usage.output_tokens", e))?
        .max(1);
    let start_us = time_us(span, ["startTimeUnixNano", "start_time"]).map_err(|e| at("start_time", e))?;
    let start_us = start_us.ok_or_else(|| at("start_time", "missing (startTimeUnixNano or start_time)".to_owned()))?;
    let end_us = time_us(span, ["endTimeUnixNano", "end_time"])
        .map_err(|e| at("end_time", e))?
        .unwrap_or(start_us)
        .max(start_us);
    let session = match attribute(span, "session_id").and_then(scalar_string) {
        Some(s) => format!("session:{s}"),
        None => format!(
            "trace:{}",
            trace_id(span).ok_or_else(|| at("trace_id", "missing (and no session_id attribute)".to_owned()))?
        ),
    };
    let span_id = span_id(span).unwrap_or("").to_owned();
    Ok(Some((session, Call { file, line, order, span_id, start_us, end_us, input, output })))
}

/// A span time in µs since the epoch: the first of `keys` present, as ns (a
/// number or a string of digits) or ISO-8601.
fn time_us(span: &Value, keys: [&str; 2]) -> Result<Option<i64>, String> {
    let Some(v) = keys.iter().find_map(|k| span.get(*k).filter(|v| !v.is_null())) else { return Ok(None) };
    let ns_to_us = |ns: i128| -> Result<i64, String> {
        i64::try_from((ns + 500) / 1000).map_err(|_| format!("{ns} ns is out of range"))
    };
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(ns) => ns_to_us(i128::from(ns)).map(Some),
            None => Err(format!("{n} is not an integer of ns")),
        },
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse::<i128>().map_err(|_| format!("`{s}` is out of range")).and_then(ns_to_us).map(Some)
        }
        Value::String(s) => iso_us(s).map(Some).ok_or_else(|| format!("`{s}` is not an ISO-8601 time")),
        _ => Err(format!("`{v}` is not a time")),
    }
}

/// `YYYY-MM-DD[T ]HH:MM:SS[.frac][Z|±HH:MM|±HHMM]` as µs since the epoch,
/// a time without a zone taken as UTC (as inference-perf's `parse_iso`).
fn iso_us(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d, h, mi, sec) = (num(0, 4)?, num(5, 2)?, num(8, 2)?, num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_us = 0i64;
    if b.get(i) == Some(&b'.') {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        // µs, rounded from the first 7 digits (more are below the clock).
        let kept = &s[i + 1..i + 1 + digits.min(7)];
        let scaled: i64 = kept.parse::<i64>().ok()? * 10i64.pow(7 - kept.len() as u32);
        frac_us = (scaled + 5) / 10;
        i += 1 + digits;
    }
    let offset_s = match &s[i..] {
        "" | "Z" | "z" => 0,
        zone => {
            let sign = match zone.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let z = zone[1..].replace(':', "");
            if z.len() != 4 || !z.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let (zh, zm): (i64, i64) = (z[..2].parse().ok()?, z[2..].parse().ok()?);
            sign * (zh * 3600 + zm * 60)
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if mo <= 2 { (y - 1, mo + 9) } else { (y, mo - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60 + sec - offset_s) * 1_000_000 + frac_us)
}

/// Session `k` as one request DAG (see the module doc).
fn session_dag(k: u64, start_s: f64, calls: &[Call], max_think_s: f64) -> Request {
    let n = calls.len();
    let cap_us = if max_think_s > 0.0 { (max_think_s * 1e6).round() as i64 } else { i64::MAX };
    // Each call's ancestors, for the preds: what ended before it began, less
    // what those already follow.
    // (Bit sets of the calls before each: n²/8 bytes, see MAX_SESSION_CALLS.)
    let words = n.div_ceil(64);
    let mut ancestors: Vec<Vec<u64>> = Vec::with_capacity(n);
    let mut preds: Vec<Vec<usize>> = Vec::with_capacity(n);
    for (j, c) in calls.iter().enumerate() {
        let ended: Vec<usize> = (0..j).filter(|&i| calls[i].end_us <= c.start_us).collect();
        let mut covered = vec![0u64; words];
        for &e in &ended {
            for (w, &bits) in covered.iter_mut().zip(&ancestors[e]) {
                *w |= bits;
            }
        }
        let p: Vec<usize> = ended.iter().copied().filter(|&e| covered[e / 64] & (1 << (e % 64)) == 0).collect();
        for &e in &p {
            covered[e / 64] |= 1 << (e % 64);
        }
        ancestors.push(covered);
        preds.push(p);
    }
    // Prompts: the context of the longest predecessor, then fresh tokens.
    let mut drawn = 0u64;
    let mut nodes: Vec<SubRequest> = Vec::with_capacity(n);
    fn ids(node: &SubRequest) -> (&[u32], &[u32]) {
        match &node.kind {
            NodeKind::Llm(c) => {
                (c.input_token_ids.as_deref().unwrap_or(&[]), c.output_token_ids.as_deref().unwrap_or(&[]))
            }
            NodeKind::ToolCall { .. } => (&[], &[]),
        }
    }
    let mut initial = Vec::new();
    let t0 = calls[0].start_us;
    for (j, c) in calls.iter().enumerate() {
        let len = c.input as usize;
        let mut prompt = Vec::with_capacity(len);
        if let Some(&p) = preds[j].iter().max_by_key(|&&p| (calls[p].input + calls[p].output, p)) {
            let (input, output) = ids(&nodes[p]);
            prompt.extend(input.iter().chain(output).take(len));
        }
        let fresh = len - prompt.len();
        prompt.extend(fresh_tokens(k, drawn, fresh));
        drawn += fresh as u64;
        let output: Vec<u32> = fresh_tokens(k, drawn, c.output as usize).collect();
        drawn += u64::from(c.output);
        let interval_us = match preds[j].iter().map(|&p| calls[p].end_us).max() {
            None => {
                initial.push(j as u32);
                c.start_us - t0
            }
            Some(last_end) => (c.start_us - last_end).clamp(0, cap_us),
        };
        for &p in &preds[j] {
            nodes[p].next.push(j as u32);
        }
        nodes.push(SubRequest {
            next: Vec::new(),
            interval: interval_us as f64 / 1e6,
            kind: NodeKind::Llm(LlmCall::new(c.input, c.output).with_input_ids(prompt).with_output_ids(output)),
            result: None,
        });
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

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import/otel").join(name)
    }

    fn all(path: &Path, options: &ImportOptions) -> Vec<Request> {
        open(path, options).unwrap().collect::<Result<Vec<_>, _>>().unwrap()
    }

    fn llm(r: &Request, j: usize) -> &LlmCall {
        match &r.sub_requests[j].kind {
            NodeKind::Llm(c) => c,
            _ => unreachable!(),
        }
    }

    #[test]
    fn iso_times_with_and_without_zones() {
        assert_eq!(iso_us("1970-01-01T00:00:01Z"), Some(1_000_000));
        assert_eq!(iso_us("1970-01-01T00:00:01.5"), Some(1_500_000));
        assert_eq!(iso_us("1970-01-01 01:00:00+01:00"), Some(0));
        assert_eq!(iso_us("2025-03-01T12:00:00.123456789Z"), Some(1_740_830_400_123_457));
        assert_eq!(iso_us("2025-03-01T12:00"), None);
        assert_eq!(iso_us("2025-13-01T12:00:00Z"), None);
    }

    #[test]
    fn an_otlp_export_becomes_sessions_with_parallel_branches() {
        // Hand-checked (otlp.json): trace aaa has chat A 0-2 s, tools, B 3-4 s
        // and C 3.5-5 s (overlapping B), D 30-31 s; an error span and a
        // non-LLM span are skipped. Trace bbb: one call at 1 s.
        let r = all(&fixture("otlp.json"), &ImportOptions::default());
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].arrival_time, r[1].arrival_time), (0.0, 1.0));
        let s = &r[0];
        assert_eq!(s.sub_requests.len(), 4);
        assert_eq!(s.initial, [0]);
        // A -> B, A -> C (parallel), B and C -> D.
        assert_eq!(s.sub_requests[0].next, [1, 2]);
        assert_eq!((s.sub_requests[1].next.clone(), s.sub_requests[2].next.clone()), (vec![3], vec![3]));
        // B waits 1 s after A, C 1.5 s; D's 25 s gap after C is capped at 15.
        let gaps: Vec<f64> = s.sub_requests.iter().map(|n| n.interval).collect();
        assert_eq!(gaps, [0.0, 1.0, 1.5, 15.0]);
        let tokens: Vec<(u32, u32)> = (0..4).map(|j| (llm(s, j).input_tokens, llm(s, j).output_tokens)).collect();
        assert_eq!(tokens, [(100, 20), (150, 10), (130, 1), (300, 5)]);
        // B and C start with A's prompt and output; D with B's (the longer).
        let a: Vec<u32> = llm(s, 0)
            .input_token_ids
            .clone()
            .unwrap()
            .into_iter()
            .chain(llm(s, 0).output_token_ids.clone().unwrap())
            .collect();
        assert_eq!(llm(s, 1).input_token_ids.as_ref().unwrap()[..120], a[..]);
        assert_eq!(llm(s, 2).input_token_ids.as_ref().unwrap()[..120], a[..]);
        assert_ne!(
            llm(s, 1).input_token_ids.as_ref().unwrap()[120..130],
            llm(s, 2).input_token_ids.as_ref().unwrap()[120..130]
        );
        let b: Vec<u32> = llm(s, 1)
            .input_token_ids
            .clone()
            .unwrap()
            .into_iter()
            .chain(llm(s, 1).output_token_ids.clone().unwrap())
            .collect();
        assert_eq!(llm(s, 3).input_token_ids.as_ref().unwrap()[..160], b[..]);
        // Uncapped: D's 25 s gap stays.
        let options = ImportOptions { max_think_time: Some(0.0), ..Default::default() };
        assert_eq!(all(&fixture("otlp.json"), &options)[0].sub_requests[3].interval, 25.0);
    }

    #[test]
    fn flat_spans_in_a_folder_join_sessions_by_session_id() {
        // Hand-checked (folder/): two files, three spans of session s1 (ISO
        // times, two traces) and one of trace t9 without a session id.
        let r = all(&fixture("folder"), &ImportOptions::default());
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].sub_requests.len(), 3);
        assert_eq!(r[0].arrival_time, 0.0);
        // t9 starts 2.25 s after s1's first span (which has a +02:00 zone).
        assert_eq!(r[1].arrival_time, 2.25);
        let gaps: Vec<f64> = r[0].sub_requests.iter().map(|n| n.interval).collect();
        assert_eq!(gaps, [0.0, 0.5, 4.0]);
        assert_eq!(r[0].sub_requests[0].next, [1]);
        // With a session rate the sessions start as a seeded Poisson process.
        let options = ImportOptions { session_rate: Some(2.0), seed: 3, ..Default::default() };
        let p = all(&fixture("folder"), &options);
        assert_eq!(p[0].arrival_time, 0.0);
        assert!(p[1].arrival_time > 0.0 && p[1].arrival_time != 2.25);
    }

    #[test]
    fn bad_spans_name_their_file_line_and_attribute() {
        let dir = std::env::temp_dir().join(format!("otel-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = r#"{"name": "chat m", "trace_id": "t", "span_id": "a", "start_time": "2025-01-01T00:00:00Z", "attributes": {"gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 2}}"#;
        for (bad, column) in [
            (
                r#"{"name": "chat m", "trace_id": "t", "span_id": "b", "start_time": "2025-01-01T00:00:01Z", "attributes": {"gen_ai.usage.output_tokens": 2}}"#,
                "gen_ai.usage.input_tokens",
            ),
            (
                r#"{"name": "chat m", "trace_id": "t", "span_id": "b", "start_time": "yesterday", "attributes": {"gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 2}}"#,
                "start_time",
            ),
            (
                r#"{"name": "chat m", "trace_id": "t", "span_id": "b", "start_time": "2025-01-01T00:00:01Z", "attributes": {"gen_ai.usage.input_tokens": "x", "gen_ai.usage.output_tokens": 2}}"#,
                "gen_ai.usage.input_tokens",
            ),
            (
                r#"{"name": "chat m", "span_id": "b", "start_time": "2025-01-01T00:00:01Z", "attributes": {"gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 2}}"#,
                "trace_id",
            ),
            (r#"{"name": "chat m", "trace_id": "t", "#, "json"),
            (r#"42"#, "json"),
        ] {
            let p = dir.join("spans.jsonl");
            std::fs::write(&p, format!("{ok}\n\n{bad}\n")).unwrap();
            let e = open(&p, &ImportOptions::default()).err().unwrap_or_else(|| panic!("{bad}: accepted"));
            assert_eq!((e.line, e.column.as_str()), (3, column), "{bad}: {e}");
            assert!(e.file.ends_with("spans.jsonl"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
