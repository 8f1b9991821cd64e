//! LoRA adapters on one engine (`engine.lora`), as vLLM 0.15.1 serves them.
//!
//! - Scheduling (`v1/core/sched/scheduler.py`, `schedule()`): the adapters
//!   of the running requests scheduled this step are `scheduled_loras`; a
//!   waiting request whose adapter would make them `max_loras + 1` is
//!   skipped and keeps its place. [`LoraState::admits`] and
//!   [`LoraState::note`] are that rule.
//! - Residency (`lora/worker_manager.py` `LRUCacheWorkerLoRAManager`,
//!   `lora/model_manager.py` `LRUCacheLoRAModelManager`): `max_loras` GPU
//!   slots (`_active_adapters`, LRU) inside a CPU cache of `max_cpu_loras`
//!   registered adapters (`_registered_adapters`, LRU; evicting one also
//!   deactivates it); an adapter in neither is read from disk
//!   (`_load_adapter`) into the CPU cache, then copied into a GPU slot
//!   (`activate_adapter` → `set_lora`). The model runner does this before
//!   the forward pass (`v1/worker/lora_model_runner_mixin.py`
//!   `set_active_loras`), synchronously: a load lengthens that step.
//!   Evictions pick the least recently used adapter not in the step (vLLM
//!   walks the step's adapters in set order and could evict one of them
//!   before touching it, only to load it again; a set's order is not a
//!   scheduling decision, so that is not reproduced).
//! - Prefix caching (`v1/core/kv_cache_utils.py`
//!   `_gen_lora_extra_hash_keys`): the adapter's name is an extra key of
//!   every block hash, so prefixes never match across adapters ([`salt`]).
//!
//! Adapters are known by a 64-bit hash of their name (never 0, which means
//! the base model).

use super::config::EngineStats;
use crate::latency::{LoraPricing, StepBatch};

/// How long moving an adapter takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoraLoad {
    /// Every load of an adapter not on the GPU takes `us` (`load_ms`),
    /// from the CPU cache or from disk alike.
    Fixed {
        /// µs.
        us: u64,
    },
    /// Bytes over bandwidth: host to GPU for an adapter in the CPU cache;
    /// disk to host, then host to GPU, for one that is not.
    Bandwidth {
        /// Host-to-GPU bytes/s (`cpu_bandwidth_gbps`).
        cpu_bytes_per_s: u64,
        /// Disk-to-host bytes/s (`disk_bandwidth_gbps`).
        disk_bytes_per_s: u64,
    },
}

/// `engine.lora`: vLLM's `--enable-lora` with its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoraConfig {
    /// `--max-loras`: distinct adapters a step may hold (GPU slots).
    pub max_loras: u32,
    /// `--max-lora-rank`: the rank every adapter and kernel runs at.
    pub max_lora_rank: u32,
    /// `--max-cpu-loras`: adapters kept in host memory (≥ `max_loras`).
    pub max_cpu_loras: u32,
    /// What a load costs.
    pub load: LoraLoad,
    /// What the LoRA kernels and an adapter's bytes cost on this engine.
    pub pricing: LoraPricing,
}

impl LoraConfig {
    /// Time to bring one adapter onto the GPU, µs, from disk or from the
    /// CPU cache.
    pub fn load_us(&self, from_disk: bool) -> u64 {
        match self.load {
            LoraLoad::Fixed { us } => us,
            LoraLoad::Bandwidth { cpu_bytes_per_s, disk_bytes_per_s } => {
                let bytes = u128::from(self.pricing.adapter_bytes(self.max_lora_rank));
                let at = |rate: u64| (bytes * 1_000_000).div_ceil(u128::from(rate.max(1))) as u64;
                if from_disk { at(disk_bytes_per_s) + at(cpu_bytes_per_s) } else { at(cpu_bytes_per_s) }
            }
        }
    }
}

/// The adapter id of `name`: a hash, never 0 (the base model).
pub(crate) fn adapter_id(name: &str) -> u64 {
    crate::hash::hash64(name.as_bytes()).max(1)
}

/// Salts a prompt's block hashes with its adapter, as vLLM adds the LoRA
/// name to every block's extra keys: equal tokens under different adapters
/// hash apart. Never 0 (the KV cache's "no hash").
pub(crate) fn salt(hashes: &mut [u64], adapter: u64) {
    for h in hashes {
        let mut z = (*h ^ adapter).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        *h = (z ^ (z >> 31)).max(1);
    }
}

