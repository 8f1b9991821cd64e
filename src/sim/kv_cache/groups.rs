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
//! Prefix hits are vLLM's: each attention kind finds its longest hit within
//! a bound (full attention: the leading run of cached blocks; a sliding
//! window: the last run long enough to cover the window; chunked: the
//! current chunk's leading run, everything before the chunk counting as
//! hit), and the kinds take turns until the length is one every kind hits
//! (`find_longest_cache_hit`'s fixed point): a hit is usable only where
//! every group hits. A linear-attention group has no prefix hits (vLLM's
//! default `mamba_cache_mode`, "none", caches no state).

use super::{KvCache, NO_HASH, SeqBlocks};
use crate::hash::mix;

/// vLLM's null block: a position a sliding window or chunk has left (or a
/// linear group's position past its one state block). Never held or freed.
pub(super) const NULL: u32 = u32::MAX - 3;

/// Words a hybrid request's block list holds before its entries: the block
/// where its prompt's last full block ends, and where the shared prefix its
/// last lookup found ends ([`NO_BOUND`]: none) — a sliding-window group
/// caches only the blocks just before these (vLLM 0.33's
/// `reachable_block_mask`, retention 0); then the tokens it is admitted
/// with as computed (hit or seeded; [`NO_BOUND`]: its hit), whose blocks a
/// window has left are never allocated.
const META: usize = 3;

/// A bound not known: every block may be cached.
const NO_BOUND: u32 = u32::MAX;

/// Release-dependent rules of the window groups (vLLM 0.33.0's, recorded;
/// off: 0.15.1 and 0.19.0's).
#[derive(Debug, Clone, Default)]
pub(crate) struct WindowRules {
    /// A window frees what the processed tokens leave behind (a step in
    /// flight not yet counted), and caches only the blocks a resent prompt
    /// or a shared prefix can hit (`prefix_cache_retention_interval` 0).
    pub(crate) v033: bool,
    /// `prefix_cache_retention_interval` (0.33): `None` caches every block.
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

    /// The 0.33 window rules (`v033`, `retention`), and each group's
    /// admission cap and most blocks held for an engine of `budget` tokens a
    /// step, `async_scheduling` or not, and `max_model_len`.
    pub(crate) fn set_window_rules(
        &mut self,
        v033: bool,
        retention: Option<u32>,
        budget: u32,
        async_scheduling: bool,
        max_model_len: u32,
    ) {
        let bs = self.block_size;
        // Tokens in steps at once (`max_concurrent_batches` × budget).
        let max_in_flight_tokens = budget.saturating_mul(if async_scheduling { 2 } else { 1 });
        // Before 0.33 a window moves on with the computed tokens, a step in
        // flight included: one step's tokens past it at most.
        let lag = if v033 { max_in_flight_tokens } else { budget };
        let most_held: Box<[u32]> = self.groups.iter().map(|k| k.most_held(lag, max_model_len, bs)).collect();
        let caps = self
            .groups
            .iter()
            .zip(&most_held)
            .map(|(&k, &m)| match k {
                KvGroupKind::SlidingWindow { .. } if v033 => m,
                // (No +1: vLLM's chunked cap is whole chunks.)
                KvGroupKind::ChunkedLocal { chunk } if v033 => {
                    chunk.saturating_add(max_in_flight_tokens).min(max_model_len).div_ceil(bs)
                }
                _ => u32::MAX,
            })
            .collect();
        self.window_rules = WindowRules { v033, retention, admission_caps: caps, most_held };
    }

