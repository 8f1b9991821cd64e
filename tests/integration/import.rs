//! Importers end to end on the small fixtures in `tests/data/import/`: hand-
//! checked arrivals, DAGs and prefix-cache hits, `import` then `run` equal to
//! `run --input`, sweeps over an imported trace, and bad rows named by file,
//! line and column.

use crate::parquet_util::read_columns;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

const MOONCAKE: &str = include_str!("../data/import/mooncake.jsonl");
const AZURE: &str = include_str!("../data/import/azure.csv");
const AGENTS: &str = include_str!("../data/import/agent_calls.csv");
const CHAT_200: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// Admissions of the step trace: (request id, cached tokens).
fn admissions(trace: &str) -> Vec<(u64, u64)> {
    rows(trace)
        .iter()
        .flat_map(|s| s["admitted"].as_array().unwrap().clone())
        .map(|a| (a["request_id"].as_u64().unwrap(), a["cached_tokens"].as_u64().unwrap()))
        .collect()
}

#[test]
fn mooncake_blocks_share_kv_where_the_trace_shares_ids() {
    let dir = Dir::new("import-mooncake");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.jsonl", MOONCAKE);
    let args = ["run", "-q", "-s", "s.yaml", "--input", "mooncake:t.jsonl", "-o", "r.jsonl", "--metrics", "m.json"];
    TestCommand::new(&dir.path, &[&args[..], &["--step-trace", "steps.jsonl"]].concat()).stdout();
    let results = rows(&dir.read("r.jsonl"));
    let arrivals: Vec<f64> = results.iter().map(|r| r["arrival_time"].as_f64().unwrap()).collect();
    assert_eq!(arrivals, [0.0, 2.0, 2.5, 4.0]);
    // Result rows do not expand the blocks into token ids.
    assert!(results[0]["sub_requests"][0].get("input_token_ids").is_none());
    // Request 1 repeats blocks 1, 2 (1,024 tokens); request 2 only block 1
    // (512); request 3 nothing. (Each arrives after the one before left.)
    assert_eq!(admissions(&dir.read("steps.jsonl")), [(0, 0), (1, 1024), (2, 512), (3, 0)]);
    // The same trace written as workload JSONL runs the same.
    let out = TestCommand::new(&dir.path, &["import", "mooncake", "t.jsonl", "-o", "w.jsonl"]).output();
    assert!(out.status.success());
    let note = String::from_utf8_lossy(&out.stderr);
    // 8 ids, 3 seen before (1 and 2 in row 1, 1 in row 2).
    assert!(note.contains("block reuse: 37.5 %"), "{note}");
    let written = rows(&dir.read("w.jsonl"));
    assert_eq!(written[1]["sub_requests"][0]["input_token_ids"].as_array().unwrap().len(), 1100);
    let direct = dir.read("m.json");
    TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r2.jsonl", "--metrics", "m.json"])
        .stdout();
    assert_eq!(dir.read("m.json"), direct);
}

