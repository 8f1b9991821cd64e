//! Weka agent sessions end to end: each session one request DAG with the
//! file's calls, tokens and fan-out; prefix hits where the hash ids repeat;
//! `--drop-subagents` (BLIS's main-agent replay) under-loading; aiperf's own
//! fixtures as a folder; bad sessions named by file, line and field.

use std::collections::HashMap;

use serde_json::Value;

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, latencies_us, rows};

pub(crate) const SESSIONS: &str = include_str!("../data/import/weka/sessions.jsonl");

/// The file's own account of a session, read straight from its JSON.
struct Expected {
    calls: usize,
    input: u64,
    output: u64,
    /// Per main turn (in order): subagent entries spawned right after it.
    spawned: Vec<usize>,
    /// Per main turn: subagents that gate it (the first later main turn
    /// sent after the subagent's recorded end).
    gated_by: Vec<usize>,
}

fn expected(session: &Value) -> Expected {
    let entries = session["requests"].as_array().unwrap();
    let mut e = Expected { calls: 0, input: 0, output: 0, spawned: vec![], gated_by: vec![] };
    let mut mains: Vec<f64> = vec![];
    let mut subs: Vec<(usize, usize, f64)> = vec![]; // (after main turn, entry position, end)
    for (pos, r) in entries.iter().enumerate() {
        let calls: Vec<&Value> =
            if r["type"] == "subagent" { r["requests"].as_array().unwrap().iter().collect() } else { vec![r] };
        for c in &calls {
            e.calls += 1;
            e.input += c["in"].as_u64().unwrap();
            e.output += c["out"].as_u64().unwrap().max(1);
        }
        if r["type"] == "subagent" {
            let last = calls.last().unwrap();
            let end = last["t"].as_f64().unwrap() + last["api_time"].as_f64().unwrap();
            subs.push((mains.len() - 1, pos, end));
        } else {
            mains.push(r["t"].as_f64().unwrap());
        }
    }
    e.spawned = vec![0; mains.len()];
    e.gated_by = vec![0; mains.len()];
    for &(after, _, end) in &subs {
        e.spawned[after] += 1;
        if let Some(j) = (after + 1..mains.len()).find(|&j| mains[j] >= end) {
            e.gated_by[j] += 1;
        }
    }
    e
}

#[test]
fn weka_sessions_are_dags_with_the_files_calls_tokens_and_fan_out() {
    let dir = Dir::new("weka-dag");
    dir.create("w.jsonl", SESSIONS);
    TestCommand::new(&dir.path, &["import", "weka", "w.jsonl", "-o", "out.jsonl", "--session-rate", "0.01"]).stdout();
    let sessions: Vec<Value> = rows(SESSIONS);
    let requests = rows(&dir.read("out.jsonl"));
    assert_eq!(requests.len(), sessions.len());
    let mut subagents = 0;
    for (s, r) in sessions.iter().zip(&requests) {
        assert_eq!(r["request_id"], s["id"]);
        let want = expected(s);
        let nodes = r["sub_requests"].as_array().unwrap();
        assert_eq!(nodes.len(), want.calls, "{}: llm calls", s["id"]);
        let sum = |k: &str| nodes.iter().map(|n| n[k].as_u64().unwrap()).sum::<u64>();
        assert_eq!((sum("input_tokens"), sum("output_tokens")), (want.input, want.output), "{}", s["id"]);
        // Main turns are nodes 0..m, chained; every other edge is a fan-out
        // to a subagent or a join back.
        let m = want.spawned.len();
        let mut preds: HashMap<u64, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let next: Vec<u64> = n["next"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
            for &j in &next {
                *preds.entry(j).or_default() += 1;
            }
            if i < m {
                let fan_out = next.iter().filter(|&&j| j as usize >= m).count();
                assert_eq!(fan_out, want.spawned[i], "{}: subagents spawned after main turn {i}", s["id"]);
                assert_eq!(next.contains(&(i as u64 + 1)), i + 1 < m, "{}: the main chain", s["id"]);
            }
        }
        for j in 1..m {
            assert_eq!(preds[&(j as u64)], 1 + want.gated_by[j], "{}: what main turn {j} waits for", s["id"]);
        }
        subagents += want.spawned.iter().sum::<usize>();
    }
    assert!(subagents >= 10, "the fixture exercises subagents ({subagents})");
}

