//! BLIS's held-out eval runs known by their aggregates (`source: blis-eval`):
//! replayed on the A100 kernel tables with the workload their profile names
//! (assumed), compared whole run and per stage, BLIS's prediction beside.
//! The fixture holds run 38's real rows (Llama-3.1-8B, A100-80GB, TP1,
//! general-lite), a row of a run that is in `requests/` and a run naming a
//! profile with no known spec.

use crate::parquet_util::read_columns;
use crate::util::{Dir, TestCommand};

const RUN: &str = "38-llama-3-1-8b-tp1-general-lite-1-1";

#[test]
fn eval_runs_replay_their_profile_on_the_a100_tables() {
    let dir = Dir::new("eval-runs");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/eval-mini");
    dir.create("plan.yaml", &format!("name: e\ncalibration:\n  - {{source: blis-eval, data: {data}}}\noutput: out\n"));
    // The run naming an unknown profile fails, naming why; the others run.
    let out = TestCommand::new(&dir.path, &["--no-report", "plan.yaml"]).output();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("99-llama-3-1-8b-tp1-chat-mini: failed: ")
            && err.contains("aggregates_eval38.csv:24: workload: no known spec for profile `chat`"),
        "{err}"
    );
    // The run with per-request data is not listed here (blis-vllm-h100 replays it).
    assert!(!err.contains("2-codellama-34b-tp2-codegen"), "{err}");
    let rows = read_columns(
        &dir.join("out/calibration.parquet"),
        &[
            "experiment",
            "source",
            "hardware",
            "latency_model",
            "metric",
            "real_ms",
            "simulated_ms",
            "blis_error",
            "pairs",
        ],
    );
    let metrics: Vec<&str> = rows.iter().map(|r| r[4].as_str()).collect();
    assert_eq!(metrics, ["e2e_mean", "e2e_p90", "e2e_p99", "itl_mean", "ttft_mean", "ttft_p90", "ttft_p99"]);
    for r in &rows {
        // general-lite: 2.5 req/s × 600 s, then 6 req/s × 600 s.
        assert_eq!(
            (r[0].as_str(), r[1].as_str(), r[2].as_str(), r[3].as_str(), r[8].as_str()),
            (RUN, "blis-eval", "A100-80G", "kernels", "5100")
        );
        assert!(!r[7].is_empty(), "BLIS's prediction beside every metric: {r:?}");
    }
    // Priced as an A100, not an H100 (whose decode steps take about 60 %
    // as long): the real mean ITL was 14.4 ms.
    let itl = rows.iter().find(|r| r[4] == "itl_mean").unwrap();
    let (real, sim): (f64, f64) = (itl[5].parse().unwrap(), itl[6].parse().unwrap());
    assert!((real - 14.41).abs() < 0.01 && (0.75..1.25).contains(&(sim / real)), "{itl:?}");
    // BLIS-trained-physics predicted 3097.5 ms against a real 3457.3 ms mean E2E.
    let e2e = rows.iter().find(|r| r[4] == "e2e_mean").unwrap();
    assert!((e2e[7].parse::<f64>().unwrap() - (3097.52 / 3457.33 - 1.0)).abs() < 1e-4, "{e2e:?}");
    // Per stage in the report: 1,500 then 3,600 requests.
    let report: serde_json::Value = serde_json::from_str(&dir.read(&format!("out/reports/{RUN}.json"))).unwrap();
    let stages: Vec<(i64, u64)> = report
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["metric"] == "e2e_mean")
        .map(|a| (a["stage"].as_i64().unwrap(), a["requests"].as_u64().unwrap()))
        .collect();
    assert_eq!(stages, [(-1, 5100), (0, 1500), (1, 3600)]);
    // The table says the workload is assumed.
    let md = dir.read("out/calibration.md");
    assert!(md.contains(&format!("| {RUN} (assumed workload) | Llama-3.1-8B / A100-80G / TP1 / kernels |")), "{md}");
}

#[test]
fn an_eval_run_asked_for_by_name_must_be_listed() {
    let dir = Dir::new("eval-runs-missing");
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/eval-mini");
    dir.create(
        "plan.yaml",
        &format!(
            "name: e\ncalibration:\n  - source: blis-eval\n    data: {data}\n    experiments: [2-codellama-34b-tp2-codegen]\noutput: out\n"
        ),
    );
    let err = TestCommand::new(&dir.path, &["plan.yaml"]).fails();
    assert!(err.contains("plan.yaml:") && err.contains("no run `2-codellama-34b-tp2-codegen`"), "{err}");
    assert!(!dir.join("out").exists());
}
