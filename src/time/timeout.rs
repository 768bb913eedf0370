//! [`Timeout`], [`timeout`] and [`timeout_at`]: `tokio::time`'s, on the default service.

use super::error::Elapsed;
use super::{Instant, Sleep, sleep, sleep_until};
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Runs `future` with a deadline `duration` from now, as `tokio::time::timeout`:
/// `Ok(output)` if it finishes first, `Err(Elapsed)` once the deadline has come (never
/// before). The deadline counts from this call (one clock read), not from the first poll.
///
/// Lazy: the deadline registers with a shard only if the future is still pending on the
/// first poll. A future ready at once (most of a server's reads and writes) costs a clock
/// read and nothing else: no timer, no atomic read-modify-write.
///
/// ```
/// use shardwheel::time::{self, Duration};
///
/// # futures_executor::block_on(async {
/// assert_eq!(time::timeout(Duration::from_secs(1), async { 7 }).await, Ok(7));
/// let never = std::future::pending::<()>();
/// assert!(time::timeout(Duration::from_millis(5), never).await.is_err());
/// # });
/// ```
///
/// # Panics
///
/// As [`Sleep`]'s poll (only on one of the default service's own shard threads); a panic of `future` unwinds into the awaiting task, as if it were
/// awaited directly.
#[inline]
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    Timeout { value: future.into_future(), delay: sleep(duration) }
}

/// Runs `future` with a deadline at `deadline`, as `tokio::time::timeout_at`. Reads no
/// clock.
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures_executor::block_on(async {
/// let deadline = Instant::now() + Duration::from_millis(5);
/// let outcome = time::timeout_at(deadline, std::future::pending::<()>()).await;
/// assert!(outcome.is_err() && Instant::now() >= deadline);
/// # });
/// ```
#[inline]
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    Timeout { value: future.into_future(), delay: sleep_until(deadline) }
}

/// The future of [`timeout`] and [`timeout_at`], as `tokio::time::Timeout`.
#[must_use = "futures do nothing unless polled"]
pub struct Timeout<F> {
    value: F,
    delay: Sleep,
}

impl<F> Timeout<F> {
    /// The future it runs.
    pub fn get_ref(&self) -> &F {
        &self.value
    }

    /// The future it runs.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.value
    }

    /// The future, without its deadline (which goes with the `Timeout`: one
    /// compare-and-swap if it had registered).
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    ///
    /// let limited = time::timeout(Duration::from_secs(1), async { 3 });
    /// assert_eq!(futures_executor::block_on(limited.into_inner()), 3);
    /// ```
    pub fn into_inner(self) -> F {
        self.value
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    /// The future first, so one ready at its deadline wins; then the deadline.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning of `value` only: it is never moved out of a pinned
        // `Timeout` (`into_inner` takes `self` by value, which needs `Unpin` to get out of a
        // `Pin`; `get_mut` takes `&mut self`, the same), and `Timeout` has no `Drop` impl
        // that could move it. `delay` is `Unpin` and not treated as pinned.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: see above: `value` stays where it is for as long as `self` is pinned.
        let value = unsafe { Pin::new_unchecked(&mut this.value) };
        if let Poll::Ready(output) = value.poll(cx) {
            // Done: a registration goes now rather than with the `Timeout` (it would count as
            // pending and wake the task for nothing); an unregistered delay is left alone.
            this.delay.disarm();
            return Poll::Ready(Ok(output));
        }
        match Pin::new(&mut this.delay).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed::new())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout").field("delay", &self.delay).finish_non_exhaustive()
    }
}
