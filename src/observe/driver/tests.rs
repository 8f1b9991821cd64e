//! The driver's scheduling against a fake server that answers each call
//! with its tokens at fixed gaps (real time, in milliseconds: bounds are
//! one-sided where the order is exact, and loose above, for a shared CPU).

use std::sync::Mutex;

use super::*;
use crate::workload::{RequestId, SubRequest};

/// Answers a call after `first_ms`, then a token every `gap_ms`; counts
/// `usage` as asked, or with one output token too many for the prompt
/// length `wrong_for`.
struct Fake {
    first_ms: u64,
    gap_ms: u64,
    wrong_for: Option<u32>,
    calls: Mutex<Vec<CallSpec>>,
}

impl Fake {
    fn new(first_ms: u64, gap_ms: u64) -> Fake {
        Fake { first_ms, gap_ms, wrong_for: None, calls: Mutex::new(Vec::new()) }
    }
}

impl Endpoint for Fake {
    async fn call(&self, spec: &CallSpec, clock: &Clock) -> CallRecord {
        self.calls.lock().unwrap().push(spec.clone());
        let send_us = clock.now_us();
        let prompt_len = match &spec.prompt {
            Prompt::TokenIds(ids) => ids.len() as u32,
            Prompt::Chat(text) => text.split_whitespace().count() as u32 + FAKE_TEMPLATE,
            Prompt::Text(_) => panic!("the driver sends token ids or chat messages"),
        };
        tokio::time::sleep(Duration::from_millis(self.first_ms)).await;
        let mut token_times_us = vec![clock.now_us()];
        for _ in 1..spec.output_tokens {
            tokio::time::sleep(Duration::from_millis(self.gap_ms)).await;
            token_times_us.push(clock.now_us());
        }
        let extra = u32::from(self.wrong_for == Some(prompt_len));
        CallRecord {
            send_us,
            token_times_us,
            prompt_tokens: Some(prompt_len),
            completion_tokens: Some(spec.output_tokens + extra),
            error: None,
        }
    }

    async fn prompt_ids(&self, len: u32, seed: u64) -> Result<Vec<u32>, CallError> {
        Ok((0..len).map(|k| (seed as u32).wrapping_add(k)).collect())
    }

    async fn chat_text(&self, len: u32, _seed: u64) -> Result<String, CallError> {
        let Some(words) = len.checked_sub(FAKE_TEMPLATE) else {
            return Err(CallError::Protocol(format!("{len} is shorter than the template")));
        };
        Ok(vec!["w"; words as usize].join(" "))
    }
}

/// Tokens the fake's chat template adds to a message.
const FAKE_TEMPLATE: u32 = 3;

fn llm(next: Vec<u32>, interval: f64, input: u32, output: u32) -> SubRequest {
    SubRequest { next, interval, kind: NodeKind::Llm(LlmCall::new(input, output)), result: None }
}

fn tool(next: Vec<u32>, seconds: f64) -> SubRequest {
    SubRequest { next, interval: 0.0, kind: NodeKind::ToolCall { duration: seconds }, result: None }
}

fn request(id: u64, arrival: f64, nodes: Vec<SubRequest>) -> Request {
    Request {
        request_id: RequestId::Int(id),
        arrival_time: arrival,
        initial: vec![0],
        sub_requests: nodes,
        traffic: Default::default(),
    }
}

fn single(id: u64, arrival: f64, output: u32) -> Request {
    request(id, arrival, vec![llm(vec![], 0.0, 8, output)])
}

fn observe(
    fake: Fake,
    client: sim::Client,
    warmup: u64,
    requests: Vec<Request>,
) -> (Vec<FinishedRequest>, ObserveSummary, Arc<Fake>) {
    observe_api(fake, client, warmup, requests, Api::Completions)
}

fn observe_api(
    fake: Fake,
    client: sim::Client,
    warmup: u64,
    requests: Vec<Request>,
    api: Api,
) -> (Vec<FinishedRequest>, ObserveSummary, Arc<Fake>) {
    /// Keeps what leaves, checking the order.
    struct Keep(Vec<FinishedRequest>);
    impl Sink for Keep {
        fn request_done(&mut self, r: &FinishedRequest) -> io::Result<()> {
            assert_eq!(r.index, self.0.len() as u64, "input order");
            self.0.push(FinishedRequest {
                index: r.index,
                request: r.request.clone(),
                nodes: r.nodes.clone(),
                arrival_us: r.arrival_us,
                send_us: r.send_us,
                finish_us: r.finish_us,
                status: r.status,
                in_window: r.in_window,
            });
            Ok(())
        }
    }
    let fake = Arc::new(fake);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut keep = Keep(Vec::new());
    let config = DriverConfig { client, warmup, vocab_size: None, api };
    let rows = requests.into_iter().map(Ok::<_, String>);
    let summary = runtime.block_on(drive(Arc::clone(&fake), config, rows, &mut keep)).unwrap();
    (keep.0, summary, fake)
}

