//! Time in ticks: the one place that turns `Instant`s and `Duration`s into wheel ticks.
//!
//! Tick `t` is the instant `start + t × tick`. A deadline becomes the first tick at or after
//! it (rounding up, so a timeout never fires early); the current time becomes the last tick
//! at or before it (rounding down, so a tick is only "now" once it has begun). Everything
//! saturates: a deadline too far to count in ticks becomes [`NEVER`].
//!
//! "Now" for a deadline counted from a delay (`schedule`, `sleep`, `reset`) is read from the
//! TSC where that is one clock with `Instant` ([`tsc`]): an estimate never behind
//! `Instant::now()`, some 10 ns cheaper. Everything else reads `Instant::now()`.

use crate::state::NEVER;
use crate::sync::const_thread_local;
use crate::sync::plain::{Arc, AtomicU64, Ordering};
use std::cell::Cell;
use std::time::{Duration, Instant};

#[cfg(not(loom))]
mod tsc;

/// Under loom there is no TSC estimate: the mocked clock is the only one.
#[cfg(loom)]
mod tsc {
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Offset {}
}

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

/// Clock ids: one per clock made, never reused (ids start at 1).
static NEXT_CLOCK: AtomicU64 = AtomicU64::new(1);

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

    /// A tick of a clock as one word, for [`Memos::seen`]. Two ticks may share a key: the
    /// only effect is a memo made on the first conversion rather than the second.
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
fn converted() -> u64 {
    MEMOS.with(|m| m.converted.get())
}

#[derive(Clone, Debug)]
pub(crate) struct Clock {
    /// Names this clock's `start` and `tick_nanos` (which never change) in a reset's memo:
    /// a clone has the same id, every other clock another.
    id: u64,
    start: Instant,
    tick_nanos: u64,
    /// `⌊(2⁶⁴ − 1) / tick_nanos⌋`: divides by the tick with a multiply (see [`Clock::div`]).
    tick_inverse: u64,
    /// A paused clock's time (`TestClock`): nanoseconds since `start`, moved only by
    /// `TestClock::advance`. `None`: the real clock.
    paused: Option<Arc<AtomicU64>>,
    /// Where the TSC estimate's base is from `start`: `None` on a paused clock, under loom,
    /// and where the TSC is unusable.
    #[cfg_attr(loom, allow(dead_code))]
    fast: Option<tsc::Offset>,
}

impl Clock {
    pub(crate) fn new(start: Instant, tick: Duration) -> Clock {
        let tick_nanos = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
        #[cfg(not(loom))]
        let fast = tsc::offset(start);
        #[cfg(loom)]
        let fast = None;
        // Relaxed: an id only needs to differ from every other; nothing is published by it.
        let id = NEXT_CLOCK.fetch_add(1, Ordering::Relaxed);
        Clock { id, start, tick_nanos, tick_inverse: u64::MAX / tick_nanos, paused: None, fast }
    }

    /// A clock that stands still at `start` until its time (the returned counter, in
    /// nanoseconds since `start`) is moved.
    pub(crate) fn paused(start: Instant, tick: Duration) -> (Clock, Arc<AtomicU64>) {
        let time = Arc::new(AtomicU64::new(0));
        (Clock { paused: Some(time.clone()), fast: None, ..Clock::new(start, tick) }, time)
    }