/// One LRU tier: (adapter, last step it was used) pairs, at most `capacity`.
#[derive(Debug)]
struct Tier {
    entries: Vec<(u64, u64)>,
    capacity: usize,
}

impl Tier {
    fn new(capacity: u32) -> Tier {
        Tier { entries: Vec::with_capacity(capacity as usize), capacity: capacity as usize }
    }

    fn contains(&self, adapter: u64) -> bool {
        self.entries.iter().any(|&(a, _)| a == adapter)
    }

    /// Marks `adapter` used at `stamp`; false when it is not here.
    fn touch(&mut self, adapter: u64, stamp: u64) -> bool {
        match self.entries.iter_mut().find(|(a, _)| *a == adapter) {
            Some(e) => {
                e.1 = stamp;
                true
            }
            None => false,
        }
    }

    /// Adds `adapter` used at `stamp`, evicting the least recently used
    /// entry not used at `stamp` (not in this step) when full; the evicted
    /// adapter.
    fn insert(&mut self, adapter: u64, stamp: u64) -> Option<u64> {
        let mut evicted = None;
        if self.entries.len() >= self.capacity {
            let (k, _) = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.1 < stamp)
                .min_by_key(|(_, e)| e.1)
                .expect("a step holds at most max_loras ≤ capacity adapters");
            evicted = Some(self.entries.swap_remove(k).0);
        }
        self.entries.push((adapter, stamp));
        evicted
    }

    fn remove(&mut self, adapter: u64) {
        self.entries.retain(|&(a, _)| a != adapter);
    }
}

/// One engine's adapters: the step being scheduled, residency, and which
/// adapters its requests use.
#[derive(Debug)]
pub(crate) struct LoraState {
    config: LoraConfig,
    /// Distinct adapters of the step being scheduled (`scheduled_loras`).
    scheduled: Vec<u64>,
    gpu: Tier,
    cpu: Tier,
    /// Steps scheduled so far: the LRU clock.
    clock: u64,
    /// Adapters of the requests in the engine, with how many use each (the
    /// router's view).
    in_engine: Vec<(u64, u32)>,
    /// Adapters of the requests in the waiting queue (0: the base model),
    /// with how many use each: once a step's adapters are `max_loras`, a
    /// scan of the queue stops when none it could admit is left (vLLM walks
    /// the whole queue; the result is the same, and an overloaded engine
    /// would otherwise pay for it every step).
    waiting: Vec<(u64, u32)>,
}

impl LoraState {
    pub(crate) fn new(config: LoraConfig) -> LoraState {
        LoraState {
            scheduled: Vec::with_capacity(config.max_loras as usize),
            gpu: Tier::new(config.max_loras),
            cpu: Tier::new(config.max_cpu_loras),
            clock: 0,
            in_engine: Vec::new(),
            waiting: Vec::new(),
            config,
        }
    }

    /// A new step is being scheduled.
    pub(crate) fn begin_step(&mut self) {
        self.scheduled.clear();
    }

    /// Whether a waiting request of `adapter` may join the step (always for
    /// the base model, 0).
    pub(crate) fn admits(&self, adapter: u64) -> bool {
        adapter == 0 || self.scheduled.len() < self.config.max_loras as usize || self.scheduled.contains(&adapter)
    }

    /// A request of `adapter` computes `tokens` in the step.
    pub(crate) fn note(&mut self, adapter: u64, tokens: u32, batch: &mut StepBatch) {
        if adapter == 0 {
            return;
        }
        if !self.scheduled.contains(&adapter) {
            self.scheduled.push(adapter);
        }
        batch.lora_tokens += tokens;
        batch.lora_adapters = self.scheduled.len() as u32;
        batch.lora_rank = self.config.max_lora_rank;
    }

