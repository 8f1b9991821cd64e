//! Capacity search on a deployment whose capacity is known by construction,
//! its tables, and its mistakes.

use crate::parquet_util::read_columns;
use crate::util::{Dir, LINEAR_SCENARIO, TWO_MS_SCENARIO, TestCommand};

/// `n` requests at a constant 100 req/s.
fn constant(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"request_id\":{i},\"arrival_time\":{},\"initial\":[0],\"sub_requests\":[{{\"kind\":\"llm\",\"input_tokens\":10,\"output_tokens\":2,\"next\":[]}}]}}\n",
                i as f64 / 100.0
            )
        })
        .collect()
}

#[test]
fn the_search_finds_a_capacity_known_by_construction() {
    let dir = Dir::new("capacity-known");
    dir.create("s.yaml", TWO_MS_SCENARIO);
    dir.create("w.jsonl", &constant(1000));
    // TTFT is 1 ms while the server keeps up; past 500 req/s the queue grows
    // by (2 ms − 1/rate) a request, so the 99th of 1,000 stays within 5 ms
    // up to 1000 / (2 − 4/990) = 501.0 req/s.
    dir.create(
        "plan.yaml",
        "name: c\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\n\
         search: {slo: {ttft_p99_ms: 5}, range: [100, 2000], precision: 0.02, gpu_hour_usd: {H100: 2.0}}\noutput: out\n",
    );
    let table = TestCommand::new(&dir.path, &["capacity", "-q", "plan.yaml"]).stdout();
    assert!(table.contains("two-ms"), "{table}");
    let rows = read_columns(&dir.join("out/capacity.parquet"), &["scenario", "gpus", "max_rate", "at_least", "probes"]);
    assert_eq!(rows.len(), 1);
    let max: f64 = rows[0][2].parse().unwrap();
    // Within the stated precision below the true capacity.
    assert!((500.0 / 1.02..=501.1).contains(&max), "{max}");
    assert_eq!((rows[0][1].as_str(), rows[0][3].as_str()), ("1", "false"));
    // Every probe is a run in the tables, judged by the search's SLO.
    let probes: usize = rows[0][4].parse().unwrap();
    let runs = read_columns(&dir.join("out/runs.parquet"), &["rate_scale", "slo_met"]);
    assert_eq!(runs.len(), probes);
    assert!(runs.iter().any(|r| r[1] == "true") && runs.iter().any(|r| r[1] == "false"));
    // Cost: 2 $/h for 1 GPU at the capacity's output tokens per second.
    let cost = read_columns(&dir.join("out/capacity.parquet"), &["cost_per_mtok", "tokens_per_sec"]);
    let (c, tps): (f64, f64) = (cost[0][0].parse().unwrap(), cost[0][1].parse().unwrap());
    assert!((c - 2.0 / 3600.0 / tps * 1e6).abs() < 1e-9, "{c} {tps}");
    // A rerun reuses every probe.
    let again = TestCommand::new(&dir.path, &["capacity", "plan.yaml"]).output();
    let log = String::from_utf8_lossy(&again.stderr);
    assert!(log.contains("(0 runs now)"), "{log}");
}

#[test]
fn a_search_names_its_mistakes() {
    let dir = Dir::new("capacity-bad");
    dir.create("s.yaml", TWO_MS_SCENARIO);
    dir.create("w.jsonl", &constant(10));
    for (search, key) in [
        ("{slo: {ttft_p99_ms: 5}, range: [10, 1]}", "search.range"),
        ("{slo: {}, range: [1, 10]}", "search.slo.ttft_p99_ms"),
        ("{slo: {ttft_p99_ms: 5}, range: [1, 10], over: tokens}", "search.over"),
        ("{slo: {ttft_p99_ms: 5}, range: [1, 10], precision: 2}", "search.precision"),
    ] {
        dir.create(
            "plan.yaml",
            &format!("name: c\nworkload: {{path: w.jsonl}}\nscenarios: [s.yaml]\nsearch: {search}\noutput: out\n"),
        );
        let err = TestCommand::new(&dir.path, &["capacity", "plan.yaml"]).fails();
        assert!(err.contains(key), "{search}: {err}");
    }
    dir.create(
        "plan.yaml",
        "name: c\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\nsearch: {slo: {ttft_p99_ms: 5}, range: [1, 10]}\n\
         grid:\n  rate_scale: [2.0]\noutput: out\n",
    );
    let err = TestCommand::new(&dir.path, &["capacity", "plan.yaml"]).fails();
    assert!(err.contains("grid.rate_scale: a capacity search sets the load"), "{err}");
    dir.create("plain.yaml", "name: c\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\noutput: out\n");
    let err = TestCommand::new(&dir.path, &["capacity", "plain.yaml"]).fails();
    assert!(err.contains("search: missing"), "{err}");
}

#[test]
fn a_concurrency_search_counts_users() {
    let dir = Dir::new("capacity-users");
    dir.create("s.yaml", TWO_MS_SCENARIO);
    dir.create("w.jsonl", &constant(400));
    // Closed loop, no think time: with u users each request waits for the
    // u − 1 before it, 2 ms each, so TTFT = 1 ms + 2 (u − 1) ms: 9 ms at 5
    // users, 11 at 6. (The target leaves room for the histogram's 0.025 %
    // resolution above 4 ms.)
    dir.create(
        "plan.yaml",
        "name: c\nworkload: {path: w.jsonl, closed_loop: true}\nscenarios: [s.yaml]\n\
         search: {slo: {ttft_p99_ms: 9.05}, over: concurrency, range: [1, 64], precision: 0.01}\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["capacity", "-q", "plan.yaml"]).stdout();
    let rows = read_columns(&dir.join("out/capacity.parquet"), &["max_concurrency", "at_least"]);
    assert_eq!(rows, [["5", "false"]]);
}

/// A capacity search over a workload override (`workload.generate.rate`):
/// each deployment's probes offer the load the search names, at its own
/// workload's rate — not the plan's main workload's (a rate scale of
/// load / 10 on a 40 req/s workload offered 4× the load).
#[test]
fn each_deployment_is_probed_at_its_own_workloads_rate() {
    let dir = Dir::new("capacity-workload-override");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create(
        "plan.yaml",
        "name: c\nworkload: {generate: {preset: chatbot, rate: 10, num_requests: 200}}\nscenarios: [s.yaml]\n\
         grid: {overrides: {workload.generate.rate: [10, 40]}}\n\
         search: {slo: {ttft_p99_ms: 500}, range: [5, 80], precision: 0.5}\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).output();
    let manifest: serde_json::Value = serde_json::from_str(&dir.read("out/manifest.json")).unwrap();
    for rate in [10, 40] {
        let offered: Vec<f64> = manifest["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["overrides"]["workload.generate.rate"] == rate)
            .map(|r| r["offered_rps"].as_f64().unwrap())
            .collect();
        // The range's ends are probed first: 5 and 80 req/s offered.
        for load in [5.0, 80.0] {
            assert!(offered.iter().any(|o| (o - load).abs() < 1e-6 * load), "rate {rate}: {offered:?} lacks {load}");
        }
    }
}
