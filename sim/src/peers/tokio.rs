//! tokio's timers as a peer (`--features compare`): `tokio::time::Sleep` on a multi-thread
//! runtime, driven the way a server outside the runtime would.
//!
//! - arm: `Box::pin(tokio::time::sleep(delay))`, polled once so that it registers with the
//!   runtime's timer driver. The waker it is polled with is the timeout's own [`Node`]
//!   (rather than a no-op), so that when the driver fires the entry, the task runs there and
//!   then, on the runtime thread that drives time, as shardwheel runs it on its shard thread;
//! - reset: `Sleep::reset` (a later deadline is a compare-and-swap in tokio too);
//! - cancel: drop the `Sleep`, which deregisters it;
//! - a request that never gets its response keeps its `Sleep` alive in a side list until
//!   the end, since dropping it would cancel it;
//! - stop: shut the runtime down. Its driver then wakes every entry still registered; those
//!   wakes find `stopping` set and hand the task back instead of running it.
//!
//! A [`Node`]'s state moves once out of Pending (to Fired, Cancelled or Unfired) by a
//! compare-and-swap; the winner alone takes the task, which is written at construction before
//! the node is shared.

use crate::scenario::Task;
use crate::timer::SimTimer;
use std::cell::UnsafeCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::{Instant, Sleep};

const PENDING: u8 = 0;
const FIRED: u8 = 1;
const CANCELLED: u8 = 2;
const UNFIRED: u8 = 3;

/// What every node shares.
struct Shared {
    /// Set before the runtime shuts down: wakes from then on are the shutdown's.
    stopping: AtomicBool,
    /// Tasks of timeouts the shutdown found pending.
    unfired: Mutex<Vec<Task>>,
    /// Handles of requests that never get a response (dropping them would cancel them).
    detached: Mutex<Vec<Handle>>,
}

/// One timeout: the waker its `Sleep` was polled with.
struct Node {
    state: AtomicU8,
    task: UnsafeCell<Option<Task>>,
    shared: &'static Shared,
}

// SAFETY: `task` is only touched by the one thread whose compare-and-swap moved `state` out of
// PENDING (which happens once); `Task` is `Send`; the other fields are `Sync`.
unsafe impl Sync for Node {}

impl Node {
    /// Moves the state from PENDING to `to`; the winner gets the task.
    fn finish(&self, to: u8) -> Option<Task> {
        // AcqRel: Acquire pairs with the node's publication (the task written before it was
        // shared); Release orders the take before anyone who later sees the final state.
        self.state
            .compare_exchange(PENDING, to, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            // SAFETY: this thread moved the state out of PENDING: it alone may touch `task`.
            .and_then(|_| unsafe { (*self.task.get()).take() })
    }
}

impl Wake for Node {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // SeqCst pairs with the store in `stop`: a wake after it is the shutdown's.
        if self.shared.stopping.load(Ordering::SeqCst) {
            if let Some(task) = self.finish(UNFIRED) {
                self.shared.unfired.lock().unwrap_or_else(|e| e.into_inner()).push(task);
            }
        } else if let Some(task) = self.finish(FIRED) {
            task.run();
        }
    }
}

/// The producer's handle: the registered `Sleep` and its node.
pub struct Handle {
    sleep: Pin<Box<Sleep>>,
    node: Arc<Node>,
}

/// tokio's timer driver on a multi-thread runtime.
pub struct TokioTimer {
    runtime: Option<Runtime>,
    handle: tokio::runtime::Handle,
    workers: usize,
    shared: &'static Shared,
}

impl std::fmt::Debug for TokioTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioTimer").field("workers", &self.workers).finish()
    }
}

impl TokioTimer {
    /// A multi-thread runtime with `workers` worker threads and the time driver.
    pub fn new(workers: usize) -> std::io::Result<TokioTimer> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("sim-tokio")
            .enable_time()
            .build()?;
        Ok(TokioTimer {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
            workers,
            shared: Box::leak(Box::new(Shared {
                stopping: AtomicBool::new(false),
                unfired: Mutex::new(Vec::new()),
                detached: Mutex::new(Vec::new()),
            })),
        })
    }
}

impl SimTimer for TokioTimer {
    type Handle = Handle;
    type Unfired = Task;

    fn name(&self) -> &'static str {
        "tokio"
    }

    fn describe(&self) -> String {
        format!(
            "tokio multi-thread runtime, {} workers: Box<Sleep> polled once (registers), Sleep::reset, dropped to \
             cancel; the task runs from the waker",
            self.workers
        )
    }

    fn lanes(&self) -> usize {
        1
    }

    fn producer_context<R>(&self, f: impl FnOnce() -> R) -> R {
        let _runtime = self.handle.enter();
        f()
    }

    fn arm(&self, _lane: usize, delay: Duration, task: Task) -> Option<Handle> {
        let node =
            Arc::new(Node { state: AtomicU8::new(PENDING), task: UnsafeCell::new(Some(task)), shared: self.shared });
        let mut sleep = Box::pin(tokio::time::sleep(delay));
        let waker = Waker::from(node.clone());
        if sleep.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
            // Already due (a zero delay): fire now, on this thread.
            waker.wake_by_ref();
        }
        Some(Handle { sleep, node })
    }

    fn reset(&self, handle: &mut Handle, delay: Duration, _fresh: impl FnOnce() -> Task) -> bool {
        if handle.node.state.load(Ordering::Acquire) != PENDING {
            return false;
        }
        handle.sleep.as_mut().reset(Instant::now() + delay);
        // A firing that raced with the reset has run the task: the reset lost.
        handle.node.state.load(Ordering::Acquire) == PENDING
    }

    fn cancel(&self, handle: Handle) -> bool {
        let won = handle.node.finish(CANCELLED).is_some();
        // Dropping the Sleep deregisters it from the driver (under the driver's lock).
        drop(handle);
        won
    }

    fn detach(&self, handle: Handle) {
        self.shared.detached.lock().unwrap_or_else(|e| e.into_inner()).push(handle);
    }

    fn pending(&self) -> Option<usize> {
        None
    }

    fn stop(&mut self) -> Vec<Task> {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(10));
        }
        // The driver is shut down: dropping the side list's sleeps deregisters nothing more.
        self.shared.detached.lock().unwrap_or_else(|e| e.into_inner()).clear();
        std::mem::take(&mut *self.shared.unfired.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
