//! Run metrics, accumulated from finished requests as they stream past, in
//! memory that does not grow with the number of requests: latencies go into
//! log-linear [`histogram`]s, everything else into counters.
//!
//! Definitions (all over completed requests):
//! - TTFT, per llm node: first token − the node entering the scheduler.
//! - ITL, per token gap: each inter-token latency of every llm node
//!   (token-weighted, as BLIS and vLLM's benchmark report it); tokens
//!   delivered at the same time (speculative decoding's accepted drafts)
//!   are one engine output, one gap, as vLLM reports them.
//! - TPOT, per llm node with ≥ 2 tokens: (last token − first token) / (n − 1).
//! - E2E, per request: its last node's finish − when the client sent it (its
//!   arrival, unless a concurrency cap or a closed loop held it back).
//! - Send wait, per request: sent − arrived (0 for an open-loop client).
//! - Scheduling delay, per llm node: first admission − entering the scheduler.
//! - Imbalance (clusters): the most llm calls any replica served / the mean
//!   over replicas (1 = even).
//! - SLO attainment and goodput: see [`Slo`]; judged on the measurement
//!   window only ([`crate::sim::Window`]: warm-up and drain left out), whose
//!   own latencies, counts and verdict are `window`.
//! - Per pool, with more than one pool: see [`pools`]; a run of one pool
//!   (every scenario without `pools:`) has no `pools` block and no
//!   `kv_transfer_*_ms`, so its JSON is what it was before pools existed.
//!   With a prefill pool, imbalance is over the replicas that serve
//!   requests (a prefill replica serves none).
//! - Autoscaling (`autoscale:` only): GPU-hours and the replica count over
//!   time, see [`autoscale`].
//! - Per SLO class and per tenant, when the requests carry them or the SLO
//!   sets per-class targets: see [`classes`].

mod autoscale;
mod classes;
mod gateway;
pub use crate::histogram;
mod agentx;
mod kv_offload;
mod pools;
mod slo;
mod speculative;

pub use autoscale::AutoscaleMetrics;
pub use classes::{ClassSlos, ClassTargets, Fairness, GroupMetrics, Groups, MAX_TENANTS, OTHER_TENANTS, Summary, jain};
pub use pools::{PoolInfo, PoolLayout, PoolMetrics, TransferMetrics};
pub use slo::{MIN_TURNOVER, Slo};
pub use speculative::SpecDecodeMetrics;

use serde::Serialize;

use crate::sim::{FinishedRequest, RequestStatus, RunSummary};
use crate::workload::NodeKind;
pub use agentx::AgentxReport;
pub use gateway::GatewayMetrics;
use histogram::Histogram;
pub use kv_offload::KvOffloadMetrics;

/// Accumulates metrics over a run.
#[derive(Debug, Default)]
pub struct MetricsCollector {
    ttft: Histogram,
    itl: Histogram,
    tpot: Histogram,
    e2e: Histogram,
    scheduling_delay: Histogram,
    send_wait: Histogram,
    injected: u64,
    completed: u64,
    unservable_requests: u64,
    unservable_nodes: u64,
    unfinished: u64,
    timed_out: u64,
    rejected: u64,
    input_tokens: u64,
    output_tokens: u64,
    /// Per replica: llm calls routed there, their prompt and output tokens.
    replicas: Vec<ReplicaCounts>,
    /// The run's SLO, and the requests that met it.
    slo: Option<Slo>,
    good: u64,
    /// The same over the requests sent in the measurement window.
    window: WindowCollector,
    /// No SLO and the default measurement: no window is reported, so its
    /// latencies are not recorded (they were a second histogram update per
    /// token: +5 % of a plain run's time).
    skip_window: bool,
    /// Per pool, in a deployment of more than one ([`MetricsCollector::pooled`]).
    pools: Option<pools::PoolCollector>,
    /// Per SLO class and tenant ([`classes`]).
    classes: classes::ClassCollector,
}