const MS: u64 = 1000;
/// Slack above an exact bound, µs: timers and a shared 2-core machine.
const LATE: u64 = 40 * MS;

#[test]
fn open_loop_sends_at_arrival_and_results_leave_in_input_order() {
    // Request 0 is the slowest: it finishes last but leaves first.
    let requests = vec![single(0, 0.0, 10), single(1, 0.02, 2), single(2, 0.04, 2)];
    let (done, summary, _) = observe(Fake::new(5, 10), sim::Client::OpenLoop, 0, requests);
    assert_eq!(done.len(), 3);
    assert_eq!(done[0].send_us, 0, "times count from the first send");
    for (r, arrival) in done.iter().zip([0, 20 * MS, 40 * MS]) {
        assert!(r.send_us >= arrival && r.send_us < arrival + LATE, "sent at {} for {arrival}", r.send_us);
        assert_eq!(r.status, RequestStatus::Completed);
        let node = &r.nodes[0];
        let output = if r.index == 0 { 10 } else { 2 };
        assert_eq!(node.token_times_us.len(), output);
        assert!(node.start_us.unwrap() >= r.send_us);
        assert_eq!(r.finish_us, node.token_times_us.last().copied());
    }
    assert!(done[0].finish_us > done[2].finish_us, "request 0 finished last");
    assert_eq!((summary.sent, summary.recorded, summary.completed, summary.failed), (3, 3, 3, 0));
    assert!(summary.max_in_flight >= 2);
}

#[test]
fn a_concurrency_cap_sends_the_next_request_when_one_finishes() {
    let requests = (0..4).map(|i| single(i, 0.0, 3)).collect();
    let (done, summary, _) = observe(Fake::new(5, 5), sim::Client::Capped { limit: 2 }, 0, requests);
    assert_eq!(summary.max_in_flight, 2);
    // Requests 2 and 3 wait for a slot: each is sent after one of the first two finished.
    let first_free = done[..2].iter().map(|r| r.finish_us.unwrap()).min().unwrap();
    for r in &done[2..] {
        assert!(
            r.send_us >= first_free,
            "request {} sent at {} before a slot was free at {first_free}",
            r.index,
            r.send_us
        );
    }
    assert!(done[1].send_us < LATE, "the first two go at once");
}

#[test]
fn a_closed_loop_user_thinks_between_its_requests() {
    let requests = (0..3).map(|i| single(i, 100.0, 2)).collect();
    let client = sim::Client::ClosedLoop { users: 1, think_time_us: 30 * MS };
    let (done, _, _) = observe(Fake::new(2, 2), client, 0, requests);
    // Arrival times are ignored: the first goes at once.
    assert_eq!(done[0].send_us, 0);
    for pair in done.windows(2) {
        let free = pair[0].finish_us.unwrap() + 30 * MS;
        assert!(pair[1].send_us >= free && pair[1].send_us < free + LATE, "sent at {} for {free}", pair[1].send_us);
        assert_eq!(pair[1].arrival_us, 0);
    }
}

#[test]
fn a_dag_runs_tool_waits_and_branches_concurrently_and_joins_wait_for_all() {
    // 0 (llm) → {1: tool 50 ms, 2: llm} → 3 (llm, 10 ms after the later of them).
    let nodes = vec![llm(vec![1, 2], 0.0, 8, 2), tool(vec![3], 0.05), llm(vec![3], 0.0, 8, 2), llm(vec![], 0.01, 8, 2)];
    let (done, _, fake) = observe(Fake::new(2, 2), sim::Client::OpenLoop, 0, vec![request(7, 0.0, nodes)]);
    let n = &done[0].nodes;
    let (f0, s1, f1, s2, f2, s3) = (
        n[0].finish_us.unwrap(),
        n[1].start_us.unwrap(),
        n[1].finish_us.unwrap(),
        n[2].start_us.unwrap(),
        n[2].finish_us.unwrap(),
        n[3].start_us.unwrap(),
    );
    assert!(s1 >= f0 && s2 >= f0 && s1 < f0 + LATE && s2 < f0 + LATE, "the branches start together after the root");
    assert!(f1 >= s1 + 50 * MS, "the tool call waits its duration");
    assert!(f2 < f1, "the llm branch ran beside the tool call");
    let join = f1.max(f2) + 10 * MS;
    assert!(s3 >= join && s3 < join + LATE, "the join starts {s3}, 10 ms after both ({join})");
    assert_eq!(done[0].finish_us, n[3].finish_us);
    // Three llm calls: a session to the server.
    let calls = fake.calls.lock().unwrap();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c.headers == [("x-session-id".to_owned(), "7".to_owned())]));
}

