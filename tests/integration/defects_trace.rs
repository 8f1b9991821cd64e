//! Issue 22's TraceV2 defects (04, 17) and the round trip it asks for:
//! `run --trace-output` then replaying the pair with the same scenario gives
//! the same TTFT, ITL and E2E means and prefix-cache hit rate; what TraceV2
//! cannot hold is refused or warned about at export, naming the request; a
//! header BLIS's `observe` writes (`time_unit: us`, Unix-epoch send times)
//! is read; a header that is not UTF-8 is named by line and field; columns
//! BLIS acts on and this engine does not model are named in the summary.

use std::path::Path;

use crate::util::{Dir, TestCommand};

const D04: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/defects/04-trace-roundtrip");
const D17: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/defects/17-tracev2-prefix-loss");
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/import");
const S8B: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sweeps/scenarios/llama-3.1-8b-h100-tp1.yaml");
const WORKLOADS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sweeps/workloads");
const KEYS: [&str; 4] = ["ttft_mean_ms", "itl_mean_ms", "e2e_mean_ms", "kv_cache_hit_rate"];

fn metrics(dir: &Dir, name: &str) -> serde_json::Value {
    serde_json::from_str(&dir.read(name)).unwrap()
}

/// Runs `input` on `scenario` with `--trace-output tr`, replays the pair
/// closed-loop; returns (run, replay) metrics and the run's stderr.
fn round_trip(dir: &Dir, scenario: &str, input: &[&str]) -> (serde_json::Value, serde_json::Value, String) {
    let mut args = vec!["run", "-s", scenario];
    args.extend_from_slice(input);
    args.extend_from_slice(&["-o", "/dev/null", "--metrics", "a.json", "--trace-output", "tr"]);
    let out = TestCommand::new(&dir.path, &args).output();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    TestCommand::new(
        &dir.path,
        &[
            "run",
            "-q",
            "-s",
            scenario,
            "--trace-header",
            "tr.yaml",
            "--trace-data",
            "tr.csv",
            "--session-mode",
            "closed-loop",
            "--horizon",
            "100000",
            "-o",
            "/dev/null",
            "--metrics",
            "b.json",
        ],
    )
    .stdout();
    (metrics(dir, "a.json"), metrics(dir, "b.json"), stderr)
}

fn assert_same(name: &str, a: &serde_json::Value, b: &serde_json::Value) {
    for key in KEYS {
        assert_eq!(a[key], b[key], "{name}: {key} run {} vs replay {}", a[key], b[key]);
    }
    assert_eq!(a["completed_requests"], b["completed_requests"], "{name}");
}

/// 04: a chain with zero think time replayed at +95 % E2E (the gap between
/// the rounds' starts, service time included, was taken for think time),
/// and a root `interval` was dropped. Both now replay exactly, as does the
/// chain with a think time.
#[test]
fn defect_04_zero_think_and_root_interval_replay_exactly() {
    let dir = Dir::new("d04");
    for (w, e2e) in [("chain", 1352.201), ("chain-think", 1852.201), ("root-interval", 635.517)] {
        let (a, b, _) = round_trip(&dir, &format!("{D04}/S.yaml"), &[&format!("{D04}/{w}.jsonl")]);
        assert_same(w, &a, &b);
        let got = a["e2e_mean_ms"].as_f64().unwrap();
        assert!((got - e2e).abs() < 0.01, "{w}: run E2E {got} (the reproducer's {e2e})");
    }
    // The zero think time is written as such, and the rounds' arrival gap is
    // 0 too, so BLIS's fallback for an all-zero session agrees.
    let (_, _, _) = round_trip(&dir, &format!("{D04}/S.yaml"), &[&format!("{D04}/chain.jsonl")]);
    let csv = dir.read("tr.csv");
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let col = |name: &str| rows[0].iter().position(|h| *h == name).unwrap();
    assert_eq!(rows.len(), 3, "{csv}");
    assert_eq!(rows[2][col("think_time_us")], "0", "{csv}");
    assert_eq!(rows[2][col("arrival_time_us")], rows[1][col("arrival_time_us")], "{csv}");
}

