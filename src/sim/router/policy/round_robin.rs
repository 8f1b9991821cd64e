//! `round-robin`: the replicas in turn, one decision each.

use super::{Policy, PolicyKind, Replicas};

pub(crate) const KIND: PolicyKind = PolicyKind { name: "round-robin", takes_scorers: false, start: |_| Box::new(RoundRobin(0)) };

/// Decisions so far.
struct RoundRobin(u64);

impl Policy for RoundRobin {
    fn pick(&mut self, replicas: &mut Replicas<'_>) -> usize {
        let pick = (self.0 % replicas.views.len() as u64) as usize;
        self.0 += 1;
        pick
    }
}
