//! One llm call against vLLM's OpenAI-compatible server, timed: a streamed
//! `/v1/completions` request whose output tokens are each stamped with the
//! monotonic time at which their bytes were read, plus the two look-ups a
//! driver needs first (`/v1/models`, `/tokenize`).
//!
//! Why reqwest (on hyper): hyper is the maintained HTTP/1.1 stack of the
//! tokio ecosystem, and reqwest adds, on top of it, what a client of many
//! concurrent calls needs and would otherwise be hand-written: a connection
//! pool that reuses keep-alive connections per host, chunked-transfer and
//! close-delimited bodies, JSON bodies, and `Response::chunk`, which hands
//! the body over as hyper reads it (so the stamps are taken at arrival, not
//! at the end). It builds without TLS (plain HTTP to a local or
//! cluster-internal server) and without a futures adapter crate. A raw
//! hyper client would need hyper-util's pool and connector wired by hand for
//! no gain in timing: both read the socket through the same hyper code.
//!
//! Timing: [`Clock`] is one `std::time::Instant` origin shared by all calls
//! of a run; a token's time is taken right after the chunk that completes
//! its SSE event is returned by the socket read. Tokens are counted from
//! `usage` (`continuous_usage_stats`), never from chunks: vLLM merges several
//! tokens into one chunk when its API process falls behind (the `events`
//! submodule).
//!
//! Failures are values: [`Client::call`] always returns a [`CallRecord`],
//! whose `error` says why the call failed, with the tokens that had arrived
//! kept. Every network wait is bounded by the per-call timeout, so nothing
//! hangs. The calls need a tokio runtime with I/O and time enabled.

mod chat;
mod events;
mod sse;

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use events::{Step, StreamState, truncate};
use sse::{NotUtf8, SseParser};

/// The monotonic origin of a run's times: every stamp is µs since it.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        Clock { origin: Instant::now() }
    }

    /// Microseconds since the origin.
    pub fn now_us(&self) -> u64 {
        self.at_us(Instant::now())
    }

    /// Microseconds from the origin to `t` (0 for a `t` before it): for
    /// stamps taken elsewhere, e.g. by a test server sharing the clock.
    pub fn at_us(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_micros()).unwrap_or(u64::MAX)
    }
}

/// A call's prompt: token ids (exact lengths and shared prefixes; vLLM
/// accepts a list of ids as `prompt`) or text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Prompt {
    /// Token ids, sent as a JSON array.
    TokenIds(Vec<u32>),
    /// Text, tokenized by the server.
    Text(String),
    /// A user message, sent to `/v1/chat/completions` (the `chat` submodule).
    #[serde(skip)]
    Chat(String),
}

/// What one call sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSpec {
    /// The prompt.
    pub prompt: Prompt,
    /// Output length, forced: sent as `max_tokens` = `min_tokens` with
    /// `ignore_eos`.
    pub output_tokens: u32,
    /// vLLM's `priority` in the body when `Some`.
    pub priority: Option<i32>,
    /// Extra request headers (e.g. `x-session-id` for session-aware routers).
    pub headers: Vec<(String, String)>,
}

/// What one call did, in [`Clock`] µs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallRecord {
    /// When the request was handed to the connection (taken just before the
    /// send, so it includes a connect when no pooled connection was free).
    pub send_us: u64,
    /// One time per output token; a chunk that carried k tokens gives k
    /// equal times.
    pub token_times_us: Vec<u64>,
    /// `usage.prompt_tokens` (the last the server reported).
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens` (the last the server reported).
    pub completion_tokens: Option<u32>,
    /// Why the call failed; `None` when the stream reached `[DONE]`.
    pub error: Option<CallError>,
}

/// Why a call (or a look-up) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No connection: refused, unresolvable host, bad server URL.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The server answered an error status (or streamed an error event,
    /// whose code is the status it names); `body` is cut to 2 KiB.
    #[error("HTTP {status}: {body}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// The response body (vLLM's error JSON), truncated.
        body: String,
    },
    /// The per-call timeout passed before the call finished.
    #[error("timed out")]
    Timeout,
    /// The connection broke or the body ended before `[DONE]`.
    #[error("disconnected: {0}")]
    Disconnected(String),
    /// The server's answer was not what the OpenAI API says (bad JSON, no
    /// usage, a model it does not serve).
    #[error("{0}")]
    Protocol(String),
}

impl From<NotUtf8> for CallError {
    fn from(_: NotUtf8) -> CallError {
        CallError::Protocol("a stream event is not UTF-8".to_string())
    }
}

/// A client of one vLLM server and one served model.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// `scheme://host:port[/path]`, without a trailing `/` or `/v1`.
    base: String,
    model: String,
    timeout: Duration,
    /// vLLM's `cache_salt`, sent with every call (see [`Client::with_cache_salt`]).
    cache_salt: Option<String>,
}

