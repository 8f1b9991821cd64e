//! `workload.agentic` (and `blis-sweep agentx`'s flags): an AgentX load as
//! aiperf's `inferencex-agentx-mvp` scenario sends it, its defaults that
//! scenario's. [`crate::agentx`] runs it.

use serde::Deserialize;

/// As a plan writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgenticSpec {
    /// Plays in flight (aiperf's `--concurrency` under the scenario: live
    /// session trees).
    pub lanes: u32,
    /// Where each lane's first play starts, as fractions of its session's
    /// length (`{min, max}`; `null`: at its first turn). Default 0–1, the
    /// scenario's `--trajectory-start-{min,max}-ratio`.
    #[serde(default = "whole_session")]
    pub snapshot: Option<SnapshotSpec>,
    /// Main turns of each lane's first play sent as warm-up (one output
    /// token, no idle gap): the primer and the rest. Default 10, the
    /// InferenceX preset's "10 warmup requests per lane".
    #[serde(default = "ten")]
    pub warmup_per_lane: u32,
    /// The profile window, s, from the end of the warm-up. Default 1800,
    /// the scenario's `--benchmark-duration`.
    #[serde(default = "half_hour")]
    pub profile_s: f64,
    /// Idle gaps before a call capped at this, s (`null`: as recorded).
    /// Default 10, the scenario's locked `--trace-idle-gap-cap-seconds`.
    #[serde(default = "ten_s")]
    pub idle_cap_s: Option<f64>,
    /// After the window, calls in flight get this long to finish, s.
    /// Default 30, the scenario's response grace.
    #[serde(default = "thirty_s")]
    pub grace_s: f64,
}

/// `snapshot: {min, max}`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSpec {
    /// Earliest start, as a fraction of the session's length.
    pub min: f64,
    /// Latest start.
    pub max: f64,
}

fn whole_session() -> Option<SnapshotSpec> {
    Some(SnapshotSpec { min: 0.0, max: 1.0 })
}

fn ten() -> u32 {
    10
}

fn half_hour() -> f64 {
    1800.0
}

fn ten_s() -> Option<f64> {
    Some(10.0)
}

fn thirty_s() -> f64 {
    30.0
}

/// The most lanes a run takes: each is a play held in memory (10^4: far
/// past the 8–256 the AgentX submissions run).
pub const MAX_LANES: u32 = 10_000;

/// A checked AgentX load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Agentic {
    /// Plays in flight.
    pub lanes: u32,
    /// First plays start in this fraction range of their session.
    pub snapshot: Option<(f64, f64)>,
    /// Warm-up turns per lane's first play.
    pub warmup_per_lane: u32,
    /// The profile window, µs.
    pub profile_us: u64,
    /// Idle gaps capped at this, µs.
    pub idle_cap_us: Option<u64>,
    /// Grace after the window, µs.
    pub grace_us: u64,
    /// The main agent alone (set by the workload, not this spec).
    pub drop_subagents: bool,
}

impl AgenticSpec {
    /// Checked, or the key (under `workload.agentic.`) and why not.
    pub fn resolve(&self) -> Result<Agentic, (String, String)> {
        let bad = |k: &str, r: String| Err((k.to_owned(), r));
        if !(1..=MAX_LANES).contains(&self.lanes) {
            return bad("lanes", format!("{} is not 1 to {MAX_LANES}", self.lanes));
        }
        let snapshot = match self.snapshot {
            Some(SnapshotSpec { min, max }) => {
                if !(0.0..=1.0).contains(&min) || !(0.0..=1.0).contains(&max) || min > max {
                    return bad("snapshot", format!("{{min: {min}, max: {max}}}: give 0 ≤ min ≤ max ≤ 1"));
                }
                Some((min, max))
            }
            None => None,
        };
        let us = |k: &str, s: f64| crate::workload::checked_seconds_to_us(s).map_err(|r| (k.to_owned(), r));
        let profile_us = us("profile_s", self.profile_s)?;
        if profile_us == 0 {
            return bad("profile_s", "must be positive".to_owned());
        }
        let idle_cap_us = self.idle_cap_s.map(|s| us("idle_cap_s", s)).transpose()?;
        Ok(Agentic {
            lanes: self.lanes,
            snapshot,
            warmup_per_lane: self.warmup_per_lane,
            profile_us,
            idle_cap_us,
            grace_us: us("grace_s", self.grace_s)?,
            drop_subagents: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_scenarios_and_bad_values_name_their_key() {
        let s: AgenticSpec = serde_json::from_str(r#"{"lanes": 8}"#).unwrap();
        let a = s.resolve().unwrap();
        assert_eq!(
            (a.snapshot, a.warmup_per_lane, a.profile_us, a.idle_cap_us, a.grace_us),
            (Some((0.0, 1.0)), 10, 1_800_000_000, Some(10_000_000), 30_000_000)
        );
        let none: AgenticSpec = serde_json::from_str(r#"{"lanes": 1, "snapshot": null, "idle_cap_s": null}"#).unwrap();
        assert_eq!((none.resolve().unwrap().snapshot, none.resolve().unwrap().idle_cap_us), (None, None));
        for (text, key) in [
            (r#"{"lanes": 0}"#, "lanes"),
            (r#"{"lanes": 2, "snapshot": {"min": 0.8, "max": 0.2}}"#, "snapshot"),
            (r#"{"lanes": 2, "profile_s": 0}"#, "profile_s"),
            (r#"{"lanes": 2, "idle_cap_s": -1}"#, "idle_cap_s"),
        ] {
            let s: AgenticSpec = serde_json::from_str(text).unwrap();
            assert_eq!(s.resolve().unwrap_err().0, key, "{text}");
        }
        assert!(serde_json::from_str::<AgenticSpec>(r#"{"lanes": 2, "lane": 3}"#).is_err());
    }
}
