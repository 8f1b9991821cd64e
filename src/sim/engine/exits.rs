//! Requests leaving the engine other than by finishing a step: a run cut off
//! by its horizon, a client's abort, and a finished request's blocks freed
//! once a KV send completes.

use super::*;

impl Engine {
    /// Every request still in the engine, with the tokens it has emitted, in
    /// slot order; the engine is left empty. For runs cut off by a horizon.
    pub(crate) fn drain(&mut self) -> Vec<Departure> {
        self.settle_all();
        self.waiting.clear();
        self.running.clear();
        self.free_slots.clear();
        self.has_queued = false;
        self.stepping = false;
        if let Some(l) = &mut self.lora {
            l.clear_requests();
        }
        let log = &self.step_log;
        self.seqs.drain(..).flatten().filter(|s| !s.aborted && !s.held).map(|s| s.departure(log, None)).collect()
    }

    /// The send of a finished request's KV (held in `slot`) completed: its
    /// blocks are freed (nixl_connector.py: freed when the decode side
    /// reports the read done).
    pub(crate) fn release(&mut self, slot: u32) {
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        debug_assert!(seq.held);
        self.kv.free(&mut seq.blocks);
        self.seqs[slot as usize] = None;
        self.free_slots.push(slot);
    }

    /// The client gave up on `owner` (vLLM aborts a request whose client
    /// disconnects). Returns what it emitted so far; `None` if it is not in
    /// the engine. The engine sees the abort at the next step boundary, as
    /// vLLM's engine core handles aborts between steps: then the request
    /// leaves its queue and its KV blocks are freed.
    pub(crate) fn abort(&mut self, owner: Owner) -> Option<Departure> {
        let slot = self.seqs.iter().position(|s| s.as_ref().is_some_and(|s| s.owner == owner && !s.aborted))? as u32;
        self.settle_if_steady(slot);
        let seq = self.seqs[slot as usize].as_mut().expect("found");
        let departure = Departure {
            owner,
            token_times_us: seq.tokens.take(&self.step_log, None),
            preemptions: seq.preemptions,
            cached_tokens: seq.cached_tokens,
        };
        seq.aborted = true;
        if self.stepping {
            self.pending_aborts.push(slot);
        } else {
            self.remove(slot);
        }
        Some(departure)
    }

    /// vLLM's `finish_requests(.., FINISHED_ABORTED)`: `slot` leaves its
    /// queue, its blocks are freed, and a queued step computes nothing for it.
    pub(super) fn remove(&mut self, slot: u32) {
        self.settle_if_steady(slot);
        let seq = self.seqs[slot as usize].as_mut().expect("live slot");
        if let Some(l) = &mut self.lora {
            l.leave(seq.lora);
            if self.waiting.contains(&slot) {
                l.unwait(seq.lora);
            }
        }
        self.kv.free(&mut seq.blocks);
        self.seqs[slot as usize] = None;
        self.free_slots.push(slot);
        self.running.retain(|&s| s != slot);
        self.waiting.retain(|&s| s != slot);
        if self.has_queued {
            for e in self.queued.entries.iter_mut().filter(|e| e.slot == slot) {
                e.dead = true;
            }
        }
    }
}
