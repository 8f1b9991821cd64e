//! The autoscaler's state machine alone: HPA's formula, the start-up delay,
//! the scale-down window, draining, warm take-back and the GPU time.

use super::*;

const S: u64 = 1_000_000;

fn config(min: u32, max: u32) -> AutoscaleConfig {
    AutoscaleConfig {
        min,
        max,
        initial: min,
        metric: ScaleMetric::QueueDepth,
        target: 2.0,
        scrape_interval_us: 15 * S,
        scale_up_delay_us: 60 * S,
        scale_down_delay_us: 300 * S,
        gpus_per_replica: 2,
    }
}

/// Runs every scrape and start-up due up to `t`, every replica idle or
/// busy as `busy` says, the queue depth summed over the routable replicas
/// being `sum`; the replicas started cold.
fn run_to(a: &mut Autoscaler, t: u64, sum: f64, busy: &[u32]) -> Vec<u32> {
    let mut cold = Vec::new();
    while a.next_due_us() <= t {
        let due = a.next_due_us();
        if a.promote(due) {
            continue;
        }
        assert!(a.scrape_due());
        a.scrape(due, sum, |i| !busy.contains(&i), &mut cold);
    }
    cold
}

#[test]
fn hpa_formula_with_its_tolerance() {
    // 3 replicas at 4 waiting each against a target of 2: 6.
    assert_eq!(desired(3, 4.0, 2.0), Some(6));
    // 2.1 against 2 is within 10 %: no change; 2.3 is not: ceil(3 × 1.15) = 4.
    assert_eq!(desired(3, 2.1, 2.0), None);
    assert_eq!(desired(3, 2.3, 2.0), Some(4));
    assert_eq!(desired(4, 0.0, 2.0), Some(0));
    assert_eq!(desired(2, 0.5, 2.0), Some(1));
}

#[test]
fn a_scale_up_is_routable_after_the_start_up_delay_and_starts_cold() {
    let mut a = Autoscaler::new(config(1, 4));
    // Queue depth 8 on one replica, target 2: desired 4, at the first scrape (15 s).
    let cold = run_to(&mut a, 15 * S, 8.0, &[]);
    assert_eq!(cold, [1, 2, 3]);
    assert_eq!(a.routable(), 1, "still loading");
    // The load stays high, but the three starting count: nothing more.
    let cold = run_to(&mut a, 75 * S - 1, 8.0, &[]);
    assert!(cold.is_empty());
    assert_eq!(a.routable(), 1);
    run_to(&mut a, 75 * S, 8.0, &[]);
    assert_eq!(a.routable(), 4, "routable 60 s after");
    let r = a.report(75 * S);
    assert_eq!((r.scale_ups, r.cold_starts, r.scale_downs, r.peak_routable), (3, 3, 0, 4));
    assert_eq!(r.timeline, [(0, 1, 1), (15 * S, 1, 4), (75 * S, 4, 4)]);
    // 75 s of one replica and 60 s of three, each of 2 GPUs.
    assert_eq!(r.provisioned_us, 75 * S + 3 * 60 * S);
    assert_eq!(r.routable_us, 75 * S);
}

#[test]
fn a_scale_down_waits_for_the_window_then_drains_the_highest() {
    let mut c = config(1, 4);
    c.initial = 4;
    let mut a = Autoscaler::new(c);
    // Idle from 0: desired 1 at every scrape, but the count at 0 (4) is in
    // the window until 300 s: the first scrape after it (315 s) scales down.
    run_to(&mut a, 300 * S, 0.0, &[3]);
    assert_eq!(a.routable(), 4);
    run_to(&mut a, 315 * S, 0.0, &[3]);
    // Replica 3 still holds work: it drains; 1 and 2 stop at once.
    assert_eq!(a.routable(), 1);
    assert!(a.draining());
    assert_eq!(a.report(315 * S).timeline.last(), Some(&(315 * S, 1, 2)));
    a.settle(320 * S, |i| i != 3);
    assert!(a.draining());
    a.settle(321 * S, |_| true);
    assert!(!a.draining());
    let r = a.report(400 * S);
    assert_eq!(r.scale_downs, 3);
    assert_eq!(r.timeline, [(0, 4, 4), (315 * S, 1, 2), (321 * S, 1, 1)]);
    assert_eq!(r.provisioned_us, 400 * S + 2 * 315 * S + 321 * S);
}

#[test]
fn a_draining_replica_is_taken_back_warm() {
    let mut c = config(1, 3);
    c.initial = 3;
    c.scale_down_delay_us = 0;
    let mut a = Autoscaler::new(c);
    // Idle: down to 1 at the first scrape; 1 and 2 drain (busy).
    run_to(&mut a, 15 * S, 0.0, &[1, 2]);
    assert_eq!(a.routable(), 1);
    // Then busy: 1 replica at 4 waiting, target 2: desired 2, replica 1
    // comes back at once (warm, no start-up), replica 2 keeps draining.
    let cold = run_to(&mut a, 30 * S, 4.0, &[1, 2]);
    assert!(cold.is_empty());
    assert_eq!(a.routable(), 2);
    assert!(a.draining());
    let r = a.report(30 * S);
    assert_eq!((r.scale_ups, r.cold_starts, r.scale_downs), (1, 0, 2));
    // Nothing stopped: three replicas provisioned for 30 s.
    assert_eq!(r.provisioned_us, 3 * 30 * S);
}

#[test]
fn rps_counts_the_arrivals_of_the_interval_per_replica() {
    let mut c = config(1, 8);
    c.metric = ScaleMetric::Rps;
    c.target = 1.0;
    c.scale_up_delay_us = 0;
    let mut a = Autoscaler::new(c);
    // 60 arrivals in 15 s on one replica: 4 rps, target 1: 4 replicas.
    for _ in 0..60 {
        a.count_arrival();
    }
    run_to(&mut a, 15 * S, 0.0, &[]);
    assert_eq!(a.routable(), 4);
    // The next interval has none: 0 rps, but the window holds 4 for 300 s.
    run_to(&mut a, 30 * S, 0.0, &[]);
    assert_eq!(a.routable(), 4);
}

#[test]
fn the_count_stays_within_min_and_max() {
    let mut a = Autoscaler::new(config(2, 3));
    assert_eq!(a.routable(), 2);
    let cold = run_to(&mut a, 15 * S, 1000.0, &[]);
    assert_eq!(cold, [2]);
    let mut c = config(2, 3);
    c.scale_down_delay_us = 0;
    let mut a = Autoscaler::new(c);
    run_to(&mut a, 60 * S, 0.0, &[]);
    assert_eq!(a.routable(), 2);
}
