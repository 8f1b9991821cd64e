//! The client in front of the engine: a concurrency cap (FIFO send queue)
//! and a closed loop of virtual users, on hand-checked cases.

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, latencies_us, rows};

fn three_requests(arrivals: [f64; 3]) -> String {
    arrivals
        .iter()
        .enumerate()
        .map(|(i, a)| {
            format!(
                r#"{{"request_id": {i}, "arrival_time": {a}, "initial": [0], "sub_requests": [{{"kind": "llm", "input_tokens": 10, "output_tokens": 2, "next": []}}]}}"#
            ) + "\n"
        })
        .collect()
}

fn run(dir: &Dir, workload: &str, extra: &[&str]) -> (Vec<serde_json::Value>, serde_json::Value) {
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", workload);
    let mut args = vec!["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json"];
    args.extend_from_slice(extra);
    TestCommand::new(&dir.path, &args).stdout();
    (rows(&dir.read("r.jsonl")), serde_json::from_str(&dir.read("m.json")).unwrap())
}

#[test]
fn a_concurrency_cap_sends_one_at_a_time_in_arrival_order() {
    let dir = Dir::new("cap");
    let (rows, m) = run(&dir, &three_requests([0.0, 0.0, 0.001]), &["--concurrency", "1"]);
    // Each request alone: prefill 1000 + 2·10 = 1020 µs, one decode 1010 µs,
    // so 2030 µs from send to last token. Request 1 is sent when request 0
    // finishes (2030 µs), request 2 (arrived at 1000 µs) when 1 finishes.
    let sent: Vec<f64> = rows.iter().map(|r| r["arrival_time"].as_f64().unwrap()).collect();
    assert_eq!(sent, vec![0.0, 0.00203, 0.00406]);
    for row in &rows {
        assert_eq!(latencies_us(row, 0), vec![1020, 1010]);
    }
    assert_eq!(m["e2e_mean_ms"], 2.03);
    // Waits: 0, 2030 and 4060 − 1000 µs.
    let wait = m["send_wait_mean_ms"].as_f64().unwrap();
    assert!((wait - (2.03 + 3.06) / 3.0).abs() < 1e-9, "{wait}");
    // Without the cap all three share steps and finish sooner.
    let (_, open) = run(&dir, &three_requests([0.0, 0.0, 0.001]), &[]);
    assert!(open["sim_duration_s"].as_f64().unwrap() < m["sim_duration_s"].as_f64().unwrap());
}

#[test]
fn a_closed_loop_ignores_arrivals_and_waits_think_time() {
    let dir = Dir::new("closed");
    let (rows, m) =
        run(&dir, &three_requests([5.0, 6.0, 7.0]), &["--concurrency", "2", "--closed-loop", "--think-time", "0.5"]);
    // Two users start at 0 and are batched: prefill 1000 + 2·20 = 1040 µs,
    // decode 1000 + 10·2 = 1020 µs; both finish at 2060 µs. The first user
    // sends request 2 after 0.5 s of think time, alone: 1020 + 1010 µs.
    let sent: Vec<f64> = rows.iter().map(|r| r["arrival_time"].as_f64().unwrap()).collect();
    assert_eq!(sent, vec![0.0, 0.0, 0.50206]);
    assert_eq!(latencies_us(&rows[0], 0), vec![1040, 1020]);
    assert_eq!(latencies_us(&rows[2], 0), vec![1020, 1010]);
    assert_eq!(m["sim_duration_s"], 0.50409);
    assert_eq!(m["completed_requests"], 3);
}

#[test]
fn a_horizon_stops_a_closed_loop() {
    let dir = Dir::new("closed-horizon");
    let (rows, m) = run(
        &dir,
        &three_requests([0.0, 0.0, 0.0]),
        &["--concurrency", "1", "--closed-loop", "--think-time", "1", "--horizon", "0.5"],
    );
    assert_eq!(rows.len(), 1, "the next user request would be sent after the horizon");
    assert_eq!(m["completed_requests"], 1);
}

#[test]
fn rate_scale_divides_arrival_times() {
    let dir = Dir::new("rate-scale");
    let (rows, _) = run(&dir, &three_requests([0.0, 1.0, 2.0]), &["--rate-scale", "4"]);
    let arrivals: Vec<f64> = rows.iter().map(|r| r["arrival_time"].as_f64().unwrap()).collect();
    assert_eq!(arrivals, vec![0.0, 0.25, 0.5]);
}
