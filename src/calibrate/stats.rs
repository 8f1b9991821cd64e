//! The statistics of a calibration report, as BLIS defines them
//! (`../shared/reference/blis-spec.md` §11.4, §12): numpy-linear percentiles,
//! MAPE, Pearson's r, bias direction and quality bands.

use serde::Serialize;

/// The `p`-th percentile (0–100) of ascending `sorted`, interpolating
/// linearly between the closest ranks (numpy's default); 0 when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (sorted[rank.floor() as usize], sorted[rank.ceil() as usize]);
    lo + (hi - lo) * (rank - rank.floor())
}

/// Arithmetic mean; 0 when empty.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 }
}

/// Mean over pairs with `real ≠ 0` of `|real − sim| / real` (a fraction).
pub fn mape(pairs: &[(f64, f64)]) -> f64 {
    let terms: Vec<f64> = pairs.iter().filter(|(r, _)| *r != 0.0).map(|(r, s)| (r - s).abs() / r).collect();
    mean(&terms)
}

/// Pearson's r between real and sim; 0 with fewer than 3 pairs or no variance.
pub fn pearson(pairs: &[(f64, f64)]) -> f64 {
    let n = pairs.len() as f64;
    if pairs.len() < 3 {
        return 0.0;
    }
    let (mut sx, mut sy, mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y) in pairs {
        sx += x;
        sy += y;
        sxy += x * y;
        sxx += x * x;
        syy += y * y;
    }
    let den = ((n * sxx - sx * sx) * (n * syy - sy * sy)).sqrt();
    if den == 0.0 || !den.is_finite() { 0.0 } else { (n * sxy - sx * sy) / den }
}

/// `over-predict` / `under-predict` / `neutral` from Σ(sim − real) over the
/// pairs MAPE uses; empty without pairs.
pub fn bias_direction(pairs: &[(f64, f64)]) -> &'static str {
    let used: Vec<&(f64, f64)> = pairs.iter().filter(|(r, _)| *r != 0.0).collect();
    if used.is_empty() {
        return "";
    }
    let sum: f64 = used.iter().map(|(r, s)| s - r).sum();
    if sum > 0.0 {
        "over-predict"
    } else if sum < 0.0 {
        "under-predict"
    } else {
        "neutral"
    }
}

/// BLIS's bands: excellent (MAPE < 0.10, r > 0.95), good (< 0.20, > 0.85),
/// fair (< 0.35, > 0.70), else poor.
pub fn quality(mape: f64, r: f64) -> &'static str {
    if mape < 0.10 && r > 0.95 {
        "excellent"
    } else if mape < 0.20 && r > 0.85 {
        "good"
    } else if mape < 0.35 && r > 0.70 {
        "fair"
    } else {
        "poor"
    }
}

/// Aggregates of real against simulated values, µs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[allow(missing_docs)]
pub struct WorkloadLevel {
    pub real_mean: f64,
    pub sim_mean: f64,
    pub mean_error: f64,
    pub mean_percent_error: f64,
    pub real_median: f64,
    pub sim_median: f64,
    pub median_error: f64,
    pub median_percent_error: f64,
    pub real_p50: f64,
    pub sim_p50: f64,
    pub p50_error: f64,
    pub p50_percent_error: f64,
    pub real_p90: f64,
    pub sim_p90: f64,
    pub p90_error: f64,
    pub p90_percent_error: f64,
    pub real_p95: f64,
    pub sim_p95: f64,
    pub p95_error: f64,
    pub p95_percent_error: f64,
    pub real_p99: f64,
    pub sim_p99: f64,
    pub p99_error: f64,
    pub p99_percent_error: f64,
}

/// Per-request agreement.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[allow(missing_docs)]
pub struct RequestLevel {
    pub mape: f64,
    pub pearson_r: f64,
    pub bias_direction: &'static str,
    pub quality: &'static str,
}

/// One metric of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricReport {
    /// Aggregates.
    pub workload_level: WorkloadLevel,
    /// Per-request agreement.
    pub request_level: RequestLevel,
    /// Pairs compared.
    pub count: usize,
}

