//! hyper's timer on shardwheel (the `hyper` feature): [`TimerService`] implements
//! [`hyper::rt::Timer`], and [`Sleep`] is a [`hyper::rt::Sleep`].
//!
//! hyper asks its timer for boxed sleeps (`Pin<Box<dyn hyper::rt::Sleep>>`): each is a
//! [`Sleep`] in a box, so a hyper timeout costs that box and the sleep's one cell, and
//! registers only when hyper first polls it. hyper's `reset` finds the sleep in the box
//! again and moves its deadline ([`Sleep::reset`]: one compare-and-swap for a later
//! deadline) instead of boxing a new one.
//!
//! hyper's `Timer` has no way to say "no", and needs none: a sleep whose shards all refuse
//! it (full: `max_pending_per_shard`, or a wheel near its limit of 2³² timeouts; or the
//! service stopping or stopped) waits on the overflow timer and completes at its deadline, as
//! any [`Sleep`] does (its "Full, stopping, stopped"), so a connection's timeouts keep time
//! and its task never panics for it. `Stats::overflowed` counts them.

use crate::future::Sleep;
use crate::service::TimerService;
use std::pin::Pin;
use std::time::{Duration, Instant};

#[cfg_attr(docsrs, doc(cfg(feature = "hyper")))]
impl hyper::rt::Sleep for Sleep {}

/// hyper's timeouts (`header_read_timeout`, keep-alive, ...) on the service's shards.
///
/// ```
/// use shardwheel::TimerService;
/// use std::time::Duration;
///
/// let timers = TimerService::new()?;
/// let mut http1 = hyper::server::conn::http1::Builder::new();
/// http1.timer(timers.clone()).header_read_timeout(Duration::from_secs(5));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "hyper")))]
impl hyper::rt::Timer for TimerService {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(TimerService::sleep(self, duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(TimerService::sleep_until(self, deadline))
    }

    /// The service's clock, so that hyper's deadlines are on the timeline its sleeps use (a
    /// paused one's, under a `TestClock`).
    fn now(&self) -> Instant {
        self.clock().now()
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Sleep>() {
            Some(ours) => Pin::into_inner(ours).reset(new_deadline),
            // Another timer's sleep: replace it.
            None => *sleep = Box::pin(TimerService::sleep_until(self, new_deadline)),
        }
    }
}
