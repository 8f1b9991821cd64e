//! AgentX load (aiperf's `inferencex-agentx-mvp` scenario, the agentic
//! benchmark InferenceX, AMD, Tenstorrent and NVIDIA harnesses run) on Weka
//! sessions: `lanes` plays in flight, a lane held until its play's whole
//! tree (main agent and every subagent) has drained, then given the next
//! play of a shared cursor with fresh block identities ([`plays`]). Each
//! lane's first play starts at a seeded snapshot part-way into its session;
//! its first turns are warm-up (the primer: the snapshot turn's prompt, all
//! its history, one output token). The profile window opens when every
//! lane's warm-up is over and lasts `profile_s`; calls sent in it are
//! measured, call by call ([`window`]); nothing is simulated past the
//! window and its grace.
//!
//! The window's start is only known once the warm-up has run, and the run
//! needs its horizon up front: a first, short run (warm-up only, with a
//! horizon that grows until the warm-up fits) finds it; the run itself then
//! repeats that warm-up exactly (same seed, same plays) and goes on.
//!
//! Differences from aiperf's: warm-up and profile are not separated by a
//! barrier (a lane whose warm-up ends early goes on; its calls before the
//! window opens are not measured); a play of a session shares no blocks
//! with another play of it (aiperf's cache-bust marker follows the system
//! prompt, which plays of one trace share); idle gaps are capped end to
//! start, not start to start.

pub mod plays;
pub mod window;

use std::sync::Arc;

use crate::latency::LatencyModel;
use crate::sim::{self, Client, ClockOverflow, RunConfig, RunError, Sink, Tee};
use crate::workload::import::weka_dag::Session;

pub use self::plays::{Layout, Plays};
pub use self::window::AgentxReport;
pub use crate::workload::agentic::{Agentic, AgenticSpec};

/// Why an AgentX run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum AgentxError {
    /// The corpus has no session to start a lane on.
    #[error("{0}")]
    Corpus(String),
    /// The warm-up did not end in the simulator's time.
    #[error("the warm-up did not end within {0} s of simulated time (a deployment that cannot serve the corpus?)")]
    WarmupNeverEnds(u64),
    /// A sum of times passed the simulator's clock.
    #[error("{0}")]
    Clock(ClockOverflow),
    /// A sink failed.
    #[error("{0}")]
    Sink(std::io::Error),
}

/// A corpus a run can start lanes on: at least one session with two main
/// turns (one to prime, one to measure).
pub fn check_corpus(corpus: &[Session]) -> Result<(), AgentxError> {
    if corpus.iter().any(|s| s.main_turns() >= 2) {
        Ok(())
    } else {
        Err(AgentxError::Corpus(format!(
            "none of the {} sessions has two main-agent turns (one to warm up, one to measure)",
            corpus.len()
        )))
    }
}

/// The first horizon the warm-up is looked for in, µs: a minute (the
/// warm-up of 8 lanes of 10 one-token calls takes seconds); each miss
/// quadruples it.
const FIRST_WARMUP_HORIZON_US: u64 = 60_000_000;

/// The longest warm-up looked for: a day simulated (InferenceX's warm-up
/// grace is 1,800 s; one that takes a day is a deployment that cannot serve
/// the corpus, and simulating further only costs time).
const MAX_WARMUP_HORIZON_US: u64 = 86_400_000_000;

/// Runs `agentic` over `corpus` on `config` (its client and horizon are
/// the run's own), seeded by `seed`; every play goes to `sink` as a
/// request. Returns what the window measured, and how the run ended.
pub fn run<L: LatencyModel + Clone>(
    config: &RunConfig<L>,
    corpus: Arc<[Session]>,
    agentic: &Agentic,
    seed: u64,
    sink: &mut dyn Sink,
) -> Result<(AgentxReport, sim::RunSummary), AgentxError> {
    check_corpus(&corpus)?;
    let client = Client::ClosedLoop { users: agentic.lanes, think_time_us: 0 };
    let mut horizon = FIRST_WARMUP_HORIZON_US;
    let warmup_end = loop {
        let (plays, layout) = Plays::new(corpus.clone(), agentic, seed);
        let mut probe = window::WarmupEnd::new(layout.warmup);
        let probe_config = RunConfig { client, horizon_us: Some(horizon), step_trace: false, ..config.clone() };
        sim::run(probe_config, plays.map(Ok::<_, std::convert::Infallible>), &mut probe).map_err(error)?;
        if let Some(end) = probe.end_us() {
            break end;
        }
        if horizon >= MAX_WARMUP_HORIZON_US {
            return Err(AgentxError::WarmupNeverEnds(horizon / 1_000_000));
        }
        horizon = horizon.saturating_mul(4).min(MAX_WARMUP_HORIZON_US);
    };
    let to_us = warmup_end + agentic.profile_us;
    let (plays, layout) = Plays::new(corpus, agentic, seed);
    let mut profile = window::Profile::new(warmup_end, to_us, layout);
    let run_config = RunConfig { client, horizon_us: Some(to_us + agentic.grace_us), ..config.clone() };
    let end = sim::run(run_config, plays.map(Ok::<_, std::convert::Infallible>), &mut Tee(&mut profile, sink))
        .map_err(error)?;
    Ok((profile.report(agentic.lanes), end))
}

fn error(e: RunError<std::convert::Infallible>) -> AgentxError {
    match e {
        RunError::Source(never) => match never {},
        RunError::Sink(e) => AgentxError::Sink(e),
        RunError::Clock(c) => AgentxError::Clock(c),
    }
}
