//! Result rows ([`result_row`], the format of `crate::workload::writer`,
//! which a real vLLM baseline also produces), step-trace rows ([`step_row`]),
//! and [`JsonlWriter`], the sink that writes both to their files in large
//! pieces. `run`, the benchmark and the fuzz harness write through the sink;
//! a sweep's executor, which writes each run to temporary files, calls the
//! row functions.

use std::io::{self, Write};

use crate::sim::{EngineStep, FinishedRequest, NodeRef, RunSummary, Sink};
use crate::workload::RequestId;
use crate::workload::writer::{NodeTokens, write_result_row_at};

/// Appends `r`'s result row. Its `arrival_time` is when the client sent it,
/// where the client held it back: a result row records when the request
/// reached the server, as a real client's baseline does.
pub fn result_row(out: &mut Vec<u8>, r: &FinishedRequest) {
    let arrival_time =
        if r.send_us != r.request.arrival_us() { r.send_us as f64 / 1e6 } else { r.request.arrival_time };
    // Messages are formatted only for a request with a failed node: the
    // usual row allocates nothing here.
    let errors: Vec<Option<String>> = if r.nodes.iter().any(|n| n.error.is_some()) {
        r.nodes.iter().map(|n| n.error.as_ref().map(|e| e.to_string())).collect()
    } else {
        Vec::new()
    };
    write_result_row_at(out, &r.request, arrival_time, &mut |i| {
        let node = &r.nodes[i];
        Some(NodeTokens {
            start_us: node.start_us.unwrap_or(0),
            token_times_us: &node.token_times_us,
            replica: node.replica,
            error: errors.get(i).and_then(Option::as_deref),
        })
    });
}

/// Appends the step's JSONL row:
/// `{"step":0,"start_us":0,"duration_us":1000,"scheduled":[{"request_id":0,"node":0,"tokens":256}],
/// "admitted":[{"request_id":0,"node":0,"cached_tokens":0}],"preempted":[],"kv_blocks_used":16}`
/// (`"replica":k` after `step` in a cluster of more than one).
pub fn step_row(out: &mut Vec<u8>, step: &EngineStep) {
    let _ = write!(out, "{{\"step\":{}", step.index);
    if let Some(replica) = step.replica {
        let _ = write!(out, ",\"replica\":{replica}");
    }
    let _ = write!(out, ",\"start_us\":{},\"duration_us\":{},\"scheduled\":[", step.start_us, step.duration_us);
    for (i, (node, tokens)) in step.scheduled.iter().enumerate() {
        write_node(out, i, node);
        let _ = write!(out, ",\"tokens\":{tokens}}}");
    }
    out.extend_from_slice(b"],\"admitted\":[");
    for (i, (node, cached)) in step.admitted.iter().enumerate() {
        write_node(out, i, node);
        let _ = write!(out, ",\"cached_tokens\":{cached}}}");
    }
    out.extend_from_slice(b"],\"preempted\":[");
    for (i, node) in step.preempted.iter().enumerate() {
        write_node(out, i, node);
        out.push(b'}');
    }
    let _ = writeln!(out, "],\"kv_blocks_used\":{}}}", step.kv_blocks_used);
}

/// `{"request_id":…,"node":…` (the caller closes the object).
fn write_node(out: &mut Vec<u8>, i: usize, node: &NodeRef) {
    if i > 0 {
        out.push(b',');
    }
    out.extend_from_slice(b"{\"request_id\":");
    match &node.request_id {
        RequestId::Int(n) => {
            let _ = write!(out, "{n}");
        }
        RequestId::Str(s) => {
            serde_json::to_writer(&mut *out, s).expect("a string serializes");
        }
    }
    let _ = write!(out, ",\"node\":{}", node.node);
}

/// Rows are appended to memory and written out once this many bytes are
/// buffered: appending small pieces to a `Vec` is much cheaper than pushing
/// each through `io::Write`, and 1 MiB keeps memory flat.
const FLUSH_BYTES: usize = 1 << 20;

