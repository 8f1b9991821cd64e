//! Autoscaling (`autoscale:`): a pool follows a burst up (after the
//! start-up delay) and back down, the router never sends a request to a
//! replica that is not routable, the cost is what was provisioned, the
//! metrics carry an `autoscale` block only when asked, and bad keys are
//! refused with their file, line and field.

use blis_sweep::latency::{Linear, StepPricer};
use blis_sweep::sim::{
    Affinity, AutoscaleConfig, KvTransferConfig, PdDecider, PoolConfig, RequestStatus, ScaleMetric, Simulation,
};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::properties::{random_engine, random_request, random_router};
use crate::util::{Dir, LINEAR_SCENARIO, Steps, TestCommand, rows};

const AUTOSCALE: &str = "autoscale: {min: 1, max: 4, metric: queue_depth, target: 2, scrape_interval_s: 1, \
                         scale_up_delay_s: 5, scale_down_delay_s: 10}\n";

/// 300 requests over the first 15 s (20 per second, 1,000 output tokens
/// each: one replica serves about 14 per second), then one at 60 s (a run
/// ends at its last event: this one lets the scale-down window pass).
fn burst() -> String {
    (0..301)
        .map(|i| {
            let t = if i < 300 { f64::from(i) * 0.05 } else { 60.0 };
            format!(
                "{{\"request_id\":{i},\"arrival_time\":{t:.3},\"initial\":[0],\"sub_requests\":[{{\"kind\":\"llm\",\
                 \"input_tokens\":200,\"output_tokens\":1000,\"next\":[],\"interval\":0.0}}]}}\n"
            )
        })
        .collect()
}

fn run(dir: &Dir, scenario: &str) -> (serde_json::Value, String) {
    let results = TestCommand::new(
        &dir.path,
        &["run", "--scenario", scenario, "w.jsonl", "-o", "r.jsonl", "--metrics", "m.json", "-q"],
    )
    .stdout();
    assert!(results.is_empty());
    (serde_json::from_str(&dir.read("m.json")).unwrap(), dir.read("r.jsonl"))
}

#[test]
fn an_autoscaled_pool_follows_a_burst_up_and_back_down() {
    let dir = Dir::new("autoscale-burst");
    dir.create("w.jsonl", &burst());
    dir.create("s.yaml", &format!("{LINEAR_SCENARIO}{AUTOSCALE}"));
    dir.create("fixed.yaml", LINEAR_SCENARIO);
    let (m, results) = run(&dir, "s.yaml");
    let a = &m["autoscale"];
    assert_eq!(m["completed_requests"], 301, "{m}");
    assert_eq!(a["peak_replicas"], 4, "{a}");
    assert!(a["scale_ups"].as_u64().unwrap() >= 3 && a["scale_downs"].as_u64().unwrap() >= 3, "{a}");
    assert_eq!(a["cold_starts"], 3, "{a}");
    // Up no earlier than the first scrape (1 s) + start-up (5 s); back to
    // `min` at the end.
    let timeline: Vec<(f64, u64)> =
        a["replicas"].as_array().unwrap().iter().map(|p| (p[0].as_f64().unwrap(), p[1].as_u64().unwrap())).collect();
    assert_eq!(timeline[0], (0.0, 1));
    assert!(timeline[1].0 >= 6.0 && timeline[1].1 > 1, "{timeline:?}");
    assert_eq!(timeline.last().unwrap().1, 1, "{timeline:?}");
    // Every request went to a replica routable when it arrived.
    let routable_at = |t: f64| timeline.iter().rev().find(|p| p.0 <= t + 1e-9).unwrap().1;
    for row in rows(&results) {
        let t = row["arrival_time"].as_f64().unwrap();
        let replica = row["sub_requests"][0]["replica"].as_u64().unwrap();
        assert!(replica < routable_at(t), "request at {t} s on replica {replica}: {timeline:?}");
    }
    // One GPU a replica: between one replica all along and four.
    let hours = m["sim_duration_s"].as_f64().unwrap() / 3600.0;
    let gpu_hours = a["gpu_hours"].as_f64().unwrap();
    assert!(gpu_hours > hours && gpu_hours < 4.0 * hours, "{gpu_hours} over {hours} h");
    assert_eq!(a["gpu_hours"], a["replica_hours"]);
    // Deterministic; and faster than the one replica a fixed pool of `min` has.
    assert_eq!(run(&dir, "s.yaml"), (m.clone(), results));
    let (fixed, _) = run(&dir, "fixed.yaml");
    assert!(fixed.get("autoscale").is_none(), "only when configured");
    assert!(fixed["e2e_p99_ms"].as_f64().unwrap() > m["e2e_p99_ms"].as_f64().unwrap());
}

#[test]
fn bad_autoscale_keys_name_their_file_line_and_field() {
    let dir = Dir::new("autoscale-bad");
    dir.create("w.jsonl", &burst()[..burst().find('\n').unwrap() + 1]);
    for (extra, line, field) in [
        (AUTOSCALE.replace("queue_depth", "gpu"), 10, "autoscale.metric"),
        (AUTOSCALE.replace("max: 4", "max: 0"), 10, "autoscale.max"),
        ("autoscale:\n  min: 1\n  max: 2\n  metric: rps\n  target: 1\n".to_owned(), 10, "autoscale.scale_up_delay_s"),
        (format!("replicas: 9\n{AUTOSCALE}"), 10, "replicas"),
        (format!("{AUTOSCALE}pools: {{decode: {{replicas: 1}}, prefill: {{replicas: 1}}}}\n"), 10, "autoscale"),
    ] {
        dir.create("s.yaml", &format!("{LINEAR_SCENARIO}{extra}"));
        let err = TestCommand::new(&dir.path, &["run", "--scenario", "s.yaml", "w.jsonl", "-o", "r.jsonl"]).fails();
        let want = format!("blis-sweep: s.yaml:{line}: {field}: ");
        assert!(err.starts_with(&want) && err.lines().count() == 1, "{extra}: {err}");
        assert!(!dir.join("r.jsonl").exists());
    }
}

