//! Issue 29, item 4: what a sweep says before and while it runs — the runs,
//! requests and tokens it will simulate with an estimated time and disk use,
//! probe lines naming the deployment, the load and the binding SLO metric —
//! and `report` over a sharded sweep's parent folder.

use crate::util::{Dir, LINEAR_SCENARIO, TWO_MS_SCENARIO, TestCommand, rows};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_sweep_says_its_runs_requests_tokens_time_and_disk_before_it_starts() {
    let dir = Dir::new("progress-estimate");
    dir.create("s.yaml", LINEAR_SCENARIO);
    TestCommand::new(
        &dir.path,
        &["generate", "--preset", "chatbot", "--rate", "20", "--num-requests", "40", "-o", "w.jsonl"],
    )
    .stdout();
    let tokens: u64 =
        rows(&dir.read("w.jsonl")).iter().map(|r| r["sub_requests"][0]["output_tokens"].as_u64().unwrap()).sum();
    dir.create(
        "plan.yaml",
        "name: est\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\ngrid: {concurrency: [null, 4, 8]}\noutput: out\n",
    );
    let log = stderr(&TestCommand::new(&dir.path, &["plan.yaml", "-j", "1", "--no-report"]).output());
    let first = log.lines().next().unwrap();
    let want = format!("est: 3 runs: 0 done before, 3 to run: 120 requests, {} output tokens; estimated ", 3 * tokens);
    assert!(first.starts_with(&want), "{log}");
    // 3 runs × 40 kB + 120 requests × 83 bytes (src/sweep/estimate.rs).
    assert!(first.ends_with(" on 1 core, 130 kB of tables"), "{log}");
    assert!(!log.contains("warning:"), "{log}");
    // A rerun has nothing to simulate; -q says nothing at all.
    let again = stderr(&TestCommand::new(&dir.path, &["plan.yaml", "-j", "1", "--no-report"]).output());
    assert!(again.starts_with("est: 3 runs: 3 done before, 0 to run: 0 requests, 0 output tokens; "), "{again}");
    let quiet = TestCommand::new(&dir.path, &["plan.yaml", "-q", "--force", "--no-report"]).output();
    assert!(quiet.status.success());
    assert_eq!(stderr(&quiet), "");
}

#[test]
fn probe_lines_name_the_deployment_the_load_and_the_binding_metric() {
    let dir = Dir::new("progress-probes");
    dir.create("s.yaml", TWO_MS_SCENARIO);
    let w: String = (0..1000)
        .map(|i| {
            format!(
                "{{\"request_id\":{i},\"arrival_time\":{},\"initial\":[0],\"sub_requests\":[{{\"kind\":\"llm\",\"input_tokens\":10,\"output_tokens\":2,\"next\":[]}}]}}\n",
                i as f64 / 100.0
            )
        })
        .collect();
    dir.create("w.jsonl", &w);
    dir.create(
        "plan.yaml",
        "name: c\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\ngrid: {overrides: {engine.max_num_seqs: [1]}}\n\
         search: {slo: {ttft_p99_ms: 5}, range: [100, 2000], precision: 0.05}\noutput: out\n",
    );
    let out = TestCommand::new(&dir.path, &["capacity", "plan.yaml", "--no-report"]).output();
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    let probes: Vec<&str> = log.lines().filter(|l| l.starts_with("[probe ")).collect();
    // 100 req/s: every TTFT is the 1 ms prefill step.
    let first = probes[0];
    assert!(
        first.starts_with(
            "[probe 1] two-ms [engine.max_num_seqs=1] @ 100 req/s: met, binding ttft_p99 1.0 ms ≤ 5.0 ms ("
        ),
        "{log}"
    );
    let id = &first[first.rfind('(').unwrap() + 1..];
    assert!(id.len() > 16 && id[..16].bytes().all(|b| b.is_ascii_hexdigit()) && id[16..].starts_with(", "), "{first}");
    assert!(id.ends_with(" s)"), "{first}");
    // 2000 req/s: the queue grows past every target.
    assert!(probes[1].starts_with("[probe 2] two-ms [engine.max_num_seqs=1] @ 2000 req/s: missed"), "{log}");
    assert!(probes.iter().any(|l| l.contains(": missed ttft_p99 ") && l.contains(" > 5.0 ms (")), "{log}");
}
