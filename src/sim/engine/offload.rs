//! KV offload to a CPU tier, as vLLM 0.15.1's `OffloadingConnector`
//! (`distributed/kv_transfer/kv_connector/v1/offloading_connector.py`, its
//! scheduler half, over `v1/kv_offload/lru_manager.py`) runs it:
//!
//! - **Stores.** With `policy: all` (vLLM's behaviour: `_get_reqs_to_store`
//!   offloads every full block a step computes, skipping blocks the tier
//!   holds) each full block is stored when the step computing it is
//!   scheduled. With `policy: evicted` a block is stored only when HBM
//!   evicts it (its GPU block is reused for other tokens): write-back, as
//!   SGLang's HiCache `write_back` policy does; LMCache and vLLM both write
//!   through. Stores are device-to-host copies issued after the forward on
//!   their own stream: PCIe is full duplex, so they do not delay loads (the
//!   other direction), and their link time is not modelled; a stored block
//!   can be hit from the next scheduling on.
//! - **Loads.** At admission (`get_num_new_matched_tokens`), the prompt's
//!   full blocks past the GPU prefix hit that the tier holds in a row are
//!   loaded asynchronously: the request gets its blocks and waits in
//!   `WAITING_FOR_REMOTE_KVS`, the step goes on without it. The load costs
//!   `blocks × block bytes / bandwidth` on the engine's host link; the
//!   driver queues loads on one link first come first served
//!   (`Simulation::host_load`). A load of less than one block is skipped,
//!   as vLLM's is.
//! - vLLM delays a request whose hit blocks another request is loading
//!   (`_blocks_being_loaded`); here both load them (a second read).
//! - **Disk.** vLLM 0.15.1's connector has one tier; LMCache adds a local
//!   disk below its CPU tier. With `disk_gib`, a block the CPU tier evicts
//!   is written to a disk LRU (write time not modelled); a load's run may
//!   take blocks from either tier, and a block read from disk costs its
//!   bytes over the disk's bandwidth into host memory, then over PCIe, the
//!   two not overlapped (an upper bound: LMCache pipelines them).

use super::batch::{EngineEvent, Owner};
use super::connector::{KvConnector, KvTransfer};
use super::cpu_tier::CpuTier;

/// Which blocks go to the CPU tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadPolicy {
    /// Every full block computed (vLLM's `OffloadingConnector`).
    All,
    /// Only blocks evicted from HBM (write-back, SGLang HiCache's
    /// `write_back`).
    Evicted,
}

impl OffloadPolicy {
    /// Its name in a scenario (`engine.kv_offload.policy`).
    pub fn name(self) -> &'static str {
        match self {
            OffloadPolicy::All => "all",
            OffloadPolicy::Evicted => "evicted",
        }
    }
}

/// `engine.kv_offload`, resolved: the CPU tier of one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvOffload {
    /// Blocks the CPU tier holds (of the engine's GPU block size).
    pub cpu_blocks: u32,
    /// Bytes of one block on one GPU (the model's KV bytes per token on
    /// this engine's tensor parallelism and KV dtype, times the block size):
    /// each GPU reads its own shard over its own host link, in parallel.
    pub block_bytes: u64,
    /// One GPU's host link, bytes per second, one direction.
    pub bandwidth_bytes_per_s: u64,
    /// Which blocks are stored.
    pub policy: OffloadPolicy,
    /// A local disk below the CPU tier; `None`: none.
    pub disk: Option<DiskTier>,
}

/// `engine.kv_offload.disk_gib`, resolved: a disk tier below the CPU one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskTier {
    /// Blocks it holds.
    pub blocks: u32,
    /// Its read bandwidth, bytes per second.
    pub bandwidth_bytes_per_s: u64,
}

impl KvOffload {
    /// Microseconds to load `cpu_blocks` blocks from the CPU tier and
    /// `disk_blocks` from the disk: every block over the host link, disk
    /// blocks first read into host memory; each rounded up.
    pub fn load_us(&self, cpu_blocks: u32, disk_blocks: u32) -> u64 {
        let us = |blocks: u32, bw: u64| {
            let bytes = u128::from(blocks) * u128::from(self.block_bytes);
            (bytes * 1_000_000).div_ceil(u128::from(bw.max(1))).min(u128::from(u64::MAX / 2)) as u64
        };
        let disk = self.disk.map_or(0, |d| us(disk_blocks, d.bandwidth_bytes_per_s));
        us(cpu_blocks + disk_blocks, self.bandwidth_bytes_per_s) + disk
    }
}

