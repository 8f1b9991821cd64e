//! The plan file exactly as written: plain serde structs, unknown keys
//! rejected with their line. [`super::grid`] resolves it into runs; a
//! capacity search's `search:` ([`SearchSpec`]) resolves to a [`Search`]
//! here, so the plan knows it before the search (which drives the sweep)
//! runs.
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

use crate::metrics::Slo;

/// A sweep plan.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    /// Sweep name.
    pub name: String,
    /// The traffic every run replays.
    pub workload: WorkloadSpec,
    /// Latency targets every run is judged by (over a scenario's own).
    pub slo: Option<Slo>,
    /// A capacity search over the grid's deployments instead of the grid.
    pub search: Option<SearchSpec>,
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
    /// Session traces (otel): the longest think time, seconds (0 = uncapped).
    pub max_think_time: Option<f64>,
    /// TraceV2: a pool of this many sessions at once (the runs' client).
    pub concurrent_sessions: Option<u32>,
    /// TraceV2 pool: sessions in all, the corpus cloned to fill.
    pub total_sessions: Option<u32>,
    /// TraceV2 pool: shuffle the corpus first (seeded by the run's seed).
    #[serde(default)]
    pub shuffle_corpus: bool,
    /// Weka: the main agent alone, subagents left out.
    #[serde(default)]
    pub drop_subagents: bool,
    /// Weka: an AgentX load (lanes of plays, warm-up, a profile window).
    pub agentic: Option<crate::workload::agentic::AgenticSpec>,
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

/// `search:` as a plan writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpec {
    /// What must hold.
    pub slo: Slo,
    /// `rate` (default: requests per second, open loop) or `concurrency`
    /// (users of a closed loop).
    #[serde(default)]
    pub over: Option<String>,
    /// The lowest and highest load to consider.
    pub range: [f64; 2],
    /// Relative width the answer is bracketed to (default 0.02).
    pub precision: Option<f64>,
    /// Price of one GPU-hour by GPU name (e.g. `{H100: 2.5}`): gives each
    /// deployment's cost per million output tokens at its capacity.
    #[serde(default)]
    pub gpu_hour_usd: BTreeMap<String, f64>,
    /// The load to serve: the answer names the deployments that reach it
    /// and the cheapest of them (fewest GPUs, then lowest cost).
    pub target: Option<f64>,
}

/// What a search varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// Requests per second, open loop.
    Rate,
    /// Users of a closed loop.
    Concurrency,
}

/// A resolved search.
#[derive(Debug, Clone)]
pub struct Search {
    /// The SLO probes are judged by.
    pub slo: Slo,
    /// What is varied.
    pub over: Over,
    /// Lowest and highest load.
    pub range: (f64, f64),
    /// Relative precision.
    pub precision: f64,
    /// GPU-hour prices by GPU name.
    pub gpu_hour_usd: BTreeMap<String, f64>,
    /// The load to serve.
    pub target: Option<f64>,
}

impl SearchSpec {
    /// Checks the values; the message names the key.
    pub fn resolve(&self) -> Result<Search, (String, String)> {
        self.slo.validate().map_err(|(k, r)| (format!("search.slo.{k}"), r))?;
        let over = match self.over.as_deref() {
            None | Some("rate") => Over::Rate,
            Some("concurrency") => Over::Concurrency,
            Some(other) => return Err(("search.over".to_owned(), format!("`{other}`: rate or concurrency"))),
        };
        let [lo, hi] = self.range;
        if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi > lo) {
            return Err(("search.range".to_owned(), format!("[{lo}, {hi}]: give 0 < low < high")));
        }
        if over == Over::Concurrency && (lo.fract() != 0.0 || hi.fract() != 0.0 || hi > f64::from(u32::MAX)) {
            return Err(("search.range".to_owned(), format!("[{lo}, {hi}]: users are whole numbers")));
        }
        let precision = self.precision.unwrap_or(0.02);
        if !(precision > 0.0 && precision < 1.0) {
            return Err(("search.precision".to_owned(), format!("{precision} must be in (0, 1)")));
        }
        for (gpu, price) in &self.gpu_hour_usd {
            if !(price.is_finite() && *price > 0.0) {
                return Err((format!("search.gpu_hour_usd.{gpu}"), format!("{price} must be a positive price")));
            }
        }
        if let Some(t) = self.target
            && !(t.is_finite() && t > 0.0)
        {
            return Err(("search.target".to_owned(), format!("{t} must be a positive load")));
        }
        Ok(Search {
            slo: self.slo,
            over,
            range: (lo, hi),
            precision,
            gpu_hour_usd: self.gpu_hour_usd.clone(),
            target: self.target,
        })
    }
}
