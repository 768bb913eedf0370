//! tokio's timer driver, two ways.
//!
//! - [`TokioSleepPeer`]: what a user thread does with tokio's timers directly. Arm = a boxed
//!   `tokio::time::sleep`, polled once with `Waker::noop()` so it registers with the driver
//!   (tokio registers a `Sleep` on its first poll, not when it is created); cancel = drop it,
//!   which deregisters it (under the driver's lock); reset = `Sleep::reset`. The closure is
//!   dropped, never boxed: with tokio, what happens on timeout is code in the task that owns
//!   the `Sleep`, not an allocation, so charging tokio for a boxed closure would be unfair.
//!   With a no-op waker nothing would run it anyway, so this peer is not used where
//!   timeouts must fire.
//! - [`TokioTaskPeer`]: a spawned task that sleeps, then runs the closure: how tokio code
//!   really gets "run this later". Used where timeouts must fire (expiry) and for memory.
//!
//! Both on a multi-thread runtime with one worker per core (tokio's default).

use super::Peer;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::time::Sleep;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_time().build().expect("a tokio runtime")
}

/// Polls once, with a waker that does nothing: registers the timer.
fn poll_once(sleep: Pin<&mut Sleep>) -> Poll<()> {
    sleep.poll(&mut Context::from_waker(Waker::noop()))
}

/// A boxed `Sleep`, registered, and the task that goes with it.
#[derive(Debug)]
pub struct TokioSleepPeer {
    rt: Runtime,
}

pub struct SleepHandle {
    sleep: Pin<Box<Sleep>>,
}

impl TokioSleepPeer {
    pub fn new() -> TokioSleepPeer {
        TokioSleepPeer { rt: runtime() }
    }

    fn registered(mut sleep: Pin<Box<Sleep>>) -> SleepHandle {
        let _ = poll_once(sleep.as_mut());
        SleepHandle { sleep }
    }

    /// Its tasks never run (no-op waker), so check the timer itself: it elapses, not early;
    /// a dropped one is gone; a reset one waits for its new deadline.
    pub fn self_check(&self) {
        self.enter(|| {
            let armed = Instant::now();
            let mut h = self.arm(Duration::from_millis(5), || {});
            assert!(poll_once(h.sleep.as_mut()).is_pending(), "tokio: a 5 ms sleep elapsed at once");
            let t = Instant::now();
            while poll_once(h.sleep.as_mut()).is_pending() {
                assert!(t.elapsed() < Duration::from_secs(10), "tokio: a 5 ms sleep never elapsed");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(armed.elapsed() >= Duration::from_millis(5), "tokio: elapsed early");
            let h = self.arm(Duration::from_secs(30), || {});
            assert!(self.cancel(h), "tokio: cancel of a pending sleep returned false");
            let mut h = self.arm(Duration::from_millis(10), || {});
            assert!(self.reset(&mut h, Duration::from_secs(30), || {}));
            std::thread::sleep(Duration::from_millis(50));
            assert!(poll_once(h.sleep.as_mut()).is_pending(), "tokio: a sleep reset to 30 s elapsed");
        });
    }
}

impl Peer for TokioSleepPeer {
    type Handle = SleepHandle;

    fn name(&self) -> &'static str {
        "tokio"
    }

    fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.rt.enter();
        f()
    }

    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, _task: F) -> SleepHandle {
        Self::registered(Box::pin(tokio::time::sleep(delay)))
    }

    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, _task: F) -> SleepHandle {
        Self::registered(Box::pin(tokio::time::sleep_until(deadline.into())))
    }

    fn cancel(&self, handle: SleepHandle) -> bool {
        let pending = !handle.sleep.is_elapsed();
        drop(handle); // deregisters
        pending
    }

    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut SleepHandle, delay: Duration, _fresh: F) -> bool {
        if handle.sleep.is_elapsed() {
            return false;
        }
        handle.sleep.as_mut().reset(tokio::time::Instant::now() + delay);
        true
    }

    fn reset_kind(&self) -> &'static str {
        "Sleep::reset"
    }
}

/// A spawned task per timeout: `sleep_until(deadline).await; task()`. Cancel = abort.
#[derive(Debug)]
pub struct TokioTaskPeer {
    rt: Runtime,
    /// Tasks that have polled their sleep once (registered it with the driver).
    registered: Arc<AtomicUsize>,
    spawned: AtomicUsize,
}

impl TokioTaskPeer {
    pub fn new() -> TokioTaskPeer {
        TokioTaskPeer { rt: runtime(), registered: Arc::new(AtomicUsize::new(0)), spawned: AtomicUsize::new(0) }
    }

    fn spawn<F: FnOnce() + Send + 'static>(
        &self,
        deadline: tokio::time::Instant,
        task: F,
    ) -> tokio::task::JoinHandle<()> {
        self.spawned.fetch_add(1, Ordering::Relaxed);
        let registered = self.registered.clone();
        self.rt.spawn(async move {
            let mut sleep = std::pin::pin!(tokio::time::sleep_until(deadline));
            let mut first = true;
            poll_fn(|cx| {
                let r = sleep.as_mut().poll(cx);
                if first {
                    first = false;
                    registered.fetch_add(1, Ordering::Relaxed);
                }
                r
            })
            .await;
            task()
        })
    }
}

impl Peer for TokioTaskPeer {
    type Handle = tokio::task::JoinHandle<()>;

    fn name(&self) -> &'static str {
        "tokio (task + sleep)"
    }

    fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.rt.enter();
        f()
    }

    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Self::Handle {
        self.spawn(tokio::time::Instant::now() + delay, task)
    }

    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, task: F) -> Self::Handle {
        self.spawn(deadline.into(), task)
    }

    fn cancel(&self, handle: Self::Handle) -> bool {
        let pending = !handle.is_finished();
        handle.abort();
        pending
    }

    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Self::Handle, delay: Duration, fresh: F) -> bool {
        if handle.is_finished() {
            return false;
        }
        handle.abort();
        *handle = self.arm(delay, fresh);
        true
    }

    fn reset_kind(&self) -> &'static str {
        "abort + spawn again"
    }

    /// Until every spawned task has registered its sleep.
    fn settle(&self) {
        let t = Instant::now();
        while self.registered.load(Ordering::Relaxed) < self.spawned.load(Ordering::Relaxed)
            && t.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