/// The scheduler half of vLLM's `OffloadingConnector` over a CPU LRU tier.
#[derive(Debug)]
pub(crate) struct OffloadingConnector {
    config: KvOffload,
    block_size: u32,
    tier: CpuTier,
    /// The disk tier (capacity 0 without one).
    disk: CpuTier,
    /// Of the last `matched_tokens` run, blocks only the disk holds (the
    /// engine calls `after_alloc` for the load right after it).
    matched_disk: u32,
}

impl OffloadingConnector {
    pub(crate) fn new(config: KvOffload, block_size: u32) -> OffloadingConnector {
        let disk = CpuTier::new(config.disk.map_or(0, |d| d.blocks));
        OffloadingConnector { config, block_size, tier: CpuTier::new(config.cpu_blocks), disk, matched_disk: 0 }
    }

    /// Stores `hash` in the CPU tier (what it evicts goes to the disk):
    /// 1 if it was not held there.
    fn store(&mut self, hash: u64) -> u32 {
        let (new, evicted) = self.tier.store_evicting(hash);
        if let Some(e) = evicted {
            self.disk.store(e);
        }
        u32::from(new)
    }

    /// The leading blocks of `hashes` held in either tier, and of those the
    /// ones only the disk holds.
    fn run(&self, hashes: &[u64]) -> (u32, u32) {
        let (mut hits, mut disk) = (0, 0);
        for &h in hashes {
            if self.tier.contains(h) {
                hits += 1;
            } else if self.disk.contains(h) {
                (hits, disk) = (hits + 1, disk + 1);
            } else {
                break;
            }
        }
        (hits, disk)
    }
}

impl KvConnector for OffloadingConnector {
    fn matched_tokens(
        &mut self,
        transfer: KvTransfer,
        hashes: &[u64],
        prompt_tokens: u32,
        gpu_hit_tokens: u32,
    ) -> (u32, bool) {
        if transfer != KvTransfer::Local {
            return (0, false);
        }
        let bs = self.block_size;
        // The prompt's full blocks (`request.num_tokens // block_size`), all
        // touched (`manager.touch`), then the run the tier holds past the
        // GPU hit (which is whole blocks).
        let full = ((prompt_tokens / bs) as usize).min(hashes.len());
        let hashes = &hashes[..full];
        self.tier.touch(hashes);
        if self.config.disk.is_some() {
            self.disk.touch(hashes);
        }
        self.matched_disk = 0;
        let start = (gpu_hit_tokens / bs) as usize;
        if start >= full {
            return (0, false);
        }
        let (hits, disk) = self.run(&hashes[start..]);
        self.matched_disk = disk;
        if hits == 0 { (0, false) } else { (hits * bs, true) }
    }

    fn after_alloc(&mut self, owner: Owner, slot: u32, loaded_tokens: u32, events: &mut Vec<EngineEvent>) {
        if loaded_tokens > 0 {
            let blocks = loaded_tokens / self.block_size;
            let duration_us = self.config.load_us(blocks - self.matched_disk, self.matched_disk);
            events.push(EngineEvent::HostLoad { owner, slot, duration_us });
        }
    }

    fn request_finished(&mut self, _: KvTransfer) -> bool {
        // vLLM holds a finished request's blocks until its stores complete;
        // stores take no modelled time here, so nothing is held.
        false
    }

    fn computed(&mut self, hashes: &[u64]) -> u32 {
        if self.config.policy != OffloadPolicy::All {
            return 0;
        }
        hashes.iter().map(|&h| self.store(h)).sum()
    }

    fn gpu_evicted(&mut self, hash: u64) -> u32 {
        if self.config.policy == OffloadPolicy::Evicted { self.store(hash) } else { 0 }
    }

    fn records_evictions(&self) -> bool {
        self.config.policy == OffloadPolicy::Evicted
    }

    fn held_after(&self, hashes: &[u64], gpu_blocks: usize) -> usize {
        hashes.get(gpu_blocks..).map_or(0, |rest| self.run(rest).0 as usize)
    }

