//! BLIS's TraceV2 pair of what was simulated (`run --trace-output PREFIX`):
//! `PREFIX.yaml` (`trace_version: 3`, `mode: generated`, or `replayed` for a
//! replayed trace) and `PREFIX.csv`, one record per llm node in BLIS's column
//! order (`../shared/reference/blis-spec.md` §10.2). A request of several llm
//! nodes is a session, one round per node in order, with the time from one
//! node's end to the next one's start (intervals and tool calls) as the
//! round's `think_time_us`; so `--session-mode closed-loop` replays it as it
//! ran, and `fixed` replays every record at its recorded send time. TraceV2
//! has no branches: a request whose DAG forks or joins is refused.

use std::io::{self, Write};

use crate::sim::{FinishedRequest, NodeError, RequestStatus, RunSummary, Sink};
use crate::workload::NodeKind;

/// The columns written, in BLIS's order (the conditional `vllm_priority`,
/// `slo_target_us`, `x_request_id` and `adapter` have nothing to say here;
/// `think_time_us` is always written, 0 meaning none).
const COLUMNS: [&str; 28] = [
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
];

/// The deployment, for the header's informational `server` block.
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

/// Writes the pair as requests finish; the header at the end.
pub struct TraceV2Writer<'a> {
    header: &'a mut dyn Write,
    data: csv::Writer<&'a mut dyn Write>,
    names: (String, String),
    replayed: bool,
    server: TraceV2Server,
    next_id: u64,
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
        TraceV2Writer {
            header: header.0,
            data: csv::WriterBuilder::new().buffer_capacity(1 << 20).from_writer(data.0),
            names: (header.1, data.1),
            replayed,
            server,
            next_id: 0,
        }
    }

    fn failed(&self, file: &str, e: impl std::fmt::Display) -> io::Error {
        io::Error::other(format!("{file}: write failed: {e}"))
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

impl Sink for TraceV2Writer<'_> {
    fn begin(&mut self) -> io::Result<()> {
        self.data.write_record(COLUMNS).map_err(|e| self.failed(&self.names.1, e))
    }

    fn request_done(&mut self, r: &FinishedRequest) -> io::Result<()> {
        let Some(order) = path(r) else {
            return Err(io::Error::other(format!(
                "{}: request {} forks or joins, which TraceV2 cannot hold; write result JSONL (-o) instead",
                self.names.1, r.request.request_id
            )));
        };
        let llm: Vec<usize> =
            order.into_iter().filter(|&i| matches!(r.request.sub_requests[i].kind, NodeKind::Llm(_))).collect();
        let session = if llm.len() > 1 { r.request.request_id.to_string() } else { String::new() };
        let mut previous_end: Option<u64> = None;
        for (round, &i) in llm.iter().enumerate() {
            let NodeKind::Llm(call) = &r.request.sub_requests[i].kind else { unreachable!("filtered") };
            let node = &r.nodes[i];
            let start = node.start_us.unwrap_or(r.send_us);
            let think = previous_end.map_or(0, |end| start.saturating_sub(end));
            previous_end = node.finish_us.or(node.token_times_us.last().copied());
            let status = match (&node.error, r.status) {
                (None, _) if node.finish_us.is_some() => "ok",
                (Some(NodeError::TimedOut), _) | (None, RequestStatus::TimedOut) => "timeout",
                (Some(NodeError::Unfinished), _) | (None, _) => "incomplete",
                (Some(_), _) => "error",
            };
            let error = node.error.as_ref().map(|e| e.to_string()).unwrap_or_default();
            let first = node.token_times_us.first().copied().unwrap_or(0);
            let last = node.token_times_us.last().copied().unwrap_or(0);
            let n = |v: u64| v.to_string();
            let record = [
                n(self.next_id),
                String::new(),
                String::new(),
                String::new(),
                session.clone(),
                n(round as u64),
                String::new(),
                "0".to_owned(),
                "true".to_owned(),
                n(u64::from(call.input_tokens)),
                n(u64::from(call.output_tokens)),
                n(u64::from(call.input_tokens)),
                "0".to_owned(),
                "0".to_owned(),
                "0".to_owned(),
                "0".to_owned(),
                String::new(),
                "0".to_owned(),
                n(u64::from(call.input_tokens)),
                n(start),
                n(start),
                n(first),
                n(last),
                "0".to_owned(),
                status.to_owned(),
                error,
                if status == "ok" { "length".to_owned() } else { String::new() },
                n(think),
            ];
            self.next_id += 1;
            self.data.write_record(&record).map_err(|e| self.failed(&self.names.1, e))?;
        }
        Ok(())
    }

    fn finish(&mut self, _: &RunSummary) -> io::Result<()> {
        self.data.flush().map_err(|e| self.failed(&self.names.1, e))?;
        let s = &self.server;
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
