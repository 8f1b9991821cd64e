//! The step trace: one record per engine step, for checking the scheduler
//! against vLLM's and for seeing why a run behaved as it did. Built only when
//! asked for ([`super::Simulation::set_step_trace`]); written as JSONL by
//! [`EngineStep::write_jsonl`], the one writer of the format.

use std::io::Write;

use crate::workload::RequestId;

/// An llm node of a request, as the step trace names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    /// The request's id, as in the workload.
    pub request_id: RequestId,
    /// The sub-request index.
    pub node: u32,
}

/// One engine step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStep {
    /// 0-based count of steps its replica executed before this one.
    pub index: u64,
    /// The replica that ran it, in a cluster of more than one.
    pub replica: Option<u32>,
    /// When it started executing, µs.
    pub start_us: u64,
    /// Its price from the latency model, µs.
    pub duration_us: u64,
    /// Tokens computed per request, in scheduling order (running requests,
    /// then admissions).
    pub scheduled: Vec<(NodeRef, u32)>,
    /// Requests admitted from the waiting queue (new or resumed after a
    /// preemption), with the tokens they start with: prefix-cache hit, or
    /// seeded KV.
    pub admitted: Vec<(NodeRef, u32)>,
    /// Requests preempted while scheduling this step, in order (first those
    /// preempted by an earlier scheduling that scheduled nothing).
    pub preempted: Vec<NodeRef>,
    /// KV blocks referenced by requests once the step was scheduled (vLLM's
    /// null block not counted).
    pub kv_blocks_used: u32,
}

impl EngineStep {
    /// Appends the step's JSONL row:
    /// `{"step":0,"start_us":0,"duration_us":1000,"scheduled":[{"request_id":0,"node":0,"tokens":256}],
    /// "admitted":[{"request_id":0,"node":0,"cached_tokens":0}],"preempted":[],"kv_blocks_used":16}`.
    pub fn write_jsonl(&self, out: &mut Vec<u8>) {
        let _ = write!(out, "{{\"step\":{}", self.index);
        if let Some(replica) = self.replica {
            let _ = write!(out, ",\"replica\":{replica}");
        }
        let _ = write!(out, ",\"start_us\":{},\"duration_us\":{},\"scheduled\":[", self.start_us, self.duration_us);
        for (i, (node, tokens)) in self.scheduled.iter().enumerate() {
            write_node(out, i, node);
            let _ = write!(out, ",\"tokens\":{tokens}}}");
        }
        out.extend_from_slice(b"],\"admitted\":[");
        for (i, (node, cached)) in self.admitted.iter().enumerate() {
            write_node(out, i, node);
            let _ = write!(out, ",\"cached_tokens\":{cached}}}");
        }
        out.extend_from_slice(b"],\"preempted\":[");
        for (i, node) in self.preempted.iter().enumerate() {
            write_node(out, i, node);
            out.push(b'}');
        }
        let _ = writeln!(out, "],\"kv_blocks_used\":{}}}", self.kv_blocks_used);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_one_line_of_json() {
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
        step.write_jsonl(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["scheduled"][0]["request_id"], "a\"b");
        assert_eq!(v["scheduled"][1]["tokens"], 64);
        assert_eq!(v["admitted"][0]["cached_tokens"], 32);
        assert_eq!(v["preempted"][0]["node"], 1);
        assert_eq!(v["kv_blocks_used"], 12);
    }
}
