//! Property tests of prefill/decode disaggregation: random P/D clusters
//! (1–4 prefill and 1–4 decode replicas, sometimes a mixed pool beside
//! them, each pool its own random engine, pricer and KV size), random links
//! and deciders, random DAG workloads, clients, timeouts and horizons,
//! through the library with the KV-cache invariant checked after every step
//! of every replica. Every request must leave (completed, rejected,
//! unservable, timed out or cut by the horizon), and every split node's
//! timeline and KV transfer must add up. A fixed seed makes any failure
//! reproducible; the case number is in the message.

use blis_sweep::latency::StepPricer;
use blis_sweep::sim::{
    ConnectorKind, EngineConfig, FinishedRequest, KvTransferConfig, NodeError, NodeOutcome, PdDecider, PoolConfig,
    RequestStatus, Role, Simulation,
};
use blis_sweep::workload::{LlmCall, NodeKind};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::properties::{feed, random_client, random_latency, random_router, servable};

const CASES: u64 = 800;

/// The generators of the aggregated property test, with `kv_connector`.
fn random_engine(rng: &mut Xoshiro256PlusPlus, kv_connector: ConnectorKind) -> EngineConfig {
    EngineConfig { kv_connector, ..crate::properties::random_engine(rng) }
}

/// The prompt the engine holds: the input, or more when seeded progress
/// already knows more tokens.
fn prompt_tokens(call: &LlmCall) -> u32 {
    call.input_tokens.max(call.seeded.map_or(0, |s| s.known_tokens))
}

/// A cluster as the simulator orders its replicas: the serving pools
/// (mixed, decode) first, then the prefill pools, each pool's replicas together.
struct Layout {
    /// Per replica: its pool's role, engine and KV bytes a token.
    replicas: Vec<(Role, EngineConfig, u64)>,
    /// Replicas that serve requests (the first ones).
    serving: u32,
    link: KvTransferConfig,
    decider: PdDecider,
}

impl Layout {
    fn new(pools: &[PoolConfig<StepPricer>], link: KvTransferConfig, decider: PdDecider) -> Layout {
        let serving = pools.iter().filter(|p| p.role != Role::Prefill);
        let prefill = pools.iter().filter(|p| p.role == Role::Prefill);
        let replicas: Vec<_> = serving
            .chain(prefill)
            .flat_map(|p| std::iter::repeat_n((p.role, p.engine.clone(), p.kv_bytes_per_token), p.replicas as usize))
            .collect();
        let serving = replicas.iter().filter(|r| r.0 != Role::Prefill).count() as u32;
        Layout { replicas, serving, link, decider }
    }
}

#[derive(Default, Debug)]
struct Totals {
    completed: u64,
    unservable: u64,
    timed_out: u64,
    rejected: u64,
    unfinished: u64,
    split: u64,
    split_completed: u64,
    kept_local: u64,
    exact_bytes: u64,
    partial_bytes: u64,
    preemptions: u64,
}

/// A split llm node: where it ran, its timeline and its transfer.
fn check_split(ctx: &str, call: &LlmCall, node: &NodeOutcome, l: &Layout, totals: &mut Totals) {
    let decode = node.replica.expect("a split node names its decode replica") as usize;
    let prefill = node.prefill_replica.unwrap() as usize;
    assert_eq!(l.replicas[decode].0, Role::Decode, "{ctx}: split onto a {:?} replica", l.replicas[decode].0);
    assert!(prefill >= l.serving as usize && prefill < l.replicas.len(), "{ctx}: prefill replica {prefill}");
    assert_eq!(l.replicas[prefill].0, Role::Prefill);
    totals.split += 1;
    if node.kv_transfer_bytes == 0 {
        // Cut (timeout, horizon) before the decode replica asked for the KV.
        assert_eq!(node.kv_transfer_us, 0, "{ctx}: time without bytes");
        assert!(node.error.is_some(), "{ctx}: finished without its KV");
        return;
    }
    // The decode replica reads what it does not hold: the prompt less its
    // own prefix-cache hit (whole blocks), at the prefill pool's KV size.
    let kvb = l.replicas[prefill].2;
    let decode_engine = &l.replicas[decode].1;
    assert_eq!(node.kv_transfer_bytes % kvb, 0, "{ctx}: {} bytes at {kvb} a token", node.kv_transfer_bytes);
    let moved = (node.kv_transfer_bytes / kvb) as u32;
    let prompt = prompt_tokens(call);
    assert!(moved >= 1 && moved <= prompt, "{ctx}: moved {moved} of a {prompt}-token prompt");
    let hit = prompt - moved;
    assert_eq!(hit % decode_engine.block_size, 0, "{ctx}: the decode replica's hit {hit} is not whole blocks");
    if !decode_engine.enable_prefix_caching || call.input_token_ids.is_none() {
        // Nothing to hit: the whole prompt moves.
        assert_eq!(moved, prompt, "{ctx}: the decode replica caches nothing, yet {moved} of {prompt} moved");
        totals.exact_bytes += 1;
    } else {
        totals.partial_bytes += 1;
    }
    // Waiting for the link included, a transfer takes at least its own time.
    let own = l.link.duration_us(node.kv_transfer_bytes);
    assert!(node.kv_transfer_us >= own, "{ctx}: transfer {} µs < {own} µs on an idle link", node.kv_transfer_us);
    if let Some(&first) = node.token_times_us.first() {
        // The prefill, then the transfer, then the decode replica's first step.
        let start = node.start_us.unwrap();
        assert!(first > start + node.kv_transfer_us, "{ctx}: first token {first} before the KV landed");
    }
}

