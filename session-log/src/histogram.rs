//! A lock-free histogram with fixed bucket bounds, for the writer's batch sizes and commit
//! latencies (and the gateway's own timings): cheap enough to observe on every commit.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts of observed values per bucket (upper bounds inclusive), their sum and number.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    /// One per bound, plus the overflow bucket (+Inf).
    counts: Vec<AtomicU64>,
    sum: AtomicU64,
    count: AtomicU64,
}

/// A point-in-time copy of a histogram, with cumulative bucket counts as Prometheus wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// `(upper bound, observations <= bound)` for every finite bound, in order.
    pub buckets: Vec<(u64, u64)>,
    pub sum: u64,
    pub count: u64,
}

impl Histogram {
    /// `bounds` must be increasing.
    pub fn new(bounds: &'static [u64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: u64) {
        let i = self.bounds.partition_point(|b| *b < value);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(bound, n)| {
                cumulative += n.load(Ordering::Relaxed);
                (*bound, cumulative)
            })
            .collect();
        HistogramSnapshot {
            buckets,
            sum: self.sum.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_bounds_inclusive() {
        static BOUNDS: [u64; 3] = [1, 10, 100];
        let h = Histogram::new(&BOUNDS);
        for v in [0, 1, 2, 10, 11, 1000] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(1, 2), (10, 4), (100, 5)]);
        assert_eq!((s.count, s.sum), (6, 1024));
    }
}
