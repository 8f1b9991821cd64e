//! Hand-checked routing cases: two or three replicas, a fixed 1 ms step, a
//! 0 or 2 ms front end, requests placed so each decision has one right answer.

use crate::latency::{LatencyModel, StepBatch};
use crate::sim::*;
use crate::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};

/// Every step takes 1 ms; the front end takes `overhead_us` (the
/// router.env tests price with it too).
#[derive(Clone)]
pub(in crate::sim) struct Fixed {
    pub(in crate::sim) overhead_us: u64,
}

impl LatencyModel for Fixed {
    fn step_time_us(&self, _: &StepBatch) -> u64 {
        1000
    }
    fn request_overhead_us(&self) -> u64 {
        self.overhead_us
    }
}

fn engine(max_num_seqs: u32) -> EngineConfig {
    EngineConfig { max_model_len: 4096, ..EngineConfig::for_tests(max_num_seqs, 4096, 1000) }
}

fn call(prompt: Vec<u32>, output_tokens: u32) -> NodeKind {
    NodeKind::Llm(LlmCall::for_prompt(prompt, output_tokens))
}

/// One llm call at `at_ms` with prompt `prompt`.
fn single(id: u64, at_ms: f64, prompt: Vec<u32>, output_tokens: u32) -> Request {
    Request {
        traffic: Default::default(),
        request_id: RequestId::Int(id),
        arrival_time: at_ms / 1e3,
        initial: vec![0],
        sub_requests: vec![SubRequest { next: vec![], interval: 0.0, kind: call(prompt, output_tokens), result: None }],
    }
}

/// Three llm calls in a chain (an agent's turns).
fn chain(id: u64, at_ms: f64) -> Request {
    let node = |next: Vec<u32>| SubRequest { next, interval: 0.0, kind: call(vec![7; 8], 2), result: None };
    Request {
        traffic: Default::default(),
        request_id: RequestId::Int(id),
        arrival_time: at_ms / 1e3,
        initial: vec![0],
        sub_requests: vec![node(vec![1]), node(vec![2]), node(vec![])],
    }
}

/// A prompt of `blocks` 16-token blocks, all of token `t`, then one more token.
fn prompt(t: u32, blocks: usize) -> Vec<u32> {
    let mut p = vec![t; 16 * blocks];
    p.push(1000 + t);
    p
}

struct Collect(Vec<(Vec<Option<u32>>, RequestStatus, Option<String>)>);

impl Sink for Collect {
    fn request_done(&mut self, r: &FinishedRequest) -> std::io::Result<()> {
        let error = r.nodes.iter().find_map(|n| n.error.as_ref().map(|e| e.to_string()));
        self.0.push((r.nodes.iter().map(|n| n.replica).collect(), r.status, error));
        Ok(())
    }
}

fn route(replicas: u32, max_num_seqs: u32, overhead_us: u64, router: RouterConfig, requests: Vec<Request>) -> Collect {
    let config = RunConfig {
        step_trace: true,
        ..RunConfig::aggregated(engine(max_num_seqs), replicas, router, Fixed { overhead_us })
    };
    let mut out = Collect(Vec::new());
    run(config, requests.into_iter().map(Ok::<_, ()>), &mut out).unwrap();
    out
}

/// The replica of each request's first node.
fn firsts(c: &Collect) -> Vec<u32> {
    c.0.iter().map(|(r, _, _)| r[0].expect("routed")).collect()
}

fn policy(name: &str) -> RouterConfig {
    RouterConfig { policy: RoutingPolicy::named(name).expect("a listed policy"), ..RouterConfig::default() }
}

#[test]
fn round_robin_takes_turns() {
    let requests = (0..7).map(|i| single(i, i as f64, prompt(1, 1), 3)).collect();
    let c = route(3, 8, 0, policy("round-robin"), requests);
    assert_eq!(firsts(&c), [0, 1, 2, 0, 1, 2, 0]);
}

#[test]
fn least_requests_picks_the_emptiest_then_the_lowest_index() {
    // 0 ms: a long request → 0 (tie). 1 ms: 0 holds one → 1, done by ~4 ms.
    // 10 ms: 0 holds one, 1 none → 1; then both hold one → 0.
    let requests = vec![
        single(0, 0.0, prompt(1, 1), 100),
        single(1, 1.0, prompt(2, 1), 2),
        single(2, 10.0, prompt(3, 1), 50),
        single(3, 10.0, prompt(4, 1), 50),
    ];
    let c = route(2, 8, 0, policy("least-requests"), requests);
    assert_eq!(firsts(&c), [0, 1, 1, 0]);
}

#[test]
fn requests_in_the_front_end_count_as_waiting() {
    // A 2 ms front end: at 0 ms nothing is in an engine yet, but the router
    // knows where it sent each request.
    let requests = (0..4).map(|i| single(i, 0.0, prompt(1, 1), 3)).collect();
    let c = route(2, 8, 2000, policy("least-requests"), requests);
    assert_eq!(firsts(&c), [0, 1, 0, 1]);
}