/// A deployment whose KV cache holds every block of the corpus (a
/// `custom` server: no datasheet bounds its memory).
const UNBOUNDED_KV: &str = "\
name: large-kv
model: Llama-3.1-8B
hardware: custom
engine:
  max_num_seqs: 64
  max_num_batched_tokens: 8192
  block_size: 16
  num_gpu_blocks: 400000
latency_model: {kind: linear, beta: [1000, 2, 10]}
";

fn metrics(dir: &Dir, scenario: &str, extra: &[&str]) -> Value {
    let base = ["run", "-q", "-s", scenario, "--input", "weka:w.jsonl", "--session-rate", "0.05", "-o", "r.jsonl"];
    TestCommand::new(&dir.path, &[&base[..], &["--metrics", "m.json"], extra].concat()).stdout();
    serde_json::from_str(&dir.read("m.json")).unwrap()
}

#[test]
fn an_unbounded_cache_hits_what_the_hash_ids_reuse() {
    let dir = Dir::new("weka-hits");
    dir.create("w.jsonl", SESSIONS);
    dir.create("s.yaml", UNBOUNDED_KV);
    let path = dir.join("w.jsonl");
    for (drop, extra) in [(false, &[][..]), (true, &["--drop-subagents"][..])] {
        let reuse = blis_sweep::workload::import::weka::block_reuse(&path, drop).unwrap();
        let m = metrics(&dir, "s.yaml", extra);
        let hit = m["kv_cache_hit_rate"].as_f64().unwrap();
        // vLLM recomputes a fully cached prompt's last token and caches in
        // 16-token blocks of 64-token hashes: a hair under the ids' reuse.
        assert!(reuse > 0.5, "the fixture reuses its prefixes ({reuse})");
        assert!((hit - reuse).abs() < 0.01, "drop {drop}: simulated hit rate {hit} vs the hash ids' reuse {reuse}");
        assert_eq!(m["preemptions"].as_u64().unwrap_or(0), 0);
    }
}

/// Llama-3.1-8B on one H100 with its full KV cache (the sessions' prompts
/// reach 85k tokens).
pub(crate) const H100_8B: &str = "\
name: h100-8b
model: Llama-3.1-8B
hardware: H100
engine:
  max_num_seqs: 64
  max_num_batched_tokens: 8192
latency_model: {kind: linear, beta: [5000, 60, 300]}
";

/// Mean TTFT of the main agent's calls (nodes before the first subagent
/// node: the main turns come first), µs.
fn main_ttft_us(results: &str, main_turns: &[usize]) -> f64 {
    let (mut sum, mut n) = (0u64, 0u64);
    for (r, &m) in rows(results).iter().zip(main_turns) {
        for node in 0..m {
            sum += latencies_us(r, node)[0];
            n += 1;
        }
    }
    sum as f64 / n as f64
}

#[test]
fn dropping_subagents_under_loads_the_deployment() {
    let dir = Dir::new("weka-drop");
    dir.create("w.jsonl", SESSIONS);
    dir.create("s.yaml", H100_8B);
    let mains: Vec<usize> = rows(SESSIONS).iter().map(|s| expected(s).spawned.len()).collect();
    let run = |extra: &[&str]| {
        let args = ["run", "-q", "-s", "s.yaml", "--input", "weka:w.jsonl", "--session-rate", "1", "-o", "r.jsonl"];
        TestCommand::new(&dir.path, &[&args[..], &["--metrics", "m.json"], extra].concat()).stdout();
        let m: Value = serde_json::from_str(&dir.read("m.json")).unwrap();
        (m, main_ttft_us(&dir.read("r.jsonl"), &mains))
    };
    let (with, with_ttft) = run(&[]);
    let (without, without_ttft) = run(&["--drop-subagents"]);
    let f = |m: &Value, k: &str| m[k].as_f64().unwrap();
    assert!(f(&without, "total_input_tokens") < f(&with, "total_input_tokens") * 0.95);
    assert!(f(&without, "total_output_tokens") < f(&with, "total_output_tokens"));
    // The same main-agent calls wait less without their subagents' load.
    assert!(without_ttft < with_ttft, "main-agent TTFT {without_ttft} µs without subagents, {with_ttft} µs with");
}

