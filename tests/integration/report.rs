//! `report.html`: written at the end of a sweep (unless `--no-report`) and
//! by `blis-sweep report`, with its figures; CI opens it in headless
//! Chromium (`scripts/check-report.py`).

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand};

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
    // Two deployments, p99 (the worst seed) in each latency chart; served
    // and goodput in the throughput chart; the SLO's two targets as lines.
    assert_eq!(html.matches("class=\"series\"").count(), 3 * 2 + 4);
    assert_eq!(html.matches("class=\"target\"").count(), 2);
    // One row per run, nothing fetched from elsewhere.
    let runs = &html[html.find("id=\"runs\"").unwrap()..];
    assert_eq!(runs[..runs.find("</table>").unwrap()].matches("<tr>").count(), 1 + 6);
    assert!(
        !html.contains("http://")
            || html.matches("http://").count() == html.matches("http://www.w3.org/2000/svg").count()
    );
    // No script runs: the one script element is the page's data, JSON.
    assert_eq!(html.matches("<script").count(), 1);
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
