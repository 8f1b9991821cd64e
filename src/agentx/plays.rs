//! The plays an AgentX run sends: each lane's first play starts part-way
//! into a session (a seeded snapshot; its first turns are warm-up), every
//! later play is the next session of a shared cursor (wrapping) from its
//! first turn. Every play gets its own block identities, so a session
//! replayed twice never hits the cache of its earlier play.

use std::sync::Arc;

use rand::{RngExt, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::workload::agentic::Agentic;
use crate::workload::import::weka_dag::{self, Build, Session};
use crate::workload::{Request, RequestId};

/// An endless source of plays (the run's horizon ends it).
#[derive(Debug)]
pub struct Plays {
    corpus: Arc<[Session]>,
    build: Build,
    /// The lanes' first plays, built up front (their warm-up is known).
    first: std::vec::IntoIter<Request>,
    /// Next session of the shared cursor, for recycled plays.
    cursor: usize,
    play: u64,
}

/// The shape of the plays, for what measures them: which nodes are warm-up
/// and which are the main agent's (a play's main turns are its nodes
/// `0..n`, warm-up first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Per lane, in lane (send) order: warm-up nodes of its first play.
    pub warmup: Vec<u32>,
    /// Per lane: main turns of its first play.
    first_mains: Vec<u32>,
    /// Per corpus session: its main turns (recycled plays play them all).
    corpus_mains: Vec<u32>,
}

impl Layout {
    /// Main-agent nodes of play `n` (the `n`-th request sent, 0-based).
    pub fn mains(&self, n: u64) -> u32 {
        match self.first_mains.get(n as usize) {
            Some(&m) => m,
            None => self.corpus_mains[(n % self.corpus_mains.len() as u64) as usize],
        }
    }
}

impl Plays {
    /// The plays of `spec` over `corpus`, seeded by `seed`. The corpus
    /// must hold a session of at least two main turns (a snapshot leaves
    /// one to measure); [`super::check_corpus`] says so first.
    pub fn new(corpus: Arc<[Session]>, spec: &Agentic, seed: u64) -> (Plays, Layout) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let build = Build { max_think_us: spec.idle_cap_us, drop_subagents: spec.drop_subagents, ..Build::default() };
        let usable: Vec<usize> = (0..corpus.len()).filter(|&i| corpus[i].main_turns() >= 2).collect();
        assert!(!usable.is_empty(), "checked by check_corpus");
        let mut first = Vec::with_capacity(spec.lanes as usize);
        let mut warm = Vec::with_capacity(spec.lanes as usize);
        let mut first_mains = Vec::with_capacity(spec.lanes as usize);
        for lane in 0..spec.lanes as usize {
            let s = &corpus[usable[lane % usable.len()]];
            let m = s.main_turns();
            let start_turn = match spec.snapshot {
                Some((lo, hi)) => {
                    // t* uniform in [lo, hi] of the session's length; the
                    // turn live at t* is the primer, one turn at least left.
                    let t0 = s.main_turn_t(0).unwrap_or(0.0);
                    let t_star = t0 + (lo + (hi - lo) * rng.random::<f64>()) * s.duration();
                    let live = (0..m).rev().find(|&k| s.main_turn_t(k).is_some_and(|t| t <= t_star)).unwrap_or(0);
                    live.min(m - 2)
                }
                None => 0,
            };
            let b = Build { salt: lane as u64, start_turn, warmup_calls: spec.warmup_per_lane, ..build };
            first.push(play(s, lane as u64, &b));
            warm.push(spec.warmup_per_lane.min((m - start_turn) as u32));
            first_mains.push((m - start_turn) as u32);
        }
        let corpus_mains = corpus.iter().map(|s| s.main_turns() as u32).collect();
        let plays =
            Plays { corpus, build, first: first.into_iter(), cursor: spec.lanes as usize, play: u64::from(spec.lanes) };
        (plays, Layout { warmup: warm, first_mains, corpus_mains })
    }
}

/// Session `s` as play number `n`.
fn play(s: &Session, n: u64, b: &Build) -> Request {
    let mut r = weka_dag::build(s, 0.0, b);
    r.request_id = RequestId::Str(format!("{}#{n}", s.id));
    r
}

impl Iterator for Plays {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if let Some(r) = self.first.next() {
            return Some(r);
        }
        let s = &self.corpus[self.cursor % self.corpus.len()];
        self.cursor += 1;
        let r = play(s, self.play, &Build { salt: self.play, ..self.build });
        self.play += 1;
        Some(r)
    }
}
