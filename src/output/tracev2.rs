//! BLIS's TraceV2 pair of what was simulated (`run --trace-output PREFIX`):
//! `PREFIX.yaml` (`trace_version: 3`, `mode: generated`, `replayed` for a
//! replayed trace, or `real` for what `observe` recorded on a real server,
//! [`TraceV2Writer::observed`]) and `PREFIX.csv`, one record per llm node in BLIS's column
//! order (`../shared/reference/blis-spec.md` §10.2) and two trailing columns
//! of blis-sweep's own (BLIS reads extra columns and ignores them), written
//! so that replaying the pair with the same scenario gives the same metrics:
//!
//! - A request of several llm nodes is a session, one round per node in
//!   order. Round `r`'s `think_time_us` is the time from round `r − 1`'s end
//!   to its start (intervals and tool calls), 0 included; its
//!   `arrival_time_us` is round `r − 1`'s plus that think time, so BLIS's
//!   fallback for a session whose think times are all 0 (the gaps between
//!   arrivals, `replay.go`'s `sessionHasRecordedThinkTime`) gives 0 too, not
//!   the service time. `send_time_us` is when the round really started.
//! - Round 0's `arrival_time_us` is when the client sent the request, its
//!   `send_time_us` when its first llm node started, and its
//!   `think_time_us` the difference (a root `interval`, or tool calls before
//!   the first llm call): BLIS ignores round 0's think time, blis-sweep's
//!   reader replays it as the wait it was, counted in E2E.
//! - Shared prompt prefixes are found from token ids: each prompt's longest
//!   run of whole KV blocks (the scenario's `block_size`) equal to the start
//!   of an earlier record's prompt and output. The trailing columns
//!   `prefix_parent` (that record's `request_id`) and `prefix_parent_length`
//!   (tokens) say so exactly, as a tree; where the tree is one level deep
//!   (every prompt of a group opens with the same prefix of its first
//!   record's, as a generator's shared prefixes do) BLIS's own
//!   `prefix_group`/`prefix_length` say it too, so `blis replay` shares it.
//!   Block-aligned sharing is all the prefix cache can see, so the replay's
//!   hit rate is the run's. A third column, `token_ids` (`prompt+output`,
//!   `prompt` or `none`), says which ids the run knew: the cache hashes only
//!   those, and a hashed output block left in the cache changes what is
//!   evicted (Mooncake's prompts are block ids with no output ids).
//! - A request whose DAG forks or joins is a session too (even of one llm
//!   node), its rounds the llm nodes in a topological order, earliest start
//!   first, with think times and arrivals as a chain's (so BLIS, which reads
//!   sessions as chains, replays the rounds one after another: the branches'
//!   overlap is lost to it). Its round 0 carries the whole DAG in the
//!   trailing column `dag`: the request's nodes in order, `;`-separated,
//!   each `rK` (the llm call of round K) or `tD` (a tool call of D µs), then
//!   `+I` for an interval of I µs when positive, then `>J|J…` for its
//!   successors' node indices. blis-sweep's reader rebuilds that DAG (same
//!   nodes, edges, order, intervals and tool-call durations), so a fork or
//!   a join replays as it ran. A chain that goes on after its last llm call
//!   (a trailing tool call, counted in its E2E) is written the same way;
//!   any other chain's `dag` is empty.
//! - What TraceV2 cannot hold is named: a request with no llm call and
//!   seeded progress are warnings naming the first such request and the
//!   count ([`TraceV2Writer::warnings`]).
//!
//! The data is held until the run ends (a group's first record learns its
//! prefix length from the records after it); a record is a few dozen bytes.

use std::collections::HashMap;
use std::io::{self, Write};

use crate::hash::mix;
use crate::sim::{FinishedRequest, NodeError, RequestStatus, RunSummary, Sink};
use crate::workload::{LlmCall, NodeKind, SloClass};

