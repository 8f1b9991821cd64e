//! `router.env` end to end: the latencies show in every TTFT, a run is
//! byte-identical on a rerun, the keys are grid axes, and mistakes are one
//! line naming file, line and key; and the property tests' random workloads
//! behind random routers with a random `env` keep every invariant.

use blis_sweep::sim::{KvTransferConfig, PdDecider, PoolConfig, RequestStatus, RouterEnv, Simulation};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::properties::{check, feed, random_client, random_engine, random_latency, random_router};
use crate::util::{Dir, LINEAR_SCENARIO, TestCommand, rows};

const CHAT: &str = include_str!("../../sweeps/workloads/chat-200.jsonl");

/// Runs `router` (a flow mapping) on 3 replicas of the linear scenario over
/// the chat workload at twice its rate; (results, metrics).
fn run(dir: &Dir, router: &str) -> (String, serde_json::Value) {
    dir.create("s.yaml", &format!("{LINEAR_SCENARIO}replicas: 3\nrouter: {router}\n"));
    dir.create("w.jsonl", CHAT);
    let args = ["run", "-s", "s.yaml", "w.jsonl", "--rate-scale", "2", "-o", "r.jsonl", "--metrics", "m.json", "-q"];
    TestCommand::new(&dir.path, &args).stdout();
    (dir.read("r.jsonl"), serde_json::from_str(&dir.read("m.json")).unwrap())
}

/// Each llm node's TTFT, µs.
fn ttfts(results: &str) -> Vec<u64> {
    rows(results)
        .iter()
        .map(|r| (r["sub_requests"][0]["token_latency"][0].as_f64().unwrap() * 1e6).round() as u64)
        .collect()
}

#[test]
fn the_admission_and_routing_latencies_count_in_every_ttft() {
    let dir = Dir::new("router-env-latency");
    let (plain, _) = run(&dir, "{policy: least-requests}");
    let env = "{policy: least-requests, env: {admission_latency_ms: 3, routing_latency_ms: 5}}";
    let (late, m) = run(&dir, env);
    let (before, after) = (ttfts(&plain), ttfts(&late));
    assert_eq!(after.len(), 200);
    // The linear model's first step is at least 1 ms: 9 ms at the least,
    // and the fastest request without env is faster than 8 ms.
    assert!(after.iter().all(|&t| t >= 9000), "{:?}", after.iter().min());
    assert!(before.iter().any(|&t| t < 8000), "{:?}", before.iter().min());
    assert_eq!(m["completed_requests"], 200);
    // A rerun writes the same bytes.
    let (again, _) = run(&dir, env);
    assert!(again == late, "a rerun differs");
}

#[test]
fn an_env_of_zeros_is_the_router_without_env() {
    let dir = Dir::new("router-env-zeros");
    for policy in ["prefix-affinity", "least-requests", "vllm-dp"] {
        let plain = run(&dir, &format!("{{policy: {policy}}}"));
        let zeros = run(&dir, &format!("{{policy: {policy}, env: {{metrics_refresh_ms: 0, kv_event_delay_ms: 0}}}}"));
        assert!(plain.0 == zeros.0 && plain.1 == zeros.1, "{policy}");
    }
}

#[test]
fn scrape_timer_and_kv_delay_are_seeded_and_change_prefix_routing() {
    let dir = Dir::new("router-env-prefix");
    let env = |refresh: u32, delay: u32| {
        format!(
            "{{policy: prefix-affinity, seed: 4, env: {{metrics_refresh_ms: {refresh}, kv_event_delay_ms: {delay}, \
             jitter: true}}}}"
        )
    };
    let (live, _) = run(&dir, "{policy: prefix-affinity, env: {metrics_refresh_ms: 0, kv_event_delay_ms: 0}}");
    let (stale, m) = run(&dir, &env(50, 2000));
    assert_ne!(live, stale, "a 2 s KV-event delay routes some prompts elsewhere");
    assert_eq!(m["completed_requests"], 200);
    let (again, _) = run(&dir, &env(50, 2000));
    assert!(again == stale, "a rerun differs");
}