#[test]
fn azure_rows_arrive_at_their_timestamps() {
    let dir = Dir::new("import-azure");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.csv", AZURE);
    TestCommand::new(&dir.path, &["import", "azure", "t.csv", "-o", "w.jsonl"]).output();
    let w = rows(&dir.read("w.jsonl"));
    let got: Vec<(f64, u64, u64)> = w
        .iter()
        .map(|r| {
            let n = &r["sub_requests"][0];
            (
                r["arrival_time"].as_f64().unwrap(),
                n["input_tokens"].as_u64().unwrap(),
                n["output_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    // 18:15:46.6805900 is the origin; .0000004 rounds to the microsecond.
    assert_eq!(got, [(0.0, 374, 44), (4.314579, 396, 109), (4.31941, 20, 1), (13.31941, 1200, 7)]);
    TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "--input", "azure:t.csv", "-o", "r.jsonl"]).stdout();
    assert_eq!(rows(&dir.read("r.jsonl")).len(), 4);
}

#[test]
fn agent_sessions_become_dags_or_timed_calls() {
    let dir = Dir::new("import-agents");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.csv", AGENTS);
    let import = |mode: &str| {
        TestCommand::new(
            &dir.path,
            &["import", "agent-calls", "t.csv", "-o", "w.jsonl", "--session-rate", "0.1", "--session-mode", mode],
        )
        .output();
        rows(&dir.read("w.jsonl"))
    };
    let dags = import("closed-loop");
    assert_eq!(dags.len(), 2);
    assert_eq!(dags[0]["arrival_time"], 0.0);
    // Three calls with tool time between: L0 → T0 → L1 → T1 → L2.
    let s1 = dags[0]["sub_requests"].as_array().unwrap();
    let kinds: Vec<&str> = s1.iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["llm", "llm", "tool_call", "llm", "tool_call"]);
    assert_eq!((s1[0]["next"].clone(), s1[2]["next"].clone()), (serde_json::json!([2]), serde_json::json!([1])));
    // 1.0 s after call 0 was sent, less its estimated 0.2 + 10 × 0.005 s.
    assert_eq!(s1[2]["duration"], 0.75);
    // Call 1's prompt: call 0's prompt, its output, then 140 new tokens.
    let ids = |n: &serde_json::Value, k: &str| -> Vec<u64> {
        n[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
    };
    let p1 = ids(&s1[1], "input_token_ids");
    assert_eq!(p1.len(), 250);
    assert_eq!(p1[..100], ids(&s1[0], "input_token_ids")[..]);
    assert_eq!(p1[100..110], ids(&s1[0], "output_token_ids")[..]);
    // A reply with no text is one token.
    assert_eq!(s1[3]["output_tokens"], 1);
    // Magentic-One: call 1 was sent 0.1 s after call 0, without its output:
    // a second root; call 2 (prompt not recorded: call 1's context) joins both.
    let m1 = dags[1]["sub_requests"].as_array().unwrap();
    assert_eq!(dags[1]["initial"], serde_json::json!([0, 1]));
    assert_eq!(m1[1]["interval"], 0.1);
    assert_eq!(m1[2]["input_tokens"], 70);
    let into_call2: Vec<&serde_json::Value> = m1.iter().filter(|n| n["next"] == serde_json::json!([2])).collect();
    assert_eq!(into_call2.len(), 2);
    assert!(into_call2.iter().all(|n| n["kind"] == "tool_call"));
    // Fixed-accumulate: six one-call requests in arrival order, each at its
    // session's start plus its recorded offset.
    let calls = import("fixed-accumulate");
    assert_eq!(calls.len(), 6);
    let arrivals: Vec<f64> = calls.iter().map(|r| r["arrival_time"].as_f64().unwrap()).collect();
    assert!(arrivals.windows(2).all(|w| w[0] <= w[1]), "{arrivals:?}");
    let m_start = dags[1]["arrival_time"].as_f64().unwrap();
    for offset in [0.0, 0.1, 5.0] {
        assert!(arrivals.iter().any(|a| (a - (m_start + offset)).abs() < 1e-6), "{offset} in {arrivals:?}");
    }
    // Run as DAGs, call 1 finds call 0's prompt and output in the cache.
    let args = ["run", "-q", "-s", "s.yaml", "--input", "agent-calls:t.csv", "--session-rate", "0.1", "-o", "r.jsonl"];
    TestCommand::new(&dir.path, &[&args[..], &["--step-trace", "steps.jsonl"]].concat()).stdout();
    let cached: Vec<u64> = admissions(&dir.read("steps.jsonl")).iter().filter(|a| a.0 == 0).map(|a| a.1).collect();
    // (Blocks of 16: 110 shared tokens are 6 full blocks; then 255 → 15.)
    assert_eq!(cached, [0, 96, 240]);
}

#[test]
fn bad_rows_name_file_line_and_column() {
    let dir = Dir::new("import-bad");
    dir.create("s.yaml", LINEAR_SCENARIO);
    let cases = [
        (
            "mooncake",
            "m.jsonl",
            MOONCAKE.replace("\"hash_ids\": [1, 2, 3]", "\"hash_ids\": [1, 2]"),
            "m.jsonl:2: hash_ids: ",
        ),
        (
            "mooncake",
            "m.jsonl",
            MOONCAKE.replace("\"timestamp\": 4000", "\"timestamp\": 100"),
            "m.jsonl:4: timestamp: ",
        ),
        ("azure", "a.csv", AZURE.replace(",109", ",x"), "a.csv:3: GeneratedTokens: "),
        ("azure", "a.csv", AZURE.replace("18:16:00", "18:15:00"), "a.csv:5: TIMESTAMP: "),
        (
            "agent-calls",
            "g.csv",
            AGENTS.replace("s1,miniswe/s1.jsonl,2,", "s1,miniswe/s1.jsonl,3,"),
            "g.csv:4: call_index: ",
        ),
        ("agent-calls", "g.csv", AGENTS.replace(",1,1,250,", ",1,2,250,"), "g.csv:3: prev_output_appears_in_input: "),
    ];
    bad_rows_are_named(&dir, &cases);
    // TraceV2: a bad value in the data, an unknown key in the header.
    dir.create("t.yaml", TRACE_HEADER);
    dir.create("t.csv", &TRACE_DATA.replace("s1,1,g1,64,true,20,", "s1,1,g1,64,true,x,"));
    let err =
        TestCommand::new(&dir.path, &["import", "tracev2", "t.yaml", "-o", "w.jsonl", "--session-mode", "closed-loop"])
            .fails();
    assert!(err.starts_with("blis-sweep: t.csv:3: input_tokens: `x` is not an integer"), "{err}");
    dir.create("t.yaml", &TRACE_HEADER.replace("warm_up_requests: 0", "warmup_requests: 0"));
    let err = TestCommand::new(&dir.path, &["import", "tracev2", "t.yaml", "-o", "w.jsonl"]).fails();
    assert!(err.starts_with("blis-sweep: t.yaml:5: header: unknown field `warmup_requests`"), "{err}");
    assert!(!dir.join("w.jsonl").exists());
    let err =
        TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "--input", "agent-calls:g.csv", "-o", "r.jsonl"]).fails();
    assert!(err.contains("session_rate"), "{err}");
    let err = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "--input", "nosuch:x", "-o", "r.jsonl"]).fails();
    assert!(err.contains("unknown format `nosuch`; available: mooncake, azure, agent-calls, tracev2"), "{err}");
}