#[test]
fn a_usage_mismatch_fails_the_node_and_skips_what_follows() {
    let fake = Fake { wrong_for: Some(9), ..Fake::new(1, 1) };
    let nodes = vec![llm(vec![1], 0.0, 9, 2), llm(vec![], 0.0, 8, 2)];
    let (done, summary, _) = observe(fake, sim::Client::OpenLoop, 0, vec![request(0, 0.0, nodes), single(1, 0.0, 2)]);
    let r = &done[0];
    assert_eq!(r.status, RequestStatus::Failed);
    let message = r.nodes[0].error.as_ref().unwrap().to_string();
    assert_eq!(message, "usage: prompt_tokens 9 (the workload's 9), completion_tokens 3 (the workload's 2)");
    assert_eq!(r.nodes[1].error, Some(NodeError::Skipped(0)));
    assert_eq!(r.finish_us, None);
    assert_eq!(done[1].status, RequestStatus::Completed);
    assert_eq!((summary.usage_mismatches, summary.failed, summary.completed), (1, 1, 1));
}

#[test]
fn warm_up_requests_are_sent_and_left_out() {
    let requests = (0..4).map(|i| single(i, i as f64 * 0.01, 2)).collect();
    let (done, summary, fake) = observe(Fake::new(1, 1), sim::Client::OpenLoop, 2, requests);
    assert_eq!(fake.calls.lock().unwrap().len(), 4);
    assert_eq!((summary.sent, summary.recorded), (4, 2));
    assert_eq!(
        done.iter().map(|r| r.request.request_id.clone()).collect::<Vec<_>>(),
        [RequestId::Int(2), RequestId::Int(3)]
    );
    assert_eq!(done[0].send_us, 0, "times count from the first recorded send");
}

#[test]
fn calls_carry_their_token_ids_priority_and_no_session_header_alone() {
    let call = LlmCall::for_prompt(vec![5, 6, 7], 2).with_priority(-3);
    let given =
        request(0, 0.0, vec![SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None }]);
    let (done, _, fake) =
        observe(Fake::new(1, 1), sim::Client::OpenLoop, 0, vec![given, single(1, 0.0, 2), single(1, 0.0, 2)]);
    assert!(done.iter().all(|r| r.status == RequestStatus::Completed));
    let calls = fake.calls.lock().unwrap();
    let spec = calls.iter().find(|c| c.priority.is_some()).unwrap();
    assert_eq!((&spec.prompt, spec.priority), (&Prompt::TokenIds(vec![5, 6, 7]), Some(-3)));
    assert!(calls.iter().all(|c| c.headers.is_empty()));
    // Fetched prompts have the exact length and depend on the request and node only.
    let fetched: Vec<&Prompt> = calls.iter().filter(|c| c.priority.is_none()).map(|c| &c.prompt).collect();
    assert_eq!(fetched.len(), 2);
    assert_eq!(fetched[0], fetched[1], "same request id and node, same prompt");
    assert!(matches!(fetched[0], Prompt::TokenIds(ids) if ids.len() == 8));
}

