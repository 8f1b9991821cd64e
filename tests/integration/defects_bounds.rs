//! Issue 22, item 6 (sizes bounded before they are allocated; sums of times
//! checked against the clock) and the files the tool's own reader once
//! rejected: one test per defect folder (`defect_NN_*`, numbered as in
//! `../shared/defects`), each asserting the fixed behaviour. Inputs are under
//! `tests/data/defects/NN-*/`.

use crate::util::{Dir, TestCommand, rows, sh};

/// The folder of a defect's inputs.
fn data(folder: &str) -> String {
    format!("{}/tests/data/defects/{folder}", env!("CARGO_MANIFEST_DIR"))
}

/// A temporary directory holding a copy of the defect's inputs.
fn copy_of(folder: &str) -> Dir {
    let dir = Dir::new(&format!("d{}", &folder[..2]));
    for entry in std::fs::read_dir(data(folder)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap().to_str().unwrap())).unwrap();
    }
    dir
}

fn metrics(dir: &Dir, name: &str) -> serde_json::Value {
    serde_json::from_str(&dir.read(name)).unwrap()
}

/// 01: a pool of 10^8 sessions (8.8 GB once built up front) is refused at the
/// flag, one past the bound too; a pool within it runs; in a sweep the refused
/// cell is a failed run and the other completes.
#[test]
fn defect_01_tracev2_pool_bounded() {
    let dir = copy_of("01-tracev2-pool-oom");
    let pool = "\"$BIN\" run -q -s S.yaml --trace-header trace.yaml --trace-data trace.csv --session-mode closed-loop \
                --concurrent-sessions 2";
    let (code, err) = sh(&dir.path, &format!("ulimit -v 4000000; {pool} --total-sessions 100000000 -o r.jsonl"));
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.trim(), "blis-sweep: --total-sessions: 100000000 is more than a pool replays (at most 1000000)");
    assert!(!dir.join("r.jsonl").exists());
    let (code, err) = sh(&dir.path, &format!("{pool} --total-sessions 1000001 -o r.jsonl"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--total-sessions: 1000001 is more than a pool replays"), "{err}");
    let (code, err) =
        sh(&dir.path, &format!("ulimit -v 1000000; {pool} --total-sessions 50 -o r.jsonl --metrics m.json"));
    assert_eq!(code, Some(0), "{err}");
    // Sessions, not records: 3 corpus requests (one a 3-round session) cloned to 50.
    assert_eq!(rows(&dir.read("r.jsonl")).len(), 50);
    assert_eq!(metrics(&dir, "m.json")["injected_requests"], 50);
    let (code, err) = sh(&dir.path, "ulimit -v 4000000; \"$BIN\" pool.yaml -q --jobs 1 --no-report");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("1 of 2 runs failed"), "{err}");
    assert!(err.contains("total_sessions: 100000000 is more than a pool replays (at most 1000000)"), "{err}");
    assert!(dir.join("out/runs.parquet").exists());
}

/// 02: 2^32 − 1 closed-loop users (34 GB once queued up front) are counted,
/// not queued: the run and the sweep complete in 1 GB of address space.
#[test]
fn defect_02_closed_loop_users_not_allocated() {
    let dir = copy_of("02-closed-loop-users-oom");
    let (code, err) = sh(
        &dir.path,
        "ulimit -v 1000000; \"$BIN\" run -q -s S.yaml w3.jsonl --closed-loop --concurrency 4294967295 \
         -o r.jsonl --metrics m.json",
    );
    assert_eq!(code, Some(0), "{err}");
    let m = metrics(&dir, "m.json");
    assert_eq!(m["completed_requests"], 3, "{m}");
    // Every user sends at 0: the three requests run together.
    let r = rows(&dir.read("r.jsonl"));
    assert!(r.iter().all(|row| row["arrival_time"] == 0.0), "{r:?}");
    let (code, err) = sh(&dir.path, "ulimit -v 1000000; \"$BIN\" cc.yaml -q --no-report");
    assert_eq!(code, Some(0), "{err}");
}

