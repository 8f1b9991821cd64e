//! SLOs and goodput: per-request targets counted against the result rows,
//! `slo_met` against the run's percentiles, the runs table's columns, and
//! bad targets named by key.

use crate::parquet_util::read_columns;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// (TTFT, TPOT, E2E) of each result row, ms, from its token latencies.
fn latencies(results: &str) -> Vec<(f64, f64, f64)> {
    rows(results)
        .iter()
        .map(|r| {
            let lat: Vec<f64> = r["sub_requests"][0]["token_latency"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() * 1e3)
                .collect();
            let tpot = if lat.len() > 1 { lat[1..].iter().sum::<f64>() / (lat.len() - 1) as f64 } else { 0.0 };
            (lat[0], tpot, lat.iter().sum())
        })
        .collect()
}

#[test]
fn goodput_counts_the_requests_within_every_target() {
    let dir = Dir::new("slo-goodput");
    dir.create("w.jsonl", CHAT);
    dir.create("s.yaml", LINEAR_SCENARIO);
    TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--rate-scale", "4"])
        .stdout();
    let lat = latencies(&dir.read("r.jsonl"));
    // Targets at the medians, so about half the requests miss each.
    let median = |k: usize| {
        let mut v: Vec<f64> = lat.iter().map(|l| [l.0, l.1, l.2][k]).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ttft, tpot, e2e) = (median(0), median(1), median(2));
    dir.create(
        "slo.yaml",
        &format!(
            "{LINEAR_SCENARIO}slo: {{ttft_p99_ms: {ttft}, itl_p99_ms: {tpot}, e2e_p99_ms: {e2e}, percentile: 50}}\n"
        ),
    );
    let out = TestCommand::new(
        &dir.path,
        &["run", "-s", "slo.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "--rate-scale", "4"],
    )
    .output();
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    // (The rows' latencies are exact µs written as seconds: compare with a
    // margin below a microsecond.)
    let good = lat.iter().filter(|l| l.0 <= ttft + 1e-4 && l.1 <= tpot + 1e-4 && l.2 <= e2e + 1e-4).count();
    assert!(good > 0 && good < 200, "{good}");
    assert_eq!(m["slo_attainment"].as_f64().unwrap(), good as f64 / 200.0);
    // Per second of the measurement window: an open loop's, from 0 to the
    // last send (the drain after it left out), every request in it.
    let duration = m["window"]["duration_s"].as_f64().unwrap();
    assert_eq!(m["window"]["requests"], 200);
    assert!(duration < m["sim_duration_s"].as_f64().unwrap());
    assert!((m["goodput_rps"].as_f64().unwrap() - good as f64 / duration).abs() < 1e-9);
    // At the 50th percentile every target sits at its median: met.
    assert_eq!(m["slo_met"], true, "{m}");
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("SLO at p50: met;"), "{summary}");
    // At the 99th, the tails are far above the medians.
    dir.create("slo99.yaml", &format!("{LINEAR_SCENARIO}slo: {{ttft_p99_ms: {ttft}}}\n"));
    TestCommand::new(
        &dir.path,
        &["run", "-q", "-s", "slo99.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "--rate-scale", "4"],
    )
    .stdout();
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert_eq!(m["slo_met"], false);
    // Without an SLO the fields are null.
    TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json"])
        .stdout();
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert!(m["slo_met"].is_null() && m["goodput_rps"].is_null());
}

#[test]
fn a_plan_slo_fills_the_runs_table_and_bad_targets_are_named() {
    let dir = Dir::new("slo-plan");
    dir.create("w.jsonl", CHAT);
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create(
        "plan.yaml",
        "name: t\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\nslo: {ttft_p99_ms: 100000, e2e_p99_ms: 1}\n\
         grid:\n  rate_scale: [1.0]\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let runs = read_columns(&dir.join("out/runs.parquet"), &["slo_met", "slo_attainment", "goodput_rps"]);
    // No request finishes within 1 ms.
    assert_eq!(runs, [["false", "0", "0"]]);
    for (yaml, key) in [
        ("slo: {ttft_p99_ms: -1}\n", "slo.ttft_p99_ms"),
        ("slo: {percentile: 99}\n", "slo.ttft_p99_ms"),
        ("slo: {ttft_p99_ms: 5, percentile: 0}\n", "slo.percentile"),
        ("slo: {ttft_ms: 5}\n", "slo"),
    ] {
        dir.create("bad.yaml", &format!("{LINEAR_SCENARIO}{yaml}"));
        let err = TestCommand::new(&dir.path, &["run", "-s", "bad.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        assert!(err.contains("bad.yaml:") && err.contains(key), "{yaml}: {err}");
    }
}
