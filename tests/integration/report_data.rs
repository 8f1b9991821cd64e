//! The report's data (issue 29): one point per grid point of the runs
//! table, seeds a spread, loads absolute, open and closed loop apart; the
//! Pareto frontier of a capacity search equal to a DuckDB query of the same
//! tables; the capacity's answer first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::parquet_util::read_columns;
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, chart_spec};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// The JSON the page embeds (`<script type="application/json" id="report-data">`).
fn embedded(html: &str) -> Value {
    let open = r#"<script type="application/json" id="report-data">"#;
    let start = html.find(open).expect("the report embeds its data") + open.len();
    let end = start + html[start..].find("</script>").unwrap();
    serde_json::from_str(&html[start..end].replace("<\\/", "</")).unwrap()
}

/// The workload's own rate: requests − 1 over the span of their arrivals.
fn base_rate(jsonl: &str) -> f64 {
    let arrivals: Vec<f64> = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["arrival_time"].as_f64().unwrap())
        .collect();
    let (first, last) = arrivals.iter().fold((f64::MAX, f64::MIN), |(a, b), &t| (a.min(t), b.max(t)));
    (arrivals.len() - 1) as f64 / (last - first)
}

#[test]
fn every_grid_point_is_one_point_its_seeds_a_spread() {
    let dir = Dir::new("report-data-points");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", CHAT);
    dir.create(
        "plan.yaml",
        "name: r\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\nslo: {ttft_p99_ms: 500, itl_p99_ms: 40}\n\
         grid:\n  rate_scale: [1.0, 2.0]\n  seed: [1, 2]\n  concurrency: [null, 4]\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let html = dir.read("out/report.html");
    let data = embedded(&html);
    let points = data["points"].as_array().unwrap();
    // The runs table: 8 runs, 4 grid points (2 rate scales × open loop and a cap).
    let runs = read_columns(
        &dir.join("out/runs.parquet"),
        &["scenario", "overrides", "concurrency", "rate_scale", "seed", "ttft_p99_ms", "tokens_per_sec", "gpus"],
    );
    assert_eq!(runs.len(), 8);
    let mut grid: BTreeMap<(String, String, String, String), Vec<&Vec<String>>> = BTreeMap::new();
    for r in &runs {
        grid.entry((r[0].clone(), r[1].clone(), r[2].clone(), r[3].clone())).or_default().push(r);
    }
    assert_eq!(grid.len(), 4);
    assert_eq!(points.len(), grid.len(), "one point per grid point");
    let base = base_rate(CHAT);
    for p in points {
        let concurrency = p["concurrency"].as_i64().map_or_else(|| "null".to_owned(), |c| c.to_string());
        let rate = p["rate_scale"].as_f64().unwrap();
        let key = (
            p["scenario"].as_str().unwrap().to_owned(),
            serde_json::to_string(&p["overrides"]).unwrap(),
            concurrency.clone(),
            format!("{rate}"),
        );
        let rows = grid.get(&key).unwrap_or_else(|| panic!("{key:?} not in {:?}", grid.keys()));
        // Both seeds, as a spread: the runs' lowest and highest, not a mean.
        assert_eq!(p["seeds"], serde_json::json!([1, 2]), "{p}");
        let ttft: Vec<f64> = rows.iter().map(|r| r[5].parse().unwrap()).collect();
        let spread = &p["metrics"]["ttft_p99_ms"];
        assert_eq!(spread["min"].as_f64().unwrap(), ttft.iter().copied().fold(f64::MAX, f64::min), "{p}");
        assert_eq!(spread["max"].as_f64().unwrap(), ttft.iter().copied().fold(f64::MIN, f64::max), "{p}");
        let per_gpu: Vec<f64> =
            rows.iter().map(|r| r[6].parse::<f64>().unwrap() / r[7].parse::<f64>().unwrap()).collect();
        assert_eq!(
            p["metrics"]["tokens_per_sec_per_gpu"]["min"].as_f64().unwrap(),
            per_gpu.iter().copied().fold(f64::MAX, f64::min)
        );
        // The load is absolute: the workload's own rate × the rate scale.
        let offered = p["offered_rps"].as_f64().unwrap();
        assert!((offered - base * rate).abs() < 1e-9 * offered, "{offered} vs {}", base * rate);
        let client = if concurrency == "null" { "open_loop" } else { "capped" };
        assert_eq!(p["client"], client);
    }
    // The page: the frontier's two views, latency against the offered load
    // (req/s), seeds drawn as bands, the runs' numbers rounded.
    for id in ["pareto", "pareto-ttft", "frontier", "ttft", "itl", "e2e", "throughput", "runs"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id}");
    }
    assert!(html.contains("offered load (req/s)") && !html.contains("× the workload"));
    // Seeds drawn as bands: each latency chart has its area layer, the
    // line at the worst seed, the band from the lowest to the highest.
    let ttft = chart_spec(&html, "ttft");
    assert!(ttft["spec"]["layer"].as_array().unwrap().iter().any(|l| l["mark"]["type"] == "area"), "no band");
    for row in ttft["data"]["values"].as_array().unwrap() {
        assert_eq!((row["value"].clone(), row["seeds"].clone()), (row["hi"].clone(), 2.into()), "{row}");
    }
    // Each frontier view: every point that ran, once.
    for id in ["pareto", "pareto-ttft"] {
        assert_eq!(chart_spec(&html, id)["data"]["values"].as_array().unwrap().len(), points.len(), "{id}");
    }
    assert!(!data["frontier"]["tokens_per_sec_per_user"].as_array().unwrap().is_empty());
    let runs_table = &html[html.find("id=\"runs\"").unwrap()..];
    let runs_table = &runs_table[..runs_table.find("</table>").unwrap()];
    assert!(!regex_like_long_float(runs_table), "{runs_table}");
}

