//! A [`ResultSink`] adapter that passes finished requests on in input order.
//! Requests finish out of order; holding back those that finish ahead of an
//! earlier one costs memory only for requests in flight at the same time, and
//! makes everything downstream (files, float sums in metrics) independent of
//! completion order.

use std::collections::BTreeMap;

use super::outcome::{FinishedRequest, ResultSink};
use super::step_trace::EngineStep;

/// Reorders finished requests by their input index before `inner` sees them.
#[derive(Debug)]
pub struct InputOrder<S> {
    /// The sink receiving requests in input order.
    pub inner: S,
    pending: BTreeMap<u64, FinishedRequest>,
    next: u64,
}

impl<S: ResultSink> InputOrder<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        InputOrder { inner, pending: BTreeMap::new(), next: 0 }
    }

    /// Requests held back, waiting for an earlier one.
    pub fn held(&self) -> usize {
        self.pending.len()
    }
}

impl<S: ResultSink> ResultSink for InputOrder<S> {
    fn engine_step(&mut self, step: &EngineStep) {
        // Steps are already in order: they pass straight through.
        self.inner.engine_step(step);
    }

    fn request_done(&mut self, r: FinishedRequest) {
        if r.index != self.next {
            self.pending.insert(r.index, r);
            return;
        }
        self.next += 1;
        self.inner.request_done(r);
        while let Some(r) = self.pending.remove(&self.next) {
            self.next += 1;
            self.inner.request_done(r);
        }
    }
}
