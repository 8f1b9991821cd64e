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

/// Incremental SSE parser: [`SseParser::feed`] bytes, get whole events' data.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// Bytes of the line not yet ended by `\n`.
    line: Vec<u8>,
    /// The `data` lines of the event being read, joined by `\n`; `None` while
    /// the event has no `data` field (such an event is not dispatched).
    data: Option<Vec<u8>>,
}

/// A complete event's data was not valid UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotUtf8;

impl SseParser {
    /// Consumes `bytes`, appending the data of every event completed by them
    /// to `out` (in order).
    pub(crate) fn feed(&mut self, bytes: &[u8], out: &mut Vec<String>) -> Result<(), NotUtf8> {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&rest[..nl]);
            rest = &rest[nl + 1..];
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
            self.line = line;
            self.line.clear();
        }
        self.line.extend_from_slice(rest);
        Ok(())
    }

    /// Whether bytes of an unfinished event are held (a stream that ends
    /// here was cut mid-event).
    pub(crate) fn is_mid_event(&self) -> bool {
        !self.line.is_empty() || self.data.is_some()
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<String>) -> Result<(), NotUtf8> {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(String::from_utf8(data).map_err(|_| NotUtf8)?);
            }
            return Ok(());
        }
        // `:` starts a comment (keep-alives); other fields (event, id, retry)
        // carry nothing an OpenAI stream uses.
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return Ok(()),
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &[][..]),
        };
        if field == b"data" {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            match &mut self.data {
                Some(d) => {
                    d.push(b'\n');
                    d.extend_from_slice(value);
                }
                None => self.data = Some(value.to_vec()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_in_pieces(input: &[u8], piece: usize) -> Vec<String> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in input.chunks(piece) {
            p.feed(c, &mut out).unwrap();
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
        p.feed(b"data: one\ndata: two\n", &mut out).unwrap();
        assert!(out.is_empty());
        assert!(p.is_mid_event());
        p.feed(b"\nretry: 10\n\n", &mut out).unwrap();
        assert_eq!(out, ["one\ntwo"]);
        assert!(!p.is_mid_event());
        p.feed(b"data: cut", &mut out).unwrap();
        assert!(p.is_mid_event());
        assert_eq!(p.feed(b"\xff\n\n", &mut out), Err(NotUtf8));
    }
}
