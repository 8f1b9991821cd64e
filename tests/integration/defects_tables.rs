//! Issue 22's defects in the tables, the report and the output folder, one
//! test each (numbered as in `../shared/defects`, inputs copied under
//! `tests/data/defects/`): `request_id` one type in every plan (21), a
//! report point per distinct load (22), a report that refuses to draw runs
//! whose metrics are gone (12), and `--force` that never leaves the old
//! summaries beside new runs.

use std::collections::BTreeMap;

use crate::parquet_util::{read_columns, read_table};
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// The schema of every part of `table` under `root` (they must agree).
fn part_schema(root: &std::path::Path, table: &str) -> String {
    let mut seen: Option<String> = None;
    for e in std::fs::read_dir(root.join(table)).unwrap() {
        let (schema, _) = read_table(&e.unwrap().path());
        assert!(seen.as_ref().is_none_or(|s| *s == schema), "{table}: two schemas");
        seen = Some(schema);
    }
    seen.unwrap()
}

/// 21: a plan with integer ids and one with text ids write one schema
/// (`request_id` text, `request_index` BIGINT), so one glob reads both.
#[test]
fn defect_21_request_id_is_text_in_every_plan() {
    let dir = Dir::new("d21");
    for (name, text) in [
        ("S.yaml", include_str!("../data/defects/21-request-id-glob/S.yaml")),
        ("p-int.yaml", include_str!("../data/defects/21-request-id-glob/p-int.yaml")),
        ("p-str.yaml", include_str!("../data/defects/21-request-id-glob/p-str.yaml")),
        ("w-int.jsonl", include_str!("../data/defects/21-request-id-glob/w-int.jsonl")),
        ("w-str.jsonl", include_str!("../data/defects/21-request-id-glob/w-str.jsonl")),
    ] {
        dir.create(name, text);
    }
    for plan in ["p-int.yaml", "p-str.yaml"] {
        TestCommand::new(&dir.path, &["-q", "--no-report", "--tokens", plan]).stdout();
    }
    let (int, text) = (dir.join("out/ids-int"), dir.join("out/ids-str"));
    for table in ["requests", "nodes", "tokens"] {
        let schema = part_schema(&int, table);
        assert_eq!(schema, part_schema(&text, table), "{table}");
        assert!(schema.contains("request_id:Utf8:false;request_index:Int64:false"), "{table}: {schema}");
    }
    assert_eq!(read_table(&int.join("runs.parquet")).0, read_table(&text.join("runs.parquet")).0);
    let key = |root: &std::path::Path, table: &str| {
        let part = std::fs::read_dir(root.join(table)).unwrap().next().unwrap().unwrap().path();
        read_columns(&part, &["request_id", "request_index"])
    };
    assert_eq!(key(&int, "requests"), [["0", "0"], ["1", "1"], ["2", "2"]]);
    assert_eq!(key(&text, "requests"), [["req-0", "0"], ["req-1", "1"], ["req-2", "2"]]);
    assert_eq!(key(&text, "nodes"), key(&text, "requests"));
}

/// A load chart of the report, read from its spec: the x axis's title and
/// each line (`deployment series stat`, or `deployment stat` where the
/// series is the statistic) → its points (load, value at the worst seed).
type Chart = (String, BTreeMap<String, Vec<(f64, f64)>>);

fn chart_points(html: &str, id: &str, stat: &str) -> Chart {
    let spec = crate::util::chart_spec(html, id);
    let layers = spec["spec"]["layer"].as_array().unwrap();
    let x_title = layers.last().unwrap()["encoding"]["x"]["title"].as_str().unwrap().to_owned();
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for row in spec["data"]["values"].as_array().unwrap().iter().filter(|r| r["stat"] == stat) {
        let text = |k: &str| row[k].as_str().unwrap().to_owned();
        let name = if text("series") == stat {
            format!("{} {stat}", text("deployment"))
        } else {
            format!("{} {} {stat}", text("deployment"), text("series"))
        };
        lines.entry(name).or_default().push((row["load"].as_f64().unwrap(), row["value"].as_f64().unwrap()));
    }
    (x_title, lines)
}

