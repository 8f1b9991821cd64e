//! The gateway queue of flow control (llm-d's Gateway API Inference
//! Extension `pkg/epp/flowcontrol`, as BLIS models it): one band per SLO
//! class priority, most urgent first; in each band one flow per tenant. An
//! llm call ready to run waits here until the saturation is below its
//! band's ceiling (head of line: the first non-empty band that cannot go
//! stops dispatch), until its TTL runs out, or until a more urgent call
//! takes its place in a full queue. This file is the queue alone: what a
//! call is and when dispatch is tried is `hooks.rs`'s.

use std::collections::VecDeque;

use crate::workload::SloClass;

/// Bands: one per class priority, most urgent first (llm-d's five).
pub(crate) const BANDS: usize = SloClass::ALL.len();

/// Which flow of a band goes next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fairness {
    /// The flows take turns (a cursor per band).
    #[default]
    RoundRobin,
    /// The call queued first, whatever its flow.
    GlobalStrict,
}

/// The order of calls inside a flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueueOrder {
    /// First queued, first out.
    #[default]
    Fifo,
    /// The call's vLLM priority (lower first), then first queued.
    Priority,
    /// Earliest deadline (its request's send + `slo_target`; none: last),
    /// then first queued.
    Deadline,
}

/// `router.flow_control`, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowControlConfig {
    /// Flows of a band.
    pub fairness: Fairness,
    /// Calls of a flow.
    pub order: QueueOrder,
    /// Calls the queue holds at most (`None`: no cap).
    pub max_queue: Option<u32>,
    /// A call waiting this long leaves expired, µs (`None`: never).
    pub ttl_us: Option<u64>,
    /// `u` of the head-of-line ceilings: band i of n goes while the
    /// saturation is below `1 − i(1 − u)/(n − 1)` (1: every band up to 1).
    pub usage_limit: f64,
    /// How often dispatch and expiry are tried while the queue is not
    /// empty, µs (besides every enqueue, engine step end and request end).
    pub tick_us: u64,
}

/// One queued call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
    pub(crate) node: u32,
    pub(crate) enqueued_us: u64,
    /// The order key inside its flow (see [`QueueOrder`]).
    pub(crate) key: i64,
    /// Queue-wide arrival order.
    pub(crate) seq: u64,
}

/// One tenant's calls in one band, in order.
#[derive(Debug, Default)]
struct Flow {
    tenant: Option<String>,
    /// Sorted by (key, seq): FIFO order appends, dispatch pops the front.
    entries: VecDeque<Entry>,
}

#[derive(Debug, Default)]
struct Band {
    flows: Vec<Flow>,
    cursor: usize,
}

/// What enqueuing did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Enqueued {
    /// Queued.
    Queued,
    /// Queued in place of this less urgent sheddable call, which leaves shed.
    Displaced(Entry),
    /// The queue is full of calls at least as urgent: the newcomer is shed.
    Full,
}

/// The queue.
#[derive(Debug)]
pub(crate) struct FlowQueue {
    pub(crate) config: FlowControlConfig,
    bands: Vec<Band>,
    len: usize,
    next_seq: u64,
    /// No call was queued before this (a lower bound): expiry skips its
    /// scan of the queue until a call may have waited out its TTL.
    oldest_us: u64,
}

/// The band of a class: its position in the classes by priority, most urgent first.
pub(crate) fn band_of(class: SloClass) -> usize {
    SloClass::ALL.iter().filter(|c| c.priority() > class.priority()).count()
}

/// Whether band `b` holds a sheddable class.
fn band_sheddable(b: usize) -> bool {
    SloClass::ALL.iter().any(|&c| band_of(c) == b && c.is_sheddable())
}

