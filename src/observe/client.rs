//! One llm call against vLLM's OpenAI server, timed token by token.
//!
//! This is branch o2's stand-in with the session's fixed interface, so that
//! the driver and the `observe` command build and their tests run against a
//! stub server; O1's client (its timing-error measurements and failure
//! tests) replaces this file at the merge. It streams `/v1/completions`
//! (`stream_options.continuous_usage_stats`, so every chunk says how many
//! tokens exist: tokens are counted from `usage`, never from chunks), sends
//! token-id prompts, and finds prompts of an exact length with `/tokenize`.

use std::time::{Duration, Instant};

/// A monotonic origin every time of an observation counts from.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    /// The origin is now.
    pub fn start() -> Clock {
        Clock { origin: Instant::now() }
    }

    /// µs since the origin.
    pub fn now_us(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }
}

/// What the prompt of a call is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Token ids, sent as they are (exact length and shared prefixes).
    TokenIds(Vec<u32>),
    /// Text.
    Text(String),
}

/// One call to make.
#[derive(Debug, Clone)]
pub struct CallSpec {
    /// The prompt.
    pub prompt: Prompt,
    /// Sent as `max_tokens` = `min_tokens` = this, with `ignore_eos`.
    pub output_tokens: u32,
    /// vLLM's `priority` in the body, when given.
    pub priority: Option<i32>,
    /// Extra request headers (e.g. `x-session-id`).
    pub headers: Vec<(String, String)>,
}