/// What the measurement window's requests measured.
#[derive(Debug, Default)]
struct WindowCollector {
    ttft: Histogram,
    itl: Histogram,
    tpot: Histogram,
    e2e: Histogram,
    requests: u64,
    completed: u64,
    good: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct ReplicaCounts {
    requests: u64,
    input_tokens: u64,
    output_tokens: u64,
}

impl MetricsCollector {
    /// A collector that also checks `slo` (see [`Slo`]).
    pub fn with_slo(slo: Option<Slo>) -> MetricsCollector {
        let mut m = MetricsCollector { slo, ..MetricsCollector::default() };
        if slo.is_some_and(|s| s.classes.is_some()) {
            m.classes.start((&m.ttft, &m.itl, &m.e2e, 0));
        }
        m
    }

    /// The same, told the run's measurement: without an SLO and with the
    /// default measurement the window is not reported, and not collected.
    pub fn measuring(self, measurement: &crate::sim::Measurement) -> MetricsCollector {
        let skip_window = self.slo.is_none() && measurement.is_default();
        MetricsCollector { skip_window, ..self }
    }

    /// The same, told the deployment's pools: with more than one, the
    /// metrics break the run down by pool (see [`pools`]).
    pub fn pooled(self, layout: PoolLayout) -> MetricsCollector {
        let pools = (layout.pools().len() > 1).then(|| pools::PoolCollector::new(layout));
        MetricsCollector { pools, ..self }
    }

    /// Takes one finished request into account.
    pub fn observe(&mut self, r: &FinishedRequest) {
        self.injected += 1;
        let good = self.slo.is_some_and(|s| s.good(r));
        if good {
            self.good += 1;
        }
        // The window's latencies are recorded in the same pass below.
        let in_window = r.in_window && !self.skip_window;
        if in_window {
            self.window.count(r, good);
        }
        // Before this request's latencies join the run's: the class blocks
        // start from the run's so far.
        if !self.classes.on() && (r.request.traffic.slo_class.is_some() || r.request.traffic.tenant.is_some()) {
            self.classes.start((&self.ttft, &self.itl, &self.e2e, self.output_tokens));
        }
        self.classes.observe(r, &classes::Seen { good, in_window });
        match r.status {
            RequestStatus::Completed => self.completed += 1,
            RequestStatus::Unservable => self.unservable_requests += 1,
            RequestStatus::Unfinished => self.unfinished += 1,
            RequestStatus::TimedOut => self.timed_out += 1,
            RequestStatus::Rejected => self.rejected += 1,
            // Counted by the gateway itself (its `gateway` block).
            RequestStatus::Shed | RequestStatus::Expired => {}
            // Only `observe` records it (a real server's failure), and
            // counts it in its own summary.
            RequestStatus::Failed => {}
        }
        let completed = r.status == RequestStatus::Completed;
        for (sub, node) in r.request.sub_requests.iter().zip(&r.nodes) {
            let NodeKind::Llm(call) = &sub.kind else { continue };
            if matches!(node.error, Some(crate::sim::NodeError::Unservable(_))) {
                self.unservable_nodes += 1;
            }
            self.output_tokens += node.token_times_us.len() as u64;
            let ran = node.start_us.is_some() && node.error.is_none();
            if ran {
                self.input_tokens += u64::from(call.input_tokens);
            }
            if let Some(p) = &mut self.pools {
                p.llm_call(call.input_tokens, node, completed);
            }
            if node.start_us.is_some() {
                let r = node.replica.unwrap_or(0) as usize;
                if self.replicas.len() <= r {
                    self.replicas.resize(r + 1, ReplicaCounts::default());
                }
                let counts = &mut self.replicas[r];
                counts.requests += 1;
                counts.output_tokens += node.token_times_us.len() as u64;
                if ran {
                    counts.input_tokens += u64::from(call.input_tokens);
                }
            }
            if !completed {
                continue;
            }
            let Some(start) = node.start_us else { continue };
            if let Some(s) = node.scheduled_us {
                self.scheduling_delay.record(s - start);
            }
            let times = &node.token_times_us;
            if let (Some(&first), Some(&last)) = (times.first(), times.last()) {
                self.ttft.record(first - start);
                self.itl.record_gaps(times);
                if times.len() >= 2 {
                    self.tpot.record((last - first) / (times.len() as u64 - 1));
                }
                if in_window {
                    self.window.ttft.record(first - start);
                    self.window.itl.record_gaps(times);
                    if times.len() >= 2 {
                        self.window.tpot.record((last - first) / (times.len() as u64 - 1));
                    }
                }
            }
        }
        if let Some(finish) = r.finish_us {
            self.e2e.record(finish - r.send_us);
            self.send_wait.record(r.send_us - r.arrival_us);
            if in_window && completed {
                self.window.e2e.record(finish - r.send_us);
            }
        }
    }

