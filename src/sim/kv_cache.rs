//! Paged KV cache with automatic prefix caching, after vLLM V1's
//! `block_pool.py`, `kv_cache_manager.py` and `single_type_kv_cache_manager.py`.
//!
//! Blocks hold `block_size` tokens. A full block whose tokens are known is
//! identified by a hash chained over every token before it, and registered in
//! a hash → blocks map as soon as it is full, whichever step filled it (a
//! prefill chunk, or decodes). Two requests computing the same prefix at the
//! same time register two blocks under one hash; lookups return the first
//! still registered (vLLM's `BlockHashToBlockMap` does not de-duplicate).
//!
//! The free queue: new blocks are taken from the head, evicting the hash they
//! carried. A request's blocks are freed last block first. Freed blocks that
//! carry a hash go to the tail, so they can still be hit until they are
//! reused (LRU); blocks without one go to the head when
//! `free_uncached_blocks_first` is set (vLLM ≥ 0.28: `block_pool.py`
//! `free_blocks`, "LIFO reuse of non-cached blocks"), else to the tail too.
//!
//! Until the first block gets a hash the free blocks are a stack instead,
//! and no block's metadata is kept (see `KvCache::pool`).
//!
//! Invariant, checked by [`KvCache::check`]: every block is either referenced
//! (`ref_count > 0`) or in the free queue, never both.

use crate::hash::{BlockMap, mix};
use crate::workload::PromptBlocks;

mod groups;

pub use groups::KvGroupKind;
use groups::WindowRules;

const NONE: u32 = u32::MAX;
/// The free queue's virtual node standing for every block never used yet
/// (`blocks.len()..num_blocks`): block metadata is allocated when a block is
/// first taken, so memory follows the blocks a run uses, not the capacity a
/// scenario declares (a tiny model on a big GPU has billions of blocks).
const FRESH: u32 = u32::MAX - 1;
/// `Block::hash` of a block that is not in the prefix cache. A real hash that
/// happens to be 0 is stored as 1 (see [`block_hashes`]).
const NO_HASH: u64 = 0;

/// `Block::next` of a block out of the free queue: its `prev` is then the
/// number of requests holding it.
const HELD: u32 = u32::MAX - 2;

/// One block's metadata, kept together so touching a block costs one cache
/// line: the free queue, reference counts and hashes are all walked at
/// random block indices. 16 bytes, four to a line: a block is either in
/// the free queue (its links) or held (its reference count), never both, so
/// the two share a field (at 24 bytes, a 20k Mooncake run's blocks touched
/// in queue order missed a 1 MiB cache 6 % more often: cachegrind).
#[derive(Debug, Clone, Copy)]
struct Block {
    hash: u64,
    /// The free queue's previous block, or the reference count when `next`
    /// is [`HELD`].
    prev: u32,
    /// The free queue's next block, or [`HELD`].
    next: u32,
}

impl Block {
    /// Requests holding it; 0 in the free queue.
    #[inline]
    fn ref_count(&self) -> u32 {
        if self.next == HELD { self.prev } else { 0 }
    }

    /// Out of the free queue, held by `n` requests (0 only on its way to
    /// a holder or back to the queue).
    #[inline]
    fn hold(&mut self, n: u32) {
        self.prev = n;
        self.next = HELD;
    }
}

/// What decides whether a request's blocks already hold a step's tokens
/// ([`KvCache::room`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Room {
    block_size: u32,
    prefix_caching: bool,
    hash_lookahead: u32,
    /// KV cache groups ([`KvCache::hybrid`]): every allocation takes the
    /// general path (a window may free blocks at any step).
    hybrid: bool,
}

impl Room {
    /// The fast path of [`KvCache::allocate`] without hits, taken by most
    /// decode steps: the last block has room for `num_tokens` and there is
    /// nothing new to register.
    #[inline]
    pub(crate) fn fits(self, seq: &SeqBlocks, hashes: &[u64], num_tokens: u32, known: u32) -> bool {
        !self.hybrid
            && num_tokens as usize <= seq.blocks.len() * self.block_size as usize
            && (!self.prefix_caching
                || seq.all_hashed(hashes)
                || seq.num_hashed as usize
                    >= self.num_full(hashes, num_tokens.min(known.saturating_sub(self.hash_lookahead))))
    }

    /// Whether `seq` has every block with a hash registered (always, without
    /// prefix caching): [`KvCache::registered_all`].
    #[inline]
    pub(crate) fn registered_all(self, seq: &SeqBlocks, hashes: &[u64]) -> bool {
        !self.prefix_caching || (!self.hybrid && seq.all_hashed(hashes))
    }

    /// Full blocks within `tokens` that have a hash.
    fn num_full(self, hashes: &[u64], tokens: u32) -> usize {
        ((tokens / self.block_size) as usize).min(hashes.len())
    }
}

/// The blocks one request holds, in sequence order.
#[derive(Debug, Default)]
pub(crate) struct SeqBlocks {
    pub(crate) blocks: Vec<u32>,
    /// How many leading blocks have been registered in the prefix cache (or
    /// were claimed from it): vLLM's `num_cached_block[request]`.
    num_hashed: u32,
    /// How many block hashes the request has (the length of the `hashes`
    /// passed with it, which never changes): the fast paths compare the two
    /// counts here, in the cache line the engine's step reads, instead of
    /// reading the hashes' own header (a second line a running request a
    /// step).
    num_hashes: u32,
}

