//! Prefix hits over KV cache groups (`kv_cache_coordinator.py`
//! `find_longest_cache_hit`, each manager's own): full attention's leading
//! run of cached blocks, a sliding window's last run of ⌈(W − 1)/block⌉
//! cached blocks, a chunk's current-chunk run (everything before counts),
//! taken in turns until every kind agrees; and the bounds a lookup notes for
//! a window group's caching.

use super::{KvCache, KvGroupKind, NO_BOUND, NULL, SeqBlocks, key};

impl KvCache {
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
    pub(in crate::sim::kv_cache) fn find_cached_groups(
        &self,
        hashes: &[u64],
        max_blocks: usize,
        hits: &mut Vec<u32>,
    ) -> usize {
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
    pub(super) fn skipped_at_admission(&self, g: usize, computed: u32) -> usize {
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
}

#[cfg(test)]
mod tests {
    use super::super::tests::{hashes, kv};
    use super::*;
    use crate::sim::kv_cache::NO_HASH;

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