    /// The metrics of the run, given how it ended (the engines' counters
    /// and the simulated time of the last event).
    pub fn finish(&self, end: &RunSummary) -> Metrics {
        let stats = &end.stats;
        let duration_s = end.sim_end_us as f64 / 1e6;
        let hit_rate = |hits: u64, queries: u64| if queries > 0 { hits as f64 / queries as f64 } else { 0.0 };
        let per_replica: Vec<ReplicaMetrics> = end
            .replicas
            .iter()
            .enumerate()
            .map(|(r, s)| {
                let counts = self.replicas.get(r).copied().unwrap_or_default();
                ReplicaMetrics {
                    replica: r as u32,
                    requests: counts.requests,
                    input_tokens: counts.input_tokens,
                    output_tokens: counts.output_tokens,
                    kv_cache_hit_rate: hit_rate(s.prefix_hits, s.prefix_queries),
                    preemption_count: s.preemptions,
                    engine_steps: s.steps,
                }
            })
            .collect();
        // Over the replicas that serve requests: a prefill replica serves none.
        let serving: Vec<u64> = per_replica
            .iter()
            .filter(|r| self.pools.as_ref().is_none_or(|p| p.layout().serves(r.replica as usize)))
            .map(|r| r.requests)
            .collect();
        let total: u64 = serving.iter().sum();
        let most = serving.iter().copied().max().unwrap_or(0);
        let imbalance = if total > 0 { most as f64 * serving.len() as f64 / total as f64 } else { 1.0 };
        let transfers = self.pools.as_ref().filter(|p| p.layout().disaggregated()).map(|p| p.transfers.metrics());
        let per_s = |n: u64| if duration_s > 0.0 { n as f64 / duration_s } else { 0.0 };
        let ms = |h: &Histogram, p: f64| h.percentile(p) / 1e3;
        let window = (self.slo.is_some() || (end.window.explicit && !self.skip_window))
            .then(|| self.window.metrics(&end.window, self.slo));
        let slo = self.slo.map(|s| slo::outcome(s, &self.window.counts(), window.as_ref()));
        let window_s = window.as_ref().map_or(0.0, |w| w.duration_s);
        let classes = self.classes.finish(duration_s, window_s, self.slo.is_some());
        let (per_class, per_tenant, fairness) =
            classes.map(|c| (c.per_class, c.per_tenant, c.fairness)).unwrap_or_default();
        Metrics {
            injected_requests: self.injected,
            completed_requests: self.completed,
            dropped_unservable: self.unservable_requests,
            unservable_llm_calls: self.unservable_nodes,
            still_unfinished: self.unfinished,
            timed_out_requests: self.timed_out,
            rejected_requests: self.rejected,
            total_input_tokens: self.input_tokens,
            total_output_tokens: self.output_tokens,
            sim_duration_s: duration_s,
            responses_per_sec: per_s(self.completed),
            tokens_per_sec: per_s(self.output_tokens),
            ttft_mean_ms: self.ttft.mean() / 1e3,
            ttft_p50_ms: ms(&self.ttft, 50.0),
            ttft_p90_ms: ms(&self.ttft, 90.0),
            ttft_p95_ms: ms(&self.ttft, 95.0),
            ttft_p99_ms: ms(&self.ttft, 99.0),
            itl_mean_ms: self.itl.mean() / 1e3,
            itl_p50_ms: ms(&self.itl, 50.0),
            itl_p90_ms: ms(&self.itl, 90.0),
            itl_p95_ms: ms(&self.itl, 95.0),
            itl_p99_ms: ms(&self.itl, 99.0),
            tpot_mean_ms: self.tpot.mean() / 1e3,
            tpot_p50_ms: ms(&self.tpot, 50.0),
            tpot_p90_ms: ms(&self.tpot, 90.0),
            tpot_p95_ms: ms(&self.tpot, 95.0),
            tpot_p99_ms: ms(&self.tpot, 99.0),
            e2e_mean_ms: self.e2e.mean() / 1e3,
            e2e_p50_ms: ms(&self.e2e, 50.0),
            e2e_p90_ms: ms(&self.e2e, 90.0),
            e2e_p95_ms: ms(&self.e2e, 95.0),
            e2e_p99_ms: ms(&self.e2e, 99.0),
            scheduling_delay_mean_ms: self.scheduling_delay.mean() / 1e3,
            scheduling_delay_p99_ms: ms(&self.scheduling_delay, 99.0),
            send_wait_mean_ms: self.send_wait.mean() / 1e3,
            send_wait_p99_ms: ms(&self.send_wait, 99.0),
            preemption_count: stats.preemptions,
            kv_cache_hit_rate: hit_rate(stats.prefix_hits, stats.prefix_queries),
            engine_steps: stats.steps,
            replicas: per_replica.len() as u32,
            imbalance,
            per_replica,
            slo_met: slo.map(|o| o.met),
            slo_attainment: slo.map(|o| o.attainment),
            goodput_rps: slo.map(|o| o.goodput_rps),
            // Known to the caller, which knows the deployment ([`Metrics::priced_by`]).
            latency_model: None,
            latency_model_reason: None,
            window,
            // Known to the caller, which knows the trace.
            trace_columns_not_modelled: Vec::new(),
            kv_transfer_mean_ms: transfers.as_ref().map(|t| t.mean_ms),
            kv_transfer_p99_ms: transfers.as_ref().map(|t| t.p99_ms),
            pools: self.pools.as_ref().map(|p| p.finish(&end.replicas)).unwrap_or_default(),
            kv_offload: KvOffloadMetrics::from_stats(stats),
            agentx: None,
            lora_adapter_loads: None,
            spec_decode: SpecDecodeMetrics::of(&stats.spec),
            autoscale: end.autoscale.as_ref().map(|a| AutoscaleMetrics::of(a, end.sim_end_us)),
            gateway: end.gateway.as_ref().map(GatewayMetrics::of),
            per_class,
            per_tenant,
            fairness,
        }
    }
}

impl WindowCollector {
    /// Its counts, for the SLO's verdicts.
    fn counts(&self) -> slo::Counts<'_> {
        slo::Counts {
            requests: self.requests,
            completed: self.completed,
            good: self.good,
            ttft: &self.ttft,
            itl: &self.itl,
            tpot: &self.tpot,
            e2e: &self.e2e,
        }
    }

