//! Paged KV cache with automatic prefix caching, after vLLM V1's
//! `block_pool.py` and `kv_cache_manager.py`.
//!
//! Blocks hold `block_size` tokens. A full block whose tokens are known is
//! identified by a hash chained over every token before it, and registered in
//! a hash → block map. A freed block keeps its hash and goes to the *tail* of
//! the free queue, so it can still be hit until it is reused; new blocks are
//! taken from the *head* (least recently freed first), evicting the hash they
//! carried. A request's blocks are freed in reverse, so its last blocks are
//! evicted before its first ones, as in vLLM.
//!
//! Invariant, checked by [`KvCache::check`]: every block is either referenced
//! (`ref_count > 0`) or in the free queue, never both.

use std::collections::HashMap;

const NONE: u32 = u32::MAX;
/// `Block::hash` of a block that is not in the prefix cache. A real hash that
/// happens to be 0 is stored as 1 (see [`block_hashes`]).
const NO_HASH: u64 = 0;

/// One block's metadata, kept together so touching a block costs one cache
/// line: the free queue, reference counts and hashes are all walked at
/// random block indices.
#[derive(Debug, Clone, Copy)]
struct Block {
    hash: u64,
    ref_count: u32,
    prev: u32,
    next: u32,
}

/// The blocks one request holds, in sequence order.
#[derive(Debug, Default)]
pub(crate) struct SeqBlocks {
    pub(crate) blocks: Vec<u32>,
    /// How many leading blocks have been registered in the prefix cache.
    num_hashed: usize,
}

/// Hashes of the full blocks of a token sequence, each chained on the one
/// before, so equal hashes mean equal prefixes.
pub(crate) fn block_hashes(tokens: impl Iterator<Item = u32>, block_size: u32, out: &mut Vec<u64>) {
    let mut hash: u64 = 0x243F_6A88_85A3_08D3; // seed: digits of pi
    let mut in_block = 0;
    for token in tokens {
        hash = mix(hash ^ u64::from(token));
        in_block += 1;
        if in_block == block_size {
            out.push(if hash == NO_HASH { 1 } else { hash });
            in_block = 0;
        }
    }
}

/// SplitMix64's finaliser: a cheap, well-distributed, platform-independent mix.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Debug)]
pub(crate) struct KvCache {
    block_size: u32,
    blocks: Vec<Block>,
    head: u32,
    tail: u32,
    num_free: u32,
    cached: HashMap<u64, u32>,
    prefix_caching: bool,
}

impl KvCache {
    pub(crate) fn new(num_blocks: u32, block_size: u32, prefix_caching: bool) -> KvCache {
        let mut cache = KvCache {
            block_size,
            blocks: vec![Block { hash: NO_HASH, ref_count: 0, prev: NONE, next: NONE }; num_blocks as usize],
            head: NONE,
            tail: NONE,
            num_free: 0,
            cached: HashMap::new(),
            prefix_caching,
        };
        for b in 0..num_blocks {
            cache.push_back(b);
        }
        cache
    }

    pub(crate) fn num_blocks(&self) -> u32 {
        self.blocks.len() as u32
    }

    #[cfg(test)]
    pub(crate) fn num_free(&self) -> u32 {
        self.num_free
    }

    pub(crate) fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Leading blocks of `hashes` present in the cache (at most `max_blocks`),
    /// appended to `hits`.
    pub(crate) fn find_cached(&self, hashes: &[u64], max_blocks: usize, hits: &mut Vec<u32>) {
        if !self.prefix_caching {
            return;
        }
        for h in hashes.iter().take(max_blocks) {
            match self.cached.get(h) {
                Some(&b) => hits.push(b),
                None => break,
            }
        }
    }

    /// Makes `seq` hold blocks for `num_tokens` tokens, first claiming the
    /// prefix-cache `hits` (only when `seq` holds nothing yet). All or
    /// nothing: false, with nothing changed, when the free queue is too short.
    /// Full blocks covered by `hashes` are then registered for reuse.
    #[inline]
    pub(crate) fn allocate(&mut self, seq: &mut SeqBlocks, hashes: &[u64], hits: &[u32], num_tokens: u32) -> bool {
        // Fast path, taken by most decode steps: the last block has room and
        // there is nothing new to register.
        if hits.is_empty()
            && num_tokens as usize <= seq.blocks.len() * self.block_size as usize
            && (!self.prefix_caching || seq.num_hashed >= hashes.len())
        {
            return true;
        }
        self.allocate_blocks(seq, hashes, hits, num_tokens)
    }

