//! What real clients send, shared by `run` and `observe`: a generator spec
//! as the workload (`--workload-spec`, `--preset`/`--rate`/`--num-requests`),
//! session pools, SLO class and tenant headers, the chat API. `observe` is
//! run against `observe`'s stub server, which records what each call carried.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use crate::observe::{CHAT_TEMPLATE_TOKENS, PLAIN, observe_cmd, single, start};
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

/// A spec with shared prefixes and multi-turn sessions: the streams a
/// generator has beyond single calls.
const SPEC: &str = "\
num_requests: 12
rate: 4
input: {kind: lognormal, median: 40, sigma: 0.5, min: 4, max: 200}
output: {kind: uniform, min: 2, max: 8}
prefix: {groups: 2, tokens: 16}
sessions: {turns: {kind: constant, value: 2}, think_time: {kind: constant, value: 0.2}}
";

/// `run --workload-spec S --seed K` is `generate --spec S --seed K -o w`
/// then `run w`: the same results and metrics, byte for byte.
#[test]
fn run_with_a_workload_spec_is_run_of_what_generate_writes() {
    let dir = Dir::new("feat-spec");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("spec.yaml", SPEC);
    let run = |extra: &[&str], out: &str| {
        let metrics = format!("{out}.metrics");
        let args = [&["run", "-q", "-s", "s.yaml", "-o", out, "--metrics", &metrics][..], extra];
        TestCommand::new(&dir.path, &args.concat()).stdout();
    };
    TestCommand::new(&dir.path, &["generate", "--spec", "spec.yaml", "--seed", "3", "-o", "w.jsonl"]).stdout();
    run(&["w.jsonl"], "file.jsonl");
    run(&["--workload-spec", "spec.yaml", "--seed", "3"], "spec.jsonl");
    assert_eq!(dir.read("file.jsonl"), dir.read("spec.jsonl"));
    let metrics = dir.read("file.jsonl.metrics");
    assert!(metrics.contains("\"completed_requests\": 12"), "{metrics}");
    assert_eq!(metrics, dir.read("spec.jsonl.metrics"));
    // Another seed, other requests.
    run(&["--workload-spec", "spec.yaml", "--seed", "4"], "other.jsonl");
    assert_ne!(dir.read("file.jsonl"), dir.read("other.jsonl"));

    // The flags alone, and over the spec's keys, as `generate` takes them.
    let flags = ["--preset", "summarization", "--rate", "8", "--num-requests", "5"];
    TestCommand::new(&dir.path, &[&["generate", "-o", "w2.jsonl"][..], &flags].concat()).stdout();
    run(&["w2.jsonl"], "file2.jsonl");
    run(&flags, "flags2.jsonl");
    assert_eq!(dir.read("file2.jsonl"), dir.read("flags2.jsonl"));
    let over = ["--workload-spec", "spec.yaml", "--num-requests", "3", "--rate", "1"];
    TestCommand::new(
        &dir.path,
        &["generate", "--spec", "spec.yaml", "--num-requests", "3", "--rate", "1", "-o", "w3.jsonl"],
    )
    .stdout();
    run(&["w3.jsonl"], "file3.jsonl");
    run(&over, "over3.jsonl");
    assert_eq!(dir.read("file3.jsonl"), dir.read("over3.jsonl"));
    assert_eq!(dir.read("file3.jsonl").lines().count(), 3);
}

