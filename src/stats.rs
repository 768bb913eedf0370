//! Counters, and the snapshot users read.

use crate::lateness::{Lateness, Recorder};
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// A snapshot of a service's counters, summed over its shards.
///
/// At rest (no call in flight) the counts are exact and add up:
/// `scheduled == expired + cancelled + unfired + pending`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Timeouts accepted by `schedule*`, and the futures' registrations on a shard: each
    /// `Sleep`, `timeout` or `Interval` tick that waited registered one (one more each time a
    /// sleep on a shard moves to another task's waker); a future ready at once, dropped
    /// before its first poll, or waiting on the overflow timer (`overflowed`), none. Each is,
    /// at any moment, pending or ended in exactly one way, so at rest this equals
    /// `expired + cancelled + unfired + pending`. Counted from the per-thread arm counts the
    /// arm path keeps anyway, so it never reads lower than an earlier read.
    pub scheduled: u64,
    /// Timeouts whose task the shard committed to run.
    pub expired: u64,
    /// Timeouts whose `cancel()` won.
    pub cancelled: u64,
    /// Schedules refused because a shard was full: at `max_pending_per_shard`, or its wheel
    /// near its limit (each handed back in [`ScheduleError::Rejected`](crate::ScheduleError::Rejected)).
    /// Also counts the rare timeout the shard itself refused at its wheel's very limit after
    /// its schedule returned `Ok` (it reads `Cancelled`, and counts as cancelled too).
    pub rejected: u64,
    /// Panics caught in tasks: while running on a shard (the shard went on), or in their
    /// `cancelled()` or `Drop` inside a winning [`Timeout::cancel`](crate::Timeout::cancel)
    /// (the cancel stands). A panic's payload whose own `Drop` panics is dropped inside a
    /// catch too, and each such panic counts one more: a task's panic never fails its shard.
    pub panicked: u64,
    /// Timeouts pending now.
    pub pending: u64,
    /// Timeouts handed back, unfired, by `stop()`.
    pub unfired: u64,
    /// Shards whose thread panicked (a bug in shardwheel, never a task's panic): each takes
    /// no more timeouts ([`ScheduleError::ShardFailed`](crate::ScheduleError::ShardFailed)).
    pub failed_shards: u64,
    /// Times a shard thread woke from sleep. A shard with nothing to do does not wake; one
    /// whose earliest timeouts were cancelled wakes at most once more, at the tick it had
    /// promised (so that producers need not wake it for every new arm); a thread that armed
    /// on it wakes it once as it exits, so that the shard takes and frees its stage.
    pub wakeups: u64,
    /// Commands (stage announcements, cancel and earlier-reset notices, and the rare arm that
    /// cannot go on a stage, such as one from a thread that is exiting) waiting in the
    /// shards' mailboxes, not yet read by their shard.
    /// A sleeping shard is woken before this grows past a high-water mark (1024 per shard),
    /// whatever the commands' deadlines. Arms still on their thread's stage are not counted.
    pub queued: u64,
    /// Futures (`Sleep`, `timeout`, `Interval` ticks, hyper's sleeps) that no shard would
    /// take, which wait on the process's overflow timer instead (a thread and a map under a
    /// lock): every shard full (at `max_pending_per_shard`, or its wheel near its limit), or
    /// the service stopping or stopped. A future never panics for it, and still completes at
    /// its deadline, never before; a count that grows says the service is past what it was
    /// sized for. Not in `scheduled`: no shard holds them.
    pub overflowed: u64,
    /// How late the expired timeouts fired: the shard's turn that fired each, minus the
    /// start of its deadline's tick, in buckets of powers of two of microseconds (see
    /// [`Lateness`]).
    pub lateness: Lateness,
}

impl Stats {
    /// Adds another shard's counts (`TimerService::stats` sums its shards').
    pub(crate) fn add(&mut self, other: &Stats) {
        self.scheduled += other.scheduled;
        self.expired += other.expired;
        self.cancelled += other.cancelled;
        self.rejected += other.rejected;
        self.panicked += other.panicked;
        self.pending += other.pending;
        self.unfired += other.unfired;
        self.failed_shards += other.failed_shards;
        self.wakeups += other.wakeups;
        self.queued += other.queued;
        self.overflowed += other.overflowed;
        self.lateness.add(&other.lateness);
    }
}

