//! A `Mutex<BinaryHeap>` timer with one worker thread: what Java's
//! `ScheduledThreadPoolExecutor` (one core thread) does.
//!
//! - Arm: take the lock, push `(deadline, sequence number, entry)` (the sequence number
//!   keeps equal deadlines first-in first-out, as STPE's does), and wake the worker only if
//!   the new entry is the new earliest one and the worker waits (as the `DelayedWorkQueue`
//!   leader protocol and a `Condition` with no waiter do: no syscall otherwise).
//! - Cancel: as STPE by default (`setRemoveOnCancelPolicy(false)`): one CAS on the entry's
//!   state flag, no lock. The task is dropped at once (`FutureTask.cancel` drops its
//!   callable), but **the entry stays in the heap until its deadline**, when the worker pops
//!   it and skips it. A timeout armed and cancelled a million times leaves a million dead
//!   entries in the heap for their whole delay: the heap, and the cost of each push, grow.
//! - Worker: waits on a `Condvar` until the earliest deadline, pops what is due one at a
//!   time, and runs each task outside the lock.

use super::{Peer, Task};
use std::cell::UnsafeCell;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const PENDING: u8 = 0;
const CANCELLED: u8 = 1;
const EXPIRED: u8 = 2;

/// One timeout: its state flag and its task.
pub struct HeapTimeout {
    state: AtomicU8,
    task: UnsafeCell<Option<Task>>,
}

impl std::fmt::Debug for HeapTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapTimeout").field("state", &self.state).finish_non_exhaustive()
    }
}

// SAFETY: `task` is written before the entry is shared and taken only by the thread whose
// CAS moved `state` out of PENDING, which happens once; `Task` is `Send`.
unsafe impl Sync for HeapTimeout {}

impl HeapTimeout {
    /// PENDING → `to`; on success, the task (now this thread's alone).
    fn finish(&self, to: u8) -> Option<Task> {
        self.state.compare_exchange(PENDING, to, Ordering::AcqRel, Ordering::Acquire).ok()?;
        // SAFETY: this thread won the only transition out of PENDING, so no other thread
        // touches `task` again; the CAS's Acquire pairs with the Release that published it.
        unsafe { (*self.task.get()).take() }
    }
}

struct Item {
    at: Instant,
    seq: u64,
    timeout: Arc<HeapTimeout>,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest deadline must come out first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

struct State {
    heap: BinaryHeap<Item>,
    seq: u64,
    /// The worker waits on the condvar (so an earlier deadline must notify it).
    worker_waiting: bool,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    available: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The heap timer and its worker.
pub struct HeapPeer {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HeapPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapPeer").field("entries", &self.entries()).finish()
    }
}

impl HeapPeer {
    pub fn new() -> HeapPeer {
        let shared = Arc::new(Shared {
            state: Mutex::new(State { heap: BinaryHeap::new(), seq: 0, worker_waiting: false, shutdown: false }),
            available: Condvar::new(),
        });
        let worker = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("heap-timer".into())
                .spawn(move || work(&shared))
                .expect("spawn the heap timer's worker")
        };
        HeapPeer { shared, worker: Some(worker) }
    }

    /// Entries in the heap, dead (cancelled) ones included.
    pub fn entries(&self) -> usize {
        self.shared.lock().heap.len()
    }

    pub fn schedule_at(&self, at: Instant, task: Task) -> Arc<HeapTimeout> {
        let timeout = Arc::new(HeapTimeout { state: AtomicU8::new(PENDING), task: UnsafeCell::new(Some(task)) });
        let mut state = self.shared.lock();
        state.seq += 1;
        let seq = state.seq;
        state.heap.push(Item { at, seq, timeout: timeout.clone() });
        let wake = state.worker_waiting && state.heap.peek().is_some_and(|top| top.seq == seq);
        drop(state);
        if wake {
            self.shared.available.notify_one();
        }
        timeout
    }
}

fn work(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if state.shutdown {
            return;
        }
        let now = Instant::now();
        match state.heap.peek() {
            Some(top) if top.at <= now => {
                let item = state.heap.pop().expect("peeked");
                drop(state);
                if let Some(task) = item.timeout.finish(EXPIRED) {
                    let _ = catch_unwind(AssertUnwindSafe(task));
                }
                drop(item);
                state = shared.lock();
            }
            top => {
                let wait = top.map(|top| top.at - now);
                state.worker_waiting = true;
                state = match wait {
                    Some(wait) => shared.available.wait_timeout(state, wait).unwrap_or_else(|e| e.into_inner()).0,
                    None => shared.available.wait(state).unwrap_or_else(|e| e.into_inner()),
                };
                state.worker_waiting = false;
            }
        }
    }
}

impl Drop for HeapPeer {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.available.notify_one();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl Peer for HeapPeer {
    type Handle = Arc<HeapTimeout>;

    fn name(&self) -> &'static str {
        "Mutex<BinaryHeap>"
    }

    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Self::Handle {
        self.schedule_at(Instant::now() + delay, Box::new(task))
    }

    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, task: F) -> Self::Handle {
        self.schedule_at(deadline, Box::new(task))
    }

    fn cancel(&self, handle: Self::Handle) -> bool {
        handle.finish(CANCELLED).is_some()
    }

    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Self::Handle, delay: Duration, fresh: F) -> bool {
        if handle.finish(CANCELLED).is_none() {
            return false;
        }
        *handle = self.arm(delay, fresh);
        true
    }

    fn diagnostics(&self) -> String {
        format!("heap entries (dead ones included) {}", self.entries())
    }

    fn reset_kind(&self) -> &'static str {
        "cancel + arm again (dead entry stays)"
    }
}
