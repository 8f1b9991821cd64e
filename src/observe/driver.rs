//! Sending a workload to a real server as the simulator's client sends it
//! (`crate::sim::Client`): open loop (each request at its arrival time,
//! counted from the first send), under a concurrency cap (first come,
//! first sent), or closed loop (users each sending their next request a
//! think time after their previous one finished). A request's DAG runs as
//! the simulator runs it (`sim/dag.rs`): roots start `interval` after the
//! send, a node `interval` after its last predecessor finished, tool calls
//! are client-side waits of their duration, branches run concurrently, a
//! join waits for all, a failed node skips what depends on it.
//!
//! One tokio task per request in flight (and one per running node), the
//! source read [`LOOKAHEAD`] requests ahead: memory follows the requests in flight,
//! not the workload. An llm call without token ids gets a prompt of its
//! exact length from the server's tokenizer, fetched while the request
//! waits for its send. Finished requests leave through the simulator's
//! [`Sink`] as [`FinishedRequest`]s, in input order, every time relative to
//! the first recorded send; warm-up requests are sent and left out.
//!
//! Every completed call's `usage` must give the workload's prompt and output
//! token counts; one that does not is recorded as failed
//! ([`NodeError::Server`]) and counted.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};

use super::client::{CallError, CallRecord, CallSpec, Client, Clock, Prompt};
use crate::sim::{self, FinishedRequest, NodeError, NodeOutcome, RequestStatus, RunSummary, Sink};
use crate::workload::{LlmCall, NodeKind, Request};

/// What the driver needs of a server: one timed call, and prompts of an
/// exact length. [`Client`] is the real one; tests use fakes.
pub trait Endpoint: Send + Sync + 'static {
    /// Makes the call, timing it on `clock`.
    fn call(&self, spec: &CallSpec, clock: &Clock) -> impl Future<Output = CallRecord> + Send;
    /// Token ids of a prompt of exactly `len` tokens, chosen by `seed`.
    fn prompt_ids(&self, len: u32, seed: u64) -> impl Future<Output = Result<Vec<u32>, CallError>> + Send;
    /// A user message whose chat-templated prompt is exactly `len` tokens,
    /// chosen by `seed`.
    fn chat_text(&self, len: u32, seed: u64) -> impl Future<Output = Result<String, CallError>> + Send;
}

impl Endpoint for Client {
    fn call(&self, spec: &CallSpec, clock: &Clock) -> impl Future<Output = CallRecord> + Send {
        Client::call(self, spec, clock)
    }
    fn prompt_ids(&self, len: u32, seed: u64) -> impl Future<Output = Result<Vec<u32>, CallError>> + Send {
        Client::prompt_ids(self, len, seed)
    }
    fn chat_text(&self, len: u32, seed: u64) -> impl Future<Output = Result<String, CallError>> + Send {
        Client::chat_text(self, len, seed)
    }
}

/// Which OpenAI API the calls go to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Api {
    /// `/v1/completions`: the prompt as token ids (exact lengths and shared
    /// prefixes).
    #[default]
    Completions,
    /// `/v1/chat/completions`: the prompt as one user message, of the exact
    /// length once the chat template wraps it. Calls with token ids cannot
    /// go (see [`CHAT_REFUSES_IDS`]).
    Chat,
}

/// Why a call with token ids is not sent to the chat API: ids decoded to
/// text tokenize back to other ids (9 of 10 random 50-id prompts came back
/// 51–56 tokens long on the reference CPU server's tokenizer, measured with
/// its /detokenize and /tokenize), so neither the prompt's length nor its
/// shared prefix would be the workload's.
pub const CHAT_REFUSES_IDS: &str = "the chat API takes text, and token ids decoded to text tokenize back to \
     other ids and another length; send it with --api completions, or give its length without ids";

/// A prompt of exactly `len` tokens for `api`, chosen by `seed`.
async fn fetch_prompt<P: Endpoint>(endpoint: &P, api: Api, len: u32, seed: u64) -> Result<Prompt, CallError> {
    match api {
        Api::Completions => endpoint.prompt_ids(len, seed).await.map(Prompt::TokenIds),
        Api::Chat => endpoint.chat_text(len, seed).await.map(Prompt::Chat),
    }
}

