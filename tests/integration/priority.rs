//! Priority scheduling (`engine.scheduling_policy: priority`, a workload's
//! `priority`, TraceV2's `vllm_priority`), as vLLM 0.15.1's
//! `PriorityRequestQueue` and its preemption rule: a late urgent request is
//! admitted first, the least urgent running request is the victim, random
//! workloads keep every invariant, FCFS ignores priorities, and bad input
//! is a one-line error naming the file, line and field.

use blis_sweep::latency::{Linear, StepPricer};
use blis_sweep::sim::{
    EngineConfig, KvTransferConfig, PdDecider, PoolConfig, RequestStatus, SchedulingPolicy, Simulation,
};
use blis_sweep::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::properties::{random_engine, random_router};
use crate::util::{Dir, LINEAR_SCENARIO, Steps, TestCommand, latencies_us, rows};

fn id(r: &RequestId) -> u64 {
    match r {
        RequestId::Int(i) => *i,
        RequestId::Str(_) => unreachable!("integer ids here"),
    }
}

/// One llm call of `input` + `output` tokens with `priority`, arriving at
/// `arrival_ms`.
fn request(i: u64, arrival_ms: f64, input: u32, output: u32, priority: i32) -> Request {
    let call = LlmCall::new(input, output).with_priority(priority);
    Request {
        traffic: Default::default(),
        request_id: RequestId::Int(i),
        arrival_time: arrival_ms / 1e3,
        initial: vec![0],
        sub_requests: vec![SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None }],
    }
}

/// Runs `requests` on one engine with 1 ms steps, invariants checked after
/// every step.
fn simulate(engine: EngineConfig, requests: Vec<Request>) -> Steps {
    let latency = StepPricer::Linear(Linear::new(&[1000.0, 0.0, 0.0]).unwrap());
    let mut sim = Simulation::new(engine, latency);
    sim.set_step_trace(true);
    sim.check_invariants(true);
    let mut out = Steps::default();
    for r in requests {
        assert!(sim.add_request(r, &mut out));
    }
    sim.finish(&mut out);
    out
}

/// The order requests were first admitted in.
fn first_admissions(steps: &Steps) -> Vec<u64> {
    let mut order = Vec::new();
    for s in &steps.steps {
        for (n, _) in &s.admitted {
            let i = id(&n.request_id);
            if !order.contains(&i) {
                order.push(i);
            }
        }
    }
    order
}

fn engine(policy: SchedulingPolicy, max_num_seqs: u32, num_gpu_blocks: u32) -> EngineConfig {
    EngineConfig {
        async_scheduling: false,
        scheduling_policy: policy,
        ..EngineConfig::new(max_num_seqs, 256, 1024, 16, num_gpu_blocks)
    }
}

/// One sequence at a time: 0 runs; 1 and 2 (priority 5) wait; 3 (priority
/// 0) comes last and is served next under Priority, last under FCFS; ties
/// (1, 2) go by arrival.
#[test]
fn a_late_urgent_request_is_admitted_before_earlier_less_urgent_ones() {
    let requests = || {
        vec![
            request(0, 0.0, 32, 10, 0),
            request(1, 1.0, 32, 2, 5),
            request(2, 2.0, 32, 2, 5),
            request(3, 3.0, 32, 2, 0),
        ]
    };
    let fcfs = simulate(engine(SchedulingPolicy::Fcfs, 1, 100), requests());
    assert_eq!(first_admissions(&fcfs), [0, 1, 2, 3]);
    let prio = simulate(engine(SchedulingPolicy::Priority, 1, 100), requests());
    assert_eq!(first_admissions(&prio), [0, 3, 1, 2]);
    // Negative values are more urgent still.
    let mut rs = requests();
    rs.push(request(4, 3.5, 32, 2, -1));
    let prio = simulate(engine(SchedulingPolicy::Priority, 1, 100), rs);
    assert_eq!(first_admissions(&prio), [0, 4, 3, 1, 2]);
}