/// 22: the quickstart's grid — concurrency [open, 8, 32] × rate scale [1, 2]
/// × max_num_seqs [64, 256]: every run is its own point of the served chart,
/// at the load it was offered (req/s, issue 29: absolute, not × rate), each
/// concurrency (open loop included) a series; nothing averaged across
/// loads, nothing at x = 0.
#[test]
fn defect_22_report_draws_each_load_as_its_own_point() {
    let dir = Dir::new("d22");
    dir.create("S.yaml", include_str!("../data/defects/22-report-averaging/S.yaml"));
    dir.create("qs.yaml", include_str!("../data/defects/22-report-averaging/qs.yaml"));
    TestCommand::new(&dir.path, &["-q", "qs.yaml"]).stdout();
    let html = dir.read("out/report.html");
    let (x_label, served) = chart_points(&html, "throughput", "served");
    assert!(x_label.starts_with("offered load (req/s)"), "{x_label}");
    // The runs, from their own metrics.
    let manifest: serde_json::Value = serde_json::from_str(&dir.read("out/manifest.json")).unwrap();
    let runs = manifest["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 12);
    let mut points = 0;
    for r in runs {
        let metrics: serde_json::Value =
            serde_json::from_str(&dir.read(&format!("out/runs/{}/metrics.json", r["run_id"].as_str().unwrap())))
                .unwrap();
        let cap = match r["concurrency"].as_u64() {
            Some(c) => format!("≤ {c} in flight"),
            None => "open loop".to_owned(),
        };
        // The chart names what varies: the override (as its column).
        let name = format!("engine_max_num_seqs={} {cap} served", r["overrides"]["engine.max_num_seqs"]);
        let series = served.get(&name).unwrap_or_else(|| panic!("no series {name} in {:?}", served.keys()));
        assert_eq!(series.len(), 2, "{name}: one point per rate scale");
        let (x, rps) = (r["offered_rps"].as_f64().unwrap(), metrics["responses_per_sec"].as_f64().unwrap());
        assert!(x > 1.0, "{x}: req/s, not a rate scale");
        let point = series.iter().find(|p| (p.0 - x).abs() < 0.02 * x).unwrap_or_else(|| panic!("{name}: no x = {x}"));
        assert!((point.1 - rps).abs() < 0.02 * rps, "{name} at {x}: drawn {} req/s, ran {rps}", point.1);
        points += 1;
    }
    assert_eq!((points, served.len(), served.values().map(Vec::len).sum::<usize>()), (12, 6, 12));
    // Each latency chart: the p99 of the same 6 series, 12 points.
    for id in ["ttft", "itl", "e2e"] {
        let (_, lines) = chart_points(&html, id, "p99");
        assert_eq!((lines.len(), lines.values().map(Vec::len).sum::<usize>()), (6, 12), "{id}");
    }
    // The runs table names each run's client.
    assert_eq!(html.matches("<td class=\"l\">open loop</td>").count(), 4);

    // Concurrency caps at one rate (agentic.yaml's grid): the offered load
    // on the x axis, each cap and open loop a series, the seeds a band and
    // the line their worst (fewest served), never their mean.
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &CHAT.lines().take(40).map(|l| format!("{l}\n")).collect::<String>());
    dir.create(
        "caps.yaml",
        "name: caps\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\n\
         grid:\n  concurrency: [null, 2, 4]\n  seed: [1, 2]\noutput: caps\n",
    );
    TestCommand::new(&dir.path, &["-q", "caps.yaml"]).stdout();
    let html = dir.read("caps/report.html");
    let (x_label, served) = chart_points(&html, "throughput", "served");
    assert!(x_label.starts_with("offered load (req/s)"), "{x_label}");
    assert_eq!(served.len(), 3, "{:?}", served.keys());
    let manifest: serde_json::Value = serde_json::from_str(&dir.read("caps/manifest.json")).unwrap();
    for (cap, name) in [(Some(2), "linear-test ≤ 2 in flight served"), (None, "linear-test open loop served")] {
        let worst = manifest["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["concurrency"].as_u64() == cap)
            .map(|r| {
                let m: serde_json::Value = serde_json::from_str(
                    &dir.read(&format!("caps/runs/{}/metrics.json", r["run_id"].as_str().unwrap())),
                )
                .unwrap();
                m["responses_per_sec"].as_f64().unwrap()
            })
            .fold(f64::MAX, f64::min);
        let points = &served[name];
        assert_eq!(points.len(), 1, "{name}");
        assert!((points[0].1 - worst).abs() < 0.02 * worst, "{name}: drawn {}, worst seed {worst}", points[0].1);
    }
}

/// 12: `report` on a folder whose runs' metrics are gone or corrupt is a
/// one-line error naming the file, exit 2, and no report.
#[test]
fn defect_12_report_without_the_runs_metrics_is_an_error() {
    let dir = Dir::new("d12");
    dir.create("S.yaml", include_str!("../data/defects/12-report-empty/S.yaml"));
    dir.create("p.yaml", include_str!("../data/defects/12-report-empty/p.yaml"));
    dir.create("w3.jsonl", include_str!("../data/defects/12-report-empty/w3.jsonl"));
    TestCommand::new(&dir.path, &["-q", "--no-report", "p.yaml"]).stdout();
    let manifest: serde_json::Value = serde_json::from_str(&dir.read("out/manifest.json")).unwrap();
    let first = manifest["runs"][0]["run_id"].as_str().unwrap().to_owned();
    let metrics = format!("out/runs/{first}/metrics.json");
    let good = dir.read(&metrics);
    // Gone.
    std::fs::remove_file(dir.join(&metrics)).unwrap();
    let err = TestCommand::new(&dir.path, &["report", "out"]).fails();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("blis-sweep: {metrics}: missing, though manifest.json lists the run as ok")),
        "{err}"
    );
    assert!(!dir.join("out/report.html").exists());
    // Corrupt.
    dir.create(&metrics, "{\"x\":");
    let err = TestCommand::new(&dir.path, &["report", "out"]).fails();
    assert!(err.starts_with(&format!("blis-sweep: {metrics}: not a run's metrics")), "{err}");
    assert!(!dir.join("out/report.html").exists());
    // Every run's folder gone.
    dir.create(&metrics, &good);
    std::fs::rename(dir.join("out/runs"), dir.join("runs-moved")).unwrap();
    let err = TestCommand::new(&dir.path, &["report", "out"]).fails();
    assert!(err.contains("/metrics.json: missing"), "{err}");
    // Back in place, the report draws both runs.
    std::fs::rename(dir.join("runs-moved"), dir.join("out/runs")).unwrap();
    TestCommand::new(&dir.path, &["report", "out"]).stdout();
    let html = dir.read("out/report.html");
    assert!(!html.contains("no data"));
    // A sweep runs a run with missing or corrupt metrics again, and reports it.
    std::fs::remove_file(dir.join(&metrics)).unwrap();
    TestCommand::new(&dir.path, &["-q", "p.yaml"]).stdout();
    assert_eq!(dir.read(&metrics), good);
    dir.create(&metrics, "{\"x\":");
    TestCommand::new(&dir.path, &["-q", "p.yaml"]).stdout();
    assert_eq!(dir.read(&metrics), good);
    assert!(!dir.read("out/report.html").contains("no data"));
}

