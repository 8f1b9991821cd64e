//! LoRA adapters on one engine (`engine.lora`), as vLLM 0.15.1 serves them.
//!
//! - Scheduling (`v1/core/sched/scheduler.py`, `schedule()`): the adapters
//!   of the running requests scheduled this step are `scheduled_loras`; a
//!   waiting request whose adapter would make them `max_loras + 1` is
//!   skipped and keeps its place. [`LoraState::admits`] and
//!   [`LoraState::note`] are that rule. The releases with a separate queue
//!   for skipped requests (0.18.0 to 0.30.0; 0.19.0 recorded) are
//!   `LoraConfig::skipped_queue_first`.
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

use std::collections::HashMap;

use super::stats::EngineStats;
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
    /// `max_loras` at admission counts the adapters of every running
    /// request, scheduled in this step or not (vLLM 0.33.0's
    /// `scheduled_loras`); before, only those scheduled (0.15.1).
    pub every_running_counts: bool,
    /// A request skipped for `max_loras` waits in a queue of its own,
    /// served before the waiting queue, until it is admitted (vLLM 0.19.0's
    /// `skipped_waiting`): a request preempted meanwhile goes back behind
    /// it, not ahead. Off: skipped requests keep their place in the one
    /// waiting queue and a preempted request goes to its head (0.15.1,
    /// 0.33.0).
    pub skipped_queue_first: bool,
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

/// One engine's adapters: the step being scheduled, residency, and which
/// adapters its requests use. Adapters get a dense index on first sight
/// (1, 2, …; 0 is the base model), so the per-request work of a step is
/// an array look-up.
#[derive(Debug)]
pub(crate) struct LoraState {
    config: LoraConfig,
    /// Index of each adapter seen (by [`adapter_id`]).
    index: HashMap<u64, u32>,
    /// Per index (0 unused): the step that last scheduled it (`== stamp`:
    /// in the step being scheduled).
    marked: Vec<u64>,
    /// Per index: the step that last used it if it is in a GPU slot, else 0.
    gpu: Vec<u64>,
    /// Per index: the step that last used it if it is in the CPU cache, else 0.
    cpu: Vec<u64>,
    gpu_len: u32,
    cpu_len: u32,
    /// Per index: requests in the engine that use it (the router's view).
    in_engine: Vec<u32>,
    /// Adapters at least one request in the engine uses.
    in_use: u32,
    /// Per index, 0 the base model: requests in the waiting queue. Once a
    /// step's adapters are `max_loras`, a scan of the queue stops when none
    /// it could admit is left (vLLM walks the whole queue; the admissions
    /// are the same, and an overloaded engine would otherwise pay for the
    /// walk every step).
    waiting: Vec<u32>,
    /// Distinct adapters of the step being scheduled (`scheduled_loras`).
    scheduled: Vec<u32>,
    /// The step being scheduled (from 1): the LRU clock.
    stamp: u64,
}

impl LoraState {
    pub(crate) fn new(config: LoraConfig) -> LoraState {
        LoraState {
            index: HashMap::new(),
            marked: vec![0],
            gpu: vec![0],
            cpu: vec![0],
            gpu_len: 0,
            cpu_len: 0,
            in_engine: vec![0],
            in_use: 0,
            waiting: vec![0],
            scheduled: Vec::with_capacity(config.max_loras as usize),
            stamp: 0,
            config,
        }
    }

    /// The index of `adapter` (a hash), if any request used it.
    fn find(&self, adapter: u64) -> Option<usize> {
        self.index.get(&adapter).map(|&k| k as usize)
    }

    /// A request of `adapter` (a hash) entered the engine: its index.
    pub(crate) fn enter(&mut self, adapter: u64) -> u32 {
        let next = self.marked.len() as u32;
        let k = *self.index.entry(adapter).or_insert(next);
        if k == next {
            for v in [&mut self.marked, &mut self.gpu, &mut self.cpu] {
                v.push(0);
            }
            self.in_engine.push(0);
            self.waiting.push(0);
        }
        self.in_use += u32::from(self.in_engine[k as usize] == 0);
        self.in_engine[k as usize] += 1;
        k
    }

    /// A request of adapter `k` (an index, 0 the base model) left the engine.
    pub(crate) fn leave(&mut self, k: u32) {
        if k > 0 {
            self.in_engine[k as usize] -= 1;
            self.in_use -= u32::from(self.in_engine[k as usize] == 0);
        }
    }