/// The columns written: BLIS's, in its order (`tenant_id` and `slo_class`
/// the request's, where given; the conditional `vllm_priority`,
/// `slo_target_us`, `x_request_id` and `adapter` are not written; `think_time_us` is always written), then
/// blis-sweep's `prefix_parent`, `prefix_parent_length`, `token_ids` and
/// `dag`.
const COLUMNS: [&str; 32] = [
    "request_id",
    "client_id",
    "tenant_id",
    "slo_class",
    "session_id",
    "round_index",
    "prefix_group",
    "prefix_length",
    "streaming",
    "input_tokens",
    "output_tokens",
    "text_tokens",
    "image_tokens",
    "audio_tokens",
    "video_tokens",
    "reason_ratio",
    "model",
    "deadline_us",
    "server_input_tokens",
    "arrival_time_us",
    "send_time_us",
    "first_chunk_time_us",
    "last_chunk_time_us",
    "num_chunks",
    "status",
    "error_message",
    "finish_reason",
    "think_time_us",
    "prefix_parent",
    "prefix_parent_length",
    "token_ids",
    "dag",
];

/// The deployment, for the header's informational `server` block (built
/// from a scenario's deployment by the command that runs it: the scenario
/// layer sits above the writers).
#[derive(Debug, Clone)]
pub struct TraceV2Server {
    /// Model name.
    pub model: String,
    /// Tensor parallelism.
    pub tensor_parallel: u64,
    /// vLLM's `max_num_seqs`.
    pub max_num_seqs: u32,
    /// Tokens per KV block.
    pub block_size: u32,
    /// vLLM's `gpu_memory_utilization`.
    pub gpu_memory_utilization: f64,
    /// Longest sequence served.
    pub max_model_len: u32,
}

/// An observed (real) server, for the header's `server` block of a trace
/// `observe` recorded (`mode: real`).
#[derive(Debug, Clone)]
pub struct ObservedServer {
    /// The model name the server serves.
    pub model: String,
    /// Its KV block size, tokens: the unit shared prefixes are found in.
    pub block_size: u32,
    /// More of what is known of it (its version, its configuration), as
    /// `key: value` lines of the block, in order; values are written quoted.
    pub fields: Vec<(String, String)>,
}

/// What the header's `server` block describes.
#[derive(Debug, Clone)]
enum Server {
    Simulated(TraceV2Server),
    Observed(ObservedServer),
}

impl Server {
    fn block_size(&self) -> u32 {
        match self {
            Server::Simulated(s) => s.block_size,
            Server::Observed(s) => s.block_size,
        }
    }
}

/// One record, held until the end.
#[derive(Debug)]
struct Row {
    /// The session (the request's id) when it has several rounds.
    session: Option<String>,
    round: u32,
    /// The earlier record whose sequence this prompt opens with, and how
    /// many tokens of it.
    parent: Option<(u32, u32)>,
    input: u32,
    output: u32,
    arrival: u64,
    send: u64,
    first: u64,
    last: u64,
    status: &'static str,
    error: String,
    think: u64,
    /// Which token ids the run knew (the prefix cache hashes those only).
    ids: &'static str,
    /// Round 0 of a request that forks or joins: its DAG (see the module doc).
    dag: Option<String>,
    /// The request's `tenant_id` and `slo_class`, those given.
    tenant: Option<String>,
    class: Option<SloClass>,
}

/// A warning about what the trace cannot hold: the first request it
/// concerns and how many.
#[derive(Debug, Default)]
struct Lossy {
    first: Option<String>,
    count: u64,
}

impl Lossy {
    fn note(&mut self, request: &FinishedRequest) {
        if self.first.is_none() {
            self.first = Some(request.request.request_id.to_string());
        }
        self.count += 1;
    }
}

/// Writes the pair when the run ends.
pub struct TraceV2Writer<'a> {
    header: &'a mut dyn Write,
    data: csv::Writer<&'a mut dyn Write>,
    names: (String, String),
    replayed: bool,
    server: Server,
    rows: Vec<Row>,
    /// Chained hash of a sequence's first `k` whole blocks → the first record
    /// whose prompt (and output) opens with them.
    blocks: HashMap<u64, u32>,
    no_llm: Lossy,
    seeded: Lossy,
}

impl std::fmt::Debug for TraceV2Writer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceV2Writer").field("names", &self.names).finish_non_exhaustive()
    }
}

