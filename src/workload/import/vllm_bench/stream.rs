//! A `vllm bench serve` result replayed without holding it: the file is one
//! JSON object whose per-request data are lists side by side (`input_lens`,
//! `output_lens`, … each in send order), so request `i` is the `i`-th entry
//! of several lists far apart in the file. Read whole, a million requests
//! held 647 MiB (the text and its parsed tree) before the run started.
//!
//! Here the file is read three ways, none holding more than an entry:
//! serde_json checks it is JSON (into `IgnoredAny`, its own messages and
//! lines); [`Layout::read`] scans the object once for where each list
//! starts and how many entries it has, keeping the small values
//! (`request_rate`, `max_concurrency`, …); then one [`Cursor`] a list walks
//! its entries in step, each entry parsed by serde_json as the whole path
//! parses it, and read by the same function (`super::row`). Recorded
//! arrivals are read once ahead for their origin (the earliest) and order:
//! out of send order (a client that queued requests for a slot), the file
//! is read whole and sorted instead.

use std::io::BufRead;
use std::path::Path;

use super::super::common::{ImportError, Input, Requests, open_file};
use super::{Drawn, Entries, Kept, from_origin, none_succeeded, per_request_lists, recorded, row};

/// A value of the object's top level.
enum Field {
    /// A list: the offset of its `[` and its number of entries.
    List { at: u64, len: usize },
    /// Anything else, parsed.
    Value(serde_json::Value),
}

/// Where the object's values are, and its small values.
pub(super) struct Layout {
    pub(super) file: String,
    /// The object's first line (every message names it, as the whole path's).
    pub(super) line: u64,
    fields: Vec<(String, Field)>,
}

impl Layout {
    /// Checks `path` is one JSON object and maps it.
    pub(super) fn read(path: &Path) -> Result<Layout, ImportError> {
        let file = path.display().to_string();
        let mut values = serde_json::Deserializer::from_reader(open_file(path)?).into_iter::<serde::de::IgnoredAny>();
        match values.next() {
            None => return Err(ImportError::new(&file, 1, "file", "empty: no result object")),
            Some(Err(e)) => return Err(ImportError::new(&file, e.line().max(1) as u64, "json", e.to_string())),
            Some(Ok(_)) => {}
        }
        drop(values);
        let mut bytes = Bytes { input: open_file(path)?, at: 0, lines: 0 };
        let io = |e: std::io::Error| ImportError::new(&file, 1, "file", e.to_string());
        bytes.skip_whitespace().map_err(io)?;
        let line = 1 + bytes.lines;
        if bytes.next().map_err(io)? != Some(b'{') {
            return Err(ImportError::new(&file, line, "json", super::NOT_AN_OBJECT));
        }
        // Valid JSON (checked above): the scan trusts its shape.
        let mut fields = Vec::new();
        let mut key = Vec::new();
        loop {
            bytes.skip_whitespace().map_err(io)?;
            match bytes.next().map_err(io)? {
                Some(b'"') => {}
                _ => break,
            }
            key.clear();
            key.push(b'"');
            bytes.string(Some(&mut key)).map_err(io)?;
            let name: String =
                serde_json::from_slice(&key).map_err(|e| ImportError::new(&file, line, "json", e.to_string()))?;
            bytes.skip_whitespace().map_err(io)?;
            bytes.next().map_err(io)?; // ':'
            bytes.skip_whitespace().map_err(io)?;
            let field = if bytes.peek().map_err(io)? == Some(b'[') {
                let at = bytes.at;
                bytes.next().map_err(io)?;
                let mut len = 0;
                loop {
                    bytes.skip_whitespace().map_err(io)?;
                    match bytes.peek().map_err(io)? {
                        Some(b']') | None => break,
                        Some(b',') => {
                            bytes.next().map_err(io)?;
                        }
                        Some(_) => {
                            bytes.value(None).map_err(io)?;
                            len += 1;
                        }
                    }
                }
                bytes.next().map_err(io)?; // ']'
                Field::List { at, len }
            } else {
                let mut text = Vec::new();
                bytes.value(Some(&mut text)).map_err(io)?;
                let value =
                    serde_json::from_slice(&text).map_err(|e| ImportError::new(&file, line, &name, e.to_string()))?;
                Field::Value(value)
            };
            fields.push((name, field));
            bytes.skip_whitespace().map_err(io)?;
            if bytes.next().map_err(io)? != Some(b',') {
                break;
            }
        }
        bytes.skip_whitespace().map_err(io)?;
        if bytes.peek().map_err(io)?.is_some() {
            return Err(ImportError::new(&file, 1 + bytes.lines, "json", super::SECOND_RESULT));
        }
        Ok(Layout { file, line, fields })
    }

