//! `least-kv`: fewest KV blocks in use; ties by fewest requests.

use super::{Policy, PolicyKind, Replicas};

pub(crate) const KIND: PolicyKind = PolicyKind { name: "least-kv", takes_scorers: false, start: |_| Box::new(LeastKv) };

struct LeastKv;

impl Policy for LeastKv {
    fn pick(&mut self, replicas: &mut Replicas<'_>) -> usize {
        let views = &*replicas.views;
        (0..views.len()).min_by_key(|&i| (views[i].kv_used, views[i].load(), i)).expect("a replica")
    }
}