#[test]
fn a_sweep_runs_over_an_imported_trace() {
    let dir = Dir::new("import-sweep");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.csv", AGENTS);
    dir.create(
        "plan.yaml",
        "name: t\nworkload: {import: agent-calls, path: t.csv, session_rate: 0.5, session_mode: fixed-accumulate}\n\
         scenarios: [s.yaml]\ngrid:\n  seed: [1, 2]\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let rows = read_columns(&dir.join("out/runs.parquet"), &["seed", "completed_requests"]);
    assert_eq!(rows, [["1", "6"], ["2", "6"]]);
    dir.create("bad.yaml", "name: t\nworkload: {path: t.csv, session_rate: 1}\nscenarios: [s.yaml]\noutput: out2\n");
    let err = TestCommand::new(&dir.path, &["-q", "bad.yaml"]).fails();
    assert!(err.contains("bad.yaml:2: workload.session_rate: only an imported trace"), "{err}");
}

const TRACE_HEADER: &str = include_str!("../data/import/trace.yaml");
const TRACE_DATA: &str = include_str!("../data/import/trace.csv");
/// `run` replaying the fixture closed-loop (`t.yaml`, `t.csv`, `s.yaml`).
const REPLAY_CLOSED: [&str; 10] =
    ["run", "-q", "-s", "s.yaml", "--trace-header", "t.yaml", "--trace-data", "t.csv", "--session-mode", "closed-loop"];

/// (request id, arrival, prompt length of each llm node, intervals).
fn shape(rows: &[serde_json::Value]) -> Vec<(u64, f64, Vec<u64>, Vec<f64>)> {
    rows.iter()
        .map(|r| {
            let nodes = r["sub_requests"].as_array().unwrap();
            (
                r["request_id"].as_u64().unwrap(),
                r["arrival_time"].as_f64().unwrap(),
                nodes.iter().map(|n| n["input_tokens"].as_u64().unwrap()).collect(),
                nodes.iter().map(|n| n["interval"].as_f64().unwrap()).collect(),
            )
        })
        .collect()
}

#[test]
fn a_tracev2_written_from_the_spec_replays_as_blis_replay_builds_it() {
    let dir = Dir::new("import-tracev2");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.yaml", TRACE_HEADER);
    dir.create("t.csv", TRACE_DATA);
    let import = |mode: &str| {
        TestCommand::new(&dir.path, &["import", "tracev2", "t.yaml", "-o", "w.jsonl", "--session-mode", mode]).output();
        rows(&dir.read("w.jsonl"))
    };
    // Closed loop: session s1 is one chain; records 3 and 4 stand alone.
    // Record 4 is sent at its send time; with no group its prompt is its
    // server_input_tokens. s1's prompts: group prefix 64 + 36; then that,
    // its 8 outputs and a 20-token delta; then re-seeded at 80 (compaction).
    // Round 1 waits its recorded think time, round 2 its recorded 0: as
    // BLIS's replay.go (`sessionHasRecordedThinkTime`), a session with a
    // recorded think time keeps its zeros; only a session with none falls
    // back to the gaps between arrivals.
    let closed = import("closed-loop");
    assert_eq!(
        shape(&closed),
        [
            (4, 0.5, vec![12], vec![0.0]),
            (0, 1.0, vec![100, 128, 80], vec![0.0, 0.5, 0.0]),
            (3, 2.0, vec![114], vec![0.0])
        ]
    );
    // Round 1's prompt is round 0's prompt and output, then new tokens;
    // round 2 keeps only the group prefix; record 3 shares the group prefix.
    let ids = |r: usize, n: usize, k: &str| -> Vec<u64> {
        closed[r]["sub_requests"][n][k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
    };
    let (p0, o0, p1, p2, p3) = (
        ids(1, 0, "input_token_ids"),
        ids(1, 0, "output_token_ids"),
        ids(1, 1, "input_token_ids"),
        ids(1, 2, "input_token_ids"),
        ids(2, 0, "input_token_ids"),
    );
    assert_eq!(p1[..100], p0[..]);
    assert_eq!(p1[100..108], o0[..]);
    assert_eq!(p2[..64], p0[..64]);
    assert_ne!(p2[64..], p1[64..80]);
    assert_eq!(p3[..64], p0[..64]);
    assert_ne!(p3[64..], p0[64..]);
    // Fixed-accumulate: every record at its own time, the same prompts.
    let fixed = import("fixed-accumulate");
    let got: Vec<(u64, f64, Vec<u64>, Vec<f64>)> = shape(&fixed);
    assert_eq!(
        got,
        [
            (4, 0.5, vec![12], vec![0.0]),
            (0, 1.0, vec![100], vec![0.0]),
            (3, 2.0, vec![114], vec![0.0]),
            (1, 3.0, vec![128], vec![0.0]),
            (2, 6.0, vec![80], vec![0.0])
        ]
    );
    // An accumulate corpus holds deltas: fixed replay is refused.
    let err =
        TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "--trace-header", "t.yaml", "--trace-data", "t.csv"])
            .fails();
    assert!(err.contains("t.yaml: session_context_growth: an accumulate corpus"), "{err}");
    // Replayed closed loop: the prefix cache finds round 0's prompt and
    // output (108 tokens, 6 full blocks) for round 1, and the group prefix
    // (4 blocks) for record 3 and for the compacted round. (The default
    // horizon, as blis replay's, is twice the last round-0 arrival, 4 s;
    // round 2, sent at once after round 1 — its recorded think time is 0 —
    // reaches it.)
    let args = REPLAY_CLOSED;
    TestCommand::new(&dir.path, &[&args[..], &["-o", "r.jsonl", "--step-trace", "steps.jsonl"]].concat()).stdout();
    assert_eq!(admissions(&dir.read("steps.jsonl")), [(4, 0), (0, 0), (0, 96), (0, 64), (3, 64)]);
    TestCommand::new(
        &dir.path,
        &[&args[..], &["--horizon", "100", "-o", "r.jsonl", "--step-trace", "steps.jsonl"]].concat(),
    )
    .stdout();
    assert_eq!(admissions(&dir.read("steps.jsonl")), [(4, 0), (0, 0), (0, 96), (0, 64), (3, 64)]);
}

