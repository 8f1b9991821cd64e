//! KV cache groups: vLLM's hybrid KV cache manager (`kv_cache_coordinator.py`
//! `HybridKVCacheCoordinator`, `single_type_kv_cache_manager.py`) for models
//! whose layers keep their KV differently — full attention, a sliding window
//! of W tokens, chunked local attention over C-token chunks, or a linear
//! attention (Mamba-style) state.
//!
//! vLLM groups the layers into KV cache groups of equal layer count, one
//! attention kind each, and every group draws its blocks from one block
//! pool: a block is one page of one group's layers. A request holds, for
//! each group, one entry per block position of its sequence (full, sliding
//! window, chunked) or one state block (linear). Positions a window or chunk
//! no longer reads hold vLLM's null block ([`NULL`]): their blocks were
//! freed, and stay findable in the prefix cache until reused.
//!
//! Here a request's entries are kept position-major in its one block list,
//! after two words of its own ([`META`]: the blocks a window group may cache,
//! see [`WindowRules`]): `blocks[META + position × groups + group]`, so the
//! non-hybrid path, with one group, keeps its layout. Block hashes are keyed by group (vLLM's
//! `BlockHashWithGroupId`): group 0 uses the request's hashes as they are,
//! so a router's prompt hashes keep naming group 0's blocks.
//!
//! Prefix hits (`hits.rs`) are vLLM's: each attention kind finds its longest hit within
//! a bound (full attention: the leading run of cached blocks; a sliding
//! window: the last run long enough to cover the window; chunked: the
//! current chunk's leading run, everything before the chunk counting as
//! hit), and the kinds take turns until the length is one every kind hits
//! (`find_longest_cache_hit`'s fixed point): a hit is usable only where
//! every group hits. A linear-attention group has no prefix hits (vLLM's
//! default `mamba_cache_mode`, "none", caches no state).

use super::{KvCache, NO_HASH, SeqBlocks};
use crate::hash::mix;

mod hits;

/// vLLM's null block: a position a sliding window or chunk has left (or a
/// linear group's position past its one state block). Never held or freed.
pub(super) const NULL: u32 = u32::MAX - 3;

/// Words a hybrid request's block list holds before its entries: the block
/// where its prompt's last full block ends, and where the shared prefix its
/// last lookup found ends ([`NO_BOUND`]: none) — a sliding-window group
/// caches only the blocks just before these (vLLM ≥ 0.30's
/// `reachable_block_mask`, retention 0); then the tokens it is admitted
/// with as computed (hit or seeded; [`NO_BOUND`]: its hit), whose blocks a
/// window has left are never allocated.
const META: usize = 3;

/// A bound not known: every block may be cached.
const NO_BOUND: u32 = u32::MAX;

/// Release-dependent rules of the window groups (`ReleaseBehaviour`'s
/// `window_*`; all on in 0.33.0, recorded).
#[derive(Debug, Clone, Default)]
pub(crate) struct WindowRules {
    /// A window frees what the processed tokens leave behind (a step in
    /// flight not yet counted; vLLM ≥ 0.28).
    pub(crate) lags_in_flight: bool,
    /// `prefix_cache_retention_interval` (vLLM ≥ 0.30): caches a window
    /// group's blocks only where a hit can end; `None` caches every block.
    pub(crate) retention: Option<u32>,
    /// Per group, the most blocks admission counts for it
    /// (`max_admission_blocks_per_request`; `u32::MAX`: no cap).
    pub(crate) admission_caps: Box<[u32]>,
    /// Per group, the most blocks one request ever holds at once
    /// (`max_memory_usage_bytes`: a window's or chunk's tokens and the
    /// tokens of the steps in flight; `u32::MAX`: every position).
    pub(crate) most_held: Box<[u32]>,
}

