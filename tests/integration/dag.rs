//! DAG timing end to end: fan-out, fan-in, a tool call and intervals,
//! reconstructed to absolute times by `blis-sweep results`.

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

/// Arrives at 1.0 s. Node 0 (llm, 10 in / 2 out) starts after a 0.5 s
/// interval; it fans out to node 1 (tool call, 0.25 s, after 0.1 s) and node 2
/// (tool call, 0.05 s); both fan in to node 3 (llm, 20 in / 3 out, 0.01 s
/// after the later of them).
const DAG: &str = r#"{"request_id": "agent-1", "arrival_time": 1.0, "initial": [0], "sub_requests": [
{"kind": "llm", "input_tokens": 10, "output_tokens": 2, "next": [1, 2], "interval": 0.5},
{"kind": "tool_call", "input_tokens": 0, "output_tokens": 0, "next": [3], "interval": 0.1, "duration": 0.25},
{"kind": "tool_call", "input_tokens": 0, "output_tokens": 0, "next": [3], "duration": 0.05},
{"kind": "llm", "input_tokens": 20, "output_tokens": 3, "next": [], "interval": 0.01}]}"#;

#[test]
fn results_reconstructs_hand_computed_token_times() {
    let dir = Dir::new("dag");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &(DAG.replace('\n', "") + "\n"));
    TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "-q"])
        .stdout();
    let csv = TestCommand::new(&dir.path, &["results", "r.jsonl"]).stdout();
    // Node 0 starts at 1.5 s: prefill 1000 + 2·10 = 1020 µs, decode 1010 µs.
    // It ends at 1.502030; node 1 runs 1.602030–1.852030, node 2
    // 1.502030–1.552030; node 3 starts at 1.852030 + 0.01 = 1.862030:
    // prefill 1000 + 2·20 = 1040 µs, then two decodes of 1010 µs.
    let expected = "request_id,node,token_index,time_s,replica\n\
                    agent-1,0,0,1.501020,\n\
                    agent-1,0,1,1.502030,\n\
                    agent-1,3,0,1.863070,\n\
                    agent-1,3,1,1.864080,\n\
                    agent-1,3,2,1.865090,\n";
    assert_eq!(csv, expected);
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert_eq!(m["e2e_mean_ms"], 865.09);
    assert_eq!(m["completed_requests"], 1);
    // The tool calls carry no token_latency; the llm nodes do.
    let row = &rows(&dir.read("r.jsonl"))[0];
    assert!(row["sub_requests"][1].get("token_latency").is_none());
    assert_eq!(row["sub_requests"][3]["token_latency"].as_array().unwrap().len(), 3);
}

#[test]
fn results_rejects_an_inconsistent_file() {
    let dir = Dir::new("dag-bad");
    let bad = r#"{"request_id": 0, "arrival_time": 0.0, "initial": [0], "sub_requests": [{"kind": "llm", "input_tokens": 4, "output_tokens": 3, "next": [], "token_latency": [0.1, 0.2]}]}"#;
    dir.create("r.jsonl", &format!("{bad}\n"));
    let err = TestCommand::new(&dir.path, &["results", "r.jsonl"]).fails();
    assert!(err.contains("r.jsonl:1: sub_requests[0].token_latency: has 2 entries, expected 3"), "{err}");
}

#[test]
fn concurrent_branches_share_engine_steps() {
    // Two llm nodes fanned out from a tool call start together and are
    // batched: the first step prefills both (1000 + 2·(8 + 8) µs).
    let dag = r#"{"request_id": 0, "arrival_time": 0.0, "initial": [0], "sub_requests": [{"kind": "tool_call", "input_tokens": 0, "output_tokens": 0, "next": [1, 2], "duration": 0.001}, {"kind": "llm", "input_tokens": 8, "output_tokens": 2, "next": []}, {"kind": "llm", "input_tokens": 8, "output_tokens": 2, "next": []}]}"#;
    let dir = Dir::new("dag-batch");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &format!("{dag}\n"));
    let out = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-q"]).stdout();
    let row = &rows(&out)[0];
    for node in [1, 2] {
        assert_eq!(crate::util::latencies_us(row, node), vec![1032, 1020]);
    }
}
