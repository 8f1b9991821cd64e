//! Speculative decoding (vLLM 0.15.1 `--speculative-config`): after a
//! request samples, its drafter proposes `k` tokens (`update_draft_token_ids`);
//! its next step schedules `1 + k` tokens (trimmed to the token budget and
//! `max_model_len`), allocating `k` more KV slots of lookahead for EAGLE, MTP
//! and draft models (`scheduler.py` `num_lookahead_tokens`); at the step's
//! end it samples `accepted + 1` tokens, all delivered at that time, and the
//! rejected drafts roll `num_computed_tokens` back (`update_from_output`).
//!
//! With async scheduling (`async_scheduler.py`) the `k` drafts are
//! placeholders put on a request when a step that samples is scheduled, and
//! that step's tokens count as if all its drafts were accepted until its
//! output is processed, after the next step was scheduled: the engine's
//! `pending` then counts the sampled token and the drafts, each step keeps
//! its acceptance position from when it was scheduled, and a step scheduled
//! for a request the step before finished is dropped (`engine.rs`).
//!
//! How many drafts a request accepts is a seeded draw, shared with the
//! Python conformance recorder: see [`SpecDecode::accepted`].

use crate::hash::mix;
use crate::latency::DraftCost;

/// Who proposes the drafts (`--speculative-config` `method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMethod {
    /// An EAGLE head (`eagle`/`eagle3`).
    Eagle,
    /// The model's own multi-token-prediction layers.
    Mtp,
    /// Prompt-lookup n-gram matching, on the CPU.
    Ngram,
    /// A smaller model of the same tokenizer.
    DraftModel,
}

impl SpecMethod {
    /// The YAML names, in order.
    pub const NAMES: [&'static str; 4] = ["eagle", "mtp", "ngram", "draft_model"];

    /// The method called `name`.
    pub fn parse(name: &str) -> Option<SpecMethod> {
        Some(match name {
            "eagle" => SpecMethod::Eagle,
            "mtp" => SpecMethod::Mtp,
            "ngram" => SpecMethod::Ngram,
            "draft_model" => SpecMethod::DraftModel,
            _ => return None,
        })
    }

    /// Whether vLLM treats it as EAGLE (`SpeculativeConfig.use_eagle()`:
    /// eagle, eagle3, mtp), whose drafter keeps state per cached block.
    pub fn uses_eagle(self) -> bool {
        matches!(self, SpecMethod::Eagle | SpecMethod::Mtp)
    }

    /// Whether the scheduler reserves `k` lookahead slots: `use_eagle()`
    /// (eagle, eagle3, mtp) or `uses_draft_model()` in vLLM 0.15.1's
    /// `Scheduler.__init__`; not for n-gram.
    pub fn reserves_lookahead(self) -> bool {
        self != SpecMethod::Ngram
    }
}

/// One engine's speculative decoding ([`SpecDecode::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecDecode {
    /// The drafter.
    pub method: SpecMethod,
    /// Drafts proposed after each sample (`num_speculative_tokens`).
    pub k: u32,
    /// Per-position acceptance rate α_j, j = 1..=k, in parts per million
    /// (`round(α_j × 10^6)`; non-increasing).
    pub acceptance_ppm: Vec<u32>,
    /// Seed of the acceptance draws.
    pub seed: u64,
    /// What the drafter costs a step.
    pub draft: DraftCost,
    /// How prefix caching makes room for an EAGLE drafter (none for other
    /// methods); set by [`SpecDecode::for_release`].
    pub prefix_rule: EaglePrefixRule,
    /// A waiting request is admitted with the `k` lookahead slots too (vLLM
    /// 0.33.0); before, only a request with tokens computed already gets
    /// them (0.15.1's `effective_lookahead_tokens`).
    pub lookahead_at_admission: bool,
    /// Per position j: draft j is accepted when the draw's top 53 bits are
    /// below this, `ceil(p_j × 2^53)` — the same test as `u_j < p_j`
    /// (scaling by 2^53 is exact), without a division per draw.
    thresholds: Vec<u64>,
}

/// How a release reconciles EAGLE drafting with prefix caching, as the
/// conformance traces of vLLM 0.15.1 and 0.33.0 show
/// (`scripts/vllm-conformance/README.md`, "Prefix hits under EAGLE").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EaglePrefixRule {
    /// Not EAGLE: prefix hits as without speculation.
    None,
    /// vLLM 0.15.1: the last matched block of every hit is dropped and
    /// recomputed (the KV cache manager's `use_eagle`).
    DropLastBlock,
    /// vLLM 0.33.0: each block is hashed with the token after it
    /// (`num_hash_lookahead_tokens` = 1), nothing dropped.
    HashNextToken,
}

