//! [`WithTimeout`]: a future raced against a [`Sleep`].

use crate::error::{Elapsed, Stopped};
use crate::future::Sleep;
use crate::future::sleep::OnStop;
use crate::service::TimerService;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A future with a deadline; made by [`TimerService::timeout`]. Completes with the future's
/// output, or with [`Elapsed`] if the deadline comes first (the future is then dropped with
/// the `WithTimeout`).
///
/// The deadline is fixed when the `WithTimeout` is made (`timeout` counts `delay` from its
/// call, as tokio's `timeout` does), not when it is first polled: one made with 5 s and first
/// polled 2 s later has 3 s left. What waits for the first poll is only the registration
/// with a shard (one arm), so a `WithTimeout` that is never polled costs no timer.
///
/// The future is polled first, so one that is ready at its deadline wins. It is polled on
/// the awaiting task, as if awaited directly: a panic inside it unwinds into that task, never
/// into a shard.
///
/// ```
/// use shardwheel::TimerService;
/// use std::time::{Duration, Instant};
///
/// let timers = TimerService::new()?;
/// let quick = async { 7 };
/// assert_eq!(futures_executor::block_on(timers.timeout(Duration::from_secs(5), quick)), Ok(7));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct WithTimeout<F> {
    future: F,
    sleep: Sleep,
}

impl TimerService {
    /// Runs `future` with a deadline `delay` from now: `Ok(output)` if it finishes first,
    /// `Err(Elapsed)` otherwise (never before the deadline).
    ///
    /// The clock starts here, at the call: the deadline is `delay` after this call (the
    /// clock is read once, now), however long the `WithTimeout` waits for its first poll, as
    /// with tokio's `timeout`. The first poll registers the deadline with a shard; it is
    /// cancelled (one compare-and-swap) when the future finishes first or the `WithTimeout`
    /// is dropped.
    ///
    /// ```
    /// use shardwheel::{Elapsed, TimerService};
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let slow = timers.sleep(Duration::from_secs(60));
    /// let outcome = futures_executor::block_on(timers.timeout(Duration::from_millis(10), slow));
    /// assert_eq!(outcome, Err(Elapsed::new()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// The deadline counts from the call, not from the first poll (on a paused clock, so
    /// that the figures are exact):
    ///
    /// ```
    /// use shardwheel::{Elapsed, TimerService};
    /// use std::time::Duration;
    ///
    /// let (timers, clock) = TimerService::builder().shards(1).build_paused()?;
    /// let made = clock.now();
    /// let mut limited = timers.timeout(Duration::from_secs(5), std::future::pending::<()>());
    /// assert_eq!(limited.sleep_mut().deadline(), made + Duration::from_secs(5));
    /// clock.advance(Duration::from_secs(5)); // not polled yet
    /// // Its first poll, 5 s after the call: already elapsed, at once.
    /// assert_eq!(futures_executor::block_on(limited), Err(Elapsed::new()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn timeout<F: Future>(&self, delay: Duration, future: F) -> WithTimeout<F> {
        WithTimeout { future, sleep: self.sleep(delay) }
    }

    /// Runs `future` with a deadline at `deadline`: `Ok(output)` if it finishes first,
    /// `Err(Elapsed)` otherwise (never before `deadline`). Reads no clock.
    ///
    /// ```
    /// use shardwheel::{Elapsed, TimerService};
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let deadline = Instant::now() + Duration::from_millis(10);
    /// let outcome = futures_executor::block_on(timers.timeout_at(deadline, std::future::pending::<()>()));
    /// assert_eq!(outcome, Err(Elapsed::new()));
    /// assert!(Instant::now() >= deadline);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn timeout_at<F: Future>(&self, deadline: Instant, future: F) -> WithTimeout<F> {
        WithTimeout { future, sleep: self.sleep_until(deadline) }
    }
}

impl<F> WithTimeout<F> {
    /// The future, without its deadline (which is cancelled).
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let limited = timers.timeout(Duration::from_secs(1), async { 3 });
    /// assert_eq!(futures_executor::block_on(limited.into_inner()), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_inner(self) -> F {
        self.future
    }

    /// The deadline's sleep: its [`deadline`](Sleep::deadline), or a
    /// [`reset`](Sleep::reset) to move it.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let mut limited = timers.timeout(Duration::from_secs(1), async { 3 });
    /// limited.sleep_mut().reset(Instant::now() + Duration::from_secs(2));
    /// assert!(limited.sleep_mut().deadline() > Instant::now() + Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sleep_mut(&mut self) -> &mut Sleep {
        &mut self.sleep
    }
}

impl<F: Future> WithTimeout<F> {
    /// Polls, and says so if the service stops first: `Ok(Ok(output))`,
    /// `Ok(Err(Elapsed))` once the deadline has come, or `Err(Stopped)` if the service was
    /// stopped before it (see [`Stopped`]) while the future was still running.
    ///
    /// ```
    /// use shardwheel::{Stopped, TimerService};
    /// use std::future::poll_fn;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let mut limited = Box::pin(timers.timeout(Duration::from_secs(60), std::future::pending::<()>()));
    /// timers.stop()?;
    /// assert_eq!(futures_executor::block_on(poll_fn(|cx| limited.as_mut().try_poll(cx))), Err(Stopped::new()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Result<F::Output, Elapsed>, Stopped>> {
        self.poll_with(cx, OnStop::Report)
    }

    /// The poll behind `try_poll` (`OnStop::Report`) and `Future::poll` (`OnStop::Overflow`,
    /// which never returns `Err`).
    fn poll_with(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        on_stop: OnStop,
    ) -> Poll<Result<Result<F::Output, Elapsed>, Stopped>> {
        // SAFETY: structural pinning of `future` only: it is never moved out of a pinned
        // `WithTimeout` (`into_inner` takes `self` by value, which needs `Unpin` to get out
        // of a `Pin`), and `WithTimeout` has no `Drop` impl that could move it. `sleep` is
        // `Unpin` and not treated as pinned.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: see above: `future` stays where it is for as long as `self` is pinned.
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        if let Poll::Ready(output) = future.poll(cx) {
            // Done: the deadline's registration goes now, not when the `WithTimeout` is
            // dropped (it would count as pending and wake the task for nothing).
            this.sleep.disarm();
            return Poll::Ready(Ok(Ok(output)));
        }
        match Pin::new(&mut this.sleep).poll_with(cx, on_stop) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(Err(Elapsed::new()))),
            Poll::Ready(Err(stopped)) => Poll::Ready(Err(stopped)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F: Future> Future for WithTimeout<F> {
    type Output = Result<F::Output, Elapsed>;

    /// Never panics for a full or stopped service: the deadline then waits on the overflow
    /// timer, so the future still has until its deadline, and `Elapsed` comes no earlier
    /// (see [`Sleep`]'s "Full, stopping, stopped").
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.poll_with(cx, OnStop::Overflow) {
            Poll::Ready(Ok(outcome)) => Poll::Ready(outcome),
            Poll::Ready(Err(_)) => unreachable!("`OnStop::Overflow` never reports a stop"),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for WithTimeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithTimeout").field("sleep", &self.sleep).finish_non_exhaustive()
    }
}
