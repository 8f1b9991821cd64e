//! `prefix-affinity`: the longest prefix-cache hit for the prompt; ties by
//! fewest requests.

use super::{Policy, PolicyKind, Replicas};

pub(crate) const KIND: PolicyKind =
    PolicyKind { name: "prefix-affinity", takes_scorers: false, start: |_| Box::new(PrefixAffinity) };

struct PrefixAffinity;

impl Policy for PrefixAffinity {
    fn reads_prefix(&self) -> bool {
        true
    }

    fn pick(&mut self, replicas: &mut Replicas<'_>) -> usize {
        let (views, hits) = (&*replicas.views, replicas.prefix_hits);
        (0..views.len()).min_by_key(|&i| (std::cmp::Reverse(hits[i]), views[i].load(), i)).expect("a replica")
    }
}