/// One JSONL output: its file, the rows not written yet, its name.
struct Jsonl<'a> {
    out: &'a mut dyn Write,
    buf: Vec<u8>,
    name: String,
}

impl Jsonl<'_> {
    /// Writes the buffer once it holds `at_least` bytes; an error names the file.
    fn flush(&mut self, at_least: usize) -> io::Result<()> {
        if self.buf.len() >= at_least && !self.buf.is_empty() {
            self.out
                .write_all(&self.buf)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: write failed: {e}", self.name)))?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// A sink writing result rows in input order and, when given a second file,
/// the step trace.
pub struct JsonlWriter<'a> {
    results: Jsonl<'a>,
    steps: Option<Jsonl<'a>>,
}

impl std::fmt::Debug for JsonlWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlWriter").field("results", &self.results.name).finish_non_exhaustive()
    }
}

impl<'a> JsonlWriter<'a> {
    /// Result rows to `out`, named `name` in errors.
    pub fn new(out: &'a mut dyn Write, name: impl Into<String>) -> Self {
        JsonlWriter { results: Jsonl { out, buf: Vec::with_capacity(2 * FLUSH_BYTES), name: name.into() }, steps: None }
    }

    /// Also the step trace, to `out` (the run must have `step_trace` on).
    pub fn with_steps(mut self, out: &'a mut dyn Write, name: impl Into<String>) -> Self {
        self.steps = Some(Jsonl { out, buf: Vec::new(), name: name.into() });
        self
    }
}

impl Sink for JsonlWriter<'_> {
    fn request_done(&mut self, r: &FinishedRequest) -> io::Result<()> {
        result_row(&mut self.results.buf, r);
        self.results.flush(FLUSH_BYTES)
    }

    fn engine_step(&mut self, step: &EngineStep) -> io::Result<()> {
        let Some(t) = &mut self.steps else { return Ok(()) };
        step_row(&mut t.buf, step);
        t.flush(FLUSH_BYTES)
    }

    fn finish(&mut self, _: &RunSummary) -> io::Result<()> {
        self.results.flush(0)?;
        if let Some(t) = &mut self.steps {
            t.flush(0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_row_is_one_line_of_json() {
        let n = |id: &str| NodeRef { request_id: RequestId::Str(id.to_owned()), node: 1 };
        let step = EngineStep {
            index: 3,
            replica: None,
            start_us: 3000,
            duration_us: 1000,
            scheduled: vec![(n("a\"b"), 1), (NodeRef { request_id: RequestId::Int(7), node: 0 }, 64)],
            admitted: vec![(NodeRef { request_id: RequestId::Int(7), node: 0 }, 32)],
            preempted: vec![n("c")],
            kv_blocks_used: 12,
        };
        let mut out = Vec::new();
        step_row(&mut out, &step);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["scheduled"][0]["request_id"], "a\"b");
        assert_eq!(v["scheduled"][1]["tokens"], 64);
        assert_eq!(v["admitted"][0]["cached_tokens"], 32);
        assert_eq!(v["preempted"][0]["node"], 1);
        assert_eq!(v["kv_blocks_used"], 12);
    }

    /// A writer that fails every write.
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_names_the_file_and_an_empty_run_writes_nothing() {
        let summary = RunSummary {
            requests: 0,
            sim_end_us: 0,
            stats: Default::default(),
            replicas: Vec::new(),
            window: Default::default(),
            autoscale: None,
            gateway: None,
        };
        let mut full = Full;
        let mut w = JsonlWriter::new(&mut full, "out.jsonl");
        // Nothing buffered: nothing written, so no error.
        w.finish(&summary).unwrap();
        w.results.buf.extend_from_slice(b"{}\n");
        let e = w.finish(&summary).unwrap_err();
        assert_eq!(e.to_string(), "out.jsonl: write failed: disk full");
    }
}
