//! Helpers shared by the integration tests: a drop counter that proves each task is dropped
//! exactly once, a poller with a deadline, and a task that reports through a channel.
//!
//! Each test file includes this with `mod common;` and uses only part of it.
#![allow(dead_code)]

pub mod counting;

use shardwheel::TimerTask;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::task::Wake;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// How long a test waits for something that should happen "soon" before it gives up. Long,
/// because the test machine is small and shared; a passing test never waits this long.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Waits (`PATIENCE` at most) until `timers` has no timeout pending and the cell pool holds
/// its spare pages and nothing else, every cell freed once the shards have let go of the
/// cancelled ones; panics, naming `what`, if it does not. Returns the spare pages.
pub fn settle_cell_pool(timers: &shardwheel::TimerService, what: &str) -> usize {
    let settled = wait_until(
        || {
            let (blocks, spare) = shardwheel::__cell_pool_pages();
            timers.stats().pending == 0 && blocks == spare
        },
        PATIENCE,
    );
    let (blocks, spare) = shardwheel::__cell_pool_pages();
    assert!(settled, "{what}: the pool holds {blocks} pages, {spare} of them spare, with no cell live");
    spare
}

/// Polls `cond` every millisecond until it holds (`true`) or `timeout` passes (`false`).
pub fn wait_until(mut cond: impl FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return cond();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One counter per task id; each [`DropToken`] bumps its id's counter when dropped.
#[derive(Clone, Debug)]
pub struct DropCounter {
    slots: Arc<[AtomicUsize]>,
}

/// Owned by a task; dropping it records the drop. Not `Clone`: one token, one drop.
#[derive(Debug)]
pub struct DropToken {
    slots: Arc<[AtomicUsize]>,
    id: usize,
}

impl Drop for DropToken {
    fn drop(&mut self) {
        self.slots[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

impl DropCounter {
    pub fn new(n: usize) -> DropCounter {
        DropCounter { slots: (0..n).map(|_| AtomicUsize::new(0)).collect() }
    }

    pub fn token(&self, id: usize) -> DropToken {
        DropToken { slots: self.slots.clone(), id }
    }

    pub fn count(&self, id: usize) -> usize {
        self.slots[id].load(Ordering::SeqCst)
    }

    /// Drops recorded over all ids.
    pub fn total(&self) -> usize {
        self.slots.iter().map(|s| s.load(Ordering::SeqCst)).sum()
    }

    /// Panics unless every id was dropped exactly once.
    pub fn assert_each_dropped_once(&self) {
        for (id, slot) in self.slots.iter().enumerate() {
            let n = slot.load(Ordering::SeqCst);
            assert_eq!(n, 1, "task {id} was dropped {n} times, expected exactly once");
        }
    }
}

/// What a [`ChanTask`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Ran,
    Cancelled,
}

/// One report from a [`ChanTask`]: which task, what happened, when and on which thread.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: usize,
    pub kind: Kind,
    pub at: Instant,
    pub thread: ThreadId,
    pub thread_name: Option<String>,
}

/// A task that sends an [`Event`] when it runs or is told it was cancelled, and optionally
/// owns a [`DropToken`].
#[derive(Debug)]
pub struct ChanTask {
    pub id: usize,
    tx: Sender<Event>,
    token: Option<DropToken>,
}

impl ChanTask {
    pub fn new(id: usize, tx: &Sender<Event>) -> ChanTask {
        ChanTask { id, tx: tx.clone(), token: None }
    }

    pub fn with_token(id: usize, tx: &Sender<Event>, token: DropToken) -> ChanTask {
        ChanTask { id, tx: tx.clone(), token: Some(token) }
    }

    fn report(&self, kind: Kind) {
        let at = Instant::now();
        let thread = std::thread::current();
        // The receiver may be gone once a test has what it needs; that is not an error.
        let _ = self.tx.send(Event {
            id: self.id,
            kind,
            at,
            thread: thread.id(),
            thread_name: thread.name().map(String::from),
        });
    }
}

impl TimerTask for ChanTask {
    fn run(self: Box<Self>) {
        self.report(Kind::Ran);
    }

    fn cancelled(self: Box<Self>) {
        self.report(Kind::Cancelled);
    }
}

/// Receives the next event, failing the test if none comes within [`PATIENCE`].
pub fn next_event(rx: &Receiver<Event>) -> Event {
    rx.recv_timeout(PATIENCE).expect("no event within the patience limit")
}

/// Receives exactly `n` events (within [`PATIENCE`] in all), in arrival order.
pub fn events(rx: &Receiver<Event>, n: usize) -> Vec<Event> {
    let deadline = Instant::now() + PATIENCE;
    (0..n)
        .map(|i| {
            let left = deadline.saturating_duration_since(Instant::now());
            rx.recv_timeout(left).unwrap_or_else(|e| panic!("only {i} of {n} events arrived: {e}"))
        })
        .collect()
}

/// A small seeded xorshift64* generator, so tests need no extra dependency and a failure
/// can be replayed from its seed.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A waker that counts its wake-ups (`Waker::from(Arc<WakeCount>)`).
#[derive(Debug, Default)]
pub struct WakeCount(AtomicUsize);

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl WakeCount {
    /// Wake-ups so far.
    pub fn woken(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}
