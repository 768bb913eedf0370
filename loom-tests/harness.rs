//! What every loom model shares: a probe task that counts what happens to it, a one-shard
//! service on the mocked clock, and the exactly-once check.
#![allow(dead_code)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use shardwheel::{TimerService, TimerTask, Unfired};
use std::sync::atomic::AtomicUsize as StdAtomicUsize;
use std::time::Duration;

/// The service's tick in every model.
pub const TICK: Duration = Duration::from_millis(1);

/// What happened to one probe task.
#[derive(Default)]
pub struct Counts {
    pub runs: AtomicUsize,
    pub cancels: AtomicUsize,
    pub drops: AtomicUsize,
    /// Mocked time, in ticks, at which the task ran.
    pub ran_at: AtomicU64,
}

impl Counts {
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
    pub fn cancels(&self) -> usize {
        self.cancels.load(Ordering::SeqCst)
    }
    pub fn drops(&self) -> usize {
        self.drops.load(Ordering::SeqCst)
    }
    pub fn ran_at(&self) -> u64 {
        self.ran_at.load(Ordering::SeqCst)
    }
}

/// A task that records its fate in shared `Counts`.
pub struct Probe(pub Arc<Counts>);

impl Probe {
    pub fn new() -> (Probe, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        (Probe(counts.clone()), counts)
    }
}

impl TimerTask for Probe {
    fn run(self: Box<Self>) {
        let now = shardwheel::loom_support::now().as_millis() as u64;
        self.0.ran_at.store(now, Ordering::SeqCst);
        self.0.runs.fetch_add(1, Ordering::SeqCst);
    }
    fn cancelled(self: Box<Self>) {
        self.0.cancels.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// A one-shard service with a 1 ms tick on the mocked clock.
pub fn service() -> TimerService {
    TimerService::builder().shards(1).tick(TICK).build().expect("valid settings")
}

/// Runs `f` as a loom model and prints how many interleavings it explored.
pub fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(StdAtomicUsize::new(0));
    let counter = runs.clone();
    loom::model(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        shardwheel::loom_support::reset_clock();
        f();
    });
    println!("loom model {name}: {} interleavings", runs.load(std::sync::atomic::Ordering::SeqCst));
}

/// Drops the tasks `stop` handed back (without running them); returns how many.
pub fn drop_unfired(unfired: Vec<Unfired>) -> usize {
    let n = unfired.len();
    for u in unfired {
        assert!(u.timeout().is_cancelled(), "stop hands back cancelled timeouts");
        drop(u.into_task());
    }
    n
}

/// The timeout ended exactly once, and its task was dropped exactly once.
pub fn assert_exactly_once(counts: &Counts, cancelled: usize, unfired: usize) {
    let (runs, cancels) = (counts.runs(), counts.cancels());
    assert_eq!(runs + cancelled + unfired, 1, "runs {runs}, cancel() true {cancelled}, unfired {unfired}");
    assert_eq!(cancels, cancelled, "cancelled() runs once per winning cancel()");
    assert_eq!(counts.drops(), 1, "the task is dropped exactly once");
}

/// Waits, yielding to the other threads, until the task has run. If the shard is never
/// woken, this spins until loom gives up on the model: a lost wake-up fails the test.
pub fn wait_for_run(counts: &Counts) {
    while counts.runs() == 0 {
        loom::thread::yield_now();
    }
}

/// A waker that counts its wake-ups (the sleep and overflow models'). Its clones are counted
/// by its `Arc`: once every clone the service took is gone, the strong count is back to one.
pub struct Flag {
    wakes: AtomicUsize,
}

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

pub fn flag() -> std::sync::Arc<Flag> {
    std::sync::Arc::new(Flag { wakes: AtomicUsize::new(0) })
}

pub fn woken(flag: &std::sync::Arc<Flag>) -> usize {
    flag.wakes.load(Ordering::SeqCst)
}

/// Polls `sleep` once with `flag`'s waker.
pub fn poll(sleep: &mut shardwheel::Sleep, flag: &std::sync::Arc<Flag>) -> std::task::Poll<()> {
    use std::future::Future;
    let waker = std::task::Waker::from(flag.clone());
    std::pin::Pin::new(sleep).poll(&mut std::task::Context::from_waker(&waker))
}
