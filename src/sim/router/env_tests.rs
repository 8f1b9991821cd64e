//! `router.env`, key by key, on hand-checked cases: two replicas, a fixed
//! 1 ms step, requests placed so each decision has one right answer.

use crate::sim::router_tests::Fixed;
use crate::sim::*;
use crate::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};

/// One llm call at `at_ms` of `blocks` 16-token blocks of token `t` (then one more token).
fn single(id: u64, at_ms: f64, t: u32, blocks: usize, output_tokens: u32) -> Request {
    let mut prompt = vec![t; 16 * blocks];
    prompt.push(1000 + t);
    Request {
        traffic: Default::default(),
        request_id: RequestId::Int(id),
        arrival_time: at_ms / 1e3,
        initial: vec![0],
        sub_requests: vec![SubRequest {
            next: vec![],
            interval: 0.0,
            kind: NodeKind::Llm(LlmCall::for_prompt(prompt, output_tokens)),
            result: None,
        }],
    }
}

/// Per request: its first node's replica, start, first token; its status.
type Row = (Option<u32>, Option<u64>, Option<u64>, RequestStatus);

struct Collect(Vec<Row>);

impl Sink for Collect {
    fn request_done(&mut self, r: &FinishedRequest) -> std::io::Result<()> {
        let n = &r.nodes[0];
        self.0.push((n.replica, n.start_us, n.token_times_us.first().copied(), r.status));
        Ok(())
    }
}

fn run_with(
    max_num_seqs: u32,
    overhead_us: u64,
    timeout_us: Option<u64>,
    router: RouterConfig,
    requests: Vec<Request>,
) -> Vec<Row> {
    let engine = EngineConfig { max_model_len: 4096, ..EngineConfig::for_tests(max_num_seqs, 4096, 1000) };
    let config = RunConfig { timeout_us, ..RunConfig::aggregated(engine, 2, router, Fixed { overhead_us }) };
    let mut out = Collect(Vec::new());
    run(config, requests.into_iter().map(Ok::<_, ()>), &mut out).unwrap();
    out.0.sort_by_key(|r| r.1.unwrap_or(u64::MAX));
    out.0
}

fn router(policy: &str, env: RouterEnv) -> RouterConfig {
    RouterConfig { policy: RoutingPolicy::named(policy).expect("listed"), env: Some(env), ..RouterConfig::default() }
}

fn picks(rows: &[Row]) -> Vec<u32> {
    rows.iter().map(|r| r.0.expect("routed")).collect()
}

#[test]
fn admission_happens_after_its_latency_and_sees_the_replicas_then() {
    // One replica's worth: max_queue 1 on one engine of one seat.
    let env = RouterEnv { admission_latency_us: 5000, ..RouterEnv::default() };
    let cfg = |env| RouterConfig { max_queue: Some(1), ..router("least-requests", env) };
    // Without latency both are admitted at 0 (neither has reached a replica).
    let now = run_with(1, 0, None, cfg(RouterEnv::default()), vec![single(0, 0.0, 1, 1, 3), single(1, 0.0, 2, 1, 3)]);
    assert!(now.iter().all(|r| r.3 == RequestStatus::Completed), "{now:?}");
    assert_eq!(now[0].1, Some(0));
    // With it, both are routed at 5 ms: at request 1's admission request 0 waits
    // on replica 0 only, so one replica has room.
    // Sent at 0 (their start, from which TTFT counts), routed at 5 ms.
    let late = run_with(1, 0, None, cfg(env), vec![single(0, 0.0, 1, 1, 3), single(1, 0.0, 2, 1, 3)]);
    assert_eq!(late.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(), [(Some(0), Some(6000)); 2]);
    // Three at once: all admitted at 0 without latency; with it, at 5 ms the
    // third finds both replicas with one waiting.
    let three = || (0..3).map(|i| single(i, 0.0, i as u32 + 1, 1, 3)).collect::<Vec<_>>();
    let rows = run_with(1, 0, None, cfg(RouterEnv::default()), three());
    assert!(rows.iter().all(|r| r.3 == RequestStatus::Completed), "{rows:?}");
    let rows = run_with(1, 0, None, cfg(env), three());
    let statuses: Vec<_> = rows.iter().map(|r| r.3).collect();
    assert_eq!(statuses, [RequestStatus::Completed, RequestStatus::Completed, RequestStatus::Rejected]);
    assert_eq!(rows[2].0, None, "never routed");
}

#[test]
fn the_routing_hop_delays_the_front_end_and_counts_in_flight() {
    let env = RouterEnv { routing_latency_us: 3000, ..RouterEnv::default() };
    // 3 ms hop + 2 ms front end + one 1 ms step: the first token at 6 ms.
    let one = run_with(8, 2000, None, router("least-requests", env), vec![single(0, 0.0, 1, 1, 3)]);
    assert_eq!(one[0].2, Some(6000));
    let base = run_with(8, 2000, None, router("least-requests", RouterEnv::default()), vec![single(0, 0.0, 1, 1, 3)]);
    assert_eq!(base[0].2, Some(3000));
    // Four at once: nothing has reached a replica, but the router counts
    // what it sent into the hop.
    let burst = (0..4).map(|i| single(i, 0.0, 1, 1, 3)).collect();
    assert_eq!(picks(&run_with(8, 0, None, router("least-requests", env), burst)), [0, 1, 0, 1]);
}

