//! Property tests: random DAG workloads on random engines (one, or a
//! cluster of 2–8 behind a random router, a third of them data-parallel
//! ranks in lockstep), through the library with the KV-cache invariant checked after every step. A fixed
//! seed makes any failure reproducible; the case number is in the message.

use blis_sweep::arch::{ModelArch, catalog, hardware};
use blis_sweep::latency::{Linear, Roofline, RooflineConstants, StepPricer};
use blis_sweep::sim::{
    Affinity, Client, ConnectorKind, EngineConfig, FinishedRequest, KvGroupKind, KvTransferConfig, NodeError,
    PdDecider, PoolConfig, RequestStatus, RouterConfig, RoutingPolicy, SchedulingPolicy, Scorer, Simulation,
};
use blis_sweep::workload::{LlmCall, NodeKind, Request, RequestId, SeededProgress, SubRequest};
use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

const CASES: u64 = 1000;

pub(crate) fn random_engine(rng: &mut Xoshiro256PlusPlus) -> EngineConfig {
    let max_num_seqs = rng.random_range(1..=16);
    EngineConfig {
        max_num_seqs,
        max_num_batched_tokens: rng.random_range(max_num_seqs.max(8)..=512),
        max_model_len: rng.random_range(64..=1024),
        block_size: [1, 4, 8, 16, 32][rng.random_range(0..5)],
        num_gpu_blocks: rng.random_range(4..=300),
        enable_prefix_caching: rng.random_bool(0.7),
        long_prefill_token_threshold: if rng.random_bool(0.3) { rng.random_range(1..=64) } else { 0 },
        async_scheduling: rng.random_bool(0.5),
        scheduler_reserve_full_isl: rng.random_bool(0.5),
        lone_request_skips_prefill_threshold: rng.random_bool(0.5),
        free_uncached_blocks_first: rng.random_bool(0.5),
        // Priority only (these engines are FCFS); no draw, so the stream is unchanged.
        self_preemption_continues: false,
        kv_connector: ConnectorKind::None,
        kv_offload: None,
        lora: None,
        speculative: None,
        scheduling_policy: SchedulingPolicy::Fcfs,
        kv_groups: Vec::new(),
        window_admission_cap: false,
        window_lags_in_flight: false,
        prefix_cache_retention_interval: None,
        attention_span: Default::default(),
    }
}

pub(crate) fn random_latency(rng: &mut Xoshiro256PlusPlus) -> StepPricer {
    if rng.random_bool(0.5) {
        let beta = [rng.random_range(1.0..2000.0), rng.random_range(0.0..5.0), rng.random_range(0.0..50.0)];
        StepPricer::Linear(Linear::new(&beta).unwrap())
    } else {
        let ids = catalog::model_ids();
        let id = ids[rng.random_range(0..ids.len())];
        let model = ModelArch::from_config_json(id, catalog::model_config(id).unwrap().1).unwrap();
        let gpu = hardware::lookup(hardware::names()[rng.random_range(0..7)]).unwrap();
        StepPricer::Roofline(Box::new(Roofline::new(&model, &gpu, 1, 2, false, RooflineConstants::default())))
    }
}

pub(crate) fn random_router(rng: &mut Xoshiro256PlusPlus) -> RouterConfig {
    let scorers = [Scorer::Queue, Scorer::KvUtilization, Scorer::PrefixCache, Scorer::RunningRequests];
    // Every listed policy, so a new one is tested here as it is added; those
    // taking scorers last (the order these cases were first drawn in).
    let mut names: Vec<&str> = RoutingPolicy::names().collect();
    names.sort_by_key(|&n| RoutingPolicy::named(n).is_some_and(|p| p.takes_scorers()));
    let mut policy = RoutingPolicy::named(names[rng.random_range(0..names.len())]).expect("listed");
    if policy.takes_scorers() {
        let mut chosen = Vec::new();
        for s in scorers {
            if rng.random_bool(0.6) {
                chosen.push((s, rng.random_range(0.1..3.0)));
            }
        }
        policy = policy.with_scorers(chosen);
    }
    RouterConfig {
        policy,
        affinity: if rng.random_bool(0.5) { Affinity::Request } else { Affinity::Node },
        refresh_interval_us: if rng.random_bool(0.5) { 0 } else { rng.random_range(1..200_000) },
        max_queue: rng.random_bool(0.3).then(|| rng.random_range(1..=3)),
        seed: rng.random(),
        env: None,
        gateway: None,
    }
}