impl SeqBlocks {
    /// Room for `blocks` blocks, allocated once: a request's block list
    /// never outgrows what its whole sequence needs; `hashes` block hashes.
    pub(crate) fn with_capacity(blocks: usize, hashes: usize) -> SeqBlocks {
        SeqBlocks { blocks: Vec::with_capacity(blocks), num_hashed: 0, num_hashes: hashes as u32 }
    }

    /// Every block with a hash is registered (or none has one).
    #[inline]
    fn all_hashed(&self, hashes: &[u64]) -> bool {
        debug_assert_eq!(self.num_hashes as usize, hashes.len(), "a request's hashes are fixed");
        self.num_hashed >= self.num_hashes
    }
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

/// [`block_hashes`] for the first `len` tokens of a prompt given as block
/// identities whose blocks hold a whole number of cache blocks
/// (`blocks.block_tokens` a multiple of `block_size`): each full cache block
/// is chained on its identity and its place in it instead of on its stand-in
/// token ids ([`PromptBlocks::tokens`]). The equalities are the same — two
/// prompts share a block's hash exactly where they share every identity up to
/// that block, since the stand-in ids are a function of them — for two mixes
/// a cache block instead of two per token (a 100k Mooncake run spent ~20 % of
/// its time generating and chaining stand-in ids). The hash values differ
/// from the token path's, which is harmless: a run's prompts all come from
/// one source, and hashes are compared, never ordered or written.
pub(crate) fn prompt_block_hashes(blocks: &PromptBlocks, len: u32, block_size: u32, out: &mut Vec<u64>) {
    debug_assert!(blocks.block_tokens > 0 && blocks.block_tokens.is_multiple_of(block_size), "whole cache blocks");
    let per = blocks.block_tokens / block_size;
    let mut hash: u64 = 0x243F_6A88_85A3_08D3; // block_hashes's seed
    for k in 0..len / block_size {
        // Past the identities given, the stand-in tokens' id (u64::MAX).
        let id = blocks.ids.get((k / per) as usize).copied().unwrap_or(u64::MAX);
        hash = mix(mix(hash ^ id) ^ u64::from(k % per));
        out.push(if hash == NO_HASH { 1 } else { hash });
    }
}

/// Hashes of the full blocks of a token sequence, each covering its block
/// and the one token after it, as vLLM 0.33's block hasher does for EAGLE
/// (`num_hash_lookahead_tokens` = 1, PR #50897: the drafter's cached state of
/// a block depends on the next token): a block matches only where that token
/// matches too, and the sequence's last full block has no hash until the
/// token after it exists. The chain itself is [`block_hashes`]'s.
pub(crate) fn block_hashes_with_next(tokens: impl Iterator<Item = u32>, block_size: u32, out: &mut Vec<u64>) {
    let mut hash: u64 = 0x243F_6A88_85A3_08D3; // seed: digits of pi
    let mut in_block = 0;
    let mut pending = None;
    for token in tokens {
        if let Some(h) = pending.take() {
            let with_next = mix(mix(h) ^ u64::from(token));
            out.push(if with_next == NO_HASH { 1 } else { with_next });
        }
        hash = mix(hash ^ u64::from(token));
        in_block += 1;
        if in_block == block_size {
            pending = Some(hash);
            in_block = 0;
        }
    }
}

#[derive(Debug)]
pub(crate) struct KvCache {
    block_size: u32,
    num_blocks: u32,
    /// Metadata of the blocks taken at least once: `0..blocks.len()`.
    blocks: Vec<Block>,
    /// `(prev, next)` of the [`FRESH`] node while it is in the free queue.
    fresh_links: (u32, u32),
    head: u32,
    tail: u32,
    num_free: u32,
    /// The first block registered under each hash (the one lookups return).
    cached: BlockMap<u32>,
    /// Later blocks registered under a hash already in `cached`, in
    /// registration order. Rare: only concurrent prefills of one prefix.
    duplicates: BlockMap<Vec<u32>>,
    prefix_caching: bool,
    free_uncached_first: bool,
    /// Scratch for [`KvCache::free`]: freed blocks without a hash.
    uncached: Vec<u32>,
    /// Until the first block gets a hash, the free blocks other than the
    /// never-used ones, as a stack (`pooled`): with no hash anywhere the
    /// queue's order only names which block is taken, never what is found
    /// or evicted, so the block freed last is taken first, its metadata
    /// still in cache. And with no hash no block is shared (a second
    /// reference comes only from a prefix hit): each block taken is held by
    /// one request, so its metadata is not kept, neither its reference
    /// count nor its hash (`Block` is written only when the pool joins the
    /// queue). In queue order, touching each block's metadata, a run
    /// reached every block of the cache before reusing one (8 replicas'
    /// blocks, 5 MB of metadata, missed L2 at every allocation and free).
    /// At the first hash the stack joins the queue, and the queue is used
    /// from then on.
    pool: Vec<u32>,
    pooled: bool,
    /// When a router keeps its own (stale) copy of the prefix index: each
    /// hash that became findable (`true`) or stopped being (`false`), in
    /// order, as vLLM's KV events (`BlockStored`, `BlockRemoved`) report them.
    events: Option<Vec<(u64, bool)>>,
    /// KV offload's write-back: hashes that left the prefix cache (their
    /// block reused), in order, until drained.
    evicted: Option<Vec<u64>>,
    /// Tokens after a block its hash covers ([`block_hashes_with_next`]): a
    /// block is registered only once they are known.
    hash_lookahead: u32,
    /// The KV cache groups when there is more than one full-attention group
    /// (`groups.rs`); empty: one full-attention group.
    groups: Box<[KvGroupKind]>,
    /// The window groups' release-dependent rules (`groups.rs`).
    window_rules: WindowRules,
}

impl KvCache {
    #[cfg(test)]
    pub(crate) fn new(num_blocks: u32, block_size: u32, prefix_caching: bool, free_uncached_first: bool) -> KvCache {
        KvCache::with_groups(num_blocks, block_size, prefix_caching, free_uncached_first, &[])
    }

