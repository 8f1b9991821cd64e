//! SLO classes and tenants in the metrics (`per_class`, `per_tenant`,
//! `fairness`), per-class SLO targets, `classes.parquet` and the report's
//! section; and a run whose requests carry neither keeps its metrics as
//! they were.

use crate::parquet_util::read_columns;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");
const TENANTS: [&str; 3] = ["acme", "zeta", "omega"];

/// The chat workload, 1 request in 4 `critical` and the rest `batch`, the
/// tenants in turn, every 10th with its own 0.2 s target.
fn tagged() -> String {
    let mut out = String::new();
    for (i, line) in CHAT.lines().enumerate() {
        let mut r: serde_json::Value = serde_json::from_str(line).unwrap();
        r["slo_class"] = (if i % 4 == 0 { "critical" } else { "batch" }).into();
        r["tenant"] = TENANTS[i % 3].into();
        if i % 10 == 0 {
            r["slo_target"] = 0.2.into();
        }
        out.push_str(&r.to_string());
        out.push('\n');
    }
    out
}

/// (TTFT, TPOT, E2E) of a result row's one llm call, ms.
fn latencies(r: &serde_json::Value) -> (f64, f64, f64) {
    let lat: Vec<f64> =
        r["sub_requests"][0]["token_latency"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() * 1e3).collect();
    let tpot = if lat.len() > 1 { lat[1..].iter().sum::<f64>() / (lat.len() - 1) as f64 } else { 0.0 };
    (lat[0], tpot, lat.iter().sum())
}

fn metrics(dir: &Dir, name: &str) -> serde_json::Value {
    serde_json::from_str(&dir.read(name)).unwrap()
}

#[test]
fn classes_and_tenants_split_the_metrics_and_each_class_is_judged_by_its_targets() {
    let dir = Dir::new("classes-split");
    dir.create("w.jsonl", &tagged());
    dir.create("plain.jsonl", CHAT);
    dir.create("s.yaml", LINEAR_SCENARIO);
    let run = |scenario: &str, workload: &str, metrics: &str| {
        TestCommand::new(
            &dir.path,
            &["run", "-q", "-s", scenario, workload, "-o", "r.jsonl", "--metrics", metrics, "--rate-scale", "4"],
        )
        .stdout();
    };
    run("s.yaml", "w.jsonl", "m.json");
    let results = rows(&dir.read("r.jsonl"));
    // Critical's TTFT target at its median; batch keeps the top-level ones.
    let mut critical: Vec<f64> =
        results.iter().filter(|r| r["slo_class"] == "critical").map(|r| latencies(r).0).collect();
    critical.sort_by(f64::total_cmp);
    let target = critical[critical.len() / 2];
    dir.create(
        "slo.yaml",
        &format!("{LINEAR_SCENARIO}slo:\n  e2e_p99_ms: 100000\n  classes:\n    critical: {{ttft_p99_ms: {target}}}\n"),
    );
    run("slo.yaml", "w.jsonl", "m.json");
    let results = rows(&dir.read("r.jsonl"));
    let m = metrics(&dir, "m.json");
    // Good: within the class's targets and the request's own 0.2 s. (Rows
    // hold exact µs as seconds: a margin below a microsecond.)
    let good = |class: &str| {
        let of: Vec<&serde_json::Value> = results.iter().filter(|r| r["slo_class"] == class).collect();
        let n = of
            .iter()
            .filter(|r| {
                let (ttft, _, e2e) = latencies(r);
                (class != "critical" || ttft <= target + 1e-4)
                    && r["slo_target"].as_f64().is_none_or(|t| e2e <= t * 1e3 + 1e-4)
            })
            .count();
        (n, of.len())
    };
    let (critical_good, critical_n) = good("critical");
    let (batch_good, batch_n) = good("batch");
    assert!(critical_good > 0 && critical_good < critical_n, "{critical_good} of {critical_n}");
    assert!(batch_good < batch_n, "some batch request misses its own target");
    let pc = &m["per_class"];
    let keys: Vec<&String> = pc.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["batch", "critical"], "serde_json's map sorts; the file's order is checked below");
    assert_eq!(pc["critical"]["slo_attainment"].as_f64().unwrap(), critical_good as f64 / critical_n as f64);
    assert_eq!(pc["batch"]["slo_attainment"].as_f64().unwrap(), batch_good as f64 / batch_n as f64);
    assert_eq!(m["slo_attainment"].as_f64().unwrap(), (critical_good + batch_good) as f64 / 200.0);
    assert_eq!((pc["critical"]["requests"].as_u64(), pc["batch"]["completed"].as_u64()), (Some(50), Some(150)));
    // The file: classes most urgent first, tenants by name, then fairness.
    let text = dir.read("m.json");
    let at = |k: &str| text.find(k).unwrap_or_else(|| panic!("{k} in {text}"));
    assert!(at("\"critical\"") < at("\"batch\"") && at("\"per_tenant\"") > at("\"batch\""));
    assert!(
        at("\"acme\"") < at("\"omega\"") && at("\"omega\"") < at("\"zeta\"") && at("\"fairness\"") > at("\"zeta\"")
    );
    let tokens: u64 = TENANTS.iter().map(|t| m["per_tenant"][t]["output_tokens"].as_u64().unwrap()).sum();
    assert_eq!(tokens, m["total_output_tokens"].as_u64().unwrap());
    // Every tenant served all it asked for: perfectly fair.
    assert_eq!(m["fairness"]["jain_tenants"], 1.0);
    // Same inputs, same bytes.
    run("slo.yaml", "w.jsonl", "m2.json");
    assert_eq!(dir.read("m2.json"), text);
    // The summary: a line a class, then the tenants' fairness.
    let out = TestCommand::new(&dir.path, &["run", "-s", "slo.yaml", "w.jsonl", "-o", "r.jsonl"]).output();
    let summary = String::from_utf8(out.stderr).unwrap();
    assert!(
        summary.contains("\ncritical: 50 requests (50 completed), TTFT p50 ")
            && summary.contains("within its targets, goodput"),
        "{summary}"
    );
    assert!(summary.trim_end().ends_with("3 tenants, Jain's index 1.000"), "{summary}");

    // Under FCFS the classes change nothing but the blocks: the run's own
    // metrics equal those of the same requests without classes or tenants,
    // which have no blocks.
    run("s.yaml", "w.jsonl", "tagged.json");
    run("s.yaml", "plain.jsonl", "plain.json");
    let plain = metrics(&dir, "plain.json");
    for key in ["per_class", "per_tenant", "fairness"] {
        assert!(plain.get(key).is_none(), "{key} in {plain}");
    }
    let mut tagged = metrics(&dir, "tagged.json");
    for key in ["per_class", "per_tenant", "fairness"] {
        tagged.as_object_mut().unwrap().remove(key);
    }
    assert_eq!(tagged, plain);
}