#[derive(Serialize)]
struct CompletionBody<'a> {
    model: &'a str,
    prompt: &'a Prompt,
    max_tokens: u32,
    #[serde(flatten)]
    generation: Generation<'a>,
}

/// What a streamed call sends besides its model, prompt and maximum (whose
/// names differ between the completions and chat APIs): the output length
/// forced, a stream with usage on every chunk, greedy sampling, the call's
/// priority and the observation's cache salt.
#[derive(Serialize)]
struct Generation<'a> {
    min_tokens: u32,
    ignore_eos: bool,
    stream: bool,
    stream_options: StreamOptions,
    temperature: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_salt: Option<&'a str>,
}

impl<'a> Generation<'a> {
    /// The generation of `spec` by `client`: exactly `spec.output_tokens`.
    fn of(client: &'a Client, spec: &CallSpec) -> Generation<'a> {
        Generation {
            min_tokens: spec.output_tokens,
            ignore_eos: true,
            stream: true,
            stream_options: StreamOptions { include_usage: true, continuous_usage_stats: true },
            temperature: 0,
            priority: spec.priority,
            cache_salt: client.cache_salt.as_deref(),
        }
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
    continuous_usage_stats: bool,
}

#[derive(Serialize)]
struct TokenizeBody<'a> {
    model: &'a str,
    prompt: &'a str,
    /// The ids are sent back as a token-id prompt, to which vLLM adds no BOS:
    /// so the prompt is exactly the text's tokens.
    add_special_tokens: bool,
}

#[derive(Deserialize)]
struct TokenizeReply {
    tokens: Vec<u32>,
}

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelCard>,
}

#[derive(Deserialize)]
struct ModelCard {
    id: String,
}

/// A reqwest error and its causes on one line (reqwest's own message
/// hides the OS error, e.g. "Connection refused", in its sources).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

/// The error of a request that got no response.
fn send_error(e: &reqwest::Error) -> CallError {
    if e.is_timeout() {
        CallError::Timeout
    } else if e.is_builder() {
        CallError::Protocol(format!("request not sent: {}", chain(e)))
    } else if e.is_connect() {
        CallError::Connect(chain(e))
    } else {
        CallError::Disconnected(chain(e))
    }
}

/// Words of the seeded prompt text: any fixed list works (only determinism
/// matters); these are common English words, which a byte-level BPE
/// tokenizer trained on English or code cuts into one or two tokens each.
const WORDS: [&str; 64] = [
    "time", "person", "year", "way", "day", "thing", "man", "world", "life", "hand", "part", "child", "eye", "woman",
    "place", "work", "week", "case", "point", "number", "group", "problem", "fact", "table", "value", "return", "list",
    "file", "line", "name", "order", "state", "model", "server", "token", "cache", "block", "queue", "batch", "step",
    "river", "stone", "light", "green", "water", "paper", "music", "north", "south", "market", "window", "garden",
    "letter", "system", "field", "power", "level", "story", "money", "house", "night", "road", "city", "sound",
];