    /// The step is scheduled: its adapters are brought onto the GPU. The
    /// time that takes plus the LoRA kernels' (µs), loads counted in `stats`.
    pub(crate) fn finish_step(&mut self, batch: &StepBatch, stats: &mut EngineStats) -> u64 {
        debug_assert!(self.scheduled.len() <= self.config.max_loras as usize);
        self.clock += 1;
        let stamp = self.clock;
        let mut load_us = 0;
        // Touch what is resident first, so no adapter of the step is evicted.
        for &a in &self.scheduled {
            self.cpu.touch(a, stamp);
        }
        for k in 0..self.scheduled.len() {
            let a = self.scheduled[k];
            if self.gpu.touch(a, stamp) {
                continue;
            }
            let from_disk = !self.cpu.contains(a);
            if from_disk {
                if let Some(gone) = self.cpu.insert(a, stamp) {
                    // Unregistering an adapter deactivates it too.
                    self.gpu.remove(gone);
                }
                stats.lora_loads_disk += 1;
            } else {
                stats.lora_loads_cpu += 1;
            }
            self.gpu.insert(a, stamp);
            load_us += self.config.load_us(from_disk);
        }
        load_us + self.config.pricing.step_us(batch)
    }

    /// Whether `adapter` is in a GPU slot now.
    pub(crate) fn is_active(&self, adapter: u64) -> bool {
        self.gpu.contains(adapter)
    }

    /// Whether a request of `adapter` would not raise the engine's distinct
    /// adapters past `max_loras` (it uses one already, or there is room).
    pub(crate) fn has_room_for(&self, adapter: u64) -> bool {
        self.in_engine.len() < self.config.max_loras as usize || self.in_engine.iter().any(|&(a, _)| a == adapter)
    }

    /// Whether the waiting queue holds no request the step could still
    /// admit (it is at `max_loras` adapters and none waits for one of them
    /// or for the base model).
    pub(crate) fn none_admissible(&self) -> bool {
        self.scheduled.len() >= self.config.max_loras as usize
            && self.waiting.iter().all(|&(a, n)| n == 0 || (a != 0 && !self.scheduled.contains(&a)))
    }

    /// Whether the waiting counts are those of `queue` (the adapters of the
    /// waiting requests), for the simulator's invariant checks.
    pub(crate) fn check_waiting(&self, queue: impl Iterator<Item = u64>) -> Result<(), String> {
        let mut counts = Vec::new();
        queue.for_each(|a| add(&mut counts, a));
        counts.sort_unstable();
        let mut mine = self.waiting.clone();
        mine.sort_unstable();
        if counts != mine {
            return Err(format!("LoRA waiting counts {mine:?}, the queue holds {counts:?}"));
        }
        Ok(())
    }

    /// A request of `adapter` joined the waiting queue.
    pub(crate) fn wait(&mut self, adapter: u64) {
        add(&mut self.waiting, adapter);
    }

    /// A request of `adapter` left the waiting queue.
    pub(crate) fn unwait(&mut self, adapter: u64) {
        sub(&mut self.waiting, adapter);
    }

    /// A request of `adapter` entered the engine.
    pub(crate) fn enter(&mut self, adapter: u64) {
        if adapter != 0 {
            add(&mut self.in_engine, adapter);
        }
    }

    /// A request of `adapter` left the engine.
    pub(crate) fn leave(&mut self, adapter: u64) {
        sub(&mut self.in_engine, adapter);
    }

    /// Every request left (a run cut off by its horizon).
    pub(crate) fn clear_requests(&mut self) {
        self.in_engine.clear();
        self.waiting.clear();
    }
}

/// One more user of `adapter` in `counts`.
fn add(counts: &mut Vec<(u64, u32)>, adapter: u64) {
    match counts.iter_mut().find(|(a, _)| *a == adapter) {
        Some(e) => e.1 += 1,
        None => counts.push((adapter, 1)),
    }
}