/// How the driver sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverConfig {
    /// Open loop, capped or closed loop, as the simulator's client.
    pub client: sim::Client,
    /// The first this many requests are sent but not recorded.
    pub warmup: u64,
    /// The server's vocabulary size, when the workload's token ids may lie
    /// past it (ids drawn for another tokenizer): each id is sent as
    /// `id mod vocab_size`, so equal prompts stay equal and shared prefixes
    /// shared. `None`: sent as they are.
    pub vocab_size: Option<u32>,
    /// The API the calls go to.
    pub api: Api,
}

/// What an observation did, for the command's summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObserveSummary {
    /// Requests sent (warm-up included).
    pub sent: u64,
    /// Requests recorded (sent, less the warm-up).
    pub recorded: u64,
    /// Recorded requests whose every node ran.
    pub completed: u64,
    /// Recorded requests with a failed call.
    pub failed: u64,
    /// Recorded requests with a call that timed out.
    pub timed_out: u64,
    /// Recorded llm calls whose `usage` is not the workload's token counts.
    pub usage_mismatches: u64,
    /// The most requests in flight at once.
    pub max_in_flight: u64,
    /// From the first recorded send to the last recorded finish, µs.
    pub duration_us: u64,
}

/// Why an observation stopped.
#[derive(Debug, thiserror::Error)]
pub enum DriveError<E: std::fmt::Debug + std::fmt::Display> {
    /// The request source failed.
    #[error("{0}")]
    Source(E),
    /// A sink failed (a full disk).
    #[error("{0}")]
    Sink(io::Error),
}

/// When the client lets the next request go.
#[derive(Debug)]
enum Gate {
    Open,
    Capped { limit: u64 },
    Closed { not_started: u64, free_at: BinaryHeap<Reverse<u64>>, think_us: u64 },
}

impl Gate {
    fn new(client: sim::Client) -> Gate {
        match client {
            sim::Client::OpenLoop => Gate::Open,
            sim::Client::Capped { limit } => Gate::Capped { limit: u64::from(limit) },
            sim::Client::ClosedLoop { users, think_time_us } => {
                Gate::Closed { not_started: u64::from(users), free_at: BinaryHeap::new(), think_us: think_time_us }
            }
        }
    }

    /// When a request arriving at `arrival_us` may be sent with `in_flight`
    /// requests out; `None`: not before one of them finishes.
    fn due(&self, arrival_us: u64, in_flight: u64) -> Option<u64> {
        match self {
            Gate::Open => Some(arrival_us),
            Gate::Capped { limit } => (in_flight < *limit).then_some(arrival_us),
            Gate::Closed { not_started, free_at, .. } => {
                if *not_started > 0 {
                    Some(0)
                } else {
                    free_at.peek().map(|t| t.0)
                }
            }
        }
    }

    /// A request was sent.
    fn sent(&mut self) {
        if let Gate::Closed { not_started, free_at, .. } = self {
            if *not_started > 0 {
                *not_started -= 1;
            } else {
                free_at.pop();
            }
        }
    }

    /// A request finished at `end_us`: its user thinks, then is free.
    fn finished(&mut self, end_us: u64) {
        if let Gate::Closed { free_at, think_us, .. } = self {
            free_at.push(Reverse(end_us.saturating_add(*think_us)));
        }
    }
}

/// Requests read ahead of their send, so that the prompts of those without
/// token ids are fetched from the server's tokenizer while earlier ones go:
/// 16 covers a busy server's slow `/tokenize` at the rates a CPU server
/// takes (one request read ahead sent a request 100 ms late on the
/// reference CPU server at 4 requests/s), and keeps memory at a few
/// requests.
const LOOKAHEAD: usize = 16;

/// Prompts fetched ahead for a request's llm nodes without token ids (one
/// entry a node; `None` where none was needed).
type Prompts = Vec<Option<Result<Prompt, CallError>>>;

/// The next request, read and its prompts on the way.
struct Next {
    index: u64,
    request: Request,
    prompts: Option<JoinHandle<Prompts>>,
}

/// A request back from the server, its times on the driver's clock.
struct Done {
    index: u64,
    request: Request,
    nodes: Vec<NodeOutcome>,
    send_us: u64,
    end_us: u64,
    mismatches: u64,
}

