//! The cell pool, seen from outside: timeouts armed on threads that exit, freed on other
//! threads (the shards that fire them, a thread that cancels them, a handle dropped
//! elsewhere), each task dropped exactly once, and every page given back once the threads
//! are gone and their timeouts have ended.
//!
//! One test in this file on purpose: the counting allocator counts the whole process.

mod common;

use common::counting::{Counting, live};
use common::{DropCounter, DropToken, PATIENCE, wait_until};
use shardwheel::{TimerService, TimerTask};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Timeouts per thread, and threads per round.
const PER_THREAD: usize = 3_000;
const THREADS: usize = 4;

/// A task that only owns its drop token: what happens to it is seen in the counter.
struct Token(#[allow(dead_code)] DropToken);

impl TimerTask for Token {
    fn run(self: Box<Self>) {}
}

/// One round: `THREADS` threads each arm `PER_THREAD` timeouts (a box-sized task, pooled) and
/// exit; a third of them fire on the shards, a third are cancelled on another thread, a third
/// are dropped there with their handles and left to fire.
fn round(timers: &TimerService, drops: &DropCounter, first: usize) {
    let (tx, rx) = mpsc::channel();
    let makers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (timers, tx) = (timers.clone(), tx.clone());
            let tokens: Vec<_> = (0..PER_THREAD).map(|i| drops.token(first + t * PER_THREAD + i)).collect();
            thread::spawn(move || {
                for (i, token) in tokens.into_iter().enumerate() {
                    let delay = if i % 3 == 0 { Duration::from_millis(1) } else { Duration::from_millis(20) };
                    let timeout = timers.schedule(delay, Token(token)).unwrap();
                    tx.send((i % 3 == 1, timeout)).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    for maker in makers {
        maker.join().unwrap();
    }
    // The makers have exited: their pages are abandoned to the cells still live.
    for (cancel, timeout) in rx {
        if cancel {
            let _ = timeout.cancel();
        }
    }
}

#[test]
fn pooled_cells_end_once_and_their_pages_come_back_after_their_threads_exit() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    let total = 3 * THREADS * PER_THREAD;
    let drops = DropCounter::new(total);
    // Warm up what the process keeps (the allocator's own bookkeeping, the shards' buffers).
    // Each round ends before the next starts, so the shards' buffers need not grow again.
    let per_round = THREADS * PER_THREAD;
    round(&timers, &drops, 0);
    assert!(wait_until(|| drops.total() == per_round, PATIENCE), "the first round ends");
    thread::sleep(Duration::from_millis(50));
    let before = live();
    for r in 1..3 {
        round(&timers, &drops, r * per_round);
        let ended = (r + 1) * per_round;
        assert!(wait_until(|| drops.total() == ended, PATIENCE), "{} of {ended} tasks dropped", drops.total());
    }
    drops.assert_each_dropped_once();
    // A page is 256 KiB: one left behind would show (the shards' own buffers may still move
    // by a few KiB with the timing of a round).
    let settled = wait_until(|| live() - before < 128 * 1024, PATIENCE);
    let grown = live() - before;
    assert!(settled, "{grown} bytes still held after the threads exited and their timeouts ended");
    let stats = timers.stats();
    assert_eq!(stats.pending, 0);
    assert_eq!(stats.expired + stats.cancelled, total as u64);
    assert!(timers.stop().unwrap().is_empty());
}