    /// A cache of KV cache `groups` sharing one pool of `num_blocks` blocks
    /// (`groups.rs`); none, or one full-attention group: [`KvCache::new`].
    pub(crate) fn with_groups(
        num_blocks: u32,
        block_size: u32,
        prefix_caching: bool,
        free_uncached_first: bool,
        groups: &[KvGroupKind],
    ) -> KvCache {
        let fresh = num_blocks > 0;
        let groups: Box<[KvGroupKind]> = if groups == [KvGroupKind::Full] { Box::new([]) } else { groups.into() };
        KvCache {
            block_size,
            num_blocks,
            blocks: Vec::new(),
            fresh_links: (NONE, NONE),
            head: if fresh { FRESH } else { NONE },
            tail: if fresh { FRESH } else { NONE },
            num_free: num_blocks,
            cached: BlockMap::default(),
            duplicates: BlockMap::default(),
            prefix_caching,
            free_uncached_first,
            uncached: Vec::new(),
            pool: Vec::new(),
            // With groups a window frees blocks while its request runs:
            // the pool's one-holder shortcut does not hold.
            pooled: groups.is_empty(),
            events: None,
            evicted: None,
            hash_lookahead: 0,
            groups,
            window_rules: WindowRules::default(),
        }
    }

    /// Block hashes cover `tokens` tokens after their block
    /// ([`block_hashes_with_next`]).
    pub(crate) fn set_hash_lookahead(&mut self, tokens: u32) {
        self.hash_lookahead = tokens;
    }

    /// Tokens after a block its hash covers.
    pub(crate) fn hash_lookahead(&self) -> u32 {
        self.hash_lookahead
    }