#[test]
fn a_request_timed_out_in_the_hop_leaves_no_count_behind() {
    let env = RouterEnv { routing_latency_us: 3000, ..RouterEnv::default() };
    let mut requests = vec![single(0, 0.0, 1, 1, 3)];
    // After the first timed out in its hop, the next two are spread as if it never was.
    requests.extend((1..3).map(|i| single(i, 10.0, 1, 1, 30)));
    let rows = run_with(8, 0, Some(1000), router("least-requests", env), requests);
    assert_eq!(rows[0].3, RequestStatus::TimedOut);
    assert_eq!(picks(&rows), [0, 0, 1]);
}

/// Three requests on replica 0 at 1, 2, 3 ms (one seat: two wait), then
/// one at 10.5 ms, under a `queue` scorer that reads the scraped waiting.
fn scraped_burst(router: RouterConfig) -> Vec<u32> {
    let mut requests: Vec<Request> = (0..3).map(|i| single(i, 1.0 + i as f64, 1, 1, 40)).collect();
    requests.push(single(3, 10.5, 2, 1, 3));
    picks(&run_with(1, 0, None, router, requests))
}

#[test]
fn metrics_are_scraped_on_the_routers_clock_not_at_the_first_pick() {
    let queue = |env: Option<RouterEnv>, refresh_interval_us| RouterConfig {
        policy: RoutingPolicy::weighted(vec![(Scorer::Queue, 1.0)]),
        env,
        refresh_interval_us,
        ..RouterConfig::default()
    };
    // The scrape at 10 ms saw two waiting on replica 0.
    let timer = RouterEnv { metrics_refresh_us: Some(10_000), ..RouterEnv::default() };
    assert_eq!(scraped_burst(queue(Some(timer), 0)), [0, 0, 0, 1]);
    // Refreshed lazily at the first pick (1 ms), the view is not 10 ms old at 10.5 ms.
    assert_eq!(scraped_burst(queue(None, 10_000)), [0, 0, 0, 0]);
    // Live, the second request already sees the first waiting... on a queue
    // of one seat it runs, so the third is the first to see one waiting.
    let live = RouterEnv { metrics_refresh_us: Some(0), ..RouterEnv::default() };
    assert_eq!(scraped_burst(queue(Some(live), 0)), [0, 0, 1, 1]);
}

#[test]
fn counting_policies_read_fresh_in_flight_counts_under_a_stale_scrape() {
    // The old interval herds a burst onto replica 0 (router_tests.rs); with
    // env, least-requests counts what it sent, however old the scrape.
    let burst = || (0..4).map(|i| single(i, 10.0 + i as f64 * 0.1, i as u32 + 1, 1, 50)).collect::<Vec<_>>();
    let env = RouterEnv { metrics_refresh_us: Some(1_000_000), ..RouterEnv::default() };
    for policy in ["least-requests", "vllm-dp", "prefix-affinity"] {
        assert_eq!(picks(&run_with(8, 0, None, router(policy, env), burst())), [0, 1, 0, 1], "{policy}");
    }
}

#[test]
fn kv_events_reach_the_index_after_their_delay() {
    // Request 0 (8 blocks of token 1, 200 output tokens) runs on replica 0
    // from 0 ms. Request 1, the same prompt at 20 ms: with a live index it
    // goes where the prompt is cached; with a 100 ms delay the index is
    // empty and the less loaded replica 1 wins; at 150 ms the events are in.
    let at = |ms: f64, delay_us| {
        let env = RouterEnv { kv_event_delay_us: Some(delay_us), ..RouterEnv::default() };
        let rows = run_with(
            8,
            0,
            None,
            router("prefix-affinity", env),
            vec![single(0, 0.0, 1, 8, 200), single(1, ms, 1, 8, 3)],
        );
        picks(&rows)[1]
    };
    assert_eq!(at(20.0, 0), 0);
    assert_eq!(at(20.0, 100_000), 1);
    assert_eq!(at(150.0, 100_000), 0);
}

#[test]
fn jittered_scrape_phases_are_seeded() {
    let env = RouterEnv { metrics_refresh_us: Some(7_000), jitter: true, ..RouterEnv::default() };
    let requests = || (0..40).map(|i| single(i, i as f64 * 1.3, i as u32 % 3 + 1, 1, 12)).collect::<Vec<_>>();
    let cfg = |seed| RouterConfig {
        policy: RoutingPolicy::weighted(vec![(Scorer::Queue, 1.0), (Scorer::KvUtilization, 1.0)]),
        seed,
        env: Some(env),
        ..RouterConfig::default()
    };
    let a = picks(&run_with(1, 0, None, cfg(1), requests()));
    assert_eq!(a, picks(&run_with(1, 0, None, cfg(1), requests())), "the same seed, the same picks");
    let unjittered = RouterConfig { env: Some(RouterEnv { jitter: false, ..env }), ..cfg(1) };
    assert_ne!(a, picks(&run_with(1, 0, None, unjittered, requests())), "the phases change what a scrape sees");
}