    /// Counts a request sent in the window (its latencies are recorded by
    /// [`MetricsCollector::observe`]'s one pass over its nodes).
    fn count(&mut self, r: &FinishedRequest, good: bool) {
        self.requests += 1;
        self.good += u64::from(good);
        self.completed += u64::from(r.status == RequestStatus::Completed);
    }

    fn metrics(&self, w: &crate::sim::Window, slo: Option<Slo>) -> WindowMetrics {
        let duration_s = w.duration_us() as f64 / 1e6;
        let per_s = |n: u64| if duration_s > 0.0 { n as f64 / duration_s } else { 0.0 };
        let ms = |h: &Histogram| h.percentile(99.0) / 1e3;
        let mut m = WindowMetrics {
            start_s: w.start_us.map(|s| s as f64 / 1e6),
            end_s: w.end_us as f64 / 1e6,
            duration_s,
            requests: self.requests,
            completed: self.completed,
            failed: self.requests - self.completed,
            offered_rps: per_s(self.requests),
            throughput_rps: per_s(w.completed),
            ttft_p99_ms: ms(&self.ttft),
            itl_p99_ms: ms(&self.itl),
            tpot_p99_ms: Some(ms(&self.tpot)),
            e2e_p99_ms: ms(&self.e2e),
            e2e_mean_ms: self.e2e.mean() / 1e3,
            verdict: None,
            binding: slo.and_then(|s| slo::binding(s, &self.counts())),
        };
        m.verdict = slo.map(|s| slo::verdict(s, &self.counts(), &m));
        m
    }
}

