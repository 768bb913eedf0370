//! How late timeouts fire: a histogram per shard, kept by the shard's thread alone.
//!
//! A timeout's lateness is the time of the shard's turn that committed it (PENDING →
//! EXPIRED) minus the start of its deadline's tick: how long after the wheel could first
//! fire it the shard did (its sleep's wake-up, a busy turn, a task that held the thread).
//! It does not include the rounding of the deadline up to its tick (at most a tick, by
//! design), nor the wait in the turn's batch before the task runs, nor the turn's own work
//! before its expiries (the turn's time is read as it begins, before it files the stages
//! and reads the mail), and it counts only what the shards fire: a future on the overflow
//! timer is not in it. A bucket's bound is exclusive (`< 2^i` µs), where Prometheus's `le`
//! is inclusive: a lateness of exactly `2^i` µs counts in the next bucket.
//!
//! Buckets are powers of two of microseconds: bucket 0 holds lateness under 1 µs, bucket
//! `i` lateness in `[2^(i−1), 2^i)` µs, the last everything from `2^(BUCKETS−2)` µs (~18
//! min) up. The shard's thread is the one writer, so each count moves with a plain load and
//! store (no read-modify-write), on a cache line of the shard's own; a reader sums the
//! counts with `Relaxed` loads, as every counter in `stats.rs`.

use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::time::Duration;

/// How many buckets a histogram has.
pub(crate) const BUCKETS: usize = 32;

/// A histogram of how late timeouts fired: a bucket per power of two of microseconds. Part
/// of [`Stats`](crate::Stats), for the service ([`TimerService::stats`]) or one shard
/// ([`TimerService::shard_stats`]).
///
/// A timeout's lateness is the time of the shard's turn that fired it minus the start of its
/// deadline's tick: what the shard added to the tick's rounding (its wake-up, a busy turn, a
/// task that held its thread). `Default` is empty.
///
/// ```
/// use shardwheel::TimerService;
/// use std::time::Duration;
///
/// let timers = TimerService::builder().shards(1).build()?;
/// let (tx, rx) = std::sync::mpsc::channel();
/// for _ in 0..10 {
///     let tx = tx.clone();
///     timers.schedule(Duration::from_millis(2), move || tx.send(()).unwrap())?;
/// }
/// for _ in 0..10 {
///     rx.recv()?;
/// }
/// let late = timers.stats().lateness;
/// assert_eq!(late.count(), 10);
/// let p99 = late.quantile(0.99).expect("ten timeouts fired");
/// assert!(p99 >= Duration::from_micros(1), "an upper bound: {p99:?}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`TimerService::stats`]: crate::TimerService::stats
/// [`TimerService::shard_stats`]: crate::TimerService::shard_stats
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Lateness {
    counts: [u64; BUCKETS],
}

impl Lateness {
    /// How many timeouts it counts.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Each bucket's upper bound (exclusive; `Duration::MAX` for the last) and count, from the
    /// lowest: under 1 µs, under 2 µs, under 4 µs, and so on.
    ///
    /// ```
    /// let empty = shardwheel::Lateness::default();
    /// let bounds: Vec<_> = empty.buckets().map(|(below, _)| below).take(3).collect();
    /// assert_eq!(bounds, [1, 2, 4].map(std::time::Duration::from_micros));
    /// ```
    pub fn buckets(&self) -> impl Iterator<Item = (Duration, u64)> + '_ {
        self.counts.iter().enumerate().map(|(i, &n)| (upper_bound(i), n))
    }

    /// An upper bound of the `q` quantile (`0.0..=1.0`): the upper bound of the bucket that
    /// holds it, so at most twice the true value (and never below it). `None` if empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: at least the first, at most the last.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(upper_bound(i));
            }
        }
        None
    }

    /// Adds `other`'s counts (a sum over shards).
    pub(crate) fn add(&mut self, other: &Lateness) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }
}

