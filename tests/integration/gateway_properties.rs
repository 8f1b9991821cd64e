//! Property tests of admission and flow control (`router.admission`,
//! `router.flow_control`): random clusters, engines, clients and gateway
//! settings under random classed, multi-tenant DAG workloads, through the
//! library with the KV-cache invariant checked after every step. Counts add
//! up: every request sent leaves exactly once, completed, unservable,
//! rejected, shed, expired, timed out or (past a horizon) unfinished,
//! overall and per class, and the
//! gateway's own counters agree with the requests' statuses. Its own seed:
//! the existing property tests' streams are untouched.

use blis_sweep::sim::{
    AdmissionConfig, AdmissionPolicy, Fairness, FinishedRequest, FlowControlConfig, GatewayConfig, KvTransferConfig,
    NodeError, PdDecider, PoolConfig, QueueOrder, RequestStatus, Saturation, Simulation,
};
use blis_sweep::workload::{SloClass, Traffic};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::properties::{random_client, random_engine, random_latency, random_request, random_router};

const CASES: u64 = 400;

fn random_gateway(rng: &mut Xoshiro256PlusPlus) -> GatewayConfig {
    let admission = rng.random_bool(0.7).then(|| AdmissionConfig {
        policy: match rng.random_range(0..3) {
            0 => AdmissionPolicy::Always,
            1 => AdmissionPolicy::TokenBucket {
                capacity: rng.random_range(100..3000),
                refill_per_s: rng.random_range(0..20_000),
            },
            _ => AdmissionPolicy::ShedByClass { threshold: rng.random_range(0.2..1.5) },
        },
        tenant_budgets: if rng.random_bool(0.5) { vec![("a".to_owned(), rng.random_range(0.05..1.0))] } else { vec![] },
    });
    let flow_control = (admission.is_none() || rng.random_bool(0.7)).then(|| FlowControlConfig {
        fairness: if rng.random_bool(0.5) { Fairness::RoundRobin } else { Fairness::GlobalStrict },
        order: [QueueOrder::Fifo, QueueOrder::Priority, QueueOrder::Deadline][rng.random_range(0..3)],
        max_queue: rng.random_bool(0.5).then(|| rng.random_range(1..=8)),
        ttl_us: rng.random_bool(0.4).then(|| rng.random_range(1_000..300_000)),
        usage_limit: if rng.random_bool(0.5) { 1.0 } else { rng.random_range(0.2..1.0) },
        tick_us: rng.random_range(100..5_000),
    });
    let saturation = Saturation {
        queue_depth_threshold: rng.random_range(1.0..6.0),
        kv_cache_util_threshold: rng.random_range(0.3..1.0),
    };
    GatewayConfig { admission, flow_control, saturation }
}

fn random_traffic(rng: &mut Xoshiro256PlusPlus) -> Traffic {
    Traffic {
        slo_class: rng.random_bool(0.85).then(|| SloClass::ALL[rng.random_range(0..SloClass::ALL.len())]),
        tenant: [None, Some("a"), Some("b")][rng.random_range(0..3)].map(str::to_owned),
        slo_target_us: rng.random_bool(0.5).then(|| rng.random_range(10_000..2_000_000)),
    }
}

/// One case: its results, in the order they left, and the gateway's counters.
fn run_case(seed: u64) -> (Vec<FinishedRequest>, blis_sweep::sim::GatewayStats, u64) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let engine = random_engine(&mut rng);
    let replicas = if rng.random_bool(0.3) { 1 } else { rng.random_range(2..=6) };
    let mut router = random_router(&mut rng);
    router.gateway = Some(random_gateway(&mut rng));
    let pool = PoolConfig::mixed(engine, replicas, router, random_latency(&mut rng));
    let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
    sim.check_invariants(true);
    sim.set_client(random_client(&mut rng));
    sim.set_request_timeout(rng.random_bool(0.2).then(|| rng.random_range(1_000..400_000)));
    let horizon = rng.random_bool(0.2).then(|| rng.random_range(1_000..500_000));
    sim.set_horizon(horizon);
    let n = rng.random_range(1..=40u64);
    let mut done = Vec::new();
    let mut arrival = 0.0;
    let mut sent = n;
    for id in 0..n {
        if rng.random_bool(0.4) {
            arrival += rng.random_range(0.0..0.05);
        }
        let mut request = random_request(&mut rng, id, (arrival * 1e6f64).round() / 1e6);
        request.traffic = random_traffic(&mut rng);
        if !sim.add_request(request, &mut done) {
            assert!(horizon.is_some(), "seed {seed}: refused without a horizon");
            sent = id;
            break;
        }
    }
    sim.finish(&mut done);
    assert_eq!(sim.in_flight(), 0, "seed {seed}");
    if horizon.is_none() {
        assert_eq!(sim.pending_events(), 0, "seed {seed}: events left over (a tick with an empty queue?)");
        assert!(
            done.iter().all(|r| r.status != RequestStatus::Unfinished),
            "seed {seed}: unfinished without a horizon"
        );
    }
    (done, sim.gateway_stats().expect("a gateway"), sent)
}