#[test]
fn a_sweep_writes_classes_parquet_only_when_runs_have_classes_and_the_report_shows_them() {
    let dir = Dir::new("classes-sweep");
    dir.create("w.jsonl", &tagged());
    dir.create(
        "s.yaml",
        &format!("{LINEAR_SCENARIO}slo: {{ttft_p99_ms: 50, classes: {{batch: {{e2e_p99_ms: 1e6}}}}}}\n"),
    );
    let plan = "name: cls\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\ngrid:\n  rate_scale: [2, 8]\noutput: out\n";
    dir.create("plan.yaml", plan);
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let table = dir.join("out/classes.parquet");
    let rows =
        read_columns(&table, &["run_id", "group", "name", "requests", "statuses", "slo_attainment", "jain_tenants"]);
    // Two runs × (two classes, then three tenants).
    assert_eq!(rows.len(), 10, "{rows:?}");
    let names: Vec<&str> = rows[..5].iter().map(|r| r[2].as_str()).collect();
    assert_eq!(names, ["critical", "batch", "acme", "omega", "zeta"]);
    assert!(rows.iter().all(|r| r[4] == "{}" && r[5] != "null"), "{rows:?}");
    assert_eq!((rows[0][6].as_str(), rows[2][6].as_str()), ("null", "1"));
    // Each run's rows join to its row of runs.parquet.
    let runs = read_columns(&dir.join("out/runs.parquet"), &["run_id", "injected_requests"]);
    for run in &runs {
        let requests: u64 =
            rows.iter().filter(|r| r[0] == run[0] && r[1] == "class").map(|r| r[3].parse::<u64>().unwrap()).sum();
        assert_eq!(requests.to_string(), run[1]);
    }
    let report = dir.read("out/report.html");
    assert!(report.contains("<table id=\"classes\">") && report.contains("tenant omega"), "{report}");

    // The same sweep of requests without classes or tenants and an SLO
    // without per-class targets: no table (the earlier one gone with the
    // other summaries), no section.
    dir.create("w.jsonl", CHAT);
    dir.create("s.yaml", &format!("{LINEAR_SCENARIO}slo: {{ttft_p99_ms: 50}}\n"));
    TestCommand::new(&dir.path, &["-q", "plan.yaml", "--force"]).stdout();
    assert!(!table.exists());
    assert!(dir.join("out/runs.parquet").exists());
    assert!(!dir.read("out/report.html").contains("id=\"classes\""));
}

#[test]
fn bad_per_class_targets_are_one_line_errors_naming_the_key() {
    let dir = Dir::new("classes-errors");
    dir.create("w.jsonl", &tagged());
    for (slo, expected) in [
        ("  classes:\n    gold: {ttft_p99_ms: 1}\n", "s.yaml:13: slo.classes.gold: unknown field `gold`"),
        ("  classes:\n    batch: {e2e_p99_ms: -1}\n", "s.yaml:13: slo.classes.batch.e2e_p99_ms: -1 must be a positive"),
        ("  classes:\n    critical: {}\n", "slo.classes.critical: give at least one of"),
        ("  classes:\n    critical: {ttft: 1}\n", "unknown field `ttft`"),
    ] {
        dir.create("s.yaml", &format!("{LINEAR_SCENARIO}slo:\n  ttft_p99_ms: 100\n{slo}"));
        let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        assert!(err.contains(expected), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!dir.join("r.jsonl").exists());
    }
}
