//! The `tokens` table (`--tokens`): one row per llm call with its
//! `token_latency_s` list (entry 0 from entering the scheduler to the first
//! token, then the gaps), the same numbers as a result row's `token_latency`.

use std::sync::Arc;

use arrow_array::builder::{Float64Builder, ListBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{CallKey, RunColumns};
use crate::sim::FinishedRequest;
use crate::workload::NodeKind;

/// Builds one run's `tokens` rows.
pub(crate) struct TokenRows {
    schema: SchemaRef,
    key: CallKey,
    latency: ListBuilder<Float64Builder>,
    rows: usize,
}

impl TokenRows {
    pub(crate) fn schema() -> SchemaRef {
        let mut fields = RunColumns::fields();
        fields.extend(CallKey::fields());
        fields.push(Field::new("token_latency_s", DataType::new_list(DataType::Float64, true), false));
        Arc::new(Schema::new(fields))
    }

    pub(crate) fn new() -> TokenRows {
        TokenRows {
            schema: Self::schema(),
            key: CallKey::new(),
            latency: ListBuilder::new(Float64Builder::new()),
            rows: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    pub(crate) fn push(&mut self, r: &FinishedRequest) {
        for (i, (sub, node)) in r.request.sub_requests.iter().zip(&r.nodes).enumerate() {
            if !matches!(sub.kind, NodeKind::Llm(_)) {
                continue;
            }
            let mut previous = node.start_us.unwrap_or(0);
            for &t in &node.token_times_us {
                self.latency.values().append_value((t - previous) as f64 / 1e6);
                previous = t;
            }
            self.latency.append(true);
            self.key.append(r, i);
            self.rows += 1;
        }
    }

    pub(crate) fn finish(&mut self, run: Vec<ArrayRef>) -> RecordBatch {
        let [request_id, request_index, node] = self.key.finish();
        let rows = std::mem::take(&mut self.rows);
        super::batch(
            &self.schema,
            run,
            rows,
            [request_id, request_index, node, Arc::new(self.latency.finish()) as ArrayRef],
        )
    }
}