#[test]
fn least_kv_avoids_the_replica_holding_a_long_prompt() {
    // 0 ms: 32 blocks → 0. 5 ms: 0 holds 33 blocks → 1. 6 ms: 1 holds 2 → 1.
    let requests = || {
        vec![single(0, 0.0, prompt(1, 32), 100), single(1, 5.0, prompt(2, 1), 100), single(2, 6.0, prompt(3, 1), 100)]
    };
    let c = route(2, 8, 0, policy("least-kv"), requests());
    assert_eq!(firsts(&c), [0, 1, 1]);
    let weighted =
        RouterConfig { policy: RoutingPolicy::weighted(vec![(Scorer::KvUtilization, 1.0)]), ..RouterConfig::default() };
    assert_eq!(firsts(&route(2, 8, 0, weighted, requests())), [0, 1, 1]);
}

#[test]
fn prefix_affinity_sends_a_shared_prefix_where_it_is_cached() {
    // Prefix A is cached on 0 once request 0 ran; request 2 (prefix B) goes
    // to the emptier 1; request 3 (prefix A again) to 0 although 0 is busier.
    let requests = || {
        vec![
            single(0, 0.0, prompt(1, 4), 2),
            single(1, 20.0, prompt(1, 4), 100),
            single(2, 21.0, prompt(2, 4), 100),
            single(3, 22.0, prompt(1, 4), 100),
        ]
    };
    let c = route(2, 8, 0, policy("prefix-affinity"), requests());
    assert_eq!(firsts(&c), [0, 0, 1, 0]);
    // Round-robin spreads them regardless.
    assert_eq!(firsts(&route(2, 8, 0, policy("round-robin"), requests())), [0, 1, 0, 1]);
}

#[test]
fn request_affinity_pins_a_dag_to_its_first_replica() {
    let dags = || vec![chain(0, 0.0), chain(1, 0.5), chain(2, 1.0)];
    // Per node, round-robin's turns move each DAG: decisions 0-2 are the
    // first nodes, decision 3 is request 0's second node.
    let node_affinity = route(2, 8, 0, policy("round-robin"), dags());
    assert_eq!(node_affinity.0[0].0[..2], [Some(0), Some(1)]);
    let pinned = RouterConfig { affinity: Affinity::Request, ..policy("round-robin") };
    let c = route(2, 8, 0, pinned, dags());
    assert_eq!(c.0.iter().map(|(r, _, _)| r.clone()).collect::<Vec<_>>(), [[Some(0); 3], [Some(1); 3], [Some(0); 3]]);
}

#[test]
fn a_stale_view_herds_and_vllm_counts_its_own_picks() {
    let burst = || (0..4).map(|i| single(i, 10.0 + i as f64 * 0.1, prompt(1, 1), 50)).collect::<Vec<_>>();
    let live = route(2, 8, 0, policy("least-requests"), burst());
    assert_eq!(firsts(&live), [0, 1, 0, 1]);
    // Refreshed at the first decision (10 ms), the view says both are empty
    // for the next second: every request goes to replica 0.
    let stale = RouterConfig { refresh_interval_us: 1_000_000, ..policy("least-requests") };
    assert_eq!(firsts(&route(2, 8, 0, stale, burst())), [0, 0, 0, 0]);
    // vLLM's DP balancer counts each pick as waiting until the next update.
    let dp = RouterConfig { refresh_interval_us: 100_000, ..policy("vllm-dp") };
    assert_eq!(firsts(&route(2, 8, 0, dp, burst())), [0, 1, 0, 1]);
}

#[test]
fn a_full_cluster_rejects_at_once() {
    // One running per replica: requests 0, 1 run, 2, 3 wait, 4 finds every
    // replica with one waiting and is rejected; 5 arrives after 0 and 1
    // finished and is admitted.
    let requests = vec![
        single(0, 0.0, prompt(1, 1), 20),
        single(1, 0.0, prompt(2, 1), 20),
        single(2, 0.5, prompt(3, 1), 20),
        single(3, 0.5, prompt(4, 1), 20),
        single(4, 0.6, prompt(5, 1), 20),
        single(5, 100.0, prompt(6, 1), 20),
    ];
    let router = RouterConfig { max_queue: Some(1), ..policy("least-requests") };
    let c = route(2, 1, 0, router, requests);
    let statuses: Vec<RequestStatus> = c.0.iter().map(|(_, s, _)| *s).collect();
    use crate::sim::RequestStatus::{Completed, Rejected};
    assert_eq!(statuses, [Completed, Completed, Completed, Completed, Rejected, Completed]);
    let (replicas, _, error) = &c.0[4];
    assert_eq!(replicas, &[None]);
    assert!(error.as_deref().unwrap().starts_with("rejected: "), "{error:?}");
}

#[test]
fn random_is_seeded() {
    let requests = || (0..40).map(|i| single(i, i as f64, prompt(1, 1), 2)).collect::<Vec<_>>();
    let seeded = |seed| RouterConfig { seed, ..policy("random") };
    let a = firsts(&route(3, 8, 0, seeded(7), requests()));
    assert_eq!(a, firsts(&route(3, 8, 0, seeded(7), requests())));
    assert_ne!(a, firsts(&route(3, 8, 0, seeded(8), requests())));
    assert!((0..3).all(|r| a.contains(&r)), "{a:?}");
}
