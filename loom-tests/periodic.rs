#![cfg(loom)]
//! A repeating timer's lock-plus-CAS protocol (`src/periodic.rs`, protocols.md §9): a
//! `cancel()` of the series' handle ∥ the shard running a run that re-arms its successor.
//! Whichever way they interleave, the successor is cancelled exactly once and never left
//! pending (`stop()` finds nothing, `pending()` is 0), the closure runs at most once, and
//! the closure and every cell are freed.

#[path = "harness.rs"]
mod harness;

use harness::{model, service};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use shardwheel::Missed;
use std::time::Duration;

/// A series whose first run is due at once and whose second never comes (the clock is
/// frozen), cancelled from the model's thread while the shard runs the first run: its check
/// of the handle, the closure, its successor's arm and `follow` (store it under the lock if
/// the handle is pending, else cancel it), against the cancel's CAS and `Control::end` (take
/// the stored run under the lock and cancel it). With `after_the_closure`, the cancel waits
/// until the closure has run, so that it lands in the re-arm itself.
fn cancel_races_a_run(after_the_closure: bool) {
    shardwheel::loom_support::freeze_clock();
    let timers = service();
    // A series computes its instants from the real clock (a few ms after the service's
    // start here), the shard from the mocked one: a minute on the mocked clock makes the
    // first run due, and its successor (an hour later) never is.
    shardwheel::loom_support::advance_clock(Duration::from_secs(60));
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handle = timers
        .schedule_repeating(Duration::ZERO, Duration::from_secs(3600), Missed::Burst, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    if after_the_closure {
        // A wait that never ends (the first run never fires) fails the model.
        while runs.load(Ordering::SeqCst) == 0 {
            loom::thread::yield_now();
        }
    }
    assert!(handle.cancel(), "the only cancel wins");
    assert!(handle.is_cancelled());
    // Whatever the run did, nothing of the series is left: a successor stored after the
    // cancel took `current`, or never cancelled, would still be in the wheel, and `stop()`
    // would hand it back.
    let unfired = timers.stop().unwrap();
    assert!(unfired.is_empty(), "a run of a cancelled series was left: {unfired:?}");
    assert_eq!(timers.pending(), 0, "a run of a cancelled series is still counted");
    let stats = timers.stats();
    assert_eq!(stats.scheduled, stats.expired + stats.cancelled + stats.unfired + stats.pending);
    assert!(runs.load(Ordering::SeqCst) <= 1, "a second run");
    drop(handle);
    assert_eq!(Arc::strong_count(&runs), 1, "the closure outlived its series");
    assert_eq!(shardwheel::loom_support::live_entries(), 0, "a cell outlived the series");
}

/// cancel ∥ the first run re-arming (the cancel lands after the closure ran).
#[test]
fn cancel_races_a_run_re_arming() {
    model("periodic: cancel ∥ a run re-arming", || cancel_races_a_run(true));
}

/// cancel ∥ the first run, anywhere: before the shard takes it, before its closure, or in
/// its re-arm.
#[test]
fn cancel_races_a_run_firing() {
    model("periodic: cancel ∥ a run firing", || cancel_races_a_run(false));
}
