//! `random`: uniformly at random, from the router's seeded stream.

use rand::RngExt;

use super::{Policy, PolicyKind, Replicas};

pub(crate) const KIND: PolicyKind = PolicyKind { name: "random", takes_scorers: false, start: |_| Box::new(Random) };

struct Random;

impl Policy for Random {
    fn pick(&mut self, replicas: &mut Replicas<'_>) -> usize {
        replicas.rng.random_range(0..replicas.views.len())
    }
}
