//! `tpot_p99_ms` as an SLO target: per-request goodput judged on vLLM's
//! TPOT ((last − first token) / (tokens − 1)), `slo_met` flipping at the
//! target, a capacity search bound by TPOT alone, and bad TPOT targets named
//! by key.

use crate::parquet_util::read_columns;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// Each result row's TPOT, ms, from its token latencies (the first is the
/// TTFT, the rest the gaps), in whole µs as the simulator keeps time (the
/// division rounds down): 0 for a request of one token.
fn tpots(results: &str) -> Vec<f64> {
    rows(results)
        .iter()
        .map(|r| {
            let us: Vec<u64> = r["sub_requests"][0]["token_latency"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| (v.as_f64().unwrap() * 1e6).round() as u64)
                .collect();
            if us.len() > 1 { (us[1..].iter().sum::<u64>() / (us.len() as u64 - 1)) as f64 / 1e3 } else { 0.0 }
        })
        .collect()
}

/// Runs `s.yaml` plus `slo` on the chat workload at 4× its rate; the metrics.
fn run(dir: &Dir, slo: &str) -> serde_json::Value {
    dir.create("slo.yaml", &format!("{LINEAR_SCENARIO}slo: {slo}\n"));
    let args = ["run", "-q", "-s", "slo.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "--rate-scale", "4"];
    TestCommand::new(&dir.path, &args).stdout();
    serde_json::from_str(&dir.read("m.json")).unwrap()
}

#[test]
fn tpot_past_the_target_is_not_goodput_and_slo_met_flips_at_it() {
    let dir = Dir::new("tpot-goodput");
    dir.create("w.jsonl", CHAT);
    let m = run(&dir, "{tpot_p99_ms: 1000}");
    let tpot = tpots(&dir.read("r.jsonl"));
    // A target at the median TPOT: the requests above it are not good.
    let mut sorted = tpot.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let m50 = run(&dir, &format!("{{tpot_p99_ms: {median}, percentile: 50}}"));
    let good = tpot.iter().filter(|&&t| t <= median).count();
    assert!(good > 100 && good < 200, "{good}");
    assert_eq!(m50["window"]["requests"], 200);
    assert_eq!(m50["slo_attainment"].as_f64().unwrap(), good as f64 / 200.0);
    assert_eq!(m50["slo_met"], true);
    // `slo_met` at p99: the window's TPOT p99 is what it is judged by.
    let p99 = m["window"]["tpot_p99_ms"].as_f64().unwrap();
    assert!(p99 > median && p99 < 1000.0, "{p99} {median}");
    for (target, met) in [(p99 + 1e-4, true), (p99 - 1e-4, false)] {
        let m = run(&dir, &format!("{{tpot_p99_ms: {target}}}"));
        assert_eq!(m["slo_met"], met, "{target}: {m}");
        assert_eq!(m["window"]["binding"]["metric"], "tpot_p99_ms");
        assert_eq!(m["window"]["binding"]["value_ms"].as_f64().unwrap(), p99);
        // A request misses only past its own TPOT: the p99's 1 % tail at most.
        assert!(m["slo_attainment"].as_f64().unwrap() >= 0.98, "{m}");
    }
    // Beside a TTFT target it is one more bound: the stricter decides.
    let both = run(&dir, &format!("{{ttft_p99_ms: 100000, tpot_p99_ms: {}}}", p99 - 1e-4));
    assert_eq!(both["slo_met"], false);
    assert_eq!(both["window"]["binding"]["metric"], "tpot_p99_ms");
}

#[test]
fn a_capacity_search_with_only_a_tpot_target_binds_on_it() {
    let dir = Dir::new("tpot-capacity");
    dir.create("w.jsonl", CHAT);
    dir.create("s.yaml", LINEAR_SCENARIO);
    // The linear model's TPOT grows with the batch: 1.06 ms at the workload's
    // 8.3 req/s, 1.18 ms at 33 req/s (measured, `run --rate-scale`).
    let search = |name: &str, slo: &str| {
        dir.create(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nworkload: {{path: w.jsonl}}\nscenarios: [s.yaml]\n\
                 search: {{slo: {slo}, range: [2, 100], precision: 0.05}}\noutput: {name}\n"
            ),
        );
        let table = TestCommand::new(&dir.path, &["capacity", "-q", &format!("{name}.yaml")]).stdout();
        let cols = ["max_rate", "tpot_p99_ms", "binding_metric", "binding_margin", "verdict"];
        let row = read_columns(&dir.join(&format!("{name}/capacity.parquet")), &cols).remove(0);
        (table, row)
    };
    let (table, row) = search("tight", "{tpot_p99_ms: 1.1}");
    assert!(table.contains("TPOT p99"), "{table}");
    assert_eq!((row[2].as_str(), row[4].as_str()), ("tpot_p99_ms", "capacity"), "{row:?}");
    let (max, tpot, margin): (f64, f64, f64) =
        (row[0].parse().unwrap(), row[1].parse().unwrap(), row[3].parse().unwrap());
    assert!(tpot <= 1.1 && (0.0..0.05).contains(&margin), "{row:?}");
    assert!((8.3..33.0).contains(&max), "{max}");
    // Every probe is judged by TPOT alone: met exactly where its window's
    // TPOT p99 is within 1.1 ms.
    let runs = read_columns(&dir.join("tight/runs.parquet"), &["run_id", "slo_met"]);
    for r in &runs {
        let m: serde_json::Value =
            serde_json::from_str(&dir.read(&format!("tight/runs/{}/metrics.json", r[0]))).unwrap();
        let within = m["window"]["tpot_p99_ms"].as_f64().unwrap() <= 1.1;
        assert_eq!(r[1] == "true", within, "{m}");
    }
    // A looser TPOT target: a higher capacity; TTFT alone at 1 s: TTFT binds.
    let (_, loose) = search("loose", "{tpot_p99_ms: 1.15}");
    assert!(loose[0].parse::<f64>().unwrap() > max * 1.05, "{loose:?} {max}");
    let (table, ttft) = search("ttft", "{ttft_p99_ms: 1000}");
    assert!(!table.contains("TPOT p99"), "{table}");
    assert_eq!(ttft[2], "ttft_p99_ms", "{ttft:?}");
}