/// Whether `text` shows a number with more than four decimals (a raw float).
fn regex_like_long_float(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .any(|w| w.split_once('.').is_some_and(|(_, d)| d.len() > 4 && d.chars().all(|c| c.is_ascii_digit())))
}

#[test]
fn closed_loop_runs_are_charted_against_users_apart_from_open_loop() {
    let dir = Dir::new("report-data-closed");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", CHAT);
    dir.create(
        "plan.yaml",
        "name: r\nworkload: {path: w.jsonl, closed_loop: true}\nscenarios: [s.yaml]\n\
         grid:\n  concurrency: [2, 8]\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let html = dir.read("out/report.html");
    let data = embedded(&html);
    let points = data["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for p in points {
        assert_eq!(p["client"], "closed_loop");
        assert_eq!((p["offered_rps"].clone(), p["users"].clone()), (Value::Null, p["concurrency"].clone()));
    }
    assert!(html.contains("id=\"ttft-closed\"") && !html.contains("id=\"ttft\""));
    assert!(html.contains("users (closed loop)") && !html.contains("offered load (req/s)"));
    // Without the runs table: the runs, and a line saying what is missing.
    std::fs::remove_file(dir.join("out/runs.parquet")).unwrap();
    TestCommand::new(&dir.path, &["report", "out"]).stdout();
    let html = dir.read("out/report.html");
    assert!(html.contains("runs.parquet is missing") && !html.contains("id=\"pareto\""));
    assert_eq!(embedded(&html)["points"], serde_json::json!([]));
}

/// The Python that has DuckDB: `BLIS_PYTHON`, CI's venv, or `python3`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("BLIS_PYTHON") {
        return p.into();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-venv/bin/python");
    if venv.exists() { venv } else { "python3".into() }
}

/// The frontier by DuckDB over `runs.parquet`, as `[scenario, overrides,
/// rate_scale, x, y]` rows: a grid point's worst seed (every seed ok), and
/// no other point at least as good on both axes and better on one.
const FRONTIER_SQL: &str = "
with g as (
  select scenario, overrides, concurrency, rate_scale,
         min(1000.0 / tpot_mean_ms) as per_user, -max(ttft_p99_ms) as neg_ttft, min(tokens_per_sec / gpus) as per_gpu
  from read_parquet(?) group by all
  having bool_and(status = 'ok') and min(tpot_mean_ms) > 0 and min(gpus) > 0)
select scenario, overrides, rate_scale, X, per_gpu from g a
where not exists (select 1 from g b where b.X >= a.X and b.per_gpu >= a.per_gpu and (b.X > a.X or b.per_gpu > a.per_gpu))
order by all";

