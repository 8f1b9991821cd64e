//! `blis-sweep observe` against a stub OpenAI server: a std TcpListener in
//! the test process answering `/v1/models`, `/tokenize` (one token a word)
//! and streaming `/v1/completions` (a token every `gap` with continuous
//! usage), recording when each call arrived and what it carried (its
//! headers and body too). It serves the chat API as a model with a chat
//! template of [`CHAT_TEMPLATE_TOKENS`] tokens would: `/tokenize` of
//! `messages`, `/detokenize` (a word an id) and `/v1/chat/completions`.
//! `observe_feat` shares it. The real
//! binary drives it; its outputs are read back by the project's own readers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

/// One `/v1/completions` call as the stub saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// µs after the stub started, when the request was read.
    pub(crate) at_us: u64,
    /// µs after the stub started, when its stream ended.
    pub(crate) end_us: u64,
    pub(crate) prompt_len: usize,
    pub(crate) max_tokens: u64,
    pub(crate) session: Option<String>,
    /// Every header, its name lowercased.
    pub(crate) headers: Vec<(String, String)>,
    /// The request's JSON body.
    pub(crate) body: serde_json::Value,
}

pub(crate) struct Stub {
    pub(crate) url: String,
    pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
    pub(crate) most_in_flight: Arc<AtomicU64>,
}

/// Tokens the stub's chat template adds around a user message (the CPU
/// server's tiny model adds 10: 17 tokens for a 7-token message, measured).
pub(crate) const CHAT_TEMPLATE_TOKENS: usize = 10;

/// How the stub answers.
#[derive(Clone, Copy)]
pub(crate) struct Behaviour {
    /// Before the first token.
    first: Duration,
    /// Between tokens.
    gap: Duration,
    /// Reports one prompt token too many for prompts of this length.
    lie_for_len: Option<usize>,
    /// Closes the stream after this many tokens (no `[DONE]`) for prompts of this length.
    cut: Option<(usize, u64)>,
    /// Answers HTTP 400 to prompts longer than this, as vLLM to a prompt past `max_model_len`.
    max_len: Option<usize>,
    /// Answers HTTP 400 to a prompt id at or past this, as vLLM to one out of its vocabulary.
    vocab: Option<u64>,
}

pub(crate) const PLAIN: Behaviour = Behaviour {
    first: Duration::from_millis(5),
    gap: Duration::from_millis(10),
    lie_for_len: None,
    cut: None,
    max_len: None,
    vocab: None,
};

pub(crate) fn start(behaviour: Behaviour) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let most = Arc::new(AtomicU64::new(0));
    let (seen2, most2) = (Arc::clone(&seen), Arc::clone(&most));
    std::thread::spawn(move || {
        let origin = Instant::now();
        let in_flight = Arc::new(AtomicU64::new(0));
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (seen, most, in_flight) = (Arc::clone(&seen2), Arc::clone(&most2), Arc::clone(&in_flight));
            std::thread::spawn(move || serve(stream, origin, behaviour, &seen, &most, &in_flight));
        }
    });
    Stub { url, seen, most_in_flight: most }
}

