//! The engine's rules, observed through `blis-sweep run` and the library:
//! step pricing of a lone request, prefix caching, preemption, unservable
//! requests, seeded progress, determinism.

use std::path::Path;

use blis_sweep::latency::{LatencyModel, PrefillChunk, StepBatch};

use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, latencies_us, rows};

fn llm_row(id: u64, arrival: f64, input: u32, output: u32, extra: &str) -> String {
    format!(
        r#"{{"request_id": {id}, "arrival_time": {arrival}, "initial": [0], "sub_requests": [{{"kind": "llm", "input_tokens": {input}, "output_tokens": {output}, "next": []{extra}}}]}}"#
    )
}

fn run(dir: &Dir, scenario: &str, workload: &str) -> (Vec<serde_json::Value>, serde_json::Value) {
    dir.create("s.yaml", scenario);
    dir.create("w.jsonl", workload);
    TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "-q"])
        .stdout();
    (rows(&dir.read("r.jsonl")), serde_json::from_str(&dir.read("m.json")).unwrap())
}

#[test]
fn lone_request_is_priced_by_the_linear_model() {
    let dir = Dir::new("lone-linear");
    let (rows, m) = run(&dir, LINEAR_SCENARIO, &(llm_row(0, 0.0, 100, 5, "") + "\n"));
    // Prefill: 1000 + 2·100 µs; each decode: 1000 + 10·1 µs.
    assert_eq!(latencies_us(&rows[0], 0), vec![1200, 1010, 1010, 1010, 1010]);
    assert_eq!(m["completed_requests"], 1);
    assert_eq!(m["ttft_mean_ms"], 1.2);
    assert_eq!(m["itl_mean_ms"], 1.01);
    assert_eq!(m["e2e_mean_ms"], 5.24);
}

#[test]
fn lone_request_is_priced_by_the_default_model() {
    let dir = Dir::new("lone-default");
    let scenario = "model: Llama-3.1-8B\nhardware: H100\n";
    let (rows, _) = run(&dir, scenario, &(llm_row(0, 0.5, 1000, 4, "") + "\n"));
    let d = blis_sweep::scenario::load(&dir.join("s.yaml")).unwrap();
    // H100 has kernel tables and fitted constants: the measured-kernel model.
    assert_eq!(d.serving().latency.kind(), "kernels");
    let prefill = PrefillChunk { new_tokens: 1000, context_tokens: 0, samples: true };
    // TTFT: the front end's time, then the prefill step.
    let mut expected = vec![
        d.serving().latency.request_overhead_us()
            + d.serving().latency.step_time_us(&StepBatch { prefills: vec![prefill], ..StepBatch::default() }),
    ];
    for k in 0..3 {
        let decode = StepBatch { prefills: vec![], decodes: 1, decode_context_tokens: 1000 + k, spec_tokens: 0 };
        expected.push(d.serving().latency.step_time_us(&decode));
    }
    assert_eq!(latencies_us(&rows[0], 0), expected);
    assert!(expected[0] > expected[1], "prefill of 1000 tokens costs more than a decode");
}

/// vLLM's async scheduling: step N+1 is scheduled while step N runs, so a
/// request arriving during step N is first scheduled into step N+2.
#[test]
fn async_scheduling_delays_a_request_arriving_mid_step_by_one_step() {
    let dir = Dir::new("async");
    let workload = format!("{}\n{}\n", llm_row(0, 0.0, 100, 3, ""), llm_row(1, 0.0005, 100, 2, ""));
    let with = |on: bool| LINEAR_SCENARIO.replace("engine:\n", &format!("engine:\n  async_scheduling: {on}\n"));
    // Off: B joins A's first decode at 1200 µs (1000 + 2·100 + 10 µs), so
    // its TTFT is 2410 − 500 µs.
    let (rows, _) = run(&dir, &with(false), &workload);
    assert_eq!(latencies_us(&rows[0], 0), vec![1200, 1210, 1020]);
    assert_eq!(latencies_us(&rows[1], 0), vec![1910, 1020]);
    // On (vLLM's default): the step after A's prefill was already scheduled
    // when B arrived; B's prefill rides with A's last decode, ending at 3420.
    let (rows, _) = run(&dir, &with(true), &workload);
    assert_eq!(latencies_us(&rows[0], 0), vec![1200, 1010, 1210]);
    assert_eq!(latencies_us(&rows[1], 0), vec![2920, 1010]);
}

