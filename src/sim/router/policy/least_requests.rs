//! `least-requests`: fewest requests waiting + running.

use super::{Policy, PolicyKind, Replicas};

pub(crate) const KIND: PolicyKind =
    PolicyKind { name: "least-requests", takes_scorers: false, start: |_| Box::new(LeastRequests) };

struct LeastRequests;

impl Policy for LeastRequests {
    fn pick(&mut self, replicas: &mut Replicas<'_>) -> usize {
        let views = &*replicas.views;
        (0..views.len()).min_by_key(|&i| (views[i].load(), i)).expect("a replica")
    }
}
