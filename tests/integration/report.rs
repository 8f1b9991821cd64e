//! `report.html`: written at the end of a sweep (unless `--no-report`) and
//! by `blis-sweep report`, with its figures; CI opens it in headless
//! Chromium (`scripts/check-report.py`).

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, chart_spec};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

#[test]
fn a_sweep_writes_a_report_with_its_figures() {
    let dir = Dir::new("report");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", CHAT);
    dir.create(
        "plan.yaml",
        "name: r\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\nslo: {ttft_p99_ms: 500, itl_p99_ms: 40}\n\
         grid:\n  rate_scale: [1.0, 2.0, 4.0]\n  overrides:\n    engine.max_num_seqs: [8, 16]\noutput: out\n",
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let html = dir.read("out/report.html");
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    for id in ["ttft", "itl", "e2e", "throughput", "runs"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id}");
    }
    // Two deployments, a small multiple each; p99 (the worst seed) and p50
    // in each latency chart at the three loads; served and goodput in the
    // throughput chart; the SLO's two targets as bands.
    for (id, stats, target) in [
        ("ttft", ["p99", "p50"], Some(500.0)),
        ("itl", ["p99", "p50"], Some(40.0)),
        ("e2e", ["p99", "p50"], None),
        ("throughput", ["served", "goodput"], None),
    ] {
        let spec = chart_spec(&html, id);
        let facets: Vec<&str> = spec["facet"]["sort"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        assert_eq!(facets, ["engine_max_num_seqs=8", "engine_max_num_seqs=16"], "{id}");
        let rows = spec["data"]["values"].as_array().unwrap();
        for stat in stats {
            assert_eq!(rows.iter().filter(|r| r["stat"] == stat).count(), 2 * 3, "{id} {stat}");
        }
        let bands: Vec<f64> = spec["spec"]["layer"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["mark"]["type"] == "rect")
            .map(|l| l["encoding"]["y"]["datum"].as_f64().unwrap())
            .collect();
        assert_eq!(bands, target.into_iter().collect::<Vec<_>>(), "{id}");
    }
    // One row per run.
    let runs = &html[html.find("id=\"runs\"").unwrap()..];
    assert_eq!(runs[..runs.find("</table>").unwrap()].matches("<tr>").count(), 1 + 6);
    // Nothing fetched from elsewhere: the libraries are inline, no element
    // names an address to load.
    for fetch in ["<script src", "<link", "<img src=\"http", "<iframe", "@import", "\"url\":"] {
        assert!(!html.contains(fetch), "{fetch}");
    }
    // Scripts: the error capture, Vega, Vega-Lite, vega-embed and the
    // renderer; the rest are JSON (a spec per chart, the page's data).
    assert_eq!(html.matches("<script>").count(), 5);
    assert_eq!(
        html.matches("<script type=\"application/json\" class=\"spec\">").count(),
        html.matches("<figure class=\"chart\"").count()
    );
    assert!(html.contains("<script type=\"application/json\" id=\"report-data\">"));
    // --no-report leaves it out; `report` writes it again.
    std::fs::remove_file(dir.join("out/report.html")).unwrap();
    TestCommand::new(&dir.path, &["-q", "--no-report", "plan.yaml"]).stdout();
    assert!(!dir.join("out/report.html").exists());
    TestCommand::new(&dir.path, &["report", "out"]).output();
    assert_eq!(dir.read("out/report.html"), html);
    let err = TestCommand::new(&dir.path, &["report", "."]).fails();
    assert!(err.contains("not a sweep's output folder"), "{err}");
}