fn check(seed: u64, r: &FinishedRequest) {
    let ctx = format!("seed {seed}, request {}", r.request.request_id);
    let class = r.request.traffic.class();
    for (i, node) in r.nodes.iter().enumerate() {
        let ctx = format!("{ctx}, node {i}");
        // Every node ended one way or another.
        assert!(node.finish_us.is_some() != node.error.is_some(), "{ctx}: {node:?}");
        for w in node.token_times_us.windows(2) {
            assert!(w[0] <= w[1], "{ctx}: tokens out of order");
        }
        if let (Some(s), Some(&first)) = (node.start_us, node.token_times_us.first()) {
            assert!(s <= first, "{ctx}: a token before the call started");
        }
        match (&node.error, r.status) {
            (Some(NodeError::Shed(m)), RequestStatus::Shed) => {
                assert!(m.starts_with("shed: "), "{ctx}: {m}");
                // Displacement takes only a sheddable call's place.
                if m.contains("more urgent call took its place") {
                    assert!(class.is_sheddable(), "{ctx}: a {class} call was displaced");
                }
            }
            (Some(NodeError::Expired(m)), RequestStatus::Expired) => assert!(m.starts_with("expired: "), "{ctx}"),
            (Some(NodeError::Shed(_) | NodeError::Expired(_)), s) => {
                panic!("{ctx}: shed/expired node in a {s:?} request")
            }
            (Some(NodeError::Rejected(m)), RequestStatus::Rejected) => {
                assert!(node.start_us.is_none() && m.starts_with("rejected: "), "{ctx}: {m}");
                // The saturation and tenant-budget rules reject only sheddable classes.
                if m.contains("router.admission.saturation_threshold") || m.contains("tenant_budgets") {
                    assert!(class.is_sheddable(), "{ctx}: {class} rejected by {m}");
                }
            }
            _ => {}
        }
    }
    match r.status {
        RequestStatus::Completed => assert!(r.nodes.iter().all(|n| n.error.is_none()), "{ctx}"),
        RequestStatus::Shed => assert!(r.nodes.iter().any(|n| matches!(n.error, Some(NodeError::Shed(_)))), "{ctx}"),
        RequestStatus::Expired => {
            assert!(r.nodes.iter().any(|n| matches!(n.error, Some(NodeError::Expired(_)))), "{ctx}")
        }
        _ => {}
    }
}

#[test]
fn gateway_counts_add_up_overall_and_per_class() {
    let mut totals = [0u64; 7];
    let mut rejected_by = [0u64; 4];
    for case in 0..CASES {
        let seed = 0x6A7E_0000 + case;
        let (done, stats, sent) = run_case(seed);
        let count = |s: RequestStatus, class: Option<SloClass>| {
            done.iter().filter(|r| r.status == s && class.is_none_or(|c| r.request.traffic.class() == c)).count() as u64
        };
        // Every request sent left exactly once.
        assert_eq!(done.len() as u64, sent, "seed {seed}: requests lost");
        let mut ids: Vec<u64> = done.iter().map(|r| r.index).collect();
        ids.sort_unstable();
        assert!(ids.iter().copied().eq(0..sent), "seed {seed}: a request left twice or never");
        // Injected = completed + unservable + rejected + shed + expired + timed out, per class too.
        for class in SloClass::ALL {
            let injected = done.iter().filter(|r| r.request.traffic.class() == class).count() as u64;
            let by_status: u64 = RequestStatus::ALL.iter().map(|&s| count(s, Some(class))).sum();
            assert_eq!(injected, by_status, "seed {seed}: {class}");
        }
        for (t, &s) in totals.iter_mut().zip(&RequestStatus::ALL) {
            *t += count(s, None);
        }
        // The gateway's counters agree with the statuses.
        assert_eq!(stats.shed, count(RequestStatus::Shed, None), "seed {seed}: shed");
        assert_eq!(stats.expired, count(RequestStatus::Expired, None), "seed {seed}: expired");
        let router_rejected = done
            .iter()
            .filter(|r| r.status == RequestStatus::Rejected)
            .filter(|r| matches!(&r.nodes[0].error, Some(NodeError::Rejected(m)) if m.contains("(router.max_queue)")))
            .count() as u64;
        let gateway_rejected = stats.rejected_token_bucket + stats.rejected_saturation + stats.rejected_tenant_budget;
        assert_eq!(count(RequestStatus::Rejected, None), router_rejected + gateway_rejected, "seed {seed}: rejected");
        // (Past a horizon the client may still hold requests it never sent.)
        let asked = stats.admitted + gateway_rejected + router_rejected;
        let held = done.iter().filter(|r| r.status == RequestStatus::Unfinished).count() as u64;
        assert!(asked <= sent && asked + held >= sent, "seed {seed}: admitted {asked} of {sent}");
        if held == 0 {
            assert_eq!(asked, sent, "seed {seed}: admitted");
        }
        assert!(stats.dispatched <= stats.queued && stats.max_depth <= stats.queued, "seed {seed}: {stats:?}");
        for (t, n) in rejected_by.iter_mut().zip([
            stats.rejected_token_bucket,
            stats.rejected_saturation,
            stats.rejected_tenant_budget,
            stats.dispatched,
        ]) {
            *t += n;
        }
        for r in &done {
            check(seed, r);
        }
        // Deterministic: the same case again leaves the same way.
        if case % 10 == 0 {
            let (again, _, _) = run_case(seed);
            let key = |r: &FinishedRequest| (r.index, r.status, r.finish_us, r.nodes.clone());
            assert!(done.iter().map(key).eq(again.iter().map(key)), "seed {seed}: not deterministic");
        }
    }
    // Every path must be exercised, or the properties prove little.
    let [completed, unservable, unfinished, timed_out, rejected, shed, expired] = totals;
    assert!(
        completed > 1000
            && unservable > 10
            && unfinished > 10
            && timed_out > 10
            && rejected > 50
            && shed > 20
            && expired > 20,
        "coverage: {totals:?}"
    );
    assert!(rejected_by.iter().all(|&n| n > 10), "coverage of rejections by reason: {rejected_by:?}");
}
