//! Clusters end to end: a scenario with replicas and a router through `run`
//! (replica in the rows, the CSV and the metrics; rejections), the same as
//! grid overrides in a sweep (byte-identical with `--jobs 1` and `2`, and on
//! a rerun), and router mistakes named by file, line and key.

use std::collections::BTreeMap;

use crate::parquet_util::read_columns;
use crate::sweep::files;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

#[test]
fn a_cluster_run_names_each_nodes_replica() {
    let dir = Dir::new("cluster-run");
    dir.create("s.yaml", &format!("{LINEAR_SCENARIO}replicas: 3\nrouter: {{policy: least-requests}}\n"));
    dir.create("w.jsonl", CHAT);
    let out = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json"])
        .output();
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("3 replicas (least-requests router"), "{summary}");
    let replicas: Vec<u64> =
        rows(&dir.read("r.jsonl")).iter().map(|r| r["sub_requests"][0]["replica"].as_u64().unwrap()).collect();
    assert_eq!(replicas.len(), 200);
    // Least-requests spreads the load (ties, when all are idle, go to 0).
    for r in 0..3 {
        let n = replicas.iter().filter(|&&x| x == r).count();
        assert!(n >= 30, "replica {r} served {n}");
    }
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert_eq!(m["replicas"], 3);
    let per: Vec<u64> = m["per_replica"].as_array().unwrap().iter().map(|r| r["requests"].as_u64().unwrap()).collect();
    assert_eq!(per, (0..3).map(|r| replicas.iter().filter(|&&x| x == r).count() as u64).collect::<Vec<_>>());
    let imbalance = m["imbalance"].as_f64().unwrap();
    assert!((imbalance - *per.iter().max().unwrap() as f64 * 3.0 / 200.0).abs() < 1e-12, "{imbalance}");
    // `results` keeps the replica.
    let csv = TestCommand::new(&dir.path, &["results", "r.jsonl"]).stdout();
    let first = csv.lines().nth(1).unwrap();
    assert_eq!(first.rsplit(',').next().unwrap(), replicas[0].to_string(), "{first}");
}

#[test]
fn a_full_cluster_rejects_requests_whole() {
    let dir = Dir::new("cluster-reject");
    // Two replicas of one sequence each and a queue of one: a burst of the
    // whole chat workload at once is mostly rejected.
    let scenario = LINEAR_SCENARIO.replace("max_num_seqs: 16", "max_num_seqs: 1");
    dir.create("s.yaml", &format!("{scenario}replicas: 2\nrouter: {{policy: round-robin, max_queue: 1}}\n"));
    dir.create("w.jsonl", CHAT);
    TestCommand::new(
        &dir.path,
        &["run", "-s", "s.yaml", "w.jsonl", "--rate-scale", "100", "-o", "r.jsonl", "--metrics", "m.json", "-q"],
    )
    .stdout();
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    let rejected = m["rejected_requests"].as_u64().unwrap();
    assert!(rejected > 50, "{rejected} rejected");
    assert_eq!(m["completed_requests"].as_u64().unwrap() + rejected, 200);
    let rejected_rows: Vec<serde_json::Value> =
        rows(&dir.read("r.jsonl")).into_iter().filter(|r| r["sub_requests"][0].get("error").is_some()).collect();
    assert_eq!(rejected_rows.len() as u64, rejected);
    for r in &rejected_rows {
        let node = &r["sub_requests"][0];
        assert!(node["error"].as_str().unwrap().starts_with("rejected: "), "{node}");
        assert_eq!(node["token_latency"], serde_json::json!([]));
        assert!(node.get("replica").is_none());
    }
}

#[test]
fn replicas_and_router_keys_are_grid_axes() {
    let dir = Dir::new("cluster-sweep");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", CHAT);
    dir.create(
        "plan.yaml",
        "name: t\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\ngrid:\n  rate_scale: [4.0]\n  overrides:\n    \
         replicas: [1, 3]\n    router.policy: [round-robin, random, least-requests, least-kv, prefix-affinity]\n\
         output: out\n",
    );
    let args = ["-q", "--jobs", "1", "--results-jsonl", "--step-trace", "plan.yaml"];
    TestCommand::new(&dir.path, &args).stdout();
    let one = files(&dir.join("out"));
    assert_eq!(one.keys().filter(|k| k.starts_with("requests/")).count(), 10);
    // The nodes table names each node's replica; 3 replicas use all three.
    let mut seen: BTreeMap<(String, String), std::collections::BTreeSet<String>> = BTreeMap::new();
    for part in one.keys().filter(|k| k.starts_with("nodes/")) {
        for row in read_columns(&dir.join("out").join(part), &["replicas", "router_policy", "replica"]) {
            seen.entry((row[0].clone(), row[1].clone())).or_default().insert(row[2].clone());
        }
    }
    assert_eq!(seen.len(), 10);
    for ((replicas, policy), used) in &seen {
        let expected = if replicas == "1" { 1 } else { 3 };
        assert_eq!(used.len(), expected, "{replicas} replicas, {policy}: {used:?}");
    }
    // Reruns and thread counts write the same bytes.
    std::fs::remove_dir_all(dir.join("out")).unwrap();
    TestCommand::new(&dir.path, &args).stdout();
    assert!(files(&dir.join("out")) == one, "a rerun wrote different files");
    std::fs::remove_dir_all(dir.join("out")).unwrap();
    let two = ["-q", "--jobs", "2", "--results-jsonl", "--step-trace", "plan.yaml"];
    TestCommand::new(&dir.path, &two).stdout();
    assert!(files(&dir.join("out")) == one, "--jobs 2 wrote different files");
}