/// The seed of node `node`'s prompt: the same request and node give the
/// same prompt in every run.
fn prompt_seed(request: &Request, node: usize) -> u64 {
    crate::hash::hash64(format!("{}\u{0}{node}", request.request_id).as_bytes())
}

fn read<P: Endpoint, E: std::fmt::Debug + std::fmt::Display>(
    source: &mut impl Iterator<Item = Result<Request, E>>,
    index: u64,
    endpoint: &Arc<P>,
    api: Api,
) -> Result<Option<Next>, DriveError<E>> {
    let Some(row) = source.next() else { return Ok(None) };
    let request = row.map_err(DriveError::Source)?;
    let wanted: Vec<Option<(u32, u64)>> = request
        .sub_requests
        .iter()
        .enumerate()
        .map(|(i, node)| match &node.kind {
            NodeKind::Llm(call) if call.prompt_ids().is_none() => Some((call.input_tokens, prompt_seed(&request, i))),
            _ => None,
        })
        .collect();
    let prompts = wanted.iter().any(Option::is_some).then(|| {
        let endpoint = Arc::clone(endpoint);
        tokio::spawn(async move {
            let mut out = Vec::with_capacity(wanted.len());
            for w in wanted {
                out.push(match w {
                    Some((len, seed)) => Some(fetch_prompt(&*endpoint, api, len, seed).await),
                    None => None,
                });
            }
            out
        })
    });
    Ok(Some(Next { index, request, prompts }))
}

/// tokio's timer ticks in milliseconds and rounds a sleep up to the next
/// tick: a send timed by it alone is up to 1 ms late (measured: p50 0.97 ms
/// over 1,000 sends). So the timer sleeps to within this of the time, µs,
/// and the rest is spent yielding to other tasks until the clock reaches it.
const SPIN_US: u64 = 1_500;

/// Sleeps until `at_us` on `clock`: on the timer, then yielding for the
/// last [`SPIN_US`].
async fn sleep_until(clock: &Clock, at_us: u64) {
    let now = clock.now_us();
    if at_us > now + SPIN_US {
        tokio::time::sleep(Duration::from_micros(at_us - now - SPIN_US)).await;
    }
    while clock.now_us() < at_us {
        tokio::task::yield_now().await;
    }
}

