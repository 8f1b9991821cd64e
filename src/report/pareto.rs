//! The Pareto frontier of a report's points: the points no other point
//! beats on both axes at once (at least as good on both, better on one).
//! Both axes are "higher is better"; a caller whose axis is "lower is
//! better" (TTFT) negates it. Points with a non-finite coordinate are no
//! candidates (a run without TPOT has no tokens/s per user).

/// The indices of the points on the frontier, by ascending x (then
/// ascending index). Equal points are both on it when either is.
///
/// O(n log n): by descending x, a point is on the frontier when its y is
/// the highest of its x and above every y of a strictly greater x.
pub(crate) fn frontier(points: &[(f64, f64)]) -> Vec<usize> {
    let mut order: Vec<usize> =
        (0..points.len()).filter(|&i| points[i].0.is_finite() && points[i].1.is_finite()).collect();
    order.sort_by(|&a, &b| points[b].0.total_cmp(&points[a].0).then(points[b].1.total_cmp(&points[a].1)));
    let mut on = Vec::new();
    // The highest y of the points with a strictly greater x than the group's.
    let mut best = f64::NEG_INFINITY;
    let mut k = 0;
    while k < order.len() {
        let x = points[order[k]].0;
        let top = points[order[k]].1;
        let mut end = k;
        while end < order.len() && points[order[end]].0 == x {
            end += 1;
        }
        if top > best {
            on.extend(order[k..end].iter().copied().filter(|&i| points[i].1 == top));
        }
        best = best.max(top);
        k = end;
    }
    on.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(a.cmp(&b)));
    on
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, point by point: nothing at least as good on both
    /// axes and better on one.
    fn by_definition(points: &[(f64, f64)]) -> Vec<usize> {
        let finite = |p: &(f64, f64)| p.0.is_finite() && p.1.is_finite();
        let mut on: Vec<usize> = (0..points.len())
            .filter(|&i| finite(&points[i]))
            .filter(|&i| {
                let p = points[i];
                !points.iter().filter(|q| finite(q)).any(|q| q.0 >= p.0 && q.1 >= p.1 && (q.0 > p.0 || q.1 > p.1))
            })
            .collect();
        on.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(a.cmp(&b)));
        on
    }

    #[test]
    fn the_frontier_keeps_what_nothing_beats_on_both_axes() {
        // Throughput per GPU falls as speed per user rises; (2, 2) and
        // (3, 1) are beaten by (3, 3), (1, 1) by everything.
        let points = [(1.0, 10.0), (2.0, 2.0), (3.0, 3.0), (3.0, 1.0), (4.0, 0.5), (1.0, 1.0)];
        assert_eq!(frontier(&points), vec![0, 2, 4]);
        // Equal points are both on it; a tie in x keeps only the higher y.
        let points = [(1.0, 5.0), (1.0, 5.0), (1.0, 4.0), (2.0, 5.0)];
        assert_eq!(frontier(&points), vec![3]);
        let points = [(1.0, 6.0), (1.0, 6.0), (2.0, 5.0)];
        assert_eq!(frontier(&points), vec![0, 1, 2]);
        // A tie in y with a greater x is beaten.
        assert_eq!(frontier(&[(1.0, 5.0), (2.0, 5.0)]), vec![1]);
        // No coordinate, no candidate; nothing, nothing.
        assert_eq!(frontier(&[(f64::NAN, 9.0), (f64::INFINITY, 9.0), (1.0, 1.0)]), vec![2]);
        assert!(frontier(&[]).is_empty());
    }

    #[test]
    fn the_frontier_equals_its_definition_on_random_points() {
        // A fixed linear congruential sequence (Knuth's MMIX constants):
        // coordinates on a coarse grid, so ties in x and y are common.
        let mut state = 12345u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % 8) as f64
        };
        for n in 0..60 {
            let points: Vec<(f64, f64)> = (0..n).map(|_| (next(), next())).collect();
            assert_eq!(frontier(&points), by_definition(&points), "{points:?}");
        }
    }
}