#[test]
fn router_mistakes_name_file_line_and_key() {
    let dir = Dir::new("cluster-bad");
    dir.create("w.jsonl", CHAT);
    for (extra, expected) in [
        ("router:\n  policy: least-loaded\n", "s.yaml:11: router.policy: unknown policy `least-loaded`"),
        ("replicas: 0\n", "s.yaml:10: replicas: 0 must be between 1 and 1024"),
        ("router:\n  policy: weighted\n", "s.yaml:10: router.scorers: the `weighted` policy needs scorers"),
        ("router:\n  max_queue: -1\n", "s.yaml:11: router.max_queue"),
    ] {
        dir.create("s.yaml", &format!("{LINEAR_SCENARIO}{extra}"));
        let err = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        assert!(err.starts_with(&format!("blis-sweep: {expected}")), "{extra}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

/// Steps of the step trace as (replica, start, duration).
fn steps(trace: &str) -> Vec<(u64, u64, u64)> {
    rows(trace)
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_u64().unwrap();
            (n("replica"), n("start_us"), n("duration_us"))
        })
        .collect()
}

/// Pairs of steps of different replicas that overlap without starting
/// together.
fn out_of_step(steps: &[(u64, u64, u64)]) -> usize {
    let mut n = 0;
    for (i, a) in steps.iter().enumerate() {
        for b in &steps[i + 1..] {
            let overlap = a.1 < b.1 + b.2 && b.1 < a.1 + a.2;
            if a.0 != b.0 && overlap && (a.1, a.2) != (b.1, b.2) {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn data_parallel_moe_ranks_step_together() {
    let dir = Dir::new("cluster-dp");
    let moe = "model: Qwen3-30B-A3B\nhardware: H100\nlatency_model: {kind: roofline}\n\
               engine: {max_num_seqs: 16, max_num_batched_tokens: 2048}\n";
    dir.create("dp.yaml", &format!("{moe}dp: 2\n"));
    dir.create("replicas.yaml", &format!("{moe}replicas: 2\nrouter: {{policy: vllm-dp, refresh_interval_ms: 100}}\n"));
    dir.create("w.jsonl", CHAT);
    let run = |scenario: &str| {
        TestCommand::new(
            &dir.path,
            &["run", "-q", "-s", scenario, "w.jsonl", "--rate-scale", "3", "-o", "r.jsonl", "--step-trace", "t.jsonl"],
        )
        .stdout();
        let served: Vec<u64> =
            rows(&dir.read("r.jsonl")).iter().map(|r| r["sub_requests"][0]["replica"].as_u64().unwrap()).collect();
        (served, steps(&dir.read("t.jsonl")))
    };
    let (served, lockstep) = run("dp.yaml");
    // vLLM's DP balancer uses both ranks.
    for rank in 0..2 {
        assert!(served.iter().filter(|&&r| r == rank).count() >= 60, "{served:?}");
    }
    // Every step of one rank starts and ends with the other's, or while the
    // other is idle (running its dummy batch).
    assert_eq!(out_of_step(&lockstep), 0);
    let together = lockstep.iter().filter(|a| lockstep.iter().any(|b| b.0 != a.0 && b.1 == a.1)).count();
    assert!(together > lockstep.len() / 2, "{together} of {}", lockstep.len());
    let out = TestCommand::new(&dir.path, &["run", "-s", "dp.yaml", "w.jsonl", "-o", "r.jsonl"]).output();
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("2 data-parallel ranks (vLLM's DP balancer, lockstep"), "{summary}");
    // Independent replicas (each with every expert) drift apart.
    let (_, independent) = run("replicas.yaml");
    assert!(out_of_step(&independent) > 100, "{}", out_of_step(&independent));
}
