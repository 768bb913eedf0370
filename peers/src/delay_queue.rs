//! `tokio_util::time::DelayQueue`: a single-threaded timer wheel a task owns and polls.
//!
//! It needs `&mut` for everything, so it only fits single-producer rows: the producer owns
//! the queue (a `RefCell` here, so it fits the `&self` trait; the borrow is a counter
//! check). It keeps one tokio `Sleep` for its earliest deadline, created with
//! `sleep_until`, so every call runs with the runtime entered ([`Peer::enter`]); after
//! setup it is polled once with a task context (as the task that owns it would), so that
//! `Sleep` is registered with tokio's driver as it is in real use, and inserts and removes
//! that change the earliest deadline pay for moving it, as they do in real use.
//! Expired entries are only produced when someone polls it: [`DelayQueuePeer::poll_once`].
//!
//! Its values are the boxed closures (`DelayQueue<Task>`), one allocation per insert besides
//! its slab, as for the heap and the Netty-style wheel. A user with a single kind of expiry
//! could store a plain payload (`DelayQueue<u64>`) and save that allocation.

use super::{Peer, Task};
use std::cell::RefCell;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

pub struct DelayQueuePeer {
    // Dropped before the runtime its `Sleep` belongs to.
    queue: RefCell<DelayQueue<Task>>,
    rt: Runtime,
}

impl std::fmt::Debug for DelayQueuePeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayQueuePeer").field("entries", &self.queue.borrow().len()).finish()
    }
}

impl DelayQueuePeer {
    pub fn new() -> DelayQueuePeer {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_time().build().expect("a tokio runtime");
        let queue = {
            let _guard = rt.enter();
            RefCell::new(DelayQueue::new())
        };
        DelayQueuePeer { queue, rt }
    }

    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Polls the queue once with a no-op waker (inside `enter`): runs every expired task and
    /// registers its `Sleep` for the next deadline. Returns how many ran.
    pub fn poll_once(&self) -> usize {
        let mut cx = Context::from_waker(Waker::noop());
        let mut ran = 0;
        loop {
            let polled = self.queue.borrow_mut().poll_expired(&mut cx);
            match polled {
                Poll::Ready(Some(expired)) => {
                    (expired.into_inner())();
                    ran += 1;
                }
                Poll::Ready(None) | Poll::Pending => return ran,
            }
        }
    }

    /// The queue itself, to move into a task that polls it (expiry).
    pub fn take_queue(&self) -> DelayQueue<Task> {
        let _guard = self.rt.enter();
        self.queue.replace(DelayQueue::new())
    }

    pub fn put_queue(&self, queue: DelayQueue<Task>) {
        drop(self.queue.replace(queue));
    }

    /// `DelayQueue::reset_at` to `deadline`, an instant the caller computed.
    pub fn reset_at(&self, key: &Key, deadline: tokio::time::Instant) -> bool {
        self.queue.borrow_mut().reset_at(key, deadline);
        true
    }

    /// Its tasks run only when it is polled: poll it until they do.
    pub fn self_check(&self) {
        self.enter(|| {
            let ran = std::rc::Rc::new(std::cell::Cell::new(None));
            let armed = Instant::now();
            let (tx, rx) = std::sync::mpsc::channel();
            let _k = self.arm(Duration::from_millis(5), move || tx.send(Instant::now()).unwrap());
            let t = Instant::now();
            while ran.get().is_none() {
                self.poll_once();
                if let Ok(at) = rx.try_recv() {
                    ran.set(Some(at));
                }
                assert!(t.elapsed() < Duration::from_secs(10), "DelayQueue: a 5 ms entry never expired");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(ran.get().unwrap() >= armed + Duration::from_millis(5), "DelayQueue: expired early");
            let k = self.arm(Duration::from_secs(30), || {});
            assert!(self.cancel(k), "DelayQueue: removing a pending entry failed");
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let mut k = self.arm(Duration::from_millis(10), move || tx.send(()).unwrap());
            assert!(self.reset(&mut k, Duration::from_secs(30), || {}));
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(self.poll_once(), 0, "DelayQueue: an entry reset to 30 s expired");
            assert!(rx.try_recv().is_err());
            assert!(self.cancel(k));
            assert!(self.queue.borrow().is_empty());
        });
    }
}

impl Peer for DelayQueuePeer {
    type Handle = Key;

    fn name(&self) -> &'static str {
        "DelayQueue"
    }

    fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.rt.enter();
        f()
    }

    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Key {
        self.queue.borrow_mut().insert(Box::new(task), delay)
    }

    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, task: F) -> Key {
        self.queue.borrow_mut().insert_at(Box::new(task), deadline.into())
    }

    fn cancel(&self, handle: Key) -> bool {
        self.queue.borrow_mut().try_remove(&handle).is_some()
    }

    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Key, delay: Duration, _fresh: F) -> bool {
        self.queue.borrow_mut().reset(handle, delay);
        true
    }

    fn reset_kind(&self) -> &'static str {
        "DelayQueue::reset / reset_at"
    }

    fn diagnostics(&self) -> String {
        format!("entries {}", self.queue.borrow().len())
    }

    /// Registers the queue's `Sleep`, as its owning task's first poll would.
    fn settle(&self) {
        self.enter(|| self.poll_once());
    }
}