    /// Whether this is a paused clock.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.is_some()
    }

    /// `n / tick_nanos`, by a multiply and one correction instead of a division (a 64-bit
    /// `div` costs tens of cycles, on every arm and every reset). With `m = ⌊(2⁶⁴−1)/d⌋`,
    /// `⌊n·m / 2⁶⁴⌋` is at most `n/d` and more than `n/d − 1`, so it is the quotient or one
    /// less, and the remainder tells which.
    #[inline]
    fn div(&self, n: u64) -> u64 {
        let q = ((u128::from(n) * u128::from(self.tick_inverse)) >> 64) as u64;
        if n - q * self.tick_nanos >= self.tick_nanos { q + 1 } else { q }
    }

    /// `⌈n / tick_nanos⌉`, from the same estimate as [`Clock::div`]: with `q` the quotient
    /// or one less, the remainder `r = n − q·d` is below `2d`, and `⌈n/d⌉` is `q`, plus one
    /// if `r` is not zero, plus one more if `r` is over `d`. No branch.
    #[inline]
    fn div_ceil(&self, n: u64) -> u64 {
        let q = ((u128::from(n) * u128::from(self.tick_inverse)) >> 64) as u64;
        let r = n - q * self.tick_nanos;
        q + u64::from(r != 0) + u64::from(r > self.tick_nanos)
    }

    /// Nanoseconds from the start to `at` (zero before it), or `None` past 584 years.
    #[inline]
    fn nanos_since_start(&self, at: Instant) -> Option<u64> {
        let span = at.saturating_duration_since(self.start);
        span.as_secs().checked_mul(1_000_000_000)?.checked_add(u64::from(span.subsec_nanos()))
    }

    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_nanos)
    }

    /// The tick that has begun most recently.
    pub(crate) fn now_tick(&self) -> u64 {
        self.floor(self.now())
    }

    fn floor(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.start).as_nanos();
        if let Ok(nanos) = u64::try_from(nanos) {
            return self.div(nanos).min(NEVER);
        }
        u64::try_from(nanos / u128::from(self.tick_nanos)).unwrap_or(NEVER).min(NEVER)
    }

    /// The tick for a deadline `delay` from now: see [`Clock::deadline_at`]. Now is the TSC
    /// estimate where there is one (never behind `Instant::now()`, so never early). A zero
    /// delay reads `Instant::now()`: it is the tick under way, which the estimate (ahead by
    /// microseconds) could take for the next one just before a tick boundary.
    #[inline]
    pub(crate) fn deadline_after(&self, delay: Duration) -> u64 {
        if !delay.is_zero() {
            if let Some(now) = self.fast_now() {
                return self.deadline_after_nanos(now, delay);
            }
        }
        self.deadline_after_read(delay)
    }

    /// Now in nanoseconds since the start, for a deadline `delay` from now that the caller
    /// counts itself (`LocalWheel::arm`, whose clock is real time, never paused nor mocked):
    /// the TSC estimate where there is one and the delay is not zero (as
    /// [`Clock::deadline_after`]), else `Instant::now()`.
    #[inline]
    pub(crate) fn real_nanos_for_delay(&self, delay: Duration) -> u64 {
        if !delay.is_zero() {
            if let Some(now) = self.fast_now() {
                return now;
            }
        }
        self.nanos_at(Instant::now())
    }

    /// The TSC estimate of now, in nanoseconds since the start: never behind
    /// `Instant::now()` read before it, ahead by microseconds at most (see [`tsc`]).
    #[inline]
    fn fast_now(&self) -> Option<u64> {
        #[cfg(not(loom))]
        return Some(self.fast?.since_start(tsc::now()?));
        #[cfg(loom)]
        return None;
    }

    /// Now, never behind `Instant::now()` read before it, for a deadline counted from a
    /// delay: the TSC estimate where there is one, else [`Clock::now`].
    pub(crate) fn now_for_deadline(&self) -> Instant {
        match self.fast_now() {
            Some(nanos) => self.start.checked_add(Duration::from_nanos(nanos)).unwrap_or_else(|| self.now()),
            None => self.now(),
        }
    }

    /// [`Clock::deadline_after`] from [`Clock::now`].
    fn deadline_after_read(&self, delay: Duration) -> u64 {
        let now = self.now();
        // The common case in 64-bit arithmetic: see `deadline_nanos`.
        if let (Some(now), Ok(delay)) = (self.nanos_since_start(now), u64::try_from(delay.as_nanos())) {
            if let Some(deadline) = now.checked_add(delay) {
                return self.deadline_nanos(u128::from(now), u128::from(deadline));
            }
        }
        let now = now.saturating_duration_since(self.start).as_nanos();
        self.deadline_nanos(now, now.saturating_add(delay.as_nanos()))
    }

    /// The tick for deadline `at`: the first tick at or after it, so that the timeout never
    /// fires early. No clock read: the caller gave the instant (a deadline already past is a
    /// tick that has begun, or the next one, and fires by the next tick boundary).
    #[inline]
    pub(crate) fn deadline_at(&self, at: Instant) -> u64 {
        // The common case in 64-bit arithmetic: see `deadline_nanos`.
        match self.nanos_since_start(at) {
            Some(nanos) => self.div_ceil(nanos).min(NEVER),
            None => self.deadline_at_far(at),
        }
    }

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

    /// [`Clock::deadline_at`] for an instant over 584 years from the start. Out of line, so
    /// that the common path (every `reset_at`) keeps no registers for a 128-bit division.
    #[cold]
    #[inline(never)]
    fn deadline_at_far(&self, at: Instant) -> u64 {
        let at = at.saturating_duration_since(self.start).as_nanos();
        u64::try_from(at.div_ceil(u128::from(self.tick_nanos))).unwrap_or(NEVER).min(NEVER)
    }

    /// `now` and `deadline` in nanoseconds since the start.
    #[inline]
    fn deadline_nanos(&self, now: u128, deadline: u128) -> u64 {
        // The common case in 64-bit arithmetic (a 128-bit division costs several times more,
        // on every arm): anything within 584 years of the service's start.
        if let (Ok(now), Ok(deadline)) = (u64::try_from(now), u64::try_from(deadline)) {
            let ticks = if deadline <= now { self.div(now) } else { self.div_ceil(deadline) };
            return ticks.min(NEVER);
        }
        self.deadline_nanos_far(now, deadline)
    }

    /// [`Clock::deadline_nanos`] past 584 years from the start; out of line, as
    /// [`Clock::deadline_at_far`].
    #[cold]
    #[inline(never)]
    fn deadline_nanos_far(&self, now: u128, deadline: u128) -> u64 {
        let tick = u128::from(self.tick_nanos);
        let ticks = if deadline <= now { now / tick } else { deadline.div_ceil(tick) };
        u64::try_from(ticks).unwrap_or(NEVER).min(NEVER)
    }

    /// The instant tick `tick` begins, or the latest instant the platform can represent on
    /// the way there.
    pub(crate) fn instant_of(&self, tick: u64) -> Instant {
        let nanos = u128::from(tick) * u128::from(self.tick_nanos);
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        let sub = (nanos % 1_000_000_000) as u32;
        let mut span = Duration::new(secs, sub);
        loop {
            if let Some(at) = self.start.checked_add(span) {
                return at;
            }
            span /= 2;
        }
    }

    /// How long from now until tick `tick` begins (zero if it has).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn until(&self, tick: u64) -> Duration {
        self.instant_of(tick).saturating_duration_since(self.now())
    }

    /// The current time: the real one, a paused clock's, or under loom the mocked one.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        #[cfg(not(loom))]
        return match &self.paused {
            None => Instant::now(),
            // Acquire: pairs with the Release of `TestClock::advance`, so that what the
            // advancing thread did before is visible to whoever reads the new time.
            Some(time) => self.start + Duration::from_nanos(time.load(crate::sync::plain::Ordering::Acquire)),
        };
        #[cfg(loom)]
        return self.start + mock::elapsed();
    }

    /// Blocks the calling (driver) thread until tick `tick` begins, or forever (`None`), or
    /// until it is unparked, whichever comes first; it may also return early, spuriously.
    pub(crate) fn sleep_until(&self, tick: Option<u64>) {
        #[cfg(not(loom))]
        match tick {
            // A paused clock's time moves only by `TestClock::advance`, which wakes the shard.
            Some(_) if self.is_paused() => crate::sync::thread::park(),
            None => crate::sync::thread::park(),
            Some(tick) => crate::sync::thread::park_timeout(self.until(tick)),
        }
        // Under loom a timed sleep is the passing of time: the mocked clock jumps to the
        // tick (loom cannot model a timeout, and a model must not hang on one). A model that
        // freezes time turns it into a sleep only a wake-up ends, to prove one comes.
        #[cfg(loom)]
        match tick {
            Some(tick) if !mock::frozen() => {
                mock::advance_to(self.instant_of(tick).saturating_duration_since(self.start))
            }
            _ => crate::sync::thread::park(),
        }
    }
}