/// Sends `requests` to `endpoint` as `config` says, pushing each recorded
/// request to `sink` in input order. Runs on the caller's tokio runtime.
pub async fn drive<P: Endpoint, E: std::fmt::Debug + std::fmt::Display>(
    endpoint: Arc<P>,
    config: DriverConfig,
    requests: impl IntoIterator<Item = Result<Request, E>>,
    sink: &mut dyn Sink,
) -> Result<ObserveSummary, DriveError<E>> {
    sink.begin().map_err(DriveError::Sink)?;
    let clock = Arc::new(Clock::start());
    let mut source = requests.into_iter();
    let closed = matches!(config.client, sim::Client::ClosedLoop { .. });
    let mut gate = Gate::new(config.client);
    // The requests read ahead, their prompts on the way.
    let mut ahead: VecDeque<Next> = VecDeque::with_capacity(LOOKAHEAD);
    let mut read_count = 0;
    let mut refill = |ahead: &mut VecDeque<Next>, read_count: &mut u64| -> Result<(), DriveError<E>> {
        while ahead.len() < LOOKAHEAD {
            let Some(n) = read(&mut source, *read_count, &endpoint, config.api)? else { break };
            *read_count += 1;
            ahead.push_back(n);
        }
        Ok(())
    };
    refill(&mut ahead, &mut read_count)?;
    let mut running: JoinSet<Done> = JoinSet::new();
    let mut held: BTreeMap<u64, Done> = BTreeMap::new();
    let (mut out_next, mut origin, mut last_end) = (0u64, None::<u64>, 0u64);
    let mut summary = ObserveSummary::default();
    let mut anchor: Option<(u64, u64)> = None; // (clock µs, arrival µs) of the first send
    loop {
        let in_flight = running.len() as u64;
        // Arrivals count from the first send (which waits for its prompts):
        // request k goes its arrival's distance after request 0 went.
        let due = ahead.front().map(|n| {
            let at = match anchor {
                _ if closed => 0,
                None => 0,
                Some((sent, arrival)) => sent + n.request.arrival_us().saturating_sub(arrival),
            };
            gate.due(at, in_flight)
        });
        match due {
            Some(Some(at)) if at <= clock.now_us() => {
                let mut n = ahead.pop_front().expect("due only with a next request");
                // Its prompts first (fetched while it waited; only a request
                // due at once, the first, waits here), so that the send is
                // when its calls can go.
                let prompts = match n.prompts.take() {
                    // (A fetch task that failed leaves the nodes to fetch their own.)
                    Some(handle) => handle.await.unwrap_or_default(),
                    None => Vec::new(),
                };
                gate.sent();
                let send_us = clock.now_us();
                if n.index == config.warmup {
                    origin = Some(send_us);
                }
                anchor.get_or_insert((send_us, n.request.arrival_us()));
                running.spawn(run_request(
                    Arc::clone(&endpoint),
                    Arc::clone(&clock),
                    n,
                    prompts,
                    send_us,
                    (config.vocab_size, config.api),
                ));
                summary.sent += 1;
                summary.max_in_flight = summary.max_in_flight.max(running.len() as u64);
                refill(&mut ahead, &mut read_count)?;
                continue;
            }
            None if in_flight == 0 => break,
            _ => {}
        }
        let wake = due.flatten();
        tokio::select! {
            Some(joined) = running.join_next() => {
                let done = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
                gate.finished(done.end_us);
                held.insert(done.index, done);
                while let Some(done) = held.remove(&out_next) {
                    out_next += 1;
                    if done.index < config.warmup {
                        continue;
                    }
                    let origin = origin.expect("the first recorded request was sent before it finished");
                    summary.usage_mismatches += done.mismatches;
                    last_end = last_end.max(done.end_us.saturating_sub(origin));
                    let request = finished(done, config.warmup, origin, closed);
                    tally(&mut summary, &request);
                    sink.request_done(&request).map_err(DriveError::Sink)?;
                }
            }
            () = sleep_until(&clock, wake.unwrap_or(0)), if wake.is_some() => {}
        }
    }
    summary.duration_us = last_end;
    let end = RunSummary {
        requests: summary.recorded,
        sim_end_us: last_end,
        stats: Default::default(),
        replicas: Vec::new(),
        window: Default::default(),
        autoscale: None,
        gateway: None,
    };
    sink.finish(&end).map_err(DriveError::Sink)?;
    Ok(summary)
}

fn tally(summary: &mut ObserveSummary, r: &FinishedRequest) {
    summary.recorded += 1;
    match r.status {
        RequestStatus::Completed => summary.completed += 1,
        RequestStatus::TimedOut => summary.timed_out += 1,
        _ => summary.failed += 1,
    }
}

/// `done` as the sinks take it: its times from `origin`, its index among
/// the recorded requests.
fn finished(done: Done, warmup: u64, origin: u64, closed: bool) -> FinishedRequest {
    let at = |t: u64| t.saturating_sub(origin);
    let mut nodes = done.nodes;
    for n in &mut nodes {
        n.start_us = n.start_us.map(at);
        n.finish_us = n.finish_us.map(at);
        for t in &mut n.token_times_us {
            *t = at(*t);
        }
    }
    let server = nodes.iter().any(|n| matches!(n.error, Some(NodeError::Server(_))));
    let timed_out = nodes.iter().any(|n| matches!(n.error, Some(NodeError::TimedOut)));
    let status = match (server, timed_out, nodes.iter().all(|n| n.error.is_none())) {
        (true, ..) => RequestStatus::Failed,
        (false, true, _) => RequestStatus::TimedOut,
        (false, false, true) => RequestStatus::Completed,
        // (Skipped nodes follow a failed one, so one of the above holds.)
        (false, false, false) => RequestStatus::Failed,
    };
    let finish_us =
        (status == RequestStatus::Completed).then(|| nodes.iter().filter_map(|n| n.finish_us).max()).flatten();
    FinishedRequest {
        index: done.index - warmup,
        arrival_us: if closed { 0 } else { done.request.arrival_us() },
        request: done.request,
        nodes,
        send_us: at(done.send_us),
        finish_us,
        status,
        in_window: true,
    }
}