    /// Every request left (a run cut off by its horizon).
    pub(crate) fn clear_requests(&mut self) {
        self.in_engine.iter_mut().for_each(|n| *n = 0);
        self.waiting.iter_mut().for_each(|n| *n = 0);
        self.in_use = 0;
    }

    /// A request of adapter `k` joined the waiting queue.
    pub(crate) fn wait(&mut self, k: u32) {
        self.waiting[k as usize] += 1;
    }

    /// A request of adapter `k` left the waiting queue.
    pub(crate) fn unwait(&mut self, k: u32) {
        self.waiting[k as usize] -= 1;
    }

    /// A new step is being scheduled.
    pub(crate) fn begin_step(&mut self) {
        self.scheduled.clear();
        self.stamp += 1;
    }

    /// A running request of adapter `k` that this step does not schedule
    /// still holds its adapter's place against `max_loras` (vLLM 0.33.0).
    pub(crate) fn hold(&mut self, k: u32) {
        if k != 0 && self.marked[k as usize] != self.stamp {
            self.marked[k as usize] = self.stamp;
            self.scheduled.push(k);
        }
    }

    /// Whether a waiting request of adapter `k` may join the step (always
    /// for the base model, 0).
    pub(crate) fn admits(&self, k: u32) -> bool {
        k == 0 || self.scheduled.len() < self.config.max_loras as usize || self.marked[k as usize] == self.stamp
    }

    /// Whether the waiting queue holds no request the step could still
    /// admit (it is at `max_loras` adapters and none waits for one of them
    /// or for the base model).
    pub(crate) fn none_admissible(&self) -> bool {
        self.scheduled.len() >= self.config.max_loras as usize
            && self.waiting[0] == 0
            && self.scheduled.iter().all(|&k| self.waiting[k as usize] == 0)
    }

    /// A request of adapter `k` computes `tokens` in the step.
    #[inline]
    pub(crate) fn note(&mut self, k: u32, tokens: u32, batch: &mut StepBatch) {
        if k == 0 {
            return;
        }
        if self.marked[k as usize] != self.stamp {
            self.marked[k as usize] = self.stamp;
            self.scheduled.push(k);
        }
        batch.lora_tokens += tokens;
        batch.lora_adapters = self.scheduled.len() as u32;
        batch.lora_rank = self.config.max_lora_rank;
    }

    /// The step is scheduled: its adapters are brought onto the GPU. The
    /// time that takes plus the LoRA kernels' (µs), loads counted in `stats`.
    pub(crate) fn finish_step(&mut self, batch: &StepBatch, stats: &mut EngineStats) -> u64 {
        debug_assert!(self.scheduled.len() <= self.config.max_loras as usize);
        let stamp = self.stamp;
        let mut load_us = 0;
        // Marked first (`marked`), so no adapter of the step is evicted.
        for i in 0..self.scheduled.len() {
            let k = self.scheduled[i] as usize;
            if self.gpu[k] > 0 {
                self.gpu[k] = stamp;
                self.cpu[k] = stamp;
                continue;
            }
            let from_disk = self.cpu[k] == 0;
            if from_disk {
                if self.cpu_len == self.config.max_cpu_loras {
                    let gone = self.lru(&self.cpu);
                    self.cpu[gone] = 0;
                    self.cpu_len -= 1;
                    // Unregistering an adapter deactivates it too.
                    if self.gpu[gone] > 0 {
                        self.gpu[gone] = 0;
                        self.gpu_len -= 1;
                    }
                }
                self.cpu_len += 1;
                stats.lora_loads_disk += 1;
            } else {
                stats.lora_loads_cpu += 1;
            }
            self.cpu[k] = stamp;
            if self.gpu_len == self.config.max_loras {
                let gone = self.lru(&self.gpu);
                self.gpu[gone] = 0;
                self.gpu_len -= 1;
            }
            self.gpu[k] = stamp;
            self.gpu_len += 1;
            load_us += self.config.load_us(from_disk);
        }
        load_us + self.config.pricing.step_us(batch)
    }

    /// The least recently used adapter of `tier` not in the step (a tier is
    /// full only when it holds more adapters than the step).
    fn lru(&self, tier: &[u64]) -> usize {
        (1..tier.len())
            .filter(|&k| tier[k] > 0 && self.marked[k] != self.stamp)
            .min_by_key(|&k| (tier[k], k))
            .expect("a step holds at most max_loras ≤ a tier's capacity adapters")
    }