/// Two requests grow in step until 10 usable blocks run out (each alone
/// fits: 9 blocks). FCFS preempts the most recently admitted (1); Priority
/// preempts the least urgent (0, priority 5), admitted first and already
/// scheduled in that step, so it leaves the step's batch too.
#[test]
fn under_kv_pressure_the_least_urgent_running_request_is_preempted_first() {
    let requests = || vec![request(0, 0.0, 32, 100, 5), request(1, 0.5, 32, 100, 0)];
    let first_preempted = |steps: &Steps| {
        let s = steps.steps.iter().find(|s| !s.preempted.is_empty()).expect("a preemption");
        (id(&s.preempted[0].request_id), s.scheduled.iter().map(|(n, _)| id(&n.request_id)).collect::<Vec<_>>())
    };
    let fcfs = simulate(engine(SchedulingPolicy::Fcfs, 4, 11), requests());
    assert_eq!(first_preempted(&fcfs), (1, vec![0]));
    let prio = simulate(engine(SchedulingPolicy::Priority, 4, 11), requests());
    assert_eq!(first_preempted(&prio), (0, vec![1]));
    // Both finish all their tokens either way; the urgent one first under Priority.
    for steps in [&fcfs, &prio] {
        assert_eq!(steps.done.len(), 2);
        assert!(steps.done.iter().all(|r| r.nodes[0].token_times_us.len() == 100));
    }
    let finish = |s: &Steps, i: u64| s.done.iter().find(|r| id(&r.request.request_id) == i).unwrap().finish_us;
    assert!(finish(&prio, 1) < finish(&prio, 0));
    assert!(finish(&fcfs, 0) < finish(&fcfs, 1));
}

/// Random requests with random priorities on random engines (async or not,
/// chunked or not, a few KV blocks) behind random routers: invariants hold
/// after every step (the KV cache's references among them) and every
/// request leaves.
#[test]
fn random_priority_workloads_keep_every_invariant() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x9A1);
    let mut preempted = 0;
    for _ in 0..300 {
        let engine = EngineConfig { scheduling_policy: SchedulingPolicy::Priority, ..random_engine(&mut rng) };
        let replicas = rng.random_range(1..=3);
        let latency = StepPricer::Linear(Linear::new(&[500.0, 1.0, 5.0]).unwrap());
        let pool = PoolConfig::mixed(engine.clone(), replicas, random_router(&mut rng), latency);
        let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
        sim.check_invariants(true);
        sim.set_step_trace(true);
        let mut out = Steps::default();
        let n = rng.random_range(1..=30u64);
        let mut t = 0.0;
        for i in 0..n {
            t += rng.random_range(0.0..3.0);
            let input = rng.random_range(1..=engine.max_model_len / 2);
            let output = rng.random_range(1..=engine.max_model_len / 2);
            assert!(sim.add_request(request(i, t, input, output, rng.random_range(-2..=2)), &mut out));
        }
        sim.finish(&mut out);
        assert_eq!(out.done.len() as u64, n);
        assert!(out.done.iter().all(|r| r.status != RequestStatus::Unfinished), "nothing stalls");
        preempted += out.steps.iter().filter(|s| !s.preempted.is_empty()).count();
    }
    assert!(preempted > 0, "some cases preempt");
}

fn row(i: u64, arrival: f64, output: u32, priority: Option<i32>) -> String {
    let p = priority.map_or(String::new(), |p| format!(", \"priority\": {p}"));
    format!(
        r#"{{"request_id": {i}, "arrival_time": {arrival}, "initial": [0], "sub_requests": [{{"kind": "llm", "input_tokens": 64, "output_tokens": {output}, "next": []{p}}}]}}"#
    ) + "\n"
}

fn one_seq(policy: &str) -> String {
    LINEAR_SCENARIO.replace("max_num_seqs: 16", &format!("max_num_seqs: 1\n  scheduling_policy: {policy}"))
}

