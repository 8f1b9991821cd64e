//! Sweeps end to end: grid expansion and run ids, equality with single runs,
//! failures beside successes, resume after `kill -9`, `--jobs` and `--shard`
//! independence.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, latencies_us, rows};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// A plan over the shipped chat workload and the linear test scenario.
fn setup(dir: &Dir, grid: &str) {
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", CHAT);
    dir.create(
        "plan.yaml",
        &format!("name: t\nworkload: {{path: w.jsonl}}\nscenarios: [s.yaml]\ngrid:\n{grid}\noutput: out\n"),
    );
}

/// Every file under `root`, relative path → bytes, skipping timing.json (wall
/// time), manifest.json and runs.parquet (they carry wall time too).
pub(crate) fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                if !matches!(name.as_str(), "timing.json" | "manifest.json" | "runs.parquet") {
                    // Shard directories are stripped so shards compare with the whole.
                    let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                    let rel = rel.split('/').filter(|s| !s.starts_with("shard=")).collect::<Vec<_>>().join("/");
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
    }
    out
}

fn manifest(dir: &Dir) -> serde_json::Value {
    serde_json::from_str(&dir.read("out/manifest.json")).unwrap()
}

#[test]
fn the_grid_expands_with_stable_run_ids() {
    let dir = Dir::new("sweep-plan");
    setup(
        &dir,
        "  concurrency: [null, 4]\n  seed: [1, 2]\n  overrides:\n    engine.max_num_seqs: [8, 16]\n    tp: [1, 2]",
    );
    let first = TestCommand::new(&dir.path, &["plan", "plan.yaml"]).stdout();
    assert!(first.starts_with("t: 16 runs -> out\n"), "{first}");
    assert_eq!(first.lines().count(), 18);
    assert_eq!(TestCommand::new(&dir.path, &["plan", "plan.yaml"]).stdout(), first);
    // Changing what a run simulates changes its id; the grid order stays.
    dir.create("s.yaml", &LINEAR_SCENARIO.replace("beta: [1000, 2, 10]", "beta: [1000, 2, 11]"));
    let changed = TestCommand::new(&dir.path, &["plan", "plan.yaml"]).stdout();
    let ids = |t: &str| t.lines().skip(2).map(|l| l[..16].to_owned()).collect::<Vec<_>>();
    assert!(ids(&first).iter().zip(ids(&changed)).all(|(a, b)| *a != b));
    // Plan errors name the file and key, and nothing runs.
    dir.create(
        "bad.yaml",
        "name: t\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\ngrid: {concurrency: [0]}\noutput: out\n",
    );
    let err = TestCommand::new(&dir.path, &["bad.yaml"]).fails();
    assert!(err.contains("bad.yaml:4: grid.concurrency: 0 is not a concurrency"), "{err}");
    dir.create("bad.yaml", "name: t\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\ngrid: {overrides: {engine.max_num_seq: [1]}}\noutput: out\n");
    let err = TestCommand::new(&dir.path, &["bad.yaml"]).fails();
    assert!(err.contains("grid.overrides") && err.contains("max_num_seq"), "{err}");
    dir.create("bad.yaml", "name: t\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\noutput: out\nextra: 1\n");
    let err = TestCommand::new(&dir.path, &["bad.yaml"]).fails();
    assert!(err.starts_with("blis-sweep: bad.yaml:5:"), "{err}");
    assert!(!dir.join("out").exists());
}

#[test]
fn sweep_runs_equal_single_runs() {
    let dir = Dir::new("sweep-equal");
    setup(&dir, "  concurrency: [null, 3]\n  rate_scale: [2.0]");
    TestCommand::new(&dir.path, &["-q", "--tokens", "--results-jsonl", "--step-trace", "plan.yaml"]).stdout();
    let m = manifest(&dir);
    for run in m["runs"].as_array().unwrap() {
        let id = run["run_id"].as_str().unwrap();
        let mut args = vec![
            "run",
            "-q",
            "-s",
            "s.yaml",
            "w.jsonl",
            "-o",
            "r.jsonl",
            "--metrics",
            "m.json",
            "--rate-scale",
            "2",
            "--step-trace",
            "steps.jsonl",
        ];
        let conc = run["concurrency"].as_u64().map(|c| c.to_string());
        if let Some(c) = &conc {
            args.extend(["--concurrency", c.as_str()]);
        }
        TestCommand::new(&dir.path, &args).stdout();
        // The per-run metrics and result rows are the same bytes.
        assert_eq!(dir.read(&format!("out/runs/{id}/metrics.json")), dir.read("m.json"), "run {id}");
        assert!(dir.read(&format!("out/runs/{id}/results.jsonl")) == dir.read("r.jsonl"), "run {id}");
        assert!(dir.read(&format!("out/runs/{id}/steps.jsonl")) == dir.read("steps.jsonl"), "run {id}");
        let tokens =
            crate::parquet_util::read_columns(&dir.join(&format!("out/tokens/part-{id}.parquet")), &["request_id"]);
        assert_eq!(tokens.len(), 200);
        // And every request's E2E (requests) and TTFT (nodes: one llm call
        // a request here) match its result row.
        let requests = crate::parquet_util::read_columns(
            &dir.join(&format!("out/requests/part-{id}.parquet")),
            &["request_id", "e2e_s", "status", "llm_calls"],
        );
        let nodes = crate::parquet_util::read_columns(
            &dir.join(&format!("out/nodes/part-{id}.parquet")),
            &["request_id", "ttft_s"],
        );
        let results = rows(&dir.read("r.jsonl"));
        assert_eq!((requests.len(), nodes.len()), (results.len(), results.len()));
        for ((request, node), result) in requests.iter().zip(&nodes).zip(&results) {
            assert_eq!((&request[0], &node[0]), (&result["request_id"].to_string(), &result["request_id"].to_string()));
            assert_eq!((request[2].as_str(), request[3].as_str()), ("completed", "1"));
            let tl = latencies_us(result, 0);
            assert_eq!(node[1], format!("{}", tl[0] as f64 / 1e6));
            let e2e: u64 = tl.iter().sum();
            let expected = (e2e as f64 / 1e6 * 1e6).round() / 1e6;
            let got: f64 = request[1].parse().unwrap();
            assert!((got - expected).abs() < 1e-9, "{got} vs {expected}");
        }
    }
}

