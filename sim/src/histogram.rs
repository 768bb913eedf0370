//! A lock-free log-linear histogram of non-negative values in microseconds.
//!
//! Values below 64 µs each have a bucket of their own. Above that, every power of two is
//! split into 32 equal buckets, so a bucket is at most 1/32 (about 3 %) of its values wide,
//! from microseconds to centuries, in 1,920 buckets (15 KiB). Recording is a handful of
//! `Relaxed` atomic adds, from any number of threads at once; a reader takes a
//! [`Snapshot`] and computes quantiles from it.
//!
//! Quantiles are reported as the upper bound of the bucket that holds them (clamped to the
//! exact maximum), so they never understate a value: a p99 of 1,024 µs means "99 % of the
//! values were at most 1,024 µs".

use std::sync::atomic::{AtomicU64, Ordering};

/// log2 of the buckets per power of two.
const SUB_BITS: u32 = 5;
/// Buckets per power of two.
const SUB: u64 = 1 << SUB_BITS;
/// Values below this have a bucket each.
const LINEAR: u64 = 2 * SUB;
/// Number of buckets: the linear ones, then 32 per power of two from 2^6 to 2^63.
const BUCKETS: usize = LINEAR as usize + (64 - SUB_BITS as usize - 1) * SUB as usize;

/// The bucket a value falls in.
fn index(value: u64) -> usize {
    if value < LINEAR {
        return value as usize;
    }
    let exp = 63 - value.leading_zeros(); // ≥ SUB_BITS + 1
    let shift = exp - SUB_BITS;
    let sub = (value >> shift) - SUB; // 0..SUB
    (LINEAR + u64::from(exp - SUB_BITS - 1) * SUB + sub) as usize
}

/// The smallest and largest value of bucket `i` (both inclusive).
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < LINEAR {
        return (i, i);
    }
    let k = i - LINEAR;
    let shift = (k / SUB) as u32 + 1; // exp - SUB_BITS
    let low = (SUB + k % SUB) << shift;
    (low, low + ((1u64 << shift) - 1))
}

/// The histogram. Share it by reference (it is `Sync`); record from any thread.
#[derive(Debug)]
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    /// Saturating in practice: 2^64 µs is half a million years of summed lateness.
    sum: AtomicU64,
    max: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    /// Records one value (µs). Lock-free: four `Relaxed` read-modify-writes. The counters
    /// carry no data to synchronize with; readers that need exact totals read after the
    /// recording threads have been joined.
    pub fn record(&self, micros: u64) {
        self.buckets[index(micros)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(micros, Ordering::Relaxed);
        self.max.fetch_max(micros, Ordering::Relaxed);
    }

    /// Records `micros`, measured by something that meant to take a sample every
    /// `interval` µs but was held up for `micros`, plus the samples it missed meanwhile
    /// (`micros − interval`, `micros − 2·interval`, …), as HdrHistogram's
    /// `recordValueWithExpectedInterval` does ("coordinated omission"). That turns a
    /// per-wake-up measure into a per-unit-of-time one: a stall of 50 ms then weighs as much
    /// as it does for the timeouts that fall due during it.
    pub fn record_corrected(&self, micros: u64, interval: u64) {
        self.record(micros);
        if interval == 0 {
            return;
        }
        let mut missed = micros.saturating_sub(interval);
        while missed >= interval {
            self.record(missed);
            missed -= interval;
        }
    }

    /// A copy of the counts, from which quantiles are computed.
    pub fn snapshot(&self) -> Snapshot {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        Snapshot {
            // Summing the buckets (rather than reading `count`) keeps the snapshot
            // self-consistent even while other threads record.
            count: counts.iter().sum(),
            counts,
            sum: self.sum.load(Ordering::Relaxed),
            max: self.max.load(Ordering::Relaxed),
        }
    }
}

/// The state of a [`Histogram`] at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    counts: Vec<u64>,
    count: u64,
    sum: u64,
    max: u64,
}

impl Snapshot {
    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest value recorded (exact), if any.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// The mean, if any value was recorded.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The sum of two snapshots (as if every value of both had been recorded in one).
    pub fn merged(&self, other: &Snapshot) -> Snapshot {
        Snapshot {
            counts: self.counts.iter().zip(&other.counts).map(|(a, b)| a + b).collect(),
            count: self.count + other.count,
            sum: self.sum.saturating_add(other.sum),
            max: match (self.max(), other.max()) {
                (Some(a), Some(b)) => a.max(b),
                (a, b) => a.or(b).unwrap_or(0),
            },
        }
    }

