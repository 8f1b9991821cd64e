//! The `nodes` table: one row per llm call (a DAG's `llm` node) — where it
//! ran, when it started, got its first token and finished, its TTFT, ITL
//! mean and p99, scheduling delay, token counts and error; then the pool
//! of the replica that served it and that pool's role, and for a call
//! prefilled on another replica (prefill/decode disaggregation) that
//! replica, its pool and the KV transfer's time and bytes. Tool calls have
//! no row; a request's E2E is in `requests`.

use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int32Builder, Int64Builder, StringBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, Int32Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{CallKey, RunColumns};
use crate::metrics::PoolLayout;
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
    /// `pool` and `role` (both keyed by the pool's index), and
    /// `prefill_pool`: a few names repeated on every row, dictionary keys
    /// appended (no string hashed a row).
    pool: Int32Builder,
    prefill_pool: Int32Builder,
    /// The dictionaries: each pool's name and its role's.
    names: ArrayRef,
    roles: ArrayRef,
    prefill_replica: Int64Builder,
    kv_transfer: Float64Builder,
    kv_transfer_bytes: Int64Builder,
    /// Each replica's pool.
    pools: Arc<PoolLayout>,
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
        // Added with pools, after the columns the table had before them.
        // The pool of `replica` (`default` without `pools:`) and its role
        // (`mixed` or `decode`); null where `replica` is.
        let text = || DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        fields.push(Field::new("pool", text(), true));
        fields.push(Field::new("role", text(), true));
        // A call prefilled on a prefill replica (null otherwise): that
        // replica, its pool, and the KV's move to `replica` — from the decode
        // replica's request for it until it landed (link wait included), s —
        // and its bytes.
        fields.push(Field::new("prefill_pool", text(), true));
        fields.push(Field::new("prefill_replica", DataType::Int64, true));
        fields.push(Field::new("kv_transfer_s", DataType::Float64, true));
        fields.push(Field::new("kv_transfer_bytes", DataType::Int64, true));
        Arc::new(Schema::new(fields))
    }

    /// Rows of a run whose replicas are in `pools`.
    pub(crate) fn new(pools: Arc<PoolLayout>) -> NodeRows {
        NodeRows {
            schema: Self::schema(),
            key: CallKey::new(),
            replica: Int64Builder::new(),
            times: std::array::from_fn(|_| Float64Builder::new()),
            counts: std::array::from_fn(|_| Int64Builder::new()),
            error: StringBuilder::new(),
            pool: Int32Builder::new(),
            prefill_pool: Int32Builder::new(),
            names: Arc::new(pools.pools().iter().map(|p| Some(p.name.as_str())).collect::<StringArray>()),
            roles: Arc::new(pools.pools().iter().map(|p| Some(p.role.name())).collect::<StringArray>()),
            prefill_replica: Int64Builder::new(),
            kv_transfer: Float64Builder::new(),
            kv_transfer_bytes: Int64Builder::new(),
            pools,
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
            let replica = node.start_us.map(|_| node.replica.unwrap_or(0));
            self.replica.append_option(replica.map(i64::from));
            self.error.append_option(node.error.as_ref().map(|e| e.to_string()));
            let key = |r: u32| self.pools.index_of(r).map(|p| p as i32);
            self.pool.append_option(replica.and_then(key));
            let prefill = node.prefill_replica.filter(|_| node.start_us.is_some());
            self.prefill_pool.append_option(prefill.and_then(key));
            self.prefill_replica.append_option(prefill.map(i64::from));
            self.kv_transfer.append_option(prefill.map(|_| s(node.kv_transfer_us)));
            self.kv_transfer_bytes.append_option(prefill.map(|_| node.kv_transfer_bytes as i64));
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
        let dictionary = |keys: Int32Array, values: &ArrayRef| -> ArrayRef {
            Arc::new(DictionaryArray::<Int32Type>::try_new(keys, values.clone()).expect("keys index the pools"))
        };
        let pool = self.pool.finish();
        own.push(dictionary(pool.clone(), &self.names));
        own.push(dictionary(pool, &self.roles));
        own.push(dictionary(self.prefill_pool.finish(), &self.names));
        own.push(Arc::new(self.prefill_replica.finish()));
        own.push(Arc::new(self.kv_transfer.finish()));
        own.push(Arc::new(self.kv_transfer_bytes.finish()));
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
