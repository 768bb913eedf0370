//! A Netty `HashedWheelTimer` architecture, written to be a fair peer: the same structure,
//! no deliberate slowness.
//!
//! As `io.netty.util.HashedWheelTimer` (4.1):
//! - One global wheel of 512 buckets, 1 ms tick, each timeout filed at
//!   `deadline_tick & mask` with `remaining_rounds = (deadline_tick - tick) / 512`.
//! - One worker thread that wakes on **every** tick (sleeping until the next tick's time,
//!   as `waitForNextTick`), and per tick: `processCancelledTasks` (unlinks every cancelled
//!   timeout), `transferTimeoutsToBuckets` (at most 100 000 new timeouts from the arm
//!   queue), then `expireTimeouts` on the tick's bucket: every entry there is visited; one
//!   with no rounds left fires, a cancelled one is unlinked, the others lose a round.
//! - `newTimeout`: bumps the shared `pendingTimeouts` counter (an `AtomicLong` in Netty,
//!   written by every producer and by the worker), computes the deadline from one clock
//!   read, allocates the timeout and pushes it on one MPSC queue (`SegQueue` here; JCTools'
//!   MPSC queue in Netty).
//! - `cancel`: one CAS `INIT → CANCELLED` on the timeout's state (`HashedWheelTimeout`),
//!   then a push on the cancelled-timeouts queue; the worker unlinks it at its next tick.
//!   Expiry is the CAS `INIT → EXPIRED`; exactly one of the two wins.
//!
//! Where this is kinder than Netty (so the comparison flatters the peer, not this crate):
//! - A bucket is a `Vec` of `(timeout, remaining rounds)` with swap-remove and the entry's
//!   position kept in the timeout, instead of a doubly linked list: the same O(1) unlink,
//!   and the rounds are read without chasing a pointer.
//! - The worker sleeps exactly until the next tick, where Netty rounds up to whole
//!   milliseconds (`Thread.sleep(ms)`).
//! - The winning cancel drops the task at once (no garbage collector to wait for).
//! - Timeouts in the arm queue that were cancelled before the worker filed them are
//!   skipped, as in Netty.

use super::{Peer, Task};
use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const INIT: u8 = 0;
const CANCELLED: u8 = 1;
const EXPIRED: u8 = 2;

/// "Not in a bucket" (in the arm queue, or unlinked).
const NOWHERE: u64 = u64::MAX;
/// Netty's `transferTimeoutsToBuckets` takes at most this many per tick.
const TRANSFER_PER_TICK: usize = 100_000;

/// Netty's `HashedWheelTimeout`.
pub struct NettyTimeout {
    state: AtomicU8,
    /// Nanoseconds since the timer started.
    deadline: u64,
    /// `bucket << 32 | index` while filed in a bucket, else [`NOWHERE`]. Only the worker
    /// reads or writes it (an atomic so that this stays safe code; `Relaxed`).
    slot: AtomicU64,
    task: UnsafeCell<Option<Task>>,
}

impl std::fmt::Debug for NettyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NettyTimeout")
            .field("state", &self.state)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

// SAFETY: `task` is written before the timeout is shared and taken only by the thread whose
// CAS moved `state` out of INIT, which happens once; `Task` is `Send`. The rest are atomics.
unsafe impl Sync for NettyTimeout {}

impl NettyTimeout {
    /// INIT → `to`; on success the task, now this thread's alone.
    fn finish(&self, to: u8) -> Option<Task> {
        self.state.compare_exchange(INIT, to, Ordering::AcqRel, Ordering::Acquire).ok()?;
        // SAFETY: this thread won the only transition out of INIT, so no other thread
        // touches `task` again; the CAS's Acquire pairs with the Release of the queue push
        // that published the timeout.
        unsafe { (*self.task.get()).take() }
    }

    fn is_cancelled(&self) -> bool {
        self.state.load(Ordering::Acquire) == CANCELLED
    }
}