pub use slo::{Binding, Verdict, WindowMetrics};

/// The metrics JSON, with BLIS's names where BLIS has the metric. Latencies
/// in milliseconds; percentiles interpolate linearly between ranks (numpy's
/// default), over values kept at 1 µs resolution below 4.096 ms and 0.025 %
/// relative resolution above.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Metrics {
    /// Requests read and simulated.
    pub injected_requests: u64,
    /// Requests whose every node ran.
    pub completed_requests: u64,
    /// Requests with an llm call that could never be served.
    pub dropped_unservable: u64,
    /// Unservable llm calls.
    pub unservable_llm_calls: u64,
    /// Requests cut short by `--horizon`.
    pub still_unfinished: u64,
    /// Requests the client gave up on (`--timeout`).
    pub timed_out_requests: u64,
    /// Requests the router refused on arrival (`router.max_queue`).
    #[serde(default)]
    pub rejected_requests: u64,
    /// Prompt tokens of the llm calls that ran.
    pub total_input_tokens: u64,
    /// Output tokens emitted.
    pub total_output_tokens: u64,
    /// Simulated time of the last event, s.
    pub sim_duration_s: f64,
    /// Completed requests per simulated second.
    pub responses_per_sec: f64,
    /// Output tokens per simulated second.
    pub tokens_per_sec: f64,
    #[allow(missing_docs)]
    pub ttft_mean_ms: f64,
    #[allow(missing_docs)]
    pub ttft_p50_ms: f64,
    #[allow(missing_docs)]
    pub ttft_p90_ms: f64,
    #[allow(missing_docs)]
    pub ttft_p95_ms: f64,
    #[allow(missing_docs)]
    pub ttft_p99_ms: f64,
    #[allow(missing_docs)]
    pub itl_mean_ms: f64,
    #[allow(missing_docs)]
    pub itl_p50_ms: f64,
    #[allow(missing_docs)]
    pub itl_p90_ms: f64,
    #[allow(missing_docs)]
    pub itl_p95_ms: f64,
    #[allow(missing_docs)]
    pub itl_p99_ms: f64,
    #[allow(missing_docs)]
    pub tpot_mean_ms: f64,
    #[allow(missing_docs)]
    pub tpot_p50_ms: f64,
    #[allow(missing_docs)]
    pub tpot_p90_ms: f64,
    #[allow(missing_docs)]
    pub tpot_p95_ms: f64,
    #[allow(missing_docs)]
    pub tpot_p99_ms: f64,
    #[allow(missing_docs)]
    pub e2e_mean_ms: f64,
    #[allow(missing_docs)]
    pub e2e_p50_ms: f64,
    #[allow(missing_docs)]
    pub e2e_p90_ms: f64,
    #[allow(missing_docs)]
    pub e2e_p95_ms: f64,
    #[allow(missing_docs)]
    pub e2e_p99_ms: f64,
    #[allow(missing_docs)]
    pub scheduling_delay_mean_ms: f64,
    #[allow(missing_docs)]
    pub scheduling_delay_p99_ms: f64,
    /// Mean time requests waited in the client before being sent.
    pub send_wait_mean_ms: f64,
    #[allow(missing_docs)]
    pub send_wait_p99_ms: f64,
    /// Preemptions over the run.
    pub preemption_count: u64,
    /// Prefix-cache hit rate in tokens (hits / tokens looked up at admission).
    pub kv_cache_hit_rate: f64,
    /// Engine steps executed (all replicas).
    pub engine_steps: u64,
    /// Replicas behind the router.
    #[serde(default)]
    pub replicas: u32,
    /// The most llm calls a replica served / the mean over replicas.
    #[serde(default)]
    pub imbalance: f64,
    /// Each replica's share.
    #[serde(default)]
    pub per_replica: Vec<ReplicaMetrics>,
    /// With an SLO: whether the run's TTFT, ITL and E2E at its percentile
    /// are within the targets (null without one).
    #[serde(default)]
    pub slo_met: Option<bool>,
    /// With an SLO: the share of requests that met every target.
    #[serde(default)]
    pub slo_attainment: Option<f64>,
    /// With an SLO: requests that met every target, per second.
    #[serde(default)]
    pub goodput_rps: Option<f64>,
    /// The latency model that priced the run (`kernels`, `roofline`,
    /// `linear`), and why (see [`crate::scenario::Deployment::latency_reason`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_model: Option<String>,
    /// Why that latency model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_model_reason: Option<String>,
    /// The measurement window (with an SLO, or a warm-up or ramp set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowMetrics>,
    /// A replayed TraceV2 trace's columns that BLIS acts on and this engine
    /// does not model (`slo_class`, `vllm_priority`, `adapter`, …), where a
    /// record gives one a value: read and ignored, so the run is not what
    /// BLIS would have simulated there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace_columns_not_modelled: Vec<String>,
    /// With a prefill pool: the mean time of a KV transfer (see [`pools`]),
    /// ms; absent otherwise (a sweep's runs table: null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_mean_ms: Option<f64>,
    #[allow(missing_docs)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_p99_ms: Option<f64>,
    /// With more than one pool: each pool's share, in the order the
    /// scenario gives them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolMetrics>,
    /// With a CPU tier (`engine.kv_offload`): hits by tier, loads, stores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_offload: Option<KvOffloadMetrics>,
    /// An AgentX load (`workload.agentic`): its profile window, call by
    /// call (the rest of these metrics count plays as requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agentx: Option<AgentxReport>,
    /// With `engine.lora`: LoRA adapter loads by the tier they came from
    /// (set by [`Metrics::with_lora`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_adapter_loads: Option<LoraLoads>,
    /// With speculative decoding: its counters (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_decode: Option<SpecDecodeMetrics>,
    /// With `autoscale:`: GPU-hours, the replica count over time, scalings
    /// (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleMetrics>,
    /// With `router.admission` or `router.flow_control`: what the gateway
    /// admitted, rejected, queued, shed and expired (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayMetrics>,
    /// Per SLO class, most urgent first, the classes that had requests
    /// (only when requests carry a class or tenant, or the SLO sets
    /// per-class targets; see [`classes`]).
    #[serde(default, skip_serializing_if = "Groups::is_empty")]
    pub per_class: Groups,
    /// Per tenant, by name (requests without a tenant in none).
    #[serde(default, skip_serializing_if = "Groups::is_empty")]
    pub per_tenant: Groups,
    /// With tenants: how evenly they were served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness: Option<Fairness>,
}