/// `n` words chosen by splitmix64 from `seed` (Steele, Lea & Flood 2014: a
/// fixed, platform-independent sequence).
fn seeded_text(seed: u64, n: usize) -> String {
    let mut x = seed;
    let mut out = String::with_capacity(n * 7);
    for i in 0..n {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        if i > 0 {
            out.push(' ');
        }
        out.push_str(WORDS[(z % WORDS.len() as u64) as usize]);
    }
    out
}

/// Tries at `prompt_ids`: each retry asks for text long enough by the
/// tokens-per-word of the last answer; three are plenty for any tokenizer
/// that gives at least a token per few words.
const PROMPT_ATTEMPTS: usize = 3;

impl Client {
    /// A client of the server at `base_url` (`http://host:port`, with or
    /// without a trailing `/v1`) serving `model`; every call, look-up
    /// included, gives up after `timeout`.
    pub fn new(base_url: &str, model: &str, timeout: Duration) -> Result<Client, CallError> {
        let url =
            reqwest::Url::parse(base_url).map_err(|e| CallError::Connect(format!("server URL `{base_url}`: {e}")))?;
        if url.scheme() != "http" {
            return Err(CallError::Connect(format!(
                "server URL `{base_url}`: only http:// is supported (built without TLS)"
            )));
        }
        if url.host_str().is_none() {
            return Err(CallError::Connect(format!("server URL `{base_url}`: no host")));
        }
        let mut base = url.as_str().trim_end_matches('/');
        base = base.strip_suffix("/v1").unwrap_or(base);
        let http = reqwest::Client::builder()
            // The server is named by the user; a proxy from the environment
            // would add its own latency to every stamp.
            .no_proxy()
            // SSE requests are one small write; Nagle would only delay it.
            .tcp_nodelay(true)
            .build()
            .map_err(|e| CallError::Connect(chain(&e)))?;
        Ok(Client { http, base: base.to_string(), model: model.to_string(), timeout, cache_salt: None })
    }

    /// The same client sending vLLM's `cache_salt` with every call: the
    /// server's prefix cache then shares blocks among these calls only, not
    /// with what it served before (an earlier observation of the same
    /// workload, or its warm-up) — as the simulator, which starts with an
    /// empty cache, assumes. vLLM refuses an empty salt, one over 128
    /// characters, or one with `@`, `/`, `\` or NUL.
    pub fn with_cache_salt(self, salt: Option<String>) -> Client {
        Client { cache_salt: salt, ..self }
    }

