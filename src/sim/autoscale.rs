//! Autoscaling of an aggregated pool: the replica count follows a load
//! metric, as a Kubernetes HorizontalPodAutoscaler over vLLM pods does
//! (and llm-d's and BLIS's autoscalers, `../shared/reference/blis-features.md`
//! §3.11: scrape delay, provisioning and loading delay, stabilisation
//! windows).
//!
//! Semantics (Kubernetes HPA, `pkg/controller/podautoscaler/horizontal.go`
//! and its documentation, "Algorithm details"):
//! - The pool's `max` replicas exist from the start; the first `initial` are
//!   routable, the others off. The routable replicas are always a prefix of
//!   the pool (`0..routable`), so the router only ever sees a shorter slice.
//! - Every `scrape_interval_us` (HPA's sync period, 15 s by default) the
//!   metric is read over the routable replicas — the mean queue depth
//!   (requests waiting, in the front end or the engine's queue), the mean
//!   KV-cache utilisation, or the requests that arrived in the interval per
//!   replica per second — and `desired = ceil(routable × metric / target)`,
//!   HPA's formula with its tolerance: within ±[`TOLERANCE`] of the target
//!   the count stays. Replicas still starting count towards the current
//!   count but not towards the metric (HPA treats unready pods as carrying
//!   no load when it scales up), so a slow start-up does not provision the
//!   same replicas again at every scrape. `desired` is clamped to
//!   `[min, max]`.
//! - Scale up: at once (HPA's default scale-up stabilisation is 0 s). The
//!   lowest replica not yet counted is provisioned: one that is draining is
//!   taken back warm (its prefix cache kept) and is routable at once; one
//!   that is off starts cold (a new engine: empty prefix cache, no LoRA
//!   adapter loaded) and becomes routable `scale_up_delay_us` later (the
//!   model load). A replica becomes routable only after every replica below
//!   it (the prefix), so one taken back above one still loading waits for it.
//! - Scale down: to the highest `desired` of the scrapes of the last
//!   `scale_down_delay_us` (HPA's downscale stabilisation window, 300 s by
//!   default): the count drops only after `desired` stayed lower that long.
//!   The highest counted replica goes first: one still loading stops at
//!   once; a routable one stops being routable and drains (finishes what it
//!   holds), then stops.
//! - Not modelled: HPA's scaling-rate policies (at most double, or +4 pods,
//!   per 15 s), node provisioning (a GPU is always free), the delay of the
//!   metrics pipeline (the scrape reads the replicas as they are).
//!
//! Cost: a replica is provisioned from the moment it is asked for (its
//! model load included) until it stops (its drain included); the GPU-hours
//! are that time × its GPUs. Everything here is integer µs; nothing
//! allocates per token or per step (a scrape pushes into a bounded window).

mod hooks;

use std::collections::VecDeque;

/// HPA's default tolerance (`--horizontal-pod-autoscaler-tolerance`, 0.1):
/// no scaling while the metric is within 10 % of the target.
pub(super) const TOLERANCE: f64 = 0.1;

/// What the autoscaler reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleMetric {
    /// Requests waiting per routable replica (front end + engine queue).
    QueueDepth,
    /// KV blocks in use / KV blocks, mean over the routable replicas (0–1).
    KvUtilization,
    /// Requests that arrived in the last scrape interval, per second, per
    /// routable replica.
    Rps,
}

impl ScaleMetric {
    /// Every metric, as scenario files name them.
    pub const ALL: [ScaleMetric; 3] = [ScaleMetric::QueueDepth, ScaleMetric::KvUtilization, ScaleMetric::Rps];

    /// As scenario files name it.
    pub fn name(self) -> &'static str {
        match self {
            ScaleMetric::QueueDepth => "queue_depth",
            ScaleMetric::KvUtilization => "kv_utilization",
            ScaleMetric::Rps => "rps",
        }
    }
}

/// How a pool autoscales.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoscaleConfig {
    /// Fewest replicas (≥ 1).
    pub min: u32,
    /// Most replicas: the pool's size; the simulator creates them all.
    pub max: u32,
    /// Routable replicas at time 0, in `[min, max]`.
    pub initial: u32,
    /// What is read.
    pub metric: ScaleMetric,
    /// Its target per replica (> 0).
    pub target: f64,
    /// How often the metric is read, µs (> 0).
    pub scrape_interval_us: u64,
    /// A replica's start-up (model load): from provisioned to routable, µs.
    pub scale_up_delay_us: u64,
    /// How long `desired` must stay lower before the count drops, µs.
    pub scale_down_delay_us: u64,
    /// GPUs of one replica (its tensor-parallel degree), for the GPU-hours.
    pub gpus_per_replica: u64,
}

