//! The seam through which KV moves between an engine's GPU cache and
//! anywhere else, in the shape of the scheduler half of vLLM's
//! `KVConnectorBase_V1` (`vllm/distributed/kv_transfer/kv_connector/v1/base.py`):
//! how many prompt tokens beyond the GPU prefix hit can be loaded from
//! elsewhere, what happens once blocks are allocated for a load, and whether
//! a finished request's blocks must outlive it until a send completes.
//!
//! [`NoConnector`] is an engine without `--kv-transfer-config`: every call
//! answers "nothing", which is the engine as it always was. [`NixlConnector`]
//! is prefill/decode disaggregation as vLLM's `NixlConnector` runs it
//! (`nixl_connector.py`, `NixlConnectorScheduler`): a request sent with
//! `do_remote_decode` prefills, generates its one token and keeps its blocks
//! for the decode replica to read; one sent with `do_remote_prefill` finds
//! its whole uncached prompt remote, waits in `WAITING_FOR_REMOTE_KVS` while
//! the read runs, then recomputes only its last token.
//!
//! A new connector (a shared store) is one file implementing [`KvConnector`]
//! and one entry in [`ConnectorKind`] and in `connector` (`engine.rs`); the CPU tier's
//! (`offload.rs`) is chosen by `EngineConfig::kv_offload`.

use super::batch::{EngineEvent, Owner};

/// What a request's `kv_transfer_params` ask of the engine it is sent to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum KvTransfer {
    /// No transfer: an aggregated request.
    #[default]
    Local,
    /// `do_remote_decode`: prefill here, sample one token (the proxy sends
    /// `max_tokens: 1`), then hold the blocks until the decode replica has
    /// read them.
    SendAfterPrefill,
    /// `do_remote_prefill`: the prompt's KV was computed elsewhere and is
    /// read from there before the request runs.
    ReceivePrefill,
}

/// Which connector an engine runs with (`--kv-transfer-config`'s
/// `kv_connector`): the one list of connectors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConnectorKind {
    /// No `--kv-transfer-config`.
    #[default]
    None,
    /// `NixlConnector`: prefill/decode disaggregation.
    Nixl,
}

/// The scheduler's view of whoever else holds KV for this engine.
pub(crate) trait KvConnector {
    /// `get_num_new_matched_tokens`: tokens of a `prompt_tokens`-token
    /// prompt (its block hashes `hashes`) beyond the GPU prefix hit that can
    /// be loaded from elsewhere, and whether the load is asynchronous (the
    /// request then waits in `WAITING_FOR_REMOTE_KVS` until it lands).
    fn matched_tokens(
        &mut self,
        transfer: KvTransfer,
        hashes: &[u64],
        prompt_tokens: u32,
        gpu_hit_tokens: u32,
    ) -> (u32, bool);

    /// `update_state_after_alloc`: blocks were allocated for `loaded_tokens`
    /// tokens of `owner` (in engine slot `slot`) to be loaded.
    fn after_alloc(&mut self, owner: Owner, slot: u32, loaded_tokens: u32, events: &mut Vec<EngineEvent>);

    /// `request_finished`: true keeps the request's blocks after it
    /// finishes, until a send completes (`Engine::release`).
    fn request_finished(&mut self, transfer: KvTransfer) -> bool;

    /// A scheduled step computes the full blocks of `hashes` (or a request
    /// was admitted over them): blocks newly stored elsewhere.
    fn computed(&mut self, _hashes: &[u64]) -> u32 {
        0
    }

    /// The GPU cache evicted the block of `hash`: blocks newly stored.
    fn gpu_evicted(&mut self, _hash: u64) -> u32 {
        0
    }

    /// Whether the engine must report its GPU evictions.
    fn records_evictions(&self) -> bool {
        false
    }

    /// Leading blocks of `hashes` past the first `gpu_blocks` (the GPU
    /// prefix hit) that this connector could load: the router's view of
    /// the tiers beyond HBM.
    fn held_after(&self, _hashes: &[u64], _gpu_blocks: usize) -> usize {
        0
    }

    /// Of the tokens the last `matched_tokens` found, those held only in a
    /// tier below the first (a disk).
    fn matched_below(&self) -> u32 {
        0
    }

    /// Bytes one GPU reads to load `tokens` tokens.
    fn load_bytes(&self, _tokens: u32) -> u64 {
        0
    }
}

/// An engine without a KV connector.
#[derive(Debug, Default)]
pub(crate) struct NoConnector;

impl KvConnector for NoConnector {
    fn matched_tokens(&mut self, _: KvTransfer, _: &[u64], _: u32, _: u32) -> (u32, bool) {
        (0, false)
    }

    fn after_alloc(&mut self, _: Owner, _: u32, _: u32, _: &mut Vec<EngineEvent>) {}

    fn request_finished(&mut self, _: KvTransfer) -> bool {
        false
    }
}

/// vLLM's `NixlConnector`, scheduler side. The read itself is timed by the
/// driver (it knows the link): the connector reports each load as
/// [`EngineEvent::KvLoad`] and the driver calls `Engine::kv_loaded` when it
/// lands.
#[derive(Debug, Default)]
pub(crate) struct NixlConnector;

impl KvConnector for NixlConnector {
    fn matched_tokens(
        &mut self,
        transfer: KvTransfer,
        _: &[u64],
        prompt_tokens: u32,
        gpu_hit_tokens: u32,
    ) -> (u32, bool) {
        // nixl_connector.py `get_num_new_matched_tokens`: for a remote
        // prefill, "the remote has computed all prompt tokens": everything
        // past the local hit, loaded asynchronously.
        match transfer {
            KvTransfer::ReceivePrefill => (prompt_tokens.saturating_sub(gpu_hit_tokens), true),
            KvTransfer::Local | KvTransfer::SendAfterPrefill => (0, false),
        }
    }

    fn after_alloc(&mut self, owner: Owner, slot: u32, loaded_tokens: u32, events: &mut Vec<EngineEvent>) {
        if loaded_tokens > 0 {
            events.push(EngineEvent::KvLoad { owner, slot, tokens: loaded_tokens });
        }
    }

    fn request_finished(&mut self, transfer: KvTransfer) -> bool {
        // `request_finished` returns delay_free_blocks for do_remote_decode:
        // the blocks stay until the decode side has read them.
        transfer == KvTransfer::SendAfterPrefill
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_remote_prefill_loads_and_only_a_remote_decode_holds_its_blocks() {
        let mut nixl = Box::new(NixlConnector) as Box<dyn KvConnector>;
        assert_eq!(nixl.matched_tokens(KvTransfer::ReceivePrefill, &[], 100, 32), (68, true));
        assert_eq!(nixl.matched_tokens(KvTransfer::Local, &[], 100, 32), (0, false));
        assert!(nixl.request_finished(KvTransfer::SendAfterPrefill));
        assert!(!nixl.request_finished(KvTransfer::ReceivePrefill));
        let mut events = Vec::new();
        nixl.after_alloc(Owner { slot: 1, node: 0 }, 3, 68, &mut events);
        assert_eq!(events, [EngineEvent::KvLoad { owner: Owner { slot: 1, node: 0 }, slot: 3, tokens: 68 }]);
        let mut none = Box::new(NoConnector) as Box<dyn KvConnector>;
        assert_eq!(none.matched_tokens(KvTransfer::ReceivePrefill, &[], 100, 0), (0, false));
        assert!(!none.request_finished(KvTransfer::SendAfterPrefill));
    }
}