/// A client timeout aborts the request in the engine (tokens streamed so far
/// are kept) and frees its KV cache for the next one.
#[test]
fn a_client_timeout_aborts_the_request_and_frees_the_engine() {
    let dir = Dir::new("timeout");
    let run_with = |workload: &str, extra: &[&str]| {
        dir.create("s.yaml", LINEAR_SCENARIO);
        dir.create("w.jsonl", workload);
        let mut args = vec!["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "-q"];
        args.extend_from_slice(extra);
        TestCommand::new(&dir.path, &args).stdout();
        let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
        (rows(&dir.read("r.jsonl")), m)
    };
    // A: prefill ends at 1200 µs, decodes at 2210 and 3220; the client gives
    // up at 3000, during the step that would end at 3220. The step after it
    // (A's next decode, scheduled at 2210 under async scheduling) still runs
    // until 4230; B, arriving at 3500, is prefilled from then.
    let workload = format!("{}\n{}\n", llm_row(0, 0.0, 100, 5, ""), llm_row(1, 0.0035, 100, 2, ""));
    let (rows, m) = run_with(&workload, &["--timeout", "0.003"]);
    assert_eq!(latencies_us(&rows[0], 0), vec![1200, 1010]);
    assert_eq!(rows[0]["sub_requests"][0]["error"], "timed out: the client stopped waiting");
    assert_eq!(latencies_us(&rows[1], 0), vec![1930, 1010]);
    assert_eq!((m["timed_out_requests"].as_u64(), m["completed_requests"].as_u64()), (Some(1), Some(1)));
    // With one request in flight at most, B is sent when A is given up on
    // (3000 µs). With async scheduling the engine sees the abort at 3220,
    // when the step in flight ends; the step after it (A's next decode) was
    // scheduled when that one started, and still runs (3220–4230), as in
    // vLLM. B is scheduled at 3220 into the step after, and prefilled from
    // 4230: TTFT 5430 − 3000 µs; its client gives up at 6000, before the
    // second token (6440).
    let workload = format!("{}\n{}\n", llm_row(0, 0.0, 100, 5, ""), llm_row(1, 0.001, 100, 2, ""));
    let (rows, _) = run_with(&workload, &["--timeout", "0.003", "--concurrency", "1"]);
    assert_eq!(rows[1]["arrival_time"], 0.003);
    assert_eq!(latencies_us(&rows[1], 0), vec![2430]);
}

/// `run --step-trace`: one row per step, with what the scheduler did.
#[test]
fn the_step_trace_records_every_step() {
    let dir = Dir::new("step-trace");
    let a: Vec<u32> = (0..40).collect();
    let ids = format!(r#", "input_token_ids": {a:?}"#);
    let workload = format!("{}\n{}\n", llm_row(0, 0.0, 40, 3, &ids), llm_row(1, 0.01, 40, 2, &ids));
    dir.create("s.yaml", &LINEAR_SCENARIO.replace("engine:\n", "engine:\n  async_scheduling: false\n"));
    dir.create("w.jsonl", &workload);
    TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--step-trace", "t.jsonl"])
        .stdout();
    let steps = rows(&dir.read("t.jsonl"));
    // A: prefill (1000 + 2·40 µs), two decodes; B: prefill after a 32-token
    // hit (two full blocks), one decode.
    let summary: Vec<(u64, u64, String)> = steps
        .iter()
        .map(|s| (s["start_us"].as_u64().unwrap(), s["duration_us"].as_u64().unwrap(), s["scheduled"].to_string()))
        .collect();
    let sched = |id: u64, n: u64| format!(r#"[{{"node":0,"request_id":{id},"tokens":{n}}}]"#);
    assert_eq!(
        summary,
        vec![
            (0, 1080, sched(0, 40)),
            (1080, 1010, sched(0, 1)),
            (2090, 1010, sched(0, 1)),
            (10000, 1016, sched(1, 8)),
            (11016, 1010, sched(1, 1)),
        ]
    );
    assert_eq!(steps[3]["admitted"][0]["cached_tokens"], 32);
    assert_eq!(steps[0]["kv_blocks_used"], 3);
    assert_eq!(steps.iter().map(|s| s["step"].as_u64().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
}

#[test]
fn shared_prefix_cuts_the_second_prefill() {
    let dir = Dir::new("prefix");
    let a: Vec<u32> = (0..64).collect();
    let b: Vec<u32> = (0..48).chain(1000..1016).collect();
    let ids = |v: &Vec<u32>| format!(r#", "input_token_ids": {v:?}"#);
    let workload = format!("{}\n{}\n", llm_row(0, 0.0, 64, 2, &ids(&a)), llm_row(1, 1.0, 64, 2, &ids(&b)));
    let (rows, m) = run(&dir, LINEAR_SCENARIO, &workload);
    // The first computes all 64 prompt tokens; the second finds 3 full blocks
    // (48 tokens) cached and computes 16.
    assert_eq!(latencies_us(&rows[0], 0)[0], 1000 + 2 * 64);
    assert_eq!(latencies_us(&rows[1], 0)[0], 1000 + 2 * 16);
    let hit = m["kv_cache_hit_rate"].as_f64().unwrap();
    assert!((hit - 48.0 / 128.0).abs() < 1e-12, "{hit}");
}

#[test]
fn disabled_prefix_caching_recomputes_everything() {
    let dir = Dir::new("no-prefix");
    let ids: Vec<u32> = (0..64).collect();
    let extra = format!(r#", "input_token_ids": {ids:?}"#);
    let workload = format!("{}\n{}\n", llm_row(0, 0.0, 64, 2, &extra), llm_row(1, 1.0, 64, 2, &extra));
    let scenario = LINEAR_SCENARIO.replace("  block_size: 16\n", "  block_size: 16\n  enable_prefix_caching: false\n");
    let (rows, m) = run(&dir, &scenario, &workload);
    assert_eq!(latencies_us(&rows[1], 0)[0], 1000 + 2 * 64);
    assert_eq!(m["kv_cache_hit_rate"], 0.0);
}

#[test]
fn small_kv_cache_preempts_but_every_request_completes() {
    let dir = Dir::new("preempt");
    // 20 blocks (19 usable) of 16 tokens: each request needs 10 blocks at the
    // end, so at most one can finish without preempting another.
    let scenario = LINEAR_SCENARIO.replace("num_gpu_blocks: 1000", "num_gpu_blocks: 20");
    let workload: String = (0..8).map(|i| llm_row(i, 0.0, 100, 50, "") + "\n").collect();
    let (rows, m) = run(&dir, &scenario, &workload);
    assert_eq!(m["completed_requests"], 8);
    assert!(m["preemption_count"].as_u64().unwrap() > 0, "{m}");
    for row in &rows {
        assert_eq!(latencies_us(row, 0).len(), 50);
        assert!(row["sub_requests"][0].get("error").is_none());
    }
    assert_eq!(m["total_output_tokens"], 400);
}

#[test]
fn over_long_request_is_reported_unservable() {
    let dir = Dir::new("unservable");
    let scenario = LINEAR_SCENARIO.replace("  block_size: 16\n", "  block_size: 16\n  max_model_len: 256\n");
    let dag = r#"{"request_id": 1, "arrival_time": 0.0, "initial": [0], "sub_requests": [{"kind": "llm", "input_tokens": 250, "output_tokens": 10, "next": [1]}, {"kind": "llm", "input_tokens": 5, "output_tokens": 5, "next": []}]}"#;
    let workload = format!("{}\n{dag}\n{}\n", llm_row(0, 0.0, 100, 5, ""), llm_row(2, 0.0, 10, 2, ""));
    let (rows, m) = run(&dir, &scenario, &workload);
    assert_eq!(m["completed_requests"], 2);
    assert_eq!(m["dropped_unservable"], 1);
    let node = &rows[1]["sub_requests"][0];
    assert!(
        node["error"]
            .as_str()
            .unwrap()
            .starts_with("unservable: input_tokens + output_tokens = 260 exceeds max_model_len = 256"),
        "{node}"
    );
    assert_eq!(node["token_latency"].as_array().unwrap().len(), 0);
    assert!(rows[1]["sub_requests"][1]["error"].as_str().unwrap().contains("predecessor 0"));
    // A prompt larger than the whole KV cache is unservable too.
    // (max_model_len is explicit: by default it is capped at the KV capacity.)
    let tiny = LINEAR_SCENARIO.replace("num_gpu_blocks: 1000", "num_gpu_blocks: 4\n  max_model_len: 1000");
    let (rows, m) = run(&dir, &tiny, &(llm_row(0, 0.0, 100, 5, "") + "\n"));
    assert_eq!(m["dropped_unservable"], 1);
    assert!(rows[0]["sub_requests"][0]["error"].as_str().unwrap().contains("KV blocks"));
}

#[test]
fn seeded_progress_emits_only_the_remaining_tokens() {
    let dir = Dir::new("seeded");
    let workload = format!(
        "{}\n{}\n{}\n",
        // 105 tokens exist (5 outputs), KV for 100: compute 5, emit 5.
        llm_row(0, 0.0, 100, 10, r#", "known_tokens": 105, "kv_tokens": 100"#),
        // Same, no KV resident: compute 105.
        llm_row(1, 1.0, 100, 10, r#", "known_tokens": 105, "kv_tokens": 0"#),
        // Prompt only partly resident: compute the other 40 prompt tokens.
        llm_row(2, 2.0, 100, 3, r#", "known_tokens": 60, "kv_tokens": 60"#),
    );
    let (rows, m) = run(&dir, LINEAR_SCENARIO, &workload);
    let l0 = latencies_us(&rows[0], 0);
    assert_eq!(l0.len(), 5);
    assert_eq!(l0[0], 1000 + 2 * 5);
    let l1 = latencies_us(&rows[1], 0);
    assert_eq!((l1.len(), l1[0]), (5, 1000 + 2 * 105));
    let l2 = latencies_us(&rows[2], 0);
    assert_eq!((l2.len(), l2[0]), (3, 1000 + 2 * 40));
    assert_eq!(m["total_output_tokens"], 13);
}

#[test]
fn same_input_gives_byte_identical_output() {
    let dir = Dir::new("determinism");
    let workload = include_str!("../../sweeps/workloads/chat-200.jsonl");
    dir.create("s.yaml", "model: Llama-3.1-8B\nhardware: H100\n");
    dir.create("w.jsonl", workload);
    let mut outputs = Vec::new();
    for i in 0..2 {
        let (r, m) = (format!("r{i}.jsonl"), format!("m{i}.json"));
        TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", &r, "--metrics", &m, "-q"]).stdout();
        outputs.push((std::fs::read(dir.join(&r)).unwrap(), std::fs::read(dir.join(&m)).unwrap()));
    }
    assert!(outputs[0] == outputs[1], "two runs of the same input differ");
    // stdout gives the same bytes as -o.
    let stdout = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-q"]).stdout();
    assert!(stdout.as_bytes() == outputs[0].0.as_slice());
    // Requests finish out of order, but rows come out in input order.
    let ids: Vec<u64> = rows(&stdout).iter().map(|r| r["request_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, (0..200).collect::<Vec<u64>>());
}

#[test]
fn horizon_reports_unfinished_requests() {
    let dir = Dir::new("horizon");
    let workload: String = (0..4).map(|i| llm_row(i, i as f64 * 0.01, 100, 100, "") + "\n").collect();
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &workload);
    TestCommand::new(
        &dir.path,
        &["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "--horizon", "0.015", "-q"],
    )
    .stdout();
    let rows = rows(&dir.read("r.jsonl"));
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert_eq!(rows.len(), 2, "arrivals after the horizon are not read");
    assert_eq!(m["still_unfinished"], 2);
    assert!(rows[0]["sub_requests"][0]["error"].as_str().unwrap().starts_with("unfinished"));
    assert!(Path::new(&dir.join("r.jsonl")).exists());
}