/// 17: a chat workload whose prompts open with 4 shared 512-token prefixes
/// lost every prefix-cache hit in replay (62.9 % → 0 %): the export had no
/// prefix groups. The groups are now found from token ids.
#[test]
fn defect_17_shared_prefixes_survive_the_round_trip() {
    let dir = Dir::new("d17");
    TestCommand::new(&dir.path, &["generate", "--spec", &format!("{D17}/spec.yaml"), "--seed", "1", "-o", "w.jsonl"])
        .stdout();
    let (a, b, _) = round_trip(&dir, &format!("{D17}/S.yaml"), &["w.jsonl"]);
    assert_same("17", &a, &b);
    assert!(a["kv_cache_hit_rate"].as_f64().unwrap() > 0.6, "{a}");
    // BLIS's own columns carry the groups (so `blis replay` shares them too):
    // 4 groups of 512 tokens.
    let csv = dir.read("tr.csv");
    let mut groups = std::collections::BTreeSet::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        assert!(!f[6].is_empty() && f[7] == "512", "{line}");
        groups.insert(f[6].to_owned());
    }
    assert_eq!(groups.len(), 4, "{groups:?}");
}

/// The round trip over the example workloads and the small samples of every
/// importer: equal metrics, request DAGs that fork and join included
/// (agentic-40, the agent-calls sample replayed closed-loop; they were
/// refused at export before the `dag` column).
#[test]
fn tracev2_round_trip_of_small_example_workloads() {
    let dir = Dir::new("rt");
    let chat: String = std::fs::read_to_string(format!("{WORKLOADS}/chat-200.jsonl")).unwrap();
    dir.create("chat.jsonl", &chat.lines().take(80).map(|l| format!("{l}\n")).collect::<String>());
    let cases: [(&str, Vec<String>); 6] = [
        ("chat-200 (first 80)", vec!["chat.jsonl".into()]),
        ("mooncake", vec!["--input".into(), format!("mooncake:{DATA}/mooncake.jsonl")]),
        ("azure", vec!["--input".into(), format!("azure:{DATA}/azure.csv")]),
        (
            "agent-calls",
            vec![
                "--input".into(),
                format!("agent-calls:{DATA}/agent_calls.csv"),
                "--session-rate".into(),
                "0.5".into(),
                "--session-mode".into(),
                "fixed-accumulate".into(),
            ],
        ),
        ("agentic-40", vec![format!("{WORKLOADS}/agentic-40.jsonl")]),
        (
            "agent-calls closed-loop",
            vec![
                "--input".into(),
                format!("agent-calls:{DATA}/agent_calls.csv"),
                "--session-rate".into(),
                "0.5".into(),
            ],
        ),
    ];
    let mut hits = 0;
    for (name, input) in &cases {
        let input: Vec<&str> = input.iter().map(String::as_str).collect();
        let (a, b, stderr) = round_trip(&dir, S8B, &input);
        assert_same(name, &a, &b);
        assert!(!stderr.contains("warning"), "{name}: {stderr}");
        hits += usize::from(a["kv_cache_hit_rate"].as_f64().unwrap() > 0.1);
    }
    assert!(hits >= 5, "chat, mooncake, agent-calls and agentic-40 share prefixes");
    // agentic-40 forks into two tool calls and joins them: each request is a
    // session of its 2 llm calls, round 0 carrying the DAG; BLIS's columns
    // still read as a chain.
    let (_, _, _) = round_trip(&dir, S8B, &[&format!("{WORKLOADS}/agentic-40.jsonl")]);
    let csv = dir.read("tr.csv");
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let col = |name: &str| rows[0].iter().position(|h| *h == name).unwrap();
    assert_eq!(rows[0].len(), 32, "{}", rows[0].join(","));
    assert_eq!(rows.len(), 81, "40 requests of 2 llm calls");
    let first = &rows[1];
    assert_eq!((first[col("session_id")], first[col("round_index")]), ("agent-0", "0"));
    let dag = first[col("dag")];
    let parts: Vec<&str> = dag.split(';').collect();
    assert_eq!(parts.len(), 4, "{dag}");
    assert_eq!(parts[0], "r0>1|2", "{dag}");
    assert!(parts[1].starts_with('t') && parts[1].ends_with(">3"), "{dag}");
    assert!(parts[3].starts_with("r1"), "{dag}");
    let second = rows.iter().find(|r| r[col("session_id")] == "agent-0" && r[col("round_index")] == "1").unwrap();
    assert_eq!(second[col("dag")], "");
}

