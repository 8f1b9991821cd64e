//! `weighted`: the highest weighted sum of scorers, each scoring a replica
//! in [0, 1], as llm-d's scheduler combines its scorers.

use super::{Policy, PolicyKind, Replicas};
use crate::sim::router::View;

pub(crate) const KIND: PolicyKind = PolicyKind {
    name: "weighted",
    takes_scorers: true,
    start: |scorers| Box::new(Weighted { scorers: scorers.to_vec(), scores: Vec::new() }),
};

/// One scorer of the `weighted` policy (llm-d's scorer of the same role).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scorer {
    /// `queue-scorer`: (max − waiting) / (max − min) over replicas; 1 when all equal.
    Queue,
    /// `kv-cache-utilization-scorer`: 1 − used / total KV blocks.
    KvUtilization,
    /// `prefix-cache-scorer`: prompt blocks found in the replica's cache / prompt blocks.
    PrefixCache,
    /// Running requests, min-max normalised like `queue`.
    RunningRequests,
}

impl Scorer {
    /// The scorer's name in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Scorer::Queue => "queue",
            Scorer::KvUtilization => "kv-utilization",
            Scorer::PrefixCache => "prefix-cache",
            Scorer::RunningRequests => "running-requests",
        }
    }

    /// Every scorer, for messages.
    pub const ALL: [Scorer; 4] = [Scorer::Queue, Scorer::KvUtilization, Scorer::PrefixCache, Scorer::RunningRequests];
}

struct Weighted {
    scorers: Vec<(Scorer, f64)>,
    /// Scratch: each replica's score.
    scores: Vec<f64>,
}

impl Policy for Weighted {
    fn reads_prefix(&self) -> bool {
        self.scorers.iter().any(|(s, _)| *s == Scorer::PrefixCache)
    }

    fn pick(&mut self, replicas: &mut Replicas<'_>) -> usize {
        let n = replicas.views.len();
        self.scores.clear();
        self.scores.resize(n, 0.0);
        for &(scorer, weight) in &self.scorers {
            score(scorer, weight, replicas.views, replicas.prefix_hits, replicas.prompt_blocks, &mut self.scores);
        }
        // The first highest score: ties go to the lowest index.
        let mut best = 0;
        for i in 1..n {
            if self.scores[i] > self.scores[best] {
                best = i;
            }
        }
        best
    }
}

/// Adds `weight × scorer` of each replica to `scores`.
fn score(scorer: Scorer, weight: f64, views: &[View], hits: &[usize], prompt_blocks: usize, scores: &mut [f64]) {
    let min_max_inverse = |value: &dyn Fn(&View) -> u32, scores: &mut [f64]| {
        let max = views.iter().map(value).max().unwrap_or(0);
        let min = views.iter().map(value).min().unwrap_or(0);
        for (s, v) in scores.iter_mut().zip(views) {
            *s += weight * if max == min { 1.0 } else { f64::from(max - value(v)) / f64::from(max - min) };
        }
    };
    match scorer {
        Scorer::Queue => min_max_inverse(&|v| v.waiting, scores),
        Scorer::RunningRequests => min_max_inverse(&|v| v.running, scores),
        Scorer::KvUtilization => {
            for (s, v) in scores.iter_mut().zip(views) {
                let used = if v.kv_total > 0 { f64::from(v.kv_used) / f64::from(v.kv_total) } else { 0.0 };
                *s += weight * (1.0 - used);
            }
        }
        Scorer::PrefixCache => {
            for (s, &h) in scores.iter_mut().zip(hits) {
                *s += weight * if prompt_blocks > 0 { h as f64 / prompt_blocks as f64 } else { 0.0 };
            }
        }
    }
}
