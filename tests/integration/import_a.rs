//! The `otel`, `inference-perf` and `servegen` importers end to end on their
//! fixtures in `tests/data/import/`: `run --input FORMAT:PATH` (a file or a
//! folder), `import` then `run` equal to `run --input`, the run's seed, the
//! `--max-think-time` flag and plan key, and bad rows named by file, line
//! and column.

use std::path::Path;

use crate::parquet_util::read_columns;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import").join(rel)).unwrap()
}

/// Runs `--input input` with `extra` flags in `dir`; the result rows.
fn run(dir: &Dir, input: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let args = ["run", "-q", "-s", "s.yaml", "--input", input, "-o", "r.jsonl", "--metrics", "m.json"];
    TestCommand::new(&dir.path, &[&args[..], extra].concat()).stdout();
    rows(&dir.read("r.jsonl"))
}

fn sub_request_counts(rows: &[serde_json::Value]) -> Vec<usize> {
    rows.iter().map(|r| r["sub_requests"].as_array().unwrap().len()).collect()
}

#[test]
fn an_inference_perf_config_runs_its_stages_and_users() {
    let dir = Dir::new("import-a-ip");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("c.yaml", &fixture("inference-perf/shared-prefix.yaml"));
    // 4/s x 5 s, then (1 s later) 10/s x 2 s: 20 + 20 requests of 64 + 16
    // prompt tokens and 12 output tokens.
    let r = run(&dir, "inference-perf:c.yaml", &["--seed", "7"]);
    assert_eq!(r.len(), 40);
    let arrivals: Vec<f64> = r.iter().map(|r| r["arrival_time"].as_f64().unwrap()).collect();
    assert_eq!(arrivals.iter().filter(|&&a| a < 5.0).count(), 20);
    assert_eq!(arrivals[20], 6.0);
    assert!(
        r.iter().all(|r| r["sub_requests"][0]["input_tokens"] == 80 && r["sub_requests"][0]["output_tokens"] == 12)
    );
    // Written by `import` with the same seed, it runs the same.
    let direct = dir.read("m.json");
    TestCommand::new(&dir.path, &["import", "inference-perf", "c.yaml", "-o", "w.jsonl", "--seed", "7"]).stdout();
    TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r2.jsonl", "--metrics", "m.json"])
        .stdout();
    assert_eq!(dir.read("m.json"), direct);
    // Another seed, other arrivals.
    let other = run(&dir, "inference-perf:c.yaml", &["--seed", "8"]);
    assert_ne!(other[3]["arrival_time"], r[3]["arrival_time"]);
    // Multi-turn, Poisson: seed 1 draws 10 requests in the 5 s (seed 0 only
    // 4): 4 users of 3, 3, 2 and 2 rounds, each a chain.
    dir.create("mt.yaml", &fixture("inference-perf/multi-turn.yaml"));
    let r = run(&dir, "inference-perf:mt.yaml", &["--seed", "1"]);
    assert_eq!(sub_request_counts(&r), [3, 3, 2, 2]);
    let prompts: Vec<u64> =
        r[0]["sub_requests"].as_array().unwrap().iter().map(|n| n["input_tokens"].as_u64().unwrap()).collect();
    assert_eq!(&prompts[..2], [13, 21]);
}