    /// A key's field (the last of repeated keys wins, as in serde_json's map).
    fn field(&self, key: &str) -> Option<&Field> {
        self.fields.iter().rev().find(|(k, _)| k == key).map(|(_, f)| f)
    }

    /// A key's value when it is not a list.
    pub(super) fn value(&self, key: &str) -> Option<&serde_json::Value> {
        match self.field(key) {
            Some(Field::Value(v)) => Some(v),
            _ => None,
        }
    }

    fn error(&self, key: &str, reason: String) -> ImportError {
        ImportError::new(&self.file, self.line, key, reason)
    }

    /// A list's place and length (`None`: absent; an error: not a list).
    fn list(&self, key: &str) -> Result<Option<(u64, usize)>, ImportError> {
        match self.field(key) {
            None => Ok(None),
            Some(&Field::List { at, len }) => Ok(Some((at, len))),
            Some(Field::Value(_)) => Err(self.error(key, "not a list".to_owned())),
        }
    }
}

/// The replay's requests, streamed; `None` when its recorded arrivals are
/// out of send order (the whole path sorts them). Every check of the whole
/// path is made, in its order; those on a request's entries when the run
/// reaches it.
pub(super) fn requests(path: &Path, seed: u64) -> Result<Option<Requests>, ImportError> {
    let layout = Layout::read(path)?;
    let bad = |key: &str, reason: String| layout.error(key, reason);
    let ([input_lens, output_lens, ttfts, itls], [errors, latencies, start_times, queue_times]) =
        per_request_lists(&bad, &|key| layout.list(key), |l| l.1)?;
    let n = input_lens.1;
    super::cap(&layout.file, layout.line, layout.value("max_concurrency"))?;
    let open = |list: (u64, usize)| Cursor::open(path, &layout.file, list.0);
    let open_some = |list: Option<(u64, usize)>| list.map(open).transpose();
    // Recorded arrivals: their origin, and whether they are in send order.
    let mut timing = match start_times {
        Some(starts) => {
            let (mut s, mut q) = (open(starts)?, open_some(queue_times)?);
            let (mut origin, mut last, mut sorted) = (f64::INFINITY, f64::NEG_INFINITY, true);
            for i in 0..n {
                let start = s.next()?;
                let queued = q.as_mut().map(Cursor::next).transpose()?;
                let (arrival, _) = recorded(&bad, i, &start, queued.as_ref())?;
                origin = origin.min(arrival);
                sorted &= arrival >= last;
                last = arrival;
            }
            if !sorted {
                return Ok(None);
            }
            Timing::Recorded { origin, starts: open(starts)?, queued: open_some(queue_times)? }
        }
        None => Timing::Drawn(Drawn::new(&bad, &|k| layout.value(k), seed)?),
    };
    let mut lists = Lists {
        input: open(input_lens)?,
        output: open(output_lens)?,
        ttft: open(ttfts)?,
        itls: open(itls)?,
        error: open_some(errors)?,
        latency: open_some(latencies)?,
    };
    let (mut i, mut kept, mut over) = (0, 0usize, false);
    Ok(Some(Box::new(std::iter::from_fn(move || {
        if over {
            return None;
        }
        let bad = |key: &str, reason: String| layout.error(key, reason);
        while i < n {
            let at = i;
            i += 1;
            let mut step = || -> Result<Option<Kept>, ImportError> {
                let times = timing.next(&bad, at)?;
                let v = lists.next()?;
                let entries = Entries {
                    input: &v.input,
                    output: &v.output,
                    ttft: &v.ttft,
                    itls: &v.itls,
                    error: v.error.as_ref(),
                    latency: v.latency.as_ref(),
                };
                row(&bad, at, &entries, times, false)
            };
            match step() {
                Err(e) => {
                    over = true;
                    return Some(Err(e));
                }
                Ok(None) => {}
                Ok(Some(Kept { request, .. })) => {
                    kept += 1;
                    return Some(Ok(request));
                }
            }
        }
        over = true;
        (kept == 0).then(|| Err(bad("errors", none_succeeded(n))))
    }))))
}

/// Where the requests' arrivals and sends come from.
enum Timing {
    /// `start_times` (less `queue_times`), from the earliest arrival.
    Recorded { origin: f64, starts: Cursor, queued: Option<Cursor> },
    /// Drawn at the file's rate.
    Drawn(Drawn),
}

impl Timing {
    /// Request `i`'s arrival and send, s.
    fn next(&mut self, bad: &dyn Fn(&str, String) -> ImportError, i: usize) -> Result<(f64, f64), ImportError> {
        match self {
            Timing::Recorded { origin, starts, queued } => {
                let start = starts.next()?;
                let q = queued.as_mut().map(Cursor::next).transpose()?;
                let (arrival, sent) = recorded(bad, i, &start, q.as_ref())?;
                Ok((arrival - *origin, from_origin(bad, i, sent, *origin)?))
            }
            Timing::Drawn(d) => d.next(bad, i).map(|a| (a, a)),
        }
    }
}

