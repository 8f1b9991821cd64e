//! A request entering the engine: the checks vLLM's front end makes, its
//! prefix-cache keys (block hashes, salted by its LoRA adapter), and what a
//! router reads of those keys.

use super::*;

impl Engine {
    /// Prompt tokens of `call` in this engine's prefix cache now (what
    /// llm-d's prefix-cache scorer estimates for a replica).
    pub(crate) fn cached_prompt_tokens(&self, call: &LlmCall) -> u32 {
        let mut hashes = Vec::new();
        self.prompt_hashes(call, &mut hashes);
        self.kv.cached_prefix(&hashes) as u32 * self.config.block_size
    }

    /// The block hashes of `call`'s prompt as this engine's prefix cache
    /// keys them (a router's prefix view uses these); none without token ids
    /// or prefix caching.
    pub(crate) fn prompt_hashes(&self, call: &LlmCall, out: &mut Vec<u64>) {
        out.clear();
        if self.config.enable_prefix_caching {
            self.hashes_of(call, false, call.lora.as_deref().map_or(0, adapter_id), out);
        }
    }

    /// The block hashes of `call`'s prompt (then its output token ids, with
    /// `with_output`), salted by LoRA adapter `adapter` (0: the base model):
    /// the one place a request's cache keys are made. A prompt of block
    /// identities is hashed by blocks ([`prompt_block_hashes`]) only where
    /// that gives the same keys with and without `with_output` (no output
    /// ids, no hash lookahead, whole cache blocks), so a router's prompt
    /// hashes are always a prefix of the engine's.
    pub(super) fn hashes_of(&self, call: &LlmCall, with_output: bool, adapter: u64, out: &mut Vec<u64>) {
        let block_size = self.config.block_size;
        match (&call.input_token_ids, &call.prompt_blocks) {
            (None, Some(b))
                if call.output_token_ids.is_none()
                    && self.kv.hash_lookahead() == 0
                    && b.block_tokens > 0
                    && b.block_tokens.is_multiple_of(block_size) =>
            {
                prompt_block_hashes(b, call.input_tokens, block_size, out);
            }
            _ => {
                let Some(input) = call.prompt_ids() else { return };
                let output = call.output_token_ids.as_deref().filter(|_| with_output).into_iter().flatten().copied();
                if self.kv.hash_lookahead() > 0 {
                    block_hashes_with_next(input.chain(output), block_size, out);
                } else {
                    block_hashes(input.chain(output), block_size, out);
                }
            }
        }
        if adapter != 0 {
            lora::salt(out, adapter);
        }
    }

    /// Leading blocks of `hashes` this engine could serve without
    /// recomputing them: its GPU prefix cache's, then those the connector
    /// (a CPU tier) holds past them.
    pub(crate) fn cached_prefix_blocks(&self, hashes: &[u64]) -> usize {
        let gpu = self.kv.cached_prefix(hashes);
        gpu + self.connector.held_after(hashes, gpu)
    }

    /// Queues an llm call, with what its `kv_transfer_params` ask, or says
    /// why it can never be served. A `SendAfterPrefill` request is the
    /// proxy's prefill request: `max_tokens: 1`. `spec_key` is its
    /// speculative-decoding acceptance key ([`request_key`]); `now_us` its
    /// arrival (vLLM's `arrival_time`, the priority policy's tie-break).
    pub(crate) fn add(
        &mut self,
        owner: Owner,
        call: &LlmCall,
        transfer: KvTransfer,
        spec_key: u64,
        now_us: u64,
    ) -> Result<(), String> {
        let (known, seeded_kv) = call.seeded.map_or((0, 0), |s| (s.known_tokens, s.kv_tokens));
        let num_tokens = known.max(call.input_tokens);
        // A prefill request is checked as the prefill server checks it: its
        // prompt and the one token it generates.
        let (total_len, what) = if transfer == KvTransfer::SendAfterPrefill {
            let total = (call.input_tokens + call.output_tokens).min(num_tokens + 1);
            (total, "the prompt + the prefill request's 1 output token")
        } else {
            (call.input_tokens + call.output_tokens, "input_tokens + output_tokens")
        };
        if total_len > self.config.max_model_len {
            return Err(format!(
                "unservable: {what} = {total_len} exceeds max_model_len = {}",
                self.config.max_model_len
            ));
        }
        // The last sampled token is never computed, so the KV cache must hold
        // total_len − 1 tokens at the end.
        let mut blocks_needed = total_len.saturating_sub(1).div_ceil(self.config.block_size);
        if let Some(s) = &self.config.speculative {
            // Its last step may schedule k drafts and reserve k lookahead slots;
            // with async scheduling, counted as if the k drafts in flight
            // were accepted.
            let optimistic = if self.config.async_scheduling { s.k } else { 0 };
            let most = (total_len.saturating_sub(1) + s.k + optimistic + self.lookahead).min(self.config.max_model_len);
            blocks_needed = most.div_ceil(self.config.block_size);
        }
        // With KV cache groups, the blocks it may hold at once, or those the
        // admission gate counts if more (equal with one group).
        let gate = if self.config.scheduler_reserve_full_isl { self.kv.admission_blocks(blocks_needed) } else { 0 };
        let needed = self.kv.least_blocks(blocks_needed).max(gate);
        if needed > self.kv.num_blocks() {
            return Err(format!(
                "unservable: needs {needed} KV blocks of {} tokens, the cache has {}",
                self.config.block_size,
                self.kv.num_blocks()
            ));
        }
        if num_tokens == 0 {
            // vLLM's input processor refuses an empty prompt.
            return Err("unservable: the prompt is empty (input_tokens = 0)".to_owned());
        }
        let (adapter, lora) = match (&call.lora, &mut self.lora) {
            (None, _) => (0, 0),
            // vLLM answers 404 for a model name it does not serve.
            (Some(name), None) => {
                return Err(format!("unservable: LoRA adapter `{name}` on an engine without engine.lora"));
            }
            (Some(name), Some(l)) => {
                let id = adapter_id(name);
                (id, l.enter(id))
            }
        };
        let mut hashes = Vec::new();
        if self.config.enable_prefix_caching {
            self.hashes_of(call, true, adapter, &mut hashes);
        }
        let seq = Seq {
            owner,
            num_tokens,
            total_len,
            num_computed: 0,
            pending: 0,
            in_flight_tokens: 0,
            prefill_end: num_tokens,
            seeded_kv,
            blocks: SeqBlocks::with_capacity(self.kv.entries_for(blocks_needed as usize), hashes.len()),
            hashes,
            preemptions: 0,
            cached_tokens: 0,
            admitted: false,
            aborted: false,
            transfer,
            remote: RemoteKv::None,
            held: false,
            lora_skipped: false,
            tokens: TokenRuns::default(),
            lora,
            spec_stream: self.config.speculative.as_ref().map_or(0, |s| s.stream(spec_key)),
            prompt_len: num_tokens,
            drafts: 0,
            priority: call.priority,
            arrival: (now_us, self.arrivals),
            steady_from: 0,
            steady_due: 0,
            steady_last: 0,
        };
        self.arrivals += 1;
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.seqs[s as usize] = Some(seq);
                s
            }
            None => {
                self.seqs.push(Some(seq));
                self.seqs.len() as u32 - 1
            }
        };
        if self.steady.len() < self.seqs.len() {
            self.steady.resize(self.seqs.len(), false);
        }
        self.enqueue(slot);
        if let Some(l) = &mut self.lora {
            l.wait(lora);
        }
        Ok(())
    }
}
