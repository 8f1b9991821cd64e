//! The observe client against a stub OpenAI server: a tokio listener on
//! 127.0.0.1:0 that writes raw HTTP/1.1 (close-delimited or chunked SSE
//! bodies, error JSON) at times the test chooses, stamping each write on
//! the same [`Clock`] as the client, so a test can say when bytes existed.
//! Covers parsing (usage, merged chunks, events cut across writes), every
//! failure (HTTP 400, a stream cut mid-way, a server that never answers, no
//! server, a model not served) and the client's timing error and CPU at
//! 1,000 concurrent streams: with their tokens' phases spread over the gap
//! (the headline), and all written at the same instant (its throughput).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use blis_sweep::observe::client::{CallError, CallRecord, CallSpec, Client, Clock, Prompt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the stub read it.
struct Req {
    head: String,
    body: String,
}

impl Req {
    fn path(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or("")
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

async fn read_request(sock: &mut TcpStream) -> Req {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = sock.read(&mut tmp).await.unwrap();
        assert!(n > 0, "client closed before its request's head");
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8(buf[..end].to_vec()).unwrap();
    let mut req = Req { head, body: String::new() };
    let len: usize = req.header("content-length").map_or(0, |v| v.parse().unwrap());
    while buf.len() < end + len {
        let n = sock.read(&mut tmp).await.unwrap();
        assert!(n > 0, "client closed inside its request's body");
        buf.extend_from_slice(&tmp[..n]);
    }
    req.body = String::from_utf8(buf[end..end + len].to_vec()).unwrap();
    req
}

/// A stub server on the current runtime; `handler` gets each connection's
/// first request and the socket (every response says `connection: close`).
async fn stub<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Req, TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            sock.set_nodelay(true).unwrap();
            let handler = handler.clone();
            tokio::spawn(async move {
                let req = read_request(&mut sock).await;
                handler(req, sock).await;
            });
        }
    });
    addr
}

/// A close-delimited SSE response head (the body ends when the socket closes).
const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
/// A chunked SSE response head, as uvicorn writes vLLM's stream.
const SSE_CHUNKED_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";

fn http_chunk(s: &str) -> String {
    format!("{:x}\r\n{s}\r\n", s.len())
}

/// vLLM's chunk event with continuous usage: `done` tokens so far.
fn token_event(prompt: u32, done: u32) -> String {
    format!(
        "data: {{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"tiny\",\"choices\":[{{\"index\":0,\"text\":\" x\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}}],\"usage\":{{\"prompt_tokens\":{prompt},\"total_tokens\":{},\"completion_tokens\":{done}}}}}\n\n",
        prompt + done
    )
}

/// vLLM's final usage event and `[DONE]`.
fn end_events(prompt: u32, done: u32) -> String {
    format!(
        "data: {{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"tiny\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"total_tokens\":{},\"completion_tokens\":{done}}}}}\n\ndata: [DONE]\n\n",
        prompt + done
    )
}