    /// The server's base URL as requests use it.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Sends `spec` as a streamed `/v1/completions` request and records when
    /// each output token arrived. Never fails: a failure is the record's
    /// `error`, with what arrived before it kept.
    pub async fn call(&self, spec: &CallSpec, clock: &Clock) -> CallRecord {
        let mut rec = CallRecord {
            // A bound on the reservation: `output_tokens` comes from a
            // workload, and the vector grows past it if it must.
            token_times_us: Vec::with_capacity(spec.output_tokens.min(1 << 16) as usize),
            ..CallRecord::default()
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut state = StreamState::new(spec.output_tokens);
        // One timer for the whole call (not one per chunk: at 1,000 streams
        // a timer armed and cancelled per token is CPU the stamps wait for).
        // On timeout the stream is dropped; what it recorded stays in `rec`.
        match tokio::time::timeout_at(deadline, self.stream(spec, clock, &mut state, &mut rec)).await {
            Ok(Ok(mut resp)) => {
                // Read to the body's end, so that the connection goes back to
                // the pool (a dropped body closes it). vLLM ends the body
                // right after [DONE]; the call is complete whatever this
                // read gives, and the deadline bounds it.
                let drain = async { while let Ok(Some(_)) = resp.chunk().await {} };
                let _ = tokio::time::timeout_at(deadline, drain).await;
            }
            Ok(Err(e)) => rec.error = Some(e),
            Err(_) => rec.error = Some(CallError::Timeout),
        }
        rec.prompt_tokens = state.prompt_tokens;
        rec.completion_tokens = state.completion_tokens;
        rec
    }

    /// The call up to `[DONE]`; gives back the response, whose body may
    /// still hold its end.
    async fn stream(
        &self,
        spec: &CallSpec,
        clock: &Clock,
        state: &mut StreamState,
        rec: &mut CallRecord,
    ) -> Result<reqwest::Response, CallError> {
        let body = CompletionBody {
            model: &self.model,
            prompt: &spec.prompt,
            max_tokens: spec.output_tokens,
            generation: Generation::of(self, spec),
        };
        let mut req = match &spec.prompt {
            Prompt::Chat(text) => chat::request(self, spec, text),
            _ => self.http.post(format!("{}/v1/completions", self.base)).json(&body),
        };
        for (name, value) in &spec.headers {
            req = req.header(name.as_str(), value.as_str());
        }
        rec.send_us = clock.now_us();
        let mut resp = req.send().await.map_err(|e| send_error(&e))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(CallError::Http { status: status.as_u16(), body: error_body(&mut resp).await });
        }
        let mut parser = SseParser::default();
        loop {
            let chunk = resp.chunk().await;
            // The stamp of every token this chunk completes.
            let now = clock.now_us();
            let bytes = match chunk {
                Ok(Some(bytes)) => bytes,
                Ok(None) => {
                    return Err(CallError::Disconnected(format!(
                        "the stream ended before [DONE]{}, after {} of {} tokens",
                        if parser.is_mid_event() { " (inside an event)" } else { "" },
                        rec.token_times_us.len(),
                        spec.output_tokens
                    )));
                }
                Err(e) if e.is_timeout() => return Err(CallError::Timeout),
                Err(e) => return Err(CallError::Disconnected(chain(&e))),
            };
            // Each event is parsed where it lies in the chunk (or in the
            // parser's buffer when reads cut it): no allocation per event.
            let flow = parser.feed(&bytes, |data| {
                Ok::<_, CallError>(match state.event(data, now, &mut rec.token_times_us)? {
                    Step::More => ControlFlow::Continue(()),
                    Step::Done => ControlFlow::Break(()),
                })
            })?;
            if flow.is_break() {
                return Ok(resp);
            }
        }
    }

