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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::{Linear, StepPricer};
    use crate::sim::engine::EngineConfig;
    use crate::sim::outcome::FinishedRequest;
    use crate::sim::pool::{KvTransferConfig, PdDecider, PoolConfig};
    use crate::sim::router::{RouterConfig, RoutingPolicy};
    use crate::workload::{LlmCall, NodeKind, Request, RequestId, SubRequest};

    const S: u64 = 1_000_000;

    fn request(id: u64, at_us: u64, output_tokens: u32) -> Request {
        // One shared 64-token prompt: 4 full blocks of 16 to hit.
        let call = LlmCall::for_prompt((0..64).collect(), output_tokens);
        Request {
            traffic: Default::default(),
            request_id: RequestId::Int(id),
            arrival_time: at_us as f64 / 1e6,
            initial: vec![0],
            sub_requests: vec![SubRequest { next: vec![], interval: 0.0, kind: NodeKind::Llm(call), result: None }],
        }
    }

    /// Replica 1 caches the prompt, is scaled down (idle: it stops), then
    /// started again by a burst: cold, it has no hit where replica 0 (warm
    /// all along) has one; and the stopped replica's counters are kept.
    #[test]
    fn a_replica_started_again_from_off_is_cold() {
        let engine = EngineConfig::new(4, 256, 4096, 16, 2000);
        let router =
            RouterConfig { policy: RoutingPolicy::named("least-requests").unwrap(), ..RouterConfig::default() };
        let latency = StepPricer::Linear(Linear::new(&[1000.0, 1.0, 1.0]).unwrap());
        let pool = PoolConfig::mixed(engine, 2, router, latency);
        let mut sim = Simulation::pools(vec![pool], KvTransferConfig::UNUSED, PdDecider::Always);
        sim.set_autoscale(Some(AutoscaleConfig {
            min: 1,
            max: 2,
            initial: 2,
            metric: ScaleMetric::QueueDepth,
            target: 1.0,
            scrape_interval_us: S,
            scale_up_delay_us: S,
            scale_down_delay_us: 0,
            gpus_per_replica: 1,
        }));
        let mut out: Vec<FinishedRequest> = Vec::new();
        // At 0, one on each replica; idle at the 1 s scrape: down to one.
        sim.add_request(request(0, 0, 2), &mut out);
        sim.add_request(request(1, 0, 2), &mut out);
        // At 1.5 s a burst on replica 0 (4 wait at the 2 s scrape: up to 2,
        // replica 1 cold, routable at 3 s); at 3.5 s one more, to the idle replica 1.
        for id in 2..10 {
            sim.add_request(request(id, 1_500_000, 3000), &mut out);
        }
        sim.add_request(request(10, 3_500_000, 2), &mut out);
        sim.finish(&mut out);
        out.sort_by_key(|r| r.index);
        let node = |i: usize| &out[i].nodes[0];
        assert_eq!((node(0).replica, node(1).replica), (Some(0), Some(1)));
        assert!(out[2..10].iter().all(|r| r.nodes[0].replica == Some(0)));
        assert!(node(2).cached_tokens > 0, "replica 0 is warm");
        assert_eq!(node(10).replica, Some(1));
        assert_eq!(node(10).cached_tokens, 0, "replica 1 started cold");
        let r = sim.autoscale_report().unwrap();
        // Down at 1 s, up at 2 s, down again once the burst has drained.
        assert_eq!((r.scale_downs, r.scale_ups, r.cold_starts), (2, 1, 1));
        assert_eq!(&r.timeline[..3], [(0, 2, 2), (S, 1, 1), (2 * S, 1, 2)]);
        assert_eq!(r.timeline[3], (3 * S, 2, 2));
        // Replica 1's first engine's steps are still counted.
        let first_engine_steps = sim.cluster.retired[1].steps;
        assert!(first_engine_steps > 0 && sim.replica_stats()[1].steps > first_engine_steps);
    }
}
