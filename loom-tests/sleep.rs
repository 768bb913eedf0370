#![cfg(loom)]
//! The waker hand-over of a `Sleep` (`src/future/sleep.rs`) against the shard's expiry: a
//! poll that stores a waker never loses its wake-up, and a drop racing the expiry frees the
//! cell's task (the waker) exactly once. The shard wakes from its own thread, as in a normal
//! build; the polls and drops come from the model's threads.

#[path = "harness.rs"]
mod harness;

use harness::{Flag, flag, model, poll, service, woken};
use shardwheel::{Sleep, TimerService};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// After a `Pending`, the sleep's latest waker is woken, and the next poll completes. If the
/// wake-up were lost, this would spin until loom gives up on the model.
fn wait_then_complete(sleep: &mut Sleep, flag: &Arc<Flag>) {
    while woken(flag) == 0 {
        loom::thread::yield_now();
    }
    assert!(poll(sleep, flag).is_ready(), "woken, but not complete");
}

/// Stops the service and checks that nothing holds a waker any more.
fn finish(timers: TimerService, flags: &[&Arc<Flag>]) {
    drop(timers.stop().unwrap());
    for f in flags {
        assert_eq!(Arc::strong_count(f), 1, "a clone of a waker outlived its cell");
    }
    assert_eq!(timers.pending(), 0);
}

/// A poll with the same waker ∥ expiry: the waker is kept, and woken.
#[test]
fn repoll_with_the_same_waker_races_expiry() {
    model("sleep: poll with the same waker ∥ expiry", || {
        let timers = service();
        let a = flag();
        let mut sleep = timers.sleep(Duration::ZERO);
        assert!(poll(&mut sleep, &a).is_pending(), "registers on the first poll");
        if poll(&mut sleep, &a).is_pending() {
            wait_then_complete(&mut sleep, &a);
        }
        drop(sleep);
        finish(timers, &[&a]);
        assert!(woken(&a) <= 1);
    });
}

/// A poll that brings another waker ∥ expiry: either it sees the expiry (complete), or its
/// waker is the one woken; the earlier waker is freed either way.
#[test]
fn poll_with_a_new_waker_races_expiry() {
    model("sleep: poll storing a new waker ∥ expiry", || {
        let timers = service();
        let (a, b) = (flag(), flag());
        let mut sleep = timers.sleep(Duration::ZERO);
        assert!(poll(&mut sleep, &a).is_pending());
        match poll(&mut sleep, &b) {
            // The expiry came first: `a` was (or is being) woken.
            Poll::Ready(()) => {}
            // The hand-over won: `b` is woken, `a` never.
            Poll::Pending => {
                wait_then_complete(&mut sleep, &b);
                assert_eq!(woken(&a), 0, "the replaced waker was woken");
            }
        }
        drop(sleep);
        finish(timers, &[&a, &b]);
    });
}

/// A sleep dropped on another thread ∥ expiry: the cancel or the expiry wins, and the cell's
/// waker is freed exactly once (the `Arc`'s count; loom's leak check for the cell).
#[test]
fn drop_on_another_thread_races_expiry() {
    model("sleep: drop on another thread ∥ expiry", || {
        let timers = service();
        let a = flag();
        let mut sleep = timers.sleep(Duration::ZERO);
        assert!(poll(&mut sleep, &a).is_pending());
        loom::thread::spawn(move || drop(sleep)).join().unwrap();
        finish(timers, &[&a]);
        assert!(woken(&a) <= 1);
        assert_eq!(shardwheel::loom_support::live_entries(), 0, "a cell outlived the sleep");
    });
}

/// A sleep handed to task B and back to task A (polled with waker `a`, then `b`, then `a`
/// again) ∥ expiry: A, the last to poll, is woken (or sees the expiry); the sleep's record of
/// which waker its cell holds follows each hand-over.
#[test]
fn handed_to_another_task_and_back_wakes_the_first() {
    model("sleep: handed to B and back to A ∥ expiry", || {
        let timers = service();
        let (a, b) = (flag(), flag());
        let mut sleep = timers.sleep(Duration::ZERO);
        assert!(poll(&mut sleep, &a).is_pending());
        if poll(&mut sleep, &b).is_pending() && poll(&mut sleep, &a).is_pending() {
            wait_then_complete(&mut sleep, &a);
        }
        drop(sleep);
        finish(timers, &[&a, &b]);
    });
}

/// A reset of a registered sleep ∥ expiry: the reset's CAS moves the deadline (to the same
/// tick: no message to the shard) or finds the sleep fired. Either way the sleep completes,
/// woken each time it waits: after a lost reset it waits anew (a fresh start) and registers
/// again on its next poll. The reset also stores the deadline as asked in the cell, beside
/// the waker the shard may be taking out (`slot.rs`; Miri checks that the two never touch
/// the same bytes: `future::sleep::tests::a_reset_racing_the_expiry_keeps_the_deadline_as_asked`).
#[test]
fn reset_races_expiry() {
    model("sleep: reset ∥ expiry", || {
        let timers = service();
        let a = flag();
        let mut sleep = timers.sleep(Duration::ZERO);
        assert!(poll(&mut sleep, &a).is_pending());
        let deadline = sleep.deadline();
        sleep.reset(deadline);
        let mut seen = woken(&a);
        while poll(&mut sleep, &a).is_pending() {
            while woken(&a) == seen {
                loom::thread::yield_now();
            }
            seen = woken(&a);
        }
        assert!(sleep.is_elapsed(), "complete: the shard fired it");
        drop(sleep);
        finish(timers, &[&a]);
    });
}