/// How one KV cache group keeps its layers' KV (vLLM's `KVCacheSpec` kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvGroupKind {
    /// `FullAttentionSpec`: every token's KV, for the whole sequence.
    Full,
    /// `SlidingWindowSpec`: attention over the last `window` tokens.
    SlidingWindow {
        /// Tokens attended (the token itself included).
        window: u32,
    },
    /// `ChunkedLocalAttentionSpec` (Llama 4): attention within the current
    /// `chunk`-token chunk of the sequence.
    ChunkedLocal {
        /// `attention_chunk_size`.
        chunk: u32,
    },
    /// `MambaSpec` (linear attention, Gated DeltaNet, Mamba): one state
    /// block per request, whatever its length.
    Linear,
}

impl KvGroupKind {
    /// Leading tokens no longer read once `computed` tokens are computed
    /// (`get_num_skipped_tokens`).
    fn skipped_tokens(self, computed: u32) -> u32 {
        match self {
            KvGroupKind::Full | KvGroupKind::Linear => 0,
            KvGroupKind::SlidingWindow { window } => (computed + 1).saturating_sub(window),
            KvGroupKind::ChunkedLocal { chunk } => computed / chunk * chunk,
        }
    }

    /// The most blocks one request holds in this group at once, with
    /// `in_flight` tokens scheduled in steps whose window has not moved on
    /// yet (vLLM's `max_memory_usage_bytes`): a window's last W − 1 tokens
    /// and those, block-misaligned by one; a chunk and those; every
    /// position for full attention (`u32::MAX`); one state.
    fn most_held(self, in_flight: u32, max_model_len: u32, block_size: u32) -> u32 {
        match self {
            KvGroupKind::Full => u32::MAX,
            KvGroupKind::SlidingWindow { window } => {
                (window - 1).saturating_add(in_flight).min(max_model_len).div_ceil(block_size) + 1
            }
            KvGroupKind::ChunkedLocal { chunk } => {
                chunk.saturating_add(in_flight).min(max_model_len).div_ceil(block_size)
                    + u32::from(!chunk.is_multiple_of(block_size))
            }
            KvGroupKind::Linear => 1,
        }
    }
}