#[test]
fn a_plan_timeout_is_the_run_timeout() {
    let dir = Dir::new("sweep-timeout");
    setup(&dir, "  concurrency: [null]");
    let plan = dir.read("plan.yaml").replace("workload: {path: w.jsonl}", "workload: {path: w.jsonl, timeout: 0.5}");
    dir.create("plan.yaml", &plan);
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let id = manifest(&dir)["runs"][0]["run_id"].as_str().unwrap().to_owned();
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "s.yaml", "w.jsonl", "--timeout", "0.5", "-o", "r.jsonl", "--metrics", "m.json"],
    )
    .stdout();
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert!(m["timed_out_requests"].as_u64().unwrap() > 0, "{m}");
    assert_eq!(dir.read(&format!("out/runs/{id}/metrics.json")), dir.read("m.json"));
    dir.create("plan.yaml", &plan.replace("timeout: 0.5", "timeout: 0"));
    let err = TestCommand::new(&dir.path, &["plan.yaml"]).fails();
    assert!(err.contains("workload.timeout"), "{err}");
}

#[test]
fn a_failed_run_is_recorded_beside_the_others() {
    let dir = Dir::new("sweep-fail");
    // Llama-3.1-8B has 32 heads: tp 3 cannot split them.
    setup(&dir, "  overrides:\n    tp: [1, 3]");
    let out = TestCommand::new(&dir.path, &["plan.yaml"]).output();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let last = stderr.lines().last().unwrap();
    assert!(
        last.starts_with("blis-sweep: 1 of 2 runs failed; first: ")
            && last.contains("tp: 3 must be positive and divide"),
        "{stderr}"
    );
    let m = manifest(&dir);
    let status: Vec<&str> = m["runs"].as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(status, ["ok", "failed"]);
    assert_eq!(std::fs::read_dir(dir.join("out/requests")).unwrap().count(), 1);
    // The runs table names the failed run's deployment as far as its spec
    // says (what only resolving gives, as the KV blocks, is null).
    let runs = crate::parquet_util::read_columns(
        &dir.join("out/runs.parquet"),
        &["status", "model", "tp", "gpus", "kv_blocks", "overrides", "completed_requests"],
    );
    assert_eq!(runs[0][..5], ["ok", "Llama-3.1-8B", "1", "1", "1000"]);
    assert_eq!(runs[1], ["failed", "Llama-3.1-8B", "3", "3", "null", r#"{"tp":3}"#, "null"]);
}

#[test]
fn jobs_and_shards_do_not_change_the_files() {
    let dir = Dir::new("sweep-jobs");
    setup(&dir, "  concurrency: [null, 2, 8]\n  rate_scale: [1.0, 3.0]");
    TestCommand::new(&dir.path, &["-q", "--jobs", "1", "plan.yaml"]).stdout();
    let one = files(&dir.join("out"));
    assert_eq!(one.keys().filter(|k| k.starts_with("requests/")).count(), 6);
    std::fs::remove_dir_all(dir.join("out")).unwrap();
    TestCommand::new(&dir.path, &["-q", "--jobs", "2", "plan.yaml"]).stdout();
    assert!(files(&dir.join("out")) == one, "--jobs 2 wrote different files");
    std::fs::remove_dir_all(dir.join("out")).unwrap();
    for shard in ["0/3", "1/3", "2/3"] {
        TestCommand::new(&dir.path, &["-q", "--shard", shard, "plan.yaml"]).stdout();
    }
    assert!(dir.join("out/shard=2/runs.parquet").exists());
    // The first shard recorded the count; a shard of another count is refused.
    assert_eq!(dir.read("out/shards.json"), "{\"shard_count\":3}\n");
    let other = TestCommand::new(&dir.path, &["-q", "--shard", "1/4", "plan.yaml"]).fails();
    assert!(other.contains("holds a sweep of 3 shards, this shard says 4"), "{other}");
    // (A shard writes no report: it has part of the tables.)
    let mut whole = one.clone();
    assert!(whole.remove("report.html").is_some());
    let mut union = files(&dir.join("out"));
    assert!(union.remove("shards.json").is_some());
    assert!(union == whole, "the shards' union differs from the whole sweep");
}

#[test]
fn a_killed_sweep_resumes_to_the_same_tables() {
    let dir = Dir::new("sweep-resume");
    setup(&dir, "  concurrency: [null, 1, 2, 4, 8, 16]\n  rate_scale: [1.0, 2.0]");
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let whole = files(&dir.join("out"));
    std::fs::remove_dir_all(dir.join("out")).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_blis-sweep"))
        .current_dir(&dir.path)
        .args(["-q", "--jobs", "1", "plan.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let finished = |d: &Dir| {
        std::fs::read_dir(d.join("out/runs"))
            .map_or(0, |r| r.filter(|e| e.as_ref().unwrap().path().join("status.json").exists()).count())
    };
    while finished(&dir) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let done_before = finished(&dir);
    assert!(done_before < 12, "the sweep finished before it could be killed");

    let out = TestCommand::new(&dir.path, &["plan.yaml"]).output();
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains(&format!("({} run now, {done_before} already done)", 12 - done_before)), "{stderr}");
    assert!(files(&dir.join("out")) == whole, "the resumed sweep differs from an uninterrupted one");
    // --force redoes everything, to the same bytes.
    let out = TestCommand::new(&dir.path, &["--force", "plan.yaml"]).output();
    assert!(String::from_utf8(out.stderr).unwrap().contains("(12 run now, 0 already done)"));
    assert!(files(&dir.join("out")) == whole);
}

#[test]
fn generated_workloads_are_regenerated_per_seed() {
    let dir = Dir::new("sweep-generate");
    dir.create("s.yaml", LINEAR_SCENARIO);
    let spec = "{preset: chatbot, num_requests: 50, rate: 20, prefix: {groups: 2, tokens: 64}, \
                sessions: {turns: {kind: uniform, min: 1, max: 3}, think_time: {kind: exponential, mean: 0.5}}}";
    dir.create(
        "plan.yaml",
        &format!("name: g\nworkload:\n  generate: {spec}\nscenarios: [s.yaml]\ngrid:\n  seed: [1, 2]\noutput: out\n"),
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let m = manifest(&dir);
    let runs = m["runs"].as_array().unwrap();
    let metrics: Vec<String> =
        runs.iter().map(|r| dir.read(&format!("out/runs/{}/metrics.json", r["run_id"].as_str().unwrap()))).collect();
    assert_ne!(metrics[0], metrics[1], "two seeds gave the same workload");
    // `generate` with the same spec and seed writes the workload run 2 simulated.
    // (YAML takes the same flow mapping as a whole document.)
    dir.create("spec.yaml", &format!("{spec}\n"));
    TestCommand::new(&dir.path, &["generate", "--spec", "spec.yaml", "--seed", "2", "-o", "w2.jsonl"]).stdout();
    TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w2.jsonl", "-o", "r.jsonl", "--metrics", "m.json"])
        .stdout();
    assert_eq!(dir.read("m.json"), metrics[1]);
    let rows = rows(&dir.read("r.jsonl"));
    assert_eq!(rows.len(), 50);
    assert!(rows.iter().any(|r| r["sub_requests"].as_array().unwrap().len() > 1), "no multi-turn session");
}

#[test]
fn plain_progress_lines_count_runs_and_say_what_was_reused() {
    let dir = Dir::new("sweep-progress");
    setup(&dir, "  rate_scale: [1.0, 2.0, 3.0]");
    let log = |out: std::process::Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let first = log(TestCommand::new(&dir.path, &["plan.yaml"]).output());
    let lines: Vec<&str> = first.lines().collect();
    assert!(lines[0].starts_with("t: 3 runs: 0 done before, 3 to run: "), "{first}");
    assert!(lines[1..4].iter().all(|l| l.starts_with('[') && l.contains("/3] ")), "{first}");
    assert!(lines[3].starts_with("[3/3] "), "{first}");
    let second = log(TestCommand::new(&dir.path, &["plan.yaml"]).output());
    assert!(second.starts_with("t: 3 runs: 3 done before, 0 to run: 0 requests"), "{second}");
    assert!(second.contains("(0 run now, 3 already done)"), "{second}");
}
