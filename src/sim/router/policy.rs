//! Router policies: what a policy sees and does ([`Policy`]), and the one
//! list of them ([`ALL`]), which scenario names, messages and the property
//! tests all read. A policy is one file in `policy/` exporting a
//! `KIND: PolicyKind`; adding one is that file plus its line in the
//! `policies!` list below.

use rand_xoshiro::Xoshiro256PlusPlus;

use super::View;
pub use weighted::Scorer;

/// What a policy sees when it picks a replica for one llm node.
pub(crate) struct Replicas<'a> {
    /// Each replica as the router last saw it (at least two). A policy may
    /// count its own pick into the view until the next refresh, as vLLM's
    /// DP balancer does.
    pub(crate) views: &'a mut [View],
    /// Leading prompt blocks each replica's prefix index holds; filled only
    /// for a policy that [`Policy::reads_prefix`].
    pub(crate) prefix_hits: &'a [usize],
    /// The prompt's full blocks (0 when it carries no token ids).
    pub(crate) prompt_blocks: usize,
    /// How each replica fits the request's LoRA adapter: 2 its GPU holds
    /// it, 1 it has room for it, 0 neither; filled only for a policy that
    /// [`Policy::reads_lora`] and a request with an adapter (else empty).
    pub(crate) lora_fit: &'a [u8],
    /// The router's stream, seeded by `router.seed`.
    pub(crate) rng: &'a mut Xoshiro256PlusPlus,
    /// How old the views may be, µs (0: live).
    pub(crate) refresh_interval_us: u64,
}

/// A router policy's state over a run. Ties go to the lowest replica index.
pub(crate) trait Policy: Send {
    /// Whether it reads the prefix index: the router then fills
    /// [`Replicas::prefix_hits`] before each pick, and keeps a copy of each
    /// replica's index updated at refreshes when its view is stale.
    fn reads_prefix(&self) -> bool {
        false
    }

    /// Whether it reads the replicas' LoRA adapters: the router then fills
    /// [`Replicas::lora_fit`] (live) before each pick.
    fn reads_lora(&self) -> bool {
        false
    }

    /// The replica (an index into [`Replicas::views`]) for one llm node.
    fn pick(&mut self, replicas: &mut Replicas<'_>) -> usize;
}

/// A policy's scorers, each with its weight.
pub(crate) type Scorers = [(Scorer, f64)];

/// One entry of the list: a policy's name and how to start it.
pub(crate) struct PolicyKind {
    /// Its name in scenario files (`router.policy`) and outputs.
    pub(crate) name: &'static str,
    /// Whether it takes `router.scorers`.
    pub(crate) takes_scorers: bool,
    /// Its state for one run, given its scorers (empty unless it takes them).
    pub(crate) start: fn(&Scorers) -> Box<dyn Policy>,
}

/// Declares each policy's module (`policy/NAME.rs`) and lists its `KIND` in
/// [`ALL`], so a policy is named once.
macro_rules! policies {
    ($($module:ident,)*) => {
        $(pub(super) mod $module;)*
        /// Every policy, in the order messages list them.
        pub(crate) const ALL: &[&PolicyKind] = &[$(&$module::KIND),*];
    };
}

policies! {
    round_robin,
    random,
    least_requests,
    least_kv,
    prefix_affinity,
    weighted,
    vllm_dp,
    power_of_two,
    lora_affinity,
}

/// How the router picks a replica: a policy of the list by name, with its
/// scorers where it takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingPolicy {
    name: &'static str,
    scorers: Vec<(Scorer, f64)>,
}

impl RoutingPolicy {
    /// The policy called `name`, without scorers; `None` if no policy is.
    pub fn named(name: &str) -> Option<RoutingPolicy> {
        ALL.iter().find(|k| k.name == name).map(|k| RoutingPolicy { name: k.name, scorers: Vec::new() })
    }

    /// The `weighted` policy with `scorers`.
    pub fn weighted(scorers: Vec<(Scorer, f64)>) -> RoutingPolicy {
        RoutingPolicy { name: weighted::KIND.name, scorers }
    }

    /// Every policy's name, in the list's order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        ALL.iter().map(|k| k.name)
    }

    /// The policy's name in scenario files.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether the policy takes scorers (`router.scorers`).
    pub fn takes_scorers(&self) -> bool {
        self.kind().takes_scorers
    }

    /// This policy with `scorers` (see [`RoutingPolicy::takes_scorers`]).
    pub fn with_scorers(self, scorers: Vec<(Scorer, f64)>) -> RoutingPolicy {
        RoutingPolicy { scorers, ..self }
    }

    fn kind(&self) -> &'static PolicyKind {
        ALL.iter().find(|k| k.name == self.name).expect("a RoutingPolicy names a listed policy")
    }

    /// Its state for one run.
    pub(crate) fn start(&self) -> Box<dyn Policy> {
        (self.kind().start)(&self.scorers)
    }
}

impl Default for RoutingPolicy {
    /// Round-robin.
    fn default() -> Self {
        RoutingPolicy::named(round_robin::KIND.name).expect("listed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_is_named_once_and_found_by_its_name() {
        for (i, kind) in ALL.iter().enumerate() {
            assert!(ALL[..i].iter().all(|k| k.name != kind.name), "{} listed twice", kind.name);
            assert_eq!(RoutingPolicy::named(kind.name).map(|p| p.name()), Some(kind.name));
        }
        assert_eq!(RoutingPolicy::named("least-loaded"), None);
        assert_eq!(RoutingPolicy::default().name(), "round-robin");
    }
}
