//! The `requests` table: one row per request (a whole DAG) — when it
//! arrived, was sent and finished, its E2E and the time the client held it
//! back, how it ended, and its token counts summed over its llm calls. Per
//! llm call latencies (TTFT, ITL) are in `nodes`. Every request has a row;
//! `in_window` says whether it was sent in the measurement window, the
//! requests SLOs, goodput and capacity are judged on.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder, StringDictionaryBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{RequestKey, RunColumns};
use crate::sim::FinishedRequest;
use crate::workload::NodeKind;

/// Time columns (seconds), in order.
const TIMES: [&str; 5] = ["arrival_s", "send_s", "finish_s", "e2e_s", "send_wait_s"];
/// Count columns, in order.
const COUNTS: [&str; 6] = ["llm_calls", "tool_calls", "input_tokens", "output_tokens", "cached_tokens", "preemptions"];

/// Builds one run's `requests` rows.
pub(crate) struct RequestRows {
    schema: SchemaRef,
    key: RequestKey,
    times: [Float64Builder; 5],
    status: StringDictionaryBuilder<Int32Type>,
    error: StringBuilder,
    counts: [Int64Builder; 6],
    in_window: BooleanBuilder,
    rows: usize,
}

impl RequestRows {
    pub(crate) fn schema() -> SchemaRef {
        let mut fields = RunColumns::fields();
        fields.extend(RequestKey::fields());
        for name in TIMES {
            fields.push(Field::new(name, DataType::Float64, matches!(name, "finish_s" | "e2e_s")));
        }
        let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        fields.push(Field::new("status", dict, false));
        fields.push(Field::new("error", DataType::Utf8, true));
        for name in COUNTS {
            fields.push(Field::new(name, DataType::Int64, false));
        }
        fields.push(Field::new("in_window", DataType::Boolean, false));
        Arc::new(Schema::new(fields))
    }

    pub(crate) fn new() -> RequestRows {
        RequestRows {
            schema: Self::schema(),
            key: RequestKey::new(),
            times: std::array::from_fn(|_| Float64Builder::new()),
            status: StringDictionaryBuilder::new(),
            error: StringBuilder::new(),
            counts: std::array::from_fn(|_| Int64Builder::new()),
            in_window: BooleanBuilder::new(),
            rows: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Adds `r`'s row.
    pub(crate) fn push(&mut self, r: &FinishedRequest) {
        self.key.append(r);
        let s = |us: u64| us as f64 / 1e6;
        let values = [
            Some(s(r.arrival_us)),
            Some(s(r.send_us)),
            r.finish_us.map(s),
            r.finish_us.map(|f| s(f - r.send_us)),
            Some(s(r.send_us.saturating_sub(r.arrival_us))),
        ];
        for (b, v) in self.times.iter_mut().zip(values) {
            b.append_option(v);
        }
        let mut counts = [0u64; 6];
        for (sub, node) in r.request.sub_requests.iter().zip(&r.nodes) {
            match &sub.kind {
                NodeKind::Llm(call) => {
                    counts[0] += 1;
                    counts[2] += u64::from(call.input_tokens);
                    counts[3] += u64::from(call.output_tokens);
                    counts[4] += u64::from(node.cached_tokens);
                    counts[5] += u64::from(node.preemptions);
                }
                _ => counts[1] += 1,
            }
        }
        for (b, v) in self.counts.iter_mut().zip(counts) {
            b.append_value(v as i64);
        }
        self.status.append_value(r.status.name());
        // The first node's error, in node order (a skipped node names its
        // predecessor, so the root cause comes first).
        self.error.append_option(r.nodes.iter().find_map(|n| n.error.as_ref()).map(ToString::to_string));
        self.in_window.append_value(r.in_window);
        self.rows += 1;
    }

    /// The rows so far as a batch, after the run's columns (`run`, as many
    /// rows); the builder starts over.
    pub(crate) fn finish(&mut self, run: Vec<ArrayRef>) -> RecordBatch {
        let mut own = Vec::from(self.key.finish());
        own.extend(self.times.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        own.push(Arc::new(self.status.finish()));
        own.push(Arc::new(self.error.finish()));
        own.extend(self.counts.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        own.push(Arc::new(self.in_window.finish()));
        let rows = std::mem::take(&mut self.rows);
        super::batch(&self.schema, run, rows, own)
    }
}