fn check(case: u64, r: &FinishedRequest, l: &Layout, horizon: Option<u64>, totals: &mut Totals) {
    let ctx = format!("case {case}, request {}", r.request.request_id);
    match r.status {
        RequestStatus::Completed => totals.completed += 1,
        RequestStatus::Unservable => totals.unservable += 1,
        RequestStatus::TimedOut => totals.timed_out += 1,
        RequestStatus::Rejected => totals.rejected += 1,
        RequestStatus::Unfinished => totals.unfinished += 1,
        RequestStatus::Shed | RequestStatus::Expired => panic!("{ctx}: shed or expired with no gateway configured"),
        RequestStatus::Failed => panic!("{ctx}: failed (a real server's status) in a simulation"),
    }
    if r.status == RequestStatus::Unfinished {
        assert!(horizon.is_some(), "{ctx}: unfinished without a horizon");
    }
    if r.status == RequestStatus::Rejected {
        for node in &r.nodes {
            assert!(node.start_us.is_none() && node.token_times_us.is_empty(), "{ctx}: a rejected request ran");
            assert!(matches!(&node.error, Some(NodeError::Rejected(m)) if m.starts_with("rejected: ")), "{ctx}");
        }
        return;
    }
    let mut unservable = false;
    for (i, (sub, node)) in r.request.sub_requests.iter().zip(&r.nodes).enumerate() {
        let ctx = format!("{ctx}, node {i}");
        if matches!(node.error, Some(NodeError::Skipped(_))) {
            assert!(node.start_us.is_none(), "{ctx}: skipped node ran");
            continue;
        }
        let Some(start) = node.start_us else {
            // Never started: cut by the client's timeout or the horizon.
            assert!(
                matches!(node.error, Some(NodeError::TimedOut | NodeError::Unfinished)),
                "{ctx}: never started: {:?}",
                node.error
            );
            continue;
        };
        assert!(r.arrival_us <= r.send_us && r.send_us <= start, "{ctx}: arrival ≤ send ≤ start broken");
        if let Some(h) = horizon {
            assert!(start <= h, "{ctx}: started after the horizon");
        }
        let NodeKind::Llm(call) = &sub.kind else { continue };
        if call.tokens_to_emit() == 0 {
            continue;
        }
        let replica = node.replica.expect("every llm node of a cluster names its replica") as usize;
        assert!(replica < l.serving as usize, "{ctx}: routed to non-serving replica {replica}");
        let split = node.prefill_replica.is_some();
        if split {
            check_split(&ctx, call, node, l, totals);
        } else {
            assert_eq!(node.kv_transfer_bytes, 0, "{ctx}: a local node moved KV");
            if l.replicas[replica].0 == Role::Decode {
                // A decode replica runs a whole request only when the
                // decider keeps it local.
                assert!(matches!(l.decider, PdDecider::PrefixThreshold { .. }), "{ctx}: not split");
                totals.kept_local += 1;
            }
        }
        // Every engine the node needs accepts it, or it is reported
        // unservable; a prefill replica takes the prompt and its one token
        // (the prefill request's max_tokens: 1).
        let known = call.seeded.map_or(0, |k| k.known_tokens).max(call.input_tokens);
        let prefill_request = LlmCall::new(call.input_tokens, (known + 1 - call.input_tokens).min(call.output_tokens));
        let ok = servable(call, &l.replicas[replica].1)
            && node.prefill_replica.is_none_or(|p| servable(&prefill_request, &l.replicas[p as usize].1));
        if let Some(NodeError::Unservable(_)) = node.error {
            assert!(!ok, "{ctx}: servable call reported unservable");
            unservable = true;
            continue;
        }
        // (A split node's decode replica sees it only after its prefill:
        // one cut before then never learnt whether the decode side takes it.)
        let cut = matches!(node.error, Some(NodeError::TimedOut | NodeError::Unfinished));
        assert!(ok || cut, "{ctx}: unservable call ran");
        let times = &node.token_times_us;
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{ctx}: token times not increasing: {times:?}");
        assert!(times.first().is_none_or(|&t| t >= start), "{ctx}: a token before the start");
        match node.error {
            Some(NodeError::TimedOut | NodeError::Unfinished) => {
                assert!(times.len() as u32 <= call.tokens_to_emit(), "{ctx}: too many tokens");
            }
            Some(ref e) => panic!("{ctx}: {e}"),
            None => {
                assert_eq!(times.len() as u32, call.tokens_to_emit(), "{ctx}: wrong token count");
                assert_eq!(*times.last().unwrap(), node.finish_us.unwrap(), "{ctx}: finish is not the last token");
                if split {
                    totals.split_completed += 1;
                }
            }
        }
    }
    if matches!(r.status, RequestStatus::Completed | RequestStatus::Unservable) {
        assert_eq!(unservable, r.status == RequestStatus::Unservable, "{ctx}: status");
    }
}

