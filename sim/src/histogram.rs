//! A lock-free log-linear histogram of non-negative values in microseconds.
//!
//! Values below 64 µs each have a bucket of their own; above, every power of two is split
//! into 32 equal buckets, so a bucket is at most 1/32 (about 3 %) of its values wide, in 1,920
//! buckets (15 KiB). Recording is a handful of `Relaxed` atomic adds, from any number of
//! threads at once; a reader takes a [`Snapshot`]. Quantiles are the upper bound of the bucket
//! that holds them (clamped to the exact maximum), so they never understate a value.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// log2 of the buckets per power of two; buckets per power of two; values below `LINEAR`
/// have a bucket each; the linear buckets, then 32 per power of two from 2^6 to 2^63.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
const LINEAR: u64 = 2 * SUB;
const BUCKETS: usize = LINEAR as usize + (64 - SUB_BITS as usize - 1) * SUB as usize;

/// The bucket a value falls in.
fn index(value: u64) -> usize {
    if value < LINEAR {
        return value as usize;
    }
    let exp = 63 - value.leading_zeros(); // ≥ SUB_BITS + 1
    let sub = (value >> (exp - SUB_BITS)) - SUB; // 0..SUB
    (LINEAR + u64::from(exp - SUB_BITS - 1) * SUB + sub) as usize
}

/// The smallest and largest value of bucket `i` (both inclusive).
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < LINEAR {
        return (i, i);
    }
    let (k, shift) = (i - LINEAR, ((i - LINEAR) / SUB) as u32 + 1); // shift = exp - SUB_BITS
    let low = (SUB + k % SUB) << shift;
    (low, low + ((1u64 << shift) - 1))
}

/// The histogram: share it by reference, record from any thread. The counters carry no data
/// to synchronize with: exact totals are read after the recorders are joined. The sum
/// saturates in practice only after half a million years of summed lateness.
#[derive(Debug)]
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    max: AtomicU64,
}

impl Histogram {
    pub fn new() -> Histogram {
        let buckets = (0..BUCKETS).map(|_| AtomicU64::new(0)).collect();
        Histogram { buckets, sum: AtomicU64::new(0), max: AtomicU64::new(0) }
    }

    pub fn record(&self, micros: u64) {
        self.buckets[index(micros)].fetch_add(1, Relaxed);
        self.sum.fetch_add(micros, Relaxed);
        self.max.fetch_max(micros, Relaxed);
    }

    /// Records `micros`, measured by something that meant to take a sample every `interval`
    /// µs but was held up, plus the samples it missed meanwhile (`micros − interval`,
    /// `micros − 2·interval`, …), as HdrHistogram's `recordValueWithExpectedInterval` does
    /// ("coordinated omission"): a stall of 50 ms then weighs as much as it does for the
    /// timeouts that fall due during it.
    pub fn record_corrected(&self, micros: u64, interval: u64) {
        self.record(micros);
        let mut missed = micros.saturating_sub(interval);
        while interval > 0 && missed >= interval {
            self.record(missed);
            missed -= interval;
        }
    }

    /// A copy of the counts; summing the buckets keeps it self-consistent while others record.
    pub fn snapshot(&self) -> Snapshot {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        Snapshot { count: counts.iter().sum(), counts, sum: self.sum.load(Relaxed), max: self.max.load(Relaxed) }
    }
}

/// The state of a [`Histogram`] at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    counts: Vec<u64>,
    count: u64,
    sum: u64,
    max: u64,
}

impl Snapshot {
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest value recorded (exact), if any.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The sum of two snapshots (as if every value of both had been recorded in one).
    pub fn merged(&self, other: &Snapshot) -> Snapshot {
        Snapshot {
            counts: self.counts.iter().zip(&other.counts).map(|(a, b)| a + b).collect(),
            count: self.count + other.count,
            sum: self.sum.saturating_add(other.sum),
            max: self.max().max(other.max()).unwrap_or(0),
        }
    }

    /// The buckets that hold values: `(smallest, largest, count)`, smallest values first; the
    /// last one's `largest` is clamped to the exact maximum.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts.iter().enumerate().filter(|&(_, &n)| n > 0).map(|(i, &n)| {
            let (low, high) = bounds(i);
            (low, high.min(self.max.max(low)), n)
        })
    }

    /// The smallest bucket bound `v` such that at least a fraction `q` (0.0..=1.0) of the
    /// values are ≤ `v`, clamped to the exact maximum; `None` if the histogram is empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        // The rank of the value asked for, 1-based: at least the first one.
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).clamp(1, self.count.max(1));
        let mut seen = 0;
        let i = self.counts.iter().position(|&n| {
            seen += n;
            seen >= rank
        })?;
        Some(bounds(i).1.min(self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(values: impl IntoIterator<Item = u64>) -> Snapshot {
        let h = Histogram::new();
        values.into_iter().for_each(|v| h.record(v));
        h.snapshot()
    }

    #[test]
    fn buckets_tile_the_range_exactly_below_64_and_at_most_3_percent_wide_above() {
        for i in 0..BUCKETS - 1 {
            let (low, high) = bounds(i);
            assert_eq!((index(low), index(high), bounds(i + 1).0), (i, i, high + 1), "bucket {i}");
            assert!(if i < LINEAR as usize { low == high } else { high - low < low / SUB }, "bucket {i}");
        }
        assert_eq!((bounds(BUCKETS - 1).1, index(u64::MAX)), (u64::MAX, BUCKETS - 1));
    }

    #[test]
    fn quantiles_never_understate_and_are_clamped_to_the_max() {
        let empty = of([]);
        assert_eq!((empty.count(), empty.quantile(0.5), empty.max(), empty.mean()), (0, None, None, None));
        let s = of(1..=10_000);
        assert_eq!((s.count(), s.max(), s.mean()), (10_000, Some(10_000), Some(5_000.5)));
        for (q, exact) in [(0.5, 5_000u64), (0.99, 9_900), (0.999, 9_990)] {
            let got = s.quantile(q).unwrap();
            assert!(got >= exact && got <= exact + exact / 32, "q={q}: {got} vs {exact}");
        }
        let ends = [s.quantile(1.0), s.quantile(0.0), of([u64::MAX]).quantile(1.0)];
        assert_eq!(ends, [Some(10_000), Some(1), Some(u64::MAX)]);
    }

    #[test]
    fn corrected_merged_buckets_and_concurrent_records() {
        let h = Histogram::new();
        h.record_corrected(50, 1_000);
        h.record_corrected(3_500, 1_000); // and the missed 2,500 and 1,500
        let s = h.snapshot();
        assert_eq!((s.count(), s.max(), s.quantile(0.5)), (4, Some(3_500), Some(bounds(index(1_500)).1)));
        let (a, b) = (of([0, 0, 3, 1_000, 1_001]), of([7_000]));
        assert_eq!((a.merged(&b).count(), a.merged(&b).max(), of([]).merged(&of([])).max()), (6, Some(7_000), None));
        let buckets: Vec<_> = a.buckets().collect();
        assert_eq!(buckets[..2], [(0, 0, 2), (3, 3, 1)]);
        assert!(buckets[2].0 <= 1_000 && buckets[2].1 == 1_001 && buckets[2].2 == 2, "{buckets:?}");
        let h = &h;
        std::thread::scope(|s| {
            (0..4).for_each(|t| _ = s.spawn(move || (0..25_000).for_each(|v| h.record(v % 2_000 + t))))
        });
        assert_eq!((h.snapshot().count(), h.snapshot().max()), (100_004, Some(3_500)));
    }
}
