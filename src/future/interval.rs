//! [`Interval`]: ticks at a fixed period, as an async stream of instants.

use crate::error::Stopped;
use crate::future::Sleep;
use crate::future::sleep::OnStop;
use crate::missed::{Missed, saturating_add};
use crate::service::TimerService;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Ticks every `period`; made by [`TimerService::interval`]. Await
/// [`tick`](Interval::tick) for each.
///
/// The first tick completes at once; tick `k` is due at `start + k × period`, and never
/// completes before that (it completes at the first tick boundary of the service at or after
/// it). A tick taken late is followed by the next on the grid, unless the interval fell
/// behind (the next tick was already due when it was taken): then as
/// [`set_missed`](Interval::set_missed) says ([`Missed::Skip`] by default). One [`Sleep`] does the waiting: a tick taken on time moves
/// its deadline one period on (a fresh registration once it has fired; when the interval
/// is already behind, a tick costs no registration at all).
///
/// ```
/// use shardwheel::TimerService;
/// use std::time::{Duration, Instant};
///
/// let timers = TimerService::new()?;
/// // A period long enough that no tick falls a whole period behind on a busy machine (once
/// // behind, `Missed::Skip` would skip ahead on the grid).
/// let mut every = timers.interval(Duration::from_millis(100));
/// let start = futures_executor::block_on(every.tick());
/// let third = futures_executor::block_on(async {
///     every.tick().await;
///     every.tick().await
/// });
/// assert_eq!(third, start + Duration::from_millis(200));
/// assert!(Instant::now() >= third, "never early");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// On a [stopped](TimerService::stop) (or stopping) service, `tick` goes on ticking on time,
/// paced by the overflow timer (as a [`Sleep`] waits there: its "Full, stopping, stopped"),
/// and never panics; [`try_tick`](Interval::try_tick) returns the error instead, for a loop
/// that should end with the service.
pub struct Interval {
    sleep: Sleep,
    /// When the next tick is due.
    next: Instant,
    period: Duration,
    missed: Missed,
}

impl TimerService {
    /// Ticks every `period`, the first at once (see [`Interval`]).
    ///
    /// A period shorter than the service's [`tick`](TimerService::tick), zero included, is
    /// clamped to one tick: the wheel cannot tell shorter periods apart, and a zero period
    /// would be a busy loop.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let every = timers.interval(Duration::ZERO);
    /// assert_eq!(every.period(), timers.tick());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn interval(&self, period: Duration) -> Interval {
        self.interval_at(self.clock().now(), period)
    }

    /// Ticks every `period`, the first at `start` (see [`interval`](TimerService::interval)).
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let start = Instant::now() + Duration::from_millis(5);
    /// let mut every = timers.interval_at(start, Duration::from_millis(10));
    /// assert_eq!(futures_executor::block_on(every.tick()), start);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn interval_at(&self, start: Instant, period: Duration) -> Interval {
        Interval {
            sleep: self.sleep_until(start),
            next: start,
            period: period.max(self.tick()),
            missed: Missed::default(),
        }
    }
}