#[test]
fn router_env_keys_are_grid_axes() {
    let dir = Dir::new("router-env-sweep");
    dir.create("s.yaml", &format!("{LINEAR_SCENARIO}replicas: 2\nrouter: {{policy: prefix-affinity}}\n"));
    dir.create("w.jsonl", CHAT);
    dir.create(
        "plan.yaml",
        "name: t\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\ngrid:\n  overrides:\n    \
         router.env.metrics_refresh_ms: [0, 50]\n    router.env.kv_event_delay_ms: [0, 2000]\noutput: out\n",
    );
    let out = TestCommand::new(&dir.path, &["-q", "--jobs", "1", "plan.yaml"]).output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let runs = std::fs::read_dir(dir.join("out").join("requests")).unwrap().count();
    assert_eq!(runs, 4);
}

#[test]
fn router_env_mistakes_name_file_line_and_key() {
    let dir = Dir::new("router-env-bad");
    dir.create("w.jsonl", CHAT);
    for (extra, expected) in [
        ("router:\n  env:\n    routing_latency_ms: -1\n", "s.yaml:12: router.env.routing_latency_ms: -1 must be"),
        (
            "router:\n  refresh_interval_ms: 50\n  env:\n    metrics_refresh_ms: 50\n",
            "s.yaml:13: router.env.metrics_refresh_ms: router.refresh_interval_ms sets both",
        ),
        ("router:\n  env:\n    jitter: true\n", "s.yaml:12: router.env.jitter: jitters the scrape timer"),
        ("router:\n  env:\n    scrape_ms: 5\n", "s.yaml:12"),
    ] {
        dir.create("s.yaml", &format!("{LINEAR_SCENARIO}{extra}"));
        let err = TestCommand::new(&dir.path, &["run", "-s", "s.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        assert!(err.starts_with(&format!("blis-sweep: {expected}")), "{extra}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!dir.join("r.jsonl").exists());
    }
}

/// A random `router.env` (each key drawn on its own; `None` where the
/// router's `refresh_interval_us` must keep the view or index).
fn random_env(rng: &mut Xoshiro256PlusPlus, refresh_interval_us: u64) -> RouterEnv {
    let mut ms = |p: f64, max: u64| if rng.random_bool(p) { rng.random_range(0..=max) } else { 0 };
    let (admission_latency_us, routing_latency_us) = (ms(0.5, 20_000), ms(0.5, 20_000));
    let own = |rng: &mut Xoshiro256PlusPlus, max| {
        (refresh_interval_us == 0 && rng.random_bool(0.7)).then(|| rng.random_range(0..=max))
    };
    let metrics_refresh_us = own(rng, 200_000);
    let kv_event_delay_us = own(rng, 500_000);
    let jitter = metrics_refresh_us.is_some_and(|i| i > 0) && rng.random_bool(0.5);
    RouterEnv { admission_latency_us, routing_latency_us, metrics_refresh_us, kv_event_delay_us, jitter }
}

#[test]
fn random_workloads_behind_a_random_router_env_keep_every_invariant() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0xE4F);
    let mut statuses = [0u64; 4];
    for case in 0..1000 {
        let engine = random_engine(&mut rng);
        let replicas = rng.random_range(1..=6);
        let mut router = random_router(&mut rng);
        router.env = Some(random_env(&mut rng, router.refresh_interval_us));
        let pool = PoolConfig::mixed(engine.clone(), replicas, router, random_latency(&mut rng));
        let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
        sim.check_invariants(true);
        sim.set_client(random_client(&mut rng));
        sim.set_request_timeout(rng.random_bool(0.3).then(|| rng.random_range(1_000..400_000)));
        for r in feed(&mut sim, &mut rng, case, None) {
            check(case, &r, &engine, replicas);
            let i = [RequestStatus::Completed, RequestStatus::TimedOut, RequestStatus::Rejected]
                .iter()
                .position(|s| *s == r.status)
                .unwrap_or(3);
            statuses[i] += 1;
        }
    }
    // Completions, timeouts and rejections all occur (this stream:
    // [2984, 1074, 30, 2321 others]).
    assert!(statuses[0] > 1000 && statuses[1] > 100 && statuses[2] > 10, "{statuses:?}");
}