/// What one call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallRecord {
    /// [`Clock`] µs when the request was written.
    pub send_us: u64,
    /// One [`Clock`] time per output token (k equal times for a chunk that
    /// carried k tokens).
    pub token_times_us: Vec<u64>,
    /// `usage.prompt_tokens`, when the server said.
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens`, when the server said.
    pub completion_tokens: Option<u32>,
    /// Why the call failed, if it did (the tokens that arrived stay above).
    pub error: Option<CallError>,
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No connection to the server.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The server answered with an error status.
    #[error("HTTP {status}: {body}")]
    Http {
        /// The status code.
        status: u16,
        /// The body, as sent.
        body: String,
    },
    /// The call took longer than the client's timeout.
    #[error("timed out")]
    Timeout,
    /// The connection closed before the stream ended.
    #[error("disconnected: {0}")]
    Disconnected(String),
    /// The server's answer is not what the API says.
    #[error("protocol: {0}")]
    Protocol(String),
}

/// A client of one server and model.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    model: String,
}

fn transport(e: reqwest::Error) -> CallError {
    if e.is_timeout() {
        CallError::Timeout
    } else if e.is_connect() {
        CallError::Connect(e.to_string())
    } else if e.is_body() || e.is_decode() {
        CallError::Disconnected(e.to_string())
    } else {
        CallError::Protocol(e.to_string())
    }
}

impl Client {
    /// A client of the server at `base_url` serving `model`; every call
    /// gives up after `timeout`.
    pub fn new(base_url: &str, model: &str, timeout: Duration) -> Result<Client, CallError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| CallError::Protocol(e.to_string()))?;
        Ok(Client { http, base: base_url.trim_end_matches('/').to_owned(), model: model.to_owned() })
    }

    /// Streams one completion, timing each token.
    pub async fn call(&self, spec: &CallSpec, clock: &Clock) -> CallRecord {
        let prompt = match &spec.prompt {
            Prompt::TokenIds(ids) => serde_json::json!(ids),
            Prompt::Text(text) => serde_json::json!(text),
        };
        let mut body = serde_json::json!({
            "model": self.model,
            "prompt": prompt,
            "max_tokens": spec.output_tokens,
            "min_tokens": spec.output_tokens,
            "ignore_eos": true,
            "stream": true,
            "stream_options": {"include_usage": true, "continuous_usage_stats": true},
        });
        if let Some(p) = spec.priority {
            body["priority"] = serde_json::json!(p);
        }
        let mut request = self.http.post(format!("{}/v1/completions", self.base)).json(&body);
        for (k, v) in &spec.headers {
            request = request.header(k, v);
        }
        let mut record = CallRecord { send_us: clock.now_us(), ..CallRecord::default() };
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => return CallRecord { error: Some(transport(e)), ..record },
        };
        if !response.status().is_success() {
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            return CallRecord { error: Some(CallError::Http { status, body }), ..record };
        }
        let mut pending = Vec::new();
        let mut done = false;
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    record.error = Some(transport(e));
                    return record;
                }
            };
            let now = clock.now_us();
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = pending.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&event);
                for line in text.lines() {
                    let Some(data) = line.strip_prefix("data:") else { continue };
                    let data = data.trim();
                    if data == "[DONE]" {
                        done = true;
                        continue;
                    }
                    let value: serde_json::Value = match serde_json::from_str(data) {
                        Ok(v) => v,
                        Err(e) => {
                            record.error = Some(CallError::Protocol(format!("a chunk is not JSON: {e}")));
                            return record;
                        }
                    };
                    let usage = &value["usage"];
                    if let Some(p) = usage["prompt_tokens"].as_u64() {
                        record.prompt_tokens = Some(p as u32);
                    }
                    if let Some(c) = usage["completion_tokens"].as_u64() {
                        let c = c as u32;
                        let have = record.token_times_us.len() as u32;
                        record.token_times_us.extend(std::iter::repeat_n(now, c.saturating_sub(have) as usize));
                        record.completion_tokens = Some(c);
                    }
                }
            }
        }
        if !done {
            record.error = Some(CallError::Disconnected("the stream ended before [DONE]".to_owned()));
        }
        record
    }

    /// Token ids of a prompt of exactly `len` tokens in the server's
    /// tokenizer: words chosen by `seed`, tokenized by `/tokenize`, cut to
    /// `len` (more words when they fall short).
    pub async fn prompt_ids(&self, len: u32, seed: u64) -> Result<Vec<u32>, CallError> {
        let mut words = len as usize + 8;
        loop {
            let mut z = seed;
            let text: Vec<String> = (0..words)
                .map(|_| {
                    z = crate::hash::mix(z.wrapping_add(0x9E37_79B9_7F4A_7C15));
                    format!("w{}", z % 10_000)
                })
                .collect();
            let body = serde_json::json!({"model": self.model, "prompt": text.join(" "), "add_special_tokens": false});
            let response =
                self.http.post(format!("{}/tokenize", self.base)).json(&body).send().await.map_err(transport)?;
            let status = response.status().as_u16();
            let text = response.text().await.map_err(transport)?;
            if status != 200 {
                return Err(CallError::Http { status, body: text });
            }
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| CallError::Protocol(format!("/tokenize: {e}")))?;
            let tokens: Vec<u32> = value["tokens"]
                .as_array()
                .ok_or_else(|| CallError::Protocol("/tokenize: no `tokens`".to_owned()))?
                .iter()
                .filter_map(|t| t.as_u64().map(|t| t as u32))
                .collect();
            if tokens.len() >= len as usize {
                return Ok(tokens[..len as usize].to_vec());
            }
            if words > 64 * (len as usize + 8) {
                return Err(CallError::Protocol(format!("/tokenize: {words} words give only {} tokens", tokens.len())));
            }
            words *= 2;
        }
    }

    /// `/v1/models` lists the model, or an error naming those it lists.
    pub async fn check_model(&self) -> Result<(), CallError> {
        let response = self.http.get(format!("{}/v1/models", self.base)).send().await.map_err(transport)?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(transport)?;
        if status != 200 {
            return Err(CallError::Http { status, body: text });
        }
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| CallError::Protocol(format!("/v1/models: {e}")))?;
        let ids: Vec<&str> = value["data"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str()).collect();
        if ids.contains(&self.model.as_str()) {
            Ok(())
        } else {
            Err(CallError::Protocol(format!(
                "the server does not serve model `{}`; it serves: {}",
                self.model,
                ids.join(", ")
            )))
        }
    }
}
