//! Which vLLM release the engine behaves as. Scheduler behaviour changed
//! between releases in ways that move preemptions and prefix-cache hits; a
//! scenario names its release (`engine.vllm_version`) and gets that
//! release's behaviour, each setting still overridable by its own key. The
//! release boundaries were found by reading each release's wheel
//! (`../shared/reference/vllm-scheduler-diff.md`, D2–D4) and are checked
//! step for step against vLLM's own scheduler by the conformance suite
//! (`scripts/vllm-conformance/`, `tests/data/vllm-conformance/`).

use std::fmt;

/// A vLLM release, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VllmVersion {
    major: u32,
    minor: u32,
    patch: u32,
}

/// The release the engine models when a scenario names none: the newest
/// one the conformance suite checks.
pub const DEFAULT_VLLM_VERSION: VllmVersion = VllmVersion::new(0, 33, 0);

/// The oldest release modelled: the scheduler as of 0.15.1, the release of
/// the oldest real runs in `../shared/data`.
const OLDEST: VllmVersion = VllmVersion::new(0, 15, 0);

/// The scheduler behaviours a release fixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseBehaviour {
    /// `scheduler_reserve_full_isl`, on by default from 0.19.0
    /// (`vllm/config/scheduler.py`; absent up to 0.18.1).
    pub scheduler_reserve_full_isl: bool,
    /// A lone request ignores `long_prefill_token_threshold`, from 0.31.0
    /// (`vllm/v1/core/sched/scheduler.py`, `num_eligible_reqs`; absent in
    /// 0.30.0).
    pub lone_request_skips_prefill_threshold: bool,
    /// Freed blocks without a hash are reused first, from 0.28.0
    /// (`vllm/v1/core/block_pool.py`, `free_blocks`; 0.27.1 appends all).
    pub free_uncached_blocks_first: bool,
    /// With an EAGLE drafter, block hashes cover the token after the block
    /// and waiting requests are admitted with the lookahead slots; before,
    /// the last prefix-hit block is dropped instead. Recorded in 0.33.0
    /// (`block_pool.py` `num_hash_lookahead_tokens`, vLLM PR #50897) against
    /// 0.15.1 and 0.19.0, which has the old rule (no
    /// `num_hash_lookahead_tokens` in its `v1/core/`, nor in 0.32.0's
    /// wheel: 0.33.0 is the first).
    pub eagle_hashes_next_token: bool,
    /// With LoRA, `max_loras` at admission counts the adapters of every
    /// running request, not only those scheduled in the step. Recorded in
    /// 0.33.0 (`scheduler.py`: "Record the LoRAs of all running requests,
    /// including those not scheduled in this step") against 0.15.1 and
    /// 0.19.0, which counts only the running requests scheduled
    /// (`scheduler.py`: "Record the LoRAs in scheduled_running_reqs", as in
    /// 0.32.0's wheel: 0.33.0 is the first).
    pub lora_counts_every_running_request: bool,
    /// Priority policy: a running request that preempts itself does not end
    /// the pass over the running requests. Recorded in 0.33.0 against 0.15.1
    /// and 0.19.0 (`tests/data/vllm-conformance/features/`, `prio_a` and
    /// `prio_c`); releases between are not recorded and take 0.19.0's rule.
    pub self_preemption_continues: bool,
    /// A waiting request skipped for `max_loras` moves to a queue of its
    /// own (`skipped_waiting`) that every scheduling pass serves before
    /// `waiting`, so a request preempted later (put back at the head of
    /// `waiting`) is admitted after it, not before. Recorded in 0.19.0
    /// (`scheduler.py` `_select_waiting_queue_for_scheduling`: FCFS takes
    /// `self.skipped_waiting or self.waiting`); 0.15.1 and 0.33.0 put
    /// skipped requests back at the head of `waiting` (`scheduler.py`
    /// `skipped_waiting_requests`, `step_skipped_waiting`). From 0.18.0 to
    /// 0.30.0, read in the wheels: vLLM PR #35781 added the queue (absent in
    /// 0.17.1, present in 0.18.0 and 0.30.0); 0.31.0 has
    /// `kv_holding_waiting` instead and skipped requests back in `waiting`.
    pub lora_skipped_queue_first: bool,
    /// The hybrid KV cache manager's window rules, each from the release
    /// whose wheel first has it (0.33.0's recorded: `tests/data/vllm-
    /// conformance/hybrid/`; 0.15.1, 0.19.0, 0.22.0, 0.25.0, 0.28.0 and
    /// 0.30.0 read; releases between take the older rule). From 0.22:
    /// admission counts a window's blocks up to its cap
    /// (`max_admission_blocks_per_request`).
    pub window_admission_cap: bool,
    /// From 0.28: a window frees what the processed tokens leave behind,
    /// not those of a step in flight (`total_computed_tokens −
    /// num_in_flight_tokens`).
    pub window_lags_in_flight: bool,
    /// From 0.30: `prefix_cache_retention_interval` (default 0): a window
    /// group caches only the blocks a resent prompt or a shared prefix can
    /// hit; before, every block.
    pub window_cache_retention: bool,
}