/// The cursors of the lists a request is read from.
struct Lists {
    input: Cursor,
    output: Cursor,
    ttft: Cursor,
    itls: Cursor,
    error: Option<Cursor>,
    latency: Option<Cursor>,
}

/// One request's entries, parsed.
struct Values {
    input: serde_json::Value,
    output: serde_json::Value,
    ttft: serde_json::Value,
    itls: serde_json::Value,
    error: Option<serde_json::Value>,
    latency: Option<serde_json::Value>,
}

impl Lists {
    fn next(&mut self) -> Result<Values, ImportError> {
        Ok(Values {
            input: self.input.next()?,
            output: self.output.next()?,
            ttft: self.ttft.next()?,
            itls: self.itls.next()?,
            error: self.error.as_mut().map(Cursor::next).transpose()?,
            latency: self.latency.as_mut().map(Cursor::next).transpose()?,
        })
    }
}

/// One list's entries, in order, from its own reader of the file.
struct Cursor {
    bytes: Bytes,
    text: Vec<u8>,
    file: String,
}

impl Cursor {
    /// A reader of the list whose `[` is at byte `at`.
    fn open(path: &Path, file: &str, at: u64) -> Result<Cursor, ImportError> {
        let io = |e: std::io::Error| ImportError::new(file, 1, "file", e.to_string());
        let mut input = open_file(path)?;
        std::io::copy(&mut std::io::Read::take(&mut input, at + 1), &mut std::io::sink()).map_err(io)?;
        Ok(Cursor { bytes: Bytes { input, at: at + 1, lines: 0 }, text: Vec::new(), file: file.to_owned() })
    }

    /// The next entry (the layout counted them: the caller asks no more).
    fn next(&mut self) -> Result<serde_json::Value, ImportError> {
        let io = |e: std::io::Error| ImportError::new(&self.file, 1, "file", e.to_string());
        self.bytes.skip_whitespace().map_err(io)?;
        if self.bytes.peek().map_err(io)? == Some(b',') {
            self.bytes.next().map_err(io)?;
            self.bytes.skip_whitespace().map_err(io)?;
        }
        self.text.clear();
        self.bytes.value(Some(&mut self.text)).map_err(io)?;
        serde_json::from_slice(&self.text).map_err(|e| ImportError::new(&self.file, 1, "json", e.to_string()))
    }
}

/// The file's bytes, with the offset and newlines passed.
struct Bytes {
    input: Input,
    at: u64,
    lines: u64,
}

impl Bytes {
    fn peek(&mut self) -> std::io::Result<Option<u8>> {
        Ok(self.input.fill_buf()?.first().copied())
    }

    fn next(&mut self) -> std::io::Result<Option<u8>> {
        let b = self.peek()?;
        if let Some(b) = b {
            self.input.consume(1);
            self.at += 1;
            self.lines += u64::from(b == b'\n');
        }
        Ok(b)
    }

    fn skip_whitespace(&mut self) -> std::io::Result<()> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek()? {
            self.next()?;
        }
        Ok(())
    }

    /// The rest of a string whose opening quote was read, appended to `out`
    /// with its closing quote.
    fn string(&mut self, mut out: Option<&mut Vec<u8>>) -> std::io::Result<()> {
        let mut escaped = false;
        while let Some(b) = self.next()? {
            if let Some(o) = out.as_deref_mut() {
                o.push(b);
            }
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                break;
            }
        }
        Ok(())
    }

    /// One value, from its first byte (whitespace skipped) to its last,
    /// appended to `out`; a buffer at a time (every byte of the file passes
    /// here once a list).
    fn value(&mut self, mut out: Option<&mut Vec<u8>>) -> std::io::Result<()> {
        let (mut depth, mut in_string, mut escaped) = (0u32, false, false);
        loop {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            let (mut k, mut done) = (0, false);
            while k < buf.len() {
                let b = buf[k];
                k += 1;
                if in_string {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_string = false;
                        if depth == 0 {
                            done = true;
                            break;
                        }
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' if depth > 0 => {
                        depth -= 1;
                        if depth == 0 {
                            done = true;
                            break;
                        }
                    }
                    // The end of a scalar: left for the caller.
                    b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => {
                        k -= 1;
                        done = true;
                        break;
                    }
                    _ => {}
                }
            }
            if let Some(o) = out.as_deref_mut() {
                o.extend_from_slice(&buf[..k]);
            }
            self.lines += buf[..k].iter().filter(|&&b| b == b'\n').count() as u64;
            self.at += k as u64;
            self.input.consume(k);
            if done {
                return Ok(());
            }
        }
    }
}