#[test]
fn a_run_written_as_tracev2_replays_to_the_same_metrics() {
    let dir = Dir::new("import-tracev2-roundtrip");
    dir.create("s.yaml", LINEAR_SCENARIO);
    // Token ids cannot travel in a trace: the workload has none.
    let chat: String = crate::util::rows(CHAT_200)
        .into_iter()
        .map(|mut r| {
            for n in r["sub_requests"].as_array_mut().unwrap() {
                n.as_object_mut().unwrap().retain(|k, _| !k.ends_with("token_ids"));
            }
            format!("{r}\n")
        })
        .collect();
    // And a session: llm, a tool call, llm after a pause.
    let session = r#"{"request_id":900,"arrival_time":3.0,"initial":[0],"sub_requests":[{"kind":"llm","input_tokens":300,"output_tokens":20,"next":[1]},{"kind":"tool_call","input_tokens":0,"output_tokens":0,"duration":0.25,"next":[2]},{"kind":"llm","input_tokens":400,"output_tokens":30,"next":[],"interval":0.5}]}"#;
    let mut lines: Vec<String> = chat.lines().map(str::to_owned).collect();
    let at = lines.iter().position(|l| rows(l)[0]["arrival_time"].as_f64().unwrap() > 3.0).unwrap();
    lines.insert(at, session.to_owned());
    dir.create("w.jsonl", &(lines.join("\n") + "\n"));
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "--trace-output", "t"],
    )
    .stdout();
    assert!(dir.read("t.yaml").contains("mode: generated"));
    let data = dir.read("t.csv");
    assert_eq!(data.lines().count(), 1 + 200 + 2);
    // The session's second round waited the tool call and the interval.
    let round1 = data.lines().find(|l| l.contains(",900,1,")).unwrap();
    assert!(round1.contains(",750000,"), "{round1}");
    TestCommand::new(
        &dir.path,
        &[&REPLAY_CLOSED[..], &["-o", "r2.jsonl", "--metrics", "m2.json", "--trace-output", "t2"]].concat(),
    )
    .stdout();
    let metrics = |name: &str| -> serde_json::Value { serde_json::from_str(&dir.read(name)).unwrap() };
    let (a, b) = (metrics("m.json"), metrics("m2.json"));
    for key in [
        "ttft_mean_ms",
        "ttft_p99_ms",
        "itl_mean_ms",
        "itl_p99_ms",
        "e2e_mean_ms",
        "e2e_p99_ms",
        "completed_requests",
        "engine_steps",
    ] {
        assert_eq!(a[key], b[key], "{key}");
    }
    assert!(dir.read("t2.yaml").contains("mode: replayed"));
    // Our calibrate reads it as BLIS's does: the replay against the trace.
    TestCommand::new(
        &dir.path,
        &[
            "calibrate",
            "--trace-header",
            "t.yaml",
            "--trace-data",
            "t.csv",
            "--sim",
            "r2.jsonl",
            "--report",
            "rep.json",
        ],
    )
    .output();
    let report: serde_json::Value = serde_json::from_str(&dir.read("rep.json")).unwrap();
    // (Every record but the session's second round, which the replay runs
    // as a node of the first's request.)
    assert_eq!(report["trace_info"]["matched_pairs"], 201, "{}", report["trace_info"]);
    // A DAG that forks (two roots) and joins (into a tool call that ends
    // it) is a session whose round 0 carries the DAG: replayed as it ran.
    dir.create("fork.jsonl", r#"{"request_id":0,"arrival_time":0.0,"initial":[0,1],"sub_requests":[{"kind":"llm","input_tokens":30,"output_tokens":2,"next":[2]},{"kind":"llm","input_tokens":30,"output_tokens":2,"next":[2],"interval":0.1},{"kind":"tool_call","input_tokens":0,"output_tokens":0,"duration":0.25,"next":[]}]}
"#);
    let fork = ["run", "-q", "-s", "s.yaml"];
    TestCommand::new(
        &dir.path,
        &[&fork[..], &["fork.jsonl", "-o", "f.jsonl", "--metrics", "f.json", "--trace-output", "f"]].concat(),
    )
    .stdout();
    assert!(dir.read("f.csv").contains(",r0>2;r1+100000>2;t250000\n"), "{}", dir.read("f.csv"));
    let replay = ["--trace-header", "f.yaml", "--trace-data", "f.csv", "--session-mode", "closed-loop"];
    TestCommand::new(&dir.path, &[&fork[..], &replay[..], &["-o", "f2.jsonl", "--metrics", "f2.json"]].concat())
        .stdout();
    let (a, b) = (metrics("f.json"), metrics("f2.json"));
    for key in ["ttft_mean_ms", "itl_mean_ms", "e2e_mean_ms", "completed_requests"] {
        assert_eq!(a[key], b[key], "{key}");
    }
    let replayed = &rows(&dir.read("f2.jsonl"))[0];
    assert_eq!(replayed["initial"], serde_json::json!([0, 1]));
    let nodes = replayed["sub_requests"].as_array().unwrap();
    assert_eq!(
        nodes.iter().map(|n| n["next"].clone()).collect::<Vec<_>>(),
        [serde_json::json!([2]), serde_json::json!([2]), serde_json::json!([])]
    );
    assert_eq!((nodes[1]["interval"].as_f64(), nodes[2]["duration"].as_f64()), (Some(0.1), Some(0.25)));
}

