//! Streaming reader of workload and result JSONL: the only place the format is
//! parsed. Memory is independent of file length: one line is held at a time,
//! plus the set of request ids seen (compact ranges for integer ids, so the
//! usual 0, 1, 2, … costs a few bytes whatever the length of the file).
//!
//! Every rule of the format is checked here, and the first violation ends the
//! stream with a [`ReadError`] that names the file, the line and the field.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io::{BufRead, Read};

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

mod fast;

use super::traffic::{SloClass, Traffic, class_names};
use super::types::{LlmCall, NodeKind, NodeResult, Request, RequestId, SeededProgress, SubRequest};

/// The longest line read: 32 MiB less a byte, room for 4 million token ids
/// (a real request with ids is far below: 128k context ≈ 1 MiB). Bounds the
/// memory an endless or binary line takes before it is refused: reading at
/// most 32 MiB keeps the line buffer's capacity at 32 MiB (it grows by
/// doubling; one byte more would double it to 64).
const MAX_LINE_BYTES: u64 = (32 << 20) - 1;

/// Which of the two row formats a file must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Workload rows: DAGs only.
    Workload,
    /// Result rows: DAGs with `token_latency` (and maybe `error`) on llm nodes.
    Results,
}

/// A rejected row: `FILE:LINE: field: reason`. Fatal for the file: the reader
/// yields nothing after it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {field}: {reason}")]
pub struct ReadError {
    /// The file as the user named it.
    pub file: String,
    /// 1-based line number.
    pub line: u64,
    /// Path of the offending field, e.g. `sub_requests[1].next[0]`, or `json`
    /// for a line that is not JSON, or `io` for a read failure.
    pub field: String,
    /// What is wrong, and how to fix it where that is not obvious.
    pub reason: String,
}

/// Streams validated [`Request`]s from a reader, one line at a time.
#[derive(Debug)]
pub struct Reader<R> {
    input: R,
    file: String,
    format: Format,
    line: u64,
    buf: String,
    previous_arrival: Option<(f64, u64)>,
    seen: IdSet,
    failed: bool,
}

impl<R: BufRead> Reader<R> {
    /// A reader over `input`; `file` is the name used in error messages.
    pub fn new(input: R, file: impl Into<String>, format: Format) -> Self {
        Reader {
            input,
            file: file.into(),
            format,
            line: 0,
            buf: String::new(),
            previous_arrival: None,
            seen: IdSet::default(),
            failed: false,
        }
    }

    /// The 1-based line of the row read last.
    pub fn line(&self) -> u64 {
        self.line
    }

    fn error(&self, field: impl Into<String>, reason: impl Into<String>) -> ReadError {
        ReadError { file: self.file.clone(), line: self.line, field: field.into(), reason: reason.into() }
    }

    fn next_row(&mut self) -> Option<Result<Request, ReadError>> {
        loop {
            self.buf.clear();
            self.line += 1;
            match (&mut self.input).take(MAX_LINE_BYTES + 1).read_line(&mut self.buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return Some(Err(self.error("json", "the line is not UTF-8 text")));
                }
                Err(e) => return Some(Err(self.error("io", e.to_string()))),
            }
            if self.buf.len() as u64 > MAX_LINE_BYTES {
                self.buf = String::new();
                return Some(Err(self.error(
                    "json",
                    format!("the line is longer than {} MiB; is this a JSONL file?", (MAX_LINE_BYTES + 1) >> 20),
                )));
            }
            if !self.buf.trim().is_empty() {
                break;
            }
        }
        let raw = match parse_raw(&self.buf) {
            Ok(raw) => raw,
            Err((field, reason)) => return Some(Err(self.error(field, reason))),
        };
        let request = match validate(raw, self.format) {
            Ok(request) => request,
            Err((field, reason)) => return Some(Err(self.error(field, reason))),
        };
        if let Some((previous, line)) = self.previous_arrival
            && request.arrival_time < previous
        {
            return Some(Err(self.error(
                "arrival_time",
                format!(
                    "{} is earlier than {previous} on line {line}; rows must be sorted by \
                     arrival_time (for example: jq -c -s 'sort_by(.arrival_time)[]' IN > OUT)",
                    request.arrival_time
                ),
            )));
        }
        if !self.seen.insert(&request.request_id) {
            return Some(Err(self.error("request_id", format!("duplicate request_id {}", request.request_id))));
        }
        self.previous_arrival = Some((request.arrival_time, self.line));
        Some(Ok(request))
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Request, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.next_row();
        if matches!(item, Some(Err(_))) {
            self.failed = true;
        }
        item
    }
}

