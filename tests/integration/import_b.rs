//! The `vllm-bench`, `sharegpt` and `csv` importers end to end on their
//! fixtures in `tests/data/import/`: a `vllm bench serve` result converted,
//! replayed and compared per request by `calibrate`; conversations replayed
//! as sessions with their prefix hits; CSV rows with sessions and groups; bad
//! input named by file, line and column.

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

const BENCH: &str = include_str!("../data/import/vllm_bench/result.json");
const SHAREGPT: &str = include_str!("../data/import/sharegpt/conversations.json");
const CSV: &str = include_str!("../data/import/csv/trace.csv");

fn arrivals(rows: &[serde_json::Value]) -> Vec<f64> {
    rows.iter().map(|r| r["arrival_time"].as_f64().unwrap()).collect()
}

fn latencies(row: &serde_json::Value) -> Vec<f64> {
    row["sub_requests"][0]["token_latency"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
}

#[test]
fn a_vllm_bench_result_is_replayed_and_calibrated_per_request() {
    let dir = Dir::new("import-vllm-bench");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("result.json", BENCH);
    let out = TestCommand::new(
        &dir.path,
        &["convert", "vllm-bench", "--data", "result.json", "--scenario", "s.yaml", "--out", "out"],
    )
    .output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("result: 5 requests"), "{said}");
    assert!(said.contains("1 of 6 requests failed"), "{said}");
    assert!(said.contains("run --concurrency 4"), "{said}");
    assert_eq!(dir.read("out/result.scenario.yaml"), LINEAR_SCENARIO);
    let workload = rows(&dir.read("out/result.workload.jsonl"));
    let baseline = rows(&dir.read("out/result.baseline.jsonl"));
    // Sent at 100.0, 100.25, 100.5, 100.75 (after 0.05 s waiting for a
    // slot), 101.25; request 4 failed.
    assert_eq!(arrivals(&workload), [0.0, 0.25, 0.5, 0.7, 1.25]);
    // The baseline's rows at their sends, as a capped client's results.
    assert_eq!(arrivals(&baseline), [0.0, 0.25, 0.5, 0.75, 1.25]);
    let ids: Vec<u64> = baseline.iter().map(|r| r["request_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [0, 1, 2, 3, 5]);
    // The measured TTFT and ITLs, per token.
    assert_eq!(latencies(&baseline[0]), [0.05, 0.02, 0.021, 0.019]);
    assert_eq!(latencies(&baseline[4]), [0.03, 0.02, 0.022]);
    // Replayed with the benchmark's cap, compared request by request.
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "out/result.scenario.yaml", "out/result.workload.jsonl", "--concurrency", "4"]
            .into_iter()
            .chain(["-o", "sim.jsonl", "--metrics", "m.json"])
            .collect::<Vec<_>>(),
    )
    .stdout();
    TestCommand::new(
        &dir.path,
        &["calibrate", "--real", "out/result.baseline.jsonl", "--sim", "sim.jsonl", "--report", "r.json"],
    )
    .stdout();
    let r: serde_json::Value = serde_json::from_str(&dir.read("r.json")).unwrap();
    assert_eq!(r["trace_info"]["matched_pairs"], 5);
    assert_eq!(r["trace_info"]["token_mismatches"], 0);
    let ttft = &r["metrics"]["ttft"];
    assert_eq!(ttft["count"], 5);
    // (50 + 60 + 40 + 70 + 30) / 5 ms.
    assert!((ttft["workload_level"]["real_mean"].as_f64().unwrap() - 50_000.0).abs() < 1e-6, "{ttft}");
    // E2E: 110, 100, 200, 95, 72 ms: mean 115.4 ms.
    let e2e = &r["metrics"]["e2e"]["workload_level"]["real_mean"];
    assert!((e2e.as_f64().unwrap() - 115_400.0).abs() < 1e-6, "{e2e}");
    assert!(r["metrics"]["itl"]["request_level"]["mape"].as_f64().is_some());
    // The real run: first send at 0, last done at 1.25 + 0.072 s.
    let runtime = r["throughput"]["real_runtime_sec"].as_f64().unwrap();
    assert!((runtime - 1.322).abs() < 1e-9, "{runtime}");
    // `run --input` reads the same requests and applies the cap itself.
    let direct = dir.read("m.json");
    let args = ["run", "-q", "-s", "s.yaml", "--input", "vllm-bench:result.json", "-o", "d.jsonl"];
    TestCommand::new(&dir.path, &[&args[..], &["--metrics", "m.json"]].concat()).stdout();
    assert_eq!(dir.read("m.json"), direct);
    // `import` writes the same workload and says what it assumed.
    let said = TestCommand::new(&dir.path, &["import", "vllm-bench", "result.json", "-o", "w.jsonl"]).output();
    assert!(String::from_utf8_lossy(&said.stderr).contains("note: 1 of 6 requests failed"));
    assert_eq!(dir.read("w.jsonl"), dir.read("out/result.workload.jsonl"));
    // Without --scenario no scenario is written, and that is said.
    let out =
        TestCommand::new(&dir.path, &["convert", "vllm-bench", "--data", "result.json", "--out", "bare"]).output();
    assert!(String::from_utf8_lossy(&out.stderr).contains("no scenario written"));
    let mut files: Vec<String> =
        std::fs::read_dir(dir.join("bare")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    files.sort();
    assert_eq!(files, ["result.baseline.jsonl", "result.workload.jsonl"]);
}

#[test]
fn sharegpt_conversations_replay_as_sessions_with_prefix_hits() {
    let dir = Dir::new("import-sharegpt");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("c.json", SHAREGPT);
    let args = ["run", "-q", "-s", "s.yaml", "--input", "sharegpt:c.json", "--session-rate", "2", "-o", "r.jsonl"];
    TestCommand::new(&dir.path, &[&args[..], &["--step-trace", "steps.jsonl"]].concat()).stdout();
    let results = rows(&dir.read("r.jsonl"));
    let ids: Vec<u64> = results.iter().map(|r| r["request_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [0, 1, 3]);
    assert_eq!(results[0]["sub_requests"].as_array().unwrap().len(), 2);
    // Conversation 0's second call (32 tokens) starts with the first call's
    // 3 + 25 tokens: one full block of 16 is found in the cache.
    let cached: Vec<u64> = rows(&dir.read("steps.jsonl"))
        .iter()
        .flat_map(|s| s["admitted"].as_array().unwrap().clone())
        .filter(|a| a["request_id"] == 0)
        .map(|a| a["cached_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(cached, [0, 16]);
    // Imported to a file, the same run.
    TestCommand::new(&dir.path, &["import", "sharegpt", "c.json", "--session-rate", "2", "-o", "w.jsonl"]).stdout();
    TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r2.jsonl"]).stdout();
    assert_eq!(dir.read("r2.jsonl"), dir.read("r.jsonl"));
    // The rate is required.
    let err =
        TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "--input", "sharegpt:c.json", "-o", "x.jsonl"]).fails();
    assert!(err.starts_with("blis-sweep: --session-rate: sharegpt needs a session rate"), "{err}");
}

#[test]
fn csv_rows_replay_with_sessions_and_prefix_groups() {
    let dir = Dir::new("import-csv");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.csv", CSV);
    let args = ["run", "-q", "-s", "s.yaml", "--input", "csv:t.csv", "-o", "r.jsonl"];
    TestCommand::new(&dir.path, &[&args[..], &["--step-trace", "steps.jsonl"]].concat()).stdout();
    let results = rows(&dir.read("r.jsonl"));
    assert_eq!(arrivals(&results), [0.0, 0.25, 0.5, 1.0]);
    let nodes: Vec<usize> = results.iter().map(|r| r["sub_requests"].as_array().unwrap().len()).collect();
    assert_eq!(nodes, [2, 1, 1, 2]);
    // Request 2 (line 3, group sys: 32 tokens) arrives after request 0
    // (group sys, 64) has finished its first call: 2 blocks of 16 cached.
    let cached: Vec<(u64, u64)> = rows(&dir.read("steps.jsonl"))
        .iter()
        .flat_map(|s| s["admitted"].as_array().unwrap().clone())
        .map(|a| (a["request_id"].as_u64().unwrap(), a["cached_tokens"].as_u64().unwrap()))
        .collect();
    assert!(cached.contains(&(2, 32)), "{cached:?}");
    // Session a's second call: its first prompt and output, 120 tokens: 7 blocks.
    assert!(cached.contains(&(0, 112)), "{cached:?}");
    let out =
        TestCommand::new(&dir.path, &["import", "csv", "t.csv", "-o", "w.jsonl", "--session-mode", "fixed-accumulate"])
            .stdout();
    assert!(out.is_empty());
    assert_eq!(arrivals(&rows(&dir.read("w.jsonl"))), [0.0, 0.25, 0.5, 1.0, 2.0, 3.5]);
}

#[test]
fn bad_input_names_file_line_and_column() {
    let dir = Dir::new("import-b-bad");
    dir.create("s.yaml", LINEAR_SCENARIO);
    let cases = [
        ("csv", "t.csv", CSV.replace("1.0,40,5,b", "1.0,x,5,b"), "t.csv:5: input_tokens: "),
        ("csv", "t.csv", CSV.replace("arrival,", "arrival,lora,"), "t.csv:1: lora: unknown column"),
        ("csv", "t.csv", CSV.replace("input_tokens,", ""), "t.csv:1: input_tokens: missing column"),
        ("vllm-bench", "b.json", BENCH.replace("[0.05, 0.06, 0.04", "[0.05, 0.06, -0.04"), "b.json:1: ttfts[2]: "),
        ("vllm-bench", "b.json", BENCH.replace("\"itls\"", "\"itl\""), "b.json:1: itls: missing"),
        (
            "sharegpt",
            "c.json",
            SHAREGPT.replace("\"from\": \"gpt\"", "\"from\": \"robot\""),
            "c.json:2: conversations[1].from: ",
        ),
    ];
    crate::import::bad_rows_are_named(&dir, &cases);
    dir.create("b.json", BENCH);
    let err = TestCommand::new(
        &dir.path,
        &["convert", "vllm-bench", "--data", "b.json", "--scenario", "nope.yaml", "--out", "o"],
    )
    .fails();
    assert!(err.contains("--scenario nope.yaml"), "{err}");
    assert!(!dir.join("o").join("b.workload.jsonl").exists());
}