pub(crate) fn random_request(rng: &mut Xoshiro256PlusPlus, id: u64, arrival: f64) -> Request {
    let n = rng.random_range(1..=6usize);
    let mut subs = Vec::with_capacity(n);
    let mut has_pred = vec![false; n];
    for i in 0..n {
        let mut next = Vec::new();
        for (j, pred) in has_pred.iter_mut().enumerate().skip(i + 1) {
            if rng.random_bool(0.35) {
                next.push(j as u32);
                *pred = true;
            }
        }
        let interval = if rng.random_bool(0.5) { 0.0 } else { rng.random_range(0.0..0.05) };
        let kind = if rng.random_bool(0.3) {
            NodeKind::ToolCall { duration: rng.random_range(0.0..0.2) }
        } else {
            let input_tokens = rng.random_range(1..=400);
            let output_tokens = rng.random_range(1..=60);
            // A small vocabulary and shared openings make prefix hits common.
            let input_token_ids = rng.random_bool(0.6).then(|| {
                let prefix = rng.random_range(0..4u32);
                (0..input_tokens).map(|k| if k < 48 { prefix * 100 + k } else { rng.random_range(0..50) }).collect()
            });
            let output_token_ids = (input_token_ids.is_some() && rng.random_bool(0.5))
                .then(|| (0..output_tokens).map(|_| rng.random_range(0..50)).collect());
            let seeded = rng.random_bool(0.15).then(|| {
                let known = rng.random_range(0..=input_tokens + output_tokens);
                SeededProgress { known_tokens: known, kv_tokens: rng.random_range(0..=known) }
            });
            NodeKind::Llm(
                LlmCall::new(input_tokens, output_tokens)
                    .with_input_ids(input_token_ids)
                    .with_output_ids(output_token_ids)
                    .with_seeded(seeded),
            )
        };
        subs.push(SubRequest { next, interval, kind, result: None });
    }
    let initial = (0..n as u32).filter(|&i| !has_pred[i as usize]).collect();
    Request {
        traffic: Default::default(),
        request_id: RequestId::Int(id),
        arrival_time: arrival,
        initial,
        sub_requests: subs,
    }
}

/// Whether the engine can ever serve `call` (mirrors the documented rule:
/// with KV cache groups, the most blocks it can hold at once — vLLM's
/// `max_memory_usage_bytes`: a window's W − 1 tokens and the tokens of the
/// steps its window lags, one block more; a chunk and those; one state).
pub(crate) fn servable(call: &LlmCall, e: &EngineConfig) -> bool {
    let total = call.input_tokens + call.output_tokens;
    let bs = e.block_size;
    let positions = (total - 1).div_ceil(bs);
    let lag = e.max_num_batched_tokens * if e.window_lags_in_flight && e.async_scheduling { 2 } else { 1 };
    let cap_lag = e.max_num_batched_tokens * if e.async_scheduling { 2 } else { 1 };
    let least: u32 = if e.kv_groups.is_empty() {
        positions
    } else {
        e.kv_groups
            .iter()
            .map(|g| match *g {
                KvGroupKind::Full => positions,
                KvGroupKind::SlidingWindow { window: w } => {
                    positions.min((w - 1 + lag).min(e.max_model_len).div_ceil(bs) + 1)
                }
                KvGroupKind::ChunkedLocal { chunk: c } => {
                    positions.min((c + lag).min(e.max_model_len).div_ceil(bs) + u32::from(c % bs != 0))
                }
                KvGroupKind::Linear => 1,
            })
            .sum()
    };
    // vLLM's admission gate counts a window's blocks up to its cap (0.33),
    // every position before.
    let gate: u32 = if e.kv_groups.is_empty() || !e.scheduler_reserve_full_isl {
        0
    } else {
        e.kv_groups
            .iter()
            .map(|g| match *g {
                KvGroupKind::SlidingWindow { window: w } if e.window_admission_cap => {
                    positions.min((w - 1 + cap_lag).min(e.max_model_len).div_ceil(bs) + 1)
                }
                KvGroupKind::ChunkedLocal { chunk: c } if e.window_admission_cap => {
                    positions.min((c + cap_lag).min(e.max_model_len).div_ceil(bs))
                }
                KvGroupKind::Linear => 1,
                _ => positions,
            })
            .sum()
    };
    // One block is vLLM's null block.
    total <= e.max_model_len && least.max(gate) < e.num_gpu_blocks
}

