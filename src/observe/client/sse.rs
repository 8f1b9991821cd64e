//! Server-sent-events framing: bytes as they arrive from the socket in, the
//! `data` of each complete event out. TCP and HTTP chunking cut the stream
//! anywhere — inside a line, between `\r` and `\n`, inside a UTF-8 character —
//! so the parser keeps the unfinished line and the event's data lines across
//! calls, and an event is complete only at its blank line (the SSE spec's
//! dispatch rule: <https://html.spec.whatwg.org/multipage/server-sent-events.html>).
//!
//! Lines end in `\n` or `\r\n`: what vLLM (Starlette's StreamingResponse of
//! `data: ...\n\n` strings) and every OpenAI-compatible server we know write.
//! A lone `\r` line end, which the spec also allows, is not recognised.

use std::ops::ControlFlow;

/// Incremental SSE parser: [`SseParser::feed`] bytes, get whole events' data.
/// It allocates nothing once its two buffers have grown to the longest line
/// cut by a read and the longest event (at 1,000 streams the client parses
/// tens of thousands of events a second, each stamped only after the parse
/// of the ones before it in the same read).
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Bytes of a line begun by an earlier read and not yet ended by `\n`.
    line: Vec<u8>,
    /// The `data` lines of the event being read, joined by `\n`.
    data: Vec<u8>,
    /// Whether the event being read has a `data` field (an event without
    /// one is not dispatched).
    has_data: bool,
}

/// A complete event's data was not valid UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotUtf8;

/// `line` without the `\r` of a `\r\n` line end.
fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

impl SseParser {
    /// Consumes `bytes`, handing the data of every event they complete to
    /// `on_data`, in order, until it breaks (the bytes after that event are
    /// dropped) or fails (the error is returned).
    pub(crate) fn feed<E: From<NotUtf8>>(
        &mut self,
        bytes: &[u8],
        mut on_data: impl FnMut(&str) -> Result<ControlFlow<()>, E>,
    ) -> Result<ControlFlow<()>, E> {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let head = &rest[..nl];
            rest = &rest[nl + 1..];
            // A line wholly inside `bytes` is read in place; one begun by an
            // earlier read is finished in `line`.
            let flow = if self.line.is_empty() {
                self.line_done(strip_cr(head), &mut on_data)
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                let flow = self.line_done(strip_cr(&line), &mut on_data);
                line.clear();
                self.line = line;
                flow
            }?;
            if flow.is_break() {
                return Ok(flow);
            }
        }
        self.line.extend_from_slice(rest);
        Ok(ControlFlow::Continue(()))
    }

    /// Whether bytes of an unfinished event are held (a stream that ends
    /// here was cut mid-event).
    pub(crate) fn is_mid_event(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }

    fn line_done<E: From<NotUtf8>>(
        &mut self,
        line: &[u8],
        on_data: &mut impl FnMut(&str) -> Result<ControlFlow<()>, E>,
    ) -> Result<ControlFlow<()>, E> {
        if line.is_empty() {
            if !std::mem::take(&mut self.has_data) {
                return Ok(ControlFlow::Continue(()));
            }
            let data = std::mem::take(&mut self.data);
            let flow = match std::str::from_utf8(&data) {
                Ok(text) => on_data(text),
                Err(_) => Err(NotUtf8.into()),
            };
            self.data = data;
            self.data.clear();
            return flow;
        }
        // `:` starts a comment (keep-alives); other fields (event, id, retry)
        // carry nothing an OpenAI stream uses.
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return Ok(ControlFlow::Continue(())),
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &[][..]),
        };
        if field == b"data" {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if self.has_data {
                self.data.push(b'\n');
            }
            self.has_data = true;
            self.data.extend_from_slice(value);
        }
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes`, collecting the events' data (`[DONE]` breaks).
    fn feed(p: &mut SseParser, bytes: &[u8], out: &mut Vec<String>) -> Result<ControlFlow<()>, NotUtf8> {
        p.feed(bytes, |data| {
            out.push(data.to_string());
            Ok(if data == "[DONE]" { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
        })
    }

    fn feed_in_pieces(input: &[u8], piece: usize) -> Vec<String> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in input.chunks(piece) {
            let flow = feed(&mut p, c, &mut out).unwrap();
            assert_eq!(flow.is_break(), out.last().is_some_and(|d| d == "[DONE]"));
        }
        assert!(!p.is_mid_event());
        out
    }

    #[test]
    fn events_are_the_same_however_the_bytes_are_cut() {
        let input = "data: {\"a\": 1}\n\n: keep-alive\n\ndata: {\"b\": \"é\"}\r\n\r\nevent: x\nid: 3\ndata:[DONE]\n\n";
        let want = vec!["{\"a\": 1}".to_string(), "{\"b\": \"é\"}".to_string(), "[DONE]".to_string()];
        for piece in 1..=input.len() {
            assert_eq!(feed_in_pieces(input.as_bytes(), piece), want, "pieces of {piece} bytes");
        }
    }

    #[test]
    fn multi_line_data_is_joined_and_an_unfinished_event_is_held() {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        assert_eq!(feed(&mut p, b"data: one\ndata: two\n", &mut out), Ok(ControlFlow::Continue(())));
        assert!(out.is_empty());
        assert!(p.is_mid_event());
        assert_eq!(feed(&mut p, b"\nretry: 10\n\n", &mut out), Ok(ControlFlow::Continue(())));
        assert_eq!(out, ["one\ntwo"]);
        assert!(!p.is_mid_event());
        assert_eq!(feed(&mut p, b"data: cut", &mut out), Ok(ControlFlow::Continue(())));
        assert!(p.is_mid_event());
        assert_eq!(feed(&mut p, b"\xff\n\n", &mut out), Err(NotUtf8));
    }

    #[test]
    fn done_stops_the_feed_and_the_buffers_are_reused() {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        let flow = feed(&mut p, b"data: a\n\ndata: [DONE]\n\ndata: after\n\n", &mut out).unwrap();
        assert_eq!(
            (flow, out.as_slice()),
            (ControlFlow::Break(()), ["a".to_string(), "[DONE]".to_string()].as_slice())
        );
        // A line and an event cut across reads leave capacity behind, which
        // the next events reuse instead of allocating.
        let mut p = SseParser::default();
        out.clear();
        assert_eq!(feed(&mut p, b"data: x", &mut out), Ok(ControlFlow::Continue(())));
        assert_eq!(feed(&mut p, b"yz\n\n", &mut out), Ok(ControlFlow::Continue(())));
        let (line_cap, data_cap) = (p.line.capacity(), p.data.capacity());
        assert!(line_cap > 0 && data_cap > 0);
        assert_eq!(feed(&mut p, b"data: u", &mut out), Ok(ControlFlow::Continue(())));
        assert_eq!(feed(&mut p, b"v\n\n", &mut out), Ok(ControlFlow::Continue(())));
        assert_eq!(out, ["xyz", "uv"]);
        assert_eq!((p.line.capacity(), p.data.capacity()), (line_cap, data_cap));
    }
}
