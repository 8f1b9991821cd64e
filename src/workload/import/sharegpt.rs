//! `sharegpt`: ShareGPT conversations (`ShareGPT_V3_unfiltered_cleaned_split.json`,
//! the dataset `vllm bench serve --dataset-name sharegpt` samples; FastChat's
//! training format): one JSON array of `{id, conversations: [{from, value}],
//! system?}`, `from` one of `human` or `user` (a prompt), `gpt`,
//! `assistant`, `chatgpt`, `bing`, `bard` or `model` (a reply), `system`
//! (context); other keys are ignored. (LLMServingSim's `sharegpt` JSONL
//! workloads are another format: see [`super::llmservingsim_dataset`].)
//!
//! Mapping, per conversation (array element `i`, request id `i`):
//! - It is a session: one request DAG whose llm calls chain, one per reply;
//!   call `k` sends the whole conversation before reply `k` (the element's
//!   `system`, then every turn, earlier replies included) and generates the
//!   reply. Turns after the last reply generate nothing and are dropped; a
//!   reply with nothing before it (a conversation opened by the model) is
//!   context for the next call. A conversation without a call is skipped
//!   (its id unused).
//! - No tokenizer here: a text of `c` characters (Unicode scalar values) is
//!   `ceil(c / 4)` tokens, [`CHARS_PER_TOKEN`]; a reply at least 1; chat-
//!   template tokens are not added.
//! - Token ids come from each turn's text (a hash of it seeds
//!   [`super::common::fresh_tokens`]): a call's prompt extends the previous
//!   call's prompt and reply exactly, and conversations that open alike (a
//!   shared system prompt, the same first question) share that prefix, as
//!   they would on a server.
//! - Arrivals: ShareGPT records no times. Sessions start as a Poisson process
//!   at `session_rate` sessions/s (required; seeded), in file order, and a
//!   session's next turn is sent as soon as the previous reply ends (no
//!   think time: none is recorded). Only `closed-loop` replay.
//!
//! The array is read element by element as the run consumes it (the V3
//! file is 670 MB), never whole; an error names the line its element
//! starts on.

use std::io::{BufRead, Read};
use std::path::Path;

use super::common::{
    ImportError, ImportOptions, MAX_TOKENS, PoissonStarts, Requests, SessionMode, fresh_tokens, open_file,
};
use crate::workload::types::{LlmCall, NodeKind, Request, RequestId, SubRequest};

/// Characters per token of the estimate: OpenAI's published rule of thumb
/// for English text ("one token ≈ 4 characters"), the ratio the
/// `lmcache-agent-trace` table's `est_*_tokens` were computed with
/// (`ceil(chars / 4)`, its README) and [`super::agent_calls`] reads shared
/// characters by.
pub const CHARS_PER_TOKEN: usize = 4;

#[derive(serde::Deserialize)]
struct Conversation {
    #[serde(default)]
    system: Option<String>,
    conversations: Vec<Turn>,
}

#[derive(serde::Deserialize)]
struct Turn {
    from: String,
    value: String,
}

/// The estimated tokens of `text`.
fn estimated_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(CHARS_PER_TOKEN)
}

/// Token ids of `text`: a stream keyed by FNV-1a of its bytes.
fn text_ids(text: &str, n: usize) -> impl Iterator<Item = u32> {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    fresh_tokens(hash, 0, n)
}

/// Streams `path`'s sessions.
pub(super) fn open(path: &Path, options: &ImportOptions) -> Result<Requests, ImportError> {
    let file = path.display().to_string();
    let mut starts = PoissonStarts::new(options, &file, "sharegpt", "ShareGPT records no times")?;
    if let Some(mode) = options.session_mode.filter(|&m| m != SessionMode::ClosedLoop) {
        return Err(ImportError::new(
            &file,
            0,
            "session_mode",
            format!(
                "sharegpt records no times within a conversation: it replays closed-loop only, not {}",
                mode.name()
            ),
        ));
    }
    let reader = Counting { inner: open_file(path)?, newlines: 0 };
    let mut elements = Elements { file: file.clone(), reader, index: 0, done: false };
    elements.open()?;
    Ok(Box::new(std::iter::from_fn(move || {
        loop {
            let (index, line, conversation) = match elements.next()? {
                Ok(e) => e,
                Err(e) => return Some(Err(e)),
            };
            let nodes = match session(&file, line, &conversation) {
                Ok(nodes) => nodes,
                Err(e) => return Some(Err(e)),
            };
            if nodes.is_empty() {
                continue;
            }
            let start = starts.next_start();
            if let Err(e) = crate::workload::checked_seconds_to_us(start) {
                return Some(Err(ImportError::new(
                    &file,
                    line,
                    "session_rate",
                    format!("{:e} sessions/s starts conversation {index} at {start:e} s: {e}", starts.rate()),
                )));
            }
            return Some(Ok(Request {
                traffic: Default::default(),
                request_id: RequestId::Int(index),
                arrival_time: start,
                initial: vec![0],
                sub_requests: nodes,
            }));
        }
    })))
}

