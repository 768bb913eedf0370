//! A shard's shared half: what any thread may touch (mailbox, counters, pending count).
//! The wheel and everything else single-threaded live in `driver.rs`, on the shard's thread.
//!
//! Ground rules:
//! - Pending timeouts are counted as armed − cancelled − expired − unfired: arms and cancels
//!   in per-thread slots (`counts.rs`), so the arm path writes no shared line for them;
//!   expiries and stops by the shard. Each count moves on the thread of the call that made
//!   it, right after the CAS that decided it, so the difference is exact whenever no call is
//!   in flight.
//! - With a `max_pending_per_shard` limit, an exact shared count gates schedules too: it rises
//!   when a schedule reserves a place (a CAS loop that never overshoots, before the timeout
//!   is visible to anyone) and falls at the winning terminal CAS, so the limit is exact.
//! - The wheel's own limit (2³² entries) gates schedules through the mailbox's FULL bit,
//!   which the driver sets and clears at marks below it (`gate.rs`).
//! - Everything else shared is in the mailbox (`mailbox.rs`) or the counters (`stats.rs`).
//!   The stages other threads arm through (`stage.rs`) are theirs; the shard learns of them
//!   through the mailbox (`stages.rs`).

pub(crate) mod driver;
pub(crate) mod gate;
mod handle;
mod stages;

pub(crate) use handle::{OwnerHandle, ShardHandle, ShardRef};

use crate::clock::Clock;
use crate::counts::Slots;
use crate::error::ScheduleError;
use crate::mailbox::Mailbox;
use crate::stats::Counters;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::wheel::{Timed, Wheel};
use crossbeam_utils::CachePadded;

#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) service: u64,
    pub(crate) clock: Clock,
    pub(crate) mailbox: Mailbox,
    pub(crate) counters: Counters,
    /// Each thread's arms and cancels on this shard (`counts.rs`).
    pub(crate) counts: Slots,
    /// Set by the service's last drop before it closes the mailbox: nobody will collect
    /// what the shard takes back as it stops, so the shard drops it itself (see
    /// `driver::run`).
    pub(crate) abandoned: AtomicBool,
    /// Set when the shard's driver panicked (a bug): it takes no more timeouts
    /// (`ScheduleError::ShardFailed`).
    failed: AtomicBool,
    /// On a paused clock (`TestClock`): how many times `advance` asked this shard to catch
    /// up, and the last of those requests the driver has answered (it read the request
    /// before a turn, and that turn went idle with everything due fired and run).
    settle_requested: AtomicU64,
    settled: AtomicU64,
    /// `usize::MAX` when unbounded.
    max_pending: usize,
    pending: CachePadded<AtomicUsize>,
    /// Tests and loom models only: a wheel limit smaller than the real one (2³² entries),
    /// so that what happens at it can be reached (`Builder::wheel_limit`).
    #[cfg(any(test, loom))]
    pub(crate) wheel_limit: Option<usize>,
}

impl Shard {
    pub(crate) fn new(index: usize, service: u64, clock: Clock, max_pending: Option<usize>) -> Shard {
        Shard {
            index,
            service,
            clock,
            mailbox: Mailbox::new(),
            counters: Counters::default(),
            counts: Slots::new(),
            abandoned: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            settle_requested: AtomicU64::new(0),
            settled: AtomicU64::new(0),
            max_pending: max_pending.unwrap_or(usize::MAX),
            pending: CachePadded::new(AtomicUsize::new(0)),
            #[cfg(any(test, loom))]
            wheel_limit: None,
        }
    }

    /// The wheel its driver files into: the real one, or one with a smaller limit (tests).
    pub(crate) fn new_wheel<T: Timed>(&self) -> Wheel<T> {
        #[cfg(any(test, loom))]
        if let Some(limit) = self.wheel_limit {
            return Wheel::with_limit(limit);
        }
        Wheel::new()
    }

    /// The error for a schedule that found this shard's mailbox closed: the service stopped,
    /// or the shard's driver failed.
    pub(crate) fn closed_error<T>(&self, task: T) -> ScheduleError<T> {
        if self.has_failed() { ScheduleError::ShardFailed(task) } else { ScheduleError::Shutdown(task) }
    }

