//! Admission and flow control through the real binary: a token bucket
//! rejects what it cannot pay for, a full gateway queue sheds the less
//! urgent call (and a newcomer no more urgent than what it holds), a TTL
//! expires a waiting call, each with its error string in the result rows
//! and its count in the metrics JSON's `gateway` block (absent without the
//! keys); bad keys are one-line errors naming the field.

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

/// One llm call of 10 prompt tokens and `output` tokens, of `class`.
fn row(id: u64, at: f64, output: u32, class: &str) -> String {
    format!(
        r#"{{"request_id":{id},"arrival_time":{at},"slo_class":"{class}","initial":[0],"sub_requests":[{{"kind":"llm","next":[],"input_tokens":10,"output_tokens":{output}}}]}}"#
    )
}

/// Runs `rows_` on the linear scenario (one engine of one sequence) with
/// `router`; the result rows and the metrics JSON.
fn run(router: &str, rows_: &[String]) -> (Vec<serde_json::Value>, serde_json::Value) {
    let dir = Dir::new("gateway");
    let scenario = LINEAR_SCENARIO.replace("max_num_seqs: 16", "max_num_seqs: 1");
    dir.create("s.yaml", &format!("{scenario}{router}"));
    dir.create("w.jsonl", &(rows_.join("\n") + "\n"));
    TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "out.jsonl", "--metrics", "m.json"])
        .stdout();
    (rows(&dir.read("out.jsonl")), serde_json::from_str(&dir.read("m.json")).unwrap())
}

fn error(row: &serde_json::Value) -> String {
    row["sub_requests"][0]["error"].as_str().unwrap_or("").to_owned()
}

#[test]
fn a_token_bucket_admits_what_it_holds_and_rejects_the_rest() {
    // 25 tokens, no refill: two prompts of 10 are paid for, the third is not.
    let w: Vec<String> = (0..3).map(|i| row(i, i as f64, 2, "standard")).collect();
    let (out, m) = run("router: {admission: {policy: token-bucket, capacity: 25, refill_per_s: 0}}\n", &w);
    assert_eq!(error(&out[0]), "");
    assert_eq!(error(&out[1]), "");
    assert!(error(&out[2]).starts_with("rejected: the token bucket holds fewer tokens"), "{}", error(&out[2]));
    let g = &m["gateway"];
    assert_eq!((g["admitted"].as_u64(), g["rejected_token_bucket"].as_u64()), (Some(2), Some(1)), "{g}");
    assert_eq!(m["rejected_requests"], 1);
    // Refilled at 10 tokens/s, 1 s later the bucket holds 10 again: all three go.
    let (_, m) = run("router: {admission: {policy: token-bucket, capacity: 25, refill_per_s: 10}}\n", &w);
    assert_eq!(m["gateway"]["rejected_token_bucket"], 0);
}

#[test]
fn a_full_queue_sheds_the_less_urgent_call_and_a_ttl_expires_a_waiting_one() {
    // One sequence, saturated from one request waiting: request 0 runs for
    // ~100 steps, 1 waits in the engine; 2 (sheddable) waits at the gateway.
    let w = [
        row(0, 0.0, 100, "critical"),
        row(1, 0.001, 2, "critical"),
        row(2, 0.002, 2, "sheddable"),
        row(3, 0.003, 2, "critical"),
        row(4, 0.004, 2, "batch"),
    ];
    let sat = "saturation: {queue_depth_threshold: 1}";
    let (out, m) = run(&format!("router: {{flow_control: {{max_queue: 1}}, {sat}}}\n"), &w);
    // 3 (critical) takes 2's place; 4 (batch) finds the queue full of a more urgent call.
    assert!(error(&out[2]).contains("a more urgent call took its place"), "{}", error(&out[2]));
    assert!(error(&out[4]).starts_with("shed: the gateway queue was full (1 calls"), "{}", error(&out[4]));
    for i in [0, 1, 3] {
        assert_eq!(error(&out[i]), "", "request {i}");
    }
    let g = &m["gateway"];
    assert_eq!(g["shed"], 2, "{g}");
    assert_eq!((g["queued"].as_u64(), g["dispatched"].as_u64(), g["max_depth"].as_u64()), (Some(4), Some(3), Some(1)));
    assert!(g["queue_wait_p99_ms"].as_f64().unwrap() > 50.0, "3 waited for 0 to finish: {g}");
    assert_eq!(m["completed_requests"], 3);

    // A 10 ms TTL: 2 expires after 10–11 ms (the 1 ms tick), 3 and 4 too.
    let (out, m) = run(&format!("router: {{flow_control: {{ttl_ms: 10}}, {sat}}}\n"), &w);
    for i in [2, 3, 4] {
        let e = error(&out[i]);
        let waited: f64 =
            e.strip_prefix("expired: waited ").and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
        assert!((10.0..11.0).contains(&waited), "request {i}: {e}");
    }
    assert_eq!(m["gateway"]["expired"], 3);
    assert_eq!(m["completed_requests"], 2);
}