/// What one node does, prepared before its task starts.
enum Work {
    Tool {
        duration_us: u64,
    },
    Llm {
        call: Box<LlmCall>,
        prompt: Option<Result<Prompt, CallError>>,
        seed: u64,
        headers: Vec<(String, String)>,
        /// [`DriverConfig::vocab_size`].
        vocab: Option<u32>,
        api: Api,
    },
}

/// Runs one request's DAG from `send_us`.
async fn run_request<P: Endpoint>(
    endpoint: Arc<P>,
    clock: Arc<Clock>,
    next: Next,
    mut prompts: Prompts,
    send_us: u64,
    (vocab, api): (Option<u32>, Api),
) -> Done {
    let Next { index, request, .. } = next;
    let n = request.sub_requests.len();
    let headers = wire_headers(&request);
    let mut pending = vec![0u32; n];
    for node in &request.sub_requests {
        for &j in &node.next {
            pending[j as usize] += 1;
        }
    }
    let mut ready = vec![send_us; n];
    let mut failed_pred: Vec<Option<u32>> = vec![None; n];
    let mut nodes = vec![NodeOutcome::default(); n];
    let mut set: JoinSet<(usize, NodeOutcome, bool)> = JoinSet::new();
    let start = |i: usize, at: u64, set: &mut JoinSet<(usize, NodeOutcome, bool)>, prompts: &mut Prompts| {
        let node = &request.sub_requests[i];
        let work = match &node.kind {
            NodeKind::ToolCall { duration } => Work::Tool { duration_us: crate::workload::seconds_to_us(*duration) },
            NodeKind::Llm(call) => Work::Llm {
                call: Box::new(call.clone()),
                prompt: prompts.get_mut(i).and_then(Option::take),
                seed: prompt_seed(&request, i),
                headers: headers.clone(),
                vocab,
                api,
            },
        };
        let (endpoint, clock) = (Arc::clone(&endpoint), Arc::clone(&clock));
        let at = at.saturating_add(node.interval_us());
        set.spawn(async move {
            let (outcome, mismatch) = run_node(&*endpoint, &clock, work, at).await;
            (i, outcome, mismatch)
        });
    };
    for &root in &request.initial {
        start(root as usize, send_us, &mut set, &mut prompts);
    }
    let (mut mismatches, mut end_us) = (0, send_us);
    while let Some(joined) = set.join_next().await {
        let (i, outcome, mismatch) = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        mismatches += u64::from(mismatch);
        let failed = outcome.error.is_some();
        let now = outcome.finish_us.unwrap_or_else(|| clock.now_us());
        end_us = end_us.max(now);
        nodes[i] = outcome;
        // Release the successors; skipped nodes cascade, as the simulator's.
        let mut stack = vec![(i, failed)];
        while let Some((k, failed)) = stack.pop() {
            for &s in &request.sub_requests[k].next {
                let s = s as usize;
                pending[s] -= 1;
                if failed {
                    failed_pred[s].get_or_insert(k as u32);
                } else {
                    ready[s] = ready[s].max(now);
                }
                if pending[s] > 0 {
                    continue;
                }
                if let Some(p) = failed_pred[s] {
                    nodes[s].error = Some(NodeError::Skipped(p));
                    stack.push((s, true));
                } else {
                    start(s, ready[s], &mut set, &mut prompts);
                }
            }
        }
    }
    Done { index, request, nodes, send_us, end_us: end_us.max(clock.now_us()), mismatches }
}

/// The session header: not a standard's (llm-d's session-affinity scorer,
/// llm-d-inference-scheduler `pkg/plugins/scorer/session_affinity.go`, pins
/// a session by an `llm-d-session` cookie it sets on the first response,
/// not by a header a client names), the one session-aware routers and
/// benchmark clients commonly read.
pub const SESSION_HEADER: &str = "x-session-id";

/// The Gateway API Inference Extension's header naming a request's
/// InferenceObjective (whose priority its flow control applies): the SLO
/// class's name is sent, so a cluster with an objective per class
/// (`critical`, `standard`, …) gives each its priority.
/// kubernetes-sigs/gateway-api-inference-extension
/// `pkg/epp/metadata/consts.go`, `ObjectiveKey`.
pub const OBJECTIVE_HEADER: &str = "x-gateway-inference-objective";