pub(crate) fn check(case: u64, r: &FinishedRequest, e: &EngineConfig, replicas: u32) {
    let ctx = format!("case {case}, request {}", r.request.request_id);
    assert_ne!(r.status, RequestStatus::Unfinished, "{ctx}: never finished");
    if r.status == RequestStatus::Rejected {
        // Rejected on arrival: nothing started, every node says why.
        for node in &r.nodes {
            assert!(node.start_us.is_none() && node.token_times_us.is_empty(), "{ctx}: a rejected request ran");
            assert!(matches!(&node.error, Some(NodeError::Rejected(m)) if m.starts_with("rejected: ")), "{ctx}");
        }
        return;
    }
    for (sub, node) in r.request.sub_requests.iter().zip(&r.nodes) {
        // Every llm node that started with tokens to emit was routed to a
        // replica of the cluster (named only when there is more than one).
        if matches!(&sub.kind, NodeKind::Llm(c) if c.tokens_to_emit() > 0) && node.start_us.is_some() {
            assert_eq!(node.replica.is_some(), replicas > 1, "{ctx}: replica {:?}", node.replica);
            assert!(node.replica.unwrap_or(0) < replicas, "{ctx}: no replica {:?}", node.replica);
        }
    }
    let mut unservable = false;
    for (i, (sub, node)) in r.request.sub_requests.iter().zip(&r.nodes).enumerate() {
        let ctx = format!("{ctx}, node {i}");
        if matches!(node.error, Some(NodeError::Skipped(_))) {
            assert!(node.start_us.is_none(), "{ctx}: skipped node ran");
            continue;
        }
        if matches!(node.error, Some(NodeError::TimedOut)) && node.start_us.is_none() {
            assert_eq!(r.status, RequestStatus::TimedOut, "{ctx}: timed out in a request that did not");
            continue;
        }
        let start = node.start_us.unwrap_or_else(|| panic!("{ctx}: never started"));
        assert!(r.arrival_us <= r.send_us && r.send_us <= start, "{ctx}: arrival ≤ send ≤ start broken");
        match &sub.kind {
            NodeKind::ToolCall { .. } if matches!(node.error, Some(NodeError::TimedOut)) => {
                assert!(node.finish_us.is_none(), "{ctx}: a timed-out tool call finished");
            }
            NodeKind::ToolCall { .. } => assert!(node.finish_us.unwrap() >= start, "{ctx}"),
            NodeKind::Llm(call) => {
                if let Some(NodeError::Unservable(_)) = node.error {
                    assert!(!servable(call, e), "{ctx}: servable call reported unservable");
                    unservable = true;
                    continue;
                }
                // A call whose seeded progress holds every token never reaches the engine.
                let times = &node.token_times_us;
                if let Some(NodeError::TimedOut) = node.error {
                    assert_eq!(r.status, RequestStatus::TimedOut, "{ctx}");
                    assert!(times.len() as u32 <= call.tokens_to_emit(), "{ctx}: too many tokens");
                    continue;
                }
                assert!(servable(call, e) || call.tokens_to_emit() == 0, "{ctx}: unservable call ran");
                assert_eq!(times.len() as u32, call.tokens_to_emit(), "{ctx}: wrong token count");
                let mut previous = start;
                for &t in times {
                    assert!(t >= previous, "{ctx}: negative latency");
                    previous = t;
                }
                let finish = node.finish_us.unwrap();
                if let Some(&first) = times.first() {
                    assert!(start <= first && first <= finish, "{ctx}: start ≤ first token ≤ finish broken");
                    assert_eq!(*times.last().unwrap(), finish, "{ctx}: finish is not the last token");
                }
            }
        }
    }
    if r.status != RequestStatus::TimedOut {
        assert_eq!(unservable, r.status == RequestStatus::Unservable, "{ctx}: status");
    }
}

