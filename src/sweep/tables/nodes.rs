//! The `nodes` table: one row per llm call (a DAG's `llm` node) — where it
//! ran, when it started, got its first token and finished, its TTFT, ITL
//! mean and p99, scheduling delay, token counts and error. Tool calls have
//! no row; a request's E2E is in `requests`.

use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{CallKey, RunColumns};
use crate::sim::FinishedRequest;
use crate::workload::NodeKind;

/// Time columns (seconds), in order.
const TIMES: [&str; 7] =
    ["start_s", "first_token_s", "finish_s", "ttft_s", "itl_mean_s", "itl_p99_s", "scheduling_delay_s"];
/// Count columns, in order.
const COUNTS: [&str; 4] = ["input_tokens", "output_tokens", "cached_tokens", "preemptions"];

/// Builds one run's `nodes` rows.
pub(crate) struct NodeRows {
    schema: SchemaRef,
    key: CallKey,
    replica: Int64Builder,
    times: [Float64Builder; 7],
    counts: [Int64Builder; 4],
    error: StringBuilder,
    rows: usize,
    gaps: Vec<u64>,
}

impl NodeRows {
    pub(crate) fn schema() -> SchemaRef {
        let mut fields = RunColumns::fields();
        fields.extend(CallKey::fields());
        // The replica the router sent the node to (0 with one replica); null
        // for a node never routed (rejected, or behind a failed node).
        fields.push(Field::new("replica", DataType::Int64, true));
        for name in TIMES {
            fields.push(Field::new(name, DataType::Float64, true));
        }
        for name in COUNTS {
            fields.push(Field::new(name, DataType::Int64, false));
        }
        fields.push(Field::new("error", DataType::Utf8, true));
        Arc::new(Schema::new(fields))
    }

    pub(crate) fn new() -> NodeRows {
        NodeRows {
            schema: Self::schema(),
            key: CallKey::new(),
            replica: Int64Builder::new(),
            times: std::array::from_fn(|_| Float64Builder::new()),
            counts: std::array::from_fn(|_| Int64Builder::new()),
            error: StringBuilder::new(),
            rows: 0,
            gaps: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Adds one row per llm node of `r`.
    pub(crate) fn push(&mut self, r: &FinishedRequest) {
        let s = |us: u64| us as f64 / 1e6;
        for (i, (sub, node)) in r.request.sub_requests.iter().zip(&r.nodes).enumerate() {
            let NodeKind::Llm(call) = &sub.kind else { continue };
            let times = &node.token_times_us;
            self.gaps.clear();
            self.gaps.extend(times.windows(2).map(|w| w[1] - w[0]));
            let itl_mean = (!self.gaps.is_empty()).then(|| s(self.gaps.iter().sum::<u64>()) / self.gaps.len() as f64);
            let itl_p99 = (!self.gaps.is_empty()).then(|| percentile(&mut self.gaps, 99.0) / 1e6);
            let first = times.first().copied();
            let values = [
                node.start_us.map(s),
                first.map(s),
                node.finish_us.map(s),
                first.zip(node.start_us).map(|(f, st)| s(f - st)),
                itl_mean,
                itl_p99,
                node.scheduled_us.zip(node.start_us).map(|(sc, st)| s(sc - st)),
            ];
            for (b, v) in self.times.iter_mut().zip(values) {
                b.append_option(v);
            }
            let counts = [call.input_tokens, call.output_tokens, node.cached_tokens, node.preemptions];
            for (b, v) in self.counts.iter_mut().zip(counts) {
                b.append_value(i64::from(v));
            }
            self.key.append(r, i);
            self.replica.append_option(node.start_us.map(|_| i64::from(node.replica.unwrap_or(0))));
            self.error.append_option(node.error.as_ref().map(|e| e.to_string()));
            self.rows += 1;
        }
    }

    /// The rows so far as a batch, after the run's columns (`run`, as many
    /// rows); the builder starts over.
    pub(crate) fn finish(&mut self, run: Vec<ArrayRef>) -> RecordBatch {
        let mut own: Vec<ArrayRef> = self.key.finish().into();
        own.push(Arc::new(self.replica.finish()));
        own.extend(self.times.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        own.extend(self.counts.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        own.push(Arc::new(self.error.finish()));
        let rows = std::mem::take(&mut self.rows);
        super::batch(&self.schema, run, rows, own)
    }
}

/// The `p`-th percentile of `values` (non-empty), interpolating linearly
/// between the closest ranks like numpy; found by selection (linear time)
/// rather than a full sort. Reorders `values`.
fn percentile(values: &mut [u64], p: f64) -> f64 {
    let rank = p / 100.0 * (values.len() - 1) as f64;
    let hi_rank = rank.ceil() as usize;
    let (below, &mut hi, _) = values.select_nth_unstable(hi_rank);
    let lo = if rank.floor() as usize == hi_rank { hi } else { below.iter().copied().max().unwrap_or(hi) };
    lo as f64 + (hi as f64 - lo as f64) * (rank - rank.floor())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selected_percentiles_match_a_sort() {
        let mut state = 12345u64;
        for n in [1usize, 2, 3, 7, 100, 257] {
            let mut v: Vec<u64> = (0..n)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    state >> 50
                })
                .collect();
            let mut sorted = v.clone();
            sorted.sort_unstable();
            for p in [0.0, 50.0, 90.0, 99.0, 100.0] {
                let rank = p / 100.0 * (n - 1) as f64;
                let (lo, hi) = (sorted[rank.floor() as usize] as f64, sorted[rank.ceil() as usize] as f64);
                let expected = lo + (hi - lo) * (rank - rank.floor());
                assert!((percentile(&mut v, p) - expected).abs() < 1e-9, "n {n} p {p}");
            }
        }
        // numpy.percentile([1, 2, 3, 4, 10], 90) = 7.6
        assert!((percentile(&mut [10, 1, 3, 2, 4], 90.0) - 7.6).abs() < 1e-9);
    }
}