    /// Whether a window frees only what processed tokens leave behind
    /// (0.33): the caller passes computed minus in-flight tokens.
    pub(crate) fn window_lags_in_flight(&self) -> bool {
        self.hybrid() && self.window_rules.v033
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
    /// each window group's capped (0.33), every position else. A request
    /// whose count exceeds the pool is never admitted (before 0.33's caps, a
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

    /// Whether the block of position `i` of `hashes` is cached for every
    /// group in `groups`: the block each has there, or `None`.
    fn cached_at(&self, hashes: &[u64], i: usize, groups: &[usize], out: &mut [u32]) -> bool {
        for (o, &g) in out.iter_mut().zip(groups) {
            match self.cached.get(&key(hashes[i], g)) {
                Some(&b) => *o = b,
                None => return false,
            }
        }
        true
    }

    /// The longest prefix hit, at most `max_blocks` positions, that every
    /// group hits; the hit blocks appended to `hits` position-major (null
    /// where a window or chunk has moved on). Returns the positions hit.
    pub(super) fn find_cached_groups(&self, hashes: &[u64], max_blocks: usize, hits: &mut Vec<u32>) -> usize {
        self.find_groups(hashes, max_blocks, hits).0
    }

    /// [`KvCache::find_cached`] for a waiting request: with groups, its
    /// bounds are noted too — where its prompt's last full block ends
    /// (`prompt_len`), and where the longest hit of any kind ends when it is
    /// longer than the agreed one (vLLM's `shared_prefix_boundary`, set at
    /// every lookup): the blocks a window group caches for others to hit.
    pub(crate) fn find_hit(
        &self,
        seq: &mut SeqBlocks,
        hashes: &[u64],
        max_blocks: usize,
        hits: &mut Vec<u32>,
        prompt_len: u32,
    ) -> usize {
        if !self.hybrid() {
            return self.find_cached(hashes, max_blocks, hits);
        }
        let (n, longest) = if self.prefix_caching { self.find_groups(hashes, max_blocks, hits) } else { (0, 0) };
        Self::ensure_meta(seq);
        seq.blocks[0] = prompt_len.saturating_sub(1) / self.block_size;
        seq.blocks[1] = if longest > n { longest as u32 } else { NO_BOUND };
        seq.blocks[2] = NO_BOUND;
        n
    }

    /// A request holding nothing is admitted with `computed` tokens computed
    /// (its hit, or seeded progress past it): positions a window or chunk
    /// has left by then get the null block, not a new one (vLLM counts
    /// `skipped(total_computed_tokens)` for a new request).
    pub(crate) fn note_admission(&self, seq: &mut SeqBlocks, computed: u32) {
        if self.hybrid() && self.shape(seq).0 == 0 {
            Self::ensure_meta(seq);
            seq.blocks[2] = computed;
        }
    }

    /// Leading positions of group `g` a request admitted with `computed`
    /// tokens never holds.
    fn skipped_at_admission(&self, g: usize, computed: u32) -> usize {
        if computed == NO_BOUND { 0 } else { (self.groups[g].skipped_tokens(computed) / self.block_size) as usize }
    }

    /// The agreed hit (positions) and the longest any kind found.
    fn find_groups(&self, hashes: &[u64], max_blocks: usize, hits: &mut Vec<u32>) -> (usize, usize) {
        if self.groups.contains(&KvGroupKind::Linear) {
            return (0, 0);
        }
        // The kinds present, full attention first (vLLM's coordinator
        // orders them so), each with its groups.
        let mut kinds: Vec<(KvGroupKind, Vec<usize>)> = Vec::new();
        for (g, &k) in self.groups.iter().enumerate() {
            match kinds.iter_mut().find(|(kind, _)| *kind == k) {
                Some((_, gs)) => gs.push(g),
                None => kinds.push((k, vec![g])),
            }
        }
        kinds.sort_by_key(|(k, _)| *k != KvGroupKind::Full);
        let mut n = max_blocks.min(hashes.len());
        let mut longest = 0;
        loop {
            let before = n;
            for (kind, gs) in &kinds {
                n = self.kind_hit(*kind, gs, hashes, n);
                longest = longest.max(n);
            }
            if n == before {
                break;
            }
        }
        // The blocks of the agreed length, per kind's rule.
        let g_count = self.groups.len();
        let start = hits.len();
        hits.resize(start + n * g_count, NULL);
        let mut found = vec![0; g_count];
        for (kind, gs) in &kinds {
            let first = self.first_read(*kind, n);
            for i in first..n {
                let ok = self.cached_at(hashes, i, gs, &mut found[..gs.len()]);
                debug_assert!(ok, "a position inside the agreed hit is cached");
                for (j, &g) in gs.iter().enumerate() {
                    hits[start + i * g_count + g] = found[j];
                }
            }
        }
        (n, longest)
    }

    /// The first position of an `n`-position hit that `kind` reads (those
    /// before it are null).
    fn first_read(&self, kind: KvGroupKind, n: usize) -> usize {
        let bs = self.block_size as usize;
        match kind {
            KvGroupKind::Full | KvGroupKind::Linear => 0,
            KvGroupKind::SlidingWindow { window } => {
                // The hit ends in a run of `contiguous` cached blocks.
                n.saturating_sub((window as usize - 1).div_ceil(bs))
            }
            KvGroupKind::ChunkedLocal { chunk } => (n * bs) / chunk as usize * chunk as usize / bs,
        }
    }

    /// `kind`'s longest hit within `max` positions (`find_longest_cache_hit`).
    fn kind_hit(&self, kind: KvGroupKind, gs: &[usize], hashes: &[u64], max: usize) -> usize {
        let mut scratch = vec![0; gs.len()];
        match kind {
            KvGroupKind::Full => (0..max).take_while(|&i| self.cached_at(hashes, i, gs, &mut scratch)).count(),
            KvGroupKind::SlidingWindow { window } => {
                let needed = (window as usize - 1).div_ceil(self.block_size as usize);
                let mut run = 0;
                for i in (0..max).rev() {
                    if self.cached_at(hashes, i, gs, &mut scratch) {
                        run += 1;
                        if run >= needed {
                            return i + run;
                        }
                    } else {
                        run = 0;
                    }
                }
                // No run covers the window: the leading run is a hit still.
                run
            }
            KvGroupKind::ChunkedLocal { .. } => {
                let first = self.first_read(kind, max);
                first + (first..max).take_while(|&i| self.cached_at(hashes, i, gs, &mut scratch)).count()
            }
            KvGroupKind::Linear => 0,
        }
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
    /// it), but those at positions a group skips (`skip[g]`).
    fn evictable(&self, hits: &[u32], skip: &[usize]) -> usize {
        let g_count = self.groups.len();
        hits.iter()
            .enumerate()
            .filter(|&(k, &b)| {
                b != NULL && k / g_count >= skip[k % g_count] && self.blocks[b as usize].ref_count() == 0
            })
            .count()
    }

    /// Each group's positions skipped at admission (none once it holds some).
    fn admission_skips(&self, seq: &SeqBlocks, have: usize) -> Vec<usize> {
        let computed = if have == 0 && seq.blocks.len() >= META { seq.blocks[2] } else { NO_BOUND };
        (0..self.groups.len()).map(|g| self.skipped_at_admission(g, computed)).collect()
    }

    /// [`KvCache::fits`] over the groups: `num_tokens` of a request holding
    /// nothing, each window group counted up to its cap (vLLM 0.33).
    pub(super) fn fits_groups(&self, hits: &[u32], num_tokens: u32) -> bool {
        let g_count = self.groups.len();
        let positions = num_tokens.div_ceil(self.block_size) as usize;
        let hit = hits.len() / g_count;
        let cap = |g: usize| self.window_rules.admission_caps.get(g).map_or(usize::MAX, |&c| c as usize);
        let new: usize = (0..g_count).map(|g| self.new_blocks(g, positions.min(cap(g)), 0, hit)).sum();
        new + self.evictable(hits, &vec![0; g_count]) <= self.num_free as usize
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
        // holds nothing where its windows have moved on.
        let skip = self.admission_skips(seq, have);
        let new: Vec<usize> = (0..g_count).map(|g| self.new_blocks(g, positions, have, hit.max(skip[g]))).collect();
        if new.iter().sum::<usize>() + self.evictable(hits, &skip) > self.num_free as usize {
            return false;
        }
        let start = seq.blocks.len();
        seq.blocks.extend_from_slice(hits);
        for (k, b) in seq.blocks[start..].iter_mut().enumerate() {
            if *b == NULL {
                continue;
            }
            if k / g_count < skip[k % g_count] {
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
        for (g, &count) in new.iter().enumerate() {
            // A linear group's one block sits at position 0; the others
            // start past what is held, hit or skipped.
            let first = if self.groups[g] == KvGroupKind::Linear { 0 } else { (have + hit).max(skip[g]) };
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
    /// window group under 0.33's retention R only the blocks a hit ending at
    /// a bound reads (the window's last ⌈(W − 1)/block⌉), and with R > 0 at
    /// the end of every R tokens too; else every block.
    fn caches(&self, g: usize, i: usize, bounds: [u32; 2]) -> bool {
        let KvGroupKind::SlidingWindow { window } = self.groups[g] else {
            return self.groups[g] != KvGroupKind::Linear;
        };
        let (true, Some(retention), false) =
            (self.window_rules.v033, self.window_rules.retention, bounds[0] == NO_BOUND)
        else {
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

    const BS: u32 = 16;

    fn hashes(tokens: std::ops::Range<u32>) -> Vec<u64> {
        let mut out = Vec::new();
        block_hashes(tokens, BS, &mut out);
        out
    }

    fn kv(blocks: u32, groups: &[KvGroupKind]) -> KvCache {
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

    /// A prompt hits only as far as every group hits: the full group's
    /// blocks of a finished request are all cached, but the window's early
    /// blocks were freed and reused, so the hit stops where the window's
    /// cached run can still cover it.
    #[test]
    fn a_hybrid_hit_is_where_every_group_hits() {
        let groups = [KvGroupKind::Full, KvGroupKind::SlidingWindow { window: 32 }];
        // Enough blocks that nothing is evicted in the first request.
        let mut kv = kv(64, &groups);
        let h = hashes(0..160);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &h, &[], 160, 160));
        kv.free(&mut a);
        // Everything cached in both groups: the window needs ⌈31/16⌉ = 2
        // cached blocks at the hit's end, and has them.
        let mut hits = Vec::new();
        assert_eq!(kv.find_cached(&h, 9, &mut hits), 9);
        // The window's blocks 0..7 null: only positions 7 and 8 are read.
        let window: Vec<u32> = hits.iter().skip(1).step_by(2).copied().collect();
        assert!(window[..7].iter().all(|&b| b == NULL) && window[7..].iter().all(|&b| b != NULL));
        // Evict the window group's block at position 8 (it is keyed apart):
        // the full group still hits 9, the window only up to 8, and the hit
        // is 8 for both.
        let b8 = hits[8 * 2 + 1];
        let h8 = kv.blocks[b8 as usize].hash;
        kv.unregister(h8, b8);
        kv.blocks[b8 as usize].hash = NO_HASH;
        hits.clear();
        assert_eq!(kv.find_cached(&h, 9, &mut hits), 8);
        // A second request claims the hit: fewer blocks than the full group
        // alone would take.
        let used = kv.num_used();
        let mut b = SeqBlocks::default();
        assert!(kv.allocate(&mut b, &h, &hits, 160, 160));
        // 8 full-group hits claimed, 2 new there; the window's 2 hits
        // claimed, 2 new (positions 8, 9): 4 blocks taken from the pool.
        assert_eq!(kv.num_used() - used, 8 + 2 + 2 + 2);
        kv.check().unwrap();
    }

    /// The full group hits more than the window can: the hit is the
    /// window's.
    #[test]
    fn the_full_group_alone_does_not_make_a_hit() {
        let groups = [KvGroupKind::Full, KvGroupKind::SlidingWindow { window: 64 }];
        let mut kv = kv(64, &groups);
        let h = hashes(0..256);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &h, &[], 256, 256));
        kv.free(&mut a);
        // Remove every window block from the cache: the full group would
        // hit all 15 positions, the window none.
        for &hash in &h {
            if let Some(&b) = kv.cached.get(&key(hash, 1)) {
                kv.unregister(key(hash, 1), b);
                kv.blocks[b as usize].hash = NO_HASH;
            }
        }
        let mut hits = Vec::new();
        assert_eq!(kv.find_cached(&h, 15, &mut hits), 0);
        assert!(hits.is_empty());
        // The full group alone (a non-hybrid cache) would have hit them.
        assert_eq!((0..15).filter(|&i| kv.cached.contains_key(&key(h[i], 0))).count(), 15);
    }
}
