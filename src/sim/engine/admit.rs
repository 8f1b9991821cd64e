//! Admission from the waiting queue, the second half of vLLM's `schedule()`:
//! first come first served while the token budget, `max_num_seqs`, the free
//! blocks and `max_loras` allow, each request starting after its longest
//! prefix-cache hit (as the release's EAGLE rule cuts it); KV to be read
//! from elsewhere (a remote prefill, the CPU tier) is allocated here and the
//! request waits for it, keeping its place.

use super::*;

impl Engine {
    /// Admits waiting requests first come first served. When nothing runs,
    /// requests whose remote KV has landed go first: they hold their blocks,
    /// and a head of the queue that cannot grow beside them would otherwise
    /// preempt itself, be admitted again and start over forever (a livelock
    /// vLLM shares: nothing in its scheduler frees the landed blocks).
    pub(super) fn admit_waiting(&mut self, budget: &mut u32, lpt: u32, events: &mut Vec<EngineEvent>) {
        let seqs = &self.seqs;
        let landed = |s: &u32| seqs[*s as usize].as_ref().is_some_and(|q| q.remote == RemoteKv::Loaded);
        if self.running.is_empty() && self.waiting.iter().any(landed) {
            self.admit_pass(budget, lpt, events, true);
        }
        self.admit_pass(budget, lpt, events, false);
        if self.config.kv_offload.is_some() && self.running.is_empty() && self.unstick_landed() {
            self.admit_waiting(budget, lpt, events);
        }
    }

    /// KV offload: nothing runs, and requests whose CPU-tier load landed
    /// hold blocks none of them can grow past (a load may cover only part of
    /// a prompt), with no other load to land: nothing would ever free them
    /// (vLLM would stall). The last of them is preempted instead (blocks
    /// freed, recomputed). False when that is not the case.
    pub(super) fn unstick_landed(&mut self) -> bool {
        let state = |s: u32| self.seqs[s as usize].as_ref().expect("live slot").remote;
        if self.waiting.iter().any(|&s| state(s) == RemoteKv::Loading) {
            return false;
        }
        let Some(&slot) = self.waiting.iter().rev().find(|&&s| state(s) == RemoteKv::Loaded) else { return false };
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        self.kv.free(&mut seq.blocks);
        seq.num_computed = 0;
        seq.remote = RemoteKv::None;
        seq.preemptions += 1;
        self.stats.preemptions += 1;
        true
    }