impl FlowQueue {
    pub(crate) fn new(config: FlowControlConfig) -> FlowQueue {
        FlowQueue {
            config,
            bands: (0..BANDS).map(|_| Band::default()).collect(),
            len: 0,
            next_seq: 0,
            oldest_us: u64::MAX,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Band `i`'s head-of-line ceiling.
    pub(crate) fn ceiling(&self, band: usize) -> f64 {
        1.0 - band as f64 * (1.0 - self.config.usage_limit) / (BANDS - 1) as f64
    }

    /// Queues a call of `class` and `tenant` with order key `key` at `now`,
    /// or sheds as the cap says: a full queue makes room by shedding its
    /// least urgent sheddable call (lowest band, newest) only when the
    /// newcomer's class is strictly more urgent; never a more urgent one.
    pub(crate) fn enqueue(&mut self, mut entry: Entry, class: SloClass, tenant: Option<&str>) -> Enqueued {
        let band = band_of(class);
        let mut displaced = None;
        if self.config.max_queue.is_some_and(|cap| self.len >= cap as usize) {
            let victim = (band + 1..BANDS)
                .rev()
                .filter(|&b| band_sheddable(b))
                .find_map(|b| self.newest(b).map(|(f, i)| (b, f, i)));
            let Some((b, f, i)) = victim else { return Enqueued::Full };
            displaced = self.bands[b].flows[f].entries.remove(i);
            self.len -= 1;
        }
        entry.seq = self.next_seq;
        self.next_seq += 1;
        self.oldest_us = self.oldest_us.min(entry.enqueued_us);
        let flows = &mut self.bands[band].flows;
        let f = match flows.iter().position(|f| f.tenant.as_deref() == tenant) {
            Some(f) => f,
            None => {
                flows.push(Flow { tenant: tenant.map(str::to_owned), entries: VecDeque::new() });
                flows.len() - 1
            }
        };
        let entries = &mut flows[f].entries;
        let at = entries.partition_point(|e| (e.key, e.seq) <= (entry.key, entry.seq));
        entries.insert(at, entry);
        self.len += 1;
        displaced.map_or(Enqueued::Queued, Enqueued::Displaced)
    }

    /// The newest call of band `b`: (flow, index).
    fn newest(&self, b: usize) -> Option<(usize, usize)> {
        let mut best: Option<(u64, usize, usize)> = None;
        for (f, flow) in self.bands[b].flows.iter().enumerate() {
            for (i, e) in flow.entries.iter().enumerate() {
                if best.is_none_or(|(s, _, _)| e.seq > s) {
                    best = Some((e.seq, f, i));
                }
            }
        }
        best.map(|(_, f, i)| (f, i))
    }

    /// The next call to dispatch at saturation `s`, taken out of the queue:
    /// the first non-empty band's next call if `s` is below its ceiling,
    /// else none (head of line).
    pub(crate) fn pop(&mut self, s: f64) -> Option<Entry> {
        let b = self.bands.iter().position(|b| b.flows.iter().any(|f| !f.entries.is_empty()))?;
        if s >= self.ceiling(b) {
            return None;
        }
        let band = &mut self.bands[b];
        let n = band.flows.len();
        let f = match self.config.fairness {
            Fairness::GlobalStrict => (0..n)
                .filter(|&f| !band.flows[f].entries.is_empty())
                .min_by_key(|&f| band.flows[f].entries[0].seq)
                .expect("a non-empty flow"),
            Fairness::RoundRobin => {
                let f = (0..n).map(|k| (band.cursor + k) % n).find(|&f| !band.flows[f].entries.is_empty());
                let f = f.expect("a non-empty flow");
                band.cursor = (f + 1) % n;
                f
            }
        };
        self.len -= 1;
        band.flows[f].entries.pop_front()
    }

    /// Takes out every call queued at or before `queued_by_us` (TTL expiry),
    /// into `out`, in queue order.
    pub(crate) fn expire(&mut self, queued_by_us: u64, out: &mut Vec<Entry>) {
        if self.oldest_us > queued_by_us {
            return;
        }
        let start = out.len();
        let mut oldest = u64::MAX;
        for band in &mut self.bands {
            for flow in &mut band.flows {
                flow.entries.retain(|e| {
                    let keep = e.enqueued_us > queued_by_us;
                    if keep {
                        oldest = oldest.min(e.enqueued_us);
                    } else {
                        out.push(*e);
                    }
                    keep
                });
            }
        }
        self.oldest_us = oldest;
        out[start..].sort_by_key(|e| e.seq);
        self.len -= out.len() - start;
    }

    /// Takes out the calls of the request in `slot` (it left), into `out`.
    pub(crate) fn remove_request(&mut self, slot: u32, generation: u32, out: &mut Vec<Entry>) {
        let start = out.len();
        for band in &mut self.bands {
            for flow in &mut band.flows {
                flow.entries.retain(|e| {
                    let hit = e.slot == slot && e.generation == generation;
                    if hit {
                        out.push(*e);
                    }
                    !hit
                });
            }
        }
        self.len -= out.len() - start;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> FlowControlConfig {
        FlowControlConfig {
            fairness: Fairness::RoundRobin,
            order: QueueOrder::Fifo,
            max_queue: None,
            ttl_us: None,
            usage_limit: 1.0,
            tick_us: 1000,
        }
    }

    fn entry(slot: u32, key: i64, at: u64) -> Entry {
        Entry { slot, generation: 0, node: 0, enqueued_us: at, key, seq: 0 }
    }

    fn drain(q: &mut FlowQueue, s: f64) -> Vec<u32> {
        std::iter::from_fn(|| q.pop(s)).map(|e| e.slot).collect()
    }

    #[test]
    fn bands_go_most_urgent_first_and_keys_order_a_flow() {
        let mut q = FlowQueue::new(config());
        q.enqueue(entry(0, 0, 0), SloClass::Background, None);
        q.enqueue(entry(1, 5, 0), SloClass::Standard, None);
        q.enqueue(entry(2, 0, 0), SloClass::Sheddable, None);
        q.enqueue(entry(3, 1, 0), SloClass::Standard, None);
        q.enqueue(entry(4, 0, 0), SloClass::Critical, None);
        q.enqueue(entry(5, 0, 0), SloClass::Batch, None);
        assert_eq!(drain(&mut q, 0.0), [4, 3, 1, 5, 2, 0]);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn round_robin_alternates_tenants_and_global_strict_takes_the_first_queued() {
        let mut q = FlowQueue::new(config());
        for (slot, tenant) in [(0, "a"), (1, "a"), (2, "a"), (3, "b"), (4, "b")] {
            q.enqueue(entry(slot, 0, 0), SloClass::Standard, Some(tenant));
        }
        assert_eq!(drain(&mut q, 0.0), [0, 3, 1, 4, 2]);
        let mut q = FlowQueue::new(FlowControlConfig { fairness: Fairness::GlobalStrict, ..config() });
        for (slot, tenant) in [(0, "a"), (1, "a"), (2, "a"), (3, "b"), (4, "b")] {
            q.enqueue(entry(slot, 0, 0), SloClass::Standard, Some(tenant));
        }
        assert_eq!(drain(&mut q, 0.0), [0, 1, 2, 3, 4]);
    }

    #[test]
    fn head_of_line_ceilings_stop_dispatch_at_the_first_band_that_cannot_go() {
        // u = 0.6 over 5 bands: ceilings 1, 0.9, 0.8, 0.7, 0.6.
        let mut q = FlowQueue::new(FlowControlConfig { usage_limit: 0.6, ..config() });
        let ceilings: Vec<f64> = (0..BANDS).map(|b| q.ceiling(b)).collect();
        for (c, want) in ceilings.iter().zip([1.0, 0.9, 0.8, 0.7, 0.6]) {
            assert!((c - want).abs() < 1e-12, "{ceilings:?}");
        }
        q.enqueue(entry(0, 0, 0), SloClass::Sheddable, None); // band 3, ceiling 0.7
        q.enqueue(entry(1, 0, 0), SloClass::Background, None); // band 4, ceiling 0.6
        assert_eq!(q.pop(0.7), None, "at the ceiling it waits");
        // Head of line: band 4 would go at 0.65? No: band 3 is first and stops it.
        assert_eq!(q.pop(0.65).map(|e| e.slot), Some(0));
        assert_eq!(q.pop(0.65), None);
        assert_eq!(q.pop(0.59).map(|e| e.slot), Some(1));
        // Default u = 1: every band up to saturation 1.
        let mut q = FlowQueue::new(config());
        q.enqueue(entry(2, 0, 0), SloClass::Background, None);
        assert_eq!(q.pop(1.0), None);
        assert_eq!(q.pop(0.999).map(|e| e.slot), Some(2));
    }

    #[test]
    fn ttl_expires_what_was_queued_by_the_cutoff_in_queue_order() {
        let mut q = FlowQueue::new(config());
        q.enqueue(entry(0, 0, 10), SloClass::Critical, None);
        q.enqueue(entry(1, 0, 5), SloClass::Batch, None);
        q.enqueue(entry(2, 0, 11), SloClass::Critical, None);
        let mut out = Vec::new();
        q.expire(10, &mut out);
        assert_eq!(out.iter().map(|e| e.slot).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(q.len(), 1);
        assert_eq!(drain(&mut q, 0.0), [2]);
    }

    #[test]
    fn a_full_queue_sheds_only_less_urgent_sheddable_calls() {
        let mut q = FlowQueue::new(FlowControlConfig { max_queue: Some(2), ..config() });
        assert_eq!(q.enqueue(entry(0, 0, 0), SloClass::Batch, None), Enqueued::Queued);
        assert_eq!(q.enqueue(entry(1, 0, 0), SloClass::Sheddable, None), Enqueued::Queued);
        // Batch (-1) newcomer: displaces the sheddable (-2) call, the least urgent.
        let Enqueued::Displaced(e) = q.enqueue(entry(2, 0, 0), SloClass::Batch, None) else { panic!() };
        assert_eq!(e.slot, 1);
        // Another batch: the queue holds only batch calls, as urgent: it is shed.
        assert_eq!(q.enqueue(entry(3, 0, 0), SloClass::Batch, None), Enqueued::Full);
        // Critical displaces the newest batch call.
        let Enqueued::Displaced(e) = q.enqueue(entry(4, 0, 0), SloClass::Critical, None) else { panic!() };
        assert_eq!(e.slot, 2);
        let Enqueued::Displaced(e) = q.enqueue(entry(5, 0, 0), SloClass::Standard, None) else { panic!() };
        assert_eq!(e.slot, 0);
        // Now critical + standard: nothing sheddable, even a critical newcomer is shed.
        assert_eq!(q.enqueue(entry(6, 0, 0), SloClass::Critical, None), Enqueued::Full);
        assert_eq!(drain(&mut q, 0.0), [4, 5]);
    }

    #[test]
    fn a_request_that_leaves_takes_its_calls_out() {
        let mut q = FlowQueue::new(config());
        q.enqueue(entry(0, 0, 0), SloClass::Critical, None);
        q.enqueue(Entry { node: 1, ..entry(0, 0, 0) }, SloClass::Critical, None);
        q.enqueue(entry(1, 0, 0), SloClass::Critical, None);
        let mut out = Vec::new();
        q.remove_request(0, 0, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(drain(&mut q, 0.0), [1]);
    }
}