    /// Starts recording prefix-index events (see [`KvCache::take_events`]).
    pub(crate) fn record_events(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// Starts recording evicted hashes (see [`KvCache::drain_evictions`]).
    pub(crate) fn record_evictions(&mut self) {
        self.evicted.get_or_insert_with(Vec::new);
    }

    /// Hands each hash evicted since the last call to `f`, oldest first.
    pub(crate) fn drain_evictions(&mut self, mut f: impl FnMut(u64)) {
        if let Some(evicted) = &mut self.evicted {
            evicted.drain(..).for_each(&mut f);
        }
    }

    /// The prefix-index events since the last call, oldest first.
    pub(crate) fn take_events(&mut self, out: &mut Vec<(u64, bool)>) {
        if let Some(events) = &mut self.events {
            out.append(events);
        }
    }

    /// How many leading blocks of `hashes` the prefix cache holds now.
    pub(crate) fn cached_prefix(&self, hashes: &[u64]) -> usize {
        if !self.prefix_caching {
            return 0;
        }
        if self.hybrid() {
            return self.find_cached_groups(hashes, hashes.len(), &mut Vec::new());
        }
        hashes.iter().take_while(|h| self.cached.contains_key(h)).count()
    }

    pub(crate) fn num_blocks(&self) -> u32 {
        self.num_blocks
    }

    /// Blocks referenced by requests (not in the free queue).
    pub(crate) fn num_used(&self) -> u32 {
        self.num_blocks() - self.num_free
    }

    pub(crate) fn num_free(&self) -> u32 {
        self.num_free
    }

    /// No block has had a hash yet: every free block is interchangeable
    /// (`pooled`), so which request takes which changes nothing.
    pub(crate) fn pooled(&self) -> bool {
        self.pooled
    }

    /// One more block for `seq`, while [`KvCache::pooled`] (so nothing to
    /// register or evict): [`KvCache::allocate`] for a decode at a block
    /// boundary, without its general bookkeeping. False when none is free.
    pub(crate) fn take_pooled(&mut self, seq: &mut SeqBlocks) -> bool {
        debug_assert!(self.pooled, "only before any hash");
        if self.num_free == 0 {
            return false;
        }
        seq.blocks.push(self.pop_front());
        true
    }

    pub(crate) fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Leading blocks of `hashes` present in the cache (at most `max_blocks`),
    /// appended to `hits` (with groups, each position's block of every
    /// group: `groups.rs`). Returns the block positions hit.
    pub(crate) fn find_cached(&self, hashes: &[u64], max_blocks: usize, hits: &mut Vec<u32>) -> usize {
        if !self.prefix_caching {
            return 0;
        }
        if self.hybrid() {
            return self.find_cached_groups(hashes, max_blocks, hits);
        }
        let before = hits.len();
        for h in hashes.iter().take(max_blocks) {
            match self.cached.get(h) {
                Some(&b) => hits.push(b),
                None => break,
            }
        }
        hits.len() - before
    }

    /// Whether a request holding nothing, with prefix-cache `hits`, could get
    /// blocks for all of its `num_tokens` now: vLLM ≥ 0.19's admission gate
    /// (`kv_cache_manager.py` `allocate_slots(full_sequence_must_fit=True)`),
    /// which counts hit blocks still in the free queue as taken.
    pub(crate) fn fits(&self, hits: &[u32], num_tokens: u32) -> bool {
        if self.hybrid() {
            return self.fits_groups(hits, num_tokens);
        }
        let wanted = num_tokens.div_ceil(self.block_size) as usize;
        let new = wanted.saturating_sub(hits.len());
        let hits_in_free_queue = hits.iter().filter(|&&b| self.blocks[b as usize].ref_count() == 0).count();
        new + hits_in_free_queue <= self.num_free as usize
    }

    /// Makes `seq` hold blocks for `num_tokens` tokens, first claiming the
    /// prefix-cache `hits` (only when `seq` holds nothing yet). All or
    /// nothing: false, with nothing changed, when the free queue is too short.
    /// Then every block full within the first `known` tokens is registered
    /// for reuse (vLLM caches `min(computed + new, request.num_tokens)`:
    /// tokens not sampled yet have no hash).
    #[inline]
    pub(crate) fn allocate(
        &mut self,
        seq: &mut SeqBlocks,
        hashes: &[u64],
        hits: &[u32],
        num_tokens: u32,
        known: u32,
    ) -> bool {
        if hits.is_empty() && self.room().fits(seq, hashes, num_tokens, known) {
            return true;
        }
        self.allocate_blocks(seq, hashes, hits, num_tokens, known)
    }

    /// The settings [`Room::fits`] reads, copied out: a loop over the
    /// running requests keeps them in registers instead of reloading them
    /// through the cache after every store to a request.
    #[inline]
    pub(crate) fn room(&self) -> Room {
        Room {
            block_size: self.block_size,
            prefix_caching: self.prefix_caching,
            hash_lookahead: self.hash_lookahead,
            hybrid: self.hybrid(),
        }
    }

    /// Full blocks within `tokens` that have a hash.
    fn num_full(&self, hashes: &[u64], tokens: u32) -> usize {
        self.room().num_full(hashes, tokens)
    }

    fn allocate_blocks(
        &mut self,
        seq: &mut SeqBlocks,
        hashes: &[u64],
        hits: &[u32],
        num_tokens: u32,
        known: u32,
    ) -> bool {
        if self.hybrid() {
            return self.allocate_groups(seq, hashes, hits, num_tokens, known);
        }
        // (A `SeqBlocks::default()` learns its hashes here, at its first
        // allocation, before any fast path can read the count.)
        seq.num_hashes = hashes.len() as u32;
        let wanted = num_tokens.div_ceil(self.block_size) as usize;
        let new = wanted.saturating_sub(seq.blocks.len() + hits.len());
        let hits_in_free_queue = hits.iter().filter(|&&b| self.blocks[b as usize].ref_count() == 0).count();
        if new + hits_in_free_queue > self.num_free as usize {
            return false;
        }
        for &b in hits {
            if self.blocks[b as usize].ref_count() == 0 {
                self.unlink(b);
            }
            let held = self.blocks[b as usize].ref_count();
            self.blocks[b as usize].hold(held + 1);
            seq.blocks.push(b);
        }
        // Hit blocks are registered already. Only hits advance the count
        // here: a partly filled last block is registered when it fills up.
        if !hits.is_empty() {
            seq.num_hashed = seq.blocks.len() as u32;
        }
        debug_assert!(!self.pooled || hits.is_empty(), "a hit before any hash");
        for _ in 0..new {
            let b = self.pop_front();
            if self.pooled {
                // No hash to drop, and a reference count of 1 is implied
                // (see `pool`): the block's metadata is not touched.
                seq.blocks.push(b);
                continue;
            }
            let block = &mut self.blocks[b as usize];
            let h = std::mem::replace(&mut block.hash, NO_HASH);
            block.hold(1);
            if h != NO_HASH {
                self.unregister(h, b);
            }
            seq.blocks.push(b);
        }
        self.register(seq, hashes, num_tokens.min(known.saturating_sub(self.hash_lookahead)));
        true
    }

    /// Whether [`KvCache::register`] has nothing to do for `seq`, whatever
    /// its tokens: a caller may skip working out how many it has.
    #[inline]
    pub(crate) fn registered_all(&self, seq: &SeqBlocks, hashes: &[u64]) -> bool {
        self.room().registered_all(seq, hashes)
    }

    /// Registers every block of `seq` full within its first `tokens` tokens
    /// that is not registered yet (vLLM's `cache_blocks`).
    #[inline]
    pub(crate) fn register(&mut self, seq: &mut SeqBlocks, hashes: &[u64], tokens: u32) {
        // Every block with a hash is registered already (always, for a
        // request without token ids): the common case, kept out of line.
        if self.registered_all(seq, hashes) {
            return;
        }
        self.register_blocks(seq, hashes, tokens);
    }

    fn register_blocks(&mut self, seq: &mut SeqBlocks, hashes: &[u64], tokens: u32) {
        if self.hybrid() {
            return self.register_groups(seq, hashes, tokens);
        }
        if self.pooled {
            self.leave_pool();
        }
        let full = self.num_full(hashes, tokens).min(seq.blocks.len());
        let start = (seq.num_hashed as usize).min(full);
        for (&b, &h) in seq.blocks[start..full].iter().zip(&hashes[start..full]) {
            self.register_block(b, h);
        }
        seq.num_hashed = seq.num_hashed.max(full as u32);
    }

    /// Block `b` is findable under `h` from now on.
    fn register_block(&mut self, b: u32, h: u64) {
        self.blocks[b as usize].hash = h;
        match self.cached.entry(h) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(b);
                if let Some(events) = &mut self.events {
                    events.push((h, true));
                }
            }
            std::collections::hash_map::Entry::Occupied(_) => self.duplicates.entry(h).or_default().push(b),
        }
    }

