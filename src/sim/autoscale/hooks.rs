//! The autoscaler wired into the cluster and the simulation: the routable
//! replicas are the first [`Autoscaler::routable`] of the pool, the router
//! sees only them; scrapes and start-ups are caught up with before the
//! events of each time (and before a request is admitted), so the
//! autoscaler needs no events of its own and a run ends at its last
//! request's event, as without it.

use super::{AutoscaleConfig, AutoscaleReport, Autoscaler, ScaleMetric};
use crate::latency::LatencyModel;
use crate::sim::Simulation;
use crate::sim::cluster::Cluster;
use crate::sim::engine::{Engine, EngineStats};
use crate::sim::pool::Role;
use crate::sim::replica::Replica;

/// Whether replica `r` holds nothing: nothing in its front end, its queues
/// or a step.
fn idle(r: &Replica) -> bool {
    r.in_transit == 0 && !r.engine.has_work() && !r.engine.stepping()
}

/// Replica `r`'s value of `metric` (summed over the routable replicas by a
/// scrape; `rps` counts arrivals instead).
fn sample(metric: ScaleMetric, r: &Replica) -> f64 {
    match metric {
        ScaleMetric::QueueDepth => f64::from(r.waiting()),
        ScaleMetric::KvUtilization => {
            let (used, total) = r.engine.kv_blocks();
            if total > 0 { f64::from(used) / f64::from(total) } else { 0.0 }
        }
        ScaleMetric::Rps => 0.0,
    }
}

impl<L: LatencyModel> Cluster<L> {
    /// Replicas the serving router sees: the routable prefix when
    /// autoscaled, else every serving replica.
    pub(in crate::sim) fn routable(&self) -> usize {
        self.autoscale.as_ref().map_or(self.serving, Autoscaler::routable) as usize
    }

    /// Runs the scrapes and start-ups due at or before `now` (the state
    /// read is the one before the events at `now`).
    pub(in crate::sim) fn autoscale_to(&mut self, now: u64) {
        let Some(a) = self.autoscale.as_mut() else { return };
        let mut cold = Vec::new();
        while a.next_due_us() <= now {
            let t = a.next_due_us();
            let changed = if a.promote(t) {
                true
            } else {
                debug_assert!(a.scrape_due());
                let metric = a.config().metric;
                let sum: f64 = self.instances[..a.routable() as usize].iter().map(|r| sample(metric, r)).sum();
                let instances = &self.instances;
                a.scrape(t, sum, |i| idle(&instances[i as usize]), &mut cold)
            };
            for i in cold.drain(..) {
                restart_cold(&mut self.instances[i as usize], &mut self.retired[i as usize], self.tracing);
                self.router.restarted(i as usize, &mut self.instances[i as usize]);
            }
            if changed {
                // A replica that joins is seen as it is, not as last refreshed.
                self.router.invalidate();
            }
        }
    }

    /// A request reaches the router at `now` (the `rps` metric counts it).
    pub(in crate::sim) fn autoscale_arrival(&mut self, now: u64) {
        self.autoscale_to(now);
        if let Some(a) = self.autoscale.as_mut() {
            a.count_arrival();
        }
    }

    /// After the events of `now`: draining replicas that hold nothing stop.
    pub(in crate::sim) fn autoscale_settle(&mut self, now: u64) {
        let Some(a) = self.autoscale.as_mut().filter(|a| a.draining()) else { return };
        let instances = &self.instances;
        a.settle(now, |i| idle(&instances[i as usize]));
    }

    /// Replica `i`'s counters, its earlier (cold-restarted) engines' included.
    pub(in crate::sim) fn replica_stats(&self, i: usize) -> EngineStats {
        let mut s = self.instances[i].engine.stats().clone();
        if let Some(r) = self.retired.get(i) {
            s.add(r);
        }
        s
    }
}

/// A new engine for a replica that starts cold (it was off, so it holds
/// nothing): empty prefix cache, no adapter loaded. Its old counters are
/// kept in `retired` (less the CPU tier's capacity, which is not a count).
fn restart_cold(replica: &mut Replica, retired: &mut EngineStats, tracing: bool) {
    let config = replica.engine.config().clone();
    let old = std::mem::replace(&mut replica.engine, Engine::new(config));
    let mut stats = old.stats().clone();
    stats.cpu_tier_blocks = 0;
    retired.add(&stats);
    replica.engine.set_tracing(tracing);
}

impl<L: LatencyModel> Simulation<L> {
    /// Autoscales the deployment's one pool (before the first request is
    /// added): `config.max` replicas must exist, in one mixed pool whose
    /// replicas step on their own. `None`: a fixed pool.
    pub fn set_autoscale(&mut self, config: Option<AutoscaleConfig>) {
        let Some(config) = config else {
            self.cluster.autoscale = None;
            return;
        };
        let c = &self.cluster;
        assert!(
            c.pools.len() == 1 && c.pools[0].role == Role::Mixed && !c.pools[0].lockstep,
            "autoscaling takes one mixed pool of independent replicas"
        );
        assert_eq!(c.instances.len(), config.max.max(1) as usize, "the pool has `max` replicas");
        self.cluster.retired = vec![EngineStats::default(); c.instances.len()];
        self.cluster.autoscale = Some(Autoscaler::new(config));
    }

    /// What the autoscaler did so far (`None` without autoscaling).
    pub fn autoscale_report(&self) -> Option<AutoscaleReport> {
        self.cluster.autoscale.as_ref().map(|a| a.report(self.now))
    }
}