/// What an autoscaled run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AutoscaleReport {
    /// Provisioned time summed over the replicas, µs (start-up and drain
    /// included).
    pub provisioned_us: u64,
    /// Routable time summed over the replicas, µs.
    pub routable_us: u64,
    /// GPUs of one replica.
    pub gpus_per_replica: u64,
    /// Replicas added (cold starts and drains taken back).
    pub scale_ups: u64,
    /// Replicas removed (drained or stopped while loading).
    pub scale_downs: u64,
    /// Of the replicas added, those that started cold.
    pub cold_starts: u64,
    /// The most replicas routable at once.
    pub peak_routable: u32,
    /// (time µs, routable, provisioned) at 0 and at every change.
    pub timeline: Vec<(u64, u32, u32)>,
}

/// One replica's part in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Not provisioned.
    Off,
    /// Provisioned; routable from `ready_us` (once every replica below is).
    Starting { ready_us: u64 },
    /// Routable.
    Ready,
    /// Not routable, finishing what it holds.
    Draining,
}

/// The autoscaler's state over a run.
#[derive(Debug)]
pub(super) struct Autoscaler {
    config: AutoscaleConfig,
    slots: Vec<Slot>,
    /// When each provisioned replica was provisioned, µs.
    since_us: Vec<u64>,
    routable: u32,
    /// When the routable count last changed, µs (for `routable_us`).
    routable_since_us: u64,
    next_scrape_us: u64,
    /// Requests that arrived since the last scrape.
    arrivals: u64,
    /// `desired` of the scrapes inside the scale-down window: (time, desired).
    recent: VecDeque<(u64, u32)>,
    report: AutoscaleReport,
}

impl Autoscaler {
    /// `config.initial` routable replicas of `config.max` at time 0.
    pub(super) fn new(config: AutoscaleConfig) -> Autoscaler {
        let max = config.max.max(1);
        let initial = config.initial.clamp(config.min.max(1), max);
        let slots = (0..max).map(|i| if i < initial { Slot::Ready } else { Slot::Off }).collect();
        let report = AutoscaleReport {
            gpus_per_replica: config.gpus_per_replica,
            peak_routable: initial,
            timeline: vec![(0, initial, initial)],
            ..AutoscaleReport::default()
        };
        Autoscaler {
            config,
            slots,
            since_us: vec![0; max as usize],
            routable: initial,
            routable_since_us: 0,
            next_scrape_us: config.scrape_interval_us.max(1),
            arrivals: 0,
            // The count at 0 is the first recommendation: the count drops
            // only once lower ones filled a whole window.
            recent: VecDeque::from([(0, initial)]),
            report,
        }
    }

    pub(super) fn config(&self) -> &AutoscaleConfig {
        &self.config
    }

    /// Routable replicas: indices `0..routable`.
    pub(super) fn routable(&self) -> u32 {
        self.routable
    }

    /// A request arrived (for the `rps` metric).
    pub(super) fn count_arrival(&mut self) {
        self.arrivals += 1;
    }

    /// When the autoscaler next acts: a scrape, or the start-up of the
    /// replica just above the routable ones ending.
    pub(super) fn next_due_us(&self) -> u64 {
        let ready = match self.slots.get(self.routable as usize) {
            Some(Slot::Starting { ready_us }) => *ready_us,
            _ => u64::MAX,
        };
        ready.min(self.next_scrape_us)
    }

    /// Makes the replicas whose start-up ended by `t` routable, in index
    /// order; whether any did.
    pub(super) fn promote(&mut self, t: u64) -> bool {
        let before = self.routable;
        while let Some(Slot::Starting { ready_us }) = self.slots.get(self.routable as usize).copied()
            && ready_us <= t
        {
            self.slots[self.routable as usize] = Slot::Ready;
            self.set_routable(t, self.routable + 1);
        }
        if self.routable != before {
            self.mark(t);
        }
        self.routable != before
    }

    /// Whether the next thing due is a scrape (not a start-up ending).
    pub(super) fn scrape_due(&self) -> bool {
        self.next_due_us() == self.next_scrape_us
    }

    /// The scrape due now, at `t`: `sum` is the metric summed over the
    /// routable replicas (unused for `rps`, which counts arrivals). Scales
    /// up or down; `idle(i)` says whether replica `i` holds nothing (it then
    /// stops at once rather than drain); replicas that start cold are pushed
    /// to `cold` (their engines must be new). Whether the routable set changed.
    pub(super) fn scrape(&mut self, t: u64, sum: f64, idle: impl Fn(u32) -> bool, cold: &mut Vec<u32>) -> bool {
        let c = self.config;
        self.next_scrape_us = t.saturating_add(c.scrape_interval_us.max(1));
        let n = self.routable.max(1);
        let mean = match c.metric {
            ScaleMetric::Rps => self.arrivals as f64 / (c.scrape_interval_us as f64 / 1e6) / f64::from(n),
            _ => sum / f64::from(n),
        };
        self.arrivals = 0;
        let counted = self.counted();
        let desired = desired(self.routable, mean, c.target).unwrap_or(counted).clamp(c.min.max(1), c.max.max(1));
        // The scale-down window: this scrape's and those of the last delay.
        self.recent.push_back((t, desired));
        while self.recent.front().is_some_and(|&(s, _)| s < t.saturating_sub(c.scale_down_delay_us)) {
            self.recent.pop_front();
        }
        let before = self.routable;
        if desired > counted {
            for _ in counted..desired {
                self.add_one(t, cold);
            }
        } else {
            // The highest desired in the window: only what stayed lower that long is removed.
            let keep = self.recent.iter().map(|&(_, d)| d).max().unwrap_or(desired);
            for _ in keep..counted {
                self.remove_one(t, &idle);
            }
        }
        self.mark(t);
        self.routable != before
    }