    /// Block `b`, registered under `h`, is reused for new tokens: it leaves
    /// the prefix cache; the next block registered under `h`, if any, is
    /// the one found from now on.
    fn unregister(&mut self, h: u64, b: u32) {
        if self.cached.get(&h) == Some(&b) {
            match self.duplicates.get_mut(&h) {
                Some(dups) => {
                    let next = dups.remove(0);
                    if dups.is_empty() {
                        self.duplicates.remove(&h);
                    }
                    self.cached.insert(h, next);
                }
                None => {
                    self.cached.remove(&h);
                    if let Some(events) = &mut self.events {
                        events.push((h, false));
                    }
                    if let Some(evicted) = &mut self.evicted {
                        evicted.push(h);
                    }
                }
            }
        } else if let Some(dups) = self.duplicates.get_mut(&h) {
            dups.retain(|&d| d != b);
            if dups.is_empty() {
                self.duplicates.remove(&h);
            }
        }
    }

    /// Releases every block of `seq`, last block first. Blocks with a hash
    /// go to the tail of the free queue in that order; blocks without one to
    /// the head (keeping that order) or, without `free_uncached_first`, to
    /// the tail like the others.
    pub(crate) fn free(&mut self, seq: &mut SeqBlocks) {
        if self.hybrid() {
            return self.free_groups(seq);
        }
        if self.pooled {
            // Each block held by this request only (see `pool`).
            self.pool.extend(seq.blocks.iter().rev());
            self.num_free += seq.blocks.len() as u32;
            seq.blocks.clear();
            seq.num_hashed = 0;
            return;
        }
        self.free_blocks(seq.blocks.iter().rev().copied());
        seq.blocks.clear();
        seq.num_hashed = 0;
    }

    /// vLLM's `free_blocks` over `blocks`, in the order given: each loses a
    /// holder; one nobody holds any more goes to the free queue's tail, or,
    /// without a hash and with `free_uncached_first`, to its head (those
    /// keeping their order).
    fn free_blocks(&mut self, blocks: impl Iterator<Item = u32>) {
        let mut uncached = std::mem::take(&mut self.uncached);
        for b in blocks {
            let block = &mut self.blocks[b as usize];
            let held = block.ref_count() - 1;
            if held > 0 {
                block.hold(held);
                continue;
            }
            if self.free_uncached_first && (block.hash == NO_HASH || !self.prefix_caching) {
                uncached.push(b);
            } else {
                self.push_back(b);
            }
        }
        for &b in uncached.iter().rev() {
            self.push_front(b);
        }
        uncached.clear();
        self.uncached = uncached;
    }