/// LoRA adapters brought onto a GPU over a run, all replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LoraLoads {
    /// Copied from the CPU cache.
    pub from_cpu: u64,
    /// Read from disk.
    pub from_disk: u64,
}

impl Metrics {
    /// The same metrics, naming the latency model that priced the run
    /// (`kernels`, `roofline`, `linear`) and why.
    pub fn priced_by(self, kind: &str, reason: &str) -> Metrics {
        Metrics { latency_model: Some(kind.to_owned()), latency_model_reason: Some(reason.to_owned()), ..self }
    }

    /// The same metrics with the run's LoRA adapter loads from `stats`
    /// (when the deployment serves adapters).
    pub fn with_lora(self, stats: &crate::sim::EngineStats) -> Metrics {
        let loads = LoraLoads { from_cpu: stats.lora_loads_cpu, from_disk: stats.lora_loads_disk };
        Metrics { lora_adapter_loads: Some(loads), ..self }
    }

    /// The scalar metrics, in their JSON order, each with its kind: the
    /// counts, the numbers and the SLO's (null without one); the columns of
    /// a sweep's runs table.
    pub fn scalars() -> Vec<(String, Scalar)> {
        let with_slo =
            Metrics { slo_met: Some(false), slo_attainment: Some(0.0), goodput_rps: Some(0.0), ..Metrics::default() };
        let Ok(serde_json::Value::Object(m)) = serde_json::to_value(with_slo) else { return Vec::new() };
        m.into_iter()
            .filter_map(|(k, v)| {
                let kind = match v {
                    serde_json::Value::Bool(_) => Scalar::Flag,
                    serde_json::Value::Number(n) if n.is_u64() => Scalar::Count,
                    serde_json::Value::Number(_) => Scalar::Number,
                    _ => return None,
                };
                Some((k, kind))
            })
            // The P/D ones last (null in a run without a prefill pool), after
            // the columns runs tables had before them; then the engine
            // features' headline numbers, by their path in the metrics
            // (null in a run without the feature).
            .chain(["kv_transfer_mean_ms", "kv_transfer_p99_ms"].map(|k| (k.to_owned(), Scalar::Number)))
            .chain(FEATURE_SCALARS.map(|(k, kind)| (k.to_owned(), kind)))
            .collect()
    }
}