/// The mocked clock under loom: time since every service's start, moved only by shard
/// sleeps and by the model itself. A plain thread-local: loom runs all of a model's threads
/// on the test's one OS thread, so they share it, and parallel tests do not.
#[cfg(loom)]
pub(crate) mod mock {
    use std::cell::Cell;
    use std::time::Duration;

    std::thread_local! {
        static ELAPSED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
        static FROZEN: Cell<bool> = const { Cell::new(false) };
    }

    pub(crate) fn frozen() -> bool {
        FROZEN.with(Cell::get)
    }

    pub(crate) fn freeze(frozen: bool) {
        FROZEN.with(|f| f.set(frozen));
    }

    pub(crate) fn elapsed() -> Duration {
        ELAPSED.with(Cell::get)
    }

    /// Moves time forward to `to` (never back).
    pub(crate) fn advance_to(to: Duration) {
        ELAPSED.with(|e| e.set(e.get().max(to)));
    }

    pub(crate) fn reset() {
        ELAPSED.with(|e| e.set(Duration::ZERO));
        freeze(false);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rounds_deadlines_up_and_now_down() {
        let start = Instant::now();
        let clock = Clock::new(start, Duration::from_millis(1));
        let ms = 1_000_000;
        // Deadlines ahead of `now` round up ...
        assert_eq!(clock.deadline_nanos(0, 1_000), 1);
        assert_eq!(clock.deadline_nanos(0, ms), 1);
        assert_eq!(clock.deadline_nanos(0, ms + 1_000), 2);
        assert_eq!(clock.deadline_nanos(ms / 2, 7 * ms + 1), 8);
        // ... and deadlines already reached are the tick under way.
        assert_eq!(clock.deadline_nanos(5 * ms + 300, 5 * ms + 300), 5);
        assert_eq!(clock.deadline_nanos(5 * ms + 300, ms), 5);
        assert_eq!(clock.deadline_at(start), 0);
        assert_eq!(clock.deadline_at(start + Duration::from_micros(1500)), 2);
        assert_eq!(clock.deadline_at(start + Duration::from_millis(3)), 3);
        assert_eq!(clock.floor(start + Duration::from_micros(1999)), 1);
        assert_eq!(clock.instant_of(3), start + Duration::from_millis(3));
    }

    /// A memo answers only for its own clock: the same instant on three clocks (another tick,
    /// another start), in turn, gets each clock's answer, the same as without the memo.
    #[test]
    fn a_remembered_reset_deadline_answers_only_for_its_own_clock() {
        let start = Instant::now();
        let ms = Clock::new(start, Duration::from_millis(1));
        let ten = Clock::new(start, Duration::from_millis(10));
        let later = Clock::new(start + Duration::from_millis(5), Duration::from_millis(1));
        let at = start + Duration::from_micros(12_345);
        for _ in 0..3 {
            for (clock, want) in [(&ms, 13), (&ten, 2), (&later, 8), (&ms, 13)] {
                assert_eq!(clock.deadline_at_for_reset(at), want);
                assert_eq!(clock.deadline_at_for_reset(at), clock.deadline_at(at));
            }
            let other = at + Duration::from_nanos(1);
            assert_eq!(ms.deadline_at_for_reset(other), ms.deadline_at(other));
            assert_eq!(ms.deadline_at_for_reset(start), 0);
        }
    }

    #[test]
    fn a_remembered_tick_answers_exactly_for_the_instants_that_round_up_to_it() {
        let start = Instant::now() + Duration::from_secs(1);
        let clocks = [
            Clock::new(start, Duration::from_millis(1)),
            Clock::new(start, Duration::from_millis(10)),
            Clock::new(start + Duration::from_nanos(3), Duration::from_millis(1)),
            Clock::new(start, Duration::from_nanos(7)),
            Clock::new(start, Duration::from_nanos(999_983)),
            Clock::new(start, Duration::from_secs(3600)),
        ];
        // Instants on, just before and just after tick boundaries of every clock, and before
        // the start; visited in a scrambled order, clocks interleaved, so each call meets a
        // memo left by another instant, another tick or another clock.
        let mut offsets: Vec<i64> = vec![-2_000_000, -1, 0, 1, 2];
        for d in [1_000_000i64, 10_000_000, 7, 999_983, 3_600_000_000_000] {
            for k in [1i64, 2, 3, 1000, 123_457] {
                for e in [-1i64, 0, 1, 3] {
                    offsets.push(d.saturating_mul(k).saturating_add(e));
                }
            }
        }
        let at = |offset: i64| {
            let magnitude = Duration::from_nanos(offset.unsigned_abs());
            if offset < 0 { start - magnitude } else { start + magnitude }
        };
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let clock = &clocks[(x % clocks.len() as u64) as usize];
            let at = at(offsets[((x >> 8) % offsets.len() as u64) as usize]);
            assert_eq!(clock.deadline_at_for_reset(at), clock.deadline_at(at), "{clock:?} at {at:?}");
        }
    }