/// A benchmark client: open loop, capped or closed loop.
pub(crate) fn random_client(rng: &mut Xoshiro256PlusPlus) -> Client {
    match rng.random_range(0..5) {
        0 => Client::Capped { limit: rng.random_range(1..=4) },
        1 => Client::ClosedLoop { users: rng.random_range(1..=4), think_time_us: rng.random_range(0..100_000) },
        _ => Client::OpenLoop,
    }
}

/// Feeds 1–12 random requests to `sim` and finishes it: every request sent
/// leaves (a request is refused only past `horizon`), the clock never goes
/// back, nothing is left in flight or (without a horizon) queued, and
/// requests leave in simulated-time order. What left, in that order.
pub(crate) fn feed(
    sim: &mut Simulation<StepPricer>,
    rng: &mut Xoshiro256PlusPlus,
    case: u64,
    horizon: Option<u64>,
) -> Vec<FinishedRequest> {
    let mut done: Vec<FinishedRequest> = Vec::new();
    let n = rng.random_range(1..=12u64);
    let mut arrival = 0.0;
    let mut last_now = 0;
    let mut sent = n;
    for id in 0..n {
        if rng.random_bool(0.7) {
            arrival += rng.random_range(0.0..0.3);
        }
        if !sim.add_request(random_request(rng, id, (arrival * 1e6f64).round() / 1e6), &mut done) {
            // It would be sent after the horizon (its arrival, or when a
            // closed-loop user is free): dropped, and the caller stops reading.
            assert!(horizon.is_some(), "case {case}: request {id} refused without a horizon");
            sent = id;
            break;
        }
        assert!(sim.now_us() >= last_now, "case {case}: clock went back");
        last_now = sim.now_us();
    }
    sim.finish(&mut done);
    assert!(sim.now_us() >= last_now);
    assert_eq!(done.len() as u64, sent, "case {case}: requests lost");
    assert_eq!(sim.in_flight(), 0);
    if horizon.is_none() {
        assert_eq!(sim.pending_events(), 0, "case {case}: events left over");
    }
    let finishes: Vec<u64> = done.iter().filter_map(|r| r.finish_us).collect();
    assert!(finishes.windows(2).all(|w| w[0] <= w[1]), "case {case}: completions out of time order");
    done
}

#[test]
fn random_workloads_finish_with_consistent_timelines() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0xB115);
    let mut totals = (0, 0, 0u64, 0, 0);
    for case in 0..CASES {
        let engine = random_engine(&mut rng);
        // Half the cases are clusters of 2–8 replicas behind a random router.
        let replicas = if rng.random_bool(0.5) { 1 } else { rng.random_range(2..=8) };
        let router = random_router(&mut rng);
        // A third of the clusters are data-parallel ranks in lockstep
        // (chosen by case number, so the random stream is the same).
        let lockstep = replicas > 1 && case % 3 == 0;
        let pool =
            PoolConfig { lockstep, ..PoolConfig::mixed(engine.clone(), replicas, router, random_latency(&mut rng)) };
        let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
        sim.check_invariants(true);
        sim.set_client(random_client(&mut rng));
        sim.set_request_timeout(rng.random_bool(0.3).then(|| rng.random_range(1_000..400_000)));
        let done = feed(&mut sim, &mut rng, case, None);
        for r in &done {
            check(case, r, &engine, replicas);
        }
        totals.0 += done.iter().filter(|r| r.status == RequestStatus::Completed).count() as u64;
        totals.1 += done.iter().filter(|r| r.status == RequestStatus::Unservable).count() as u64;
        totals.2 += sim.engine_stats().preemptions;
        totals.3 += done.iter().filter(|r| r.status == RequestStatus::TimedOut).count() as u64;
        totals.4 += done.iter().filter(|r| r.status == RequestStatus::Rejected).count() as u64;
    }
    // The generator must exercise every path, or the properties prove little.
    // (Rejections: 38 since lora-affinity joined the policies drawn, which
    // shifted the draws of this stream; 30 since issue 32's models and GPUs
    // joined the catalog the latency models are drawn from.)
    assert!(
        totals.0 > 1000 && totals.1 > 50 && totals.2 > 100 && totals.3 > 100 && totals.4 >= 25,
        "coverage: {totals:?}"
    );
}

