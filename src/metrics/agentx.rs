//! An AgentX run's report ([`crate::agentx`]): its profile window, measured
//! call by call, as the metrics JSON (`agentx`) and a runs table carry it.

use serde::{Deserialize, Serialize};

/// What an AgentX run measured: per llm call in the profile window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentxReport {
    /// Plays in flight allowed.
    pub lanes: u32,
    /// The warm-up ended (the window opened), s.
    pub warmup_end_s: f64,
    /// The window's length, s.
    pub profile_s: f64,
    /// Plays sent in the run (the lanes' first plays included).
    pub plays_sent: u64,
    /// Plays whose every node finished.
    pub plays_completed: u64,
    /// The most plays out at once (never more than `lanes`).
    pub max_plays_in_flight: u64,
    /// Calls sent in the window that finished.
    pub calls: u64,
    /// Calls sent in the window still running when the grace ran out.
    pub unfinished_calls: u64,
    /// Calls sent in the window that failed (unservable, timed out).
    pub failed_calls: u64,
    /// Per call: time to first token, ms.
    pub ttft_mean_ms: f64,
    /// Median.
    pub ttft_p50_ms: f64,
    /// 90th percentile.
    pub ttft_p90_ms: f64,
    /// 99th percentile.
    pub ttft_p99_ms: f64,
    /// Gaps between a call's tokens, ms.
    pub itl_mean_ms: f64,
    /// Median.
    pub itl_p50_ms: f64,
    /// 90th percentile.
    pub itl_p90_ms: f64,
    /// 99th percentile.
    pub itl_p99_ms: f64,
    /// Per call: sent to last token, ms.
    pub e2e_mean_ms: f64,
    /// Median.
    pub e2e_p50_ms: f64,
    /// 90th percentile.
    pub e2e_p90_ms: f64,
    /// 99th percentile.
    pub e2e_p99_ms: f64,
    /// Of the measured calls, the main agent's (the rest are subagents').
    pub main_calls: u64,
    /// Their mean TTFT, ms: the main agent's wait, comparable with and
    /// without subagents.
    pub main_ttft_mean_ms: f64,
    /// 90th percentile.
    pub main_ttft_p90_ms: f64,
    /// Their mean E2E, ms.
    pub main_e2e_mean_ms: f64,
    /// Prompt tokens of the measured calls.
    pub input_tokens: u64,
    /// Share of those found in the prefix cache at first admission (aiperf's
    /// `first_admission_prefix_cache_reused_ratio`).
    pub prefix_reuse: f64,
    /// Output tokens emitted in the window, per second of it.
    pub output_tokens_per_sec: f64,
    /// The engines' prefix-cache hit rate over the whole run (warm-up
    /// included).
    pub kv_cache_hit_rate: f64,
}