/// Random DAG workloads on random engines behind random routers (request
/// affinity aside: it is refused), autoscaled with short random delays:
/// every request leaves, every llm node goes to a replica routable when it
/// was routed, the timeline stays within `[min, max]`, and what was
/// provisioned covers what was routable.
#[test]
fn the_router_only_sees_routable_replicas() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0xA5CA1E);
    let mut scaled = 0;
    for case in 0..200u64 {
        let engine = random_engine(&mut rng);
        let router = blis_sweep::sim::RouterConfig { affinity: Affinity::Node, ..random_router(&mut rng) };
        let min = rng.random_range(1..=2);
        let max = rng.random_range(min..=4);
        let metric = ScaleMetric::ALL[rng.random_range(0..3)];
        let config = AutoscaleConfig {
            min,
            max,
            initial: rng.random_range(min..=max),
            metric,
            target: if metric == ScaleMetric::KvUtilization {
                rng.random_range(0.05..1.0)
            } else {
                rng.random_range(0.2..4.0)
            },
            scrape_interval_us: rng.random_range(1_000..50_000),
            scale_up_delay_us: rng.random_range(0..100_000),
            scale_down_delay_us: rng.random_range(0..100_000),
            gpus_per_replica: 1,
        };
        let latency = StepPricer::Linear(Linear::new(&[500.0, 1.0, 5.0]).unwrap());
        let pool = PoolConfig::mixed(engine, max, router, latency);
        let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
        sim.check_invariants(true);
        sim.set_autoscale(Some(config));
        sim.set_request_timeout(rng.random_bool(0.2).then(|| rng.random_range(1_000..300_000)));
        let mut sink = Steps::default();
        let n = rng.random_range(1..=40u64);
        let mut arrival = 0.0;
        for id in 0..n {
            arrival += rng.random_range(0.0..0.02);
            assert!(sim.add_request(random_request(&mut rng, id, (arrival * 1e6f64).round() / 1e6), &mut sink));
        }
        sim.finish(&mut sink);
        assert_eq!(sink.done.len() as u64, n, "case {case}: requests lost");
        let report = sim.autoscale_report().expect("autoscaled");
        let timeline = &report.timeline;
        assert!(timeline.iter().all(|&(_, r, _)| (min..=max).contains(&r)), "case {case}: {timeline:?}");
        assert!(timeline.iter().all(|&(_, r, p)| r <= p && p <= max), "case {case}: {timeline:?}");
        assert!(timeline.windows(2).all(|w| w[0].0 < w[1].0), "case {case}: one point a time");
        assert!(report.provisioned_us >= report.routable_us, "case {case}");
        assert!(report.provisioned_us <= u64::from(max) * sim.now_us(), "case {case}");
        scaled += u64::from(timeline.len() > 1);
        for r in &sink.done {
            if r.status == RequestStatus::Rejected {
                continue;
            }
            for node in r.nodes.iter().filter(|n| n.replica.is_some()) {
                let (t, replica) = (node.start_us.unwrap(), node.replica.unwrap());
                let routable = timeline.iter().rev().find(|p| p.0 <= t).unwrap().1;
                assert!(replica < routable, "case {case}: node routed at {t} to {replica}: {timeline:?}");
            }
        }
    }
    assert!(scaled > 50, "only {scaled} cases scaled");
}

/// In a sweep: the runs table's autoscale columns are filled for the
/// autoscaled run and null for the fixed one, and the report draws the
/// autoscaled run's replica count (and no chart when no run autoscaled).
#[test]
fn a_sweep_reports_the_replica_count_of_its_autoscaled_runs() {
    let dir = Dir::new("autoscale-sweep");
    dir.create("s.yaml", LINEAR_SCENARIO);
    dir.create("w.jsonl", &burst());
    let autoscale = AUTOSCALE.trim_start_matches("autoscale: ").trim_end();
    dir.create(
        "plan.yaml",
        &format!(
            "name: a\nworkload: {{path: w.jsonl}}\nscenarios: [s.yaml]\ngrid:\n  overrides:\n    \
             autoscale: [null, {autoscale}]\noutput: out\n"
        ),
    );
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    let cols = [
        "overrides",
        "autoscale_gpu_hours",
        "autoscale_mean_replicas",
        "autoscale_peak_replicas",
        "autoscale_scale_ups",
    ];
    let runs = crate::parquet_util::read_columns(&dir.join("out/runs.parquet"), &cols);
    assert_eq!(runs.len(), 2);
    for r in &runs {
        let on = r[0].contains("\"autoscale\":{");
        assert!(r[1..].iter().all(|v| (v == "null") != on), "{r:?}");
        if on {
            assert_eq!(r[3], "4", "{r:?}");
        }
    }
    let html = dir.read("out/report.html");
    assert_eq!(html.matches("id=\"replicas\"").count(), 1);
    assert!(html.contains("Replicas over time"));
    dir.create("plan.yaml", "name: a\nworkload: {path: w.jsonl}\nscenarios: [s.yaml]\noutput: fixed\n");
    TestCommand::new(&dir.path, &["-q", "plan.yaml"]).stdout();
    assert!(!dir.read("fixed/report.html").contains("Replicas over time"));
}