/// The engine features' numbers a runs table carries, as `object.field`
/// paths into the metrics (the column is the path with `_` for `.`).
const FEATURE_SCALARS: [(&str, Scalar); 19] = [
    ("kv_offload.hit_rate", Scalar::Number),
    ("kv_offload.cpu_hit_rate", Scalar::Number),
    ("spec_decode.acceptance_rate", Scalar::Number),
    ("spec_decode.mean_acceptance_length", Scalar::Number),
    ("lora_adapter_loads.from_cpu", Scalar::Count),
    ("lora_adapter_loads.from_disk", Scalar::Count),
    ("autoscale.gpu_hours", Scalar::Number),
    ("autoscale.mean_replicas", Scalar::Number),
    ("autoscale.peak_replicas", Scalar::Count),
    ("autoscale.scale_ups", Scalar::Count),
    ("agentx.lanes", Scalar::Count),
    ("agentx.calls", Scalar::Count),
    ("agentx.ttft_mean_ms", Scalar::Number),
    ("agentx.ttft_p90_ms", Scalar::Number),
    ("agentx.itl_mean_ms", Scalar::Number),
    ("agentx.e2e_mean_ms", Scalar::Number),
    ("agentx.main_ttft_mean_ms", Scalar::Number),
    ("agentx.output_tokens_per_sec", Scalar::Number),
    ("agentx.prefix_reuse", Scalar::Number),
];

/// What kind of value a scalar metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    /// An integer count (requests, tokens, steps).
    Count,
    /// A real number (a latency, a rate, a share).
    Number,
    /// A yes/no (`slo_met`).
    Flag,
}

/// One replica's share of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ReplicaMetrics {
    /// Its index (0-based).
    pub replica: u32,
    /// Llm calls routed to it.
    pub requests: u64,
    /// Prompt tokens of those that ran.
    pub input_tokens: u64,
    /// Output tokens it emitted.
    pub output_tokens: u64,
    /// Its prefix-cache hit rate in tokens.
    pub kv_cache_hit_rate: f64,
    /// Its preemptions.
    pub preemption_count: u64,
    /// Steps it executed.
    pub engine_steps: u64,
}

/// The metrics collector is a sink like any other: it observes each
/// request as it leaves.
impl crate::sim::Sink for MetricsCollector {
    fn request_done(&mut self, request: &crate::sim::FinishedRequest) -> std::io::Result<()> {
        self.observe(request);
        Ok(())
    }
}
