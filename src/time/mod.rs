//! `tokio::time`'s calls, ambient: [`sleep`], [`sleep_until`], [`timeout`], [`timeout_at`],
//! [`interval`] and [`interval_at`], with tokio's [`Instant`], [`Sleep`], [`Timeout`],
//! [`Interval`], [`MissedTickBehavior`] and [`error::Elapsed`], on a process-wide default
//! service: no handle to thread through a program's layers.
//!
//! Code written against `tokio::time` moves here by its `use` lines:
//!
//! ```
//! // use tokio::time::{self, Duration, Instant};
//! use shardwheel::time::{self, Duration, Instant};
//!
//! async fn read_with_deadline() -> Result<u32, time::error::Elapsed> {
//!     time::timeout(Duration::from_secs(5), async { 42 }).await
//! }
//!
//! # futures_executor::block_on(async {
//! assert_eq!(read_with_deadline().await, Ok(42));
//! let start = Instant::now();
//! time::sleep(Duration::from_millis(5)).await;
//! assert!(start.elapsed() >= Duration::from_millis(5));
//! # });
//! ```
//!
//! They work under any executor (tokio's runtimes of either flavour, smol,
//! `futures::executor`): the default service's shard threads fire the timers and wake the
//! tasks, so nothing depends on a runtime's timer driver.
//!
//! # The default service
//!
//! The first ambient call starts it: [`TimerService::new`](crate::TimerService::new)'s
//! shape, a shard per core, each pinned. [`configure`] sets it up otherwise, once, before
//! that first call; after it, `configure` says [`AlreadyStarted`](error::ConfigureError).
//! It is never stopped, so a future of it never meets a stopped service: it lives until the
//! process exits. A program that wants a service of its own, to stop and to take its
//! timeouts back, builds a [`TimerService`](crate::TimerService) and uses its methods.
//!
//! # Cost
//!
//! The futures hold the default service by a `&'static` reference, never by a handle clone:
//! a `sleep` or `timeout` made and then dropped, or completed before its first `Pending`
//! poll, reads the clock once and touches no memory another thread writes (no reference
//! count, no shard). Registration, on the first pending poll, is one arm on the polling
//! thread's stage; a drop after it, one compare-and-swap.
//!
//! # Where it differs from tokio
//!
//! - The futures are `Unpin`; tokio's `Sleep` is not (pinned code works unchanged).
//! - A sleep made outside a runtime works (tokio's panics: it needs its runtime's timer).
//! - A timer completes at the first tick boundary at or after its deadline (the default
//!   tick is a millisecond, as tokio's resolution), on a shard thread: never early.

mod default;
pub mod error;
mod instant;
mod interval;
mod paused;
mod sleep;
mod timeout;

#[cfg(all(test, not(loom)))]
mod tests;

pub use instant::Instant;
pub use interval::{Interval, MissedTickBehavior, interval, interval_at};
pub use sleep::{Sleep, sleep, sleep_until};
pub use std::time::Duration;
pub use timeout::{Timeout, timeout, timeout_at};

use crate::builder::Builder;
use crate::stats::Stats;

/// Sets up the default service from `builder`, before its first use; an error says why not
/// (it has started already, or the builder's settings are refused), and the default service
/// is then as it was.
///
/// ```
/// use shardwheel::{time, TimerService};
///
/// // At the top of `main`, before any ambient call:
/// let configured = time::configure(TimerService::builder().shards(2).pin_threads(false));
/// # let _ = configured; // in a doc test another test may have started it first
/// ```
pub fn configure(builder: Builder) -> Result<(), error::ConfigureError> {
    default::configure(builder)
}

/// Pauses the calling thread's clock for the ambient calls, as `tokio::time::pause`: from
/// now on its `Instant::now()` stands still, moved only by [`advance`] (and by auto-advance,
/// below), and its `sleep`, `timeout` and `interval` run on that clock, on a service of the
/// thread's own. Other threads are not affected: tests running in parallel each pause their
/// own (the tasks of a current-thread runtime, as `#[tokio::test]` builds, run on the test's
/// thread; a future made on another thread, or before the pause, stays on its own clock).
/// Already paused: nothing changes; resumed: the clock stands still again where it is.
///
/// Auto-advance, on unless [`auto_advance`] turns it off (as tokio's, which cannot be): once
/// the thread is blocked (its runtime parked, or `block_on` waiting) and has made no ambient
/// call for a millisecond, with a sleep of the clock registered, the clock moves to the
/// earliest such deadline. So a test that awaits a one-hour sleep finishes at once, and
/// never sees a timer fire early.
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures_executor::block_on(async {
/// time::pause();
/// let start = Instant::now();
/// time::sleep(Duration::from_secs(3600)).await; // auto-advanced: at once
/// assert_eq!(start.elapsed(), Duration::from_secs(3600));
/// time::advance(Duration::from_secs(5)).await;
/// assert_eq!(start.elapsed(), Duration::from_secs(3605));
/// # time::resume();
/// # });
/// ```
///
/// # Panics
///
/// If the paused clock's service cannot start (the system refused a thread).
pub fn pause() {
    paused::pause();
}

/// Lets the paused clock run again, as `tokio::time::resume`: from where it stands, with real
/// time (a thread of the scope moves it each millisecond), so `Instant::now()` never goes
/// back and the futures made while paused come due as on the real clock. Not paused:
/// nothing changes.
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures_executor::block_on(async {
/// time::pause();
/// time::advance(Duration::from_secs(60)).await;
/// let before = Instant::now();
/// let sleep = time::sleep(Duration::from_millis(5));
/// time::resume();
/// sleep.await; // on the resumed clock: 5 ms of real time
/// assert!(Instant::now() >= before + Duration::from_millis(5));
/// # });
/// ```
pub fn resume() {
    paused::resume();
}

/// Moves the calling thread's paused clock `duration` forward, as `tokio::time::advance`,
/// and returns once the tasks whose timers came due have been woken and (under a
/// current-thread runtime, or the same `block_on`) polled: it wakes them on this thread, then
/// yields once.
///
/// # Panics
///
/// If the thread has not [paused](pause) its clock, as tokio's.
pub async fn advance(duration: Duration) {
    let scope =
        paused::current().expect("shardwheel::time::advance: time is not paused on this thread (time::pause() first)");
    scope.advance(duration);
    YieldOnce(false).await;
}

/// Turns the paused clock's auto-advance on or off, on the calling thread (see [`pause`]).
/// Not paused: nothing changes.
pub fn auto_advance(on: bool) {
    if let Some(scope) = paused::current() {
        scope.set_auto(on);
    }
}

/// Returns `Pending` once, waking its task: the tasks woken before it run first.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// The default service's counts, summed over its shards (all zero if it has not started;
/// this does not start it).
///
/// ```
/// use shardwheel::time::{self, Duration};
///
/// # futures_executor::block_on(async {
/// time::sleep(Duration::from_millis(1)).await;
/// let stats = time::stats();
/// assert!(stats.scheduled >= 1 && stats.expired >= 1);
/// # });
/// ```
#[must_use]
pub fn stats() -> Stats {
    default::started().map(|s| s.stats()).unwrap_or_default()
}