/// 06: a closed loop whose think times add up past the clock is an error
/// naming `--think-time` (it once saturated at u64::MAX µs with exit 0); a sum
/// within the clock is exact; a chain of tool calls whose durations add up
/// past one request's bound is refused at its line and field.
#[test]
fn defect_06_sums_of_times_checked_against_the_clock() {
    let dir = copy_of("06-clock-sum");
    TestCommand::new(&dir.path, &["generate", "--spec", "tiny.yaml", "-o", "tiny.jsonl"]).stdout();
    let err = TestCommand::new(
        &dir.path,
        &[
            "run",
            "-q",
            "-s",
            "S.yaml",
            "tiny.jsonl",
            "--closed-loop",
            "--concurrency",
            "1",
            "--think-time",
            "1e8",
            "-o",
            "r.jsonl",
            "--metrics",
            "m.json",
        ],
    )
    .fails();
    assert!(err.starts_with("blis-sweep: --think-time: "), "{err}");
    assert!(err.contains("past the simulator's clock"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!dir.join("r.jsonl").exists() && !dir.join("m.json").exists());
    // Three requests, one user: two think times of 10^8 s, exactly.
    let three: String = dir.read("tiny.jsonl").lines().take(3).map(|l| format!("{l}\n")).collect();
    dir.create("three.jsonl", &three);
    TestCommand::new(
        &dir.path,
        &[
            "run",
            "-q",
            "-s",
            "S.yaml",
            "three.jsonl",
            "--closed-loop",
            "--concurrency",
            "1",
            "--think-time",
            "1e8",
            "-o",
            "r.jsonl",
            "--metrics",
            "m.json",
        ],
    )
    .stdout();
    let duration = metrics(&dir, "m.json")["sim_duration_s"].as_f64().unwrap();
    assert!(duration > 2e8 && duration < 2e8 + 1.0, "{duration}");
    // Three tool calls of 5 × 10^7 s in a chain, then an llm call.
    let tool = r#"{"kind":"tool_call","input_tokens":0,"output_tokens":0,"duration":5e7,"next":[NEXT]}"#;
    let subs: Vec<String> = (1..=3).map(|i| tool.replace("NEXT", &i.to_string())).collect();
    dir.create(
        "chain.jsonl",
        &format!(
            "{{\"request_id\":0,\"arrival_time\":0.0,\"initial\":[0],\"sub_requests\":[{},\
             {{\"kind\":\"llm\",\"input_tokens\":10,\"output_tokens\":3,\"next\":[]}}]}}\n",
            subs.join(",")
        ),
    );
    let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "S.yaml", "chain.jsonl", "-o", "c.jsonl"]).fails();
    assert!(err.starts_with("blis-sweep: chain.jsonl:1: sub_requests[2].duration: "), "{err}");
    assert!(!dir.join("c.jsonl").exists());
}

/// 06, in the simulator: requests whose own times are within bounds but
/// whose closed loop carries the clock past its end stop the run with the
/// node to blame (times once saturated and latencies read 0.0).
#[test]
fn defect_06_closed_loop_of_long_requests_stops_at_the_clock() {
    let dir = Dir::new("d06b");
    let row = |i: usize| {
        format!(
            "{{\"request_id\":{i},\"arrival_time\":0.0,\"initial\":[0],\"sub_requests\":[{{\"kind\":\"tool_call\",\
             \"input_tokens\":0,\"output_tokens\":0,\"duration\":1e8,\"next\":[]}}]}}\n"
        )
    };
    dir.create("w.jsonl", &(0..100_000).map(row).collect::<String>());
    dir.create("S.yaml", &std::fs::read_to_string(format!("{}/S.yaml", data("06-clock-sum"))).unwrap());
    let err = TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "S.yaml", "w.jsonl", "--closed-loop", "--concurrency", "1", "-o", "r.jsonl"],
    )
    .fails();
    assert!(err.starts_with("blis-sweep: w.jsonl: request_id "), "{err}");
    assert!(err.contains(": sub_requests[0].duration: the request's times add up past the simulator's clock"), "{err}");
    assert!(!dir.join("r.jsonl").exists());
}

/// 07: a capped client's requests still held at the horizon are reported sent
/// at the horizon, so the rows (in send order, with send times) stay sorted
/// and `results` reads them.
#[test]
fn defect_07_horizon_rows_sorted_and_readable() {
    let dir = copy_of("07-horizon-unsorted");
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "S.yaml", "w3.jsonl", "--concurrency", "1", "--horizon", "5", "-o", "hz.jsonl"],
    )
    .stdout();
    let r = rows(&dir.read("hz.jsonl"));
    let times: Vec<f64> = r.iter().map(|row| row["arrival_time"].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(times[2], 5.0, "request 2 was still held at the horizon");
    assert_eq!(r[2]["sub_requests"][0]["error"], "unfinished: the horizon was reached");
    TestCommand::new(&dir.path, &["results", "hz.jsonl"]).stdout();
}

