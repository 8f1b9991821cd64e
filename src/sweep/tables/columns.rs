//! The columns every table of a sweep starts with: the run (`run_id`,
//! `plan`, `scenario`), the deployment it simulated as resolved — model,
//! GPU, parallelism, KV blocks, latency model, router and vLLM engine
//! settings, defaults filled in — and its grid values (`concurrency`,
//! `seed`, `rate_scale`, and `overrides`: what the grid overrode, as a JSON
//! object). The set, names and types are the same whatever the plan, so one
//! DuckDB glob reads the outputs of several plans; names need no quoting
//! (`engine_max_num_seqs`, not `engine.max_num_seqs`).

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder, StringDictionaryBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int32Array, Int64Array, StringArray, new_null_array,
};
use arrow_schema::{DataType, Field};
use serde::{Deserialize, Serialize};

use crate::metrics::PoolLayout;
use crate::scenario::{Deployment, ScenarioSpec};
use crate::sim::FinishedRequest;
use crate::sweep::grid::Cell;

/// One column's value for a run, typed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    /// Text (stored dictionary-encoded: it repeats on every row of a run).
    Text(Option<&'a str>),
    /// BIGINT.
    Int(Option<i64>),
    /// BOOLEAN.
    Bool(Option<bool>),
    /// DOUBLE.
    Float(Option<f64>),
}

impl Value<'_> {
    fn data_type(self) -> DataType {
        match self {
            Value::Text(_) => DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            Value::Int(_) => DataType::Int64,
            Value::Bool(_) => DataType::Boolean,
            Value::Float(_) => DataType::Float64,
        }
    }

    /// This value, `rows` times.
    fn repeat(self, rows: usize) -> ArrayRef {
        match self {
            Value::Text(v) => {
                let keys = match v {
                    Some(_) => Int32Array::from_value(0, rows),
                    None => Int32Array::new_null(rows),
                };
                let values = StringArray::from(v.into_iter().collect::<Vec<_>>());
                Arc::new(DictionaryArray::<Int32Type>::try_new(keys, Arc::new(values)).expect("key 0 of one value"))
            }
            Value::Int(Some(v)) => Arc::new(Int64Array::from_value(v, rows)),
            Value::Float(Some(v)) => Arc::new(Float64Array::from_value(v, rows)),
            Value::Bool(Some(v)) => Arc::new(BooleanArray::from(vec![v; rows])),
            Value::Int(None) | Value::Float(None) | Value::Bool(None) => new_null_array(&self.data_type(), rows),
        }
    }
}

fn int(v: Option<impl Into<i64>>) -> Value<'static> {
    Value::Int(v.map(Into::into))
}

/// The deployment a run simulated, as its tables' columns. Kept in the run's
/// `status.json`, so the runs table is rebuilt without resolving scenarios
/// again. A run whose scenario did not resolve has only what its spec says.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct DeploymentRow {
    model: Option<String>,
    hardware: Option<String>,
    dtype: Option<String>,
    tp: Option<u64>,
    dp: Option<u32>,
    replicas: Option<u32>,
    gpus: Option<u64>,
    /// KV-cache blocks of one engine (vLLM's `num_gpu_blocks`).
    kv_blocks: Option<u32>,
    latency_model: Option<String>,
    /// Why that latency model (`explicit`, or why the default chose it).
    latency_model_reason: Option<String>,
    router_policy: Option<String>,
    vllm_version: Option<String>,
    engine_max_num_seqs: Option<u32>,
    engine_max_num_batched_tokens: Option<u32>,
    engine_max_model_len: Option<u32>,
    engine_block_size: Option<u32>,
    engine_enable_prefix_caching: Option<bool>,
    engine_long_prefill_token_threshold: Option<u32>,
    engine_async_scheduling: Option<bool>,
    engine_gpu_memory_utilization: Option<f64>,
    engine_kv_cache_dtype: Option<String>,
    /// Each replica's pool, for the `nodes` table's `pool` and `role` (not
    /// a column of its own, and not kept in the run's status: only a run
    /// being simulated needs it).
    #[serde(skip)]
    pools: Option<Arc<PoolLayout>>,
}

