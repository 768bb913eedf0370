//! The memos of [`Clock::deadline_at_for_reset`]: per thread, the ticks recent resets went
//! to, with the instants that round up to each.

use super::Clock;
use crate::state::NEVER;
use crate::sync::const_thread_local;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// A memo of [`Clock::deadline_at_for_reset`]: a clock, a tick of it, and instants that round
/// up to that tick: `from`, the instant whose conversion made the memo, and every later one up
/// to the tick's own instant, `until`. Each field a `Cell` of its own, so that the inlined
/// check reads only what it compares.
struct Memo {
    /// [`Clock::id`]; 0 (no clock's) while the memo is empty.
    clock: Cell<u64>,
    tick: Cell<u64>,
    from: Cell<Option<Instant>>,
    /// `start + tick × tick_nanos`.
    until: Cell<Option<Instant>>,
}

/// A thread's memos of [`Clock::deadline_at_for_reset`], and the ticks it has seen once.
struct Memos {
    /// The newest memo first.
    memos: [Memo; 2],
    /// The last two ticks converted, each as [`Memos::key`], the newest first: a second
    /// conversion to one of them makes its memo.
    seen: [Cell<u64>; 2],
    /// Conversions done (memo misses), for the tests.
    #[cfg(test)]
    converted: Cell<u64>,
}

const_thread_local! {
    /// See [`Clock::deadline_at_for_reset`]. A pure function's results with the inputs each
    /// stands for, a clock (its start and tick, which its id names) and instants that round up
    /// to one tick of it, so a memo can never answer for other inputs; thread-local, so no
    /// thread writes another's.
    static MEMOS: Memos = Memos::new();
}

impl Memo {
    /// The memo's tick, if it stands for `at` on clock `clock`.
    #[inline]
    fn answer(&self, clock: u64, at: Instant) -> Option<u64> {
        let (Some(from), Some(until)) = (self.from.get(), self.until.get()) else {
            return None;
        };
        (self.clock.get() == clock && from <= at && at <= until).then(|| self.tick.get())
    }

    fn set(&self, clock: u64, tick: u64, from: Instant, until: Instant) {
        self.clock.set(clock);
        self.tick.set(tick);
        self.from.set(Some(from));
        self.until.set(Some(until));
    }

    fn copy_from(&self, other: &Memo) {
        self.clock.set(other.clock.get());
        self.tick.set(other.tick.get());
        self.from.set(other.from.get());
        self.until.set(other.until.get());
    }
}

impl Memos {
    const fn new() -> Memos {
        // A `const fn`, not a `const`: a `const` of `Cell`s is a fresh copy at each use,
        // which clippy flags as a likely mistake.
        const fn memo() -> Memo {
            Memo { clock: Cell::new(0), tick: Cell::new(0), from: Cell::new(None), until: Cell::new(None) }
        }
        Memos {
            memos: [memo(), memo()],
            seen: [Cell::new(0), Cell::new(0)],
            #[cfg(test)]
            converted: Cell::new(0),
        }
    }

    /// A tick of a clock as one word, for [`Memos::seen`]. Two ticks of one clock never share
    /// a key (the tick is XORed with a hash of the clock's id); ticks of two clocks may, and
    /// the only effect is a memo made on the first conversion rather than the second.
    fn key(clock: u64, tick: u64) -> u64 {
        clock.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ tick
    }

    /// Whether `tick` of clock `clock` is one of the last two ticks converted, else notes it
    /// as the newest of them.
    fn seen_before(&self, clock: u64, tick: u64) -> bool {
        let key = Memos::key(clock, tick);
        let [newest, older] = &self.seen;
        if newest.get() == key || older.get() == key {
            return true;
        }
        older.set(newest.get());
        newest.set(key);
        false
    }

    /// Makes the newest memo, `clock`'s `tick` for `from` to `until`; the newest so far
    /// becomes the older, and the older goes.
    fn remember(&self, clock: u64, tick: u64, from: Instant, until: Instant) {
        let [newest, older] = &self.memos;
        older.copy_from(newest);
        newest.set(clock, tick, from, until);
    }
}

