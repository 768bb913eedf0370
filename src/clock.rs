//! Time in ticks: the one place that turns `Instant`s and `Duration`s into wheel ticks.
//!
//! Tick `t` is the instant `start + t × tick`. A deadline becomes the first tick at or after
//! it (rounding up, so a timeout never fires early); the current time becomes the last tick
//! at or before it (rounding down, so a tick is only "now" once it has begun). Everything
//! saturates: a deadline too far to count in ticks becomes [`NEVER`].

use crate::state::NEVER;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    start: Instant,
    tick_nanos: u64,
}

impl Clock {
    pub(crate) fn new(start: Instant, tick: Duration) -> Clock {
        let tick_nanos = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
        Clock { start, tick_nanos }
    }

    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_nanos)
    }

    /// The tick that has begun most recently.
    pub(crate) fn now_tick(&self) -> u64 {
        self.floor(Instant::now())
    }

    fn floor(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.start).as_nanos();
        u64::try_from(nanos / u128::from(self.tick_nanos))
            .unwrap_or(NEVER)
            .min(NEVER)
    }

    /// The first tick at or after `now + delay`.
    pub(crate) fn deadline_after(&self, delay: Duration) -> u64 {
        let since_start = Instant::now().saturating_duration_since(self.start);
        self.ceil_nanos(since_start.as_nanos().saturating_add(delay.as_nanos()))
    }

    /// The first tick at or after `at`.
    pub(crate) fn deadline_at(&self, at: Instant) -> u64 {
        self.ceil_nanos(at.saturating_duration_since(self.start).as_nanos())
    }

    fn ceil_nanos(&self, nanos: u128) -> u64 {
        let ticks = nanos.div_ceil(u128::from(self.tick_nanos));
        u64::try_from(ticks).unwrap_or(NEVER).min(NEVER)
    }

    /// The instant tick `tick` begins, or the latest instant the platform can represent on
    /// the way there.
    pub(crate) fn instant_of(&self, tick: u64) -> Instant {
        let nanos = u128::from(tick) * u128::from(self.tick_nanos);
        let (secs, sub) = ((nanos / 1_000_000_000) as u64, (nanos % 1_000_000_000) as u32);
        let mut span = Duration::new(secs, sub);
        loop {
            if let Some(at) = self.start.checked_add(span) {
                return at;
            }
            span /= 2;
        }
    }

    /// How long from now until tick `tick` begins (zero if it has).
    pub(crate) fn until(&self, tick: u64) -> Duration {
        self.instant_of(tick).saturating_duration_since(Instant::now())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rounds_deadlines_up_and_now_down() {
        let start = Instant::now();
        let clock = Clock::new(start, Duration::from_millis(1));
        assert_eq!(clock.deadline_at(start), 0);
        assert_eq!(clock.deadline_at(start + Duration::from_micros(1)), 1);
        assert_eq!(clock.deadline_at(start + Duration::from_millis(1)), 1);
        assert_eq!(clock.deadline_at(start + Duration::from_micros(1001)), 2);
        assert_eq!(clock.floor(start + Duration::from_micros(1999)), 1);
        assert_eq!(clock.instant_of(3), start + Duration::from_millis(3));
    }

    #[test]
    fn saturates_to_never() {
        let clock = Clock::new(Instant::now(), Duration::from_micros(10));
        assert_eq!(clock.deadline_after(Duration::MAX), NEVER);
        let far = clock.instant_of(NEVER);
        assert!(far > Instant::now());
        assert!(clock.until(NEVER) > Duration::from_secs(1 << 40));
    }

    #[test]
    fn past_instants_are_tick_zero() {
        let clock = Clock::new(Instant::now(), Duration::from_millis(1));
        let before = Instant::now().checked_sub(Duration::from_secs(1));
        if let Some(before) = before {
            assert_eq!(clock.deadline_at(before), 0);
        }
    }
}
