//! A log-linear histogram of microsecond values (the metrics' latencies, the
//! gateway's queue waits): exact below 4,096 µs, and
//! above that 2,048 buckets per power of two (0.025 % relative width). Memory
//! grows with the largest value seen (about 16 KiB per power of two), never
//! with the number of values, so a run of any length keeps exact means and
//! sub-0.05 % percentiles in constant space.

const EXACT_BELOW: u64 = 4096;
const SUB_BUCKETS: u64 = 2048;

/// Counts of values by bucket, plus their exact sum.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
}

fn index(v: u64) -> usize {
    if v < EXACT_BELOW {
        return v as usize;
    }
    let exponent = 63 - u64::from(v.leading_zeros()); // ≥ 12
    let shift = exponent - 11;
    (EXACT_BELOW + (exponent - 12) * SUB_BUCKETS + ((v >> shift) - SUB_BUCKETS)) as usize
}

/// Midpoint of bucket `i`.
fn value(i: usize) -> f64 {
    let i = i as u64;
    if i < EXACT_BELOW {
        return i as f64;
    }
    let k = i - EXACT_BELOW;
    let shift = k / SUB_BUCKETS + 1;
    let low = (SUB_BUCKETS + k % SUB_BUCKETS) << shift;
    low as f64 + ((1u64 << shift) as f64 - 1.0) / 2.0
}

impl Histogram {
    /// Adds one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        let i = index(v);
        match self.counts.get_mut(i) {
            Some(c) => *c += 1,
            None => {
                // Grow in whole powers of two so this branch stays rare.
                self.counts.resize((i + 1).next_power_of_two(), 0);
                self.counts[i] += 1;
            }
        }
        self.total += 1;
        self.sum += u128::from(v);
    }

    /// Adds the gaps between consecutive `times` (ascending): per gap only
    /// its bucket is counted, since the gaps' sum is last − first.
    #[inline]
    pub fn record_gaps(&mut self, times: &[u64]) {
        let (Some(&first), Some(&last)) = (times.first(), times.last()) else { return };
        let mut together = 0;
        let mut previous = first;
        for &t in &times[1..] {
            // Tokens delivered together (speculative decoding) are one
            // output: no gap between them. Without speculation no two
            // tokens of a request share a time, and the branch is never
            // taken (a branchless count cost 3 % of the 100k chat bench).
            let gap = t - previous;
            previous = t;
            if gap == 0 {
                together += 1;
                continue;
            }
            let i = index(gap);
            match self.counts.get_mut(i) {
                Some(c) => *c += 1,
                None => {
                    self.counts.resize((i + 1).next_power_of_two(), 0);
                    self.counts[i] += 1;
                }
            }
        }
        self.total += times.len() as u64 - 1 - together;
        self.sum += u128::from(last - first);
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Exact mean; 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.total == 0 { 0.0 } else { self.sum as f64 / self.total as f64 }
    }

    /// The `p`-th percentile (0–100), interpolating linearly between the
    /// closest ranks like numpy's default; 0 when empty.
    pub fn percentile(&self, p: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = p / 100.0 * (self.total - 1) as f64;
        let lo = rank.floor() as u64;
        let hi = rank.ceil() as u64;
        let (vlo, vhi) = (self.nth(lo), self.nth(hi));
        vlo + (vhi - vlo) * (rank - lo as f64)
    }

    /// The value of the `n`-th smallest entry (0-based).
    fn nth(&self, n: u64) -> f64 {
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > n {
                return value(i);
            }
        }
        value(self.counts.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact_and_match_numpy() {
        let mut h = Histogram::default();
        for v in [1, 2, 3, 4, 10] {
            h.record(v);
        }
        assert_eq!(h.mean(), 4.0);
        assert_eq!(h.percentile(50.0), 3.0);
        // numpy.percentile([1,2,3,4,10], 90) = 7.6
        assert!((h.percentile(90.0) - 7.6).abs() < 1e-9);
        assert_eq!(Histogram::default().percentile(99.0), 0.0);
    }

    #[test]
    fn large_values_stay_within_resolution() {
        for v in [4096u64, 12_345, 987_654, 3_000_000_000] {
            let mut h = Histogram::default();
            h.record(v);
            let got = h.percentile(50.0);
            assert!((got - v as f64).abs() / (v as f64) < 2.5e-4, "{v} -> {got}");
        }
        assert!(index(4095) < index(4096));
        assert!(index(8191) < index(8192));
    }

    /// Nonzero gaps count as recorded one by one; tokens delivered together
    /// (9, 9: speculative decoding's accepted drafts) are one output.
    #[test]
    fn gaps_count_as_recorded_one_by_one() {
        let times = [5u64, 9, 9, 5000, 90_000, 3_000_090_000];
        let mut one_by_one = Histogram::default();
        for w in times.windows(2).filter(|w| w[1] > w[0]) {
            one_by_one.record(w[1] - w[0]);
        }
        assert_eq!(one_by_one.total, 4);
        let mut gaps = Histogram::default();
        gaps.record_gaps(&times);
        gaps.record_gaps(&[7]);
        gaps.record_gaps(&[]);
        assert_eq!((gaps.counts, gaps.total, gaps.sum), (one_by_one.counts, one_by_one.total, one_by_one.sum));
    }
}