fn random_pools(rng: &mut Xoshiro256PlusPlus) -> Vec<PoolConfig<StepPricer>> {
    let serving_router = random_router(rng);
    let prefill_router = random_router(rng);
    let pool = |rng: &mut Xoshiro256PlusPlus, role: Role, most: u32| PoolConfig {
        name: role.name().to_owned(),
        role,
        engine: random_engine(rng, if role == Role::Mixed { ConnectorKind::None } else { ConnectorKind::Nixl }),
        replicas: rng.random_range(1..=most),
        lockstep: false,
        latency: random_latency(rng),
        router: if role == Role::Prefill { prefill_router.clone() } else { serving_router.clone() },
        kv_bytes_per_token: rng.random_range(1..=4096),
    };
    let mut pools = vec![pool(rng, Role::Prefill, 4), pool(rng, Role::Decode, 4)];
    // A quarter of the clusters also have a mixed pool behind the same router.
    if rng.random_bool(0.25) {
        let mixed = pool(rng, Role::Mixed, 2);
        pools.insert(rng.random_range(0..=pools.len()), mixed);
    }
    pools
}

#[test]
fn random_pd_clusters_lose_nothing_and_split_nodes_add_up() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x9D_B115);
    let mut totals = Totals::default();
    for case in 0..CASES {
        eprintln!("CASE {case}");
        let pools = random_pools(&mut rng);
        let link = KvTransferConfig {
            bandwidth_gbps: [0.001, 0.1, 8.0, 400.0, 3600.0][rng.random_range(0..5)],
            latency_us: rng.random_range(0..2_000),
        };
        let decider = if rng.random_bool(0.5) {
            PdDecider::Always
        } else {
            PdDecider::PrefixThreshold { threshold_tokens: rng.random_range(0..=300) }
        };
        let layout = Layout::new(&pools, link, decider);
        let mut sim = Simulation::pools(pools, link, decider);
        sim.check_invariants(true);
        sim.set_client(random_client(&mut rng));
        sim.set_request_timeout(rng.random_bool(0.25).then(|| rng.random_range(1_000..400_000)));
        let horizon = rng.random_bool(0.2).then(|| rng.random_range(1_000..2_000_000));
        sim.set_horizon(horizon);
        let done = feed(&mut sim, &mut rng, case, horizon);
        for r in &done {
            check(case, r, &layout, horizon, &mut totals);
        }
        totals.preemptions += sim.engine_stats().preemptions;
    }
    // The generator must exercise every path, or the properties prove little.
    let t = &totals;
    assert!(
        t.completed > 1000
            && t.unservable > 50
            && t.timed_out > 50
            && t.rejected > 20
            && t.unfinished > 50
            && t.split_completed > 1000
            && t.kept_local > 100
            && t.exact_bytes > 500
            && t.partial_bytes > 200
            && t.preemptions > 100,
        "coverage: {totals:?}"
    );
}