    /// One pass over the waiting queue; with `landed_only`, only requests
    /// whose remote KV has landed.
    pub(super) fn admit_pass(&mut self, budget: &mut u32, lpt: u32, events: &mut Vec<EngineEvent>, landed_only: bool) {
        let block_size = self.kv.block_size();
        // Position in the waiting queue: requests whose remote KV is still
        // being read are skipped and keep their place (scheduler.py
        // `skipped_waiting_requests`).
        let mut i = 0;
        // A request that cannot get blocks ends admission (FCFS), except when
        // nothing runs: then nothing would ever free the blocks that requests
        // whose remote KV landed hold behind it, so those are admitted past
        // it (vLLM issues #30659 and #45387: it otherwise stalls for good; the
        // minimal fix of #45406 changes only this case).
        let mut stuck = landed_only;
        while *budget > 0 && self.running.len() < self.config.max_num_seqs as usize {
            let Some(&slot) = self.waiting.get(i) else { break };
            self.offload_evictions();
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            if seq.remote == RemoteKv::Loading || (stuck && seq.remote != RemoteKv::Loaded) {
                i += 1;
                continue;
            }
            // Its adapter would make the step's max_loras + 1: skipped,
            // keeping its place.
            if let Some(l) = &self.lora
                && !l.admits(seq.lora)
            {
                // vLLM 0.19.0 moves it to `skipped_waiting`, which every
                // pass serves first; the requests skipped before it were
                // too, or admitted, so these stay the head of the queue.
                let queue_apart = self.config.lora.is_some_and(|c| c.skipped_queue_first);
                seq.lora_skipped = queue_apart;
                if l.none_admissible() {
                    // vLLM would visit and skip every one left.
                    if queue_apart {
                        for &s in self.waiting.iter().skip(i) {
                            self.seqs[s as usize].as_mut().expect("live slot").lora_skipped = true;
                        }
                    }
                    break;
                }
                i += 1;
                continue;
            }
            self.hits.clear();
            let hit_tokens;
            let computed;
            let landed = seq.remote == RemoteKv::Loaded;
            if landed {
                // scheduler.py `_update_waiting_for_remote_kv`: the blocks
                // hold the whole prompt; the last token is recomputed for its
                // logits.
                hit_tokens = seq.cached_tokens;
                computed = seq.num_computed.min(seq.num_tokens - 1);
            } else {
                // At least the last token is always recomputed: its logits are needed.
                let max_hit_blocks = ((seq.num_tokens - 1) / block_size) as usize;
                let mut hit_blocks =
                    self.kv.find_hit(&mut seq.blocks, &seq.hashes, max_hit_blocks, &mut self.hits, seq.prompt_len);
                if self.eagle_prefix == EaglePrefixRule::DropLastBlock && self.hits.pop().is_some() {
                    // The EAGLE drafter recomputes the last hit block
                    // (one group: speculation with groups is refused).
                    hit_blocks -= 1;
                }
                hit_tokens = hit_blocks as u32 * block_size;
                // A preempted request looks in the CPU tier again, as vLLM
                // asks the connector whenever nothing is computed.
                if !seq.admitted || self.config.kv_offload.is_some() {
                    let (external, load_async) =
                        self.connector.matched_tokens(seq.transfer, &seq.hashes, seq.num_tokens, hit_tokens);
                    if load_async && external > 0 {
                        // Blocks for the prompt now, nothing computed: the
                        // request waits in WAITING_FOR_REMOTE_KVS, keeping its
                        // place. Only hit blocks are registered: the rest are
                        // registered when their KV has landed.
                        let target = hit_tokens + external;
                        if !self.kv.allocate(&mut seq.blocks, &seq.hashes, &self.hits, target, hit_tokens) {
                            if self.running.is_empty() {
                                (stuck, i) = (true, i + 1);
                                continue;
                            }
                            break;
                        }
                        seq.remote = RemoteKv::Loading;
                        seq.num_computed = target;
                        if self.config.enable_prefix_caching {
                            self.stats.prefix_queries += u64::from(seq.num_tokens);
                            self.stats.prefix_hits += u64::from(hit_tokens);
                        }
                        if self.config.kv_offload.is_some() {
                            self.stats.cpu_hit_tokens += u64::from(external);
                            self.stats.disk_hit_tokens += u64::from(self.connector.matched_below());
                            self.stats.cpu_loads += 1;
                            self.stats.cpu_load_bytes += self.connector.load_bytes(external);
                        }
                        if !seq.admitted {
                            // vLLM's num_cached_tokens counts what is loaded.
                            seq.cached_tokens = if self.config.kv_offload.is_some() { target } else { hit_tokens };
                            events.push(EngineEvent::Scheduled(seq.owner));
                        }
                        seq.admitted = true;
                        self.connector.after_alloc(seq.owner, slot, external, events);
                        i += 1;
                        continue;
                    }
                }
                let seeded = if seq.admitted { 0 } else { seq.seeded_kv };
                computed = hit_tokens.max(seeded).min(seq.num_tokens - 1);
            }
            let seq = self.seqs[slot as usize].as_mut().expect("live slot");
            let mut n = seq.num_tokens - computed;
            if lpt > 0 {
                n = n.min(lpt);
            }
            n = n.min(*budget);
            // kv_cache_manager.py allocate_slots(full_sequence_must_fit):
            // blocks for min(num_tokens, max_model_len) must be free.
            if self.config.scheduler_reserve_full_isl
                && !landed
                && !self.kv.fits(&self.hits, seq.num_tokens.min(self.config.max_model_len))
            {
                if self.running.is_empty() {
                    (stuck, i) = (true, i + 1);
                    continue;
                }
                break;
            }
            // vLLM reserves the lookahead only for a request that arrives
            // with tokens computed (`effective_lookahead_tokens`): here, one
            // whose remote KV landed.
            let slots = computed + n + if landed { self.lookahead } else { self.admission_lookahead };
            let slots = slots.min(self.config.max_model_len.max(computed + n));
            self.kv.note_admission(&mut seq.blocks, computed);
            if !self.kv.allocate(&mut seq.blocks, &seq.hashes, &self.hits, slots, seq.num_tokens) {
                // (A landed request's blocks hold its whole prompt, unless it
                // came from the CPU tier, which may hold only part of it:
                // then it too is passed when nothing runs.)
                if self.running.is_empty() {
                    (stuck, i) = (true, i + 1);
                    continue;
                }
                break;
            }
            if i == 0 {
                self.waiting.pop_front();
            } else {
                self.waiting.remove(i);
            }
            if let Some(l) = &mut self.lora {
                l.unwait(seq.lora);
            }
            seq.lora_skipped = false;
            self.running.push(slot);
            // Landed until admitted: a load from the CPU tier may cover only
            // part of the prompt, so growing past it can fail, and the
            // request must then keep its blocks and its landed state.
            seq.remote = RemoteKv::None;
            if self.config.enable_prefix_caching && !landed {
                self.stats.prefix_queries += u64::from(seq.num_tokens);
                self.stats.prefix_hits += u64::from(hit_tokens);
            }
            seq.num_computed = computed;
            seq.prefill_end = seq.num_tokens;
            if !seq.admitted {
                seq.admitted = true;
                seq.cached_tokens = hit_tokens;
                events.push(EngineEvent::Scheduled(seq.owner));
            }
            if self.tracing {
                self.building.admitted.push((slot, computed));
            }
            if self.config.kv_offload.is_some() && !landed {
                // `_get_reqs_to_store` starts at a new request's first block:
                // its GPU-hit blocks are stored again if the tier lost them.
                let full = ((computed / block_size) as usize).min(seq.hashes.len());
                self.stats.cpu_stored_blocks += u64::from(self.connector.computed(&seq.hashes[..full]));
            }
            self.schedule_tokens::<false>(slot, n);
            *budget -= n;
        }
    }

    /// The remote KV of the request in `slot` has landed: its blocks are
    /// registered in the prefix cache and it is admitted at its turn, only
    /// its last token computed (scheduler.py `_update_from_kv_xfer_finished`
    /// then `_update_waiting_for_remote_kv`).
    pub(crate) fn kv_loaded(&mut self, slot: u32) {
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        debug_assert_eq!(seq.remote, RemoteKv::Loading);
        seq.remote = RemoteKv::Loaded;
        self.kv.register(&mut seq.blocks, &seq.hashes, seq.num_computed);
    }
}
