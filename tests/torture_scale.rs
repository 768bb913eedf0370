//! Torture at scale: 8 threads, over two million random arms, resets and cancels across all
//! shards, one run ending with a `stop()` in the middle of the storm. Every timeout must
//! end exactly once, and every count must add up.
//!
//! Ignored by default (it wants a release build); CI runs it:
//! `cargo test --release --test torture_scale -- --ignored`.

use shardwheel::{ScheduleError, Timeout, TimerService, TimerTask};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const THREADS: usize = 8;
const OPS_PER_THREAD: usize = 280_000;
/// Each producer keeps this many live handles to reset and cancel.
const HELD: usize = 512;

/// Per-timeout fate bits.
const RAN: u8 = 1;
const CANCELLED_CB: u8 = 2;

struct Ledger {
    fate: Vec<AtomicU8>,
    drops: Vec<AtomicU8>,
}

impl Ledger {
    fn new(n: usize) -> Ledger {
        Ledger { fate: (0..n).map(|_| AtomicU8::new(0)).collect(), drops: (0..n).map(|_| AtomicU8::new(0)).collect() }
    }
}

struct Task {
    id: usize,
    ledger: Arc<Ledger>,
}

impl TimerTask for Task {
    fn run(self: Box<Self>) {
        self.ledger.fate[self.id].fetch_or(RAN, Ordering::SeqCst);
    }
    fn cancelled(self: Box<Self>) {
        self.ledger.fate[self.id].fetch_or(CANCELLED_CB, Ordering::SeqCst);
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        self.ledger.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

/// xorshift64*: deterministic per thread, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default)]
struct Tally {
    scheduled: AtomicU64,
    shutdown: AtomicU64,
    cancel_true: AtomicU64,
    resets_true: AtomicU64,
    ops: AtomicU64,
}

fn producer(t: usize, timers: TimerService, ledger: Arc<Ledger>, tally: Arc<Tally>, stop_seen: Arc<AtomicBool>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t as u64 + 1) * 0x1234_5678));
    let mut held: Vec<Timeout> = Vec::with_capacity(HELD);
    let first_id = t * OPS_PER_THREAD;
    for op in 0..OPS_PER_THREAD {
        tally.ops.fetch_add(1, Ordering::Relaxed);
        let roll = rng.below(10);
        if roll < 5 || held.is_empty() {
            // Arm: delays from "now" to 40 ms, on the home shard or a random one.
            let id = first_id + op;
            let task = Task { id, ledger: ledger.clone() };
            let delay = Duration::from_micros(rng.below(40_000));
            let result = if rng.below(2) == 0 {
                timers.schedule(delay, task)
            } else {
                timers.schedule_on(rng.below(timers.shard_count() as u64) as usize, delay, task)
            };
            match result {
                Ok(timeout) => {
                    tally.scheduled.fetch_add(1, Ordering::Relaxed);
                    if held.len() < HELD {
                        held.push(timeout);
                    } else {
                        held[rng.below(HELD as u64) as usize] = timeout;
                    }
                }
                Err(ScheduleError::Shutdown(task)) => {
                    assert!(stop_seen.load(Ordering::SeqCst), "Shutdown before stop was called");
                    tally.shutdown.fetch_add(1, Ordering::Relaxed);
                    drop(task);
                }
                Err(e) => panic!("unexpected schedule error: {e}"),
            }
        } else if roll < 8 {
            let timeout = &held[rng.below(held.len() as u64) as usize];
            let delay = Duration::from_micros(rng.below(40_000));
            if timeout.reset(delay) {
                tally.resets_true.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let i = rng.below(held.len() as u64) as usize;
            if held.swap_remove(i).cancel() {
                tally.cancel_true.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// One storm; with `stop_midway`, `stop()` lands while the producers are still going.
fn storm(stop_midway: bool) {
    let timers = TimerService::builder().shards(4).build().unwrap();
    let ledger = Arc::new(Ledger::new(THREADS * OPS_PER_THREAD));
    let tally = Arc::new(Tally::default());
    let stop_seen = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (timers, ledger, tally, stop_seen) = (timers.clone(), ledger.clone(), tally.clone(), stop_seen.clone());
            thread::spawn(move || producer(t, timers, ledger, tally, stop_seen))
        })
        .collect();
    let mut unfired = Vec::new();
    if stop_midway {
        while tally.ops.load(Ordering::Relaxed) < (THREADS * OPS_PER_THREAD / 2) as u64 {
            thread::sleep(Duration::from_millis(1));
        }
        stop_seen.store(true, Ordering::SeqCst);
        unfired = timers.stop().unwrap();
    }
    for h in handles {
        h.join().unwrap();
    }
    if !stop_midway {
        // Let everything due fire (deadlines are at most 40 ms out, resets included).
        let deadline = Instant::now() + Duration::from_secs(30);
        while timers.pending() > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(timers.pending(), 0, "timeouts still pending long after their deadlines");
        unfired = timers.stop().unwrap();
    }
    let stats = timers.stats();
    let returned = unfired.len() as u64;
    for u in unfired {
        assert!(u.timeout().is_cancelled());
        u.into_task().cancelled();
    }
    let (mut ran, mut cb) = (0u64, 0u64);
    for (id, fate) in ledger.fate.iter().enumerate() {
        let fate = fate.load(Ordering::SeqCst);
        assert!(fate != RAN | CANCELLED_CB, "timeout {id} both ran and was cancelled");
        ran += u64::from(fate & RAN != 0);
        cb += u64::from(fate & CANCELLED_CB != 0);
        assert!(ledger.drops[id].load(Ordering::SeqCst) <= 1, "task {id} dropped twice");
    }
    let scheduled = tally.scheduled.load(Ordering::SeqCst);
    let cancel_true = tally.cancel_true.load(Ordering::SeqCst);
    let shutdown = tally.shutdown.load(Ordering::SeqCst);
    let dropped: u64 = ledger.drops.iter().map(|d| u64::from(d.load(Ordering::SeqCst))).sum();
    assert_eq!(ran + cancel_true + returned, scheduled, "every scheduled timeout ends exactly once");
    assert_eq!(cb, cancel_true + returned, "cancelled() once per winning cancel and per unfired task");
    assert_eq!(dropped, scheduled + shutdown, "every task is dropped exactly once");
    assert_eq!(stats.scheduled, scheduled);
    assert_eq!(stats.expired, ran);
    assert_eq!(stats.cancelled, cancel_true);
    assert_eq!(stats.unfired, returned);
    assert_eq!(stats.pending, 0);
    assert_eq!(stats.panicked, 0);
    if stop_midway {
        assert!(shutdown > 0, "the stop landed after every producer had finished; the race was not exercised");
    }
    println!(
        "storm (stop midway: {stop_midway}): {} ops in {:?}: scheduled {scheduled}, fired {ran}, \
         cancelled {cancel_true}, unfired {returned}, refused by shutdown {shutdown}, resets {}",
        tally.ops.load(Ordering::SeqCst),
        started.elapsed(),
        tally.resets_true.load(Ordering::SeqCst),
    );
}

#[test]
#[ignore = "2+ million operations: run in release, as CI does"]
fn storm_then_drain() {
    storm(false);
}

#[test]
#[ignore = "2+ million operations: run in release, as CI does"]
fn storm_with_stop_in_the_middle() {
    storm(true);
}