impl fmt::Debug for Lateness {
    /// The count, a few quantiles' bounds, and the buckets that are not empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let filled: Vec<(Duration, u64)> = self.buckets().filter(|&(_, n)| n > 0).collect();
        f.debug_struct("Lateness")
            .field("count", &self.count())
            .field("p50_below", &self.quantile(0.5))
            .field("p99_below", &self.quantile(0.99))
            .field("max_below", &self.quantile(1.0))
            .field("buckets", &filled)
            .finish()
    }
}

/// Bucket `i`'s upper bound: 2^i µs, the last one unbounded.
fn upper_bound(i: usize) -> Duration {
    if i + 1 >= BUCKETS { Duration::MAX } else { Duration::from_micros(1 << i) }
}

/// The bucket of a lateness of `nanos`.
#[inline]
fn bucket(nanos: u64) -> usize {
    let micros = nanos / 1_000;
    // 0 → 0; [1, 2) → 1; [2, 4) → 2; …
    ((u64::BITS - micros.leading_zeros()) as usize).min(BUCKETS - 1)
}

/// A shard's histogram, written by its thread alone.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    counts: CachePadded<[AtomicU64; BUCKETS]>,
}

impl Recorder {
    /// Shard thread only: one more timeout fired `nanos` late.
    #[cfg(test)]
    pub(crate) fn record(&self, nanos: u64) {
        self.record_many(nanos, 1);
    }

    /// Shard thread only: `n` more timeouts fired `nanos` late.
    #[inline]
    pub(crate) fn record_many(&self, nanos: u64, n: u64) {
        let slot = &self.counts[bucket(nanos)];
        // Relaxed, and a load and a store rather than a read-modify-write: the shard's thread
        // is the only writer, and the count publishes nothing (see `stats.rs`).
        slot.store(slot.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// The counts now.
    pub(crate) fn read(&self) -> Lateness {
        let mut late = Lateness::default();
        for (out, count) in late.counts.iter_mut().zip(self.counts.iter()) {
            // Relaxed: see `record`.
            *out = count.load(Ordering::Relaxed);
        }
        late
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_of_microseconds_at_and_around_each_bound() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(999), 0, "under a microsecond");
        assert_eq!(bucket(1_000), 1);
        assert_eq!(bucket(1_999), 1);
        assert_eq!(bucket(2_000), 2);
        assert_eq!(bucket(3_999), 2);
        assert_eq!(bucket(4_000), 3);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1, "the last holds everything above");
        for i in 1..BUCKETS - 1 {
            let bound = upper_bound(i).as_nanos() as u64;
            assert_eq!(bucket(bound - 1), i, "just below bucket {i}'s bound");
            assert_eq!(bucket(bound), i + 1, "at bucket {i}'s bound");
        }
    }

    #[test]
    fn quantiles_are_upper_bounds_of_the_bucket_holding_the_rank() {
        let recorder = Recorder::default();
        assert_eq!(recorder.read().quantile(0.5), None);
        for _ in 0..98 {
            recorder.record(500); // < 1 µs
        }
        recorder.record(3_000); // [2, 4) µs
        recorder.record(70_000_000); // 70 ms: [65.5, 131) ms
        let late = recorder.read();
        assert_eq!(late.count(), 100);
        assert_eq!(late.quantile(0.5), Some(Duration::from_micros(1)));
        assert_eq!(late.quantile(0.98), Some(Duration::from_micros(1)));
        assert_eq!(late.quantile(0.99), Some(Duration::from_micros(4)));
        assert_eq!(late.quantile(1.0), Some(Duration::from_micros(131_072)));
        assert_eq!(late.quantile(0.0), Some(Duration::from_micros(1)), "the first");
        let mut sum = late;
        sum.add(&late);
        assert_eq!(sum.count(), 200);
        assert_eq!(sum.quantile(0.99), late.quantile(0.99));
        let debug = format!("{late:?}");
        assert!(debug.contains("count: 100") && debug.contains("p99_below"), "{debug}");
    }
}