/// A wait after a request's last llm call (a trailing tool call) is in the
/// run's E2E: the chain is written with its `dag`, and the closed-loop
/// replay keeps the wait (same E2E), with no warning.
#[test]
fn tracev2_a_trailing_tool_call_replays_exactly() {
    let dir = Dir::new("rt-tail");
    dir.create(
        "w.jsonl",
        concat!(
            r#"{"request_id":"t-1","arrival_time":0.0,"initial":[0],"sub_requests":["#,
            r#"{"kind":"llm","input_tokens":100,"output_tokens":5,"next":[1]},"#,
            r#"{"kind":"tool_call","input_tokens":0,"output_tokens":0,"duration":0.25,"next":[]}]}"#,
            "\n"
        ),
    );
    let out = TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", S8B, "w.jsonl", "-o", "/dev/null", "--metrics", "a.json", "--trace-output", "tr"],
    )
    .output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("warning"), "{err}");
    let csv = std::fs::read_to_string(dir.path.join("tr.csv")).unwrap();
    assert!(csv.contains("r0>1;t250000"), "{csv}");
    TestCommand::new(
        &dir.path,
        &[
            "run",
            "-q",
            "-s",
            S8B,
            "--trace-header",
            "tr.yaml",
            "--trace-data",
            "tr.csv",
            "--session-mode",
            "closed-loop",
            "-o",
            "/dev/null",
            "--metrics",
            "b.json",
        ],
    )
    .stdout();
    let e2e = |f: &str| {
        let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path.join(f)).unwrap()).unwrap();
        m["e2e_mean_ms"].as_f64().unwrap()
    };
    assert!(e2e("a.json") > 250.0, "{}", e2e("a.json"));
    assert_eq!(e2e("a.json"), e2e("b.json"));
}

const HEADER_US: &str = "trace_version: 3\ntime_unit: us\nmode: real\nwarm_up_requests: 0\n";
const COLUMNS: &str = "request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,prefix_length,\
streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,\
deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,\
status,error_message,finish_reason,adapter";

/// Three records; `base` is added to every send and chunk time, `slo` and
/// `adapter` fill those columns.
fn observed(base: u64, slo: &str, adapter: &str) -> String {
    let mut s = format!("{COLUMNS}\n");
    for (i, t) in [0u64, 200_000, 450_000].iter().enumerate() {
        s += &format!(
            "{i},c,,{slo},,0,,0,true,300,20,300,0,0,0,0,,0,300,{t},{},{},{},20,ok,,stop,{adapter}\n",
            base + t,
            base + t + 30_000,
            base + t + 200_000
        );
    }
    s
}