/// A pool of sessions (`--concurrent-sessions 2`: the corpus's sessions all
/// at 0, the simulator's capped client): two sessions in flight, a third
/// admitted only once a whole session (both its turns and the think time
/// between) completed, not after its first call; each session's calls one
/// session to the server.
#[test]
fn a_session_pool_admits_a_session_as_one_completes() {
    // Two turns, the second 20 ms after the first's answer (the think time).
    let session = |id: u64| request(id, 0.0, vec![llm(vec![1], 0.0, 8, 2), llm(vec![], 0.02, 12, 2)]);
    let requests = (0..4).map(session).collect();
    let (done, summary, fake) = observe(Fake::new(2, 2), sim::Client::Capped { limit: 2 }, 0, requests);
    assert_eq!((summary.max_in_flight, summary.completed), (2, 4));
    let ends: Vec<u64> = done[..2].iter().map(|r| r.finish_us.unwrap()).collect();
    let first_free = *ends.iter().min().unwrap();
    for r in &done[2..] {
        assert!(
            r.send_us >= first_free,
            "session {} sent at {} before one completed at {first_free}",
            r.index,
            r.send_us
        );
        assert!(r.send_us >= done[0].nodes[1].start_us.unwrap().min(done[1].nodes[1].start_us.unwrap()));
    }
    assert!(done[1].send_us < LATE, "the first two go at once");
    assert!(done[2].send_us < first_free + LATE, "and the third as soon as one is done");
    for r in &done {
        assert_eq!(r.arrival_us, 0);
        let turn2 = r.nodes[1].start_us.unwrap();
        assert!(turn2 >= r.nodes[0].finish_us.unwrap() + 20 * MS, "the second turn follows the think time");
    }
    let calls = fake.calls.lock().unwrap();
    assert_eq!(calls.len(), 8);
    for id in 0..4 {
        let of = calls.iter().filter(|c| c.headers == [("x-session-id".to_owned(), id.to_string())]).count();
        assert_eq!(of, 2, "session {id}'s two turns carry its id");
    }
}

/// A request's class and tenant go on the wire as GIE's objective and
/// fairness-id headers, beside the session id of a multi-call request; a
/// request with neither carries none.
#[test]
fn class_and_tenant_go_as_gateway_headers() {
    use crate::workload::{SloClass, Traffic};
    let mut agent = request(3, 0.0, vec![llm(vec![1], 0.0, 8, 2), llm(vec![], 0.0, 8, 2)]);
    agent.traffic = Traffic { slo_class: Some(SloClass::Batch), tenant: Some("acme".into()), slo_target_us: None };
    let mut tenant_only = single(4, 0.0, 2);
    tenant_only.traffic.tenant = Some("zeta".into());
    let (_, _, fake) = observe(Fake::new(1, 1), sim::Client::OpenLoop, 0, vec![agent, tenant_only, single(5, 0.0, 2)]);
    let calls = fake.calls.lock().unwrap();
    let with = |h: &[(&str, &str)]| {
        let h: Vec<(String, String)> = h.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        calls.iter().filter(|c| c.headers == h).count()
    };
    let agent_headers = [
        (SESSION_HEADER, "3"),
        ("x-gateway-inference-objective", "batch"),
        ("x-gateway-inference-fairness-id", "acme"),
    ];
    assert_eq!(with(&agent_headers), 2, "{calls:?}");
    assert_eq!(with(&[(FAIRNESS_HEADER, "zeta")]), 1, "{calls:?}");
    assert_eq!(with(&[]), 1, "{calls:?}");
}

/// With the chat API each call is one user message of its exact templated
/// length; a call with token ids, or one shorter than the template, fails
/// alone with its reason.
#[test]
fn the_chat_api_sends_messages_of_the_exact_templated_length() {
    let with_ids = LlmCall::for_prompt(vec![5, 6, 7, 8], 2);
    let ids =
        request(1, 0.0, vec![SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(with_ids), result: None }]);
    let short = request(2, 0.0, vec![llm(vec![], 0.0, 2, 2)]);
    let (done, summary, fake) =
        observe_api(Fake::new(1, 1), sim::Client::OpenLoop, 0, vec![single(0, 0.0, 3), ids, short], Api::Chat);
    assert_eq!(done[0].status, RequestStatus::Completed, "{:?}", done[0].nodes);
    let calls = fake.calls.lock().unwrap();
    assert_eq!(calls.len(), 1, "only the first was sent");
    assert_eq!(calls[0].prompt, Prompt::Chat(["w"; 5].join(" ")), "8 tokens: 5 words and the template's 3");
    let refused = done[1].nodes[0].error.as_ref().unwrap().to_string();
    assert!(refused.contains("token ids decoded to text"), "{refused}");
    let short = done[2].nodes[0].error.as_ref().unwrap().to_string();
    assert!(short.starts_with("no prompt of 2 tokens:") && short.contains("shorter than the template"), "{short}");
    assert_eq!((summary.completed, summary.failed), (1, 2));
}