    fn matched_below(&self) -> u32 {
        self.matched_disk * self.block_size
    }

    fn load_bytes(&self, tokens: u32) -> u64 {
        u64::from(tokens / self.block_size) * self.config.block_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offload(policy: OffloadPolicy, cpu_blocks: u32) -> OffloadingConnector {
        // 16-token blocks of 2 MiB (Llama-3.1-8B at 128 KiB a token, tp 1),
        // a 50 GB/s link.
        let config =
            KvOffload { cpu_blocks, block_bytes: 2 << 20, bandwidth_bytes_per_s: 50_000_000_000, policy, disk: None };
        OffloadingConnector::new(config, 16)
    }

    #[test]
    fn a_load_costs_its_bytes_over_the_link() {
        let o = offload(OffloadPolicy::All, 8);
        // 3 blocks × 2,097,152 B = 6,291,456 B at 50e9 B/s = 125.829 µs → 126.
        assert_eq!(o.config.load_us(3, 0), 126);
        assert_eq!(o.config.load_us(0, 0), 0);
    }

    #[test]
    fn the_cpu_tier_spills_to_disk_and_a_run_spans_both() {
        let mut o = offload(OffloadPolicy::All, 2);
        // A 5 GB/s disk of 4 blocks.
        o.config.disk = Some(DiskTier { blocks: 4, bandwidth_bytes_per_s: 5_000_000_000 });
        o.disk = CpuTier::new(4);
        // Blocks 1 and 2 spill to disk as 3 and 4 fill the CPU tier.
        assert_eq!(o.computed(&[1, 2, 3, 4]), 4);
        assert_eq!(o.held_after(&[1, 2, 3, 4, 5], 0), 4);
        assert_eq!(o.matched_tokens(KvTransfer::Local, &[1, 2, 3, 4], 64, 0), (64, true));
        assert_eq!(o.matched_below(), 32);
        let mut events = Vec::new();
        o.after_alloc(Owner { slot: 0, node: 0 }, 0, 64, &mut events);
        // 4 blocks over PCIe: 8,388,608 B at 50e9 B/s = 167.77 → 168 µs; 2
        // from disk: 4,194,304 B at 5e9 B/s = 838.86 → 839 µs.
        assert_eq!(
            events,
            [EngineEvent::HostLoad { owner: Owner { slot: 0, node: 0 }, slot: 0, duration_us: 168 + 839 }]
        );
    }

    #[test]
    fn the_run_past_the_gpu_hit_that_the_tier_holds_is_loaded() {
        let mut o = offload(OffloadPolicy::All, 8);
        let hashes = [11, 12, 13, 14];
        assert_eq!(o.computed(&hashes[..3]), 3);
        // 70-token prompt: 4 full blocks; GPU hit 1 block; the tier holds
        // blocks 2 and 3 in a row, not 4.
        assert_eq!(o.matched_tokens(KvTransfer::Local, &hashes, 70, 16), (32, true));
        assert_eq!(o.matched_tokens(KvTransfer::Local, &hashes, 70, 48), (0, false));
        assert_eq!(o.matched_tokens(KvTransfer::ReceivePrefill, &hashes, 70, 0), (0, false));
        let mut events = Vec::new();
        o.after_alloc(Owner { slot: 0, node: 0 }, 2, 32, &mut events);
        assert_eq!(events, [EngineEvent::HostLoad { owner: Owner { slot: 0, node: 0 }, slot: 2, duration_us: 84 }]);
        assert_eq!(o.held_after(&hashes, 1), 2);
    }

    #[test]
    fn policy_all_stores_computed_blocks_and_evicted_only_evictions() {
        let mut all = offload(OffloadPolicy::All, 8);
        let mut evicted = offload(OffloadPolicy::Evicted, 8);
        assert_eq!(all.computed(&[1, 2]), 2);
        assert_eq!(evicted.computed(&[1, 2]), 0);
        assert_eq!(all.gpu_evicted(3), 0);
        assert_eq!(evicted.gpu_evicted(1), 1);
        assert!(evicted.records_evictions() && !all.records_evictions());
        assert_eq!(evicted.held_after(&[1, 2], 0), 1);
        assert_eq!(all.held_after(&[1, 2], 0), 2);
    }
}