#[test]
fn bad_tpot_targets_are_named_by_key() {
    let dir = Dir::new("tpot-bad");
    dir.create("w.jsonl", CHAT);
    for (yaml, key) in [
        ("slo: {tpot_p99_ms: -1}\n", "slo.tpot_p99_ms: -1 must be a positive number of ms"),
        ("slo: {tpot_p99_ms: 0}\n", "slo.tpot_p99_ms: 0 must be"),
        (
            "slo: {tpot_p99: 5}\n",
            "slo.tpot_p99: unknown field `tpot_p99`, expected one of ttft_p99_ms, itl_p99_ms, tpot_p99_ms",
        ),
        ("slo: {ttft_p99_ms: 5, classes: {batch: {tpot_p99_ms: .nan}}}\n", "slo.classes.batch.tpot_p99_ms"),
    ] {
        dir.create("bad.yaml", &format!("{LINEAR_SCENARIO}{yaml}"));
        let err = TestCommand::new(&dir.path, &["run", "-s", "bad.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        assert!(err.starts_with("blis-sweep: bad.yaml:") && err.contains(key), "{yaml}: {err}");
        assert!(!dir.join("r.jsonl").exists());
    }
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create(
        "plan.yaml",
        "name: p\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\nsearch: {slo: {tpot_p99_ms: -2}, range: [1, 8]}\noutput: out\n",
    );
    let err = TestCommand::new(&dir.path, &["capacity", "plan.yaml"]).fails();
    assert!(err.contains("plan.yaml:4: search.slo.tpot_p99_ms: -2 must be"), "{err}");
    assert!(!dir.join("out").exists());
}