/// Speculative-decoding counters, as vLLM's Prometheus metrics
/// (`vllm:spec_decode_num_drafts`, `_num_draft_tokens`,
/// `_num_accepted_tokens`, `_num_accepted_tokens_per_pos`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Verifications (a request with drafts scheduled in a step).
    pub drafts: u64,
    /// Draft tokens verified.
    pub draft_tokens: u64,
    /// Of those, accepted.
    pub accepted_tokens: u64,
    /// Verifications by drafts accepted (index a = a accepted); `k + 1`
    /// long in an engine that speculates, empty otherwise. One increment a
    /// verification, where per-position counters would take a loop of
    /// random length: [`SpecStats::accepted_per_pos`] derives those.
    pub by_accepted: Vec<u64>,
}

impl SpecStats {
    /// Adds another engine's counters.
    pub fn add(&mut self, other: &SpecStats) {
        self.drafts += other.drafts;
        self.draft_tokens += other.draft_tokens;
        self.accepted_tokens += other.accepted_tokens;
        if self.by_accepted.len() < other.by_accepted.len() {
            self.by_accepted.resize(other.by_accepted.len(), 0);
        }
        for (a, b) in self.by_accepted.iter_mut().zip(&other.by_accepted) {
            *a += b;
        }
    }

    /// Accepted drafts at each position, from the first (vLLM's
    /// `num_accepted_tokens_per_pos`): position j counts the verifications
    /// that accepted j or more.
    pub fn accepted_per_pos(&self) -> Vec<u64> {
        let positions = self.by_accepted.len().saturating_sub(1);
        (1..=positions).map(|j| self.by_accepted[j..].iter().sum()).collect()
    }
}

/// The acceptance key of sub-request `node` of the request whose integer id
/// is `id` (a string id: `hash::hash64` of it).
pub(crate) fn request_key(id: u64, node: u32) -> u64 {
    mix(id ^ (u64::from(node) << 40))
}

/// The uniform draw for draft `j` (1-based) of the step at `pos`, in [0, 1):
/// the definition the Python recorder reproduces. The engine draws the same
/// bits incrementally ([`SpecDecode::accepted`]); the tests hold the two
/// equal.
#[cfg(test)]
pub(crate) fn uniform(seed: u64, key: u64, pos: u32, j: u32) -> f64 {
    let z = mix(mix(mix(seed ^ key) ^ u64::from(pos)) ^ u64::from(j));
    (z >> 11) as f64 / (1u64 << 53) as f64
}

impl SpecDecode {
    /// `k` drafts by `method` accepted at `acceptance_ppm` (α_j in parts per
    /// million), drawn from `seed`, the drafter costing `draft`.
    pub fn new(method: SpecMethod, k: u32, acceptance_ppm: Vec<u32>, seed: u64, draft: DraftCost) -> SpecDecode {
        let mut prev = 1_000_000u32;
        let thresholds = acceptance_ppm
            .iter()
            .map(|&alpha| {
                // p_j = α_j / α_{j−1}; 0 once a rate is 0.
                let p = if prev == 0 { 0.0 } else { f64::from(alpha) / f64::from(prev) };
                prev = alpha;
                (p * (1u64 << 53) as f64).ceil() as u64
            })
            .collect();
        let prefix_rule = if method.uses_eagle() { EaglePrefixRule::DropLastBlock } else { EaglePrefixRule::None };
        SpecDecode { method, k, acceptance_ppm, seed, draft, prefix_rule, lookahead_at_admission: false, thresholds }
    }

    /// The same, with the prefix-cache and admission rules of a release:
    /// `hashes_next_token` for vLLM 0.33.0's (block hashes that cover the
    /// next token, lookahead slots at admission), else 0.15.1's (the last
    /// hit block dropped, none at admission). Releases in between are not
    /// recorded: the scenario takes 0.33.0's from 0.33.0 on.
    pub fn for_release(self, hashes_next_token: bool) -> SpecDecode {
        let prefix_rule = match (self.method.uses_eagle(), hashes_next_token) {
            (false, _) => EaglePrefixRule::None,
            (true, false) => EaglePrefixRule::DropLastBlock,
            (true, true) => EaglePrefixRule::HashNextToken,
        };
        SpecDecode { prefix_rule, lookahead_at_admission: hashes_next_token, ..self }
    }

    /// A request's stream of draws: `mix(seed ^ key)`, computed once.
    pub(super) fn stream(&self, key: u64) -> u64 {
        mix(self.seed ^ key)
    }

    /// KV slots allocated beyond the scheduled tokens.
    pub fn lookahead(&self) -> u32 {
        if self.method.reserves_lookahead() { self.k } else { 0 }
    }

    /// Drafts accepted of `drafts` verified for the request of `stream`
    /// ([`SpecDecode::stream`] of its key) whose `num_computed_tokens`
    /// before the step, + 1 − its prompt length, is `pos`: the largest
    /// `a ≤ drafts` with `u_j < α_j / α_{j−1}` for every `j ≤ a` (α_0 = 1,
    /// `u_j` = [`uniform`]), so position j is accepted with probability α_j.
    pub fn accepted(&self, stream: u64, pos: u32, drafts: u32) -> u32 {
        let base = mix(stream ^ u64::from(pos));
        // Every draft's draw, counting the leading accepted ones: no early
        // exit, whose branch the random outcomes would mispredict (it cost
        // more than the draws past the first rejection).
        let (mut accepted, mut all_so_far) = (0, true);
        for (j, &threshold) in (1..=drafts).zip(&self.thresholds) {
            all_so_far &= mix(base ^ u64::from(j)) >> 11 < threshold;
            accepted += u32::from(all_so_far);
        }
        accepted
    }