/// Per-shard counters. Producers write the first group (rarely: their arms and cancels are
/// counted in slots of their own, `counts.rs`; these take what cannot be, such as arms
/// from the shard's own thread), the shard thread the second; each group has a cache line
/// of its own so the two sides do not invalidate each other.
///
/// Every access is `Relaxed`: the counters carry no data, and a reader that needs exact
/// values synchronizes with the writers by other means (joining, a channel, the task's own
/// signal), as "exact at rest" requires.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    remote: CachePadded<RemoteCounters>,
    local: CachePadded<LocalCounters>,
    /// The shard thread's histogram of lateness (a cache line of its own, padded).
    pub(crate) lateness: Recorder,
}

#[derive(Debug, Default)]
struct RemoteCounters {
    armed: AtomicU64,
    cancelled: AtomicU64,
    rejected: AtomicU64,
    overflowed: AtomicU64,
}

#[derive(Debug, Default)]
struct LocalCounters {
    expired: AtomicU64,
    panicked: AtomicU64,
    unfired: AtomicU64,
    wakeups: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    // Relaxed: see `Counters`.
    counter.fetch_add(by, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn armed(&self) {
        bump(&self.remote.armed, 1);
    }
    pub(crate) fn cancelled(&self) {
        bump(&self.remote.cancelled, 1);
    }
    pub(crate) fn rejected(&self) {
        bump(&self.remote.rejected, 1);
    }
    pub(crate) fn overflowed(&self) {
        bump(&self.remote.overflowed, 1);
    }
    pub(crate) fn expired(&self, by: u64) {
        bump(&self.local.expired, by);
    }
    /// `by` panics caught (`task::catch_panics`: a task's, and its payload's own).
    #[inline]
    pub(crate) fn panicked(&self, by: u64) {
        if by > 0 {
            bump(&self.local.panicked, by);
        }
    }
    pub(crate) fn unfired(&self, by: u64) {
        bump(&self.local.unfired, by);
    }
    pub(crate) fn woke(&self) {
        bump(&self.local.wakeups, 1);
    }

    /// Adds this shard's counts into `stats` (all but `pending`, `scheduled` and
    /// `cancelled`, which the shard sums with its threads' slots).
    pub(crate) fn add_to(&self, stats: &mut Stats) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        stats.rejected += get(&self.remote.rejected);
        stats.overflowed += get(&self.remote.overflowed);
        stats.expired += get(&self.local.expired);
        stats.panicked += get(&self.local.panicked);
        stats.unfired += get(&self.local.unfired);
        stats.wakeups += get(&self.local.wakeups);
        stats.lateness.add(&self.lateness.read());
    }

    /// `(armed, cancelled, ended otherwise)`: the shared counts that pending is derived from.
    pub(crate) fn for_pending(&self) -> (u64, u64, u64) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (get(&self.remote.armed), get(&self.remote.cancelled), get(&self.local.expired) + get(&self.local.unfired))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A service's stats are its shards' summed, field by field: each field of two shards'
    /// snapshots set apart (a product, or one taken for the other, would differ), and the
    /// lateness histograms merged.
    #[test]
    fn stats_add_every_field() {
        let of = |k: u64| {
            let lateness = Recorder::default();
            for _ in 0..k {
                lateness.record(1_000);
            }
            Stats {
                scheduled: 3 * k,
                expired: 5 * k,
                cancelled: 7 * k,
                rejected: 11 * k,
                panicked: 13 * k,
                pending: 17 * k,
                unfired: 19 * k,
                failed_shards: 23 * k,
                wakeups: 29 * k,
                queued: 31 * k,
                overflowed: 37 * k,
                lateness: lateness.read(),
            }
        };
        let mut sum = of(2);
        sum.add(&of(3));
        assert_eq!(sum, of(5));
    }
}