impl DeploymentRow {
    /// A resolved deployment's columns.
    pub(crate) fn of(d: &Deployment) -> DeploymentRow {
        let p = d.serving();
        let e = &p.engine;
        DeploymentRow {
            model: Some(d.model.name.clone()),
            hardware: Some(p.gpu.name.to_owned()),
            dtype: Some(p.dtype.to_string()),
            tp: Some(p.tp),
            dp: Some(p.dp.max(1)),
            replicas: Some(p.replicas.max(1)),
            gpus: Some(d.gpus()),
            kv_blocks: Some(e.num_gpu_blocks),
            latency_model: Some(p.latency.kind().to_owned()),
            latency_model_reason: Some(p.latency_reason.clone()),
            router_policy: Some(p.effective_router().policy.name().to_owned()),
            vllm_version: Some(p.vllm_version.to_string()),
            engine_max_num_seqs: Some(e.max_num_seqs),
            engine_max_num_batched_tokens: Some(e.max_num_batched_tokens),
            engine_max_model_len: Some(e.max_model_len),
            engine_block_size: Some(e.block_size),
            engine_enable_prefix_caching: Some(e.enable_prefix_caching),
            engine_long_prefill_token_threshold: Some(e.long_prefill_token_threshold),
            engine_async_scheduling: Some(e.async_scheduling),
            engine_gpu_memory_utilization: Some(p.gpu_memory_utilization),
            engine_kv_cache_dtype: Some(p.kv_cache_dtype.to_string()),
            pools: Some(Arc::new(d.pool_layout())),
        }
    }

    /// What a spec that did not resolve says of itself.
    pub(crate) fn from_spec(spec: &ScenarioSpec) -> DeploymentRow {
        let (tp, dp, replicas) = (spec.tp.unwrap_or(1), spec.dp.unwrap_or(1), spec.replicas.unwrap_or(1));
        DeploymentRow {
            model: spec.model.clone().or_else(|| spec.model_config.clone()),
            hardware: Some(spec.hardware.clone()),
            dtype: spec.dtype.map(|d| d.to_string()),
            tp: Some(tp),
            dp: Some(dp),
            replicas: Some(replicas),
            gpus: Some(tp * u64::from(dp) * u64::from(replicas)),
            ..DeploymentRow::default()
        }
    }

    fn entries(&self) -> [(&'static str, Value<'_>); 21] {
        fn text(v: &Option<String>) -> Value<'_> {
            Value::Text(v.as_deref())
        }
        [
            ("model", text(&self.model)),
            ("hardware", text(&self.hardware)),
            ("dtype", text(&self.dtype)),
            ("tp", Value::Int(self.tp.map(|v| v as i64))),
            ("dp", int(self.dp)),
            ("replicas", int(self.replicas)),
            ("gpus", Value::Int(self.gpus.map(|v| v as i64))),
            ("kv_blocks", int(self.kv_blocks)),
            ("latency_model", text(&self.latency_model)),
            ("latency_model_reason", text(&self.latency_model_reason)),
            ("router_policy", text(&self.router_policy)),
            ("vllm_version", text(&self.vllm_version)),
            ("engine_max_num_seqs", int(self.engine_max_num_seqs)),
            ("engine_max_num_batched_tokens", int(self.engine_max_num_batched_tokens)),
            ("engine_max_model_len", int(self.engine_max_model_len)),
            ("engine_block_size", int(self.engine_block_size)),
            ("engine_enable_prefix_caching", Value::Bool(self.engine_enable_prefix_caching)),
            ("engine_long_prefill_token_threshold", int(self.engine_long_prefill_token_threshold)),
            ("engine_async_scheduling", Value::Bool(self.engine_async_scheduling)),
            ("engine_gpu_memory_utilization", Value::Float(self.engine_gpu_memory_utilization)),
            ("engine_kv_cache_dtype", text(&self.engine_kv_cache_dtype)),
        ]
    }

    /// Its columns' fields (all nullable: a run that failed may lack them).
    pub(crate) fn fields() -> Vec<Field> {
        DeploymentRow::default().entries().iter().map(|(n, v)| Field::new(*n, v.data_type(), true)).collect()
    }
}