/// Group `g`'s key for a block hash: group 0's is the hash itself.
#[inline]
fn key(h: u64, g: usize) -> u64 {
    if g == 0 {
        return h;
    }
    let k = mix(h ^ (g as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    if k == NO_HASH { 1 } else { k }
}

impl KvCache {
    /// Whether the layers form more than one full-attention group.
    #[inline]
    pub(crate) fn hybrid(&self) -> bool {
        !self.groups.is_empty()
    }

    /// Entries a request's block list holds for `positions` block positions.
    pub(crate) fn entries_for(&self, positions: usize) -> usize {
        if self.hybrid() { META + positions * self.groups.len() } else { positions }
    }

    /// The window rules (an admission `cap`, a window that `lags` a step in
    /// flight, a `retention` interval), and each group's admission cap and
    /// most blocks held for an engine of `budget` tokens a step,
    /// `async_scheduling` or not, and `max_model_len`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn set_window_rules(
        &mut self,
        cap: bool,
        lags: bool,
        retention: Option<u32>,
        budget: u32,
        async_scheduling: bool,
        max_model_len: u32,
    ) {
        let bs = self.block_size;
        // Tokens in steps at once (`max_concurrent_batches` × budget).
        let max_in_flight_tokens = budget.saturating_mul(if async_scheduling { 2 } else { 1 });
        // Before 0.28 a window moves on with the computed tokens, a step in
        // flight included: one step's tokens past it at most.
        let lag = if lags { max_in_flight_tokens } else { budget };
        let most_held: Box<[u32]> = self.groups.iter().map(|k| k.most_held(lag, max_model_len, bs)).collect();
        let caps = self
            .groups
            .iter()
            .map(|&k| match k {
                // (The cap counts every step in flight, whatever the lag.)
                KvGroupKind::SlidingWindow { window } if cap => {
                    (window - 1).saturating_add(max_in_flight_tokens).min(max_model_len).div_ceil(bs) + 1
                }
                // (No +1: vLLM's chunked cap is whole chunks.)
                KvGroupKind::ChunkedLocal { chunk } if cap => {
                    chunk.saturating_add(max_in_flight_tokens).min(max_model_len).div_ceil(bs)
                }
                _ => u32::MAX,
            })
            .collect();
        self.window_rules = WindowRules { lags_in_flight: lags, retention, admission_caps: caps, most_held };
    }

    /// Whether a window frees only what processed tokens leave behind
    /// (vLLM ≥ 0.28): the caller passes computed minus in-flight tokens.
    pub(crate) fn window_lags_in_flight(&self) -> bool {
        self.hybrid() && self.window_rules.lags_in_flight
    }

    /// The positions and groups of a hybrid request's list.
    fn shape(&self, seq: &SeqBlocks) -> (usize, usize) {
        let g = self.groups.len();
        (seq.blocks.len().saturating_sub(META) / g, g)
    }

    /// Makes `seq`'s list start with its [`META`] words, unknown bounds.
    fn ensure_meta(seq: &mut SeqBlocks) {
        if seq.blocks.len() < META {
            seq.blocks.clear();
            seq.blocks.extend_from_slice(&[NO_BOUND; META]);
        }
    }

    /// Blocks vLLM's admission gate (`scheduler_reserve_full_isl`) counts
    /// for a `positions`-position request holding nothing, without hits:
    /// each window group's capped (vLLM ≥ 0.22), every position else. A request
    /// whose count exceeds the pool is never admitted (before the caps, a
    /// long prompt on a model with window layers waits for good).
    pub(crate) fn admission_blocks(&self, positions: u32) -> u32 {
        if !self.hybrid() {
            return positions;
        }
        let cap = |g: usize| self.window_rules.admission_caps.get(g).copied().unwrap_or(u32::MAX);
        (0..self.groups.len())
            .map(|g| if self.groups[g] == KvGroupKind::Linear { 1 } else { positions.min(cap(g)) })
            .sum()
    }

    /// Blocks of the pool a `positions`-position request may hold at once
    /// (its positions with one group): one needing more than the pool has
    /// could never run. Without [`KvCache::set_window_rules`], a window's
    /// or chunk's own blocks and one more.
    pub(crate) fn least_blocks(&self, positions: u32) -> u32 {
        if !self.hybrid() {
            return positions;
        }
        let bs = self.block_size;
        let most = |g: usize| match self.window_rules.most_held.get(g) {
            Some(&m) => m,
            None => self.groups[g].most_held(0, u32::MAX, bs),
        };
        (0..self.groups.len()).map(|g| positions.min(most(g))).sum()
    }

    /// Frees what each group no longer reads once `computed` tokens are
    /// computed, latest position first, group by group
    /// (`remove_skipped_blocks`, called before every allocation: it frees
    /// blocks even when the allocation then fails).
    pub(crate) fn remove_skipped(&mut self, seq: &mut SeqBlocks, computed: u32) {
        let (positions, g_count) = self.shape(seq);
        for g in 0..g_count {
            let skipped = (self.groups[g].skipped_tokens(computed) / self.block_size) as usize;
            // Latest first, each replaced by the null block; nulls from the
            // first one down (freed by an earlier step).
            let freed = (0..skipped.min(positions))
                .rev()
                .map(|i| std::mem::replace(&mut seq.blocks[META + i * g_count + g], NULL))
                .take_while(|&b| b != NULL);
            self.free_blocks(freed);
        }
    }

    /// New blocks group `g` needs for `positions` positions, holding `have`
    /// and given `hit` hit (or skipped) positions.
    fn new_blocks(&self, g: usize, positions: usize, have: usize, hit: usize) -> usize {
        match self.groups[g] {
            KvGroupKind::Linear => usize::from(have + hit == 0 && positions > 0),
            _ => positions.saturating_sub(have + hit),
        }
    }

    /// Hit blocks still in the free queue (claiming them takes them from
    /// it), but those at positions a request admitted with `computed`
    /// tokens skips ([`NO_BOUND`]: none).
    fn evictable(&self, hits: &[u32], computed: u32) -> usize {
        let g_count = self.groups.len();
        hits.iter()
            .enumerate()
            .filter(|&(k, &b)| {
                b != NULL
                    && k / g_count >= self.skipped_at_admission(k % g_count, computed)
                    && self.blocks[b as usize].ref_count() == 0
            })
            .count()
    }

    /// The tokens a request holding `have` positions was admitted with as
    /// computed, whose blocks its windows skip ([`NO_BOUND`] once it holds
    /// some: nothing is skipped at admission then).
    fn admitted_at(seq: &SeqBlocks, have: usize) -> u32 {
        if have == 0 && seq.blocks.len() >= META { seq.blocks[2] } else { NO_BOUND }
    }

    /// [`KvCache::fits`] over the groups: `num_tokens` of a request holding
    /// nothing, each window group counted up to its cap (vLLM ≥ 0.22).
    pub(super) fn fits_groups(&self, hits: &[u32], num_tokens: u32) -> bool {
        let g_count = self.groups.len();
        let positions = num_tokens.div_ceil(self.block_size) as usize;
        let hit = hits.len() / g_count;
        let cap = |g: usize| self.window_rules.admission_caps.get(g).map_or(usize::MAX, |&c| c as usize);
        let new: usize = (0..g_count).map(|g| self.new_blocks(g, positions.min(cap(g)), 0, hit)).sum();
        new + self.evictable(hits, NO_BOUND) <= self.num_free as usize
    }

    /// [`KvCache::allocate`] over the groups: all or nothing.
    pub(super) fn allocate_groups(
        &mut self,
        seq: &mut SeqBlocks,
        hashes: &[u64],
        hits: &[u32],
        num_tokens: u32,
        known: u32,
    ) -> bool {
        seq.num_hashes = hashes.len() as u32;
        Self::ensure_meta(seq);
        let (have, g_count) = self.shape(seq);
        let positions = num_tokens.div_ceil(self.block_size) as usize;
        let hit = hits.len() / g_count;
        // A request admitted with tokens computed past its hit (seeded)
        // holds nothing where its windows have moved on. (Worked out per
        // group where needed, not collected: this runs for every scheduled
        // request every step.)
        let computed = Self::admitted_at(seq, have);
        let skip = |kv: &Self, g: usize| kv.skipped_at_admission(g, computed);
        let new = |kv: &Self, g: usize| kv.new_blocks(g, positions, have, hit.max(skip(kv, g)));
        if (0..g_count).map(|g| new(self, g)).sum::<usize>() + self.evictable(hits, computed) > self.num_free as usize {
            return false;
        }
        let start = seq.blocks.len();
        seq.blocks.extend_from_slice(hits);
        for (k, b) in seq.blocks[start..].iter_mut().enumerate() {
            if *b == NULL {
                continue;
            }
            if k / g_count < self.skipped_at_admission(k % g_count, computed) {
                // Left untouched, in the cache or free (vLLM drops them).
                *b = NULL;
                continue;
            }
            let block = &mut self.blocks[*b as usize];
            if block.ref_count() == 0 {
                self.unlink(*b);
            }
            let held = self.blocks[*b as usize].ref_count();
            self.blocks[*b as usize].hold(held + 1);
        }
        if hit > 0 {
            seq.num_hashed = (have + hit) as u32;
        }
        let to = positions.max(have + hit);
        seq.blocks.resize(META + to * g_count, NULL);
        for g in 0..g_count {
            // A linear group's one block sits at position 0; the others
            // start past what is held, hit or skipped.
            let count = new(self, g);
            let first = if self.groups[g] == KvGroupKind::Linear { 0 } else { (have + hit).max(skip(self, g)) };
            for i in first..first + count {
                seq.blocks[META + i * g_count + g] = self.take();
            }
        }
        self.register_groups(seq, hashes, num_tokens.min(known.saturating_sub(self.hash_lookahead)));
        true
    }

    /// A block from the free queue's head, held once, its old hash dropped.
    fn take(&mut self) -> u32 {
        let b = self.pop_front();
        let block = &mut self.blocks[b as usize];
        let h = std::mem::replace(&mut block.hash, NO_HASH);
        block.hold(1);
        if h != NO_HASH {
            self.unregister(h, b);
        }
        b
    }

    /// [`KvCache::register`] over the groups: each group's blocks full within
    /// `tokens` under its own key; null positions and linear groups are
    /// skipped.
    pub(super) fn register_groups(&mut self, seq: &mut SeqBlocks, hashes: &[u64], tokens: u32) {
        if !self.prefix_caching || seq.blocks.len() < META {
            return;
        }
        let (positions, g_count) = self.shape(seq);
        let full = self.num_full(hashes, tokens).min(positions);
        let bounds = [seq.blocks[0], seq.blocks[1]];
        let start = (seq.num_hashed as usize).min(full);
        for (i, &h) in hashes.iter().enumerate().take(full).skip(start) {
            for g in 0..g_count {
                let b = seq.blocks[META + i * g_count + g];
                if b == NULL || !self.caches(g, i, bounds) {
                    continue;
                }
                self.register_block(b, key(h, g));
            }
        }
        seq.num_hashed = seq.num_hashed.max(full as u32);
    }

    /// Whether group `g` caches position `i` of a request with `bounds`
    /// (`reachable_block_mask`): a linear group never (no cached state); a
    /// window group under a retention R (vLLM ≥ 0.30) only the blocks a hit ending at
    /// a bound reads (the window's last ⌈(W − 1)/block⌉), and with R > 0 at
    /// the end of every R tokens too; else every block.
    fn caches(&self, g: usize, i: usize, bounds: [u32; 2]) -> bool {
        let KvGroupKind::SlidingWindow { window } = self.groups[g] else {
            return self.groups[g] != KvGroupKind::Linear;
        };
        let (Some(retention), false) = (self.window_rules.retention, bounds[0] == NO_BOUND) else {
            return true;
        };
        let need = (window - 1).div_ceil(self.block_size) as usize;
        let per = (retention / self.block_size) as usize;
        if per > need && i % per >= per - need {
            return true;
        }
        if per > 0 && per <= need {
            return true;
        }
        bounds.iter().filter(|&&b| b != NO_BOUND).any(|&end| i < end as usize && i + need >= end as usize)
    }

    /// [`KvCache::free`] over the groups: group by group, each latest
    /// position first (the coordinator frees manager by manager).
    pub(super) fn free_groups(&mut self, seq: &mut SeqBlocks) {
        let (positions, g_count) = self.shape(seq);
        for g in 0..g_count {
            let entries = (0..positions).rev().map(|i| seq.blocks[META + i * g_count + g]);
            self.free_blocks(entries.filter(|&b| b != NULL));
        }
        seq.blocks.clear();
        seq.num_hashed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::super::block_hashes;
    use super::*;

    pub(super) const BS: u32 = 16;

    /// Block hashes of `tokens` at [`BS`] (shared with `hits.rs`'s tests).
    pub(super) fn hashes(tokens: std::ops::Range<u32>) -> Vec<u64> {
        let mut out = Vec::new();
        block_hashes(tokens, BS, &mut out);
        out
    }

    /// A prefix-caching cache of `blocks` blocks of [`BS`] in `groups`.
    pub(super) fn kv(blocks: u32, groups: &[KvGroupKind]) -> KvCache {
        KvCache::with_groups(blocks, BS, true, false, groups)
    }

    /// Blocks a request holds in group `g` (not null).
    fn held(kv: &KvCache, seq: &SeqBlocks, g: usize) -> usize {
        let n = kv.groups.len();
        seq.blocks.iter().skip(META + g).step_by(n).filter(|&&b| b != NULL).count()
    }

    /// Decoding one token a step past a 64-token window, a request holds
    /// the window's blocks and the one being filled: ⌈64/16⌉ + 1 = 5 at
    /// most, in the sliding-window group, while the full group holds every
    /// block of the sequence.
    #[test]
    fn a_sliding_window_group_holds_the_windows_blocks() {
        let groups = [KvGroupKind::Full, KvGroupKind::SlidingWindow { window: 64 }];
        let mut kv = kv(1000, &groups);
        let mut seq = SeqBlocks::default();
        // A 100-token prompt in one chunk: 7 positions in each group.
        kv.remove_skipped(&mut seq, 0);
        assert!(kv.allocate(&mut seq, &[], &[], 100, 100));
        assert_eq!((held(&kv, &seq, 0), held(&kv, &seq, 1)), (7, 7));
        let mut most = 0;
        for computed in 100..600 {
            kv.remove_skipped(&mut seq, computed);
            assert!(kv.allocate(&mut seq, &[], &[], computed + 1, computed + 1));
            // Hand count: tokens computed-62 ..= computed are in the window,
            // so blocks before (computed + 1 - 64) / 16 are free.
            let skipped = (computed + 1 - 64) / BS;
            let positions = (computed + 1).div_ceil(BS);
            assert_eq!(held(&kv, &seq, 1) as u32, positions - skipped, "at {computed}");
            assert_eq!(held(&kv, &seq, 0) as u32, positions);
            most = most.max(held(&kv, &seq, 1));
            kv.check().unwrap();
        }
        assert_eq!(most, 64usize.div_ceil(BS as usize) + 1);
        assert_eq!(kv.num_used() as usize, held(&kv, &seq, 0) + held(&kv, &seq, 1));
        kv.free(&mut seq);
        assert_eq!(kv.num_used(), 0);
        kv.check().unwrap();
    }

    /// A window of 50 (not a multiple of the block size): blocks before
    /// (computed + 1 − 50) / 16 are freed, so at most ⌈50/16⌉ + 1 = 5 held.
    #[test]
    fn a_window_off_the_block_size_frees_by_whole_blocks() {
        let mut kv = kv(100, &[KvGroupKind::SlidingWindow { window: 50 }]);
        let mut seq = SeqBlocks::default();
        let mut most = 0;
        for computed in 0..300 {
            kv.remove_skipped(&mut seq, computed);
            assert!(kv.allocate(&mut seq, &[], &[], computed + 1, computed + 1));
            let expect = (computed + 1).div_ceil(BS) - (computed + 1).saturating_sub(50) / BS;
            assert_eq!(held(&kv, &seq, 0) as u32, expect, "at {computed}");
            most = most.max(held(&kv, &seq, 0));
        }
        assert_eq!(most, 5);
    }

    /// A linear-attention group holds one state block whatever the length.
    #[test]
    fn a_linear_group_holds_one_block_at_any_length() {
        let groups = [KvGroupKind::Full, KvGroupKind::Linear, KvGroupKind::Linear];
        let mut kv = kv(1000, &groups);
        let mut seq = SeqBlocks::default();
        for tokens in [1u32, 17, 500, 4000] {
            kv.remove_skipped(&mut seq, tokens.saturating_sub(1));
            assert!(kv.allocate(&mut seq, &[], &[], tokens, tokens));
            assert_eq!((held(&kv, &seq, 1), held(&kv, &seq, 2)), (1, 1), "{tokens} tokens");
            assert_eq!(held(&kv, &seq, 0) as u32, tokens.div_ceil(BS));
        }
        // Nothing hits with a linear group (no cached state).
        let h = hashes(0..4000);
        let mut hits = Vec::new();
        assert_eq!(kv.find_cached(&h, 249, &mut hits), 0);
        kv.free(&mut seq);
        kv.check().unwrap();
    }
}