/// The llm calls of one conversation, chained (none: nothing to send).
fn session(file: &str, line: u64, c: &Conversation) -> Result<Vec<SubRequest>, ImportError> {
    let mut prompt: Vec<u32> = Vec::new();
    let mut calls: Vec<LlmCall> = Vec::new();
    let too_long =
        || ImportError::new(file, line, "conversations", format!("a prompt passes {MAX_TOKENS} tokens (estimated)"));
    if let Some(system) = &c.system {
        prompt.extend(text_ids(system, estimated_tokens(system)));
    }
    for (k, turn) in c.conversations.iter().enumerate() {
        let n = estimated_tokens(&turn.value);
        match turn.from.as_str() {
            "human" | "user" | "system" => prompt.extend(text_ids(&turn.value, n)),
            "gpt" | "assistant" | "chatgpt" | "bing" | "bard" | "model" if !prompt.is_empty() => {
                let output: Vec<u32> = text_ids(&turn.value, n.max(1)).collect();
                if prompt.len() > MAX_TOKENS as usize || output.len() > MAX_TOKENS as usize {
                    return Err(too_long());
                }
                let call = LlmCall::for_prompt(prompt.clone(), output.len() as u32).with_output_ids(output.clone());
                calls.push(call);
                prompt.extend(output);
            }
            // A reply to nothing: context for the next call.
            "gpt" | "assistant" | "chatgpt" | "bing" | "bard" | "model" => prompt.extend(text_ids(&turn.value, n)),
            other => {
                return Err(ImportError::new(
                    file,
                    line,
                    &format!("conversations[{k}].from"),
                    format!(
                        "`{other}` is not a speaker (human, user, gpt, assistant, chatgpt, bing, bard, model, system)"
                    ),
                ));
            }
        }
        if prompt.len() > MAX_TOKENS as usize {
            return Err(too_long());
        }
    }
    let n = calls.len();
    Ok(calls
        .into_iter()
        .enumerate()
        .map(|(j, call)| SubRequest {
            next: if j + 1 < n { vec![j as u32 + 1] } else { vec![] },
            interval: 0.0,
            kind: NodeKind::Llm(call),
            result: None,
        })
        .collect())
}

/// A reader that counts the line ends it has passed on.
struct Counting<R> {
    inner: R,
    newlines: u64,
}

impl<R: BufRead> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.newlines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        Ok(n)
    }
}

impl<R: BufRead> Counting<R> {
    /// The next byte, not consumed.
    fn peek(&mut self) -> std::io::Result<Option<u8>> {
        Ok(self.inner.fill_buf()?.first().copied())
    }

    fn consume(&mut self, byte: u8) {
        self.newlines += u64::from(byte == b'\n');
        self.inner.consume(1);
    }
}

/// The elements of the top-level array, one at a time as the run reads
/// them (memory stays flat however long the file), with their index and
/// the line each starts on.
struct Elements {
    file: String,
    reader: Counting<std::io::BufReader<crate::spool::Input>>,
    index: u64,
    done: bool,
}

impl Elements {
    fn line(&self) -> u64 {
        self.reader.newlines + 1
    }

    fn error(&self, column: &str, reason: impl Into<String>) -> ImportError {
        ImportError::new(&self.file, self.line(), column, reason)
    }

    /// The next byte after white space, not consumed.
    fn next_byte(&mut self) -> Result<Option<u8>, ImportError> {
        loop {
            match self.reader.peek().map_err(|e| self.error("file", e.to_string()))? {
                Some(b @ (b' ' | b'\t' | b'\r' | b'\n')) => self.reader.consume(b),
                other => return Ok(other),
            }
        }
    }

    /// Reads the opening `[`.
    fn open(&mut self) -> Result<(), ImportError> {
        if self.next_byte()? != Some(b'[') {
            return Err(self.error("json", "not a JSON array of conversations"));
        }
        self.reader.consume(b'[');
        if self.next_byte()? == Some(b']') {
            self.reader.consume(b']');
            self.end()?;
        }
        Ok(())
    }

    /// After the closing `]`: nothing but white space.
    fn end(&mut self) -> Result<(), ImportError> {
        self.done = true;
        match self.next_byte()? {
            None => Ok(()),
            Some(_) => Err(self.error("json", "text after the array")),
        }
    }

    fn next(&mut self) -> Option<Result<(u64, u64, Conversation), ImportError>> {
        if self.done {
            return None;
        }
        let result = self.element();
        if result.is_err() {
            self.done = true;
        }
        Some(result)
    }