fn json_response(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn spec(prompt: Prompt, n: u32) -> CallSpec {
    CallSpec { prompt, output_tokens: n, priority: None, headers: Vec::new() }
}

fn client(addr: SocketAddr, timeout_ms: u64) -> Client {
    Client::new(&format!("http://{addr}"), "tiny", Duration::from_millis(timeout_ms)).unwrap()
}

/// Stub writes stamped on the test's clock.
type Writes = Arc<Mutex<Vec<u64>>>;

/// Held by the tests that assert how soon a token is stamped, so that the
/// 1,000-stream test does not take the cores from under the others.
static TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn tokens_and_usage_are_parsed_and_the_request_is_what_vllm_needs() {
    let _timing = TIMING.lock().await;
    let clock = Clock::start();
    let writes: Writes = Arc::default();
    // The request's path, body and session header.
    type Seen = Option<(String, Value, Option<String>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let (w, s) = (writes.clone(), seen.clone());
    let addr = stub(move |req, mut sock| {
        let (w, s) = (w.clone(), s.clone());
        async move {
            *s.lock().unwrap() =
                Some((req.path().to_string(), req.json(), req.header("x-session-id").map(str::to_string)));
            sock.write_all(SSE_CHUNKED_HEAD.as_bytes()).await.unwrap();
            for k in 1..=5 {
                // 50 ms apart: room for a loaded machine's scheduling delays.
                tokio::time::sleep(Duration::from_millis(50)).await;
                w.lock().unwrap().push(clock.now_us());
                sock.write_all(http_chunk(&token_event(7, k)).as_bytes()).await.unwrap();
            }
            sock.write_all(http_chunk(&end_events(7, 5)).as_bytes()).await.unwrap();
            sock.write_all(b"0\r\n\r\n").await.unwrap();
        }
    })
    .await;
    // A base URL in the OpenAI clients' form (with /v1) names the same server.
    let c = Client::new(&format!("http://{addr}/v1/"), "tiny", Duration::from_secs(10)).unwrap();
    let mut sp = spec(Prompt::TokenIds(vec![5, 6, 7, 8, 9, 10, 11]), 5);
    sp.priority = Some(-3);
    sp.headers.push(("x-session-id".into(), "s-42".into()));
    let before = clock.now_us();
    let rec = c.call(&sp, &clock).await;
    assert_eq!(rec.error, None);
    assert_eq!((rec.prompt_tokens, rec.completion_tokens), (Some(7), Some(5)));
    assert!(rec.send_us >= before);
    let writes = writes.lock().unwrap().clone();
    assert_eq!(rec.token_times_us.len(), 5);
    for (k, (&t, &w)) in rec.token_times_us.iter().zip(&writes).enumerate() {
        // A token is stamped when read: never before its bytes were written,
        // and (50 ms apart) before the next token was written.
        assert!(t >= w, "token {k} stamped at {t} µs, written at {w} µs");
        if let Some(&next) = writes.get(k + 1) {
            assert!(t < next, "token {k} stamped at {t} µs, after the next write at {next} µs");
        }
    }
    let (path, body, session) = seen.lock().unwrap().clone().unwrap();
    assert_eq!(path, "/v1/completions");
    assert_eq!(session.as_deref(), Some("s-42"));
    assert_eq!(
        body,
        json!({"model": "tiny", "prompt": [5, 6, 7, 8, 9, 10, 11], "max_tokens": 5, "min_tokens": 5,
               "ignore_eos": true, "stream": true,
               "stream_options": {"include_usage": true, "continuous_usage_stats": true},
               "temperature": 0, "priority": -3})
    );
}

#[tokio::test]
async fn a_chunk_carrying_three_tokens_gives_three_equal_times() {
    let _timing = TIMING.lock().await;
    let clock = Clock::start();
    let writes: Writes = Arc::default();
    let w = writes.clone();
    let addr = stub(move |_req, mut sock| {
        let w = w.clone();
        async move {
            sock.write_all(SSE_HEAD.as_bytes()).await.unwrap();
            w.lock().unwrap().push(clock.now_us());
            sock.write_all(token_event(3, 1).as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            // vLLM's API process fell behind: one chunk, completion_tokens 1 → 4.
            w.lock().unwrap().push(clock.now_us());
            sock.write_all(token_event(3, 4).as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
            sock.write_all(end_events(3, 4).as_bytes()).await.unwrap();
        }
    })
    .await;
    let rec = client(addr, 10_000).call(&spec(Prompt::Text("a b c".into()), 4), &clock).await;
    assert_eq!(rec.error, None);
    let t = &rec.token_times_us;
    let w = writes.lock().unwrap().clone();
    assert_eq!(t.len(), 4);
    assert_eq!((t[1], t[2]), (t[3], t[3]));
    assert!(t[0] >= w[0] && t[0] < w[1] && t[1] >= w[1], "{t:?} {w:?}");
    assert_eq!(rec.completion_tokens, Some(4));
}

#[tokio::test]
async fn events_cut_across_tcp_writes_are_stamped_when_they_complete() {
    let _timing = TIMING.lock().await;
    let clock = Clock::start();
    // When each event's last byte was written.
    let completes: Writes = Arc::default();
    let c2 = completes.clone();
    let addr = stub(move |_req, mut sock| {
        let c2 = c2.clone();
        async move {
            sock.write_all(SSE_HEAD.as_bytes()).await.unwrap();
            let events: Vec<String> = (1..=3).map(|k| token_event(11, k)).chain([end_events(11, 3)]).collect();
            let all = events.concat();
            let mut ends: Vec<usize> = events
                .iter()
                .scan(0, |n, e| {
                    *n += e.len();
                    Some(*n)
                })
                .collect();
            ends.truncate(3);
            // 7-byte writes 3 ms apart (no Nagle): every event spans writes,
            // and so do `\n\n` and the `data:` prefix.
            for (i, piece) in all.as_bytes().chunks(7).enumerate() {
                let end = i * 7 + piece.len();
                if ends.iter().any(|&e| e > i * 7 && e <= end) {
                    c2.lock().unwrap().push(clock.now_us());
                }
                sock.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }
    })
    .await;
    let rec = client(addr, 30_000).call(&spec(Prompt::TokenIds(vec![1; 11]), 3), &clock).await;
    assert_eq!(rec.error, None);
    assert_eq!((rec.prompt_tokens, rec.completion_tokens), (Some(11), Some(3)));
    let c = completes.lock().unwrap().clone();
    assert_eq!(c.len(), 3);
    for k in 0..3 {
        assert!(rec.token_times_us[k] >= c[k], "token {k}: {:?} vs completions {c:?}", rec.token_times_us);
    }
    // Each event is stamped when it completes, hundreds of ms apart: not at
    // the end of the stream, not when its first byte came.
    assert!(rec.token_times_us[1] - rec.token_times_us[0] > 50_000, "{:?}", rec.token_times_us);
}

#[tokio::test]
async fn http_400_keeps_vllms_error_and_a_streamed_error_event_its_code() {
    let msg = r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, your prompt contains 60000 characters (more than 40960 characters, which is the upper bound for 4096 input tokens). Please reduce the length of the input prompt.","type":"BadRequestError","param":"input_text","code":400}}"#;
    let addr = stub(move |req, mut sock| async move {
        if req.json()["max_tokens"] == 1 {
            sock.write_all(json_response("400 Bad Request", msg).as_bytes()).await.unwrap();
        } else {
            let e = r#"{"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}"#;
            let s = format!("{SSE_HEAD}{}data: {e}\n\ndata: [DONE]\n\n", token_event(2, 1));
            sock.write_all(s.as_bytes()).await.unwrap();
        }
    })
    .await;
    let clock = Clock::start();
    let rec = client(addr, 10_000).call(&spec(Prompt::Text("x".repeat(60_000)), 1), &clock).await;
    assert_eq!(rec.error, Some(CallError::Http { status: 400, body: msg.to_string() }));
    assert!(rec.token_times_us.is_empty());
    let e = rec.error.unwrap().to_string();
    assert!(e.starts_with("HTTP 400: ") && e.contains("maximum context length is 4096"), "{e}");
    let rec = client(addr, 10_000).call(&spec(Prompt::Text("x".into()), 5), &clock).await;
    assert!(
        matches!(&rec.error, Some(CallError::Http { status: 500, body }) if body.contains("Internal server error"))
    );
    assert_eq!((rec.token_times_us.len(), rec.completion_tokens), (1, Some(1)));
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_a_disconnect_that_keeps_its_tokens() {
    let addr = stub(|req, mut sock| async move {
        let how = req.json()["prompt"].as_str().unwrap().to_string();
        let events: String = (1..=3).map(|k| token_event(1, k)).collect();
        match how.as_str() {
            // Close-delimited: the body "ends" cleanly, but before [DONE].
            "close" => sock.write_all(format!("{SSE_HEAD}{events}").as_bytes()).await.unwrap(),
            // Chunked: the socket closes without the last chunk.
            "chunked" => sock.write_all(format!("{SSE_CHUNKED_HEAD}{}", http_chunk(&events)).as_bytes()).await.unwrap(),
            // Inside an event.
            _ => sock.write_all(format!("{SSE_HEAD}{events}data: {{\"us").as_bytes()).await.unwrap(),
        }
    })
    .await;
    let clock = Clock::start();
    for how in ["close", "chunked", "mid-event"] {
        let rec = client(addr, 10_000).call(&spec(Prompt::Text(how.into()), 8), &clock).await;
        let Some(CallError::Disconnected(m)) = &rec.error else { panic!("{how}: {:?}", rec.error) };
        assert_eq!((rec.token_times_us.len(), rec.completion_tokens), (3, Some(3)), "{how}");
        match how {
            "close" => assert!(m.contains("ended before [DONE], after 3 of 8 tokens"), "{m}"),
            "mid-event" => assert!(m.contains("(inside an event)"), "{m}"),
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let addr = stub(|req, mut sock| async move {
        // (The model look-up below is a GET without a body.)
        if req.body.contains("\"stall\"") {
            // Two tokens, then silence with the connection open.
            let s = format!("{SSE_HEAD}{}{}", token_event(1, 1), token_event(1, 2));
            sock.write_all(s.as_bytes()).await.unwrap();
        } else if req.body.contains("\"done-then-silent\"") {
            // A complete stream whose body then never ends.
            let s = format!("{SSE_HEAD}{}{}", token_event(1, 1), end_events(1, 1));
            sock.write_all(s.as_bytes()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(sock);
    })
    .await;
    let clock = Clock::start();
    let c = client(addr, 300);
    for (prompt, tokens) in [("silent", 0), ("stall", 2)] {
        let start = Instant::now();
        let rec = c.call(&spec(Prompt::Text(prompt.into()), 8), &clock).await;
        let took = start.elapsed();
        assert_eq!(rec.error, Some(CallError::Timeout), "{prompt}");
        assert_eq!(rec.token_times_us.len(), tokens, "{prompt}");
        assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(5), "{prompt}: {took:?}");
    }
    // [DONE] completes a call, even when the body stays open after it.
    let rec = c.call(&spec(Prompt::Text("done-then-silent".into()), 1), &clock).await;
    assert_eq!((rec.error, rec.token_times_us.len()), (None, 1));
    // The look-ups are bounded the same way.
    assert_eq!(c.check_model().await, Err(CallError::Timeout));
}

#[tokio::test]
async fn no_server_is_a_connect_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let c = Client::new(&format!("http://127.0.0.1:{port}"), "tiny", Duration::from_secs(10)).unwrap();
    let rec: CallRecord = c.call(&spec(Prompt::Text("x".into()), 3), &Clock::start()).await;
    assert!(matches!(&rec.error, Some(CallError::Connect(m)) if m.contains("Connection refused")), "{:?}", rec.error);
    assert!(matches!(c.check_model().await, Err(CallError::Connect(_))));
    assert!(matches!(c.prompt_ids(5, 1).await, Err(CallError::Connect(_))));
    // A name that does not resolve (RFC 6761 reserves .invalid).
    let c = Client::new("http://no-such-host.invalid:8000", "tiny", Duration::from_secs(20)).unwrap();
    let e = c.check_model().await.unwrap_err();
    assert!(matches!(&e, CallError::Connect(m) if m.contains("no-such-host.invalid")), "{e}");
}

const MODELS: &str = r#"{"object":"list","data":[{"id":"tiny","object":"model","created":1,"owned_by":"vllm","root":"/tmp/observe-server/tiny-model","parent":null,"max_model_len":4096,"permission":[]}]}"#;

#[tokio::test]
async fn a_model_the_server_does_not_serve_is_named_with_the_ones_it_does() {
    let addr = stub(|req, mut sock| async move {
        let resp = match req.path() {
            "/v1/models" => json_response("200 OK", MODELS),
            _ => json_response(
                "404 Not Found",
                r#"{"error":{"message":"The model `llama` does not exist.","type":"NotFoundError","param":"model","code":404}}"#,
            ),
        };
        sock.write_all(resp.as_bytes()).await.unwrap();
    })
    .await;
    assert_eq!(client(addr, 10_000).check_model().await, Ok(()));
    let c = Client::new(&format!("http://{addr}"), "llama", Duration::from_secs(10)).unwrap();
    let e = c.check_model().await.unwrap_err();
    assert_eq!(e.to_string(), format!("the server at http://{addr} does not serve model `llama`; it serves: tiny"));
    let rec = c.call(&spec(Prompt::Text("x".into()), 3), &Clock::start()).await;
    assert!(matches!(&rec.error, Some(CallError::Http { status: 404, body }) if body.contains("does not exist")));
}

/// A stand-in tokenizer: `per_word` tokens for each word (ids from the
/// word's bytes), or one token per four words when `per_word` is 0.
fn fake_tokenize(prompt: &str, per_word: usize) -> Vec<u32> {
    let words: Vec<&str> = prompt.split(' ').collect();
    if per_word == 0 {
        return words.chunks(4).filter(|c| c.len() == 4).map(|c| c[0].len() as u32).collect();
    }
    words.iter().flat_map(|w| (0..per_word).map(move |i| w.bytes().map(u32::from).sum::<u32>() + i as u32)).collect()
}

#[tokio::test]
async fn prompt_ids_have_the_exact_length_and_depend_only_on_the_seed() {
    let addr = stub(|req, mut sock| async move {
        let body = req.json();
        assert_eq!(req.path(), "/tokenize");
        assert_eq!((&body["model"], &body["add_special_tokens"]), (&json!("tiny"), &json!(false)));
        let prompt = body["prompt"].as_str().unwrap();
        let tokens = fake_tokenize(prompt, 2);
        let resp = json!({"count": tokens.len(), "max_model_len": 4096, "tokens": tokens});
        sock.write_all(json_response("200 OK", &resp.to_string()).as_bytes()).await.unwrap();
    })
    .await;
    let c = client(addr, 10_000);
    for len in [1, 7, 300] {
        let ids = c.prompt_ids(len, 9).await.unwrap();
        assert_eq!(ids.len(), len as usize);
        assert_eq!(c.prompt_ids(len, 9).await.unwrap(), ids);
    }
    assert_ne!(c.prompt_ids(50, 1).await.unwrap(), c.prompt_ids(50, 2).await.unwrap());
    // The longer prompt of a seed starts with the shorter one.
    assert_eq!(c.prompt_ids(300, 9).await.unwrap()[..7], c.prompt_ids(7, 9).await.unwrap());
    assert_eq!(c.prompt_ids(0, 9).await.unwrap(), Vec::<u32>::new());
}

#[tokio::test]
async fn prompt_ids_ask_again_for_more_text_and_fail_clearly_when_it_cannot_be_enough() {
    let addr = stub(|req, mut sock| async move {
        let prompt = req.json()["prompt"].as_str().unwrap().to_string();
        // Port-independent switch: the test's two clients differ by model.
        let tokens = if req.json()["model"] == "sparse" { fake_tokenize(&prompt, 0) } else { vec![1, 2, 3] };
        let resp = json!({"count": tokens.len(), "max_model_len": 4096, "tokens": tokens});
        sock.write_all(json_response("200 OK", &resp.to_string()).as_bytes()).await.unwrap();
    })
    .await;
    let sparse = Client::new(&format!("http://{addr}"), "sparse", Duration::from_secs(10)).unwrap();
    assert_eq!(sparse.prompt_ids(10, 3).await.unwrap().len(), 10);
    let e = client(addr, 10_000).prompt_ids(10, 3).await.unwrap_err();
    assert!(
        matches!(&e, CallError::Protocol(m) if m.contains("/tokenize gave 3 tokens") && m.contains("fewer than the 10 asked")),
        "{e}"
    );
}

/// CPU seconds (user + system) of this process's threads whose name starts
/// with `prefix`, from /proc (clock ticks of USER_HZ = 100 Hz, the value
/// Linux exports to user space on every architecture it runs on).
fn thread_cpu_s(prefix: &str) -> f64 {
    let mut ticks = 0u64;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else { continue };
        if !comm.starts_with(prefix) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else { continue };
        // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        ticks += f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    }
    ticks as f64 / 100.0
}

/// CPU seconds (user + system) of the calling thread, from /proc (for a
/// thread that exits before the test reads its siblings' times).
fn own_thread_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    (f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()) as f64 / 100.0
}

fn quantile(v: &mut [i64], q: f64) -> i64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// p50, p99 and max.
fn stats(v: &mut [i64]) -> (i64, i64, i64) {
    (quantile(v, 0.5), quantile(v, 0.99), *v.iter().max().unwrap())
}

/// Streams in the timing tests: 1,000 (the issue's figure) in an optimised
/// build; 100 in a debug build, whose unoptimised hyper and serde cost
/// 35–70 µs a token (measured here), so 1,000 streams at a token each
/// 10 ms would need 3.5–7 cores. `OBSERVE_CLIENT_STREAMS` sets it for a measurement.
fn timing_streams() -> usize {
    std::env::var("OBSERVE_CLIENT_STREAMS")
        .ok()
        .map(|v| v.parse().expect("OBSERVE_CLIENT_STREAMS: a number"))
        .unwrap_or(if cfg!(debug_assertions) { 100 } else { 1000 })
}

/// Tokens a stream in the timing tests: `default`, or `OBSERVE_CLIENT_TOKENS`
/// (a longer run, e.g. under a profiler).
fn timing_tokens(default: u32) -> u32 {
    std::env::var("OBSERVE_CLIENT_TOKENS")
        .ok()
        .map(|v| v.parse().expect("OBSERVE_CLIENT_TOKENS: a number"))
        .unwrap_or(default)
}

/// What a timing run measured: each call's record and, on the same clock,
/// when the stub began writing each of its tokens; the run's wall time and
/// the CPU seconds of the client's and the stub's threads.
struct TimingRun {
    records: Vec<CallRecord>,
    writes: Vec<Vec<u64>>,
    wall: Duration,
    client_cpu_s: f64,
    stub_cpu_s: f64,
}

/// A 2-worker runtime whose threads are named `name` (their CPU is read
/// from /proc by that name).
fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name(name).enable_all().build().unwrap()
}

/// `streams` concurrent calls of `tokens` tokens each (header `x-call: i`),
/// from a client on its own 2-worker runtime; the records, the wall time
/// and the client threads' CPU seconds.
fn run_calls(addr: SocketAddr, streams: usize, tokens: u32, clock: Clock) -> (Vec<CallRecord>, Duration, f64) {
    let client_rt = runtime("obs-client");
    let c = client(addr, 60_000);
    let cpu_before = thread_cpu_s("obs-client");
    let wall = Instant::now();
    let records: Vec<CallRecord> = client_rt.block_on(async {
        let tasks: Vec<_> = (0..streams)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move {
                    let mut sp = spec(Prompt::TokenIds(vec![7; 16]), tokens);
                    sp.headers.push(("x-call".into(), i.to_string()));
                    c.call(&sp, &clock).await
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    (records, wall.elapsed(), thread_cpu_s("obs-client") - cpu_before)
}

/// The phased schedule: stream i's token k written at
/// t0 + i·gap/streams + k·gap, by one stub thread that holds every stream's
/// socket and writes the chunks one by one in time order, as vLLM's API
/// process does (one asyncio loop writing a step's chunks a few tens of µs
/// apart). The thread sleeps to each chunk's time and stamps just before
/// its write; when a sleep overshoots (Linux's timer slack, 50 µs by
/// default), the chunks that came due are written back to back.
fn phased_run(streams: usize, tokens: u32, gap: Duration) -> TimingRun {
    let clock = Clock::start();
    let stub_rt = runtime("obs-stub");
    let (tx, rx) = std::sync::mpsc::channel::<(usize, std::net::TcpStream)>();
    let tx = Arc::new(Mutex::new(tx));
    let addr = stub_rt.block_on(stub(move |req, mut sock| {
        let tx = tx.clone();
        async move {
            let i: usize = req.header("x-call").unwrap().parse().unwrap();
            sock.write_all(SSE_HEAD.as_bytes()).await.unwrap();
            let sock = sock.into_std().unwrap();
            sock.set_nonblocking(false).unwrap();
            tx.lock().unwrap().send((i, sock)).unwrap();
        }
    }));
    let writer = std::thread::Builder::new()
        .name("obs-stub-writer".into())
        .spawn(move || {
            let mut socks: Vec<Option<std::net::TcpStream>> = (0..streams).map(|_| None).collect();
            for _ in 0..streams {
                let (i, s) = rx.recv().unwrap();
                socks[i] = Some(s);
            }
            let socks: Vec<std::net::TcpStream> = socks.into_iter().map(Option::unwrap).collect();
            let events: Vec<String> = (1..=tokens).map(|k| token_event(16, k)).collect();
            let mut writes = vec![Vec::with_capacity(tokens as usize); streams];
            // How late the thread itself wrote each chunk (µs after its
            // time): the machine's own scheduling noise, for comparison.
            let mut own_late = Vec::with_capacity(streams * tokens as usize);
            // 50 ms after the last request came: every client task is reading.
            let t0 = Instant::now() + Duration::from_millis(50);
            // The client's CPU while the tokens stream (its connects and
            // requests before, and their ends after, left out).
            let client_cpu_before = thread_cpu_s("obs-client");
            for k in 0..tokens {
                for (i, mut sock) in socks.iter().enumerate() {
                    let due = t0 + gap * k + gap * i as u32 / streams as u32;
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    let now = Instant::now();
                    own_late.push(now.duration_since(due).as_micros() as i64);
                    writes[i].push(clock.at_us(now));
                    std::io::Write::write_all(&mut sock, events[k as usize].as_bytes()).unwrap();
                }
            }
            // Time for the client to read the last tokens (~50 µs p50).
            std::thread::sleep(Duration::from_millis(20));
            let streaming_cpu = thread_cpu_s("obs-client") - client_cpu_before;
            for mut sock in &socks {
                std::io::Write::write_all(&mut sock, end_events(16, tokens).as_bytes()).unwrap();
            }
            drop(socks);
            (writes, own_late, streaming_cpu, own_thread_cpu_s())
        })
        .unwrap();
    let stub_cpu_before = thread_cpu_s("obs-stub");
    let (records, wall, client_cpu_s) = run_calls(addr, streams, tokens, clock);
    let (writes, mut own_late, streaming_cpu, writer_cpu) = writer.join().unwrap();
    let (o50, o99, omax) = stats(&mut own_late);
    eprintln!(
        "stub writer's own lateness, write − its time (µs): p50 {o50}, p99 {o99}, max {omax}; \
         client CPU while streaming: {:.1} µs a token",
        streaming_cpu * 1e6 / (streams * tokens as usize) as f64
    );
    let stub_cpu_s = thread_cpu_s("obs-stub") - stub_cpu_before + writer_cpu;
    stub_rt.shutdown_background();
    TimingRun { records, writes, wall, client_cpu_s, stub_cpu_s }
}

/// The burst schedule: every stream's token k written at t0 + k·gap, the
/// same instant for all, by one stub task a stream on 2 stub threads.
fn burst_run(streams: usize, tokens: u32, gap: Duration) -> TimingRun {
    let clock = Clock::start();
    let writes: Arc<Vec<Mutex<Vec<u64>>>> = Arc::new((0..streams).map(|_| Mutex::default()).collect());
    let stub_rt = runtime("obs-stub");
    let barrier = Arc::new(tokio::sync::Barrier::new(streams));
    let start_at: Arc<std::sync::OnceLock<tokio::time::Instant>> = Arc::default();
    let w = writes.clone();
    let addr = stub_rt.block_on(stub(move |req, mut sock| {
        let (w, barrier, start_at) = (w.clone(), barrier.clone(), start_at.clone());
        async move {
            let i: usize = req.header("x-call").unwrap().parse().unwrap();
            sock.write_all(SSE_HEAD.as_bytes()).await.unwrap();
            barrier.wait().await;
            // All streams start together, 50 ms after the last request came.
            let t0 = *start_at.get_or_init(|| tokio::time::Instant::now() + Duration::from_millis(50));
            for k in 0..tokens {
                tokio::time::sleep_until(t0 + gap * k).await;
                w[i].lock().unwrap().push(clock.now_us());
                sock.write_all(token_event(16, k + 1).as_bytes()).await.unwrap();
            }
            sock.write_all(end_events(16, tokens).as_bytes()).await.unwrap();
        }
    }));
    let stub_cpu_before = thread_cpu_s("obs-stub");
    let (records, wall, client_cpu_s) = run_calls(addr, streams, tokens, clock);
    let stub_cpu_s = thread_cpu_s("obs-stub") - stub_cpu_before;
    stub_rt.shutdown_background();
    let writes = writes.iter().map(|w| w.lock().unwrap().clone()).collect();
    TimingRun { records, writes, wall, client_cpu_s, stub_cpu_s }
}

/// Checks every call completed with all its tokens, prints the run's
/// figures under `title` and gives back stamp − write (µs) of every token.
fn timing_report(title: &str, run: &TimingRun, tokens: u32, gap: Duration) -> Vec<i64> {
    let streams = run.records.len();
    let (mut late, mut gap_sched, mut gap_written) = (Vec::new(), Vec::new(), Vec::new());
    for (i, rec) in run.records.iter().enumerate() {
        assert_eq!(rec.error, None, "call {i}");
        assert_eq!((rec.completion_tokens, rec.token_times_us.len()), (Some(tokens), tokens as usize), "call {i}");
        let (t, w) = (&rec.token_times_us, &run.writes[i]);
        for k in 0..t.len() {
            late.push(t[k] as i64 - w[k] as i64);
            if k > 0 {
                let got = t[k] as i64 - t[k - 1] as i64;
                gap_sched.push((got - gap.as_micros() as i64).abs());
                gap_written.push((got - (w[k] as i64 - w[k - 1] as i64)).abs());
            }
        }
    }
    let mut sorted = late.clone();
    let (l50, l99, lmax) = stats(&mut sorted);
    let (s50, s99, smax) = stats(&mut gap_sched);
    let (w50, w99, wmax) = stats(&mut gap_written);
    let n = (streams * tokens as usize) as f64;
    eprintln!(
        "observe client, {title}: {streams} streams × {tokens} tokens every {gap:?}, in {:?}:\n  \
         stamp − write (µs): p50 {l50}, p99 {l99}, max {lmax}\n  \
         |gap − scheduled gap| (µs): p50 {s50}, p99 {s99}, max {smax}\n  \
         |gap − written gap| (µs): p50 {w50}, p99 {w99}, max {wmax}\n  \
         client CPU {:.2} s = {:.0} µs a call, {:.1} µs a token; stub CPU {:.2} s",
        run.wall,
        run.client_cpu_s,
        run.client_cpu_s * 1e6 / streams as f64,
        run.client_cpu_s * 1e6 / n,
        run.stub_cpu_s
    );
    late
}

/// Stream gap of the phased test: a decode step of vLLM at 1,000 concurrent
/// streams takes ~30–60 ms on an H100 (issue 27's brief for this check), so
/// each stream gets a token every step; 40 ms is the middle, 25,000 chunks
/// a second from the stub at 1,000 streams.
const PHASED_GAP: Duration = Duration::from_millis(40);

/// The issue's timing check: 1,000 concurrent streams, each a token every
/// 40 ms, their phases spread over the gap (stream i's token k written at
/// t0 + i·40 ms/1,000 + k·40 ms), the stub on its own threads and the
/// client on a 2-worker runtime. Measured per token: how long after the
/// stub began writing it the client stamped it (the client's timing error:
/// its wake-up, read, parse and clock read, plus the loopback delivery),
/// and each recorded gap against the gap scheduled and the gap written.
/// The figures are printed (`-- --nocapture`); the bounds asserted are
/// loose, because other tests share the cores when the suite runs.
#[test]
fn thousand_phased_streams_are_stamped_at_arrival() {
    let _timing = TIMING.blocking_lock();
    let tokens = timing_tokens(25);
    let run = phased_run(timing_streams(), tokens, PHASED_GAP);
    let mut late = timing_report("phased", &run, tokens, PHASED_GAP);
    // No stamp precedes its bytes; a client stamping at the end of a stream
    // instead of at arrival would be ≥ 480 ms late on half the tokens (the
    // stream lasts 960 ms).
    assert!(*late.iter().min().unwrap() >= 0, "a token stamped before the stub wrote it");
    let l50 = quantile(&mut late, 0.5);
    assert!(l50 < 50_000, "median lateness {l50} µs");
}

/// The burst case: every stream's token k written at the same instant,
/// every 10 ms (1,000 chunks at once, 100,000 tokens/s in bursts), by the
/// stub's 2 threads. Lateness here is the stub's own queue plus the
/// client's drain of the burst, not its clock error: reported as the
/// drain time a chunk (the time from a burst's first write to its last
/// stamp, over the streams), i.e. the client's throughput.
#[test]
fn thousand_streams_bursting_together_are_drained() {
    let _timing = TIMING.blocking_lock();
    const GAP: Duration = Duration::from_millis(10);
    let tokens = timing_tokens(20);
    let run = burst_run(timing_streams(), tokens, GAP);
    let mut late = timing_report("bursts", &run, tokens, GAP);
    let streams = run.records.len();
    let mut drain: Vec<i64> = (0..tokens as usize)
        .map(|k| {
            let first = run.writes.iter().map(|w| w[k]).min().unwrap();
            let last = run.records.iter().map(|r| r.token_times_us[k]).max().unwrap();
            last as i64 - first as i64
        })
        .collect();
    let (d50, _, dmax) = stats(&mut drain);
    eprintln!("  a burst drained in (µs): p50 {d50}, max {dmax} = {:.1} µs a chunk (p50)", d50 as f64 / streams as f64);
    // As above: no stamp before its write, and stamps at arrival, not at the
    // stream's end (≥ 90 ms late on half the tokens; it lasts 190 ms).
    assert!(*late.iter().min().unwrap() >= 0, "a token stamped before the stub wrote it");
    let l50 = quantile(&mut late, 0.5);
    assert!(l50 < 50_000, "median lateness {l50} µs");
}