    /// Whether `adapter` (a hash) is in a GPU slot now.
    pub(crate) fn is_active(&self, adapter: u64) -> bool {
        self.find(adapter).is_some_and(|k| self.gpu[k] > 0)
    }

    /// Whether a request of `adapter` (a hash) would not raise the engine's
    /// distinct adapters past `max_loras` (it uses one already, or there is
    /// room).
    pub(crate) fn has_room_for(&self, adapter: u64) -> bool {
        self.in_use < self.config.max_loras || self.find(adapter).is_some_and(|k| self.in_engine[k] > 0)
    }

    /// Whether the waiting counts are those of `queue` (the adapter indices
    /// of the waiting requests), for the simulator's invariant checks.
    pub(crate) fn check_waiting(&self, queue: impl Iterator<Item = u32>) -> Result<(), String> {
        let mut counts = vec![0u32; self.waiting.len()];
        for k in queue {
            match counts.get_mut(k as usize) {
                Some(n) => *n += 1,
                None => return Err(format!("a waiting request of unknown LoRA adapter {k}")),
            }
        }
        if counts != self.waiting {
            return Err(format!("LoRA waiting counts {:?}, the queue holds {counts:?}", self.waiting));
        }
        Ok(())
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
            every_running_counts: false,
            skipped_queue_first: false,
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

    /// Schedules one step of adapters `adapters` (hashes; no tokens: only
    /// loads are priced).
    fn step(s: &mut LoraState, adapters: &[u64], stats: &mut EngineStats) -> u64 {
        s.begin_step();
        let mut b = StepBatch::default();
        for &a in adapters {
            let k = s.enter(a);
            s.leave(k);
            assert!(s.admits(k));
            s.note(k, 0, &mut b);
        }
        s.finish_step(&StepBatch::EMPTY, stats)
    }

    fn in_cpu(s: &LoraState, adapter: u64) -> bool {
        s.find(adapter).is_some_and(|k| s.cpu[k] > 0)
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
        assert!(!in_cpu(&s, 2) && s.is_active(1) && s.is_active(4));
        // With the CPU cache no larger than the GPU's slots, evicting from it
        // frees the adapter's slot too.
        let mut s = LoraState::new(config(2, 2));
        step(&mut s, &[1], &mut stats);
        step(&mut s, &[2], &mut stats);
        assert_eq!(step(&mut s, &[3], &mut stats), 800);
        assert!(!in_cpu(&s, 1) && !s.is_active(1) && s.is_active(2) && s.is_active(3));
        // A step's own adapters are never evicted for each other.
        assert_eq!(step(&mut s, &[1, 2], &mut stats), 800);
        assert!(s.is_active(1) && s.is_active(2));
    }

    #[test]
    fn a_step_admits_at_most_max_loras_adapters() {
        let mut s = LoraState::new(config(2, 2));
        let (a, b, c) = (s.enter(70), s.enter(90), s.enter(110));
        s.begin_step();
        let mut batch = StepBatch::default();
        s.note(a, 3, &mut batch);
        s.note(0, 5, &mut batch);
        assert!(s.admits(b) && s.admits(a) && s.admits(0));
        s.note(b, 1, &mut batch);
        assert!(!s.admits(c), "a third adapter waits");
        assert!(s.admits(a) && s.admits(0));
        assert_eq!((batch.lora_tokens, batch.lora_adapters, batch.lora_rank), (4, 2, 8));
        s.begin_step();
        assert!(s.admits(c), "a new step starts empty");
    }

    #[test]
    fn a_full_step_admits_nothing_once_no_fitting_request_waits() {
        let mut s = LoraState::new(config(1, 1));
        let (five, seven) = (s.enter(5), s.enter(7));
        let mut b = StepBatch::default();
        s.wait(five);
        s.wait(0);
        s.begin_step();
        assert!(!s.none_admissible(), "room for an adapter");
        s.note(seven, 1, &mut b);
        assert!(!s.none_admissible(), "a base-model request waits");
        s.unwait(0);
        assert!(s.none_admissible(), "only adapter 5 waits, and the step is full");
        s.wait(seven);
        assert!(!s.none_admissible());
        assert!(s.check_waiting([five, seven].into_iter()).is_ok());
        assert!(s.check_waiting([five].into_iter()).is_err());
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
        let k = s.enter(3);
        s.enter(3);
        assert!(s.has_room_for(3) && !s.has_room_for(4));
        s.leave(k);
        assert!(!s.has_room_for(4));
        s.leave(k);
        assert!(s.has_room_for(4));
    }
}