    /// A JSON look-up (`GET` without a body, `POST` with one), bounded by the
    /// timeout.
    async fn json<T: for<'de> Deserialize<'de>>(
        &self,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, CallError> {
        let url = format!("{}{path}", self.base);
        let req = match body {
            Some(b) => self.http.post(&url).json(b),
            None => self.http.get(&url),
        };
        let get = async {
            let mut resp = req.send().await.map_err(|e| send_error(&e))?;
            let status = resp.status();
            if !status.is_success() {
                return Err(CallError::Http { status: status.as_u16(), body: error_body(&mut resp).await });
            }
            resp.bytes().await.map_err(|e| CallError::Disconnected(chain(&e)))
        };
        let bytes = tokio::time::timeout(self.timeout, get).await.map_err(|_| CallError::Timeout)??;
        serde_json::from_slice(&bytes).map_err(|e| {
            CallError::Protocol(format!("{path}: bad JSON ({e}): {}", truncate(&String::from_utf8_lossy(&bytes))))
        })
    }

    /// Exactly `len` prompt token ids, the same for the same `seed`: the
    /// first `len` ids of the server's tokenization (`/tokenize`) of a
    /// seeded text long enough. Sent as [`Prompt::TokenIds`], they give the
    /// server a prompt of exactly `len` tokens.
    pub async fn prompt_ids(&self, len: u32, seed: u64) -> Result<Vec<u32>, CallError> {
        let len = len as usize;
        if len == 0 {
            return Ok(Vec::new());
        }
        // A byte-level BPE tokenizer never joins two space-separated words
        // into one token, so `len` words usually suffice at the first try.
        let mut words = len;
        let mut got = 0;
        for _ in 0..PROMPT_ATTEMPTS {
            let text = seeded_text(seed, words);
            let body = TokenizeBody { model: &self.model, prompt: &text, add_special_tokens: false };
            let mut tokens = self.json::<TokenizeReply>("/tokenize", Some(&body)).await?.tokens;
            if tokens.len() >= len {
                tokens.truncate(len);
                return Ok(tokens);
            }
            got = tokens.len();
            // Tokens per word so far, with margin; at least double.
            words = (words * len).div_ceil(got.max(1)).max(words * 2) + 8;
        }
        Err(CallError::Protocol(format!(
            "/tokenize gave {got} tokens for {words} words of text, fewer than the {len} asked, \
             after {PROMPT_ATTEMPTS} tries"
        )))
    }

    /// Whether the server serves this client's model (`/v1/models`); the
    /// error names the models it does serve.
    pub async fn check_model(&self) -> Result<(), CallError> {
        let list = self.json::<ModelList>("/v1/models", None::<&()>).await?;
        if list.data.iter().any(|m| m.id == self.model) {
            return Ok(());
        }
        let served: Vec<&str> = list.data.iter().map(|m| m.id.as_str()).collect();
        Err(CallError::Protocol(format!(
            "the server at {} does not serve model `{}`; it serves: {}",
            self.base,
            self.model,
            if served.is_empty() { "nothing".to_string() } else { served.join(", ") }
        )))
    }
}

/// The body of an error response, at most 2 KiB of it (a body that breaks
/// off gives what came; the caller's timeout bounds the wait).
async fn error_body(resp: &mut reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() <= events::ERROR_TEXT_LIMIT {
        match resp.chunk().await {
            Ok(Some(bytes)) => body.extend_from_slice(&bytes),
            _ => break,
        }
    }
    truncate(String::from_utf8_lossy(&body).trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_text_is_deterministic_and_seed_dependent() {
        assert_eq!(seeded_text(7, 5), seeded_text(7, 5));
        assert_ne!(seeded_text(7, 20), seeded_text(8, 20));
        assert_eq!(seeded_text(7, 5).split(' ').count(), 5);
        // Pinned: the text (so the prompts) must not change between versions;
        // splitmix64(0) starts 0xE220A8397B1DCDAF, and 0x2F = 47 is "north".
        assert_eq!(seeded_text(0, 4), "north letter work water");
    }

    #[test]
    fn base_urls_are_checked_and_normalised() {
        let t = Duration::from_secs(1);
        assert_eq!(Client::new("http://127.0.0.1:8000/v1/", "m", t).unwrap().base_url(), "http://127.0.0.1:8000");
        assert_eq!(Client::new("http://h:1", "m", t).unwrap().base_url(), "http://h:1");
        for bad in ["127.0.0.1:8000", "https://h:1", "nonsense"] {
            let e = Client::new(bad, "m", t).unwrap_err();
            assert!(matches!(&e, CallError::Connect(m) if m.contains(bad)), "{bad}: {e}");
        }
    }

    #[test]
    fn the_body_is_what_vllm_needs() {
        let p = Prompt::TokenIds(vec![1, 2]);
        let client = Client::new("http://127.0.0.1:1", "tiny", Duration::from_secs(1)).unwrap();
        let spec = CallSpec { prompt: p.clone(), output_tokens: 3, priority: None, headers: Vec::new() };
        let body =
            CompletionBody { model: "tiny", prompt: &p, max_tokens: 3, generation: Generation::of(&client, &spec) };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"model":"tiny","prompt":[1,2],"max_tokens":3,"min_tokens":3,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"temperature":0}"#
        );
        let salty = Client::new("http://127.0.0.1:1", "tiny", Duration::from_secs(1))
            .unwrap()
            .with_cache_salt(Some("s-1".into()));
        let spec = CallSpec { priority: Some(2), ..spec };
        let salted = CompletionBody { generation: Generation::of(&salty, &spec), ..body };
        assert!(serde_json::to_string(&salted).unwrap().ends_with(r#""priority":2,"cache_salt":"s-1"}"#));
        assert_eq!(serde_json::to_string(&Prompt::Text("a".into())).unwrap(), r#""a""#);
    }
}