impl MetricReport {
    /// Compares `(real, sim)` pairs.
    pub fn new(pairs: &[(f64, f64)]) -> MetricReport {
        let mut real: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let mut sim: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        real.sort_by(f64::total_cmp);
        sim.sort_by(f64::total_cmp);
        let pct = |err: f64, r: f64| if r > 0.0 { err.abs() / r } else { 0.0 };
        let (rm, sm) = (mean(&real), mean(&sim));
        let q = |p: f64| (percentile(&real, p), percentile(&sim, p));
        let (r50, s50) = q(50.0);
        let (r90, s90) = q(90.0);
        let (r95, s95) = q(95.0);
        let (r99, s99) = q(99.0);
        let m = mape(pairs);
        let r = pearson(pairs);
        MetricReport {
            workload_level: WorkloadLevel {
                real_mean: rm,
                sim_mean: sm,
                mean_error: sm - rm,
                mean_percent_error: pct(sm - rm, rm),
                real_median: r50,
                sim_median: s50,
                median_error: s50 - r50,
                median_percent_error: pct(s50 - r50, r50),
                real_p50: r50,
                sim_p50: s50,
                p50_error: s50 - r50,
                p50_percent_error: pct(s50 - r50, r50),
                real_p90: r90,
                sim_p90: s90,
                p90_error: s90 - r90,
                p90_percent_error: pct(s90 - r90, r90),
                real_p95: r95,
                sim_p95: s95,
                p95_error: s95 - r95,
                p95_percent_error: pct(s95 - r95, r95),
                real_p99: r99,
                sim_p99: s99,
                p99_error: s99 - r99,
                p99_percent_error: pct(s99 - r99, r99),
            },
            request_level: RequestLevel {
                mape: m,
                pearson_r: r,
                bias_direction: bias_direction(pairs),
                quality: quality(m, r),
            },
            count: pairs.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_statistics() {
        // real 100, 200, 300, 400; sim 110, 180, 330, 400
        let pairs = [(100.0, 110.0), (200.0, 180.0), (300.0, 330.0), (400.0, 400.0)];
        // |err|/real: 0.1, 0.1, 0.1, 0 -> 0.075
        assert!((mape(&pairs) - 0.075).abs() < 1e-12);
        // Σ(sim − real) = 10 − 20 + 30 + 0 = 20 > 0
        assert_eq!(bias_direction(&pairs), "over-predict");
        assert_eq!(bias_direction(&[(1.0, 0.5)]), "under-predict");
        assert_eq!(bias_direction(&[(1.0, 1.0)]), "neutral");
        assert_eq!(bias_direction(&[]), "");
        // numpy.corrcoef([100,200,300,400],[110,180,330,400])[0,1] = 0.987919...
        let r = pearson(&pairs);
        assert!((r - 0.987_919_5).abs() < 1e-6, "{r}");
        assert_eq!(pearson(&pairs[..2]), 0.0);
        assert_eq!(pearson(&[(1.0, 5.0), (2.0, 5.0), (3.0, 5.0)]), 0.0);
        // numpy.percentile([100,200,300,400], 90) = 370
        assert!((percentile(&[100.0, 200.0, 300.0, 400.0], 90.0) - 370.0).abs() < 1e-9);
        let m = MetricReport::new(&pairs);
        assert_eq!(m.workload_level.real_mean, 250.0);
        assert_eq!(m.workload_level.sim_mean, 255.0);
        assert!((m.workload_level.mean_percent_error - 0.02).abs() < 1e-12);
        assert_eq!(m.request_level.quality, "excellent");
        assert_eq!(m.count, 4);
    }

    #[test]
    fn quality_bands_follow_blis() {
        assert_eq!(quality(0.09, 0.96), "excellent");
        assert_eq!(quality(0.09, 0.90), "good");
        assert_eq!(quality(0.19, 0.86), "good");
        assert_eq!(quality(0.30, 0.71), "fair");
        assert_eq!(quality(0.30, 0.70), "poor");
        assert_eq!(quality(0.40, 0.99), "poor");
    }
}