/// Through `blis-sweep run`: a workload's priorities change nothing under
/// the default policy (FCFS) and reorder service under priority.
#[test]
fn workload_priorities_reorder_only_under_the_priority_policy() {
    let dir = Dir::new("prio-run");
    let with: String = [row(0, 0.0, 20, None), row(1, 0.001, 2, Some(3)), row(2, 0.002, 2, Some(-1))].concat();
    let without: String = [row(0, 0.0, 20, None), row(1, 0.001, 2, None), row(2, 0.002, 2, None)].concat();
    dir.create("w.jsonl", &with);
    dir.create("w0.jsonl", &without);
    dir.create("d.yaml", &LINEAR_SCENARIO.replace("max_num_seqs: 16", "max_num_seqs: 1"));
    dir.create("p.yaml", &one_seq("priority"));
    let run = |s: &str, w: &str| {
        let out = TestCommand::new(&dir.path, &["run", "-q", "-s", s, w]).stdout();
        rows(&out).iter().map(|r| latencies_us(r, 0)[0]).collect::<Vec<u64>>()
    };
    let fcfs = run("d.yaml", "w.jsonl");
    assert_eq!(fcfs, run("d.yaml", "w0.jsonl"));
    assert_eq!(fcfs, run("p.yaml", "w0.jsonl"), "equal priorities: FCFS order");
    let prio = run("p.yaml", "w.jsonl");
    // Under priority request 2 (-1) is served before 1 (3): its TTFT is
    // shorter though it came later; under FCFS the reverse.
    assert!(prio[2] < prio[1], "{prio:?}");
    assert!(fcfs[1] < fcfs[2], "{fcfs:?}");
    // The priority is echoed in the results.
    let out = TestCommand::new(&dir.path, &["run", "-q", "-s", "p.yaml", "w.jsonl"]).stdout();
    assert_eq!(rows(&out)[2]["sub_requests"][0]["priority"], -1);
}

/// TraceV2's `vllm_priority` is modelled where the engines schedule by
/// priority (no longer listed as not modelled) and ignored, as before,
/// under FCFS.
#[test]
fn tracev2_priorities_are_modelled_under_priority() {
    let dir = Dir::new("prio-tracev2");
    dir.create("t.yaml", "trace_version: 3\ntime_unit: microseconds\nmode: real\nwarm_up_requests: 0\n");
    dir.create(
        "t.csv",
        "request_id,input_tokens,output_tokens,arrival_time_us,vllm_priority\n0,64,20,0,0\n1,64,2,1000,3\n2,64,2,2000,-1\n",
    );
    dir.create("d.yaml", &LINEAR_SCENARIO.replace("max_num_seqs: 16", "max_num_seqs: 1"));
    dir.create("p.yaml", &one_seq("priority"));
    let run = |s: &str| {
        let out =
            TestCommand::new(&dir.path, &["run", "-s", s, "--input", "tracev2:t.yaml", "--metrics", "m.json"]).stdout();
        let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
        (rows(&out), m)
    };
    let (r, m) = run("d.yaml");
    assert_eq!(m["trace_columns_not_modelled"], serde_json::json!(["vllm_priority"]), "{m}");
    assert!(r.iter().all(|r| r["sub_requests"][0].get("priority").is_none()));
    let (r, m) = run("p.yaml");
    assert!(m.get("trace_columns_not_modelled").is_none(), "{m}");
    let priorities: Vec<&serde_json::Value> = r.iter().map(|r| &r["sub_requests"][0]["priority"]).collect();
    assert_eq!(priorities, [&serde_json::Value::Null, &serde_json::json!(3), &serde_json::json!(-1)]);
    // A value that is not a 32-bit integer is refused where it is modelled.
    dir.create("t.csv", "request_id,input_tokens,output_tokens,arrival_time_us,vllm_priority\n0,64,2,0,high\n");
    let err = TestCommand::new(&dir.path, &["run", "-s", "p.yaml", "--input", "tracev2:t.yaml"]).fails();
    assert!(err.contains("t.csv:2: vllm_priority: `high` is not a 32-bit integer"), "{err}");
}

