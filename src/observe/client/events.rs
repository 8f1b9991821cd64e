//! What the events of a vLLM `/v1/completions` stream mean for one call:
//! tokens counted from `usage.completion_tokens`, never from chunks.
//!
//! With `stream_options.continuous_usage_stats` vLLM puts the running usage
//! on every choice chunk (vllm/entrypoints/openai/completion/serving.py,
//! `completion_stream_generator`), and when its API process falls behind the
//! engine one chunk carries several tokens: the jump in `completion_tokens`
//! is how many arrived, and each is stamped with the time the chunk was read.
//! The final chunk (no choices) holds the total usage; `[DONE]` ends the
//! stream; a failure during generation arrives as `data: {"error": {...}}`
//! followed by `[DONE]`.

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::CallError;

/// Longest error text kept: enough for vLLM's error JSON, whose message
/// names the limit a request crossed; a proxy's HTML page is cut.
pub(crate) const ERROR_TEXT_LIMIT: usize = 2048;

/// The running state of one stream.
#[derive(Debug)]
pub(crate) struct StreamState {
    /// `max_tokens` as sent: a server reporting more is wrong, and the bound
    /// keeps a corrupt count from allocating without limit.
    max_tokens: u32,
    /// Completion tokens seen so far (the last `usage.completion_tokens`).
    pub(crate) completion_tokens: Option<u32>,
    /// `usage.prompt_tokens` of the last event that had usage.
    pub(crate) prompt_tokens: Option<u32>,
}

/// After an event: read on, or the stream is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    More,
    Done,
}

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    choices: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    error: Option<ErrorInfo>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
}

#[derive(Deserialize)]
struct ErrorInfo {
    #[serde(default)]
    code: Option<u16>,
}

/// `s` cut to at most [`ERROR_TEXT_LIMIT`] bytes, at a character boundary.
pub(crate) fn truncate(s: &str) -> String {
    if s.len() <= ERROR_TEXT_LIMIT {
        return s.to_string();
    }
    let mut end = ERROR_TEXT_LIMIT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl StreamState {
    pub(crate) fn new(max_tokens: u32) -> StreamState {
        StreamState { max_tokens, completion_tokens: None, prompt_tokens: None }
    }

    /// Takes one event's data, read at `now_us`: each token it adds is
    /// pushed onto `times` stamped `now_us`.
    pub(crate) fn event(&mut self, data: &str, now_us: u64, times: &mut Vec<u64>) -> Result<Step, CallError> {
        if data.trim() == "[DONE]" {
            return Ok(Step::Done);
        }
        let event: Event = serde_json::from_str(data)
            .map_err(|e| CallError::Protocol(format!("bad JSON in a stream event ({e}): {}", truncate(data))))?;
        if let Some(err) = event.error {
            // vLLM's ErrorInfo.code is the HTTP status it would have answered;
            // 500 when a server leaves it out.
            return Err(CallError::Http { status: err.code.unwrap_or(500), body: truncate(data) });
        }
        let has_choices = event.choices.as_ref().is_some_and(|c| !c.is_empty());
        let Some(usage) = event.usage else {
            if has_choices {
                return Err(CallError::Protocol(
                    "a stream chunk without `usage`: the server ignored stream_options.continuous_usage_stats, \
                     and tokens are counted from usage, never from chunks"
                        .to_string(),
                ));
            }
            return Ok(Step::More);
        };
        if usage.prompt_tokens.is_some() {
            self.prompt_tokens = usage.prompt_tokens;
        }
        if let Some(n) = usage.completion_tokens {
            let seen = self.completion_tokens.unwrap_or(0);
            if n < seen {
                return Err(CallError::Protocol(format!("usage.completion_tokens went down from {seen} to {n}")));
            }
            if n > self.max_tokens {
                return Err(CallError::Protocol(format!(
                    "usage.completion_tokens is {n}, more than the {} asked (max_tokens)",
                    self.max_tokens
                )));
            }
            times.extend(std::iter::repeat_n(now_us, (n - seen) as usize));
            self.completion_tokens = Some(n);
        }
        Ok(Step::More)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(prompt: u32, done: u32) -> String {
        format!(
            r#"{{"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{{"index":0,"text":"ab","logprobs":null,"finish_reason":null}}],"usage":{{"prompt_tokens":{prompt},"total_tokens":{},"completion_tokens":{done}}}}}"#,
            prompt + done
        )
    }

    #[test]
    fn tokens_come_from_usage_and_a_merged_chunk_gives_equal_times() {
        let mut s = StreamState::new(6);
        let mut t = Vec::new();
        assert_eq!(s.event(&chunk(9, 1), 100, &mut t), Ok(Step::More));
        assert_eq!(s.event(&chunk(9, 4), 250, &mut t), Ok(Step::More));
        // A chunk with no new token (vLLM sends one at the end with a
        // finish_reason) adds no time.
        assert_eq!(s.event(&chunk(9, 4), 260, &mut t), Ok(Step::More));
        let last = r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[],"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}"#;
        assert_eq!(s.event(last, 300, &mut t), Ok(Step::More));
        assert_eq!(s.event("[DONE]", 301, &mut t), Ok(Step::Done));
        assert_eq!(t, [100, 250, 250, 250]);
        assert_eq!((s.prompt_tokens, s.completion_tokens), (Some(9), Some(4)));
    }

    #[test]
    fn bad_events_are_errors() {
        let mut t = Vec::new();
        let e = StreamState::new(6).event("{nope", 1, &mut t).unwrap_err();
        assert!(matches!(&e, CallError::Protocol(m) if m.contains("bad JSON") && m.contains("{nope")), "{e}");
        let e = StreamState::new(6).event(r#"{"choices":[{"text":"a"}]}"#, 1, &mut t).unwrap_err();
        assert!(matches!(&e, CallError::Protocol(m) if m.contains("continuous_usage_stats")), "{e}");
        let e = StreamState::new(3).event(&chunk(9, 4), 1, &mut t).unwrap_err();
        assert!(matches!(&e, CallError::Protocol(m) if m.contains("more than the 3 asked")), "{e}");
        let mut s = StreamState::new(6);
        s.event(&chunk(9, 2), 1, &mut t).unwrap();
        let e = s.event(&chunk(9, 1), 2, &mut t).unwrap_err();
        assert!(matches!(&e, CallError::Protocol(m) if m.contains("went down from 2 to 1")), "{e}");
        let err = r#"{"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}"#;
        let e = StreamState::new(6).event(err, 1, &mut t).unwrap_err();
        assert_eq!(e, CallError::Http { status: 500, body: err.to_string() });
        assert_eq!(t, [1, 1]);
    }

    #[test]
    fn long_error_text_is_cut_at_a_character() {
        let s = "é".repeat(ERROR_TEXT_LIMIT);
        let cut = truncate(&s);
        assert!(cut.len() <= ERROR_TEXT_LIMIT + "…".len() && cut.ends_with('…'));
        assert_eq!(truncate("short"), "short");
    }
}