/// 08: a session rate that puts sessions past the clock is refused at the
/// flag (it once wrote arrivals the reader rejects, or `null`), by `import`
/// and by `run --input`; a rate that fits writes a file `run` reads.
#[test]
fn defect_08_session_rate_bounded_at_the_flag() {
    let dir = copy_of("08-import-agent-rate");
    for rate in ["1e-9", "1e-320"] {
        let err = TestCommand::new(
            &dir.path,
            &["import", "agent-calls", "agent_calls.csv", "--session-rate", rate, "-o", "o.jsonl"],
        )
        .fails();
        assert!(
            err.starts_with(&format!("blis-sweep: --session-rate: {rate} sessions/s starts session 2 of 2")),
            "{err}"
        );
        assert!(err.contains("2 sessions need a rate of at least about 2e-8/s"), "{err}");
        assert!(!dir.join("o.jsonl").exists());
    }
    let err = TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "S.yaml", "--input", "agent-calls:agent_calls.csv", "--session-rate", "1e-9"],
    )
    .fails();
    assert!(err.starts_with("blis-sweep: --session-rate: "), "{err}");
    assert!(!err.contains("--rate-scale"), "{err}");
    TestCommand::new(
        &dir.path,
        &["import", "agent-calls", "agent_calls.csv", "--session-rate", "1e-6", "-o", "o.jsonl"],
    )
    .output();
    TestCommand::new(&dir.path, &["run", "-q", "-s", "S.yaml", "o.jsonl", "-o", "r.jsonl"]).stdout();
}

/// 09: `convert` refuses an engine count `run` would refuse, at its line and
/// column, and writes nothing.
#[test]
fn defect_09_convert_checks_engine_counts() {
    let dir = Dir::new("d09");
    let mini = format!("{}/tests/data/blis-mini", env!("CARGO_MANIFEST_DIR"));
    let (code, err) = sh(&dir.path, &format!("cp -r '{mini}' blis-mini"));
    assert_eq!(code, Some(0), "{err}");
    let csv = dir.read("blis-mini/experiments.csv");
    assert!(csv.contains(",128,2048,"));
    dir.create("blis-mini/experiments.csv", &csv.replace(",128,2048,", ",4294967296,2048,"));
    let err =
        TestCommand::new(&dir.path, &["convert", "blis-vllm-h100", "--data", "blis-mini", "--out", "out"]).fails();
    assert_eq!(
        err.trim(),
        "blis-sweep: blis-mini/experiments.csv:2: max_num_seqs: 4294967296 is not an engine count (1 to 4294967295)"
    );
    assert!(!dir.join("out").exists());
}

/// 14: a bad `--start` constant is the start file's, at its line and key (it
/// was blamed on `--params`), and a negative start is an error (it was
/// silently replaced by 1000).
#[test]
fn defect_14_fit_start_errors_name_the_file() {
    let dir = copy_of("14-fit-start");
    let mini = format!("{}/tests/data/blis-mini", env!("CARGO_MANIFEST_DIR"));
    TestCommand::new(&dir.path, &["convert", "blis-vllm-h100", "--data", &mini, "--out", "conv"]).output();
    for (file, want) in [
        ("st-neg2.yaml", "st-neg2.yaml:6: cpu_step_us: -1 must be a non-negative number of microseconds"),
        ("st-bool.yaml", "st-bool.yaml:7: gemm_scale: invalid type: boolean `true`, expected f64"),
        ("st-neg.yaml", "st-neg.yaml:10: step_overhead_us: -1 must be a non-negative number of microseconds"),
    ] {
        let err = TestCommand::new(
            &dir.path,
            &[
                "fit",
                "--runs",
                "conv",
                "--experiment",
                "mini",
                "--max-evaluations",
                "1",
                "--start",
                file,
                "--out",
                "c.yaml",
            ],
        )
        .fails();
        assert_eq!(err.trim(), format!("blis-sweep: {want}"));
        assert!(!dir.join("c.yaml").exists());
    }
}

/// Item 6, grids: a plan whose grid multiplies to more runs than a plan
/// holds (here 10^10: five overrides of 100 values) is refused before any
/// run is built, naming `grid`.
#[test]
fn defect_bounds_plan_grid_refused_before_expansion() {
    let dir = copy_of("02-closed-loop-users-oom");
    let values = format!("[{}]", (1..=100).map(|v| v.to_string()).collect::<Vec<_>>().join(", "));
    let keys = ["max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len", "num_gpu_blocks"];
    let overrides: Vec<String> = keys.iter().map(|k| format!("engine.{k}: {values}")).collect();
    dir.create(
        "big.yaml",
        &format!(
            "name: big\nworkload: {{path: w3.jsonl}}\nscenarios: [S.yaml]\ngrid:\n  overrides: {{{}}}\noutput: out\n",
            overrides.join(", ")
        ),
    );
    let (code, err) = sh(&dir.path, "ulimit -v 1000000; \"$BIN\" plan big.yaml");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("grid: expands to 10000000000 runs, more than a plan holds (at most 1000000)"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
