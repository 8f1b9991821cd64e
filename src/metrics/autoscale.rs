//! An autoscaled run's cost and replica count (`autoscale` in the metrics
//! JSON, present only when the scenario autoscales): GPU-hours, the
//! replica-count timeline, how often it scaled. From the simulator's
//! [`AutoscaleReport`] (µs) in hours and seconds.

use serde::{Deserialize, Serialize};

use crate::sim::AutoscaleReport;

/// µs in an hour.
const US_PER_HOUR: f64 = 3.6e9;

/// What the autoscaler did over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AutoscaleMetrics {
    /// Provisioned replica time × GPUs per replica, hours (start-up and
    /// drain included, until the run's end).
    pub gpu_hours: f64,
    /// Provisioned replica time, hours.
    pub replica_hours: f64,
    /// Routable replicas, time-weighted mean over the run.
    pub mean_replicas: f64,
    /// The most replicas routable at once.
    pub peak_replicas: u32,
    /// Replicas added (cold starts and drains taken back).
    pub scale_ups: u64,
    /// Replicas removed.
    pub scale_downs: u64,
    /// Replicas that started cold (empty prefix cache).
    pub cold_starts: u64,
    /// Routable replicas over time: `[t_s, replicas]` at 0 and at each change.
    pub replicas: Vec<(f64, u32)>,
    /// Provisioned replicas (routable, starting or draining) over time.
    pub provisioned: Vec<(f64, u32)>,
}

impl AutoscaleMetrics {
    /// The metrics of `r`, a run that lasted `duration_us`.
    pub fn of(r: &AutoscaleReport, duration_us: u64) -> AutoscaleMetrics {
        let replica_hours = r.provisioned_us as f64 / US_PER_HOUR;
        let mut replicas: Vec<(f64, u32)> = Vec::new();
        let mut provisioned: Vec<(f64, u32)> = Vec::new();
        for &(t, routable, prov) in &r.timeline {
            let t_s = t as f64 / 1e6;
            if replicas.last().is_none_or(|&(_, n)| n != routable) {
                replicas.push((t_s, routable));
            }
            if provisioned.last().is_none_or(|&(_, n)| n != prov) {
                provisioned.push((t_s, prov));
            }
        }
        AutoscaleMetrics {
            gpu_hours: replica_hours * r.gpus_per_replica as f64,
            replica_hours,
            mean_replicas: if duration_us > 0 { r.routable_us as f64 / duration_us as f64 } else { 0.0 },
            peak_replicas: r.peak_routable,
            scale_ups: r.scale_ups,
            scale_downs: r.scale_downs,
            cold_starts: r.cold_starts,
            replicas,
            provisioned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_and_seconds_from_microseconds() {
        let r = AutoscaleReport {
            provisioned_us: 2 * 3_600_000_000,
            routable_us: 3_000_000,
            gpus_per_replica: 4,
            scale_ups: 1,
            scale_downs: 0,
            cold_starts: 1,
            peak_routable: 2,
            timeline: vec![(0, 1, 1), (1_500_000, 1, 2), (2_000_000, 2, 2)],
        };
        let m = AutoscaleMetrics::of(&r, 2_000_000);
        assert_eq!((m.gpu_hours, m.replica_hours, m.mean_replicas), (8.0, 2.0, 1.5));
        assert_eq!(m.replicas, [(0.0, 1), (2.0, 2)]);
        assert_eq!(m.provisioned, [(0.0, 1), (1.5, 2)]);
    }
}
