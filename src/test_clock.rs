//! [`TestClock`]: a paused clock that a test moves by hand.

use crate::clock::Clock;
use crate::service::{TimerService, WeakTimerService};
use crate::sync::plain::{Arc, AtomicU64, Ordering};
use std::fmt;
use std::time::{Duration, Instant};

/// The clock of a service built with
/// [`Builder::build_paused`](crate::Builder::build_paused): it stands still until
/// [`advance`](TestClock::advance) moves it, so that tests of timeouts, sleeps and intervals
/// run in no time and the same way every time (as `tokio::time::pause` and `advance`).
///
/// Everything the service does reads this clock: `schedule` and `sleep` count their delays
/// from its [`now`](TestClock::now), `Timeout::deadline` and `Sleep::deadline` are on its
/// timeline, and the shards fire by it. Deadlines given as an `Instant` (`schedule_at`,
/// `sleep_until`, `timeout_at`, `Interval::reset_at`) must be taken from
/// [`TestClock::now`], not `Instant::now()`, which goes on with real time.
///
/// ```
/// use shardwheel::TimerService;
/// use std::time::Duration;
///
/// let (timers, clock) = TimerService::builder().shards(1).build_paused()?;
/// let mut sleep = Box::pin(timers.sleep(Duration::from_secs(3600)));
/// let waker = std::task::Waker::noop();
/// let mut cx = std::task::Context::from_waker(waker);
/// assert!(sleep.as_mut().try_poll(&mut cx).is_pending());
/// clock.advance(Duration::from_secs(3600)); // an hour, at once
/// assert_eq!(sleep.as_mut().try_poll(&mut cx), std::task::Poll::Ready(Ok(())));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Limits
///
/// - The shards are still threads: a timeout fires on its shard's thread, and `advance`
///   returns once every shard has fired what is due and run those tasks (a `Sleep`'s
///   wake-up included), so that a test can look at the outcome right after it. Tasks handed
///   to a `Builder::offload` pool may still be running then; futures woken by the shard
///   still have to be polled by their executor. A task that blocks its shard blocks
///   `advance` too.
/// - Time moves only forward, and only by `advance`: a timeout never fires "a little late"
///   as it does on the real clock, but exactly at the first tick boundary at or after its
///   deadline.
/// - Real time still passes for everything else (`Instant::now()`, `std::thread::sleep`,
///   other libraries' timers).
/// - An embedded [`LocalWheel`](crate::LocalWheel) needs no such clock: its
///   `poll_expired(now)` and `arm_at(deadline, …)` take the instants the caller gives, so a
///   test drives it with instants of its own.
#[derive(Clone)]
pub struct TestClock {
    clock: Clock,
    /// Nanoseconds since the clock's start: the paused clock's time.
    time: Arc<AtomicU64>,
    service: WeakTimerService,
}

impl TestClock {
    pub(crate) fn new(clock: Clock, time: Arc<AtomicU64>, service: &TimerService) -> TestClock {
        TestClock { clock, time, service: service.downgrade() }
    }

    /// The clock's time now: where the service started, plus every [`advance`] since. Take
    /// `Instant` deadlines from here, not from `Instant::now()`.
    ///
    /// [`advance`]: TestClock::advance
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let (timers, clock) = TimerService::builder().shards(1).build_paused()?;
    /// let at = clock.now() + Duration::from_secs(30);
    /// let timeout = timers.schedule_at(at, || {})?;
    /// assert_eq!(timeout.deadline(), at, "a whole number of ticks from the start");
    /// std::thread::sleep(Duration::from_millis(2));
    /// assert_eq!(clock.now() + Duration::from_secs(30), at, "real time does not move it");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// How far the clock has been moved since the service was built. It stops at
    /// `u64::MAX` nanoseconds (about 584 years): an `advance` past that leaves it there.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let (_timers, clock) = TimerService::builder().shards(1).build_paused()?;
    /// assert_eq!(clock.elapsed(), Duration::ZERO);
    /// clock.advance(Duration::from_secs(2));
    /// clock.advance(Duration::from_millis(500));
    /// assert_eq!(clock.elapsed(), Duration::from_millis(2500));
    /// clock.advance(Duration::MAX);
    /// assert_eq!(clock.elapsed(), Duration::from_nanos(u64::MAX), "saturated, not wrapped");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.time.load(Ordering::Acquire))
    }

    /// Moves the clock `by` forward, then waits until every shard has fired what is due by
    /// the new time and run those tasks (see the limits above). A service already stopped
    /// or dropped only has its clock moved.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let (timers, clock) = TimerService::builder().build_paused()?;
    /// let start = clock.now();
    /// clock.advance(Duration::from_millis(1500));
    /// assert_eq!(clock.now() - start, Duration::from_millis(1500));
    /// assert_eq!(clock.elapsed(), Duration::from_millis(1500));
    /// # drop(timers);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Panics
    ///
    /// If called from a timer task running on one of the service's own shard threads, before
    /// the clock moves: `advance` waits for every shard to catch up, and that shard cannot
    /// while its task waits, so the call would hang (and every other `advance` behind it).
    /// Move the clock from the test's thread, or run such tasks on a pool
    /// (`Builder::offload`, with the `offload` feature), whose threads may call it.
    pub fn advance(&self, by: Duration) {
        let service = self.service.upgrade();
        if let Some(Ok(shard)) = service.as_ref().map(TimerService::route_or_home) {
            panic!(
                "TestClock::advance called from a timer task on shard {shard}'s own thread: it waits \
                 for every shard to fire what is due, and this one cannot while its task waits, so \
                 it would hang; advance the clock from the test's thread (or run the task on a \
                 Builder::offload pool)"
            );
        }
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // Release: pairs with the Acquire of `Clock::now`, so that what this thread did
        // before the move (its arms) is visible to whoever sees the new time.
        // A saturating add in a CAS loop: time stops at the end of the counter, never wraps.
        let _ = self.time.fetch_update(Ordering::Release, Ordering::Relaxed, |t| Some(t.saturating_add(by)));
        if let Some(service) = service {
            service.settle_paused();
        }
        // The sleeps no shard took (full, or the service stopped) wait on the overflow timer,
        // which keeps no paused clock's time: each looks at its own clock again (a stopped
        // service's too, which `settle_paused` no longer reaches).
        crate::future::overflow::timer().wake_paused();
    }
}

impl fmt::Debug for TestClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestClock").field("elapsed", &self.elapsed()).finish_non_exhaustive()
    }
}