/// The Gateway API Inference Extension's header grouping requests into one
/// fairness flow (the tenant): same file, `FlowFairnessIDKey`.
pub const FAIRNESS_HEADER: &str = "x-gateway-inference-fairness-id";

/// What every call of `request` carries in its headers: its session id when
/// it makes several llm calls (a session-aware router keeps them together),
/// its SLO class as GIE's objective and its tenant as GIE's fairness id,
/// where given. (Its class's priority reaches vLLM in the body: the reader
/// gives each call its class's `vllm_priority` unless the call names one.)
fn wire_headers(request: &Request) -> Vec<(String, String)> {
    let llm_nodes = request.sub_requests.iter().filter(|s| matches!(s.kind, NodeKind::Llm(_))).count();
    let mut headers = Vec::new();
    if llm_nodes > 1 {
        headers.push((SESSION_HEADER.to_owned(), request.request_id.to_string()));
    }
    if let Some(class) = request.traffic.slo_class {
        headers.push((OBJECTIVE_HEADER.to_owned(), class.name().to_owned()));
    }
    if let Some(tenant) = &request.traffic.tenant {
        headers.push((FAIRNESS_HEADER.to_owned(), tenant.clone()));
    }
    headers
}

/// Runs one node from `at_us`; the flag says its `usage` was not the
/// workload's token counts.
async fn run_node<P: Endpoint>(endpoint: &P, clock: &Clock, work: Work, at_us: u64) -> (NodeOutcome, bool) {
    sleep_until(clock, at_us).await;
    match work {
        Work::Tool { duration_us } => {
            let start = clock.now_us();
            sleep_until(clock, start.saturating_add(duration_us)).await;
            (NodeOutcome { start_us: Some(start), finish_us: Some(clock.now_us()), ..NodeOutcome::default() }, false)
        }
        Work::Llm { call, prompt, seed, headers, vocab, api } => {
            let prompt = match prompt {
                Some(fetched) => fetched,
                None => {
                    let given: Option<Vec<u32>> =
                        call.prompt_ids().map(|ids| ids.map(|id| vocab.map_or(id, |v| id % v)).collect());
                    match (given, api) {
                        (Some(_), Api::Chat) => Err(CallError::Protocol(CHAT_REFUSES_IDS.to_owned())),
                        (Some(ids), Api::Completions) => Ok(Prompt::TokenIds(ids)),
                        (None, _) => fetch_prompt(endpoint, api, call.input_tokens, seed).await,
                    }
                }
            };
            let prompt = match prompt {
                Ok(prompt) => prompt,
                Err(e) => {
                    let error = NodeError::Server(format!("no prompt of {} tokens: {e}", call.input_tokens));
                    return (
                        NodeOutcome { start_us: Some(clock.now_us()), error: Some(error), ..NodeOutcome::default() },
                        false,
                    );
                }
            };
            let spec = CallSpec {
                prompt,
                output_tokens: call.output_tokens,
                priority: (call.priority != 0).then_some(call.priority),
                headers,
            };
            let record = endpoint.call(&spec, clock).await;
            outcome(&call, record)
        }
    }
}

/// The node's outcome from its call's record, checked against the call.
fn outcome(call: &LlmCall, record: CallRecord) -> (NodeOutcome, bool) {
    let mut node =
        NodeOutcome { start_us: Some(record.send_us), token_times_us: record.token_times_us, ..NodeOutcome::default() };
    match record.error {
        Some(CallError::Timeout) => node.error = Some(NodeError::TimedOut),
        Some(e) => node.error = Some(NodeError::Server(e.to_string())),
        None => {
            let counted = (record.prompt_tokens, record.completion_tokens);
            if counted != (Some(call.input_tokens), Some(call.output_tokens)) {
                let said = |v: Option<u32>| v.map_or_else(|| "not given".to_owned(), |v| v.to_string());
                node.error = Some(NodeError::Server(format!(
                    "usage: prompt_tokens {} (the workload's {}), completion_tokens {} (the workload's {})",
                    said(counted.0),
                    call.input_tokens,
                    said(counted.1),
                    call.output_tokens
                )));
                return (node, true);
            }
            node.finish_us = Some(node.token_times_us.last().copied().unwrap_or(record.send_us));
        }
    }
    (node, false)
}

#[cfg(test)]
mod tests;