    fn allocate_blocks(&mut self, seq: &mut SeqBlocks, hashes: &[u64], hits: &[u32], num_tokens: u32) -> bool {
        let wanted = num_tokens.div_ceil(self.block_size) as usize;
        let new = wanted.saturating_sub(seq.blocks.len() + hits.len());
        let hits_in_free_queue = hits.iter().filter(|&&b| self.blocks[b as usize].ref_count == 0).count();
        if new + hits_in_free_queue > self.num_free as usize {
            return false;
        }
        for &b in hits {
            if self.blocks[b as usize].ref_count == 0 {
                self.unlink(b);
            }
            self.blocks[b as usize].ref_count += 1;
            seq.blocks.push(b);
        }
        seq.num_hashed = seq.num_hashed.max(seq.blocks.len());
        for _ in 0..new {
            let b = self.head;
            self.unlink(b);
            let block = &mut self.blocks[b as usize];
            let h = std::mem::replace(&mut block.hash, NO_HASH);
            block.ref_count = 1;
            if h != NO_HASH && self.cached.get(&h) == Some(&b) {
                self.cached.remove(&h);
            }
            seq.blocks.push(b);
        }
        if self.prefix_caching {
            let full = ((num_tokens / self.block_size) as usize).min(hashes.len());
            let start = seq.num_hashed.min(full);
            for (&b, &h) in seq.blocks[start..full].iter().zip(&hashes[start..full]) {
                self.blocks[b as usize].hash = h;
                self.cached.entry(h).or_insert(b);
            }
            seq.num_hashed = seq.num_hashed.max(full);
        }
        true
    }

    /// Releases every block of `seq`, last block first.
    pub(crate) fn free(&mut self, seq: &mut SeqBlocks) {
        for &b in seq.blocks.iter().rev() {
            let rc = &mut self.blocks[b as usize].ref_count;
            *rc -= 1;
            if *rc == 0 {
                self.push_back(b);
            }
        }
        seq.blocks.clear();
        seq.num_hashed = 0;
    }

    /// Checks that referenced + free = total and that the free queue holds
    /// exactly the unreferenced blocks. For tests.
    pub(crate) fn check(&self) -> Result<(), String> {
        let referenced = self.blocks.iter().filter(|b| b.ref_count > 0).count() as u32;
        if referenced + self.num_free != self.num_blocks() {
            return Err(format!("{referenced} referenced + {} free != {} blocks", self.num_free, self.num_blocks()));
        }
        let (mut walked, mut b) = (0, self.head);
        while b != NONE {
            if self.blocks[b as usize].ref_count != 0 {
                return Err(format!("block {b} is referenced but in the free queue"));
            }
            walked += 1;
            b = self.blocks[b as usize].next;
        }
        if walked != self.num_free {
            return Err(format!("free queue holds {walked} blocks, counter says {}", self.num_free));
        }
        Ok(())
    }

    fn push_back(&mut self, b: u32) {
        self.blocks[b as usize].prev = self.tail;
        self.blocks[b as usize].next = NONE;
        if self.tail == NONE {
            self.head = b;
        } else {
            self.blocks[self.tail as usize].next = b;
        }
        self.tail = b;
        self.num_free += 1;
    }

    fn unlink(&mut self, b: u32) {
        let (p, n) = (self.blocks[b as usize].prev, self.blocks[b as usize].next);
        if p == NONE {
            self.head = n;
        } else {
            self.blocks[p as usize].next = n;
        }
        if n == NONE {
            self.tail = p;
        } else {
            self.blocks[n as usize].prev = p;
        }
        self.blocks[b as usize].prev = NONE;
        self.blocks[b as usize].next = NONE;
        self.num_free -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(tokens: std::ops::Range<u32>) -> Vec<u64> {
        let mut out = Vec::new();
        block_hashes(tokens, 4, &mut out);
        out
    }

    #[test]
    fn shared_prefix_is_hit_after_the_owner_frees_it() {
        let mut kv = KvCache::new(8, 4, true);
        let h = hashes(0..10);
        assert_eq!(h.len(), 2);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &h, &[], 10));
        assert_eq!(kv.num_free(), 5);
        kv.free(&mut a);
        kv.check().unwrap();
        let mut hits = Vec::new();
        kv.find_cached(&h, 2, &mut hits);
        assert_eq!(hits.len(), 2);
        let mut b = SeqBlocks::default();
        assert!(kv.allocate(&mut b, &h, &hits, 10));
        assert_eq!(kv.num_free(), 5);
        kv.check().unwrap();
    }

    #[test]
    fn allocation_is_all_or_nothing_and_evicts_lru_first() {
        let mut kv = KvCache::new(3, 4, true);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &hashes(0..8), &[], 8));
        let mut b = SeqBlocks::default();
        assert!(!kv.allocate(&mut b, &[], &[], 12));
        assert_eq!(kv.num_free(), 1);
        kv.free(&mut a);
        // Taking two fresh blocks evicts the free block first, then a's last block.
        assert!(kv.allocate(&mut b, &[], &[], 8));
        let mut hits = Vec::new();
        kv.find_cached(&hashes(0..8), 2, &mut hits);
        assert_eq!(hits.len(), 1);
        kv.check().unwrap();
    }

    #[test]
    fn disabled_prefix_caching_never_hits() {
        let mut kv = KvCache::new(4, 4, false);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &hashes(0..8), &[], 8));
        kv.free(&mut a);
        let mut hits = Vec::new();
        kv.find_cached(&hashes(0..8), 2, &mut hits);
        assert!(hits.is_empty());
    }
}