impl Interval {
    /// Waits for the next tick; returns when it was due (not when it was taken).
    ///
    /// Cancel-safe: dropping the future before it completes loses no tick.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let mut every = timers.interval(Duration::from_millis(5));
    /// futures_executor::block_on(async {
    ///     for _ in 0..3 {
    ///         every.tick().await;
    ///     }
    /// });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tick(&mut self) -> impl Future<Output = Instant> + Send + Sync + Unpin + '_ {
        std::future::poll_fn(move |cx| self.poll_tick(cx))
    }

    /// Polls for the next tick: `Ready(due)` once it is due, else registers `cx`'s waker.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let mut every = timers.interval(Duration::from_millis(5));
    /// let first = futures_executor::block_on(std::future::poll_fn(|cx| every.poll_tick(cx)));
    /// assert!(first <= std::time::Instant::now());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// On a stopped service the ticks go on, paced by the overflow timer
    /// ([`try_poll_tick`](Interval::try_poll_tick) returns [`Stopped`] instead).
    ///
    /// # Panics
    ///
    /// As a [`Sleep`]'s poll does: only on one of its own service's shard threads.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        match self.poll_tick_with(cx, OnStop::Overflow) {
            Poll::Ready(Ok(due)) => Poll::Ready(due),
            Poll::Ready(Err(_)) => unreachable!("`OnStop::Overflow` never reports a stop"),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Waits for the next tick, with a stopped service as an error: `Ok(due)`, or
    /// `Err(Stopped)` once the service is stopped.
    ///
    /// ```
    /// use shardwheel::{Stopped, TimerService};
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let mut every = timers.interval(Duration::from_millis(5));
    /// assert!(futures_executor::block_on(every.try_tick()).is_ok());
    /// timers.stop()?;
    /// assert_eq!(futures_executor::block_on(every.try_tick()), Err(Stopped::new()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_tick(&mut self) -> impl Future<Output = Result<Instant, Stopped>> + Send + Sync + Unpin + '_ {
        std::future::poll_fn(move |cx| self.try_poll_tick(cx))
    }

    /// Polls for the next tick, with a stopped service as an error (see
    /// [`try_tick`](Interval::try_tick)).
    ///
    /// ```
    /// use shardwheel::{Stopped, TimerService};
    /// use std::future::poll_fn;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let mut every = timers.interval(Duration::from_millis(5));
    /// let first = futures_executor::block_on(poll_fn(|cx| every.try_poll_tick(cx)));
    /// assert!(first.is_ok(), "the first tick is due at once");
    /// timers.stop()?;
    /// let after = futures_executor::block_on(poll_fn(|cx| every.try_poll_tick(cx)));
    /// assert_eq!(after, Err(Stopped::new()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Result<Instant, Stopped>> {
        self.poll_tick_with(cx, OnStop::Report)
    }

    /// The poll behind `try_poll_tick` (`OnStop::Report`) and `poll_tick`
    /// (`OnStop::Overflow`: the ticks go on, paced by the overflow timer, and it never
    /// returns `Err`).
    fn poll_tick_with(&mut self, cx: &mut Context<'_>, on_stop: OnStop) -> Poll<Result<Instant, Stopped>> {
        if self.now() < self.next {
            match Pin::new(&mut self.sleep).poll_with(cx, on_stop) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(stopped)) => return Poll::Ready(Err(stopped)),
                Poll::Ready(Ok(())) => {}
            }
        } else if on_stop == OnStop::Report && self.sleep.service().is_stopped() {
            // Due by the clock, but no timer is left for the ticks after it: a loop woken by
            // something else would otherwise tick on, unpaced by any timer.
            return Poll::Ready(Err(Stopped::new()));
        }
        let due = self.next;
        self.next = self.missed.next(due, self.period, self.now());
        self.sleep.reset(self.next);
        Poll::Ready(Ok(due))
    }

    /// How the interval catches up after ticks it could not keep; [`Missed::Skip`] by
    /// default. Takes effect from the next tick on.
    ///
    /// ```
    /// use shardwheel::{Missed, TimerService};
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let mut every = timers.interval(Duration::from_millis(5));
    /// every.set_missed(Missed::Burst);
    /// assert_eq!(every.missed(), Missed::Burst);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_missed(&mut self, missed: Missed) {
        self.missed = missed;
    }

    /// The policy for missed ticks.
    ///
    /// ```
    /// use shardwheel::{Missed, TimerService};
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// assert_eq!(timers.interval(Duration::from_secs(1)).missed(), Missed::Skip);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn missed(&self) -> Missed {
        self.missed
    }

    /// The period (after clamping to the service's tick).
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// assert_eq!(timers.interval(Duration::from_secs(1)).period(), Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Restarts the schedule: the next tick is due one period from now.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let mut every = timers.interval(Duration::from_millis(10));
    /// every.reset();
    /// let due = futures_executor::block_on(every.tick());
    /// assert!(due > Instant::now() - Duration::from_millis(10));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&mut self) {
        self.reset_at(saturating_add(self.now(), self.period));
    }

    /// Restarts the schedule: the next tick is due at once, the one after it a period later.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let mut every = timers.interval(Duration::from_secs(60));
    /// futures_executor::block_on(every.tick()); // the first tick, at once
    /// every.reset_immediately();
    /// let start = Instant::now();
    /// futures_executor::block_on(every.tick());
    /// assert!(start.elapsed() < Duration::from_secs(30));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset_immediately(&mut self) {
        self.reset_at(self.now());
    }

    /// Restarts the schedule: the next tick is due `after` from now.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let mut every = timers.interval(Duration::from_secs(60));
    /// every.reset_after(Duration::from_millis(10));
    /// let start = Instant::now();
    /// futures_executor::block_on(every.tick());
    /// assert!(start.elapsed() >= Duration::from_millis(10), "never early");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset_after(&mut self, after: Duration) {
        self.reset_at(saturating_add(self.now(), after));
    }

    /// Restarts the schedule: the next tick is due at `at` (never before it), then one every
    /// period from there.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let mut every = timers.interval(Duration::from_secs(60));
    /// let at = Instant::now() + Duration::from_millis(10);
    /// every.reset_at(at);
    /// assert_eq!(futures_executor::block_on(every.tick()), at);
    /// assert!(Instant::now() >= at);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset_at(&mut self, at: Instant) {
        self.next = at;
        self.sleep.reset(self.next);
    }

    /// The service clock's now (the real one, or a paused `TestClock`'s).
    fn now(&self) -> Instant {
        self.sleep.service().clock().now()
    }
}

impl fmt::Debug for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interval")
            .field("next", &self.next)
            .field("period", &self.period)
            .field("missed", &self.missed)
            .finish_non_exhaustive()
    }
}
