//! [`Missed`]: what a periodic timer does about ticks it could not keep.

use std::time::{Duration, Instant};

/// What an [`Interval`](crate::Interval) or a repeating timer
/// ([`TimerService::schedule_repeating`](crate::TimerService::schedule_repeating)) does when
/// it falls behind: a tick (a run) is due while the previous one is still waiting to be
/// taken, because the task awaiting it, or the shard, was busy.
///
/// With period `p`, ticks due at `start`, `start + p`, `start + 2p`, ... and the late one
/// taken at `now`:
///
/// ```text
///  due:    0    p    2p   3p   4p   5p
///  taken:  0         ────stall────▶ now = 3.4p
///  Burst:  then 3 at once (p, 2p, 3p), then 4p, 5p, ...            fixed rate, catching up
///  Skip:   then 4p, 5p, ... (p, 2p and 3p are skipped)             fixed rate, on the grid
///  Delay:  then now + p = 4.4p, 5.4p, ...                          the grid moves
/// ```
///
/// For an [`Interval`](crate::Interval) the policy applies only when it has fallen behind
/// (the tick after the one taken is already due): a tick taken late but before the next one
/// is due is followed by the next one on the grid, whatever the policy, as in tokio. A
/// repeating timer with [`Missed::Delay`] is the exception: it is fixed-delay throughout,
/// each run one period after the previous run returned.
///
/// ```
/// use shardwheel::Missed;
///
/// assert_eq!(Missed::default(), Missed::Skip);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Missed {
    /// Fixed rate, catching up: every missed tick is taken, back to back, until the timer is
    /// on schedule again.
    Burst,
    /// Fixed delay after a fall behind: the next tick is one period after the late one was
    /// taken, and the grid moves there (for an interval; a tick taken late but before the
    /// next is due is followed by the next on the grid, no drift). A repeating timer is
    /// fixed-delay throughout: each run starts one period after the previous one returned.
    Delay,
    /// Fixed rate, skipping: the missed ticks are dropped, and the next is the first one of
    /// the original schedule that is still ahead.
    #[default]
    Skip,
}

/// Far enough to mean "never" for a timer (a century), near enough for every platform's
/// `Instant` to hold.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `at + by`, saturated a century out instead of overflowing (a `Duration::MAX` delay or
/// period is bad input, never a panic).
pub(crate) fn saturating_add(at: Instant, by: Duration) -> Instant {
    at.checked_add(by).unwrap_or_else(|| at + FAR)
}

impl Missed {
    /// For an interval: the tick after the one due at `due`, taken at `now`. On the grid
    /// (`due + period`) unless that is already due; then as the policy says.
    pub(crate) fn next(self, due: Instant, period: Duration, now: Instant) -> Instant {
        let next = saturating_add(due, period);
        if next > now {
            return next;
        }
        match self {
            Missed::Burst => next,
            Missed::Delay => saturating_add(now, period),
            Missed::Skip => {
                // Whole periods missed since `due`, plus one: the first tick after `now`.
                let behind = now.duration_since(due).as_nanos();
                let periods = behind / period.as_nanos().max(1) + 1;
                match u32::try_from(periods).ok().and_then(|k| period.checked_mul(k)) {
                    Some(ahead) => saturating_add(due, ahead),
                    // More than 2³² periods behind: only possible with tiny periods after a
                    // very long stall; the grid no longer matters.
                    None => saturating_add(now, period),
                }
            }
        }
    }

    /// For a repeating timer: when the run after the one due at `due` is due, the run having
    /// returned at `now`. As [`next`](Missed::next), except that [`Missed::Delay`] is
    /// fixed-delay throughout (`now + period`), as `schedule_repeating` promises.
    pub(crate) fn next_run(self, due: Instant, period: Duration, now: Instant) -> Instant {
        match self {
            Missed::Delay => saturating_add(now, period),
            _ => self.next(due, period, now),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Missed;
    use std::time::{Duration, Instant};

    #[test]
    fn each_policy_picks_its_next_tick() {
        let t0 = Instant::now();
        let p = Duration::from_millis(10);
        let now = t0 + Duration::from_millis(34);
        assert_eq!(Missed::Burst.next(t0, p, now), t0 + p);
        assert_eq!(Missed::Delay.next(t0, p, now), now + p);
        assert_eq!(Missed::Skip.next(t0, p, now), t0 + Duration::from_millis(40));
        // Taken late but before the next tick is due, all three stay on the grid.
        let on_time = t0 + Duration::from_millis(7);
        for missed in [Missed::Burst, Missed::Delay, Missed::Skip] {
            assert_eq!(missed.next(t0, p, on_time), t0 + p, "{missed:?}");
        }
        // A repeating timer's Delay is fixed-delay from the run's end, always; the others
        // are as for an interval.
        assert_eq!(Missed::Delay.next_run(t0, p, on_time), on_time + p);
        assert_eq!(Missed::Delay.next_run(t0, p, now), now + p);
        assert_eq!(Missed::Skip.next_run(t0, p, now), t0 + Duration::from_millis(40));
        assert_eq!(Missed::Burst.next_run(t0, p, now), t0 + p);
        // Exactly on a grid point: the next one, strictly after `now`.
        assert_eq!(Missed::Skip.next(t0, p, t0 + Duration::from_millis(30)), t0 + Duration::from_millis(40));
    }

    /// The grid's next tick is due once `now` reaches it, not only after: at one
    /// nanosecond before it every policy keeps it; at it and one after, each policy acts.
    #[test]
    fn the_next_tick_is_missed_from_the_instant_it_is_due() {
        let t0 = Instant::now();
        let p = Duration::from_millis(10);
        let ns = Duration::from_nanos(1);
        let next = t0 + p;
        for missed in [Missed::Burst, Missed::Delay, Missed::Skip] {
            assert_eq!(missed.next(t0, p, next - ns), next, "{missed:?} one before the tick");
        }
        for now in [next, next + ns] {
            assert_eq!(Missed::Burst.next(t0, p, now), next, "at {:?}", now - next);
            assert_eq!(Missed::Delay.next(t0, p, now), now + p, "at {:?}", now - next);
            assert_eq!(Missed::Skip.next(t0, p, now), t0 + 2 * p, "at {:?}", now - next);
        }
    }

    #[test]
    fn huge_periods_saturate_instead_of_overflowing() {
        let t0 = Instant::now();
        for missed in [Missed::Burst, Missed::Delay, Missed::Skip] {
            assert!(missed.next(t0, Duration::MAX, t0) > t0 + Duration::from_secs(3600 * 24 * 365 * 50));
            assert!(missed.next_run(t0, Duration::MAX, t0) > t0 + Duration::from_secs(3600 * 24 * 365 * 50));
        }
    }
}