/// Conversions the calling thread's [`Clock::deadline_at_for_reset`] has done (its memos'
/// misses).
#[cfg(test)]
pub(super) fn converted() -> u64 {
    MEMOS.with(|m| m.converted.get())
}

impl Clock {
    /// [`Clock::deadline_at`] for a reset, remembered per thread: a tick with the instants
    /// that round up to it, from one converted to the tick's own. A server resets the idle
    /// timeout of each connection that spoke to `now + idle`, read once a loop turn or once a
    /// connection (hyper's timer does the latter); either way its resets within one tick's
    /// worth of time go to one tick, later and later, and a memo answers them with two
    /// comparisons of instants instead of the `Instant` subtraction (a call into `std`) and
    /// the division. Two memos are kept, so that two families of deadlines reset in turn (a
    /// request timeout and an idle timeout) both find theirs.
    ///
    /// A memo is made on a tick's second conversion, not its first: making one costs an
    /// `Instant` addition and a dozen stores, which resets that each go to a tick of their
    /// own (a deadline jittered by more than a tick, a third family in turn, resets rarer
    /// than one a tick) would pay every time and never use. They pay a look at the second
    /// memo and the two ticks seen once instead, a few nanoseconds over the plain conversion.
    /// Arms, whose deadlines spread over many ticks, use the plain conversion.
    /// `examples/reset_memo.rs` measures each pattern.
    #[inline]
    pub(crate) fn deadline_at_for_reset(&self, at: Instant) -> u64 {
        match MEMOS.try_with(|m| m.memos[0].answer(self.id, at)) {
            Ok(Some(tick)) => tick,
            // A thread being torn down just does without.
            Ok(None) | Err(_) => self.deadline_at_and_remember(at),
        }
    }

    /// [`Clock::deadline_at_for_reset`] when the newest memo did not answer: the older one,
    /// or the tick converted, and remembered on its second conversion. Out of line: a reset
    /// that converts pays for the call, a hit does not.
    #[inline(never)]
    fn deadline_at_and_remember(&self, at: Instant) -> u64 {
        let remembered = MEMOS.try_with(|m| {
            let tick = m.memos[1].answer(self.id, at);
            #[cfg(test)]
            m.converted.set(m.converted.get() + u64::from(tick.is_none()));
            tick
        });
        if let Ok(Some(tick)) = remembered {
            return tick;
        }
        // As `deadline_at`, keeping the nanoseconds for the memo.
        let Some(nanos) = self.nanos_since_start(at) else {
            return self.deadline_at_far(at);
        };
        let tick = self.div_ceil(nanos).min(NEVER);
        // `nanos` (> 0) rounds up to `tick`, and so does every count after it up to the
        // tick's own, `tick × tick_nanos`: the instants from `at` to `until`. Instants up to
        // the start (0) and a saturated count (`NEVER`) are not remembered.
        if nanos == 0 || tick == NEVER {
            return tick;
        }
        let _ = MEMOS.try_with(|m| {
            if !m.seen_before(self.id, tick) {
                return;
            }
            let own = tick.checked_mul(self.tick_nanos).map(Duration::from_nanos);
            if let Some(until) = own.and_then(|own| self.start.checked_add(own)) {
                m.remember(self.id, tick, at, until);
            }
        });
        tick
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Memos;
    use std::collections::HashSet;

    /// Within one clock every tick has a key of its own, so that a tick converted once is
    /// never taken for one of the last two (which would make its memo a conversion early):
    /// the first 4,096 ticks and the last ones before `u64::MAX`, on eight clocks.
    #[test]
    fn two_ticks_of_one_clock_never_share_a_key() {
        for clock in 1..=8u64 {
            let ticks: Vec<u64> = (0..4096).chain(u64::MAX - 4096..=u64::MAX).collect();
            let keys: HashSet<u64> = ticks.iter().map(|&t| Memos::key(clock, t)).collect();
            assert_eq!(keys.len(), ticks.len(), "clock {clock}: two ticks share a key");
        }
    }
}