/// A trace as `blis observe` records it (`time_unit: us`; send and chunk
/// times in Unix-epoch µs, arrivals relative) replays as the same trace with
/// relative times; `slo_class` and `adapter` are named in the summary as
/// present, not modelled.
#[test]
fn tracev2_observe_header_epoch_times_and_unmodelled_columns() {
    let dir = Dir::new("rt-epoch");
    dir.create("rel.yaml", &HEADER_US.replace("time_unit: us", "time_unit: microseconds"));
    dir.create("rel.csv", &observed(0, "", ""));
    dir.create("epoch.yaml", HEADER_US);
    dir.create("epoch.csv", &observed(1_764_590_400_000_000, "interactive", "lora-a"));
    let replay = |h: &str, m: &str| {
        let out = TestCommand::new(
            &dir.path,
            &["run", "-s", S8B, "--input", &format!("tracev2:{h}"), "-o", "/dev/null", "--metrics", m],
        )
        .output();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let quiet = replay("rel.yaml", "a.json");
    let noted = replay("epoch.yaml", "b.json");
    let (a, b) = (metrics(&dir, "a.json"), metrics(&dir, "b.json"));
    assert_same("epoch", &a, &b);
    assert_eq!(a["completed_requests"], 3);
    assert!(a["sim_duration_s"].as_f64().unwrap() < 5.0, "{a}");
    assert!(!quiet.contains("not modelled"), "{quiet}");
    assert!(noted.contains("TraceV2 columns present, not modelled (read and ignored): slo_class, adapter"), "{noted}");
    // The metrics JSON says so too (and nothing when no record gives one).
    assert_eq!(b["trace_columns_not_modelled"], serde_json::json!(["slo_class", "adapter"]), "{b}");
    assert!(a.get("trace_columns_not_modelled").is_none(), "{a}");
    // Another unit is refused, naming the line.
    dir.create("ms.yaml", &HEADER_US.replace("time_unit: us", "time_unit: ms"));
    dir.create("ms.csv", &observed(0, "", ""));
    let err = TestCommand::new(&dir.path, &["run", "-s", S8B, "--input", "tracev2:ms.yaml", "-o", "r.jsonl"]).fails();
    assert!(err.contains("ms.yaml:2: time_unit: `ms`"), "{err}");
}

/// Issue 22 item 7: a header that is not UTF-8 is a one-line error naming
/// the file, the line and the field, not "stream did not contain valid
/// UTF-8" at no line.
#[test]
fn tracev2_header_invalid_utf8_names_line_and_field() {
    let dir = Dir::new("rt-utf8");
    let mut bytes = b"trace_version: 3\ntime_unit: microseconds\nmode: gen".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    bytes.extend_from_slice(b"erated\nwarm_up_requests: 0\n");
    std::fs::write(dir.join("h.yaml"), bytes).unwrap();
    dir.create("h.csv", &observed(0, "", ""));
    let err = TestCommand::new(&dir.path, &["run", "-s", S8B, "--input", "tracev2:h.yaml", "-o", "r.jsonl"]).fails();
    assert!(err.contains("h.yaml:3: mode: invalid UTF-8"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!Path::new(&dir.join("r.jsonl")).exists());
}

/// A `prefix_parent` must name an earlier record, and its length fit both
/// sequences: else FILE:LINE: field.
#[test]
fn tracev2_prefix_parent_is_checked() {
    let dir = Dir::new("rt-parent");
    dir.create("h.yaml", HEADER_US);
    let csv = |parent: &str, len: &str| {
        format!(
            "request_id,input_tokens,output_tokens,arrival_time_us,prefix_parent,prefix_parent_length\n\
             0,100,10,0,,\n1,100,10,1000,{parent},{len}\n"
        )
    };
    for (parent, len, want) in [
        ("1", "16", "h.csv:3: prefix_parent: 1 is not an earlier record"),
        ("7", "16", "h.csv:3: prefix_parent: 7 is no record's request_id"),
        ("0", "111", "h.csv:3: prefix_parent_length: 111 tokens: longer than this prompt (100)"),
    ] {
        dir.create("h.csv", &csv(parent, len));
        let err =
            TestCommand::new(&dir.path, &["run", "-s", S8B, "--input", "tracev2:h.yaml", "-o", "r.jsonl"]).fails();
        assert!(err.contains(want), "{err}");
    }
    dir.create("h.csv", &csv("0", "64"));
    TestCommand::new(&dir.path, &["run", "-q", "-s", S8B, "--input", "tracev2:h.yaml", "-o", "r.jsonl"]).stdout();
    dir.create(
        "h.csv",
        "request_id,input_tokens,output_tokens,arrival_time_us,prefix_parent,prefix_parent_length,token_ids\n\
         0,100,10,0,,,prompt\n1,100,10,1000,0,64,some\n",
    );
    let err = TestCommand::new(&dir.path, &["run", "-s", S8B, "--input", "tracev2:h.yaml", "-o", "r.jsonl"]).fails();
    assert!(err.contains("h.csv:3: token_ids: `some`: prompt+output, prompt or none"), "{err}");
}

/// A `dag` column is checked: FILE:LINE: dag: reason for a malformed node,
/// a round named twice or left out, a DAG on a later round or on a record
/// without a session; a good one replays closed-loop as that DAG.
#[test]
fn tracev2_dag_column_is_checked() {
    let dir = Dir::new("rt-dag");
    dir.create("h.yaml", HEADER_US);
    let csv = |dag0: &str, dag1: &str, session: &str| {
        format!(
            "request_id,session_id,round_index,input_tokens,output_tokens,arrival_time_us,dag\n\
             0,{session},0,100,10,0,\"{dag0}\"\n1,{session},1,100,10,1000,\"{dag1}\"\n"
        )
    };
    for (dag0, dag1, session, want) in [
        ("r0>1;x5>2;r1", "", "s", "h.csv:2: dag: node 1 (`x5>2`): a node is `rK`"),
        ("r0>3;r1", "", "s", "h.csv:2: dag: node 0: successor 3 is out of range (2 nodes)"),
        ("r0>1;r1>0", "", "s", "h.csv:2: dag: node 0: the nodes form a cycle"),
        ("r0>1;t-5>2;r1", "", "s", "h.csv:2: dag: node 1 (`t-5>2`): `-5` is not a whole number of µs (duration)"),
        ("r0;r0", "", "s", "h.csv:2: dag: session s: round 0 is named twice"),
        ("r0>1;t5", "", "s", "h.csv:2: dag: session s: round 1 is not a node of the DAG"),
        ("r0>1;r2", "", "s", "h.csv:2: dag: session s: round 2: the session has 2 rounds"),
        ("", "r0>1;r1", "s", "h.csv:3: dag: session s: only round 0 carries the session's DAG"),
        ("r0>1;r1", "", "", "h.csv:2: dag: a request DAG is a session's: this record has no session_id"),
    ] {
        dir.create("h.csv", &csv(dag0, dag1, session));
        let err = TestCommand::new(
            &dir.path,
            &["run", "-s", S8B, "--input", "tracev2:h.yaml", "--session-mode", "closed-loop", "-o", "r.jsonl"],
        )
        .fails();
        assert!(err.contains(want), "{dag0} {dag1}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // Round 1 beside round 0 (both roots, 2 ms apart), then a tool call of
    // 5 ms after round 0 only.
    dir.create("h.csv", &csv("r0>2;r1+2000;t5000", "", "s"));
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", S8B, "--input", "tracev2:h.yaml", "--session-mode", "closed-loop", "-o", "r.jsonl"],
    )
    .stdout();
    let r: serde_json::Value = serde_json::from_str(dir.read("r.jsonl").lines().next().unwrap()).unwrap();
    assert_eq!(r["initial"], serde_json::json!([0, 1]), "{r}");
    let nodes = r["sub_requests"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{r}");
    assert_eq!((nodes[1]["interval"].as_f64(), nodes[2]["duration"].as_f64()), (Some(0.002), Some(0.005)), "{r}");
    assert_eq!(nodes[0]["next"], serde_json::json!([2]), "{r}");
}

/// A small deterministic generator (SplitMix64) for the random round trips.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random workload of chains and of DAGs that fork and join: 1–4 llm
/// calls, intervals (0 included, at the root too), tool calls before,
/// between and after the calls; half the requests of more than one node
/// wired as a random DAG (0–2 predecessors each, so several roots, forks
/// and joins), and half of all requests' nodes numbered in a random order
/// (not topological); prompts that open with one of a few shared prefixes,
/// or with an earlier request's prompt and output (nested sharing), with or
/// without token ids.
fn random_workload(rng: &mut Rng, requests: usize) -> String {
    let prefixes: Vec<Vec<u64>> =
        (0..3).map(|g| (0..(16 * (g + 1) + 5)).map(|k| 20_000 + 100 * g + k).collect()).collect();
    let mut earlier: Vec<Vec<u64>> = Vec::new();
    let mut fresh = 1_000_000u64;
    let mut out = String::new();
    let mut t = 0.0f64;
    for id in 0..requests {
        t += rng.below(400) as f64 / 1000.0;
        let with_ids = rng.below(5) > 0;
        let calls = 1 + rng.below(4) as usize;
        let mut nodes: Vec<serde_json::Value> = Vec::new();
        if rng.below(4) == 0 {
            nodes.push(serde_json::json!({"kind": "tool_call", "input_tokens": 0, "output_tokens": 0,
                "duration": rng.below(300) as f64 / 1000.0}));
        }
        for _ in 0..calls {
            let mut prompt: Vec<u64> = match rng.below(3) {
                0 => prefixes[rng.below(3) as usize].clone(),
                1 if !earlier.is_empty() => {
                    let e = &earlier[rng.below(earlier.len() as u64) as usize];
                    e[..e.len() - rng.below(e.len() as u64 / 2 + 1) as usize].to_vec()
                }
                _ => Vec::new(),
            };
            for _ in 0..(1 + rng.below(120)) {
                prompt.push(fresh);
                fresh += 1;
            }
            let output: Vec<u64> = (0..(1 + rng.below(30))).map(|k| fresh + k).collect();
            fresh += 100;
            let interval = if rng.below(2) == 0 { 0.0 } else { rng.below(500) as f64 / 1000.0 };
            let mut node = serde_json::json!({"kind": "llm", "input_tokens": prompt.len(),
                "output_tokens": output.len(), "interval": interval});
            if with_ids {
                node["input_token_ids"] = serde_json::json!(prompt);
                node["output_token_ids"] = serde_json::json!(output);
                let mut seq = prompt.clone();
                seq.extend(&output);
                earlier.push(seq);
            }
            nodes.push(node);
            if rng.below(5) == 0 {
                nodes.push(serde_json::json!({"kind": "tool_call", "input_tokens": 0, "output_tokens": 0,
                    "duration": rng.below(200) as f64 / 1000.0}));
            }
        }
        // A trailing tool call of a chain (written with its `dag`) stays,
        // unless the request would have no llm call.
        while nodes.len() > 1 && nodes.last().unwrap()["kind"] == "tool_call" && rng.below(2) == 0 {
            nodes.pop();
        }
        let n = nodes.len();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
        if n > 1 && rng.below(2) == 0 {
            for k in 1..n {
                let preds = if rng.below(6) == 0 { 0 } else { 1 + rng.below(2) };
                for _ in 0..preds {
                    let p = rng.below(k as u64) as usize;
                    if !next[p].contains(&k) {
                        next[p].push(k);
                    }
                }
            }
            // (A tool call that ends a branch is followed by the last call,
            // so that a DAG that happens to be a chain does not end in one.)
            for k in 0..n - 1 {
                if next[k].is_empty() && nodes[k]["kind"] == "tool_call" {
                    next[k].push(n - 1);
                }
            }
        } else {
            for (k, next) in next.iter_mut().enumerate().take(n - 1) {
                next.push(k + 1);
            }
        }
        // Node k is numbered place[k].
        let mut place: Vec<usize> = (0..n).collect();
        if rng.below(2) == 0 {
            for i in (1..n).rev() {
                place.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let mut numbered = vec![serde_json::Value::Null; n];
        let mut has_pred = vec![false; n];
        for (k, mut node) in nodes.into_iter().enumerate() {
            let succ: Vec<usize> = next[k].iter().map(|&j| place[j]).collect();
            for &j in &succ {
                has_pred[j] = true;
            }
            node["next"] = serde_json::json!(succ);
            numbered[place[k]] = node;
        }
        let initial: Vec<usize> = (0..n).filter(|&i| !has_pred[i]).collect();
        let request = serde_json::json!({"request_id": id, "arrival_time": (t * 1e6).round() / 1e6,
            "initial": initial, "sub_requests": numbered});
        out += &format!("{request}\n");
    }
    out
}

/// Random chains and DAGs that fork and join, shared and nested prefixes,
/// intervals and tool calls, run open-loop and behind a client cap: every
/// round trip gives the same TTFT, ITL, E2E and hit rate, and the export
/// warns of nothing.
#[test]
fn tracev2_random_round_trips_are_identical() {
    let dir = Dir::new("rt-random");
    let mut rng = Rng(22);
    let (mut hits, mut dags) = (0, 0);
    for case in 0..24 {
        dir.create("w.jsonl", &random_workload(&mut rng, 12 + case));
        let cap = (case % 3 == 2).then(|| (1 + case % 5).to_string());
        let mut input = vec!["w.jsonl"];
        if let Some(c) = &cap {
            input.extend(["--concurrency", c.as_str()]);
        }
        let (a, b, stderr) = round_trip(&dir, S8B, &input);
        assert_same(&format!("case {case}"), &a, &b);
        assert!(!stderr.contains("warning"), "case {case}: {stderr}");
        hits += usize::from(a["kv_cache_hit_rate"].as_f64().unwrap() > 0.0);
        dags += dir.read("tr.csv").lines().filter(|l| l.contains(">")).count();
    }
    assert!(hits >= 20, "most cases share prefixes: {hits}");
    assert!(dags >= 100, "many requests fork or join: {dags}");
}