    /// A verification of `drafts` drafts at `pos` for `stream` by a request
    /// with `remaining` tokens still to emit: counted in `stats`; returns
    /// (tokens emitted, drafts rejected).
    pub(super) fn verify(
        &self,
        stats: &mut SpecStats,
        stream: u64,
        pos: u32,
        drafts: u32,
        remaining: u32,
    ) -> (u32, u32) {
        let a = self.accepted(stream, pos, drafts);
        stats.drafts += 1;
        stats.draft_tokens += u64::from(drafts);
        stats.accepted_tokens += u64::from(a);
        if stats.by_accepted.len() <= self.k as usize {
            stats.by_accepted.resize(self.k as usize + 1, 0);
        }
        stats.by_accepted[a as usize] += 1;
        ((a + 1).min(remaining), drafts - a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(acceptance: &[u32]) -> SpecDecode {
        SpecDecode::new(SpecMethod::Eagle, acceptance.len() as u32, acceptance.to_vec(), 0, DraftCost::FREE)
    }

    /// The engine's integer test is the definition's `u_j < α_j / α_{j−1}`.
    #[test]
    fn accepted_is_the_draw_against_the_ratio() {
        let s = SpecDecode::new(SpecMethod::Eagle, 3, vec![700_000, 490_000, 100_000], 7, DraftCost::FREE);
        for key in 0..5_000u64 {
            let pos = (key % 97) as u32 + 1;
            let mut want = 0;
            let p = [0.7, 0.49 / 0.7, 0.1 / 0.49];
            while want < 3 && uniform(7, key, pos, want + 1) < p[want as usize] {
                want += 1;
            }
            assert_eq!(s.accepted(s.stream(key), pos, 3), want, "key {key}");
        }
    }

    /// Test vectors for the Python recorder: (seed, key, pos, j) → u_j,
    /// checked against an independent Python transcription of the draw
    /// (`cases.py`'s `splitmix64`, FNV-1a for the string id).
    #[test]
    fn uniform_test_vectors() {
        let key = request_key(17, 0);
        assert_eq!(key, 0x8084_75f0_2ee3_7363);
        let cases = [
            (0u64, key, 1u32, 1u32, "0.51576104000256462"),
            (0, key, 1, 2, "0.35394120319100197"),
            (0, key, 5, 3, "0.15636483105954802"),
            (42, request_key(3, 2), 100, 1, "0.93496240847338874"),
            (7, crate::hash::hash64(b"request_17"), 2, 4, "0.12476308351758469"),
        ];
        for (seed, key, pos, j, want) in cases {
            let u = uniform(seed, key, pos, j);
            println!("seed={seed} key={key:#018x} pos={pos} j={j} u={u:.17}");
            assert_eq!(format!("{u:.17}"), want, "seed={seed} key={key:#x} pos={pos} j={j}");
        }
        assert_eq!(request_key(3, 2), 0x3e38_2261_7a41_eec2);
        assert_eq!(crate::hash::hash64(b"request_17"), 0x6929_16e8_549a_16ff);
    }

    #[test]
    fn acceptance_follows_the_per_position_rates() {
        assert_eq!(spec(&[1_000_000; 3]).accepted(5, 1, 3), 3);
        assert_eq!(spec(&[0; 3]).accepted(5, 1, 3), 0);
        // α = (0.8, 0.4): P(a ≥ 1) ≈ 0.8, P(a = 2) ≈ 0.4 over many draws.
        let s = spec(&[800_000, 400_000]);
        let (mut ge1, mut eq2) = (0, 0);
        for key in 0..20_000 {
            let a = s.accepted(s.stream(request_key(key, 0)), 1, 2);
            ge1 += u32::from(a >= 1);
            eq2 += u32::from(a == 2);
        }
        assert!((15_700..16_300).contains(&ge1), "{ge1}");
        assert!((7_700..8_300).contains(&eq2), "{eq2}");
        // Trimmed to fewer drafts, never more than scheduled.
        assert!(spec(&[1_000_000; 3]).accepted(5, 1, 1) == 1);
    }

    #[test]
    fn verify_counts_and_caps_at_what_remains() {
        let s = spec(&[1_000_000; 3]);
        let mut st = SpecStats::default();
        assert_eq!(s.verify(&mut st, 1, 1, 3, 10), (4, 0));
        assert_eq!(s.verify(&mut st, 1, 5, 3, 2), (2, 0));
        assert_eq!((st.drafts, st.draft_tokens, st.accepted_tokens), (2, 6, 6));
        assert_eq!(st.accepted_per_pos(), vec![2, 2, 2]);
        assert_eq!(st.by_accepted, vec![0, 0, 0, 2]);
        let z = spec(&[0; 3]);
        assert_eq!(z.verify(&mut st, 1, 1, 3, 10), (1, 3));
    }
}