    /// The driver panicked: marks the shard failed, then closes its mailbox, so that a
    /// schedule that finds it closed also finds why.
    pub(crate) fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        self.mailbox.close();
    }

    /// `TestClock::advance`: asks the driver to catch up with the clock; returns the
    /// request's number, which `settled` reaches once it has.
    pub(crate) fn request_settle(&self) -> u64 {
        // Release: the clock's move and the caller's arms before the request; pairs with
        // the Acquire in `settle_requested`.
        self.settle_requested.fetch_add(1, Ordering::Release) + 1
    }

    /// Driver only, before a turn on a paused clock: the latest request to catch up.
    pub(crate) fn settle_requested(&self) -> u64 {
        // Acquire: see `request_settle`.
        self.settle_requested.load(Ordering::Acquire)
    }

    /// Driver only, on a paused clock, as it goes idle: the turn that began after request
    /// `request` fired everything due and ran those tasks.
    pub(crate) fn settle(&self, request: u64) {
        // Release: the tasks' effects before the answer; pairs with the Acquire in
        // `settled`, so that `TestClock::advance` returns with them visible.
        self.settled.store(request, Ordering::Release);
    }

    /// The last request the driver answered (see `settle`).
    pub(crate) fn settled(&self) -> u64 {
        // Acquire: see `settle`.
        self.settled.load(Ordering::Acquire)
    }

    /// Whether the shard's driver panicked (then its mailbox is closed too).
    pub(crate) fn has_failed(&self) -> bool {
        // A caller that found the mailbox closed may have read `closed` with a Relaxed load
        // (`Mailbox::pushed`, after its fence), which orders nothing after `fail`'s mark: it
        // could then read `failed` still false and report `Shutdown` for a service that
        // runs. Reading `closed` again (SeqCst, so Acquire: it reads `true` again, by
        // coherence) synchronizes with `fail`'s close, which came after its mark. Loom:
        // `schedule_races_a_failing_shard` found this (mutation SH11).
        let _ = self.mailbox.is_closed();
        self.failed.load(Ordering::SeqCst)
    }

    /// Whether a `max_pending_per_shard` limit is set (then `pending` is counted in one
    /// shared word, exactly, to gate schedules). Inline: `try_reserve`'s check.
    #[inline]
    fn limited(&self) -> bool {
        self.max_pending != usize::MAX
    }

    /// Reserves a place for one more pending timeout; `false` if the shard is full. Without
    /// a limit there is nothing to reserve. Inline, like the other small steps of an arm
    /// that the user's crate calls (`TimerService::schedule_routed`): a call of its own cost
    /// more than this check; the limited case is out of line.
    ///
    /// Not the wheel's own limit (2³² entries, ~128 GB): reading a word of its own here cost
    /// every arm 10 instructions (callgrind, `examples/arm_cancel_loop.rs`: an atomic load
    /// where a plain one was changes how the whole inlined arm is compiled), so the driver
    /// marks that limit in the mailbox's flag word, which the arm path reads already
    /// (`gate.rs`).
    #[inline]
    pub(crate) fn try_reserve(&self) -> bool {
        !self.limited() || self.try_reserve_limited()
    }

    /// [`Shard::try_reserve`] under a `max_pending_per_shard` limit: a setting a service opts
    /// into, out of line so that the inlined check stays small.
    #[inline(never)]
    fn try_reserve_limited(&self) -> bool {
        // Relaxed throughout: `pending` is a count that publishes no data (see the counters
        // in `stats.rs`); the CAS loop alone makes the limit exact.
        let mut cur = self.pending.load(Ordering::Relaxed);
        loop {
            if cur >= self.max_pending {
                return false;
            }
            match self.pending.compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Gives a reserved place back: a timeout left PENDING (or a reservation was not used).
    pub(crate) fn release(&self) {
        if self.limited() {
            // Relaxed: see `try_reserve`.
            self.pending.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Timeouts pending now; exact whenever no call is in flight.
    pub(crate) fn pending(&self) -> usize {
        if self.limited() {
            // Relaxed: see `try_reserve`.
            return self.pending.load(Ordering::Relaxed);
        }
        let (armed, cancelled) = self.counts.sum();
        let (armed_here, cancelled_here, ended) = self.counters.for_pending();
        // Read while calls are in flight, an end may be counted before its arm: never below 0.
        let pending = (armed + armed_here).saturating_sub(cancelled + cancelled_here + ended);
        usize::try_from(pending).unwrap_or(usize::MAX)
    }

    /// Timeouts armed on this shard, ever: the threads' slots and the shard's own count. A
    /// sum of counts that only grow, so one read is never below an earlier one (`Stats`'s
    /// `scheduled`, which `record_metrics` publishes as a counter).
    pub(crate) fn armed(&self) -> u64 {
        self.counts.sum().0 + self.counters.for_pending().0
    }

    /// Cancels counted in the threads' slots and here.
    pub(crate) fn cancelled(&self) -> u64 {
        self.counts.sum().1 + self.counters.for_pending().1
    }
}