/// A bad spec names its file and the key's line, a bad flag the flag; a
/// generator and another source are refused together; nothing is written.
#[test]
fn a_bad_workload_spec_is_one_line_naming_where() {
    let dir = Dir::new("feat-spec-bad");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("bad.yaml", "num_requests: 3\nrate: 1\npreset: nosuch\n");
    dir.create("w.jsonl", "");
    let fails = |args: &[&str]| {
        TestCommand::new(&dir.path, &[&["run", "-s", "s.yaml", "-o", "r.jsonl"][..], args].concat()).fails()
    };
    let err = fails(&["--workload-spec", "bad.yaml"]);
    assert!(err.starts_with("blis-sweep: bad.yaml:3: preset: unknown preset `nosuch`"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let err = fails(&["--rate", "-1", "--num-requests", "2"]);
    assert!(err.starts_with("blis-sweep: --rate: -1 must be a positive"), "{err}");
    let err = fails(&["--preset", "chatbot"]);
    assert!(err.contains("--rate and --num-requests"), "{err}");
    let err = fails(&["w.jsonl", "--workload-spec", "bad.yaml"]);
    assert!(err.contains("cannot be used with"), "{err}");
    let err = fails(&["--workload-spec", "missing.yaml"]);
    assert!(err.starts_with("blis-sweep: missing.yaml: cannot read"), "{err}");
    let err = fails(&["--workload-spec", "bad.yaml", "--metrics", "bad.yaml"]);
    assert!(err.contains("--metrics") && err.contains("--workload-spec"), "{err}");
    assert_eq!(dir.files(), ["bad.yaml", "s.yaml", "w.jsonl"]);
}

/// The input lengths of each result row's llm calls.
fn shapes(results: &str) -> Vec<Vec<u64>> {
    rows(results)
        .iter()
        .map(|r| r["sub_requests"].as_array().unwrap().iter().map(|n| n["input_tokens"].as_u64().unwrap()).collect())
        .collect()
}

/// `observe --workload-spec` sends what the generator makes: each call's
/// token ids (a shared prefix gives them) as its prompt, its output length
/// forced.
#[test]
fn observe_sends_a_generated_workload() {
    let stub = start(PLAIN);
    let dir = Dir::new("feat-observe-spec");
    let spec = "num_requests: 4\nrate: 50\ninput: {kind: uniform, min: 4, max: 12}\noutput: {kind: constant, value: 2}\nprefix: {groups: 1, tokens: 4}\n";
    dir.create("spec.yaml", spec);
    TestCommand::new(&dir.path, &["generate", "--spec", "spec.yaml", "--seed", "9", "-o", "w.jsonl"]).stdout();
    observe_cmd(&dir, &stub.url, &["-q", "-o", "r.jsonl", "--workload-spec", "spec.yaml", "--seed", "9"]).stdout();
    let seen = stub.seen.lock().unwrap().clone();
    // Compared as sets of prompts: two requests sent a few ms apart may
    // reach the stub in either order on a loaded machine (CI once saw the
    // third and fourth swapped), and what is checked here is their content.
    let mut sent: Vec<Vec<u64>> = seen
        .iter()
        .map(|s| s.body["prompt"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect())
        .collect();
    let mut generated: Vec<Vec<u64>> = rows(&dir.read("w.jsonl"))
        .iter()
        .map(|r| {
            r["sub_requests"][0]["input_token_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
        })
        .collect();
    sent.sort();
    generated.sort();
    assert_eq!(sent, generated);
    assert!(seen.iter().all(|s| s.max_tokens == 2));
    assert_eq!(rows(&dir.read("r.jsonl")).len(), 4);
}

/// `observe --concurrent-sessions N` sends a TraceV2 corpus's sessions as
/// `run` simulates them: the same sessions, in the same order, N at a time,
/// each session's calls under its session id.
#[test]
fn observe_keeps_a_pool_of_sessions_as_run_does() {
    let stub = start(PLAIN);
    let dir = Dir::new("feat-pool");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("spec.yaml", SPEC);
    // A corpus of 12 two-turn sessions, as a TraceV2 pair.
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "s.yaml", "--workload-spec", "spec.yaml", "--trace-output", "t", "-o", "x.jsonl"],
    )
    .stdout();
    let pool = [
        "--input",
        "tracev2:t.yaml",
        "--concurrent-sessions",
        "2",
        "--total-sessions",
        "5",
        "--shuffle-corpus",
        "--seed",
        "2",
    ];
    TestCommand::new(&dir.path, &[&["run", "-q", "-s", "s.yaml", "-o", "sim.jsonl"][..], &pool].concat()).stdout();
    observe_cmd(&dir, &stub.url, &[&["-q", "-o", "real.jsonl"][..], &pool].concat()).stdout();
    let (sim, real) = (dir.read("sim.jsonl"), dir.read("real.jsonl"));
    assert_eq!(shapes(&real), shapes(&sim), "the same sessions in the same order");
    assert_eq!(shapes(&real).len(), 5);
    assert!(stub.most_in_flight.load(Ordering::SeqCst) <= 2);
    let seen = stub.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 10, "five sessions of two turns");
    let sessions: BTreeSet<String> = seen.iter().map(|s| s.session.clone().unwrap()).collect();
    assert_eq!(sessions.len(), 5, "{sessions:?}");
    // Sessions are admitted two at a time: the third starts after one of the first two ended.
    let mut by_session: Vec<(u64, u64)> = sessions
        .iter()
        .map(|id| {
            let calls = seen.iter().filter(|s| s.session.as_deref() == Some(id.as_str()));
            let start = calls.clone().map(|s| s.at_us).min().unwrap();
            (start, calls.map(|s| s.end_us).max().unwrap())
        })
        .collect();
    by_session.sort();
    let first_end = by_session[0].1.min(by_session[1].1);
    assert!(by_session[2].0 + 2_000 >= first_end, "{by_session:?}");
    // A pool is the client: --concurrency beside it is refused.
    let err = observe_cmd(&dir, &stub.url, &[&["-q", "-o", "real.jsonl"][..], &pool, &["--concurrency", "3"]].concat())
        .fails();
    assert!(err.starts_with("blis-sweep: --concurrent-sessions: the pool is the client"), "{err}");
}

/// A request's SLO class reaches vLLM as its `priority` (the class's, unless
/// the call names its own; none for critical's 0, vLLM's default) and the
/// gateway as GIE's objective header; its tenant as GIE's fairness id.
#[test]
fn observe_sends_class_and_tenant_as_priority_and_gateway_headers() {
    let stub = start(PLAIN);
    let dir = Dir::new("feat-classes");
    let row = |id: u32, traffic: &str, priority: &str| {
        format!(
            "{{\"request_id\":{id},\"arrival_time\":0,{traffic}\"initial\":[0],\"sub_requests\":[{{\"kind\":\"llm\",\"next\":[],\"input_tokens\":{},\"output_tokens\":2{priority}}}]}}\n",
            4 + id
        )
    };
    let workload = [
        row(0, "\"slo_class\":\"batch\",\"tenant\":\"acme\",", ""),
        row(1, "\"slo_class\":\"critical\",", ""),
        row(2, "\"slo_class\":\"sheddable\",", ",\"priority\":2"),
        single(3, 0.0, 7, 2),
    ]
    .concat();
    dir.create("w.jsonl", &workload);
    observe_cmd(&dir, &stub.url, &["-q", "w.jsonl", "-o", "r.jsonl"]).stdout();
    let seen = stub.seen.lock().unwrap().clone();
    let call = |len: usize| seen.iter().find(|s| s.prompt_len == len).unwrap().clone();
    let header =
        |s: &crate::observe::Seen, name: &str| s.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    const OBJECTIVE: &str = "x-gateway-inference-objective";
    const FAIRNESS: &str = "x-gateway-inference-fairness-id";
    let batch = call(4);
    assert_eq!(batch.body["priority"], 5, "batch's vLLM priority: {}", batch.body);
    assert_eq!((header(&batch, OBJECTIVE), header(&batch, FAIRNESS)), (Some("batch".into()), Some("acme".into())));
    let critical = call(5);
    assert!(critical.body.get("priority").is_none(), "{}", critical.body);
    assert_eq!((header(&critical, OBJECTIVE), header(&critical, FAIRNESS)), (Some("critical".into()), None));
    let named = call(6);
    assert_eq!(named.body["priority"], 2, "the call's own priority: {}", named.body);
    assert_eq!(header(&named, OBJECTIVE), Some("sheddable".into()));
    let plain = call(7);
    assert!(
        plain.body.get("priority").is_none()
            && header(&plain, OBJECTIVE).is_none()
            && header(&plain, FAIRNESS).is_none()
    );
    assert!(seen.iter().all(|s| s.session.is_none()), "single calls carry no session id");
}

/// `--api chat` sends each call to /v1/chat/completions as one user message
/// whose templated prompt is the workload's length (the stub's template
/// adds [`CHAT_TEMPLATE_TOKENS`]), its output forced as vLLM takes it; a
/// prompt shorter than the template fails alone; a workload with token ids
/// is refused before anything is sent.
#[test]
fn observe_chat_sends_messages_of_the_exact_templated_length() {
    let stub = start(PLAIN);
    let dir = Dir::new("feat-chat");
    dir.create("w.jsonl", &[single(0, 0.0, 15, 3), single(1, 0.0, 6, 2), single(2, 0.0, 10, 2)].concat());
    let args = ["--api", "chat", "-o", "r.jsonl"];
    let out = observe_cmd(&dir, &stub.url, &[&args[..], &["w.jsonl"]].concat()).output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("3 recorded: 2 completed, 1 failed (0 with usage"), "{summary}");
    let mut seen = stub.seen.lock().unwrap().clone();
    seen.sort_by_key(|s| s.prompt_len);
    assert_eq!(seen.iter().map(|s| (s.prompt_len, s.max_tokens)).collect::<Vec<_>>(), [(10, 2), (15, 3)]);
    let body = &seen[1].body;
    assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["messages"][0]["content"].as_str().unwrap().split_whitespace().count(), 15 - CHAT_TEMPLATE_TOKENS);
    assert_eq!(seen[0].body["messages"][0]["content"], "", "a prompt of the template alone: an empty message");
    assert_eq!(
        (body["min_tokens"].as_u64(), body["ignore_eos"].as_bool(), body["stream"].as_bool()),
        (Some(3), Some(true), Some(true))
    );
    assert_eq!(body["stream_options"], serde_json::json!({"include_usage": true, "continuous_usage_stats": true}));
    assert!(body.get("prompt").is_none() && body.get("max_tokens").is_none(), "{body}");
    assert!(body["cache_salt"].as_str().is_some_and(|s| s.starts_with("blis-sweep-")), "{body}");
    let results = rows(&dir.read("r.jsonl"));
    assert_eq!(results[0]["sub_requests"][0]["token_latency"].as_array().unwrap().len(), 3);
    let short = results[1]["sub_requests"][0]["error"].as_str().unwrap();
    assert!(short.contains("shorter than the model's chat template (10 tokens"), "{short}");

    // Token ids cannot go as a chat message: refused, nothing sent or written.
    let ids = "{\"request_id\":7,\"arrival_time\":0,\"initial\":[0],\"sub_requests\":[{\"kind\":\"llm\",\"next\":[],\
               \"input_tokens\":3,\"output_tokens\":2,\"input_token_ids\":[1,2,3]}]}\n";
    dir.create("ids.jsonl", ids);
    let before = stub.seen.lock().unwrap().len();
    let err = observe_cmd(&dir, &stub.url, &["--api", "chat", "-o", "ids.out", "ids.jsonl"]).fails();
    assert!(err.starts_with("blis-sweep: --api: chat: request 7: sub_requests[0] carries token ids:"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(stub.seen.lock().unwrap().len(), before);
    assert!(!dir.join("ids.out").exists());

    // A generator's single calls without shared prefixes carry no ids: chat takes them.
    dir.create(
        "spec.yaml",
        "num_requests: 3\nrate: 100\ninput: {kind: uniform, min: 12, max: 30}\noutput: {kind: constant, value: 2}\n",
    );
    TestCommand::new(&dir.path, &["generate", "--spec", "spec.yaml", "-o", "g.jsonl"]).stdout();
    observe_cmd(&dir, &stub.url, &[&args[..], &["-q", "--workload-spec", "spec.yaml"]].concat()).stdout();
    let mut lens: Vec<u64> = stub.seen.lock().unwrap()[before..].iter().map(|s| s.prompt_len as u64).collect();
    let mut want: Vec<u64> =
        rows(&dir.read("g.jsonl")).iter().map(|r| r["sub_requests"][0]["input_tokens"].as_u64().unwrap()).collect();
    lens.sort_unstable();
    want.sort_unstable();
    assert_eq!(lens, want);
}

/// A trace's session flags beside a workload file or a generator are
/// refused by run and observe alike (they were silently ignored), naming
/// the flag and what does cap a file's requests.
#[test]
fn session_flags_without_a_trace_are_refused_not_ignored() {
    let dir = Dir::new("feat-session-flags");
    dir.create("w.jsonl", &single(0, 0.0, 8, 2));
    dir.create("s.yaml", LINEAR_SCENARIO);
    let sources: [&[&str]; 2] = [&["w.jsonl"], &["--preset", "chatbot", "--rate", "1", "--num-requests", "2"]];
    for source in sources {
        for (flag, value) in [("--concurrent-sessions", "2"), ("--session-rate", "1"), ("--session-mode", "fixed")] {
            let run = [&["run", "-s", "s.yaml", "-o", "r.jsonl", flag, value][..], source].concat();
            let observe = [
                &["observe", "--server-url", "http://127.0.0.1:9", "--model", "tiny", "-o", "o.jsonl", flag, value][..],
                source,
            ]
            .concat();
            for args in [run, observe] {
                let err = TestCommand::new(&dir.path, &args).fails();
                assert!(err.starts_with(&format!("blis-sweep: {flag}: only a trace's sessions")), "{args:?}: {err}");
            }
        }
    }
    assert!(!dir.join("r.jsonl").exists() && !dir.join("o.jsonl").exists());
}
