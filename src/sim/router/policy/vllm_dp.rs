//! `vllm-dp`: vLLM's data-parallel load balancer (`DPLBAsyncMPClient`):
//! lowest `4 × waiting + running`, from counts the DP coordinator publishes,
//! each pick counted as one more waiting request until the next publication.

use super::{Policy, PolicyKind, Replicas};

pub(crate) const KIND: PolicyKind = PolicyKind { name: "vllm-dp", takes_scorers: false, start: |_| Box::new(VllmDp) };

struct VllmDp;

impl Policy for VllmDp {
    fn pick(&mut self, replicas: &mut Replicas<'_>) -> usize {
        let views = &mut *replicas.views;
        // With `router.env`, its fresh in-flight count (waiting, the rest).
        let pick = (0..views.len())
            .min_by_key(|&i| {
                let (waiting, running) = views[i].waiting_running();
                (4 * waiting + running, i)
            })
            .expect("a replica");
        if replicas.refresh_interval_us > 0 {
            // vLLM counts its own pick as waiting until the coordinator's
            // next publication (core_client.py: "Increment local waiting count").
            views[pick].waiting += 1;
        }
        pick
    }
}