    /// Draining replicas that hold nothing now stop, at `t`.
    pub(super) fn settle(&mut self, t: u64, idle: impl Fn(u32) -> bool) {
        let mut changed = false;
        for i in 0..self.slots.len() {
            if self.slots[i] == Slot::Draining && idle(i as u32) {
                self.stop(i, t);
                changed = true;
            }
        }
        if changed {
            self.mark(t);
        }
    }

    /// Whether any replica drains (`settle` has something to look at).
    pub(super) fn draining(&self) -> bool {
        self.slots.contains(&Slot::Draining)
    }

    /// What the run did, ended at `end_us`: replicas still provisioned
    /// count until then.
    pub(super) fn report(&self, end_us: u64) -> AutoscaleReport {
        let mut r = self.report.clone();
        for (i, slot) in self.slots.iter().enumerate() {
            if *slot != Slot::Off {
                r.provisioned_us += end_us.saturating_sub(self.since_us[i]);
            }
        }
        r.routable_us += u64::from(self.routable) * end_us.saturating_sub(self.routable_since_us);
        r
    }

    /// Replicas counted as current: routable or starting.
    fn counted(&self) -> u32 {
        self.slots.iter().filter(|s| matches!(s, Slot::Ready | Slot::Starting { .. })).count() as u32
    }

    /// Provisions the lowest replica not counted: a draining one back warm,
    /// else an off one cold.
    fn add_one(&mut self, t: u64, cold: &mut Vec<u32>) {
        let Some(i) =
            (self.routable as usize..self.slots.len()).find(|&i| matches!(self.slots[i], Slot::Draining | Slot::Off))
        else {
            return;
        };
        self.report.scale_ups += 1;
        if self.slots[i] == Slot::Draining {
            self.slots[i] = Slot::Starting { ready_us: t };
        } else {
            self.slots[i] = Slot::Starting { ready_us: t.saturating_add(self.config.scale_up_delay_us) };
            self.since_us[i] = t;
            self.report.cold_starts += 1;
            cold.push(i as u32);
        }
        // A warm one may be routable at once.
        self.promote(t);
    }

    /// Removes the highest counted replica: one loading stops, one
    /// routable drains (or stops, if it holds nothing).
    fn remove_one(&mut self, t: u64, idle: &impl Fn(u32) -> bool) {
        let Some(i) =
            (0..self.slots.len()).rev().find(|&i| matches!(self.slots[i], Slot::Ready | Slot::Starting { .. }))
        else {
            return;
        };
        self.report.scale_downs += 1;
        if self.slots[i] == Slot::Ready {
            // The highest counted replica is the last routable one: no
            // replica above it is routable.
            self.set_routable(t, i as u32);
        }
        if idle(i as u32) {
            self.stop(i, t);
        } else {
            self.slots[i] = Slot::Draining;
        }
    }

    fn stop(&mut self, i: usize, t: u64) {
        self.slots[i] = Slot::Off;
        self.report.provisioned_us += t.saturating_sub(self.since_us[i]);
    }

    fn set_routable(&mut self, t: u64, n: u32) {
        self.report.routable_us += u64::from(self.routable) * t.saturating_sub(self.routable_since_us);
        self.routable_since_us = t;
        self.routable = n;
        self.report.peak_routable = self.report.peak_routable.max(n);
    }

    /// A timeline point at `t` if the counts changed (one point per time).
    fn mark(&mut self, t: u64) {
        let provisioned = self.slots.iter().filter(|s| **s != Slot::Off).count() as u32;
        let point = (t, self.routable, provisioned);
        let timeline = &mut self.report.timeline;
        match timeline.last_mut() {
            Some(last) if (last.1, last.2) == (point.1, point.2) => {}
            Some(last) if last.0 == t => *last = point,
            _ => timeline.push(point),
        }
    }
}

/// HPA's recommendation: `ceil(current × metric / target)`, or `None` when
/// the metric is within [`TOLERANCE`] of the target (no change).
pub(super) fn desired(current: u32, metric: f64, target: f64) -> Option<u32> {
    let ratio = metric / target;
    if (ratio - 1.0).abs() <= TOLERANCE {
        return None;
    }
    Some((f64::from(current) * ratio).ceil().min(f64::from(u32::MAX)) as u32)
}

#[cfg(test)]
#[path = "autoscale_tests.rs"]
mod tests;
