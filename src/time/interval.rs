//! [`Interval`], [`interval`], [`interval_at`] and [`MissedTickBehavior`]: `tokio::time`'s,
//! on the default service, tick for tick.

use super::{Instant, Sleep, sleep_until};
use crate::missed::saturating_add;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// How late a tick may be taken and still count as on time: the next is then due one period
/// after it, whatever the [`MissedTickBehavior`]. tokio's threshold, kept so that an
/// interval here ticks at the instants tokio's does.
const LATE: Duration = Duration::from_millis(5);

/// Ticks every `period`, the first at once, as `tokio::time::interval`.
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures_executor::block_on(async {
/// let mut every = time::interval(Duration::from_millis(10));
/// let first = every.tick().await; // at once
/// let second = every.tick().await;
/// assert_eq!(second - first, Duration::from_millis(10));
/// assert!(Instant::now() >= second, "never early");
/// # });
/// ```
///
/// # Panics
///
/// If `period` is zero, as tokio's: an interval that ticks without end at one instant is a
/// bug in the caller, and a drop-in must not turn it into a loop that spins at the service's
/// tick. (`TimerService::interval`, whose callers are not porting tokio code, clamps it to a
/// tick instead.) A period shorter than the tick is kept: the ticks come no faster than the
/// tick, each reported at its due instant, as tokio's come no faster than its millisecond.
pub fn interval(period: Duration) -> Interval {
    interval_at(Instant::now(), period)
}

/// Ticks every `period`, the first at `start`, as `tokio::time::interval_at`.
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures_executor::block_on(async {
/// let start = Instant::now() + Duration::from_millis(5);
/// let mut every = time::interval_at(start, Duration::from_millis(10));
/// assert_eq!(every.tick().await, start);
/// # });
/// ```
///
/// # Panics
///
/// If `period` is zero, as [`interval`].
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    assert!(period > Duration::ZERO, "`period` must be non-zero.");
    Interval { delay: sleep_until(start), period, missed_tick_behavior: MissedTickBehavior::default() }
}

/// What an [`Interval`] does once it has fallen behind (a tick taken more than a few
/// milliseconds after it was due), as tokio's. With period `p`, ticks due at `0, p, 2p, …`
/// and the one due at `p` taken at `3.4p`:
///
/// ```text
///  Burst (default):  2p, 3p at once, then 4p, 5p, …    catching up
///  Delay:            4.4p, 5.4p, …                       the grid moves
///  Skip:             4p, 5p, …                           on the grid, the missed dropped
/// ```
///
/// ```
/// use shardwheel::time::MissedTickBehavior;
///
/// assert_eq!(MissedTickBehavior::default(), MissedTickBehavior::Burst);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MissedTickBehavior {
    /// Every missed tick is taken, back to back, until the interval is on schedule again.
    #[default]
    Burst,
    /// The next tick is one period after the late one was taken, and the grid moves there.
    Delay,
    /// The missed ticks are dropped: the next is the first of the schedule still ahead.
    Skip,
}

impl MissedTickBehavior {
    /// The tick after the one due at `due`, taken late at `now`.
    fn next(self, due: Instant, now: Instant, period: Duration) -> Instant {
        match self {
            MissedTickBehavior::Burst => saturating_add(due.into_std(), period).into(),
            MissedTickBehavior::Delay => saturating_add(now.into_std(), period).into(),
            MissedTickBehavior::Skip => {
                // How far into its period `now` is, from the grid through `due`.
                let into = (now - due).as_nanos() % period.as_nanos();
                let ahead = period - Duration::from_nanos(u64::try_from(into).unwrap_or(u64::MAX));
                saturating_add(now.into_std(), ahead).into()
            }
        }
    }
}

impl From<MissedTickBehavior> for crate::Missed {
    fn from(b: MissedTickBehavior) -> crate::Missed {
        match b {
            MissedTickBehavior::Burst => crate::Missed::Burst,
            MissedTickBehavior::Delay => crate::Missed::Delay,
            MissedTickBehavior::Skip => crate::Missed::Skip,
        }
    }
}

impl From<crate::Missed> for MissedTickBehavior {
    fn from(m: crate::Missed) -> MissedTickBehavior {
        match m {
            crate::Missed::Burst => MissedTickBehavior::Burst,
            crate::Missed::Delay => MissedTickBehavior::Delay,
            crate::Missed::Skip => MissedTickBehavior::Skip,
        }
    }
}

/// The ticks of [`interval`] and [`interval_at`], as `tokio::time::Interval`: one [`Sleep`]
/// does the waiting, moved one period on at each tick.
pub struct Interval {
    delay: Sleep,
    period: Duration,
    missed_tick_behavior: MissedTickBehavior,
}

impl Interval {
    /// Waits for the next tick; returns when it was due (not when it was taken).
    /// Cancel-safe: a dropped `tick()` loses no tick.
    pub fn tick(&mut self) -> impl Future<Output = Instant> + Send + Sync + Unpin + '_ {
        std::future::poll_fn(move |cx| self.poll_tick(cx))
    }

    /// Polls for the next tick: `Ready(due)` once it is due, else registers `cx`'s waker.
    ///
    /// # Panics
    ///
    /// As [`Sleep`]'s poll: only on one of the default service's own shard threads.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        if Pin::new(&mut self.delay).poll(cx).is_pending() {
            return Poll::Pending;
        }
        let due = self.delay.deadline();
        // The delay's own clock: an interval made before a `pause` stays on the real one.
        let now = self.delay.clock_now();
        let next = if now > saturating_add(due.into_std(), LATE).into() {
            self.missed_tick_behavior.next(due, now, self.period)
        } else {
            saturating_add(due.into_std(), self.period).into()
        };
        // The fired cell is spent: the sleep registers again on the next poll.
        Pin::new(&mut self.delay).reset(next);
        Poll::Ready(due)
    }

    /// Restarts the schedule: the next tick is due one period from now.
    pub fn reset(&mut self) {
        self.reset_at(saturating_add(self.delay.clock_now().into_std(), self.period).into());
    }

    /// Restarts the schedule: the next tick is due at once.
    pub fn reset_immediately(&mut self) {
        self.reset_at(self.delay.clock_now());
    }

    /// Restarts the schedule: the next tick is due `after` from now.
    pub fn reset_after(&mut self, after: Duration) {
        self.reset_at(saturating_add(self.delay.clock_now().into_std(), after).into());
    }

    /// Restarts the schedule: the next tick is due at `deadline`, then every period.
    pub fn reset_at(&mut self, deadline: Instant) {
        Pin::new(&mut self.delay).reset(deadline);
    }

    /// What the interval does once behind; [`MissedTickBehavior::Burst`] unless set.
    #[must_use]
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.missed_tick_behavior
    }

    /// Sets what the interval does once behind, from the next tick on.
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.missed_tick_behavior = behavior;
    }

    /// The period, as asked.
    #[must_use]
    pub fn period(&self) -> Duration {
        self.period
    }
}

impl fmt::Debug for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interval")
            .field("next", &self.delay.deadline())
            .field("period", &self.period)
            .field("missed_tick_behavior", &self.missed_tick_behavior)
            .finish()
    }
}