struct Shared {
    start: Instant,
    tick_ns: u64,
    timeouts: SegQueue<Arc<NettyTimeout>>,
    cancelled: SegQueue<Arc<NettyTimeout>>,
    pending: CachePadded<AtomicI64>,
    shutdown: AtomicBool,
    /// Ticks the worker has run (each one a wake-up).
    ticks: AtomicU64,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

/// The timer: what `HashedWheelTimer` is.
pub struct NettyPeer {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for NettyPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NettyPeer").field("pending", &self.pending()).field("ticks", &self.ticks()).finish()
    }
}

impl NettyPeer {
    /// 512 buckets, 1 ms tick: Netty's defaults are 512 and 100 ms; 1 ms is the resolution
    /// the other peers have.
    pub fn new() -> NettyPeer {
        NettyPeer::with(Duration::from_millis(1), 512)
    }

    pub fn with(tick: Duration, buckets: usize) -> NettyPeer {
        assert!(buckets.is_power_of_two());
        let shared = Arc::new(Shared {
            start: Instant::now(),
            tick_ns: tick.as_nanos() as u64,
            timeouts: SegQueue::new(),
            cancelled: SegQueue::new(),
            pending: CachePadded::new(AtomicI64::new(0)),
            shutdown: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
        });
        let worker = Worker {
            shared: shared.clone(),
            wheel: (0..buckets).map(|_| Vec::new()).collect(),
            mask: buckets as u64 - 1,
            tick: 0,
        };
        let worker = std::thread::Builder::new()
            .name("netty-wheel".into())
            .spawn(move || worker.run())
            .expect("spawn the wheel's worker");
        NettyPeer { shared, worker: Some(worker) }
    }

    /// `pendingTimeouts`.
    pub fn pending(&self) -> i64 {
        self.shared.pending.load(Ordering::Relaxed)
    }

    /// Ticks (wake-ups) so far.
    pub fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }

    /// `newTimeout`.
    pub fn new_timeout(&self, deadline_ns: u64, task: Task) -> Arc<NettyTimeout> {
        self.shared.pending.fetch_add(1, Ordering::Relaxed);
        let timeout = Arc::new(NettyTimeout {
            state: AtomicU8::new(INIT),
            deadline: deadline_ns,
            slot: AtomicU64::new(NOWHERE),
            task: UnsafeCell::new(Some(task)),
        });
        self.shared.timeouts.push(timeout.clone());
        timeout
    }

    /// `HashedWheelTimeout.cancel`.
    pub fn cancel_timeout(&self, timeout: &Arc<NettyTimeout>) -> bool {
        let Some(task) = timeout.finish(CANCELLED) else {
            return false;
        };
        self.shared.cancelled.push(timeout.clone());
        drop(task);
        true
    }
}

impl Drop for NettyPeer {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Relaxed);
        if let Some(worker) = self.worker.take() {
            // The worker parks for up to a tick: wake it, so that a long tick (the
            // simulator allows an hour) does not hold the drop for that long.
            worker.thread().unpark();
            let _ = worker.join();
        }
    }
}

struct Slot {
    timeout: Arc<NettyTimeout>,
    rounds: i64,
}

/// The worker's own state: the wheel and the tick.
struct Worker {
    shared: Arc<Shared>,
    wheel: Box<[Vec<Slot>]>,
    mask: u64,
    tick: u64,
}

impl Worker {
    fn run(mut self) {
        while let Some(now) = self.wait_for_next_tick() {
            self.shared.ticks.fetch_add(1, Ordering::Relaxed);
            let idx = (self.tick & self.mask) as usize;
            self.process_cancelled();
            self.transfer_timeouts_to_buckets();
            self.expire_timeouts(idx, now);
            self.tick += 1;
        }
    }

    /// Sleeps until the end of the current tick; the time then (ns since start), or `None`
    /// once the timer is dropped.
    fn wait_for_next_tick(&self) -> Option<u64> {
        let deadline = self.shared.tick_ns * (self.tick + 1);
        loop {
            if self.shared.shutdown.load(Ordering::Relaxed) {
                return None;
            }
            let now = self.shared.now_ns();
            if now >= deadline {
                return Some(now);
            }
            // Parked rather than slept, so that the drop can wake it (`Drop for NettyPeer`);
            // a spurious wake-up just goes round the loop again.
            std::thread::park_timeout(Duration::from_nanos(deadline - now));
        }
    }

