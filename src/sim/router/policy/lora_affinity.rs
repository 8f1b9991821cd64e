//! `lora-affinity`: as llm-d's LoRA affinity scorer (gateway-api-inference-
//! extension `scorer/lora_affinity.go`): a replica whose GPU already holds
//! the request's adapter first (no load), then one with room for it (the
//! distinct adapters of its requests below `max_loras`, so it is not held
//! back by the step's adapter limit), then the rest; within each, the
//! fewest requests waiting + running; ties by index. A request of the base
//! model goes to the least loaded replica.

use super::{Policy, PolicyKind, Replicas};

pub(crate) const KIND: PolicyKind =
    PolicyKind { name: "lora-affinity", takes_scorers: false, start: |_| Box::new(LoraAffinity) };

struct LoraAffinity;

impl Policy for LoraAffinity {
    fn reads_lora(&self) -> bool {
        true
    }

    fn pick(&mut self, replicas: &mut Replicas<'_>) -> usize {
        let (views, fit) = (&*replicas.views, replicas.lora_fit);
        (0..views.len())
            .min_by_key(|&i| (std::cmp::Reverse(fit.get(i).copied().unwrap_or(0)), views[i].load(), i))
            .expect("a replica")
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    use super::*;
    use crate::sim::router::View;

    fn pick(loads: &[u32], fit: &[u8]) -> usize {
        let mut views: Vec<View> = loads.iter().map(|&waiting| View { waiting, ..View::default() }).collect();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(0);
        let mut r = Replicas {
            views: &mut views,
            prefix_hits: &[],
            prompt_blocks: 0,
            lora_fit: fit,
            rng: &mut rng,
            refresh_interval_us: 0,
        };
        LoraAffinity.pick(&mut r)
    }

    #[test]
    fn resident_then_room_then_least_loaded_then_lowest_index() {
        assert_eq!(pick(&[9, 0, 0], &[2, 1, 0]), 0, "the adapter is on its GPU");
        assert_eq!(pick(&[0, 5, 3], &[0, 1, 1]), 2, "room, then the less loaded");
        assert_eq!(pick(&[4, 2, 2], &[0, 0, 0]), 1, "none fits: least loaded, lowest index");
        assert_eq!(pick(&[1, 0], &[]), 1, "a base-model request: least loaded");
    }
}