impl<'a> TraceV2Writer<'a> {
    /// Writes to `header` and `data` (named in errors); `replayed` when the
    /// run replayed a trace.
    pub fn new(
        header: (&'a mut dyn Write, String),
        data: (&'a mut dyn Write, String),
        replayed: bool,
        server: TraceV2Server,
    ) -> Self {
        TraceV2Writer::with_server(header, data, replayed, Server::Simulated(server))
    }

    fn with_server(
        header: (&'a mut dyn Write, String),
        data: (&'a mut dyn Write, String),
        replayed: bool,
        server: Server,
    ) -> Self {
        TraceV2Writer {
            header: header.0,
            data: csv::WriterBuilder::new().buffer_capacity(1 << 20).from_writer(data.0),
            names: (header.1, data.1),
            replayed,
            server,
            rows: Vec::new(),
            blocks: HashMap::new(),
            no_llm: Lossy::default(),
            seeded: Lossy::default(),
        }
    }

    /// Writes what `observe` recorded on a real server (`mode: real`).
    pub fn observed(
        header: (&'a mut dyn Write, String),
        data: (&'a mut dyn Write, String),
        server: ObservedServer,
    ) -> Self {
        TraceV2Writer::with_server(header, data, false, Server::Observed(server))
    }

    /// One line for each kind of thing the trace could not hold (a replay of
    /// it differs there), naming the first request and the count; empty when
    /// the trace replays as the run ran.
    pub fn warnings(&self) -> Vec<String> {
        let file = &self.names.1;
        let mut out = Vec::new();
        let mut say = |lossy: &Lossy, what: &str| {
            if let Some(first) = &lossy.first {
                out.push(format!("{file}: request {first} (and {} more) {what}", lossy.count - 1));
            }
        };
        say(&self.no_llm, "has no llm call, so no TraceV2 record: its replay leaves it out");
        say(
            &self.seeded,
            "starts part-way (seeded progress), which TraceV2 cannot hold: its replay computes the whole prompt",
        );
        out
    }

    fn failed(&self, file: &str, e: impl std::fmt::Display) -> io::Error {
        io::Error::other(format!("{file}: write failed: {e}"))
    }

    /// Record `id`'s shared prefix: the longest run of whole blocks of
    /// `call`'s prompt an earlier record's sequence opens with; then the
    /// blocks of its own prompt and output, for the records after it.
    fn share(&mut self, id: u32, call: &LlmCall) -> Option<(u32, u32)> {
        let size = self.server.block_size().max(1);
        let prompt = call.prompt_ids()?;
        let output = call.output_token_ids.iter().flatten().copied();
        let mut parent = None;
        let mut matching = true;
        let mut hash: u64 = 0x243F_6A88_85A3_08D3;
        let (mut in_block, mut blocks, mut position) = (0u32, 0u32, 0u32);
        for token in prompt.map(|t| (t, true)).chain(output.map(|t| (t, false))) {
            hash = mix(hash ^ u64::from(token.0));
            in_block += 1;
            position += 1;
            if in_block < size {
                continue;
            }
            in_block = 0;
            blocks += 1;
            let key = mix(hash ^ u64::from(blocks));
            match self.blocks.get(&key) {
                Some(&owner) if matching && token.1 => parent = Some((owner, position)),
                Some(_) => {}
                None => {
                    matching = false;
                    self.blocks.insert(key, id);
                }
            }
            if !token.1 {
                matching = false;
            }
        }
        parent
    }
}

/// The request's nodes in order, when its DAG is one path.
fn path(r: &FinishedRequest) -> Option<Vec<usize>> {
    let nodes = &r.request.sub_requests;
    let &[first] = r.request.initial.as_slice() else { return None };
    let mut order = vec![first as usize];
    while let Some(&last) = order.last() {
        match nodes[last].next.as_slice() {
            [] => break,
            &[next] => order.push(next as usize),
            _ => return None,
        }
    }
    (order.len() == nodes.len()).then_some(order)
}

/// The request's nodes in a topological order, the earliest start first
/// among those ready (node order among equal starts; nodes that never
/// started last).
fn topological(r: &FinishedRequest) -> Vec<usize> {
    use std::cmp::Reverse;
    let nodes = &r.request.sub_requests;
    let mut indegree = vec![0u32; nodes.len()];
    for node in nodes {
        for &j in &node.next {
            indegree[j as usize] += 1;
        }
    }
    let key = |i: usize| Reverse((r.nodes[i].start_us.unwrap_or(u64::MAX), i));
    let mut ready: std::collections::BinaryHeap<_> = (0..nodes.len()).filter(|&i| indegree[i] == 0).map(key).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(Reverse((_, i))) = ready.pop() {
        order.push(i);
        for &j in &nodes[i].next {
            indegree[j as usize] -= 1;
            if indegree[j as usize] == 0 {
                ready.push(key(j as usize));
            }
        }
    }
    order
}

/// The `dag` column of a request whose llm nodes `llm` are its rounds, in
/// order (see the module doc).
fn encode_dag(r: &FinishedRequest, llm: &[usize]) -> String {
    let nodes = &r.request.sub_requests;
    let mut round = vec![0usize; nodes.len()];
    for (k, &i) in llm.iter().enumerate() {
        round[i] = k;
    }
    let mut out = String::new();
    for (i, node) in nodes.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        match node.kind {
            NodeKind::Llm(_) => out.push_str(&format!("r{}", round[i])),
            NodeKind::ToolCall { duration } => out.push_str(&format!("t{}", crate::workload::seconds_to_us(duration))),
        }
        let interval = node.interval_us();
        if interval > 0 {
            out.push_str(&format!("+{interval}"));
        }
        if !node.next.is_empty() {
            out.push('>');
            out.push_str(&node.next.iter().map(u32::to_string).collect::<Vec<_>>().join("|"));
        }
    }
    out
}

impl Sink for TraceV2Writer<'_> {
    fn request_done(&mut self, r: &FinishedRequest) -> io::Result<()> {
        let chain = path(r);
        let order = chain.clone().unwrap_or_else(|| topological(r));
        let llm: Vec<usize> =
            order.iter().copied().filter(|&i| matches!(r.request.sub_requests[i].kind, NodeKind::Llm(_))).collect();
        let Some(&last_llm) = llm.last() else {
            self.no_llm.note(r);
            return Ok(());
        };
        // A chain that goes on after its last llm call (a tool call) has that
        // wait in its E2E, which no round can hold: it is written with its
        // `dag` too, as a forked request is.
        let trailing = chain.as_ref().is_some_and(|c| c.last() != Some(&last_llm));
        if llm.iter().any(|&i| matches!(&r.request.sub_requests[i].kind, NodeKind::Llm(c) if c.seeded.is_some())) {
            self.seeded.note(r);
        }
        let with_dag = chain.is_none() || trailing;
        let session = (llm.len() > 1 || with_dag).then(|| r.request.request_id.to_string());
        let mut dag = with_dag.then(|| encode_dag(r, &llm));
        let mut previous: Option<(u64, u64)> = None; // (end, arrival) of the round before
        for (round, &i) in llm.iter().enumerate() {
            let NodeKind::Llm(call) = &r.request.sub_requests[i].kind else { unreachable!("filtered") };
            let node = &r.nodes[i];
            let start = node.start_us.unwrap_or(r.send_us);
            let (think, arrival) = match previous {
                None => (start.saturating_sub(r.send_us), r.send_us),
                Some((end, arrival)) => {
                    let think = start.saturating_sub(end);
                    (think, arrival.saturating_add(think))
                }
            };
            previous = Some((node.finish_us.or(node.token_times_us.last().copied()).unwrap_or(start), arrival));
            let status = match (&node.error, r.status) {
                (None, _) if node.finish_us.is_some() => "ok",
                (Some(NodeError::TimedOut), _) | (None, RequestStatus::TimedOut) => "timeout",
                (Some(NodeError::Unfinished), _) | (None, _) => "incomplete",
                (Some(_), _) => "error",
            };
            let id = self.rows.len() as u32;
            let parent = self.share(id, call);
            self.rows.push(Row {
                session: session.clone(),
                round: round as u32,
                parent,
                input: call.input_tokens,
                output: call.output_tokens,
                arrival,
                send: start,
                first: node.token_times_us.first().copied().unwrap_or(0),
                last: node.token_times_us.last().copied().unwrap_or(0),
                status,
                error: node.error.as_ref().map(|e| e.to_string()).unwrap_or_default(),
                think,
                ids: match (call.prompt_ids().is_some(), call.output_token_ids.is_some()) {
                    (false, _) => "none",
                    (true, false) => "prompt",
                    (true, true) => "prompt+output",
                },
                dag: dag.take(),
                tenant: r.request.traffic.tenant.clone(),
                class: r.request.traffic.slo_class,
            });
        }
        Ok(())
    }

    fn finish(&mut self, _: &RunSummary) -> io::Result<()> {
        // BLIS's groups: a record no other opens with (a root) and the
        // records that open with its first `L` tokens, `L` its first such
        // record's length, when that is within the root's prompt.
        let mut group_len: HashMap<u32, u32> = HashMap::new();
        for row in &self.rows {
            if let Some((p, len)) = row.parent
                && self.rows[p as usize].parent.is_none()
                && len <= self.rows[p as usize].input
            {
                group_len.entry(p).or_insert(len);
            }
        }
        self.data.write_record(COLUMNS).map_err(|e| self.failed(&self.names.1, e))?;
        let n = |v: u64| v.to_string();
        for (id, row) in self.rows.iter().enumerate() {
            let group = match row.parent {
                None => group_len.get(&(id as u32)).map(|&len| (id as u32, len)),
                Some((p, len)) => group_len.get(&p).filter(|&&g| g == len).map(|&len| (p, len)),
            };
            let (group_name, prefix) = group.map_or((String::new(), 0), |(g, len)| (format!("g{g}"), len));
            let (parent, parent_len) =
                row.parent.map_or((String::new(), String::new()), |(p, len)| (n(p.into()), n(len.into())));
            let record = [
                n(id as u64),
                String::new(),
                row.tenant.clone().unwrap_or_default(),
                row.class.map_or(String::new(), |c| c.name().to_owned()),
                row.session.clone().unwrap_or_default(),
                n(row.round.into()),
                group_name,
                n(prefix.into()),
                "true".to_owned(),
                n((row.input - prefix).into()),
                n(row.output.into()),
                n(row.input.into()),
                "0".to_owned(),
                "0".to_owned(),
                "0".to_owned(),
                "0".to_owned(),
                String::new(),
                "0".to_owned(),
                n(row.input.into()),
                n(row.arrival),
                n(row.send),
                n(row.first),
                n(row.last),
                "0".to_owned(),
                row.status.to_owned(),
                row.error.clone(),
                if row.status == "ok" { "length".to_owned() } else { String::new() },
                n(row.think),
                parent,
                parent_len,
                row.ids.to_owned(),
                row.dag.clone().unwrap_or_default(),
            ];
            self.data.write_record(&record).map_err(|e| self.failed(&self.names.1, e))?;
        }
        self.data.flush().map_err(|e| self.failed(&self.names.1, e))?;
        let s = match &self.server {
            Server::Simulated(s) => s,
            Server::Observed(o) => {
                let quote = |v: &str| serde_json::to_string(v).expect("a string serializes");
                let mut header = format!(
                    "trace_version: 3\ntime_unit: microseconds\nmode: real\nwarm_up_requests: 0\nserver:\n  type: vllm\n  \
                     model: {}\n  block_size: {}\n",
                    quote(&o.model),
                    o.block_size
                );
                for (key, value) in &o.fields {
                    header.push_str(&format!("  {key}: {}\n", quote(value)));
                }
                return self.header.write_all(header.as_bytes()).map_err(|e| self.failed(&self.names.0, e));
            }
        };
        let header = format!(
            "trace_version: 3\ntime_unit: microseconds\nmode: {mode}\nwarm_up_requests: 0\nserver:\n  type: blis-sweep\n  \
             model: {model}\n  tensor_parallel: {tp}\n  max_num_seqs: {seqs}\n  block_size: {bs}\n  \
             gpu_memory_utilization: {util}\n  max_model_len: {len}\n",
            mode = if self.replayed { "replayed" } else { "generated" },
            model = serde_json::to_string(&s.model).expect("a string serializes"),
            tp = s.tensor_parallel,
            seqs = s.max_num_seqs,
            bs = s.block_size,
            util = s.gpu_memory_utilization,
            len = s.max_model_len,
        );
        self.header.write_all(header.as_bytes()).map_err(|e| self.failed(&self.names.0, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(prompt: Vec<u32>, output: Option<Vec<u32>>) -> LlmCall {
        let output_tokens = output.as_ref().map_or(1, |o| o.len() as u32);
        LlmCall::for_prompt(prompt, output_tokens).with_output_ids(output)
    }

    #[test]
    fn a_forked_dag_is_written_whole_its_rounds_in_start_order() {
        use crate::sim::{NodeOutcome, RequestStatus};
        use crate::workload::{Request, RequestId, SubRequest};
        let node = |next: Vec<u32>, interval: f64, kind: NodeKind| SubRequest { next, interval, kind, result: None };
        let llm = || NodeKind::Llm(call((0..20).collect(), None));
        // Numbered out of topological order: node 0 (llm) waits for a tool
        // call (node 2) after the root llm node 1 and for the root node 3,
        // which started later than node 1.
        let request = Request {
            traffic: Default::default(),
            request_id: RequestId::Int(7),
            arrival_time: 0.0,
            initial: vec![1, 3],
            sub_requests: vec![
                node(vec![], 0.25, llm()),
                node(vec![2], 0.0, llm()),
                node(vec![0], 0.001, NodeKind::ToolCall { duration: 0.5 }),
                node(vec![0], 0.0, llm()),
            ],
        };
        let at = |start: u64| NodeOutcome { start_us: Some(start), ..NodeOutcome::default() };
        let r = FinishedRequest {
            index: 0,
            request,
            nodes: vec![at(900), at(10), at(50), at(20)],
            arrival_us: 0,
            send_us: 10,
            finish_us: Some(1000),
            status: RequestStatus::Completed,
            in_window: true,
        };
        assert_eq!(path(&r), None);
        let order = topological(&r);
        assert_eq!(order, [1, 3, 2, 0]);
        let llm: Vec<usize> =
            order.into_iter().filter(|&i| matches!(r.request.sub_requests[i].kind, NodeKind::Llm(_))).collect();
        assert_eq!(llm, [1, 3, 0]);
        assert_eq!(encode_dag(&r, &llm), "r2+250000;r0>2;t500000+1000>0;r1>0");
    }

    #[test]
    fn a_prompt_shares_the_longest_run_of_whole_blocks_of_an_earlier_sequence() {
        let (mut h, mut d) = (Vec::new(), Vec::new());
        let server = TraceV2Server {
            model: "m".into(),
            tensor_parallel: 1,
            max_num_seqs: 1,
            block_size: 16,
            gpu_memory_utilization: 0.9,
            max_model_len: 1000,
        };
        let mut w = TraceV2Writer::new((&mut h, "h".into()), (&mut d, "d".into()), false, server);
        let a: Vec<u32> = (0..40).collect();
        let out: Vec<u32> = (1000..1020).collect();
        assert_eq!(w.share(0, &call(a.clone(), Some(out.clone()))), None);
        // Two whole blocks, then its own tokens.
        let b: Vec<u32> = a[..35].iter().copied().chain(500..510).collect();
        assert_eq!(w.share(1, &call(b, None)), Some((0, 32)));
        // A's prompt and output, then more: 3 whole blocks into the output.
        let c: Vec<u32> = a.iter().chain(out.iter()).copied().chain(600..650).collect();
        assert_eq!(w.share(2, &call(c.clone(), None)), Some((0, 48)));
        // C's own blocks extend the tree: D opens with C's first 96 tokens.
        let d2: Vec<u32> = c[..100].iter().copied().chain(700..705).collect();
        assert_eq!(w.share(3, &call(d2, None)), Some((2, 96)));
        // Less than a block in common: nothing the cache could share.
        let e: Vec<u32> = a[..10].iter().copied().chain(800..840).collect();
        assert_eq!(w.share(4, &call(e, None)), None);
        // No token ids: nothing known.
        let mut f = call(a, None);
        f.input_token_ids = None;
        assert_eq!(w.share(5, &f), None);
    }
}