    fn process_cancelled(&mut self) {
        while let Some(timeout) = self.shared.cancelled.pop() {
            let slot = timeout.slot.load(Ordering::Relaxed);
            if slot == NOWHERE {
                // Still in the arm queue: the transfer will skip it.
                self.shared.pending.fetch_sub(1, Ordering::Relaxed);
            } else {
                self.remove((slot >> 32) as usize, (slot & 0xffff_ffff) as usize);
            }
        }
    }

    fn transfer_timeouts_to_buckets(&mut self) {
        for _ in 0..TRANSFER_PER_TICK {
            let Some(timeout) = self.shared.timeouts.pop() else {
                return;
            };
            if timeout.state.load(Ordering::Acquire) == CANCELLED {
                continue;
            }
            let calculated = timeout.deadline / self.shared.tick_ns;
            let rounds = (calculated.saturating_sub(self.tick) / (self.mask + 1)) as i64;
            // Never file into the past: a deadline already gone goes into this tick's bucket.
            let ticks = calculated.max(self.tick);
            let bucket = (ticks & self.mask) as usize;
            let list = &mut self.wheel[bucket];
            timeout.slot.store(((bucket as u64) << 32) | list.len() as u64, Ordering::Relaxed);
            list.push(Slot { timeout, rounds });
        }
    }

    /// `HashedWheelBucket.expireTimeouts`: visits every entry of the bucket.
    fn expire_timeouts(&mut self, bucket: usize, now: u64) {
        let mut i = 0;
        while i < self.wheel[bucket].len() {
            let slot = &mut self.wheel[bucket][i];
            if slot.rounds <= 0 {
                let slot = self.remove(bucket, i);
                assert!(slot.timeout.deadline <= now, "timeout.deadline > deadline");
                if let Some(task) = slot.timeout.finish(EXPIRED) {
                    let _ = catch_unwind(AssertUnwindSafe(task));
                }
            } else if slot.timeout.is_cancelled() {
                self.remove(bucket, i);
            } else {
                slot.rounds -= 1;
                i += 1;
            }
        }
    }

    /// Unlinks the entry at `bucket[i]` (O(1)); the pending count drops, as in Netty.
    fn remove(&mut self, bucket: usize, i: usize) -> Slot {
        let list = &mut self.wheel[bucket];
        let slot = list.swap_remove(i);
        if let Some(moved) = list.get(i) {
            moved.timeout.slot.store(((bucket as u64) << 32) | i as u64, Ordering::Relaxed);
        }
        slot.timeout.slot.store(NOWHERE, Ordering::Relaxed);
        self.shared.pending.fetch_sub(1, Ordering::Relaxed);
        slot
    }
}

impl Peer for NettyPeer {
    type Handle = Arc<NettyTimeout>;

    fn name(&self) -> &'static str {
        "netty-wheel"
    }

    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Self::Handle {
        let deadline = self.shared.now_ns().saturating_add(delay.as_nanos().min(u64::MAX as u128) as u64);
        self.new_timeout(deadline, Box::new(task))
    }

    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, task: F) -> Self::Handle {
        let deadline = deadline.saturating_duration_since(self.shared.start).as_nanos() as u64;
        self.new_timeout(deadline, Box::new(task))
    }

    fn cancel(&self, handle: Self::Handle) -> bool {
        self.cancel_timeout(&handle)
    }

    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Self::Handle, delay: Duration, fresh: F) -> bool {
        if !self.cancel_timeout(handle) {
            return false;
        }
        *handle = self.arm(delay, fresh);
        true
    }

    fn reset_kind(&self) -> &'static str {
        "cancel + newTimeout"
    }

    fn diagnostics(&self) -> String {
        format!(
            "worker ticks {}, pendingTimeouts {}, arm queue {}, cancel queue {}",
            self.ticks(),
            self.pending(),
            self.shared.timeouts.len(),
            self.shared.cancelled.len()
        )
    }

    /// Until the worker has filed every queued arm and unlinked every cancel.
    fn settle(&self) {
        let t = Instant::now();
        while !(self.shared.timeouts.is_empty() && self.shared.cancelled.is_empty())
            && t.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
