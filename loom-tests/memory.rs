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
