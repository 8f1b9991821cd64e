//! Who a request is for and how urgent it is: its SLO class, its tenant and
//! its own latency target — the attributes a gateway admits, queues and
//! sheds by, and the metrics are split by.
//!
//! The classes and their priorities are llm-d's (Gateway API Inference
//! Extension objectives: a priority per objective, higher is more urgent,
//! negative is sheddable) with the five names and values BLIS assigns them
//! (`../shared/reference/blis-features.md` §3.6): critical 4, standard 3,
//! batch −1, sheddable −2, background −3. vLLM's engine takes the opposite
//! convention (lower `priority` is served first), so a class reaches the
//! engine as `4 − priority` (BLIS's `max − p`): critical 0 … background 7.

use std::fmt;

/// A request's SLO class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SloClass {
    /// Interactive traffic that must keep its SLO (priority 4).
    Critical,
    /// The default class (priority 3).
    Standard,
    /// May be rejected or shed under load (priority −2).
    Sheddable,
    /// Offline jobs: sheddable, before `sheddable` in urgency (priority −1).
    Batch,
    /// The least urgent: shed first (priority −3).
    Background,
}

/// The highest class priority (critical's): a class's vLLM priority is this
/// minus its own, so the most urgent class gets vLLM's 0.
const MAX_PRIORITY: i32 = 4;

impl SloClass {
    /// Every class, most urgent first.
    pub const ALL: [SloClass; 5] =
        [SloClass::Critical, SloClass::Standard, SloClass::Batch, SloClass::Sheddable, SloClass::Background];

    /// Its name in files (`slo_class`).
    pub fn name(self) -> &'static str {
        match self {
            SloClass::Critical => "critical",
            SloClass::Standard => "standard",
            SloClass::Sheddable => "sheddable",
            SloClass::Batch => "batch",
            SloClass::Background => "background",
        }
    }

    /// The class called `name`; `None` if none is.
    pub fn parse(name: &str) -> Option<SloClass> {
        SloClass::ALL.into_iter().find(|c| c.name() == name)
    }

    /// llm-d's priority: higher is more urgent, negative is sheddable.
    pub fn priority(self) -> i32 {
        match self {
            SloClass::Critical => 4,
            SloClass::Standard => 3,
            SloClass::Batch => -1,
            SloClass::Sheddable => -2,
            SloClass::Background => -3,
        }
    }

    /// Whether a gateway may reject or shed it (a negative priority, as
    /// llm-d's flow control treats it).
    pub fn is_sheddable(self) -> bool {
        self.priority() < 0
    }

    /// The priority vLLM's engine is given for it (lower is served first).
    pub fn vllm_priority(self) -> i32 {
        MAX_PRIORITY - self.priority()
    }
}

impl fmt::Display for SloClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The class names, for messages: `critical, standard, …`.
pub fn class_names() -> String {
    SloClass::ALL.map(SloClass::name).join(", ")
}

/// A request's traffic attributes; all optional, none given by default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Traffic {
    /// Its SLO class (`None`: not given, served as `standard`).
    pub slo_class: Option<SloClass>,
    /// The tenant it belongs to.
    pub tenant: Option<String>,
    /// Its own latency target, µs from its send to its end: flow control's
    /// earliest-deadline order uses send + target.
    pub slo_target_us: Option<u64>,
}

impl Traffic {
    /// Its class: the one given, else `standard`.
    pub fn class(&self) -> SloClass {
        self.slo_class.unwrap_or(SloClass::Standard)
    }

    /// Whether any attribute is given.
    pub fn is_given(&self) -> bool {
        *self != Traffic::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_keep_llm_d_priorities_and_map_to_vllm_order() {
        let priorities: Vec<i32> = SloClass::ALL.iter().map(|c| c.priority()).collect();
        assert_eq!(priorities, [4, 3, -1, -2, -3]);
        let vllm: Vec<i32> = SloClass::ALL.iter().map(|c| c.vllm_priority()).collect();
        assert_eq!(vllm, [0, 1, 5, 6, 7]);
        assert!(vllm.windows(2).all(|w| w[0] < w[1]), "most urgent first in vLLM's order too");
        let sheddable: Vec<bool> = SloClass::ALL.iter().map(|c| c.is_sheddable()).collect();
        assert_eq!(sheddable, [false, false, true, true, true]);
    }

    #[test]
    fn names_round_trip_and_standard_is_the_default() {
        for c in SloClass::ALL {
            assert_eq!(SloClass::parse(c.name()), Some(c));
        }
        assert_eq!(SloClass::parse("Critical"), None);
        assert_eq!(Traffic::default().class(), SloClass::Standard);
        assert!(!Traffic::default().is_given());
        assert_eq!(class_names(), "critical, standard, batch, sheddable, background");
    }
}
