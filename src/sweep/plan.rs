//! The plan file exactly as written: plain serde structs, unknown keys
//! rejected with their line. [`super::grid`] resolves it into runs.
//!
//! ```yaml
//! name: quickstart
//! workload:
//!   path: workloads/chat.jsonl          # or generate: {...}; or import: FORMAT with path: TRACE
//! scenarios: [scenarios/a.yaml, {model: Llama-3.1-8B, hardware: H100}]
//! grid:
//!   concurrency: [null, 8, 32]          # null = open loop
//!   seed: [1, 2]
//!   rate_scale: [0.5, 1.0]
//!   overrides: {engine.max_num_seqs: [64, 256]}
//! output: results/quickstart
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// A sweep plan.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    /// Sweep name.
    pub name: String,
    /// The traffic every run replays.
    pub workload: WorkloadSpec,
    /// Latency targets every run is judged by (over a scenario's own).
    pub slo: Option<crate::metrics::Slo>,
    /// A capacity search over the grid's deployments instead of the grid.
    pub search: Option<super::capacity::SearchSpec>,
    /// Scenario files (relative to the plan) or inline scenario mappings.
    pub scenarios: Vec<Value>,
    /// The grid; every axis defaults to a single value.
    #[serde(default)]
    pub grid: GridSpec,
    /// Output directory, relative to the plan.
    pub output: String,
}

/// Where requests come from, and how the client sends them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// A workload JSONL file, relative to the plan.
    pub path: Option<String>,
    /// A generated workload, regenerated for every seed.
    pub generate: Option<Value>,
    /// `path` is a trace in this format (`mooncake`, `azure`,
    /// `agent-calls`), read by its importer.
    pub import: Option<String>,
    /// Importers: sessions started per second (agent-calls).
    pub session_rate: Option<f64>,
    /// Importers: `fixed`, `closed-loop` or `fixed-accumulate` (default:
    /// the format's).
    pub session_mode: Option<String>,
    /// TraceV2: a pool of this many sessions at once (the runs' client).
    pub concurrent_sessions: Option<u32>,
    /// TraceV2 pool: sessions in all, the corpus cloned to fill.
    pub total_sessions: Option<u32>,
    /// TraceV2 pool: shuffle the corpus first (seeded by the run's seed).
    #[serde(default)]
    pub shuffle_corpus: bool,
    /// Ignore arrival times: `concurrency` virtual users.
    #[serde(default)]
    pub closed_loop: bool,
    /// Closed loop: seconds between a user's response and its next request.
    pub think_time: Option<f64>,
    /// Seconds after which the client gives up on a request (as `run --timeout`).
    pub timeout: Option<f64>,
    /// What SLOs, goodput and capacity leave out at the start (default: a
    /// closed loop's first request of every user; nothing open loop).
    pub warmup: Option<WarmupSpec>,
    /// Closed loop: users start spread over this many seconds.
    pub ramp_s: Option<f64>,
}

/// `warmup:`: one of the two.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmupSpec {
    /// The first this many requests sent (the window opens when they have
    /// all left).
    pub requests: Option<u64>,
    /// The first this many seconds.
    pub seconds: Option<f64>,
}

/// The axes of the grid; the runs are their Cartesian product.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridSpec {
    /// Requests in flight at most; `null` = open loop.
    #[serde(default = "one_null")]
    pub concurrency: Vec<Option<u32>>,
    /// Seeds (they shape generated workloads).
    #[serde(default = "one_seed")]
    pub seed: Vec<u64>,
    /// Arrival times are divided by this.
    #[serde(default = "one_scale")]
    pub rate_scale: Vec<f64>,
    /// Scenario key path (e.g. `engine.max_num_seqs`) → values.
    #[serde(default)]
    pub overrides: BTreeMap<String, Vec<Value>>,
}

impl Default for GridSpec {
    fn default() -> Self {
        GridSpec { concurrency: one_null(), seed: one_seed(), rate_scale: one_scale(), overrides: BTreeMap::new() }
    }
}

fn one_null() -> Vec<Option<u32>> {
    vec![None]
}

fn one_seed() -> Vec<u64> {
    vec![0]
}

fn one_scale() -> Vec<f64> {
    vec![1.0]
}