    /// Checks that referenced + free = total and that the free queue holds
    /// exactly the unreferenced blocks. For tests.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.pooled {
            return self.check_pool();
        }
        let referenced = self.blocks.iter().filter(|b| b.ref_count() > 0).count() as u32;
        if referenced + self.num_free != self.num_blocks() {
            return Err(format!("{referenced} referenced + {} free != {} blocks", self.num_free, self.num_blocks()));
        }
        if !self.pool.is_empty() {
            return Err("blocks left in the pool after it joined the queue".into());
        }
        let (mut walked, mut b) = (0, self.head);
        while b != NONE {
            // (A block in the queue has links, not a count: never both.)
            walked += if b == FRESH { self.num_blocks - self.blocks.len() as u32 } else { 1 };
            b = self.next_of(b);
        }
        if walked != self.num_free {
            return Err(format!("free queue holds {walked} blocks, counter says {}", self.num_free));
        }
        Ok(())
    }

    /// [`KvCache::check`] before any hash: the pool holds distinct blocks
    /// taken before, and with the never-used ones makes the free count; no
    /// block has a hash.
    fn check_pool(&self) -> Result<(), String> {
        let mut seen = vec![false; self.blocks.len()];
        for &b in &self.pool {
            match seen.get_mut(b as usize) {
                Some(s) if !*s => *s = true,
                _ => return Err(format!("block {b} is in the pool twice or was never taken")),
            }
        }
        let fresh = self.num_blocks - self.blocks.len() as u32;
        if self.pool.len() as u32 + fresh != self.num_free {
            return Err(format!("{} pooled + {fresh} never used != {} free", self.pool.len(), self.num_free));
        }
        if self.blocks.iter().any(|b| b.hash != NO_HASH) || !self.cached.is_empty() {
            return Err("a hash before the pool joined the queue".into());
        }
        Ok(())
    }

    /// Takes the block at the head of the free queue (before any hash: the
    /// one freed last, else a never-used one).
    fn pop_front(&mut self) -> u32 {
        if let Some(b) = self.pool.pop() {
            self.num_free -= 1;
            return b;
        }
        if self.head != FRESH {
            let b = self.head;
            self.unlink(b);
            return b;
        }
        let b = self.blocks.len() as u32;
        self.blocks.push(Block { hash: NO_HASH, prev: 0, next: HELD });
        self.num_free -= 1;
        if b + 1 == self.num_blocks {
            // The last never-used block: the virtual node leaves the queue.
            let (p, n) = self.fresh_links;
            self.relink(p, n);
        }
        b
    }

    /// The first hash is about to be set: the pooled free blocks join the
    /// queue (behind the never-used ones; all are without a hash, so any
    /// order is the same queue up to the blocks' names).
    #[cold]
    fn leave_pool(&mut self) {
        self.pooled = false;
        let pool = std::mem::take(&mut self.pool);
        // Every block taken so far is held by one request, but those in the pool.
        for block in &mut self.blocks {
            block.hold(1);
        }
        // (Those in the pool get their links from `push_back`.)
        self.num_free -= pool.len() as u32;
        for b in pool {
            self.push_back(b);
        }
    }

    fn next_of(&self, x: u32) -> u32 {
        if x == FRESH { self.fresh_links.1 } else { self.blocks[x as usize].next }
    }

    fn set_next(&mut self, x: u32, next: u32) {
        if x == FRESH { self.fresh_links.1 = next } else { self.blocks[x as usize].next = next }
    }

    fn set_prev(&mut self, x: u32, prev: u32) {
        if x == FRESH { self.fresh_links.0 = prev } else { self.blocks[x as usize].prev = prev }
    }

    /// Joins `p` and `n` (either may be `NONE`, the queue's ends).
    fn relink(&mut self, p: u32, n: u32) {
        if p == NONE {
            self.head = n;
        } else {
            self.set_next(p, n);
        }
        if n == NONE {
            self.tail = p;
        } else {
            self.set_prev(n, p);
        }
    }

    fn push_back(&mut self, b: u32) {
        self.blocks[b as usize].prev = self.tail;
        self.blocks[b as usize].next = NONE;
        if self.tail == NONE {
            self.head = b;
        } else {
            self.set_next(self.tail, b);
        }
        self.tail = b;
        self.num_free += 1;
    }

    fn push_front(&mut self, b: u32) {
        self.blocks[b as usize].prev = NONE;
        self.blocks[b as usize].next = self.head;
        if self.head == NONE {
            self.tail = b;
        } else {
            self.set_prev(self.head, b);
        }
        self.head = b;
        self.num_free += 1;
    }

    fn unlink(&mut self, b: u32) {
        let (p, n) = (self.blocks[b as usize].prev, self.blocks[b as usize].next);
        self.relink(p, n);
        self.blocks[b as usize].hold(0);
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
        let mut kv = KvCache::new(8, 4, true, false);
        let h = hashes(0..10);
        assert_eq!(h.len(), 2);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &h, &[], 10, 10));
        assert_eq!(kv.num_free(), 5);
        kv.free(&mut a);
        kv.check().unwrap();
        let mut hits = Vec::new();
        kv.find_cached(&h, 2, &mut hits);
        assert_eq!(hits.len(), 2);
        let mut b = SeqBlocks::default();
        assert!(kv.allocate(&mut b, &h, &hits, 10, 10));
        assert_eq!(kv.num_free(), 5);
        kv.check().unwrap();
    }

    /// A block taken at a decode's boundary is the one `allocate` would
    /// give, and none is taken when none is free.
    #[test]
    fn a_pooled_block_is_taken_as_allocate_takes_it() {
        let (mut by_take, mut by_allocate) = (KvCache::new(3, 4, true, false), KvCache::new(3, 4, true, false));
        let (mut a, mut b) = (SeqBlocks::default(), SeqBlocks::default());
        assert!(by_take.allocate(&mut a, &[], &[], 4, 4));
        assert!(by_allocate.allocate(&mut b, &[], &[], 4, 4));
        for tokens in [5, 9] {
            assert!(by_take.take_pooled(&mut a));
            assert!(by_allocate.allocate(&mut b, &[], &[], tokens, tokens));
            assert_eq!((&a.blocks, by_take.num_free()), (&b.blocks, by_allocate.num_free()));
        }
        assert!(!by_take.take_pooled(&mut a));
        assert_eq!(a.blocks.len(), 3);
        by_take.free(&mut a);
        by_take.check().unwrap();
        assert_eq!(by_take.num_free(), 3);
    }

    #[test]
    fn allocation_is_all_or_nothing_and_evicts_lru_first() {
        let mut kv = KvCache::new(3, 4, true, false);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &hashes(0..8), &[], 8, 8));
        let mut b = SeqBlocks::default();
        assert!(!kv.allocate(&mut b, &[], &[], 12, 12));
        assert_eq!(kv.num_free(), 1);
        kv.free(&mut a);
        // Taking two fresh blocks evicts the free block first, then a's last block.
        assert!(kv.allocate(&mut b, &[], &[], 8, 8));
        let mut hits = Vec::new();
        kv.find_cached(&hashes(0..8), 2, &mut hits);
        assert_eq!(hits.len(), 1);
        kv.check().unwrap();
    }

    #[test]
    fn disabled_prefix_caching_never_hits() {
        let mut kv = KvCache::new(4, 4, false, false);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &hashes(0..8), &[], 8, 8));
        kv.free(&mut a);
        let mut hits = Vec::new();
        kv.find_cached(&hashes(0..8), 2, &mut hits);
        assert!(hits.is_empty());
    }

    #[test]
    fn a_block_filled_by_a_later_chunk_is_registered() {
        // D1: a prefill split inside a block (6 of 8 tokens, then the rest)
        // registers that block when the second chunk fills it, so a request
        // sharing the prefix past the split hits both blocks.
        // A request's hashes are fixed when it is added (its prompt and
        // output ids): 13 tokens, three full blocks, 9 of them known first.
        let mut kv = KvCache::new(8, 4, true, false);
        let h = hashes(0..13);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &h, &[], 6, 9));
        assert!(kv.allocate(&mut a, &h, &[], 9, 9));
        let mut hits = Vec::new();
        kv.find_cached(&h, 3, &mut hits);
        assert_eq!(hits, a.blocks[..2]);
        // Decodes fill blocks too: the third block fills at token 12.
        assert!(kv.allocate(&mut a, &h, &[], 12, 12));
        hits.clear();
        kv.find_cached(&h, 3, &mut hits);
        assert_eq!(hits.len(), 3);
        kv.check().unwrap();
    }

    #[test]
    fn every_block_registered_under_a_hash_can_be_found() {
        // D5: two requests compute the same prefix at once; when the first
        // one's copy is evicted, the second copy is still found.
        let mut kv = KvCache::new(4, 4, true, false);
        let h = hashes(0..4);
        let (mut a, mut b) = (SeqBlocks::default(), SeqBlocks::default());
        assert!(kv.allocate(&mut a, &h, &[], 4, 4));
        assert!(kv.allocate(&mut b, &h, &[], 4, 4));
        kv.free(&mut a);
        // Take every free block, evicting a's copy.
        let mut c = SeqBlocks::default();
        assert!(kv.allocate(&mut c, &[], &[], 12, 12));
        assert!(!c.blocks.contains(&b.blocks[0]));
        let mut hits = Vec::new();
        kv.find_cached(&h, 1, &mut hits);
        assert_eq!(hits, b.blocks);
        kv.check().unwrap();
    }

    #[test]
    fn uncached_blocks_are_reused_first_when_asked() {
        // D4: with free_uncached_first, a freed block without a hash goes to
        // the head of the free queue and is taken before cached ones.
        for first in [false, true] {
            let mut kv = KvCache::new(4, 4, true, first);
            let mut a = SeqBlocks::default();
            assert!(kv.allocate(&mut a, &hashes(0..6), &[], 6, 6));
            let partial = a.blocks[1];
            kv.free(&mut a);
            let mut b = SeqBlocks::default();
            assert!(kv.allocate(&mut b, &[], &[], 4, 4));
            assert_eq!(b.blocks[0] == partial, first, "free_uncached_first = {first}");
            kv.check().unwrap();
        }
    }

    #[test]
    fn a_huge_cache_allocates_only_the_blocks_it_uses() {
        // Defect 9.1: 2^32 - 2 blocks once cost 100 GB up front.
        let mut kv = KvCache::new(u32::MAX - 1, 4, true, true);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &hashes(0..10), &[], 10, 10));
        assert_eq!(kv.blocks.len(), 3);
        kv.free(&mut a);
        // Freed uncached blocks go before the never-used ones, cached ones after.
        let mut b = SeqBlocks::default();
        assert!(kv.allocate(&mut b, &[], &[], 8, 8));
        assert_eq!(b.blocks, [2, 3]);
        assert_eq!(kv.num_used(), 2);
        kv.check().unwrap();
    }

    #[test]
    fn the_last_never_used_block_leaves_the_queue() {
        let mut kv = KvCache::new(2, 4, true, false);
        let (mut a, mut b) = (SeqBlocks::default(), SeqBlocks::default());
        // A hash: the queue, not the pool, from here on.
        assert!(kv.allocate(&mut a, &hashes(0..4), &[], 4, 4));
        kv.free(&mut a);
        assert!(kv.allocate(&mut b, &[], &[], 8, 8));
        assert_eq!(b.blocks, [1, 0]);
        assert!(!kv.allocate(&mut a, &[], &[], 4, 4));
        kv.free(&mut b);
        kv.check().unwrap();
        assert_eq!(kv.num_free(), 2);
    }

    #[test]
    fn the_full_prompt_gate_counts_evictable_hits() {
        let mut kv = KvCache::new(4, 4, true, false);
        let h = hashes(0..8);
        let mut a = SeqBlocks::default();
        assert!(kv.allocate(&mut a, &h, &[], 8, 8));
        kv.free(&mut a);
        let mut hits = Vec::new();
        kv.find_cached(&h, 2, &mut hits);
        // 16 tokens = 4 blocks: 2 hits (both in the free queue) + 2 new ≤ 4 free.
        assert!(kv.fits(&hits, 16));
        assert!(!kv.fits(&hits, 17));
    }

    #[test]
    fn blocks_freed_before_any_hash_are_taken_last_freed_first_then_queue_behind_the_fresh_ones() {
        let mut kv = KvCache::new(6, 4, true, false);
        let (mut a, mut b, mut c) = (SeqBlocks::default(), SeqBlocks::default(), SeqBlocks::default());
        assert!(kv.allocate(&mut a, &[], &[], 8, 8));
        assert!(kv.allocate(&mut b, &[], &[], 4, 4));
        kv.free(&mut a);
        kv.check().unwrap();
        assert_eq!(kv.num_free(), 5);
        // The pool: block 0 was freed last (a's blocks go last first).
        assert!(kv.allocate(&mut c, &[], &[], 4, 4));
        assert_eq!(c.blocks, [0]);
        kv.free(&mut c);
        // The first hash: its block still comes from the pool, then the rest
        // of the pool (block 1) joins the queue behind the never-used 3..6,
        // and the hashed block is found after its request frees it.
        let h = hashes(0..4);
        let mut d = SeqBlocks::default();
        assert!(kv.allocate(&mut d, &h, &[], 4, 4));
        assert_eq!(d.blocks, [0]);
        kv.check().unwrap();
        kv.free(&mut d);
        kv.check().unwrap();
        assert_eq!(kv.num_free(), 5);
        let mut hits = Vec::new();
        kv.find_cached(&h, 1, &mut hits);
        assert_eq!(hits, [0]);
        let mut e = SeqBlocks::default();
        assert!(kv.allocate(&mut e, &[], &[], 16, 16));
        assert_eq!(e.blocks, [3, 4, 5, 1], "the queue: never-used blocks, then the pool's");
        kv.free(&mut e);
        kv.free(&mut b);
        kv.check().unwrap();
        assert_eq!(kv.num_free(), 6);
    }

    /// Hashing a prompt of block identities by blocks gives equal hashes
    /// exactly where hashing its stand-in token ids does: for prompts of
    /// random identities from a small set (so they share prefixes, partly or
    /// whole), random lengths (partial last blocks, ids running out) and
    /// cache blocks of 1, 4 or 8 in a prompt block.
    #[test]
    fn prompt_blocks_hash_to_the_same_equalities_as_their_tokens() {
        let mut z = 7u64;
        let mut next = |n: u64| {
            z = mix(z);
            z % n
        };
        for block_size in [4, 16, 32] {
            let prompts: Vec<(PromptBlocks, u32)> = (0..60)
                .map(|_| {
                    let ids: Vec<u64> =
                        (0..1 + next(4)).map(|k| if next(4) == 0 { 100 + k } else { next(2) }).collect();
                    let len = (next(ids.len() as u64 * 32 + 8) + 1) as u32;
                    (PromptBlocks { block_tokens: 32, ids }, len)
                })
                .collect();
            let by_blocks: Vec<Vec<u64>> = prompts
                .iter()
                .map(|(b, len)| {
                    let mut out = Vec::new();
                    prompt_block_hashes(b, *len, block_size, &mut out);
                    out
                })
                .collect();
            let by_tokens: Vec<Vec<u64>> = prompts
                .iter()
                .map(|(b, len)| {
                    let mut out = Vec::new();
                    block_hashes(b.tokens(*len), block_size, &mut out);
                    out
                })
                .collect();
            let mut shared = 0;
            for i in 0..prompts.len() {
                assert_eq!(by_blocks[i].len(), by_tokens[i].len());
                for j in 0..prompts.len() {
                    for k in 0..by_blocks[i].len().min(by_blocks[j].len()) {
                        let same = by_tokens[i][k] == by_tokens[j][k];
                        assert_eq!(by_blocks[i][k] == by_blocks[j][k], same, "prompts {i} and {j}, block {k}");
                        shared += usize::from(same && i != j);
                    }
                }
            }
            assert!(shared > 100, "the prompts share prefixes ({shared} shared blocks)");
        }
    }
}
