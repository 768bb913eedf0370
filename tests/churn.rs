//! Thread churn: a thread-per-connection server, or a pool that retires its threads, makes
//! and ends threads without bound. Each thread's stages (its arms' first stop) must go with
//! it, so that memory stays flat, a new thread's first schedule stays as fast as the first
//! thread's, and the shard's turns do not slow down.
//!
//! One test in this file on purpose: the counting allocator counts the whole process.

mod common;

use common::counting::{Counting, live};
use common::{PATIENCE, wait_until};
use shardwheel::TimerService;
use std::thread;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Threads per batch; batches run one after the other.
const BATCH: usize = 8;

/// `threads` threads, `BATCH` at a time, each arming two 30 s timeouts, cancelling them and
/// exiting. Returns each thread's first-schedule time.
fn churn(timers: &TimerService, threads: usize) -> Vec<Duration> {
    let mut firsts = Vec::with_capacity(threads);
    for _ in 0..threads / BATCH {
        let batch: Vec<_> = (0..BATCH)
            .map(|_| {
                let timers = timers.clone();
                thread::spawn(move || {
                    let t0 = Instant::now();
                    let a = timers.schedule(Duration::from_secs(30), || {}).unwrap();
                    let first = t0.elapsed();
                    let b = timers.schedule(Duration::from_secs(30), || {}).unwrap();
                    assert!(a.cancel() && b.cancel());
                    first
                })
            })
            .collect();
        firsts.extend(batch.into_iter().map(|h| h.join().unwrap()));
    }
    firsts
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn exited_threads_leave_no_memory_and_no_slowdown_behind() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    // Warm up what the process keeps once threads have come and gone (the allocator's and
    // the standard library's own bookkeeping), and take the baseline.
    let early = median(churn(&timers, 2_000));
    thread::sleep(Duration::from_millis(50));
    let before = live();
    let threads = if cfg!(debug_assertions) { 20_000 } else { 100_000 };
    let late = median(churn(&timers, threads));
    // The shards take and forget the exited threads' stages on their next turn. The cell
    // pool keeps up to four empty 256 KiB pages process-wide for new threads
    // (`src/entry/pool/page.rs`, `spare`): whether one of them was held at `before` or is
    // held now depends on which thread's page emptied last, so one spare page is allowed on
    // top of the 16 KiB; anything per thread left behind (a few bytes × 100 000) is far more.
    const SPARE_PAGE: i64 = 256 * 1024;
    let settled = wait_until(|| live() - before < SPARE_PAGE + 16 * 1024, PATIENCE);
    let grown = live() - before;
    eprintln!(
        "{threads} threads came and went: {grown} bytes still held; median first schedule {late:?} (after 2,000 threads: {early:?})"
    );
    assert!(settled, "{grown} bytes still held after {threads} threads came and went");
    let stats = timers.stats();
    assert_eq!(stats.pending, 0);
    assert_eq!(stats.cancelled, 2 * (2_000 + threads as u64));
    // The first schedule on a new thread makes one stage, whatever came before: no
    // registration scans the threads that came before it.
    assert!(
        late <= early * 4 + Duration::from_micros(50),
        "first schedule on a new thread: {late:?} after {threads} threads, {early:?} at first"
    );
    // The shards still answer at once: a timeout due now fires promptly.
    let (tx, rx) = std::sync::mpsc::channel();
    let armed = Instant::now();
    timers.schedule(Duration::from_millis(1), move || tx.send(Instant::now()).unwrap()).unwrap();
    let fired = rx.recv_timeout(PATIENCE).expect("fires");
    assert!(fired - armed < Duration::from_millis(500), "fired {:?} after arming", fired - armed);
    assert!(timers.stop().unwrap().is_empty());
}