/// Random engines with KV cache groups (vLLM's hybrid KV cache manager:
/// full, sliding-window, chunked local and linear groups over one pool, each
/// release's window rules): the KV cache's invariant holds after every step
/// (every block held or free, never both, the free queue whole), every
/// servable request finishes with all its tokens, and the unservable ones
/// are the documented ones.
#[test]
fn random_hybrid_engines_keep_the_kv_invariant() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x4B1D);
    let (mut completed, mut preemptions, mut hits) = (0u64, 0u64, 0u64);
    for case in 0..CASES / 2 {
        let mut engine = random_engine(&mut rng);
        let bs = engine.block_size;
        let groups = rng.random_range(1..=4);
        engine.kv_groups = (0..groups)
            .map(|_| match rng.random_range(0..6) {
                0 | 1 => KvGroupKind::Full,
                2 | 3 => KvGroupKind::SlidingWindow { window: rng.random_range(2..=96) },
                // vLLM's chunks are whole blocks.
                4 => KvGroupKind::ChunkedLocal { chunk: bs * rng.random_range(1..=6) },
                _ => KvGroupKind::Linear,
            })
            .collect();
        if engine.kv_groups == [KvGroupKind::Full] {
            engine.kv_groups.push(KvGroupKind::SlidingWindow { window: 16 });
        }
        engine.window_admission_cap = rng.random_bool(0.5);
        engine.window_lags_in_flight = rng.random_bool(0.5);
        engine.prefix_cache_retention_interval = match rng.random_range(0..3) {
            0 => None,
            1 => Some(0),
            _ => Some(bs * rng.random_range(1..=8)),
        };
        engine.num_gpu_blocks = engine.num_gpu_blocks.saturating_mul(groups);
        let replicas = if rng.random_bool(0.7) { 1 } else { rng.random_range(2..=4) };
        let pool = PoolConfig::mixed(engine.clone(), replicas, random_router(&mut rng), random_latency(&mut rng));
        let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
        sim.check_invariants(true);
        sim.set_client(random_client(&mut rng));
        sim.set_request_timeout(rng.random_bool(0.2).then(|| rng.random_range(1_000..400_000)));
        let done = feed(&mut sim, &mut rng, case, None);
        for r in &done {
            check(case, r, &engine, replicas);
        }
        completed += done.iter().filter(|r| r.status == RequestStatus::Completed).count() as u64;
        preemptions += sim.engine_stats().preemptions;
        hits += sim.engine_stats().prefix_hits;
    }
    assert!(completed > 1000 && preemptions > 50 && hits > 1000, "coverage: {completed} {preemptions} {hits}");
}

/// Steady decodes (a plain FCFS engine accounts for one-token decodes by
/// the step, `src/sim/engine/steady.rs`; off while steps are traced) change
/// nothing a request sees: the same random cases (preemptions, budgets that
/// run out, timeouts, clusters and lockstep ranks, async or not) finish with
/// the same statuses and token times traced and untraced.
#[test]
fn steady_decodes_change_no_result() {
    let mut seeds = Xoshiro256PlusPlus::seed_from_u64(0x57EAD);
    for case in 0..400 {
        let seed: u64 = seeds.random();
        let run = |traced: bool| {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let engine = random_engine(&mut rng);
            let replicas = if rng.random_bool(0.7) { 1 } else { rng.random_range(2..=4) };
            let router = random_router(&mut rng);
            let lockstep = replicas > 1 && case % 3 == 0;
            let pool = PoolConfig { lockstep, ..PoolConfig::mixed(engine, replicas, router, random_latency(&mut rng)) };
            let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
            sim.check_invariants(true);
            sim.set_step_trace(traced);
            sim.set_request_timeout(rng.random_bool(0.3).then(|| rng.random_range(1_000..400_000)));
            let horizon = rng.random_bool(0.2).then(|| rng.random_range(10_000..2_000_000));
            sim.set_horizon(horizon);
            let done = feed(&mut sim, &mut rng, case, horizon);
            (format!("{done:?}"), format!("{:?}", sim.engine_stats()))
        };
        let (traced, untraced) = (run(true), run(false));
        assert!(traced.0 == untraced.0, "case {case}: requests differ");
        assert!(traced.1 == untraced.1, "case {case}: engine counters differ:\n{}\n{}", traced.1, untraced.1);
    }
}