#[test]
fn otel_spans_run_as_session_dags_from_a_file_or_a_folder() {
    let dir = Dir::new("import-a-otel");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("t.json", &fixture("otel/otlp.json"));
    // Two traces: one of four calls (two of them parallel), one of one.
    let r = run(&dir, "otel:t.json", &[]);
    assert_eq!(sub_request_counts(&r), [4, 1]);
    let next: Vec<serde_json::Value> =
        r[0]["sub_requests"].as_array().unwrap().iter().map(|n| n["next"].clone()).collect();
    assert_eq!(
        next,
        [serde_json::json!([1, 2]), serde_json::json!([3]), serde_json::json!([3]), serde_json::json!([])]
    );
    assert_eq!(r[0]["sub_requests"][3]["interval"], 15.0);
    assert_eq!(r[1]["arrival_time"], 1.0);
    // Uncapped, the last call waits its recorded 25 s.
    let r = run(&dir, "otel:t.json", &["--max-think-time", "0"]);
    assert_eq!(r[0]["sub_requests"][3]["interval"], 25.0);
    // A folder of files, sessions joined by session_id across them.
    std::fs::create_dir(dir.join("spans")).unwrap();
    dir.create("spans/a.json", &fixture("otel/folder/a.json"));
    dir.create("spans/b.jsonl", &fixture("otel/folder/b.jsonl"));
    let r = run(&dir, "otel:spans", &[]);
    assert_eq!(sub_request_counts(&r), [3, 1]);
    assert_eq!(r[1]["arrival_time"], 2.25);
    // A session rate starts the sessions as a seeded Poisson process.
    let r = run(&dir, "otel:spans", &["--session-rate", "0.1", "--seed", "4"]);
    assert_ne!(r[1]["arrival_time"], 2.25);
    // A plan takes the folder and the cap.
    dir.create(
        "plan.yaml",
        "name: o\nworkload: {import: otel, path: t.json, max_think_time: 0}\nscenarios: [s.yaml]\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let done = read_columns(&dir.join("out/runs.parquet"), &["completed_requests"]);
    assert_eq!(done, [["2"]]);
}

#[test]
fn servegen_clients_generate_their_windows() {
    let dir = Dir::new("import-a-servegen");
    dir.create("s.yaml", LINEAR_SCENARIO);
    std::fs::create_dir(dir.join("sg")).unwrap();
    for f in ["chunk-1-trace.csv", "chunk-1-dataset.json", "chunk-2-trace.csv", "chunk-2-dataset.json"] {
        dir.create(&format!("sg/{f}"), &fixture(&format!("servegen/hand/{f}")));
    }
    // Window 0: 29–30 of client 1 and 5–6 of client 2; window 600: 5–6 of
    // client 2, all 100 tokens in, 9 out.
    let r = run(&dir, "servegen:sg", &["--seed", "3"]);
    assert!((39..=42).contains(&r.len()), "{}", r.len());
    let late: Vec<&serde_json::Value> = r.iter().filter(|r| r["arrival_time"].as_f64().unwrap() >= 600.0).collect();
    assert!(
        late.iter().all(|r| r["sub_requests"][0]["input_tokens"] == 100 && r["sub_requests"][0]["output_tokens"] == 9)
    );
    // One trace file (its dataset beside it) is one client.
    let one = run(&dir, "servegen:sg/chunk-2-trace.csv", &["--seed", "3"]);
    assert!((10..=12).contains(&one.len()), "{}", one.len());
    // The seed decides: the same seed writes the same workload.
    for (out, seed) in [("w1.jsonl", "3"), ("w2.jsonl", "3"), ("w3.jsonl", "4")] {
        TestCommand::new(&dir.path, &["import", "servegen", "sg", "-o", out, "--seed", seed]).stdout();
    }
    assert_eq!(dir.read("w1.jsonl"), dir.read("w2.jsonl"));
    assert_ne!(dir.read("w1.jsonl"), dir.read("w3.jsonl"));
}

#[test]
fn bad_rows_of_the_new_importers_name_file_line_and_column() {
    let dir = Dir::new("import-a-bad");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("c.yaml", "data:\n  type: random\nload:\n  stages: [{rate: 1, duration: 1}]\n");
    dir.create(
        "t.jsonl",
        "{\"name\": \"chat m\", \"trace_id\": \"t\", \"start_time\": \"2025-01-01T00:00:00Z\", \"attributes\": \
         {\"gen_ai.usage.input_tokens\": 5, \"gen_ai.usage.output_tokens\": 2}}\n{\"name\": \"chat m\", \
         \"trace_id\": \"t\", \"start_time\": \"2025-01-01T00:00:01Z\", \"attributes\": {\"gen_ai.usage.output_tokens\": 2}}\n",
    );
    std::fs::create_dir(dir.join("sg")).unwrap();
    dir.create("sg/chunk-1-trace.csv", "0,1,1,Gamma,1,1\n600,1,1,Poisson,1,1\n");
    dir.create("sg/chunk-1-dataset.json", "{\"0\": {\"input_tokens\": \"{5: 1.0}\", \"output_tokens\": \"{2: 1.0}\"}}");
    for (input, expected) in [
        ("inference-perf:c.yaml", "c.yaml:2: data.type: `random` is not replayed"),
        ("otel:t.jsonl", "t.jsonl:2: gen_ai.usage.input_tokens: missing"),
        ("servegen:sg", "chunk-1-trace.csv:2: pattern: `Poisson` is not Gamma, Weibull or empty"),
    ] {
        let args = ["run", "-q", "-s", "s.yaml", "--input", input, "-o", "r.jsonl"];
        let err = TestCommand::new(&dir.path, &args).fails();
        assert!(err.contains(expected) && err.lines().count() == 1, "{input}: {err}");
        assert!(!dir.join("r.jsonl").exists(), "{input}: wrote a result");
        let (format, path) = input.split_once(':').unwrap();
        let err = TestCommand::new(&dir.path, &["import", format, path, "-o", "w.jsonl"]).fails();
        assert!(err.contains(expected), "import {input}: {err}");
        assert!(!dir.join("w.jsonl").exists(), "import {input}: wrote a workload");
    }
    // A cap that is not a time names the flag.
    dir.create("ok.jsonl", &fixture("otel/folder/b.jsonl"));
    let args = ["run", "-q", "-s", "s.yaml", "--input", "otel:ok.jsonl", "-o", "r.jsonl", "--max-think-time", "-1"];
    let err = TestCommand::new(&dir.path, &args).fails();
    assert!(err.contains("--max-think-time: -1 is not a number of seconds"), "{err}");
    // Beside a workload file it is refused, as every trace-only flag.
    let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "--max-think-time", "5"]).fails();
    assert!(err.contains("--max-think-time"), "{err}");
}
