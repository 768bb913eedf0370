#![cfg(loom)]
//! Races on the state word (`src/state.rs`), through the public API and the real shard
//! driver: one CAS decides each timeout's fate.

#[path = "harness.rs"]
mod harness;

use harness::{Probe, assert_exactly_once, drop_unfired, model, service, wait_for_run};
use std::time::Duration;

/// cancel ∥ expire: exactly one wins; the loser never touches the task.
#[test]
fn cancel_races_expire() {
    model("cancel ∥ expire", || {
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::ZERO, task).unwrap();
        let t = timeout.clone();
        let canceller = loom::thread::spawn(move || t.cancel());
        let cancelled = canceller.join().unwrap();
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&counts, cancelled as usize, unfired);
        assert_eq!(timers.pending(), 0);
    });
}

/// cancel ∥ cancel: exactly one call returns true, and `cancelled()` runs once.
#[test]
fn cancel_races_cancel() {
    model("cancel ∥ cancel", || {
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::from_secs(10), task).unwrap();
        let t = timeout.clone();
        let other = loom::thread::spawn(move || t.cancel());
        let mine = timeout.cancel();
        let theirs = other.join().unwrap();
        let unfired = drop_unfired(timers.stop().unwrap());
        // The mocked clock may have run to the deadline, so it may also have fired.
        assert!(!(mine && theirs), "both cancels won");
        assert_exactly_once(&counts, mine as usize + theirs as usize, unfired);
    });
}

/// reset ∥ expire: a reset that returns true means the task did not fire at the old
/// deadline; it waits for the new one.
#[test]
fn reset_races_expire() {
    model("reset ∥ expire", || {
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::ZERO, task).unwrap();
        let t = timeout.clone();
        let resetter = loom::thread::spawn(move || t.reset(Duration::from_millis(5)));
        let reset = resetter.join().unwrap();
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&counts, 0, unfired);
        if reset && counts.runs() == 1 {
            assert!(counts.ran_at() >= 5, "fired at {} ms, before the new deadline", counts.ran_at());
        }
        if !reset {
            assert_eq!(counts.runs(), 1, "a reset fails only once the timeout fired");
        }
    });
}

/// reset ∥ cancel: both decided by one CAS each; a winning cancel means the task never runs.
#[test]
fn reset_races_cancel() {
    model("reset ∥ cancel", || {
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::from_millis(3), task).unwrap();
        let t = timeout.clone();
        let resetter = loom::thread::spawn(move || t.reset(Duration::from_millis(6)));
        let cancelled = timeout.cancel();
        let reset = resetter.join().unwrap();
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&counts, cancelled as usize, unfired);
        if cancelled {
            assert_eq!(counts.runs(), 0);
        }
        if reset && counts.runs() == 1 {
            assert!(counts.ran_at() >= 6, "fired at {} ms, before the reset deadline", counts.ran_at());
        }
    });
}

/// reset earlier ∥ expire: the refile notice races with the shard; the timeout still ends
/// exactly once and never before its deadline.
#[test]
fn reset_earlier_races_expire() {
    model("reset earlier ∥ expire", || {
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::from_millis(8), task).unwrap();
        let t = timeout.clone();
        let resetter = loom::thread::spawn(move || t.reset(Duration::from_millis(2)));
        let reset = resetter.join().unwrap();
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&counts, 0, unfired);
        if counts.runs() == 1 {
            let floor = if reset { 2 } else { 8 };
            assert!(counts.ran_at() >= floor, "fired at {} ms, deadline {floor} ms", counts.ran_at());
        }
    });
}

/// A timeout its shard has already filed in the wheel (armed through the mailbox; a second
/// timeout due now has run, so the shard has read its mail in order), reset earlier, to due
/// now: the refile notice must bring it out of its far slot and fire it.
#[test]
fn reset_earlier_of_a_filed_timeout() {
    model("reset earlier of a filed timeout", || filed_then_reset_earlier(false));
}

/// The same ∥ a cancel: the cancel wins and the task never runs, or the reset and the expiry
/// come first and the task runs; exactly once either way, and never lost.
#[test]
fn reset_earlier_of_a_filed_timeout_races_cancel() {
    model("reset earlier of a filed timeout ∥ cancel", || filed_then_reset_earlier(true));
}

fn filed_then_reset_earlier(with_cancel: bool) {
    shardwheel::loom_support::freeze_clock();
    shardwheel::loom_support::arm_through_mailbox();
    let timers = service();
    let (task, counts) = Probe::new();
    let timeout = timers.schedule(Duration::from_secs(60), task).unwrap();
    let (marker, marker_counts) = Probe::new();
    drop(timers.schedule(Duration::ZERO, marker).unwrap());
    wait_for_run(&marker_counts);
    let canceller = with_cancel.then(|| {
        let t = timeout.clone();
        loom::thread::spawn(move || t.cancel())
    });
    let reset = timeout.reset(Duration::ZERO);
    let cancelled = canceller.is_some_and(|c| c.join().unwrap());
    if !cancelled {
        assert!(reset, "only a cancel could have ended it first");
        wait_for_run(&counts);
    }
    let unfired = drop_unfired(timers.stop().unwrap());
    assert_exactly_once(&counts, usize::from(cancelled), unfired);
}