    fn element(&mut self) -> Result<(u64, u64, Conversation), ImportError> {
        if self.next_byte()?.is_none() {
            return Err(self.error("json", "the array ends without `]`"));
        }
        let line = self.line();
        // serde_json reads an object to its closing `}` and not a byte
        // further, so the separator after it is still there.
        let mut de = serde_json::Deserializer::from_reader(&mut self.reader);
        let conversation = serde::Deserialize::deserialize(&mut de).map_err(|e| {
            let msg = e.to_string();
            let column = match msg.strip_prefix("missing field `") {
                Some(rest) => rest.split('`').next().unwrap_or("json").to_owned(),
                None => "json".to_owned(),
            };
            ImportError::new(&self.file, line + e.line().max(1) as u64 - 1, &column, msg)
        })?;
        match self.next_byte()? {
            Some(b',') => self.reader.consume(b','),
            Some(b']') => {
                self.reader.consume(b']');
                self.end()?;
            }
            _ => return Err(self.error("json", "expected `,` or `]` after a conversation")),
        }
        let index = self.index;
        self.index += 1;
        Ok((index, line, conversation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../../../tests/data/import/sharegpt/conversations.json");

    fn open_str(text: &str, seed: u64) -> Result<Vec<Request>, ImportError> {
        let options = ImportOptions { session_rate: Some(2.0), seed, ..Default::default() };
        super::super::common::tests::open_text(open, text, &options)
    }

    use super::super::common::tests::llm_calls as calls;

    #[test]
    fn the_fixture_becomes_chained_sessions() {
        let requests = open_str(FIXTURE, 1).unwrap();
        // Element 2 has no reply: skipped, its id unused.
        let ids: Vec<String> = requests.iter().map(|r| r.request_id.to_string()).collect();
        assert_eq!(ids, ["0", "1", "3"]);
        // Element 0: "Who are you?" (12 chars: 3 tokens) -> 99 chars (25);
        // "Have a nice day!" (16: 4) -> "You too!" (8: 2): 3 + 25 + 4 = 32.
        // Element 1 (system, 175 chars: 44): "What is up?" (11: 3) -> 32 chars (8).
        // Element 3: a gpt opening "Hi! Ask me anything." (20: 5, context),
        // "2+2?" (4: 1) -> "" (0, at least 1).
        let shape: Vec<Vec<(u32, u32)>> =
            requests.iter().map(|r| calls(r).iter().map(|c| (c.input_tokens, c.output_tokens)).collect()).collect();
        assert_eq!(shape, [vec![(3, 25), (32, 2)], vec![(47, 8)], vec![(6, 1)]]);
        let r0 = calls(&requests[0]);
        let (p0, o0, p1) = (
            r0[0].input_token_ids.as_ref().unwrap(),
            r0[0].output_token_ids.as_ref().unwrap(),
            r0[1].input_token_ids.as_ref().unwrap(),
        );
        assert_eq!(&p1[..3], &p0[..]);
        assert_eq!(&p1[3..28], &o0[..]);
        assert_eq!(requests[0].sub_requests[0].next, vec![1]);
        assert_eq!(requests[0].sub_requests[1].interval, 0.0);
        // Arrivals: the first at 0, then increasing, seeded.
        assert_eq!(requests[0].arrival_time, 0.0);
        assert!(requests.windows(2).all(|w| w[0].arrival_time < w[1].arrival_time));
        let again: Vec<f64> = open_str(FIXTURE, 1).unwrap().iter().map(|r| r.arrival_time).collect();
        assert_eq!(again, requests.iter().map(|r| r.arrival_time).collect::<Vec<_>>());
    }

    #[test]
    fn equal_texts_share_ids_across_conversations() {
        let two = r#"[{"id": "a", "conversations": [{"from": "human", "value": "Who are you?"}, {"from": "gpt", "value": "A model."}]},
{"id": "b", "conversations": [{"from": "human", "value": "Who are you?"}, {"from": "gpt", "value": "Nobody."}]}]"#;
        let r = open_str(two, 0).unwrap();
        assert_eq!(calls(&r[0])[0].input_token_ids, calls(&r[1])[0].input_token_ids);
        assert_ne!(calls(&r[0])[0].output_token_ids, calls(&r[1])[0].output_token_ids);
    }

    #[test]
    fn bad_elements_are_named_by_their_line() {
        let bad = "[\n{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": \"gpt\", \"value\": \"yo\"}]},\n{\"id\": \"b\", \"conversations\": [{\"from\": \"robot\", \"value\": \"hi\"}]}\n]";
        let e = open_str(bad, 0).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (3, "conversations[0].from"), "{e}");
        let e = open_str("[\n{\"id\": \"a\"}\n]", 0).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (2, "conversations"), "{e}");
        let e = open_str("[\n{\"id\": \"a\", \"conversations\": []}\n{\"id\": \"b\", \"conversations\": []}]", 0)
            .unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (3, "json"), "{e}");
        let e = open_str("{\"id\": 1}", 0).unwrap_err();
        assert_eq!((e.line, e.column.as_str()), (1, "json"), "{e}");
        assert!(open_str("[]", 0).unwrap().is_empty());
    }
}