/// Request ids seen so far. Integer ids are kept as disjoint ranges, so a file
/// numbered 0, 1, 2, … costs one range however long it is (the workload
/// reader's, and a streamed TraceV2's, duplicate check).
#[derive(Debug, Default)]
pub(crate) struct IdSet {
    ranges: BTreeMap<u64, u64>,
    strings: HashSet<String>,
}

impl IdSet {
    /// Inserts `id`; false if it was already there.
    pub(crate) fn insert(&mut self, id: &RequestId) -> bool {
        match id {
            // "17" is the id 17: tables and `results` key rows by the id's
            // text, where the two would collide.
            RequestId::Str(s) => match s.parse::<u64>() {
                Ok(n) if n.to_string() == *s => self.insert(&RequestId::Int(n)),
                _ => self.strings.insert(s.clone()),
            },
            RequestId::Int(n) => {
                let n = *n;
                // Ranges are start → last, both inclusive, disjoint and not adjacent.
                let before = self.ranges.range(..=n).next_back().map(|(&s, &l)| (s, l));
                if let Some((_, last)) = before
                    && n <= last
                {
                    return false;
                }
                let after = n.checked_add(1).and_then(|m| self.ranges.remove(&m));
                let last = after.unwrap_or(n);
                match before {
                    Some((start, prev_last)) if prev_last + 1 == n => self.ranges.insert(start, last),
                    _ => self.ranges.insert(n, last),
                };
                true
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    request_id: RequestId,
    arrival_time: f64,
    initial: Vec<u32>,
    sub_requests: Vec<RawSubRequest>,
    slo_class: Option<String>,
    tenant: Option<String>,
    slo_target: Option<f64>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum RawKind {
    Llm,
    ToolCall,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSubRequest {
    kind: RawKind,
    next: Vec<u32>,
    input_tokens: u32,
    output_tokens: u32,
    interval: Option<f64>,
    duration: Option<f64>,
    input_token_ids: Option<Vec<u32>>,
    output_token_ids: Option<Vec<u32>>,
    known_tokens: Option<u32>,
    kv_tokens: Option<u32>,
    model: Option<String>,
    lora: Option<String>,
    priority: Option<i32>,
    token_latency: Option<Vec<f64>>,
    error: Option<String>,
    replica: Option<u32>,
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl Visitor<'_> for IdVisitor {
            type Value = RequestId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative integer or a string")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RequestId, E> {
                Ok(RequestId::Int(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RequestId, E> {
                Ok(RequestId::Str(v.to_owned()))
            }
        }
        d.deserialize_any(IdVisitor)
    }
}

pub(crate) type FieldError = (String, String);

/// A row's fields. The usual row takes the hand-written fast path
/// ([`fast`]); any other is parsed by serde_json, untracked; one that fails
/// is parsed again with every field's path tracked, to name the field
/// (tracking every row cost ~3 % of a 100k-row run; path tracking changes
/// no value, so a row the first parse accepts the second would too, and one
/// it refuses gets the same error with its path).
fn parse_raw(line: &str) -> Result<RawRequest, FieldError> {
    if let Some(raw) = fast::parse(line) {
        return Ok(raw);
    }
    let mut de = serde_json::Deserializer::from_str(line);
    if let Ok(raw) = RawRequest::deserialize(&mut de)
        && de.end().is_ok()
    {
        return Ok(raw);
    }
    parse_tracked(line)
}

fn parse_tracked(line: &str) -> Result<RawRequest, FieldError> {
    let mut de = serde_json::Deserializer::from_str(line);
    let raw: RawRequest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let mut path = e.path().to_string();
        let inner = e.into_inner();
        let message = strip_position(&inner.to_string());
        // serde_json files an overflowing number (1e999) under syntax errors,
        // but the row is valid JSON and the field is known: name it.
        if message.starts_with("number out of range") && path != "." {
            return (path, "is not a finite number".to_owned());
        }
        if inner.is_syntax() || inner.is_eof() {
            let column = inner.column();
            return ("json".to_owned(), format!("{message} (column {column})"));
        }
        // serde names a missing or unknown field in its message, not its path.
        for prefix in ["missing field `", "unknown field `", "duplicate field `"] {
            if let Some(rest) = message.strip_prefix(prefix)
                && let Some(name) = rest.split('`').next()
                && !path.ends_with(name)
            {
                path = if path == "." { name.to_owned() } else { format!("{path}.{name}") };
            }
        }
        (path, message)
    })?;
    de.end().map_err(|e| ("json".to_owned(), strip_position(&e.to_string())))?;
    Ok(raw)
}

fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

fn err<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, FieldError> {
    Err((field.into(), reason.into()))
}

/// Checks a time field; its path is built only when it is wrong (a
/// `format!` per field and row was ~3 % of a 100k-row run).
fn check_time(field: impl FnOnce() -> String, value: f64) -> Result<(), FieldError> {
    match super::types::checked_seconds_to_us(value) {
        Ok(_) => Ok(()),
        Err(reason) => err(field(), reason),
    }
}

fn validate(raw: RawRequest, format: Format) -> Result<Request, FieldError> {
    check_time(|| "arrival_time".into(), raw.arrival_time)?;
    let traffic = validate_traffic(raw.slo_class, raw.tenant, raw.slo_target)?;
    // A class gives the calls vLLM's priority for it, unless a call names its own.
    let class_priority = traffic.slo_class.map_or(0, SloClass::vllm_priority);
    let n = raw.sub_requests.len();
    if n == 0 {
        return err("sub_requests", "must hold at least one sub-request");
    }
    // listed_by[j] = i + 1 once node i's `next` names j: finds a repeated
    // successor in one pass (a node may list 10^6 of them). A lone node's
    // edges are all refused before these are read: it allocates neither.
    let (mut has_predecessor, mut listed_by) =
        if n > 1 { (vec![false; n], vec![0u32; n]) } else { (Vec::new(), Vec::new()) };
    let mut sub_requests = Vec::with_capacity(n);
    for (i, sub) in raw.sub_requests.into_iter().enumerate() {
        let at = |field: &str| format!("sub_requests[{i}].{field}");
        for (k, &j) in sub.next.iter().enumerate() {
            if j as usize >= n {
                return err(at(&format!("next[{k}]")), format!("index {j} is out of range ({n} sub_requests)"));
            }
            if j as usize == i {
                return err(at(&format!("next[{k}]")), format!("sub-request {i} points to itself"));
            }
            if listed_by[j as usize] == i as u32 + 1 {
                return err(at(&format!("next[{k}]")), format!("index {j} is listed twice"));
            }
            listed_by[j as usize] = i as u32 + 1;
            has_predecessor[j as usize] = true;
        }
        sub_requests.push(validate_node(sub, format, class_priority, &at)?);
    }
    let roots = || (0..n as u32).filter(|&i| n == 1 || !has_predecessor[i as usize]);
    if let Some(node) = find_cycle(&sub_requests) {
        return err(format!("sub_requests[{node}].next"), "the sub-requests form a cycle");
    }
    check_path_times(&sub_requests)?;
    if !raw.initial.iter().copied().eq(roots()) {
        let roots: Vec<u32> = roots().collect();
        return err(
            "initial",
            format!("is {:?}, but the roots (indices no `next` points to) are {roots:?}", raw.initial),
        );
    }
    Ok(Request {
        traffic,
        request_id: raw.request_id,
        arrival_time: raw.arrival_time,
        initial: raw.initial,
        sub_requests,
    })
}

/// The request's `slo_class`, `tenant` and `slo_target` (seconds), checked.
fn validate_traffic(class: Option<String>, tenant: Option<String>, target: Option<f64>) -> Result<Traffic, FieldError> {
    let slo_class = match class.as_deref() {
        None => None,
        Some(name) => match SloClass::parse(name) {
            Some(c) => Some(c),
            None => return err("slo_class", format!("`{name}` is not a class: use one of {}", class_names())),
        },
    };
    if tenant.as_deref() == Some("") {
        return err("tenant", "a tenant name cannot be empty; omit `tenant`");
    }
    let slo_target_us = match target {
        None => None,
        Some(t) => {
            check_time(|| "slo_target".into(), t)?;
            if t == 0.0 {
                return err("slo_target", "a latency target must be positive");
            }
            Some(super::types::seconds_to_us(t).max(1))
        }
    };
    Ok(Traffic { slo_class, tenant, slo_target_us })
}

fn validate_node(
    sub: RawSubRequest,
    format: Format,
    class_priority: i32,
    at: &dyn Fn(&str) -> String,
) -> Result<SubRequest, FieldError> {
    let interval = sub.interval.unwrap_or(0.0);
    check_time(|| at("interval"), interval)?;
    if format == Format::Workload {
        if sub.token_latency.is_some() {
            return err(at("token_latency"), "unknown field in a workload file (result files only)");
        }
        if sub.error.is_some() {
            return err(at("error"), "unknown field in a workload file (result files only)");
        }
        if sub.replica.is_some() {
            return err(at("replica"), "unknown field in a workload file (result files only)");
        }
    }
    let kind = match sub.kind {
        RawKind::ToolCall => {
            if sub.input_tokens != 0 || sub.output_tokens != 0 {
                let field = if sub.input_tokens != 0 { "input_tokens" } else { "output_tokens" };
                return err(at(field), "a tool_call carries no tokens; use 0");
            }
            for (present, field) in [
                (sub.input_token_ids.is_some(), "input_token_ids"),
                (sub.output_token_ids.is_some(), "output_token_ids"),
                (sub.known_tokens.is_some(), "known_tokens"),
                (sub.kv_tokens.is_some(), "kv_tokens"),
                (sub.model.is_some(), "model"),
                (sub.lora.is_some(), "lora"),
                (sub.priority.is_some(), "priority"),
            ] {
                if present {
                    return err(at(field), "only llm sub-requests carry this field");
                }
            }
            let duration = sub.duration.unwrap_or(0.0);
            check_time(|| at("duration"), duration)?;
            NodeKind::ToolCall { duration }
        }
        RawKind::Llm => {
            if sub.duration.is_some() {
                return err(at("duration"), "only tool_call sub-requests have a duration");
            }
            if sub.output_tokens == 0 {
                return err(at("output_tokens"), "an llm sub-request must generate at least 1 token");
            }
            for (ids, count, field) in [
                (&sub.input_token_ids, sub.input_tokens, "input_token_ids"),
                (&sub.output_token_ids, sub.output_tokens, "output_token_ids"),
            ] {
                if let Some(ids) = ids
                    && ids.len() as u64 != u64::from(count)
                {
                    return err(at(field), format!("has {} ids but the token count is {count}", ids.len()));
                }
            }
            let total = u64::from(sub.input_tokens) + u64::from(sub.output_tokens);
            if total > u64::from(u32::MAX) {
                return err(at("output_tokens"), "input_tokens + output_tokens overflows 32 bits");
            }
            if sub.lora.as_deref() == Some("") {
                return err(at("lora"), "an adapter name cannot be empty; omit `lora` for the base model");
            }
            let seeded = match (sub.known_tokens, sub.kv_tokens) {
                (None, None) => None,
                (Some(_), None) => return err(at("kv_tokens"), "missing: known_tokens and kv_tokens are set together"),
                (None, Some(_)) => {
                    return err(at("known_tokens"), "missing: known_tokens and kv_tokens are set together");
                }
                (Some(known), Some(kv)) => {
                    if kv > known {
                        return err(at("kv_tokens"), format!("{kv} exceeds known_tokens {known}"));
                    }
                    if u64::from(known) > total {
                        return err(
                            at("known_tokens"),
                            format!("{known} exceeds input_tokens + output_tokens = {total}"),
                        );
                    }
                    Some(SeededProgress { known_tokens: known, kv_tokens: kv })
                }
            };
            NodeKind::Llm(
                LlmCall::new(sub.input_tokens, sub.output_tokens)
                    .with_input_ids(sub.input_token_ids)
                    .with_output_ids(sub.output_token_ids)
                    .with_seeded(seeded)
                    .with_model(sub.model)
                    .with_lora(sub.lora)
                    .with_priority(sub.priority.unwrap_or(class_priority)),
            )
        }
    };
    let result = match format {
        Format::Workload => None,
        Format::Results => {
            if sub.replica.is_some() && matches!(kind, NodeKind::ToolCall { .. }) {
                return err(at("replica"), "a tool_call is not routed to a replica");
            }
            let mut result = validate_result(&kind, sub.token_latency, sub.error, at)?;
            result.replica = sub.replica;
            Some(result)
        }
    };
    Ok(SubRequest { next: sub.next, interval, kind, result })
}

fn validate_result(
    kind: &NodeKind,
    token_latency: Option<Vec<f64>>,
    error: Option<String>,
    at: &dyn Fn(&str) -> String,
) -> Result<NodeResult, FieldError> {
    let token_latency = match (kind, token_latency) {
        (NodeKind::ToolCall { .. }, Some(t)) if !t.is_empty() => {
            return err(at("token_latency"), "a tool_call has no tokens");
        }
        (NodeKind::ToolCall { .. }, t) => t.unwrap_or_default(),
        (NodeKind::Llm(_), None) => return err(at("token_latency"), "missing on an llm sub-request"),
        (NodeKind::Llm(call), Some(t)) => {
            let expected = call.tokens_to_emit() as usize;
            if error.is_none() && t.len() != expected {
                return err(
                    at("token_latency"),
                    format!("has {} entries, expected {expected} (output tokens not seeded)", t.len()),
                );
            }
            if error.is_some() && t.len() > expected {
                return err(at("token_latency"), format!("has {} entries, more than {expected}", t.len()));
            }
            t
        }
    };
    for (k, &v) in token_latency.iter().enumerate() {
        check_time(|| at(&format!("token_latency[{k}]")), v)?;
    }
    Ok(NodeResult { token_latency, error, replica: None })
}

/// Checks that the fixed times along every path of an acyclic DAG (each
/// node's `interval` after its predecessors, a tool call's `duration`) add
/// up to at most `MAX_TIME_S`, the bound of each one: a request's own delays
/// then cannot carry the simulator's clock past its end, however they are
/// chained (a chain of 10^5 tool calls of 10^8 s each would).
pub(crate) fn check_path_times(nodes: &[SubRequest]) -> Result<(), FieldError> {
    let limit = super::types::seconds_to_us(super::types::MAX_TIME_S);
    // A lone node, the usual request: no buffers.
    if let [only] = nodes
        && only.next.is_empty()
    {
        return node_end(0, only, 0, limit).map(|_| ());
    }
    let mut indegree = vec![0u32; nodes.len()];
    for node in nodes {
        for &j in &node.next {
            indegree[j as usize] += 1;
        }
    }
    // When each node's predecessors are all done, µs after the send.
    let mut ready_us = vec![0u64; nodes.len()];
    let mut ready: Vec<usize> = (0..nodes.len()).filter(|&i| indegree[i] == 0).collect();
    while let Some(i) = ready.pop() {
        let end = node_end(i, &nodes[i], ready_us[i], limit)?;
        for &j in &nodes[i].next {
            ready_us[j as usize] = ready_us[j as usize].max(end);
            indegree[j as usize] -= 1;
            if indegree[j as usize] == 0 {
                ready.push(j as usize);
            }
        }
    }
    Ok(())
}

/// When node `i` ends, µs after the send, given when its predecessors are
/// all done (`ready_us`); refused past `limit`.
fn node_end(i: usize, node: &SubRequest, ready_us: u64, limit: u64) -> Result<u64, FieldError> {
    let over = |field: String, us: u64| {
        err(
            field,
            format!(
                "the intervals and tool-call durations along this path add up to {} s, beyond {:e} s",
                us as f64 / 1e6,
                super::types::MAX_TIME_S
            ),
        )
    };
    // Each term is at most `limit` (checked per field), so no sum wraps.
    let start = ready_us + node.interval_us();
    if start > limit {
        return over(format!("sub_requests[{i}].interval"), start);
    }
    let end = match node.kind {
        NodeKind::ToolCall { duration } => start + super::types::seconds_to_us(duration),
        NodeKind::Llm(_) => start,
    };
    if end > limit {
        return over(format!("sub_requests[{i}].duration"), end);
    }
    Ok(end)
}

/// Returns a node on a cycle, if the `next` edges have one (Kahn's algorithm:
/// whatever cannot be peeled off in topological order lies on or behind a cycle).
pub(crate) fn find_cycle(nodes: &[SubRequest]) -> Option<usize> {
    if let [only] = nodes
        && only.next.is_empty()
    {
        return None;
    }
    let mut indegree = vec![0u32; nodes.len()];
    for node in nodes {
        for &j in &node.next {
            indegree[j as usize] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..nodes.len()).filter(|&i| indegree[i] == 0).collect();
    let mut visited = 0;
    while let Some(i) = ready.pop() {
        visited += 1;
        for &j in &nodes[i].next {
            indegree[j as usize] -= 1;
            if indegree[j as usize] == 0 {
                ready.push(j as usize);
            }
        }
    }
    (visited < nodes.len()).then(|| (0..nodes.len()).find(|&i| indegree[i] > 0).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Result<Request, ReadError>> {
        Reader::new(text.as_bytes(), "w.jsonl", Format::Workload).collect()
    }

    #[test]
    fn id_set_merges_ranges_and_finds_duplicates() {
        let mut set = IdSet::default();
        for n in [0, 1, 2, 5, 4, 3] {
            assert!(set.insert(&RequestId::Int(n)));
        }
        assert_eq!(set.ranges.len(), 1);
        assert!(!set.insert(&RequestId::Int(4)));
        assert!(set.insert(&RequestId::Int(u64::MAX)));
        assert!(!set.insert(&RequestId::Int(u64::MAX)));
        assert!(set.insert(&RequestId::Str("a".into())));
        assert!(!set.insert(&RequestId::Str("a".into())));
        // Defect 9.11: 1 and "1" are one id; "01" is another.
        assert!(!set.insert(&RequestId::Str("1".into())));
        assert!(set.insert(&RequestId::Str("01".into())));
        assert!(set.insert(&RequestId::Str("9".into())));
        assert!(!set.insert(&RequestId::Int(9)));
    }

    #[test]
    fn reads_the_seed_example() {
        let line = r#"{"request_id": 0, "arrival_time": 0.0, "initial": [0], "sub_requests": [{"kind": "llm", "input_tokens": 2961, "output_tokens": 17, "next": [1], "interval": 0.0}, {"kind": "tool_call", "input_tokens": 0, "output_tokens": 0, "duration": 0.00007, "next": [2], "interval": 0.0}, {"kind": "llm", "input_tokens": 39, "output_tokens": 16, "next": [], "interval": 0.00036}]}"#;
        let rows = read(line);
        let request = rows[0].as_ref().unwrap();
        assert_eq!(request.sub_requests.len(), 3);
        assert_eq!(request.sub_requests[2].interval_us(), 360);
    }

    #[test]
    fn errors_stop_the_stream() {
        let rows = read("{\n{\"x\":1}\n");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].as_ref().unwrap_err().field, "json");
    }
}
