//! The CPU tier of KV offload: a bounded set of block hashes in host memory,
//! evicted least recently used first, as vLLM 0.15.1's
//! `LRUOffloadingManager` (`v1/kv_offload/lru_manager.py`) keeps them: a
//! lookup counts the leading hashes present, a touch moves hashes to the
//! most recently used end (last hash touched first, so a prompt's first
//! block ends up the most recent), a store of a hash already held is
//! skipped, and storing into a full tier evicts from the LRU end.
//!
//! vLLM also pins blocks being loaded (`ref_cnt`) so a store cannot evict
//! them mid-read; here a load's blocks were just touched by its lookup, so
//! they sit at the most recent end, and the tier holds no data to corrupt.
//!
//! An intrusive doubly linked list over a slab keeps every operation O(1)
//! with no allocation once the tier is full.

use crate::hash::BlockMap;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Node {
    hash: u64,
    prev: u32,
    next: u32,
}

/// A bounded LRU set of block hashes.
#[derive(Debug)]
pub(crate) struct CpuTier {
    capacity: u32,
    nodes: Vec<Node>,
    index: BlockMap<u32>,
    /// Least recently used end.
    head: u32,
    /// Most recently used end.
    tail: u32,
    /// Blocks evicted to make room (their nodes are reused in place).
    evictions: u64,
}

impl CpuTier {
    /// A tier of `capacity` blocks (0: it holds nothing).
    pub(crate) fn new(capacity: u32) -> CpuTier {
        CpuTier { capacity, nodes: Vec::new(), index: BlockMap::default(), head: NIL, tail: NIL, evictions: 0 }
    }

    #[cfg(test)]
    /// Blocks held now.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    #[cfg(test)]
    /// Blocks evicted so far to make room.
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions
    }

    pub(crate) fn contains(&self, hash: u64) -> bool {
        self.index.contains_key(&hash)
    }

    /// How many leading hashes of `hashes` the tier holds.
    #[cfg(test)]
    pub(crate) fn lookup(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|h| self.index.contains_key(h)).count()
    }

    /// Moves every held hash of `hashes` to the most recent end, the last
    /// one first (`touch` walks them reversed).
    pub(crate) fn touch(&mut self, hashes: &[u64]) {
        for h in hashes.iter().rev() {
            if let Some(&i) = self.index.get(h) {
                self.unlink(i);
                self.push_back(i);
            }
        }
    }

    /// Stores `hash` (`prepare_store` + `complete_store`): true when it was
    /// not held. A full tier evicts its least recently used block first.
    pub(crate) fn store(&mut self, hash: u64) -> bool {
        self.store_evicting(hash).0
    }

    /// As [`CpuTier::store`], also giving the hash evicted to make room (a
    /// tier below takes it).
    pub(crate) fn store_evicting(&mut self, hash: u64) -> (bool, Option<u64>) {
        if self.capacity == 0 || self.index.contains_key(&hash) {
            return (false, None);
        }
        let mut evicted = None;
        let i = if self.index.len() as u32 >= self.capacity {
            // Reuse the evicted block's node in place.
            let i = self.head;
            self.unlink(i);
            let old = self.nodes[i as usize].hash;
            self.index.remove(&old);
            evicted = Some(old);
            self.evictions += 1;
            self.nodes[i as usize].hash = hash;
            i
        } else {
            self.nodes.push(Node { hash, prev: NIL, next: NIL });
            self.nodes.len() as u32 - 1
        };
        self.index.insert(hash, i);
        self.push_back(i);
        (true, evicted)
    }

    fn unlink(&mut self, i: u32) {
        let Node { prev, next, .. } = self.nodes[i as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
    }

    fn push_back(&mut self, i: u32) {
        self.nodes[i as usize].prev = self.tail;
        self.nodes[i as usize].next = NIL;
        if self.tail == NIL {
            self.head = i;
        } else {
            self.nodes[self.tail as usize].next = i;
        }
        self.tail = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_holds_and_the_least_recently_used_block_goes_first() {
        let mut tier = CpuTier::new(3);
        for h in 1..=3 {
            assert!(tier.store(h));
        }
        assert!(!tier.store(2), "a block held is not stored twice");
        assert_eq!(tier.store_evicting(2), (false, None));
        // Touch 1: the LRU order becomes 2, 3, 1.
        tier.touch(&[1]);
        assert_eq!(tier.store_evicting(4), (true, Some(2)));
        assert_eq!(tier.len(), 3);
        assert!(!tier.contains(2) && tier.contains(1) && tier.contains(3) && tier.contains(4));
        assert_eq!(tier.evictions(), 1);
        for h in 10..100 {
            tier.store(h);
            assert!(tier.len() <= 3);
        }
        assert_eq!(tier.lookup(&[97, 98, 99]), 3);
        assert_eq!(tier.lookup(&[97, 5, 99]), 1);
    }

    #[test]
    fn touch_walks_a_prompt_backwards_so_its_first_block_is_kept_longest() {
        let mut tier = CpuTier::new(3);
        for h in [1, 2, 3] {
            tier.store(h);
        }
        tier.touch(&[1, 2, 3]);
        // Order now 3, 2, 1 (1 most recent): storing 4 evicts 3.
        tier.store(4);
        assert_eq!(tier.lookup(&[1, 2]), 2);
        assert!(!tier.contains(3));
    }

    #[test]
    fn a_tier_of_no_blocks_holds_nothing() {
        let mut tier = CpuTier::new(0);
        assert!(!tier.store(1));
        assert_eq!(tier.lookup(&[1]), 0);
    }
}