    #[test]
    fn a_tick_is_remembered_on_its_second_conversion_and_two_families_keep_theirs() {
        let start = Instant::now() + Duration::from_secs(1);
        let ms = Clock::new(start, Duration::from_millis(1));
        // Two families, each reset later and later within one tick of its own: a request
        // timeout 5 s ahead and an idle timeout 60 s ahead, in turn.
        let request = start + Duration::from_micros(5_000_100);
        let idle = start + Duration::from_micros(60_000_100);
        let n = |k: u64| Duration::from_nanos(k);
        let conversions = |resets: &[Instant]| {
            let before = converted();
            for &at in resets {
                assert_eq!(ms.deadline_at_for_reset(at), ms.deadline_at(at));
            }
            converted() - before
        };
        // Each family's first two resets convert (the second makes its memo); then both are
        // answered, the request timeout's by the older memo.
        assert_eq!(conversions(&[request, idle, request + n(1), idle + n(1)]), 4);
        assert_eq!(conversions(&[request + n(2), idle + n(2), request + n(3), idle + n(3)]), 0);
        // A new tick for each family: two conversions each again, then answered.
        let (request, idle) = (request + Duration::from_millis(1), idle + Duration::from_millis(1));
        assert_eq!(conversions(&[request, idle, request + n(1), idle + n(1)]), 4);
        assert_eq!(conversions(&[request + n(2), idle + n(2)]), 0);
        // An earlier instant of a remembered tick is not in its memo (its `from` is later):
        // converted, and right.
        assert_eq!(conversions(&[request - n(1)]), 1);
        // Another clock's reset to an instant the first clock's memo holds is its own
        // conversion.
        let ten = Clock::new(start, Duration::from_millis(10));
        let before = converted();
        assert_eq!(ten.deadline_at_for_reset(idle + n(2)), ten.deadline_at(idle + n(2)));
        assert_eq!(converted() - before, 1);
    }