    /// The buckets that hold values: `(smallest, largest, count)`, smallest values first.
    /// The last one's `largest` is clamped to the exact maximum.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts.iter().enumerate().filter(|&(_, &n)| n > 0).map(|(i, &n)| {
            let (low, high) = bounds(i);
            (low, high.min(self.max.max(low)), n)
        })
    }

    /// The smallest bucket bound `v` such that at least a fraction `q` (0.0..=1.0) of the
    /// values are ≤ `v`, clamped to the exact maximum; `None` if the histogram is empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        // The rank of the value asked for, 1-based: at least the first one.
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bounds(i).1.min(self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn small_values_are_exact() {
        for v in 0..LINEAR {
            assert_eq!(bounds(index(v)), (v, v));
        }
    }

    #[test]
    fn every_value_lies_within_its_bucket_and_buckets_tile_the_range() {
        // Bucket i+1 starts right after bucket i ends: no gaps, no overlaps.
        for i in 0..BUCKETS - 1 {
            let (low, high) = bounds(i);
            assert!(low <= high);
            assert_eq!(bounds(i + 1).0, high + 1, "bucket {i}");
            assert_eq!(index(low), i);
            assert_eq!(index(high), i);
        }
        assert_eq!(bounds(BUCKETS - 1).1, u64::MAX);
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn buckets_are_at_most_one_thirty_second_of_their_values_wide() {
        for i in LINEAR as usize..BUCKETS {
            let (low, high) = bounds(i);
            assert!((high - low + 1) <= low / SUB, "bucket {i}: {low}..={high}");
        }
    }

    #[test]
    fn empty_histogram_has_no_quantiles() {
        let s = Histogram::new().snapshot();
        assert_eq!(s.count(), 0);
        assert_eq!(s.quantile(0.5), None);
        assert_eq!(s.max(), None);
        assert_eq!(s.mean(), None);
    }

    #[test]
    fn quantiles_of_a_uniform_range() {
        let h = Histogram::new();
        for v in 1..=10_000 {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 10_000);
        assert_eq!(s.max(), Some(10_000));
        assert_eq!(s.mean(), Some(5_000.5));
        for (q, exact) in [(0.5, 5_000u64), (0.99, 9_900), (0.999, 9_990)] {
            let got = s.quantile(q).unwrap();
            // Never below the true value, and at most one bucket width (1/32) above it.
            assert!(got >= exact && got <= exact + exact / 32, "q={q}: {got} vs {exact}");
        }
        assert_eq!(s.quantile(1.0), Some(10_000));
        assert_eq!(s.quantile(0.0), Some(1));
    }

    #[test]
    fn quantile_is_clamped_to_the_exact_max() {
        let h = Histogram::new();
        h.record(1_000_001);
        let s = h.snapshot();
        assert_eq!(s.quantile(0.5), Some(1_000_001));
        assert_eq!(s.max(), Some(1_000_001));
    }

    #[test]
    fn extreme_values_do_not_panic() {
        let h = Histogram::new();
        h.record(0);
        h.record(u64::MAX);
        let s = h.snapshot();
        assert_eq!(s.count(), 2);
        assert_eq!(s.quantile(0.5), Some(0));
        assert_eq!(s.quantile(1.0), Some(u64::MAX));
    }

    #[test]
    fn corrected_records_fill_in_missed_samples() {
        let h = Histogram::new();
        h.record_corrected(50, 1_000);
        assert_eq!(h.snapshot().count(), 1);
        h.record_corrected(3_500, 1_000);
        let s = h.snapshot();
        // 3,500 itself, then the missed 2,500 and 1,500.
        assert_eq!(s.count(), 4);
        assert_eq!(s.max(), Some(3_500));
        assert_eq!(s.quantile(0.5), Some(bounds(index(1_500)).1));
        h.record_corrected(u64::MAX, 0);
        assert_eq!(h.snapshot().count(), 5);
    }

    #[test]
    fn merged_adds_counts_and_keeps_the_max() {
        let a = Histogram::new();
        let b = Histogram::new();
        for v in [1, 5, 100] {
            a.record(v);
        }
        b.record(7_000);
        let m = a.snapshot().merged(&b.snapshot());
        assert_eq!(m.count(), 4);
        assert_eq!(m.max(), Some(7_000));
        assert_eq!(m.mean(), Some(7_106.0 / 4.0));
        let empty = Histogram::new().snapshot();
        assert_eq!(empty.merged(&empty).max(), None);
        assert_eq!(a.snapshot().merged(&empty).max(), Some(100));
    }

    #[test]
    fn buckets_list_what_was_recorded() {
        let h = Histogram::new();
        for v in [0, 0, 3, 1_000, 1_001] {
            h.record(v);
        }
        let b: Vec<_> = h.snapshot().buckets().collect();
        assert_eq!(b.len(), 3, "{b:?}");
        assert_eq!(b[0], (0, 0, 2));
        assert_eq!(b[1], (3, 3, 1));
        let (low, high, n) = b[2];
        assert!(low <= 1_000 && high == 1_001 && n == 2, "{b:?}");
        assert_eq!(b.iter().map(|x| x.2).sum::<u64>(), 5);
    }

    #[test]
    fn concurrent_records_are_all_counted() {
        let h = Arc::new(Histogram::new());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for v in 0..25_000u64 {
                        h.record(v % 2_000 + t);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 100_000);
        assert_eq!(s.max(), Some(1_999 + 3));
    }
}