fn duckdb_frontier(runs: &Path, x: &str) -> Vec<(String, Value, f64, f64, f64)> {
    // TTFT is lower-better: the query compares its negation.
    let sql = FRONTIER_SQL.replace('X', if x == "ttft" { "neg_ttft" } else { x });
    let script = "import duckdb, json, sys\n\
                  rows = duckdb.execute(sys.argv[1], [sys.argv[2]]).fetchall()\n\
                  print(json.dumps([list(r) for r in rows]))\n";
    let out = Command::new(python())
        .args(["-c", script, &sql, runs.to_str().unwrap()])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}; set BLIS_PYTHON to a Python with duckdb", python().display()));
    assert!(
        out.status.success(),
        "{} with duckdb (pip install duckdb, or BLIS_PYTHON): {}",
        python().display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<Value>> = serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter()
        .map(|r| {
            let x = r[3].as_f64().unwrap();
            (
                r[0].as_str().unwrap().to_owned(),
                serde_json::from_str(r[1].as_str().unwrap()).unwrap(),
                r[2].as_f64().unwrap(),
                if x < 0.0 { -x } else { x },
                r[4].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_pareto_frontier_of_capacity_70b_equals_a_duckdb_query_of_its_tables() {
    let dir = Dir::new("report-data-pareto");
    // The shipped plan at a reduced size (600 requests, 10 % precision:
    // about 30 s in a debug build, every deployment and seed probed).
    let plan = include_str!("../../sweeps/capacity-70b.yaml")
        .replace("num_requests: 3000", "num_requests: 600")
        .replace("precision: 0.02", "precision: 0.1")
        .replace("output: ../results/capacity-70b", "output: out");
    assert!(plan.contains("num_requests: 600") && plan.contains("output: out"), "the shipped plan changed");
    dir.create("plan.yaml", &plan);
    TestCommand::new(&dir.path, &["capacity", "-q", "plan.yaml"]).stdout();
    let html = dir.read("out/report.html");
    let data = embedded(&html);
    let points = data["points"].as_array().unwrap();
    let runs = read_columns(&dir.join("out/runs.parquet"), &["scenario", "overrides", "rate_scale"]);
    let grid: BTreeSet<&Vec<String>> = runs.iter().collect();
    assert_eq!(points.len(), grid.len(), "one point per probe");
    for (view, x, metric, high) in [
        ("tokens_per_sec_per_user", "per_user", "tokens_per_sec_per_user", false),
        ("ttft_p99_ms", "ttft", "ttft_p99_ms", true),
    ] {
        let ours: Vec<(String, Value, f64, f64, f64)> = data["frontier"][view]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| {
                let p = &points[id.as_u64().unwrap() as usize];
                let m = |name: &str, high: bool| p["metrics"][name][if high { "max" } else { "min" }].as_f64().unwrap();
                (
                    p["scenario"].as_str().unwrap().to_owned(),
                    p["overrides"].clone(),
                    p["rate_scale"].as_f64().unwrap(),
                    m(metric, high),
                    m("tokens_per_sec_per_gpu", false),
                )
            })
            .collect();
        let theirs = duckdb_frontier(&dir.join("out/runs.parquet"), x);
        assert!(theirs.len() >= 3, "{view}: a frontier of {} points", theirs.len());
        let key = |r: &(String, Value, f64, f64, f64)| (r.0.clone(), r.1.to_string(), r.2.to_bits());
        let ours_keys: BTreeSet<_> = ours.iter().map(key).collect();
        let theirs_keys: BTreeSet<_> = theirs.iter().map(key).collect();
        assert_eq!(ours_keys, theirs_keys, "{view}");
        for t in &theirs {
            let o = ours.iter().find(|o| key(o) == key(t)).unwrap();
            for (a, b) in [(o.3, t.3), (o.4, t.4)] {
                assert!((a - b).abs() <= 1e-9 * b.abs(), "{view}: {o:?} vs {t:?}");
            }
        }
    }
    // The answer first: the cheapest deployment meeting 10 req/s, before the
    // frontier, as the capacity table ranks it.
    let answer = html.find("class=\"answer\"").expect("an answer");
    assert!(answer < html.find("id=\"pareto\"").unwrap() && answer < html.find("id=\"ttft\"").unwrap());
    let capacity = data["capacity"].as_array().unwrap();
    let cheapest: Vec<&Value> = capacity.iter().filter(|r| r["cheapest"] == true).collect();
    assert_eq!(cheapest.len(), 1);
    assert_eq!(capacity[0]["cheapest"], true);
    let rows = read_columns(&dir.join("out/capacity.parquet"), &["scenario", "gpus", "meets_target", "cost_per_mtok"]);
    let fewest = rows.iter().filter(|r| r[2] == "true").map(|r| r[1].parse::<i64>().unwrap()).min().unwrap();
    assert_eq!(cheapest[0]["gpus"].as_i64().unwrap(), fewest);
    let binding = &cheapest[0]["binding"];
    assert!(["TTFT p99", "ITL p99"].contains(&binding["metric"].as_str().unwrap()), "{binding}");
    assert!(binding["margin"].as_f64().unwrap() >= 0.0 && binding["margin"].as_f64().unwrap() < 1.0);
    assert!(html.contains("the worst seed decides"));
}

/// A sharded sweep's parent folder is reported as one sweep: the same
/// points, frontier and charts as the sweep run on one machine.
#[test]
fn a_sharded_sweeps_parent_is_reported_as_the_whole_sweep() {
    let dir = Dir::new("report-data-shards");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &CHAT.lines().take(30).map(|l| format!("{l}\n")).collect::<String>());
    let plan = |out: &str| {
        format!(
            "name: sh\nworkload: {{path: w.jsonl}}\nscenarios: [s.yaml]\nslo: {{ttft_p99_ms: 400}}\n\
             grid: {{concurrency: [null, 4], rate_scale: [1.0, 2.0], seed: [1, 2]}}\noutput: {out}\n"
        )
    };
    dir.create("whole.yaml", &plan("whole"));
    dir.create("sharded.yaml", &plan("out"));
    TestCommand::new(&dir.path, &["-q", "whole.yaml"]).stdout();
    for shard in ["0/3", "1/3", "2/3"] {
        TestCommand::new(&dir.path, &["-q", "sharded.yaml", "--shard", shard]).stdout();
    }
    assert!(!dir.join("out/report.html").exists(), "a shard reports only with the whole");
    TestCommand::new(&dir.path, &["report", "out"]).stdout();
    let (whole, sharded) = (dir.read("whole/report.html"), dir.read("out/report.html"));
    assert!(sharded.contains("A sharded sweep: 3 shards (shard=0, shard=1, shard=2), reported as one."));
    assert_eq!(embedded(&sharded), embedded(&whole));
    assert_eq!(embedded(&whole)["points"].as_array().unwrap().len(), 4);
    for id in ["pareto", "ttft", "throughput"] {
        assert_eq!(chart_spec(&sharded, id), chart_spec(&whole, id), "{id}");
    }
    let runs = |html: &str| html[html.find("id=\"runs\"").unwrap()..].split("</table>").next().unwrap().to_owned();
    assert_eq!(runs(&sharded), runs(&whole));
    // A shard not written yet is named: the first shard recorded 3.
    std::fs::rename(dir.join("out/shard=1"), dir.join("held-back")).unwrap();
    TestCommand::new(&dir.path, &["report", "out"]).stdout();
    let partial = dir.read("out/report.html");
    assert!(partial.contains("the sweep has 3 shards (shards.json); shard=1 not written yet"), "{partial}");
    std::fs::rename(dir.join("held-back"), dir.join("out/shard=1")).unwrap();
    // Shards of another plan are refused, naming the file (one moved in: a
    // shard of another count would be refused before writing anything).
    dir.create("other.yaml", &plan("other").replace("seed: [1, 2]", "seed: [3, 4]"));
    TestCommand::new(&dir.path, &["-q", "other.yaml", "--shard", "3/4"]).stdout();
    std::fs::rename(dir.join("other/shard=3"), dir.join("out/shard=3")).unwrap();
    let err = TestCommand::new(&dir.path, &["report", "out"]).fails();
    assert!(err.contains("out/shard=3/manifest.json: plan_hash") && err.contains("shards of different plans"), "{err}");
}
