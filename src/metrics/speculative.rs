//! Speculative decoding's counters in the metrics JSON, as vLLM's
//! Prometheus metrics name them (`vllm:spec_decode_num_drafts`,
//! `_num_draft_tokens`, `_num_accepted_tokens`,
//! `_num_accepted_tokens_per_pos`), with the two ratios its logger prints
//! (`SpecDecodingLogging`: acceptance rate and mean acceptance length).
//! Present only for a run with speculative decoding.

use serde::Serialize;

use crate::sim::SpecStats;

/// A run's speculative-decoding counters, over every engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct SpecDecodeMetrics {
    /// Verifications: a request with drafts scheduled in a step.
    pub num_drafts: u64,
    /// Draft tokens verified.
    pub num_draft_tokens: u64,
    /// Of those, accepted.
    pub num_accepted_tokens: u64,
    /// Accepted at each draft position, from the first.
    pub num_accepted_tokens_per_pos: Vec<u64>,
    /// Accepted / verified draft tokens.
    pub acceptance_rate: f64,
    /// Tokens a verification emits on average: 1 + accepted / drafts.
    pub mean_acceptance_length: f64,
}

impl SpecDecodeMetrics {
    /// The metrics of `s`; `None` when no engine speculates (an engine
    /// that does sizes its per-position counters at start).
    pub fn of(s: &SpecStats) -> Option<SpecDecodeMetrics> {
        if s.by_accepted.is_empty() {
            return None;
        }
        let ratio = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
        Some(SpecDecodeMetrics {
            num_drafts: s.drafts,
            num_draft_tokens: s.draft_tokens,
            num_accepted_tokens: s.accepted_tokens,
            num_accepted_tokens_per_pos: s.accepted_per_pos(),
            acceptance_rate: ratio(s.accepted_tokens, s.draft_tokens),
            mean_acceptance_length: 1.0 + ratio(s.accepted_tokens, s.drafts),
        })
    }
}