#[test]
fn aiperfs_fixtures_replay_as_a_folder() {
    let dir = Dir::new("weka-folder");
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import/weka/aiperf");
    let input = format!("weka:{}", from.display());
    TestCommand::new(
        &dir.path,
        &["import", "weka", &from.display().to_string(), "-o", "w.jsonl", "--session-rate", "1"],
    )
    .stdout();
    let r = rows(&dir.read("w.jsonl"));
    // Sorted by file name: one_subagent.json, terminal_subagent.json.
    assert_eq!((r[0]["request_id"].as_str(), r[1]["request_id"].as_str()), (Some("trace_sa"), Some("trace_term")));
    let next =
        |r: &Value| -> Vec<Value> { r["sub_requests"].as_array().unwrap().iter().map(|n| n["next"].clone()).collect() };
    // trace_sa: turn 0 spawns the subagent (node 2), which gates turn 1
    // (sent at 6 s, after its end at 2.5 s); it waits 3.5 s after that end.
    assert_eq!(next(&r[0]), vec![serde_json::json!([1, 2]), serde_json::json!([]), serde_json::json!([1])]);
    assert_eq!(r[0]["sub_requests"][1]["interval"], 3.5);
    let dir2 = Dir::new("weka-folder-capped");
    let args = ["import", "weka", &from.display().to_string(), "-o", "w.jsonl", "--session-rate", "1"];
    TestCommand::new(&dir2.path, &[&args[..], &["--max-think-time", "1"]].concat()).stdout();
    assert_eq!(rows(&dir2.read("w.jsonl"))[0]["sub_requests"][1]["interval"], 1.0, "capped at --max-think-time");
    // trace_term: the subagent outlives the main agent's last turn.
    assert_eq!(next(&r[1]), vec![serde_json::json!([1]), serde_json::json!([])]);
    dir.create("s.yaml", LINEAR_SCENARIO);
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "s.yaml", "--input", &input, "--session-rate", "1", "-o", "r.jsonl"],
    )
    .stdout();
    assert_eq!(rows(&dir.read("r.jsonl")).len(), 2);
}

#[test]
fn bad_sessions_are_named_by_file_line_and_field() {
    let dir = Dir::new("weka-bad");
    let first = SESSIONS.lines().next().unwrap();
    dir.create(
        "w.jsonl",
        &format!("{first}\n\n{}\n", first.replacen("\"in\":", "\"in\":-", 1).replace("session_0000", "x")),
    );
    let err =
        TestCommand::new(&dir.path, &["import", "weka", "w.jsonl", "-o", "o.jsonl", "--session-rate", "1"]).fails();
    assert!(err.contains("w.jsonl:3: requests[0].in: "), "{err}");
    assert!(!dir.join("o.jsonl").exists(), "no half-written output");
    let err = TestCommand::new(&dir.path, &["import", "weka", "w.jsonl", "-o", "o.jsonl"]).fails();
    assert!(err.contains("--session-rate"), "{err}");
    dir.create("d.jsonl", &format!("{first}\n{first}\n"));
    let err =
        TestCommand::new(&dir.path, &["import", "weka", "d.jsonl", "-o", "o.jsonl", "--session-rate", "1"]).fails();
    assert!(err.contains("session_0000") && err.contains("repeats"), "{err}");
}

#[test]
fn a_plan_imports_a_folder_of_sessions() {
    let dir = Dir::new("weka-plan-folder");
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import/weka/aiperf");
    dir.create("s.yaml", LINEAR_SCENARIO);
    let plan = format!(
        "name: f\nworkload: {{import: weka, path: {}, session_rate: 1}}\nscenarios: [s.yaml]\noutput: out\n",
        from.display()
    );
    dir.create("plan.yaml", &plan);
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let runs = crate::parquet_util::read_columns(&dir.join("out/runs.parquet"), &["status", "completed_requests"]);
    assert_eq!(runs, vec![vec!["ok".to_owned(), "2".to_owned()]]);
}
