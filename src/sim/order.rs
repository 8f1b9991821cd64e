//! A [`ResultSink`] adapter that passes finished requests on in input order.
//! Requests finish out of order; holding back those that finish ahead of an
//! earlier one costs memory only for requests in flight at the same time, and
//! makes everything downstream (files, float sums in metrics) independent of
//! completion order.

use std::collections::VecDeque;

use super::outcome::{FinishedRequest, ResultSink};
use super::step_trace::EngineStep;

/// Reorders finished requests by their input index before `inner` sees them.
#[derive(Debug)]
pub struct InputOrder<S> {
    /// The sink receiving requests in input order.
    pub inner: S,
    /// Slot `k`: request `next + k`, once it has finished. A ring indexed by
    /// the distance from `next`, not a map: a `FinishedRequest` is a few
    /// hundred bytes, and a B-tree node's inserts and removals shifted its
    /// neighbours (2 % of the 100k chat run in `memmove`). Its length is the
    /// span from the oldest unfinished request to the newest finished one,
    /// which the requests in flight bound.
    pending: VecDeque<Option<FinishedRequest>>,
    /// Requests held in `pending`.
    held: usize,
    next: u64,
}

impl<S: ResultSink> InputOrder<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        InputOrder { inner, pending: VecDeque::new(), held: 0, next: 0 }
    }

    /// Requests held back, waiting for an earlier one.
    pub fn held(&self) -> usize {
        self.held
    }
}

impl<S: ResultSink> ResultSink for InputOrder<S> {
    fn engine_step(&mut self, step: &EngineStep) {
        // Steps are already in order: they pass straight through.
        self.inner.engine_step(step);
    }

    fn reclaim(&mut self, into: &mut Vec<Vec<u64>>) {
        self.inner.reclaim(into);
    }

    fn request_done(&mut self, r: FinishedRequest) {
        if r.index != self.next {
            let k = (r.index - self.next) as usize;
            if self.pending.len() <= k {
                self.pending.resize_with(k + 1, || None);
            }
            debug_assert!(self.pending[k].is_none(), "request {} finished twice", r.index);
            self.pending[k] = Some(r);
            self.held += 1;
            return;
        }
        self.next += 1;
        // Its own slot, if the ring reaches it, is empty.
        self.pending.pop_front();
        self.inner.request_done(r);
        while let Some(Some(_)) = self.pending.front() {
            let r = self.pending.pop_front().flatten().expect("checked just above");
            self.held -= 1;
            self.next += 1;
            self.inner.request_done(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::RequestStatus;
    use crate::workload::{Request, RequestId, Traffic};

    fn finished(index: u64) -> FinishedRequest {
        FinishedRequest {
            index,
            request: Request {
                request_id: RequestId::Int(index),
                arrival_time: 0.0,
                initial: vec![],
                sub_requests: vec![],
                traffic: Traffic::default(),
            },
            nodes: vec![],
            arrival_us: 0,
            send_us: 0,
            finish_us: None,
            status: RequestStatus::Completed,
            in_window: true,
        }
    }

    #[test]
    fn requests_finishing_in_any_order_leave_in_input_order() {
        let mut order = InputOrder::new(Vec::new());
        for (i, index) in [3, 1, 0, 5, 2, 4, 6, 9, 8, 7].into_iter().enumerate() {
            order.request_done(finished(index));
            let out: Vec<u64> = order.inner.iter().map(|r| r.index).collect();
            assert_eq!(out, (0..out.len() as u64).collect::<Vec<_>>(), "after {} finished", i + 1);
            assert_eq!(order.held() + out.len(), i + 1);
        }
        assert_eq!(order.inner.len(), 10);
        assert_eq!(order.held(), 0);
    }
}
