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
use crate::sync::plain::{Arc, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod memo;
#[cfg(loom)]
pub(crate) mod mock;
#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(not(loom))]
mod tsc;

/// Under loom there is no TSC estimate: the mocked clock is the only one.
#[cfg(loom)]
mod tsc {
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Offset {}
}

/// Clock ids: one per clock made, never reused (ids start at 1).
static NEXT_CLOCK: AtomicU64 = AtomicU64::new(1);

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

    /// Nanoseconds from the start to tick `tick`'s beginning (saturating).
    #[inline]
    pub(crate) fn nanos_of_tick(&self, tick: u64) -> u64 {
        tick.saturating_mul(self.tick_nanos)
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
    /// tens of microseconds at most) could take for the next one just before a tick boundary.
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
    /// `Instant::now()` read before it at any rate the kernel gives its clock, ahead by tens of
    /// microseconds at most (see [`tsc`]).
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
        return mock::now(self.start);
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

    /// For a deadline `delay` from now: the deadline in nanoseconds since the start
    /// (saturating), and its tick, as [`Clock::deadline_after`] gives it (the same clock
    /// read: the TSC estimate unless the delay is zero). For the ambient sleep, which keeps
    /// its deadline as asked without `Instant` arithmetic on the way.
    /// A deadline past 292 years from the start (`i64` nanoseconds, as the ambient sleep keeps
    /// it) is `far` from now instead: tokio's far future, never reached in practice but by a
    /// paused clock, whose time stops at 584 years and could never reach a saturated one.
    #[inline]
    pub(crate) fn deadline_after_exact(&self, delay: Duration, far: Duration) -> (u64, u64) {
        let now = match self.fast_now() {
            Some(now) if !delay.is_zero() => now,
            _ => self.nanos_at(self.now()),
        };
        // Within `i64` nanoseconds (292 years), where the ambient sleep keeps its deadline.
        let after = |d: Duration| {
            u64::try_from(d.as_nanos()).ok().and_then(|d| now.checked_add(d)).filter(|&at| at <= i64::MAX as u64)
        };
        let at = after(delay).or_else(|| after(far)).unwrap_or(i64::MAX as u64);
        (at, self.deadline_nanos(u128::from(now), u128::from(at)))
    }

    /// `at` in nanoseconds from the start, negative before it (saturating at ±292 years).
    pub(crate) fn offset_of(&self, at: Instant) -> i64 {
        match at.checked_duration_since(self.start) {
            Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
            None => i64::try_from((self.start - at).as_nanos()).map_or(i64::MIN, |n| -n),
        }
    }

    /// The instant `offset` nanoseconds from the start ([`Clock::offset_of`]'s inverse), or
    /// the farthest the platform can represent on the way there.
    pub(crate) fn at_offset(&self, offset: i64) -> Instant {
        let mut span = Duration::from_nanos(offset.unsigned_abs());
        loop {
            let at = if offset >= 0 { self.start.checked_add(span) } else { self.start.checked_sub(span) };
            if let Some(at) = at {
                return at;
            }
            span /= 2;
        }
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