impl VllmVersion {
    /// `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> VllmVersion {
        VllmVersion { major, minor, patch }
    }

    /// Parses `0.19.0` or `0.19` (patch 0); a local suffix such as
    /// `0.15.1+cu128` is ignored.
    pub fn parse(text: &str) -> Result<VllmVersion, String> {
        let core = text.trim().split(['+', '-']).next().unwrap_or("");
        let parts: Vec<&str> = core.split('.').collect();
        let num = |s: &str| s.parse::<u32>().ok();
        let version = match parts.as_slice() {
            [a, b] => num(a).zip(num(b)).map(|(a, b)| VllmVersion::new(a, b, 0)),
            [a, b, c] => match (num(a), num(b), num(c)) {
                (Some(a), Some(b), Some(c)) => Some(VllmVersion::new(a, b, c)),
                _ => None,
            },
            _ => None,
        };
        let version = version.ok_or_else(|| format!("`{text}` is not a vLLM release such as 0.19.0"))?;
        if version < OLDEST {
            return Err(format!("{version} predates the oldest release modelled ({OLDEST})"));
        }
        Ok(version)
    }

    /// Whether top-k/top-p sampling sorts every row over the vocabulary
    /// (vLLM's PyTorch `apply_top_k_top_p`): the default CUDA path of the
    /// releases modelled up to 0.15.x (0.15.1 is the release of the
    /// blis-vllm-h100 runs; vllm-project/vllm#32558, 2026-01, calls it "the
    /// current" implementation, FlashInfer's sampler "not enabled by
    /// default"). vllm-project/vllm#33538 (opened 2026-02-02, merged) replaced
    /// it with a Triton kernel, and #40376 later made FlashInfer's the
    /// default; the first release with #33538 was not checked, so 0.16 on is
    /// priced without the sort.
    pub fn sorts_top_k_top_p(self) -> bool {
        self < VllmVersion::new(0, 16, 0)
    }

    /// The scheduler behaviours of this release.
    pub fn behaviour(self) -> ReleaseBehaviour {
        ReleaseBehaviour {
            scheduler_reserve_full_isl: self >= VllmVersion::new(0, 19, 0),
            lone_request_skips_prefill_threshold: self >= VllmVersion::new(0, 31, 0),
            free_uncached_blocks_first: self >= VllmVersion::new(0, 28, 0),
            eagle_hashes_next_token: self >= VllmVersion::new(0, 33, 0),
            lora_counts_every_running_request: self >= VllmVersion::new(0, 33, 0),
            self_preemption_continues: self >= VllmVersion::new(0, 33, 0),
            lora_skipped_queue_first: self >= VllmVersion::new(0, 18, 0) && self < VllmVersion::new(0, 31, 0),
            window_admission_cap: self >= VllmVersion::new(0, 22, 0),
            window_lags_in_flight: self >= VllmVersion::new(0, 28, 0),
            window_cache_retention: self >= VllmVersion::new(0, 30, 0),
        }
    }
}

impl fmt::Display for VllmVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_and_set_their_behaviour() {
        let v = |s: &str| VllmVersion::parse(s).unwrap();
        assert_eq!(v("0.15.1+cu128").to_string(), "0.15.1");
        assert_eq!(v("0.19"), VllmVersion::new(0, 19, 0));
        let b = v("0.15.1").behaviour();
        assert!(
            !b.scheduler_reserve_full_isl && !b.lone_request_skips_prefill_threshold && !b.free_uncached_blocks_first
        );
        let b = v("0.19.0").behaviour();
        assert!(b.scheduler_reserve_full_isl && !b.free_uncached_blocks_first);
        // The window rules, each from the first wheel read that has it.
        let w = |s: &str| {
            let b = v(s).behaviour();
            (b.window_admission_cap, b.window_lags_in_flight, b.window_cache_retention)
        };
        assert_eq!(
            [w("0.19.0"), w("0.22.0"), w("0.25.0"), w("0.28.0"), w("0.30.0"), w("0.33.0")],
            [
                (false, false, false),
                (true, false, false),
                (true, false, false),
                (true, true, false),
                (true, true, true),
                (true, true, true)
            ]
        );
        // 0.19.0's feature traces: 0.15.1's EAGLE and LoRA counting rules,
        // and its own queue for requests skipped for max_loras.
        assert!(!b.eagle_hashes_next_token && !b.lora_counts_every_running_request && b.lora_skipped_queue_first);
        assert!(!v("0.17.1").behaviour().lora_skipped_queue_first && v("0.18.0").behaviour().lora_skipped_queue_first);
        assert!(v("0.30.0").behaviour().lora_skipped_queue_first && !v("0.31.0").behaviour().lora_skipped_queue_first);
        assert!(!v("0.15.1").behaviour().lora_skipped_queue_first && !v("0.33.0").behaviour().lora_skipped_queue_first);
        assert!(v("0.28.0").behaviour().free_uncached_blocks_first);
        assert!(!v("0.32.1").behaviour().eagle_hashes_next_token && v("0.33.0").behaviour().eagle_hashes_next_token);
        assert!(!v("0.30.0").behaviour().lone_request_skips_prefill_threshold);
        let b = DEFAULT_VLLM_VERSION.behaviour();
        assert!(b.scheduler_reserve_full_isl && b.lone_request_skips_prefill_threshold && b.free_uncached_blocks_first);
        for bad in ["", "0.x", "1", "0.14.9", "0.19.0.1"] {
            assert!(VllmVersion::parse(bad).is_err(), "{bad}");
        }
    }
}
