//! [`Sleep`], [`sleep`] and [`sleep_until`]: `tokio::time`'s, on the default service.

use super::{Instant, default, paused};
use crate::future;
use crate::service::TimerService;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// tokio's far future (`Instant::far_future`): thirty years.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// Waits until `duration` has passed, as `tokio::time::sleep`: the deadline is counted from
/// this call (one clock read), and the sleep registers with a shard only when first polled,
/// so one dropped or never awaited costs no timer. It completes at the first tick boundary of
/// the default service at or after the deadline, never before.
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures_executor::block_on(async {
/// let start = Instant::now();
/// time::sleep(Duration::from_millis(10)).await;
/// assert!(start.elapsed() >= Duration::from_millis(10), "never early");
/// # });
/// ```
///
/// A duration whose deadline is past 292 years from the service's start waits thirty years
/// instead, as tokio's does past the platform's last instant: never in practice, yet a paused
/// clock gets there.
///
/// # Panics
///
/// As [`Sleep`]'s poll: only on one of the default service's own shard threads.
#[inline]
pub fn sleep(duration: Duration) -> Sleep {
    let service = default::service();
    // One clock read (the TSC estimate where there is one: never behind `Instant::now()`),
    // and the deadline and its tick in integer nanoseconds from the clock's start.
    let (at, tick) = service.clock().deadline_after_exact(duration, FAR_FUTURE);
    Sleep { inner: future::Sleep::on(service, tick, i64::try_from(at).unwrap_or(i64::MAX)) }
}

/// Waits until `deadline`, as `tokio::time::sleep_until`. Reads no clock; a deadline
/// already past completes by the next tick boundary.
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures_executor::block_on(async {
/// let deadline = Instant::now() + Duration::from_millis(10);
/// time::sleep_until(deadline).await;
/// assert!(Instant::now() >= deadline);
/// # });
/// ```
///
/// # Panics
///
/// As [`Sleep`]'s poll: only on one of the default service's own shard threads.
#[inline]
pub fn sleep_until(deadline: Instant) -> Sleep {
    on(default::service(), deadline)
}

#[inline]
fn on(service: &'static TimerService, deadline: Instant) -> Sleep {
    let clock = service.clock();
    let tick = clock.deadline_at(deadline.into_std());
    Sleep { inner: future::Sleep::on(service, tick, clock.offset_of(deadline.into_std())) }
}

/// The future of [`sleep`] and [`sleep_until`], as `tokio::time::Sleep`: one timeout of the
/// default service whose task is the waker, registered on the first poll and cancelled (one
/// compare-and-swap) when dropped.
///
/// It holds the default service by a `&'static` reference, so a sleep made and dropped, or
/// completed, before it registers does no atomic read-modify-write at all. It is 24 bytes
/// (that reference, the deadline as asked, and one word for its phase and cell): a tokio
/// task awaiting it is no bigger than one awaiting `pending()`. Unlike tokio's,
/// it is `Unpin`: no `pin!` is needed to poll it by `&mut` (pinned code works the same).
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures_executor::block_on(async {
/// let sleep = time::sleep(Duration::from_secs(60));
/// tokio::pin!(sleep);
/// let sooner = Instant::now() + Duration::from_millis(5);
/// sleep.as_mut().reset(sooner); // as tokio's: through `Pin<&mut Sleep>`
/// sleep.await;
/// assert!(Instant::now() >= sooner);
/// # });
/// ```
///
/// A default service whose shards are all full (configured with
/// [`max_pending_per_shard`](crate::Builder::max_pending_per_shard) at that many, or each
/// wheel near its limit of 2³² timeouts) does not make it panic, as tokio's `Sleep` does at
/// its timer's capacity: it waits on the overflow timer and completes at its deadline (see
/// [`crate::Sleep`]'s "Full, stopping, stopped"). The default service is never stopped.
///
/// # Panics
///
/// Only polled from a task on one of the default service's own shard threads (only that
/// thread could wake it).
#[must_use = "futures do nothing unless polled"]
pub struct Sleep {
    /// It keeps the deadline as asked (the wheel's is rounded up to its tick), in
    /// nanoseconds from the service clock's start (`Clock::offset_of`): 8 bytes, where an
    /// `Instant` takes 16.
    inner: future::Sleep<&'static TimerService>,
}

impl Sleep {
    /// The deadline, as asked (the sleep completes at the first tick boundary at or after
    /// it).
    ///
    /// ```
    /// use shardwheel::time::{self, Duration, Instant};
    ///
    /// let at = Instant::now() + Duration::from_secs(1);
    /// assert_eq!(time::sleep_until(at).deadline(), at);
    /// ```
    #[must_use]
    pub fn deadline(&self) -> Instant {
        Instant::from_std(self.inner.service().clock().at_offset(self.inner.at()))
    }

    /// Whether the deadline has come and the shard has fired the sleep (even if it has not
    /// been polled since); `false` before the first poll.
    #[must_use]
    pub fn is_elapsed(&self) -> bool {
        self.inner.is_elapsed()
    }

    /// Moves the deadline to `deadline`, as tokio's. A registered sleep still pending keeps
    /// its cell (a later deadline is one compare-and-swap); one that has completed waits
    /// again, and registers on its next poll.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration, Instant};
    ///
    /// # futures_executor::block_on(async {
    /// let mut sleep = time::sleep(Duration::from_millis(1));
    /// (&mut sleep).await;
    /// let again = Instant::now() + Duration::from_millis(5);
    /// std::pin::Pin::new(&mut sleep).reset(again);
    /// assert!(!sleep.is_elapsed());
    /// sleep.await;
    /// assert!(Instant::now() >= again);
    /// # });
    /// ```
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        Pin::into_inner(self).inner.reset(deadline.into_std());
    }

    /// Now on the clock of the service this sleep waits on (the default's real clock, or a
    /// paused scope's): an [`Interval`](super::Interval) judges its lateness by it.
    pub(super) fn clock_now(&self) -> Instant {
        Instant::from_std(self.inner.service().clock().now())
    }

    /// Lets go of the registration (see `future::Sleep::disarm`): for a [`Timeout`] whose
    /// future won.
    ///
    /// [`Timeout`]: super::Timeout
    #[inline]
    pub(super) fn disarm(&mut self) {
        self.inner.disarm();
    }
}

impl Future for Sleep {
    type Output = ();

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A sleep of the calling thread's paused scope goes through its relay (`paused.rs`).
        if let Some(scope) = paused::current() {
            if std::ptr::eq(scope.service(), self.inner.service()) {
                return scope.poll(&mut self.inner, cx);
            }
        }
        Pin::new(&mut self.inner).poll(cx)
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep").field("deadline", &self.deadline()).field("inner", &self.inner).finish()
    }
}