/// One fewer (an adapter none uses leaves the list).
fn sub(counts: &mut Vec<(u64, u32)>, adapter: u64) {
    if let Some(k) = counts.iter().position(|&(a, _)| a == adapter) {
        counts[k].1 -= 1;
        if counts[k].1 == 0 {
            counts.swap_remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_loras: u32, max_cpu_loras: u32) -> LoraConfig {
        LoraConfig {
            max_loras,
            max_lora_rank: 8,
            max_cpu_loras,
            load: LoraLoad::Bandwidth { cpu_bytes_per_s: 1_000_000_000, disk_bytes_per_s: 250_000_000 },
            // 8 × 1000 × 10 × 2 = 160 kB an adapter; no kernel cost below.
            pricing: LoraPricing {
                layers: 10,
                dims_per_layer: 1000,
                activation_elements_per_layer: 0,
                peak_flops: 1,
                bandwidth: 1,
            },
        }
    }

    /// Schedules one step of `adapters` (no tokens: only loads are priced).
    fn step(s: &mut LoraState, adapters: &[u64], stats: &mut EngineStats) -> u64 {
        s.begin_step();
        for &a in adapters {
            assert!(s.admits(a));
            if !s.scheduled.contains(&a) {
                s.scheduled.push(a);
            }
        }
        s.finish_step(&StepBatch::EMPTY, stats)
    }

    #[test]
    fn a_load_costs_bytes_over_bandwidth_from_each_tier() {
        let c = config(2, 3);
        assert_eq!(c.pricing.adapter_bytes(8), 160_000);
        // Host to GPU: 160 kB at 1 GB/s = 160 µs; from disk first 640 µs more.
        assert_eq!((c.load_us(false), c.load_us(true)), (160, 800));
        let mut s = LoraState::new(c);
        let mut stats = EngineStats::default();
        assert_eq!(step(&mut s, &[1, 2], &mut stats), 1600, "both from disk");
        assert_eq!(step(&mut s, &[2], &mut stats), 0, "resident: no load");
        // 3 takes the GPU slot of the least recently used adapter (1); the
        // CPU cache has room for all three.
        assert_eq!(step(&mut s, &[3], &mut stats), 800);
        assert!(s.is_active(2) && s.is_active(3) && !s.is_active(1));
        // 1 is still in the CPU cache: a host-to-GPU copy only, into 2's slot.
        assert_eq!(step(&mut s, &[1], &mut stats), 160);
        assert!(s.is_active(1) && s.is_active(3) && !s.is_active(2));
        assert_eq!((stats.lora_loads_disk, stats.lora_loads_cpu), (3, 1));
        // A fourth adapter evicts the CPU cache's LRU (2) and 3's GPU slot.
        assert_eq!(step(&mut s, &[4], &mut stats), 800);
        assert!(!s.cpu.contains(2) && s.is_active(1) && s.is_active(4));
        // With the CPU cache no larger than the GPU's slots, evicting from it
        // frees the adapter's slot too.
        let mut s = LoraState::new(config(2, 2));
        step(&mut s, &[1], &mut stats);
        step(&mut s, &[2], &mut stats);
        assert_eq!(step(&mut s, &[3], &mut stats), 800);
        assert!(!s.cpu.contains(1) && !s.is_active(1) && s.is_active(2) && s.is_active(3));
    }

    #[test]
    fn a_step_admits_at_most_max_loras_adapters() {
        let mut s = LoraState::new(config(2, 2));
        s.begin_step();
        let mut b = StepBatch::default();
        s.note(7, 3, &mut b);
        s.note(0, 5, &mut b);
        assert!(s.admits(9) && s.admits(7) && s.admits(0));
        s.note(9, 1, &mut b);
        assert!(!s.admits(11), "a third adapter waits");
        assert!(s.admits(7) && s.admits(0));
        assert_eq!((b.lora_tokens, b.lora_adapters, b.lora_rank), (4, 2, 8));
    }

    #[test]
    fn a_full_step_admits_nothing_once_no_fitting_request_waits() {
        let mut s = LoraState::new(config(1, 1));
        let mut b = StepBatch::default();
        s.wait(5);
        s.wait(0);
        s.begin_step();
        assert!(!s.none_admissible(), "room for an adapter");
        s.note(7, 1, &mut b);
        assert!(!s.none_admissible(), "a base-model request waits");
        s.unwait(0);
        assert!(s.none_admissible(), "only adapter 5 waits, and the step is full");
        s.wait(7);
        assert!(!s.none_admissible());
    }

    #[test]
    fn salted_hashes_differ_by_adapter_and_are_never_zero() {
        let mut a = [5u64, 6];
        let mut b = a;
        salt(&mut a, adapter_id("x"));
        salt(&mut b, adapter_id("y"));
        assert!(a.iter().zip(&b).all(|(x, y)| x != y));
        assert!(a.iter().all(|&h| h != 0));
        assert_ne!(adapter_id(""), 0);
    }

    #[test]
    fn the_router_view_counts_adapters_in_the_engine() {
        let mut s = LoraState::new(config(1, 1));
        assert!(s.has_room_for(3));
        s.enter(3);
        s.enter(3);
        assert!(s.has_room_for(3) && !s.has_room_for(4));
        s.leave(3);
        assert!(!s.has_room_for(4));
        s.leave(3);
        assert!(s.has_room_for(4));
    }
}