    #[test]
    fn the_memo_stays_exact_at_the_limits_of_the_tick_count() {
        let start = Instant::now();
        for tick in [Duration::from_nanos(1), Duration::from_nanos(u64::MAX)] {
            let clock = Clock::new(start, tick);
            let never = Duration::from_nanos(NEVER.saturating_mul(tick.as_nanos() as u64));
            let far = Duration::from_nanos(u64::MAX);
            for base in [never, far] {
                for k in [0u64, 1, 2, 5] {
                    for at in [start + base - Duration::from_nanos(k), start + base + Duration::from_nanos(k)] {
                        // Twice each: the second would be answered by a memo, if one was made.
                        for _ in 0..2 {
                            assert_eq!(clock.deadline_at_for_reset(at), clock.deadline_at(at), "{tick:?} at {at:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn division_by_the_tick_is_exact() {
        let ticks = [1, 2, 3, 7, 10_000, 999_983, 1_000_000, 1 << 32, 3_600_000_000_000, u64::MAX / 3, u64::MAX];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for &d in &ticks {
            let clock = Clock::new(Instant::now(), Duration::from_nanos(d));
            let check = |n: u64| {
                assert_eq!(clock.div(n), n / d, "{n} / {d}");
                assert_eq!(clock.div_ceil(n), n.div_ceil(d), "⌈{n} / {d}⌉");
            };
            for n in [0, 1, d - 1, d, d.saturating_add(1), u64::MAX - 1, u64::MAX] {
                check(n);
            }
            for k in [1u64, 2, 3, 1000, 1 << 20] {
                check(d.saturating_mul(k));
                check(d.saturating_mul(k).saturating_sub(1));
            }
            for _ in 0..10_000 {
                // xorshift: values spread over every magnitude.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                check(x);
                check(x >> (x % 64));
            }
        }
    }

    #[test]
    fn saturates_to_never() {
        let clock = Clock::new(Instant::now(), Duration::from_micros(10));
        assert_eq!(clock.deadline_after(Duration::MAX), NEVER);
        let coarse = Clock::new(Instant::now(), Duration::from_secs(3600));
        assert!(coarse.instant_of(NEVER) > Instant::now() + Duration::from_secs(1 << 40));
        let far = clock.instant_of(NEVER);
        assert!(far > Instant::now());
        assert!(clock.until(NEVER) > Duration::from_secs(1 << 40));
    }

    /// `deadline_after` (the TSC estimate, where there is one) against `Instant::now()` read
    /// before and after it: a deadline's tick begins at or after `before + delay`, and
    /// within a tick and the estimate's bound (`tsc`: 12 µs) of `after + delay`. On the
    /// smallest tick, over half a second (past the estimate's calibration).
    #[test]
    fn deadlines_from_a_delay_are_never_early() {
        let tick = Duration::from_micros(10);
        let clock = Clock::new(Instant::now(), tick);
        let end = Instant::now() + Duration::from_millis(500);
        // Not zero: a zero delay is the tick under way (see `deadline_nanos`).
        let mut delay = Duration::from_nanos(1);
        while Instant::now() < end {
            let before = Instant::now();
            let at = clock.instant_of(clock.deadline_after(delay));
            let after = Instant::now();
            assert!(at >= before + delay, "{delay:?}: {:?} early", (before + delay) - at);
            let late = at.saturating_duration_since(after + delay);
            assert!(late <= tick + Duration::from_micros(20), "{delay:?}: {late:?} late");
            delay = Duration::from_nanos((delay.as_nanos() as u64 + 7_919) % 50_000_000 + 1);
        }
        let (paused, _) = Clock::paused(Instant::now(), tick);
        assert!(paused.fast.is_none(), "a paused clock reads its own time");
        assert_eq!(paused.deadline_after(Duration::from_micros(25)), 3);
    }

    #[test]
    fn past_instants_are_due_now() {
        let clock = Clock::new(Instant::now(), Duration::from_millis(1));
        let before = Instant::now().checked_sub(Duration::from_secs(1));
        if let Some(before) = before {
            assert_eq!(clock.deadline_at(before), 0);
        }
        let now = Instant::now();
        assert!(clock.deadline_at(now) <= clock.now_tick() + 1, "by the next tick boundary");
    }
}

/// For the embedded wheel (`local/`), which keeps its own notion of now and reads no clock.
impl Clock {
    /// The tick that has begun most recently at `at`: the wheel's now.
    pub(crate) fn tick_at(&self, at: Instant) -> u64 {
        self.floor(at)
    }

    /// Nanoseconds from the start to `at` (zero before it), saturating past 584 years.
    pub(crate) fn nanos_at(&self, at: Instant) -> u64 {
        self.nanos_since_start(at).unwrap_or(u64::MAX)
    }

    /// The tick for a deadline `delay` after `now_nanos` (nanoseconds since the start, as
    /// [`Clock::nanos_at`] gives): the first tick at or after it, as [`Clock::deadline_at`],
    /// with no `Instant` arithmetic and no clock read.
    #[inline]
    pub(crate) fn deadline_after_nanos(&self, now_nanos: u64, delay: Duration) -> u64 {
        let deadline = u64::try_from(delay.as_nanos()).ok().and_then(|d| now_nanos.checked_add(d));
        match deadline {
            Some(deadline) => self.deadline_nanos(u128::from(now_nanos), u128::from(deadline)),
            None => self.deadline_nanos(u128::from(now_nanos), u128::from(now_nanos).saturating_add(delay.as_nanos())),
        }
    }
}