/// Bad `engine.scheduling_policy` values, and combinations not modelled,
/// are one-line errors naming the file, the line and the field; nothing is
/// written.
#[test]
fn bad_scheduling_policy_names_file_line_and_field() {
    let dir = Dir::new("prio-bad");
    dir.create("w.jsonl", &row(0, 0.0, 2, None));
    for (scenario, expected) in [
        (one_seq("lottery"), "s.yaml:6: engine.scheduling_policy: `lottery`: fcfs or priority"),
        (
            one_seq("priority").replace("engine:\n", "engine:\n  lora: {max_loras: 1}\n"),
            "engine.scheduling_policy: priority with engine.lora is not modelled yet; use fcfs",
        ),
    ] {
        dir.create("s.yaml", &scenario);
        let err = TestCommand::new(&dir.path, &["run", "-q", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        assert!(err.contains(expected), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!dir.join("r.jsonl").exists());
    }
}

/// TraceV2's `slo_class`, `tenant_id` and `slo_target_us` are the request's
/// traffic attributes: echoed in the results (and in a TraceV2 written
/// from them), the class giving vLLM's priority where `vllm_priority` is
/// empty; a class that is not one is refused with its line.
#[test]
fn tracev2_classes_and_tenants_are_read_and_echoed() {
    let dir = Dir::new("prio-classes");
    dir.create("t.yaml", "trace_version: 3\ntime_unit: microseconds\nmode: real\nwarm_up_requests: 0\n");
    dir.create(
        "t.csv",
        "request_id,tenant_id,slo_class,input_tokens,output_tokens,arrival_time_us,vllm_priority,slo_target_us\n\
         0,acme,critical,64,20,0,,500000\n1,,batch,64,2,1000,,\n2,zeta,,64,2,2000,-1,0\n",
    );
    dir.create("p.yaml", &one_seq("priority"));
    let out = TestCommand::new(
        &dir.path,
        &["run", "-s", "p.yaml", "--input", "tracev2:t.yaml", "--trace-output", "o", "--metrics", "m.json"],
    )
    .stdout();
    let r = rows(&out);
    assert_eq!(
        (&r[0]["slo_class"], &r[0]["tenant"], &r[0]["slo_target"]),
        (&serde_json::json!("critical"), &serde_json::json!("acme"), &serde_json::json!(0.5))
    );
    assert_eq!(
        (&r[1]["slo_class"], r[1].get("tenant"), r[1].get("slo_target")),
        (&serde_json::json!("batch"), None, None)
    );
    assert_eq!((r[2].get("slo_class"), &r[2]["tenant"]), (None, &serde_json::json!("zeta")));
    // critical is vLLM's 0 (not written), batch 5 (its class's: not written), -1 given.
    let priorities: Vec<Option<&serde_json::Value>> = r.iter().map(|r| r["sub_requests"][0].get("priority")).collect();
    assert_eq!(priorities, [None, None, Some(&serde_json::json!(-1))]);
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert!(m.get("trace_columns_not_modelled").is_none(), "{m}");
    let csv = dir.read("o.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[1].starts_with("0,,acme,critical,") && lines[2].starts_with("1,,,batch,"), "{csv}");
    // A class that is not one of the five (older BLIS traces write
    // `interactive`) is served as standard and named in the summary.
    dir.create("t.csv", "request_id,input_tokens,output_tokens,arrival_time_us,slo_class\n0,64,2,0,interactive\n");
    let out = TestCommand::new(&dir.path, &["run", "-s", "p.yaml", "--input", "tracev2:t.yaml", "--metrics", "m.json"])
        .stdout();
    assert!(rows(&out)[0].get("slo_class").is_none(), "{out}");
    let m: serde_json::Value = serde_json::from_str(&dir.read("m.json")).unwrap();
    assert_eq!(m["trace_columns_not_modelled"], serde_json::json!(["slo_class"]), "{m}");
}