/// `--force` redoes every run: the summaries of the old runs (runs table,
/// manifest, capacity table, report) are gone before the first new run
/// starts, so a forced sweep that stops part-way leaves none of them beside
/// its new runs.
#[test]
fn defect_force_removes_the_old_summaries_before_any_run() {
    let dir = Dir::new("dforce");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &CHAT.lines().take(20).map(|l| format!("{l}\n")).collect::<String>());
    dir.create(
        "p.yaml",
        "name: f\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\ngrid:\n  seed: [1, 2]\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "p.yaml"]).stdout();
    std::fs::copy(dir.join("out/runs.parquet"), dir.join("out/capacity.parquet")).unwrap();
    let summaries = ["runs.parquet", "manifest.json", "capacity.parquet", "report.html"];
    assert!(summaries.iter().all(|s| dir.join("out").join(s).exists()));
    // A run's old part cannot be removed (a folder in its place): the forced
    // sweep stops at that run, as an interrupted one would.
    let manifest: serde_json::Value = serde_json::from_str(&dir.read("out/manifest.json")).unwrap();
    let id = manifest["runs"][1]["run_id"].as_str().unwrap();
    let part = dir.join(&format!("out/nodes/part-{id}.parquet"));
    std::fs::remove_file(&part).unwrap();
    std::fs::create_dir_all(part.join("x")).unwrap();
    let err = TestCommand::new(&dir.path, &["-q", "--force", "-j", "1", "p.yaml"]).fails();
    assert!(err.contains(&format!("part-{id}.parquet")), "{err}");
    for s in summaries {
        assert!(!dir.join("out").join(s).exists(), "{s} left beside the new runs");
    }
    // Fixed, the sweep writes them anew.
    std::fs::remove_dir_all(&part).unwrap();
    TestCommand::new(&dir.path, &["-q", "--force", "p.yaml"]).stdout();
    assert!(summaries[..2].iter().chain(&summaries[3..]).all(|s| dir.join("out").join(s).exists()));
    assert!(!dir.join("out/capacity.parquet").exists());
}