fn serve(
    mut stream: TcpStream,
    origin: Instant,
    b: Behaviour,
    seen: &Mutex<Vec<Seen>>,
    most: &AtomicU64,
    in_flight: &AtomicU64,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let at_us = origin.elapsed().as_micros() as u64;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let (mut length, mut session, mut headers) = (0usize, None, Vec::new());
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
        match k.to_ascii_lowercase().as_str() {
            "content-length" => length = v.trim().parse().unwrap(),
            "x-session-id" => session = Some(v.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let body: serde_json::Value =
        if body.is_empty() { serde_json::Value::Null } else { serde_json::from_slice(&body).unwrap() };
    let json = |stream: &mut TcpStream, v: serde_json::Value| {
        let text = v.to_string();
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        );
    };
    match path.as_str() {
        "/version" => json(&mut stream, serde_json::json!({"version": "0.32.0"})),
        "/metrics" => {
            // What vLLM 0.32 on the CPU answered (captured by O3).
            let text = include_str!("../data/observe/metrics-0.32.txt");
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
        "/v1/models" => {
            json(&mut stream, serde_json::json!({"object": "list", "data": [{"id": "tiny", "object": "model"}]}))
        }
        "/tokenize" => {
            let words = match body["messages"][0]["content"].as_str() {
                Some(content) => content.split_whitespace().count() + CHAT_TEMPLATE_TOKENS,
                None => body["prompt"].as_str().unwrap().split_whitespace().count(),
            };
            json(
                &mut stream,
                serde_json::json!({"tokens": (0..words as u64).map(|k| 100 + k).collect::<Vec<_>>(), "count": words}),
            )
        }
        "/detokenize" => {
            let words: Vec<String> = body["tokens"].as_array().unwrap().iter().map(|id| format!("w{id}")).collect();
            json(&mut stream, serde_json::json!({"prompt": words.join(" ")}))
        }
        "/v1/completions" | "/v1/chat/completions" => {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let chat = path == "/v1/chat/completions";
            let no_ids = Vec::new();
            let (prompt_len, max_tokens, ids) = if chat {
                let content = body["messages"][0]["content"].as_str().unwrap();
                let len = content.split_whitespace().count() + CHAT_TEMPLATE_TOKENS;
                (len, body["max_completion_tokens"].as_u64().unwrap(), no_ids.iter())
            } else {
                let ids = body["prompt"].as_array().unwrap();
                (ids.len(), body["max_tokens"].as_u64().unwrap(), ids.iter())
            };
            let ids = ids.map(|v| v.as_u64().unwrap());
            let out_of_vocab = b.vocab.is_some_and(|v| ids.clone().any(|id| id >= v));
            if b.max_len.is_some_and(|m| prompt_len > m) || out_of_vocab {
                let text = "{\"object\":\"error\",\"message\":\"prompt too long\",\"code\":400}";
                let _ = write!(
                    stream,
                    "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
                in_flight.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            assert_eq!((body["min_tokens"].as_u64(), body["ignore_eos"].as_bool()), (Some(max_tokens), Some(true)));
            let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
            let lie = u64::from(b.lie_for_len == Some(prompt_len));
            for k in 1..=max_tokens {
                std::thread::sleep(if k == 1 { b.first } else { b.gap });
                // (A completion count past max_tokens is the client's protocol error, not a mismatch.)
                let usage = serde_json::json!({"prompt_tokens": prompt_len as u64 + lie, "completion_tokens": k});
                let chunk = serde_json::json!({"choices": [{"index": 0, "text": "x"}], "usage": usage});
                let _ = write!(stream, "data: {chunk}\n\n");
                let _ = stream.flush();
                if b.cut == Some((prompt_len, k)) {
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
            }
            let _ = write!(stream, "data: [DONE]\n\n");
            let end_us = origin.elapsed().as_micros() as u64;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            seen.lock().unwrap().push(Seen { at_us, end_us, prompt_len, max_tokens, session, headers, body });
        }
        _ => {
            let _ = write!(stream, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    }
}

pub(crate) fn single(id: u64, arrival: f64, input: u32, output: u32) -> String {
    format!(
        "{{\"request_id\":{id},\"arrival_time\":{arrival},\"initial\":[0],\"sub_requests\":[{{\"kind\":\"llm\",\"next\":[],\"input_tokens\":{input},\"output_tokens\":{output}}}]}}\n"
    )
}

/// Slack above an exact bound, µs (a shared 2-core machine; the client's
/// own timing error is O1's measurement).
pub(crate) const LATE_US: u64 = 30_000;

/// `blis-sweep observe --server-url URL --model tiny ARGS…` in `dir`.
pub(crate) fn observe_cmd(dir: &Dir, url: &str, args: &[&str]) -> TestCommand {
    let head = ["observe", "--server-url", url, "--model", "tiny"];
    TestCommand::new(&dir.path, &[&head[..], args].concat())
}

#[test]
fn observe_sends_at_arrivals_and_writes_outputs_the_readers_take() {
    let stub = start(PLAIN);
    let dir = Dir::new("observe-open");
    let workload: String = [single(0, 0.0, 8, 4), single(1, 0.1, 12, 4), single(2, 0.2, 8, 3)].concat();
    dir.create("w.jsonl", &workload);
    let err = observe_cmd(&dir, &stub.url, &["w.jsonl", "-o", "r.jsonl", "--trace-output", "t"]).output();
    assert!(err.status.success(), "{}", String::from_utf8_lossy(&err.stderr));
    let summary = String::from_utf8_lossy(&err.stderr);
    assert!(summary.contains("3 recorded: 3 completed, 0 failed"), "{summary}");
    let mut seen = stub.seen.lock().unwrap().clone();
    seen.sort_by_key(|s| s.at_us);
    assert_eq!(seen.iter().map(|s| (s.prompt_len, s.max_tokens)).collect::<Vec<_>>(), [(8, 4), (12, 4), (8, 3)]);
    for (s, arrival) in seen.iter().zip([0, 100_000, 200_000]) {
        let at = s.at_us - seen[0].at_us;
        assert!(at + 5_000 >= arrival && at < arrival + LATE_US, "sent {at} µs after the first, for {arrival}");
    }
    let results = rows(&dir.read("r.jsonl"));
    assert_eq!(results.len(), 3);
    for (r, output) in results.iter().zip([4, 4, 3]) {
        let latency = r["sub_requests"][0]["token_latency"].as_array().unwrap();
        assert_eq!(latency.len(), output);
        // The stub's 10 ms gaps, seen by the client.
        for gap in &latency[1..] {
            let gap = gap.as_f64().unwrap();
            assert!((0.005..0.04).contains(&gap), "ITL {gap}");
        }
    }
    assert_eq!(results[0]["arrival_time"], 0.0);
    // The project's own readers take both outputs.
    let csv = TestCommand::new(&dir.path, &["results", "r.jsonl"]).stdout();
    assert_eq!(csv.lines().count(), 1 + 4 + 4 + 3, "{csv}");
    let header = dir.read("t.yaml");
    assert!(header.contains("mode: real\n") && header.contains("model: \"tiny\""), "{header}");
    dir.create("s.yaml", LINEAR_SCENARIO);
    let replay =
        TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "--input", "tracev2:t.yaml", "-o", "replay.jsonl"])
            .stdout();
    assert!(replay.contains("\"completed_requests\": 3"), "{replay}");
}

#[test]
fn observe_caps_requests_in_flight() {
    let stub = start(PLAIN);
    let dir = Dir::new("observe-cap");
    dir.create("w.jsonl", &(0..4).map(|i| single(i, 0.0, 8, 3)).collect::<String>());
    observe_cmd(&dir, &stub.url, &["-q", "w.jsonl", "-o", "r.jsonl", "--concurrency", "2"]).stdout();
    assert_eq!(stub.most_in_flight.load(Ordering::SeqCst), 2);
    let mut seen = stub.seen.lock().unwrap().clone();
    seen.sort_by_key(|s| s.at_us);
    let first_end = seen[..2].iter().map(|s| s.end_us).min().unwrap();
    assert!(seen[2].at_us + 2_000 >= first_end, "the third is sent when a slot frees");
    assert_eq!(rows(&dir.read("r.jsonl")).len(), 4);
}

#[test]
fn observe_runs_a_dag_with_a_tool_wait_and_a_join() {
    let stub = start(PLAIN);
    let dir = Dir::new("observe-dag");
    // 0: llm (prompt 8) → {1: tool 100 ms, 2: llm (prompt 9)} → 3: llm (prompt 10).
    dir.create(
        "w.jsonl",
        "{\"request_id\":\"agent\",\"arrival_time\":0,\"initial\":[0],\"sub_requests\":[\
         {\"kind\":\"llm\",\"next\":[1,2],\"input_tokens\":8,\"output_tokens\":2},\
         {\"kind\":\"tool_call\",\"next\":[3],\"input_tokens\":0,\"output_tokens\":0,\"duration\":0.1},\
         {\"kind\":\"llm\",\"next\":[3],\"input_tokens\":9,\"output_tokens\":2},\
         {\"kind\":\"llm\",\"next\":[],\"input_tokens\":10,\"output_tokens\":2}]}\n",
    );
    observe_cmd(&dir, &stub.url, &["-q", "w.jsonl", "-o", "r.jsonl", "--trace-output", "t"]).stdout();
    let seen = stub.seen.lock().unwrap().clone();
    let call = |len: usize| seen.iter().find(|s| s.prompt_len == len).unwrap().clone();
    let (root, branch, join) = (call(8), call(9), call(10));
    assert!(branch.at_us >= root.end_us && branch.at_us < root.end_us + LATE_US, "the llm branch follows the root");
    let tool_end = root.end_us + 100_000;
    assert!(join.at_us + 2_000 >= tool_end.max(branch.end_us), "the join waits for the tool call");
    assert!(join.at_us < tool_end + LATE_US, "and no longer");
    assert!(seen.iter().all(|s| s.session.as_deref() == Some("agent")), "{seen:?}");
    let row = &rows(&dir.read("r.jsonl"))[0];
    assert!(row["sub_requests"].as_array().unwrap().iter().all(|n| n.get("error").is_none()), "{row}");
    let data = dir.read("t.csv");
    assert!(data.contains("r0>1|2;t100000>3;r1>3;r2"), "{data}");
}

#[test]
fn observe_records_a_usage_mismatch_as_a_failed_request() {
    let stub = start(Behaviour { lie_for_len: Some(12), ..PLAIN });
    let dir = Dir::new("observe-usage");
    dir.create("w.jsonl", &[single(0, 0.0, 8, 2), single(1, 0.0, 12, 2)].concat());
    let out = observe_cmd(&dir, &stub.url, &["w.jsonl", "-o", "r.jsonl"]).output();
    assert!(out.status.success());
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("1 completed, 1 failed (1 with usage not the workload's)"), "{summary}");
    let results = rows(&dir.read("r.jsonl"));
    assert!(results[0]["sub_requests"][0].get("error").is_none());
    assert_eq!(
        results[1]["sub_requests"][0]["error"],
        "usage: prompt_tokens 13 (the workload's 12), completion_tokens 2 (the workload's 2)"
    );
}

#[test]
fn observe_refuses_an_unreachable_server_and_a_wrong_model_before_writing() {
    let dir = Dir::new("observe-bad");
    dir.create("w.jsonl", &single(0, 0.0, 8, 2));
    // A port nothing listens on: bound, then released.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://{closed}");
    let err = observe_cmd(&dir, &url, &["w.jsonl", "-o", "r.jsonl"]).fails();
    assert!(err.starts_with(&format!("blis-sweep: --server-url: {url}: cannot connect")), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let stub = start(PLAIN);
    let err = TestCommand::new(
        &dir.path,
        &["observe", "--server-url", &stub.url, "--model", "big", "w.jsonl", "-o", "r.jsonl"],
    )
    .fails();
    assert!(err.starts_with("blis-sweep: --model: big:") && err.contains("tiny"), "{err}");
    assert_eq!(dir.files(), ["w.jsonl"]);
    // A bad workload is refused before the server is asked anything.
    dir.create("bad.jsonl", "{\"request_id\":0}\n");
    let err = observe_cmd(&dir, &url, &["bad.jsonl", "-o", "r.jsonl"]).fails();
    assert!(err.starts_with("blis-sweep: bad.jsonl:1:"), "{err}");
}

#[test]
fn observe_records_a_dropped_stream_and_an_http_error_on_their_requests() {
    let stub = start(Behaviour { cut: Some((9, 2)), max_len: Some(20), ..PLAIN });
    let dir = Dir::new("observe-fail");
    // 0 completes; 1's stream is cut after 2 of 4 tokens (its next call is
    // skipped); 2's prompt is refused.
    let cut = "{\"request_id\":1,\"arrival_time\":0,\"initial\":[0],\"sub_requests\":[\
               {\"kind\":\"llm\",\"next\":[1],\"input_tokens\":9,\"output_tokens\":4},\
               {\"kind\":\"llm\",\"next\":[],\"input_tokens\":8,\"output_tokens\":2}]}\n";
    dir.create("w.jsonl", &[single(0, 0.0, 8, 2), cut.to_owned(), single(2, 0.0, 30, 2)].concat());
    let out = observe_cmd(&dir, &stub.url, &["w.jsonl", "-o", "r.jsonl"]).output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("3 recorded: 1 completed, 2 failed (0 with usage"), "{summary}");
    let results = rows(&dir.read("r.jsonl"));
    let node = &results[1]["sub_requests"][0];
    assert_eq!(node["token_latency"].as_array().unwrap().len(), 2, "the tokens that arrived are kept: {node}");
    assert!(node["error"].as_str().unwrap().contains("disconnected"), "{node}");
    assert_eq!(results[1]["sub_requests"][1]["error"], "not run: predecessor 0 failed");
    let refused = results[2]["sub_requests"][0]["error"].as_str().unwrap();
    assert!(refused.starts_with("HTTP 400") && refused.contains("prompt too long"), "{refused}");
}

#[test]
fn observe_closed_loop_users_think_between_requests() {
    let stub = start(PLAIN);
    let dir = Dir::new("observe-closed");
    // Arrivals far apart: a closed loop ignores them.
    dir.create("w.jsonl", &(0..3).map(|i| single(i, 50.0 * i as f64, 8, 2)).collect::<String>());
    let args = ["--closed-loop", "--users", "1", "--think-time", "0.05"];
    observe_cmd(&dir, &stub.url, &[&["-q", "w.jsonl", "-o", "r.jsonl"][..], &args].concat()).stdout();
    let mut seen = stub.seen.lock().unwrap().clone();
    seen.sort_by_key(|s| s.at_us);
    assert_eq!(seen.len(), 3);
    for pair in seen.windows(2) {
        let free = pair[0].end_us + 50_000;
        assert!(pair[1].at_us + 2_000 >= free && pair[1].at_us < free + LATE_US, "sent {} for {free}", pair[1].at_us);
    }
}

/// `--vocab-size` folds token ids drawn for a larger vocabulary into the
/// server's: without it the server refuses the call (recorded), with it
/// the call runs.
#[test]
fn observe_folds_token_ids_into_the_servers_vocabulary() {
    let stub = start(Behaviour { vocab: Some(100), ..PLAIN });
    let dir = Dir::new("observe-vocab");
    let ids: Vec<String> = (0..6).map(|k| (250 + k).to_string()).collect();
    dir.create(
        "w.jsonl",
        &format!(
            "{{\"request_id\":0,\"arrival_time\":0.0,\"initial\":[0],\"sub_requests\":[{{\"kind\":\"llm\",\"next\":[],\"input_tokens\":6,\"output_tokens\":2,\"input_token_ids\":[{}]}}]}}\n",
            ids.join(",")
        ),
    );
    observe_cmd(&dir, &stub.url, &["w.jsonl", "-o", "r.jsonl"]).output();
    let error = rows(&dir.read("r.jsonl"))[0]["sub_requests"][0]["error"].clone();
    assert!(error.as_str().is_some_and(|e| e.contains("400")), "{error}");
    observe_cmd(&dir, &stub.url, &["w.jsonl", "-o", "r.jsonl", "--vocab-size", "100"]).output();
    let row = &rows(&dir.read("r.jsonl"))[0];
    assert!(row["sub_requests"][0].get("error").is_none(), "{row}");
}

/// `--metrics-csv` scrapes /metrics beside the requests (a header and a
/// row per scrape, the last after the requests), and the TraceV2 header
/// carries the server's release and KV cache, its block size the server's.
#[test]
fn observe_scrapes_metrics_and_records_the_server() {
    let stub = start(PLAIN);
    let dir = Dir::new("observe-metrics");
    dir.create("w.jsonl", &[single(0, 0.0, 8, 4), single(1, 0.05, 8, 4)].concat());
    let args =
        ["w.jsonl", "-o", "r.jsonl", "--trace-output", "t", "--metrics-csv", "m.csv", "--scrape-interval-ms", "20"];
    let out = observe_cmd(&dir, &stub.url, &args).output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = dir.read("m.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("t_ms,num_requests_running,num_requests_waiting,kv_cache_usage_perc"), "{csv}");
    assert!(lines.len() >= 3, "a scrape at the start, every 20 ms and one at the end: {csv}");
    let t: Vec<f64> = lines[1..].iter().map(|l| l.split(',').next().unwrap().parse().unwrap()).collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]), "{csv}");
    let header = dir.read("t.yaml");
    assert!(header.contains("version") && header.contains("0.32.0") && header.contains("num_gpu_blocks"), "{header}");
    assert!(header.contains("block_size: 32"), "the server's block size: {header}");
}

/// Every call of an observation carries one `cache_salt` (a fresh one by
/// default, recorded in the TraceV2 header), so the server's prefix cache
/// shares blocks among them only; `none` sends none; a salt vLLM would
/// refuse is refused before anything is sent.
#[test]
fn observe_salts_the_prefix_cache_once_per_observation() {
    let stub = start(PLAIN);
    let dir = Dir::new("observe-salt");
    dir.create("w.jsonl", &[single(0, 0.0, 8, 2), single(1, 0.0, 8, 2)].concat());
    let observe =
        |extra: &[&str]| observe_cmd(&dir, &stub.url, &[&["w.jsonl", "-o", "r.jsonl"][..], extra].concat()).output();
    let salts = |stub: &Stub| {
        let mut seen = stub.seen.lock().unwrap();
        let out: Vec<Option<String>> = seen.iter().map(|s| s.body["cache_salt"].as_str().map(str::to_owned)).collect();
        seen.clear();
        out
    };
    assert!(observe(&["--trace-output", "t"]).status.success());
    let first = salts(&stub);
    assert_eq!(first.len(), 2);
    let salt = first[0].clone().expect("a salt by default");
    assert_eq!(first[1].as_deref(), Some(salt.as_str()), "one salt for the whole observation");
    assert!(dir.read("t.yaml").contains(&format!("cache_salt: \"{salt}\"")), "{}", dir.read("t.yaml"));
    assert!(observe(&[]).status.success());
    assert_ne!(salts(&stub)[0].as_deref(), Some(salt.as_str()), "a fresh salt each run");
    assert!(observe(&["--cache-salt", "run-7"]).status.success());
    assert_eq!(salts(&stub), [Some("run-7".to_owned()), Some("run-7".to_owned())]);
    assert!(observe(&["--cache-salt", "none"]).status.success());
    assert_eq!(salts(&stub), [None, None]);
    for bad in ["a/b", ""] {
        let out = observe(&["--cache-salt", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.starts_with("blis-sweep: --cache-salt: ") && err.lines().count() == 1, "{err}");
    }
    assert!(salts(&stub).is_empty(), "nothing sent with a bad salt");
}