#[test]
fn without_the_keys_there_is_no_gateway_block() {
    let (_, m) = run("", &[row(0, 0.0, 2, "critical")]);
    assert!(m.get("gateway").is_none(), "{m}");
}

#[test]
fn bad_gateway_keys_are_one_line_errors_naming_the_field() {
    for (router, field) in [
        ("router: {flow_control: {order: lifo}}", "router.flow_control.order"),
        ("router: {admission: {policy: token-bucket, capacity: 10}}", "router.admission.refill_per_s"),
        ("router: {flow_control: {usage_limit: 1.5}}", "router.flow_control.usage_limit"),
        ("router: {flow_control: {bands: 3}}", "bands"),
    ] {
        let dir = Dir::new("gateway-bad");
        dir.create("s.yaml", &format!("{LINEAR_SCENARIO}{router}\n"));
        dir.create("w.jsonl", &(row(0, 0.0, 2, "critical") + "\n"));
        let stderr = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", "o.jsonl"]).fails();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("blis-sweep: ") && stderr.contains("s.yaml:10: ") && stderr.contains(field),
            "{stderr}"
        );
        assert!(!dir.join("o.jsonl").exists());
    }
}

#[test]
fn the_deadline_order_serves_the_earliest_deadline_first_and_each_call_of_a_dag_queues() {
    // 0 runs, 1 waits in the engine (saturated); 2, 3, 4 wait at the
    // gateway with deadlines send + 30, 20, 10 s.
    let mut w = vec![row(0, 0.0, 100, "critical"), row(1, 0.001, 2, "critical")];
    for (i, target) in [(2, 30.0), (3, 20.0), (4, 10.0)] {
        let r = row(i, i as f64 / 1e3, 2, "batch");
        w.push(r.replacen(r#""slo_class""#, &format!(r#""slo_target":{target},"slo_class""#), 1));
    }
    let finish = |out: &[serde_json::Value], i: usize| -> f64 {
        let lat: f64 =
            out[i]["sub_requests"][0]["token_latency"].as_array().unwrap().iter().map(|t| t.as_f64().unwrap()).sum();
        i as f64 / 1e3 + lat
    };
    let sat = "saturation: {queue_depth_threshold: 1}";
    let (out, _) = run(&format!("router: {{flow_control: {{order: deadline}}, {sat}}}\n"), &w);
    assert!(finish(&out, 4) < finish(&out, 3) && finish(&out, 3) < finish(&out, 2), "{out:?}");
    let (out, _) = run(&format!("router: {{flow_control: {{order: fifo}}, {sat}}}\n"), &w);
    assert!(finish(&out, 2) < finish(&out, 3) && finish(&out, 3) < finish(&out, 4), "{out:?}");

    // llm → llm: the second call queues again when it becomes ready.
    let dag = r#"{"request_id":0,"arrival_time":0.0,"initial":[0],"sub_requests":[{"kind":"llm","next":[1],"input_tokens":10,"output_tokens":2},{"kind":"llm","next":[],"input_tokens":10,"output_tokens":2}]}"#;
    let (_, m) = run("router: {flow_control: {}}\n", &[dag.to_owned()]);
    assert_eq!((m["gateway"]["queued"].as_u64(), m["gateway"]["dispatched"].as_u64()), (Some(2), Some(2)));
}