#[test]
fn workload_parameters_are_grid_axes() {
    let dir = Dir::new("import-workload-axes");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.csv", AGENTS);
    dir.create(
        "plan.yaml",
        "name: t\nworkload: {import: agent-calls, path: t.csv, session_rate: 0.5}\nscenarios: [s.yaml]\n\
         grid:\n  overrides:\n    workload.session_rate: [0.01, 100]\n    workload.session_mode: [closed-loop, fixed-accumulate]\n\
         output: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let runs = read_columns(&dir.join("out/runs.parquet"), &["overrides", "completed_requests", "sim_duration_ms"]);
    assert_eq!(runs[0][0], r#"{"workload_session_mode":"closed-loop","workload_session_rate":0.01}"#);
    let completed: Vec<&str> = runs.iter().map(|r| r[1].as_str()).collect();
    // (Keys in order: mode, then rate.) Sessions are whole requests
    // closed-loop, calls fixed-accumulate.
    assert_eq!(completed, ["2", "2", "6", "6"], "{runs:?}");
    // At 0.01 sessions/s the second session starts long after the first.
    let span = |i: usize| runs[i][2].parse::<f64>().unwrap();
    assert!(span(0) > 5.0 * span(1) && span(2) > 5.0 * span(3), "{runs:?}");
    // A generated workload's rate, too.
    dir.create(
        "gen.yaml",
        "name: g\nworkload: {generate: {preset: chatbot, rate: 5, num_requests: 40}}\nscenarios: [s.yaml]\n\
         grid:\n  overrides:\n    workload.generate.rate: [5, 50]\noutput: out-gen\n",
    );
    let ids = TestCommand::new(&dir.path, &["plan", "gen.yaml"]).stdout();
    assert!(ids.contains("2 runs") && ids.contains("workload.generate.rate"), "{ids}");
    TestCommand::new(&dir.path, &["-q", "gen.yaml"]).stdout();
    let runs = read_columns(&dir.join("out-gen/runs.parquet"), &["overrides", "sim_duration_ms"]);
    assert_eq!(runs[0][0], r#"{"workload_generate_rate":5}"#);
    let (slow, fast) = (runs[0][1].parse::<f64>().unwrap(), runs[1][1].parse::<f64>().unwrap());
    assert!(slow > 5.0 * fast, "{runs:?}");
    // Only parameters vary: not the file.
    dir.create(
        "bad.yaml",
        "name: b\nworkload: {path: t.csv}\nscenarios: [s.yaml]\ngrid:\n  overrides:\n    workload.path: [a, b]\noutput: o\n",
    );
    let err = TestCommand::new(&dir.path, &["-q", "bad.yaml"]).fails();
    assert!(err.contains("grid.overrides.workload.path: only workload.generate.*"), "{err}");
}

#[test]
fn a_pool_of_sessions_admits_n_at_a_time_and_clones_the_corpus() {
    let dir = Dir::new("import-tracev2-pool");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.yaml", TRACE_HEADER);
    dir.create("t.csv", TRACE_DATA);
    let pool = ["--concurrent-sessions", "1", "--total-sessions", "5"];
    TestCommand::new(&dir.path, &[&["import", "tracev2", "t.yaml", "-o", "w.jsonl"][..], &pool].concat()).output();
    let w = rows(&dir.read("w.jsonl"));
    // The corpus (record 4, session s1, record 3, in arrival order), then
    // clones; all sent at once, renumbered.
    assert_eq!(
        shape(&w),
        [
            (0, 0.0, vec![12], vec![0.0]),
            (1, 0.0, vec![100, 128, 80], vec![0.0, 0.5, 0.0]),
            (2, 0.0, vec![114], vec![0.0]),
            (3, 0.0, vec![12], vec![0.0]),
            (4, 0.0, vec![100, 128, 80], vec![0.0, 0.5, 0.0])
        ]
    );
    // A clone has fresh tokens but its group prefix.
    let ids = |r: usize| -> Vec<u64> {
        w[r]["sub_requests"][0]["input_token_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
    };
    assert_eq!(ids(4)[..64], ids(1)[..64]);
    assert_ne!(ids(4)[64..], ids(1)[64..]);
    // Replayed with one session at a time: each is sent when the one before
    // finished (the result rows' arrival_time is the send).
    TestCommand::new(
        &dir.path,
        &[
            &["run", "-q", "-s", "s.yaml", "--trace-header", "t.yaml", "--trace-data", "t.csv", "-o", "r.jsonl"][..],
            &pool,
        ]
        .concat(),
    )
    .stdout();
    let sent: Vec<f64> = rows(&dir.read("r.jsonl")).iter().map(|r| r["arrival_time"].as_f64().unwrap()).collect();
    assert_eq!(sent.len(), 5);
    assert!(sent.windows(2).all(|s| s[1] > s[0]), "{sent:?}");
    // Shuffled, the order changes and stays the same for a seed.
    let order = |seed: &str| {
        TestCommand::new(
            &dir.path,
            &[&["import", "tracev2", "t.yaml", "-o", "w.jsonl", "--shuffle-corpus", "--seed", seed][..], &pool]
                .concat(),
        )
        .output();
        shape(&rows(&dir.read("w.jsonl"))).into_iter().map(|s| s.2).collect::<Vec<_>>()
    };
    assert_eq!(order("7"), order("7"));
    assert!(
        (0..20).map(|s| order(&s.to_string())).any(|o| o != shape(&w).into_iter().map(|s| s.2).collect::<Vec<_>>())
    );
}

#[test]
fn a_plan_sweeps_the_size_of_a_session_pool() {
    let dir = Dir::new("import-pool-sweep");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.yaml", TRACE_HEADER);
    dir.create("t.csv", TRACE_DATA);
    dir.create(
        "plan.yaml",
        "name: p\nworkload: {import: tracev2, path: t.yaml, concurrent_sessions: 1, total_sessions: 6}\n\
         scenarios: [s.yaml]\ngrid:\n  overrides:\n    workload.concurrent_sessions: [1, 6]\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let runs = read_columns(
        &dir.join("out/runs.parquet"),
        &["overrides", "completed_requests", "send_wait_mean_ms", "sim_duration_ms"],
    );
    assert_eq!(runs.iter().map(|r| r[1].as_str()).collect::<Vec<_>>(), ["6", "6"]);
    // One at a time, sessions wait to be sent; six at once, none does.
    let wait = |i: usize| runs[i][2].parse::<f64>().unwrap();
    assert!(wait(0) > 0.0 && wait(1) == 0.0, "{runs:?}");
    dir.create(
        "bad.yaml",
        "name: b\nworkload: {import: tracev2, path: t.yaml, concurrent_sessions: 2}\nscenarios: [s.yaml]\n\
         grid:\n  concurrency: [4]\noutput: o\n",
    );
    let err = TestCommand::new(&dir.path, &["-q", "bad.yaml"]).fails();
    assert!(err.contains("grid.concurrency: a pool of concurrent_sessions"), "{err}");
}

/// Each (format, file, text, message prefix): the text as that file, run
/// with `--input FORMAT:FILE` on `s.yaml`, fails with one line starting
/// `blis-sweep: PREFIX` and writes no results.
pub(crate) fn bad_rows_are_named(dir: &Dir, cases: &[(&str, &str, String, &str)]) {
    for (format, file, text, prefix) in cases {
        dir.create(file, text);
        let input = format!("{format}:{file}");
        let err = TestCommand::new(
            &dir.path,
            &["run", "-s", "s.yaml", "--input", &input, "--session-rate", "1", "-o", "r.jsonl"],
        )
        .fails();
        assert!(err.starts_with(&format!("blis-sweep: {prefix}")), "{format}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!dir.join("r.jsonl").exists());
    }
}