/// A grid override's key as a column-style name: `engine.max_num_seqs` →
/// `engine_max_num_seqs`.
fn column_name(key: &str) -> String {
    key.replace(['.', '-'], "_")
}

/// A run's overrides as the `overrides` column holds them: a JSON object,
/// keys as column-style names, sorted (`{}` without any).
pub(crate) fn overrides_json(overrides: &[(String, serde_json::Value)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> =
        overrides.iter().map(|(k, v)| (column_name(k), v.clone())).collect();
    serde_json::Value::Object(map).to_string()
}

/// The `overrides` column's field.
pub(crate) fn overrides_field() -> Field {
    Field::new("overrides", Value::Text(None).data_type(), false)
}

/// The columns every table of one run starts with.
#[derive(Debug, Clone)]
pub(crate) struct RunColumns {
    run_id: String,
    plan: String,
    scenario: String,
    deployment: DeploymentRow,
    concurrency: Option<u32>,
    seed: u64,
    rate_scale: f64,
    /// The cell's overrides ([`overrides_json`]).
    overrides: String,
}

impl RunColumns {
    pub(crate) fn new(plan: &str, cell: &Cell, deployment: DeploymentRow) -> RunColumns {
        RunColumns {
            run_id: cell.run_id.clone(),
            plan: plan.to_owned(),
            scenario: cell.scenario.clone(),
            deployment,
            concurrency: cell.concurrency,
            seed: cell.seed,
            rate_scale: cell.rate_scale,
            overrides: overrides_json(&cell.overrides),
        }
    }

    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Each replica's pool (none known for a deployment that did not resolve).
    pub(crate) fn pools(&self) -> Arc<PoolLayout> {
        self.deployment.pools.clone().unwrap_or_default()
    }

    fn head(&self) -> [(&'static str, Value<'_>); 3] {
        [
            ("run_id", Value::Text(Some(&self.run_id))),
            ("plan", Value::Text(Some(&self.plan))),
            ("scenario", Value::Text(Some(&self.scenario))),
        ]
    }

    fn tail(&self) -> [(&'static str, Value<'_>); 4] {
        [
            ("concurrency", int(self.concurrency)),
            // Seeds above 2^63 keep their bits (DuckDB has no unsigned BIGINT).
            ("seed", Value::Int(Some(self.seed as i64))),
            ("rate_scale", Value::Float(Some(self.rate_scale))),
            ("overrides", Value::Text(Some(&self.overrides))),
        ]
    }

    fn dummy() -> RunColumns {
        RunColumns {
            run_id: String::new(),
            plan: String::new(),
            scenario: String::new(),
            deployment: DeploymentRow::default(),
            concurrency: None,
            seed: 0,
            rate_scale: 1.0,
            overrides: String::new(),
        }
    }

    /// Every column's name and value, in order.
    fn entries(&self) -> Vec<(&'static str, Value<'_>)> {
        let mut e: Vec<_> = self.head().into();
        e.extend(self.deployment.entries());
        e.extend(self.tail());
        e
    }

    /// The fields, the same for every run of every plan.
    pub(crate) fn fields() -> Vec<Field> {
        let dummy = RunColumns::dummy();
        let deployment = DeploymentRow::fields();
        let head = dummy.head().len();
        dummy
            .entries()
            .iter()
            .enumerate()
            .map(|(i, (n, v))| match i.checked_sub(head) {
                Some(k) if k < deployment.len() => deployment[k].clone(),
                _ => Field::new(*n, v.data_type(), *n == "concurrency"),
            })
            .collect()
    }

    /// The columns, `rows` times.
    pub(crate) fn columns(&self, rows: usize) -> Vec<ArrayRef> {
        self.entries().iter().map(|(_, v)| v.repeat(rows)).collect()
    }
}

/// One column's values, appended a row at a time.
enum ColumnBuilder {
    Text(StringDictionaryBuilder<Int32Type>),
    Int(Int64Builder),
    Bool(BooleanBuilder),
    Float(Float64Builder),
}

impl ColumnBuilder {
    fn for_value(v: Value<'_>) -> ColumnBuilder {
        match v {
            Value::Text(_) => ColumnBuilder::Text(StringDictionaryBuilder::new()),
            Value::Int(_) => ColumnBuilder::Int(Int64Builder::new()),
            Value::Bool(_) => ColumnBuilder::Bool(BooleanBuilder::new()),
            Value::Float(_) => ColumnBuilder::Float(Float64Builder::new()),
        }
    }

    fn append(&mut self, v: Value<'_>) {
        match (self, v) {
            (ColumnBuilder::Text(b), Value::Text(v)) => b.append_option(v),
            (ColumnBuilder::Int(b), Value::Int(v)) => b.append_option(v),
            (ColumnBuilder::Bool(b), Value::Bool(v)) => b.append_option(v),
            (ColumnBuilder::Float(b), Value::Float(v)) => b.append_option(v),
            _ => unreachable!("a column keeps its type"),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            ColumnBuilder::Text(b) => Arc::new(b.finish()),
            ColumnBuilder::Int(b) => Arc::new(b.finish()),
            ColumnBuilder::Bool(b) => Arc::new(b.finish()),
            ColumnBuilder::Float(b) => Arc::new(b.finish()),
        }
    }
}

/// The run columns (or a deployment's alone) of many rows, one row per run,
/// built column by column (the runs and capacity tables).
pub(crate) struct RowsBuilder {
    columns: Vec<ColumnBuilder>,
}

impl RowsBuilder {
    /// For [`RunColumns`] rows.
    pub(crate) fn runs() -> RowsBuilder {
        let dummy = RunColumns::dummy();
        RowsBuilder { columns: dummy.entries().into_iter().map(|(_, v)| ColumnBuilder::for_value(v)).collect() }
    }

    /// For [`DeploymentRow`] rows.
    pub(crate) fn deployments() -> RowsBuilder {
        let d = DeploymentRow::default();
        RowsBuilder { columns: d.entries().into_iter().map(|(_, v)| ColumnBuilder::for_value(v)).collect() }
    }

    pub(crate) fn push_run(&mut self, run: &RunColumns) {
        for (b, (_, v)) in self.columns.iter_mut().zip(run.entries()) {
            b.append(v);
        }
    }

    pub(crate) fn push_deployment(&mut self, d: &DeploymentRow) {
        for (b, (_, v)) in self.columns.iter_mut().zip(d.entries()) {
            b.append(v);
        }
    }

    /// The columns so far; the builder starts over.
    pub(crate) fn finish(&mut self) -> Vec<ArrayRef> {
        self.columns.iter_mut().map(ColumnBuilder::finish).collect()
    }
}

/// The request key every per-request table starts its own columns with:
/// `request_id`, the id as the workload wrote it, as text in every plan
/// (an integer id `7` is `"7"`), so one DuckDB glob reads the tables of
/// plans with integer and with text ids alike; and `request_index`, the
/// request's 0-based position in the input (BIGINT), for ordering and for
/// joins that want a number.
pub(crate) struct RequestKey {
    id: StringBuilder,
    index: Int64Builder,
}

impl RequestKey {
    pub(crate) fn fields() -> [Field; 2] {
        [Field::new("request_id", DataType::Utf8, false), Field::new("request_index", DataType::Int64, false)]
    }

    pub(crate) fn new() -> RequestKey {
        RequestKey { id: StringBuilder::new(), index: Int64Builder::new() }
    }

    /// Appends request `r`'s key.
    pub(crate) fn append(&mut self, r: &FinishedRequest) {
        self.id.append_value(r.request.request_id.to_string());
        // Input positions count requests held in memory or streamed, far
        // below 2^63; saturating keeps the column total if one were not.
        self.index.append_value(i64::try_from(r.index).unwrap_or(i64::MAX));
    }

    pub(crate) fn finish(&mut self) -> [ArrayRef; 2] {
        [Arc::new(self.id.finish()), Arc::new(self.index.finish())]
    }
}

/// The key of a row about one llm call: `request_id`, `request_index`
/// ([`RequestKey`]), `node`.
pub(crate) struct CallKey {
    request: RequestKey,
    node: Int64Builder,
}

impl CallKey {
    pub(crate) fn fields() -> [Field; 3] {
        let [id, index] = RequestKey::fields();
        [id, index, Field::new("node", DataType::Int64, false)]
    }

    pub(crate) fn new() -> CallKey {
        CallKey { request: RequestKey::new(), node: Int64Builder::new() }
    }

    /// Appends node `node` of request `r`.
    pub(crate) fn append(&mut self, r: &FinishedRequest, node: usize) {
        self.request.append(r);
        self.node.append_value(node as i64);
    }

    pub(crate) fn finish(&mut self) -> [ArrayRef; 3] {
        let [id, index] = self.request.finish();
        [id, index, Arc::new(self.node.finish())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_match_their_fields_with_and_without_values() {
        let spec: ScenarioSpec =
            serde_json::from_str(r#"{"model": "Llama-3.1-8B", "hardware": "H100", "tp": 2}"#).unwrap();
        let resolved = crate::scenario::resolve(spec.clone(), std::path::Path::new("."), "s").unwrap();
        let mut rows = RowsBuilder::deployments();
        for row in [DeploymentRow::default(), DeploymentRow::from_spec(&spec), DeploymentRow::of(&resolved)] {
            rows.push_deployment(&row);
        }
        let fields = DeploymentRow::fields();
        let columns = rows.finish();
        assert_eq!(fields.len(), columns.len());
        for (f, c) in fields.iter().zip(&columns) {
            assert_eq!((f.data_type(), c.len()), (c.data_type(), 3), "{}", f.name());
        }
        // A run's constant columns have the runs table's types too.
        let run = RunColumns::dummy();
        for (f, c) in RunColumns::fields().iter().zip(run.columns(2)) {
            assert_eq!(f.data_type(), c.data_type(), "{}", f.name());
        }
        let of = DeploymentRow::of(&resolved);
        assert_eq!((of.tp, of.gpus, of.router_policy.as_deref()), (Some(2), Some(2), Some("round-robin")));
        assert!(of.kv_blocks.is_some_and(|b| b > 0));
        assert_eq!(DeploymentRow::from_spec(&spec).kv_blocks, None);
    }

    #[test]
    fn overrides_are_one_json_object_with_column_style_keys() {
        let o = vec![("engine.max_num_seqs".to_owned(), 64.into()), ("router.policy".to_owned(), "random".into())];
        assert_eq!(overrides_json(&o), r#"{"engine_max_num_seqs":64,"router_policy":"random"}"#);
        assert_eq!(overrides_json(&[]), "{}");
    }

    #[test]
    fn request_ids_are_text_whatever_the_workload_with_the_input_position_beside() {
        use crate::workload::RequestId;
        use arrow_array::Array;
        let request = |id: RequestId, index: u64| crate::sim::FinishedRequest {
            index,
            request: crate::workload::Request {
                traffic: Default::default(),
                request_id: id,
                arrival_time: 0.0,
                initial: Vec::new(),
                sub_requests: Vec::new(),
            },
            nodes: Vec::new(),
            arrival_us: 0,
            send_us: 0,
            finish_us: None,
            status: crate::sim::RequestStatus::Completed,
            in_window: true,
        };
        let mut key = CallKey::new();
        key.append(&request(RequestId::Int(u64::MAX), 0), 0);
        key.append(&request(RequestId::Str("req-1".to_owned()), 1), 2);
        let [id, index, node] = key.finish();
        let fields = CallKey::fields();
        for (f, c) in fields.iter().zip([&id, &index, &node]) {
            assert_eq!(f.data_type(), c.data_type(), "{}", f.name());
        }
        let id = id.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!((id.value(0), id.value(1)), ("18446744073709551615", "req-1"));
        let index = index.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!((index.value(0), index.value(1), index.len()), (0, 1, 2));
    }
}
