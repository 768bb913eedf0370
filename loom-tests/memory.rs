#![cfg(loom)]
//! Entry memory (`src/entry.rs`): the handle, mailbox notices and the wheel each hold a
//! reference; whoever lets go last frees the entry, and the task is freed exactly once.
//! Loom's leak tracking fails the model if any `Arc` (the task's captured state, the shard)
//! outlives it.

#[path = "harness.rs"]
mod harness;

use harness::{Probe, assert_exactly_once, drop_unfired, model, service};
use std::time::Duration;

/// handle dropped ∥ expire ∥ cancel.
#[test]
fn drop_races_expire_and_cancel() {
    model("handle dropped ∥ expire ∥ cancel", || {
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::ZERO, task).unwrap();
        let t = timeout.clone();
        let canceller = loom::thread::spawn(move || t.cancel());
        drop(timeout);
        let cancelled = canceller.join().unwrap();
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&counts, cancelled as usize, unfired);
        drop(timers);
    });
}

/// A service dropped with a timeout still pending frees it without running it. The drop
/// only closes the mailbox (it never joins): the shard thread drops the task on its way
/// out, so the model waits for that (a lost close would make it spin for ever, which loom
/// reports).
#[test]
fn dropping_the_service_frees_pending_timeouts() {
    model("service dropped with a timeout pending", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::from_secs(10), task).unwrap();
        let t = timeout.clone();
        let canceller = loom::thread::spawn(move || t.cancel());
        drop(timers);
        let cancelled = canceller.join().unwrap();
        while counts.drops() == 0 {
            loom::thread::yield_now();
        }
        assert_eq!(counts.runs(), 0);
        assert_eq!(counts.drops(), 1, "the task is dropped exactly once");
        assert_eq!(counts.cancels(), cancelled as usize);
        drop(timeout);
    });
}

/// The biased count of a thread's shard handle (`src/shard/handle.rs`): a timeout's
/// reference to its shard is counted without atomics on the thread that made it, and
/// atomically elsewhere. Here the owner makes a timeout, clones it (a plain count), hands
/// the clone to another thread and drops its own (a plain count), and exits, which merges
/// its count ∥ the other thread drops the clone (an atomic count). Whichever
/// lets go last frees the handle, exactly once (`live_handles` never below zero, zero at
/// the end; a leak also leaves the shard's `Arc` behind, which loom reports). Each thread
/// exits its stages where the model says (`exit_stages`), as in the pool's models.
#[test]
fn a_handle_counted_on_its_thread_is_freed_once_whoever_lets_go_last() {
    model("biased handle count: the owner's exit ∥ another thread's drop", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (task, counts) = Probe::new();
        let owner = {
            let timers = timers.clone();
            loom::thread::spawn(move || {
                let timeout = timers.schedule(Duration::from_secs(60), task).unwrap();
                let handed = timeout.clone();
                let other = loom::thread::spawn(move || {
                    drop(handed);
                    assert!(shardwheel::loom_support::live_handles() >= 0, "a handle freed twice");
                });
                drop(timeout);
                // The thread's exit merges its count (loom cannot run it in a destructor).
                shardwheel::loom_support::exit_stages();
                other
            })
        };
        owner.join().unwrap().join().unwrap();
        // Nothing ends a 60 s timeout on a frozen clock: `stop()` hands it back.
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&counts, 0, unfired);
        drop(timers);
        assert_eq!(shardwheel::loom_support::live_handles(), 0, "every handle freed once");
    });
}
