#![cfg(loom)]
//! A repeating timer's lock-free protocol (`src/periodic.rs`, protocols.md §9): a `cancel()`
//! of the series' handle ∥ the shard running a run (its start, its closure, the re-arm of its
//! successor) ∥ the successor firing. Whichever way they interleave, the successor is
//! cancelled exactly once and never left pending (`stop()` finds nothing, `pending()` is 0),
//! the closure and every cell are freed, and no run that had not started when the cancel
//! ended the series calls the closure after `cancel()` returned `true`.

#[path = "harness.rs"]
mod harness;

use harness::{model, service};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use shardwheel::Missed;
use std::time::Duration;

/// A series whose first run is due at once and whose second never comes (the clock is
/// frozen), cancelled from the model's thread while the shard runs the first run: its check
/// start (WAITING → RUNNING), the closure, its successor's arm and `publish` (RUNNING →
/// WAITING, else cancel it), against the cancel's CAS and `Control::end` (swap to ENDED, take
/// the stored run and cancel it). With `after_the_closure`, the cancel waits
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

/// A series whose first two runs are due at once (the third never comes), cancelled from
/// the model's thread, which says so (`returned`) as soon as `cancel()` returned `true`. The
/// shard runs run 1 (start, closure, arm and publish run 2) and, a turn later, run 2 (start,
/// closure, arm and publish run 3): the cancel lands anywhere in that, and in particular
/// while run 2 waits in the shard's batch (fired, not started).
///
/// What `cancel() == true` promises: a run that had not started when the cancel ended the
/// series never calls the closure. So a closure call that finds `returned` set is allowed
/// only if `Control::end` found a run under way (`series_ended_under_way`), and then only
/// once. A run in the batch whose start ignores the ending, or a check-then-act start,
/// fails here.
fn cancel_races_two_runs() {
    shardwheel::loom_support::freeze_clock();
    let timers = service();
    // Real-clock instants (the series) against the mocked clock (the shard): run 1 is due at
    // about 0 s, run 2 at 40 s, run 3 at 80 s; the mocked clock stands at 60 s.
    shardwheel::loom_support::advance_clock(Duration::from_secs(60));
    let runs = Arc::new(AtomicUsize::new(0));
    let late = Arc::new(AtomicUsize::new(0));
    let returned = Arc::new(AtomicBool::new(false));
    let (counted, seen, told) = (runs.clone(), late.clone(), returned.clone());
    let handle = timers
        .schedule_repeating(Duration::ZERO, Duration::from_secs(40), Missed::Burst, move || {
            if told.load(Ordering::SeqCst) {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    assert!(handle.cancel(), "the only cancel wins");
    returned.store(true, Ordering::SeqCst);
    let unfired = timers.stop().unwrap();
    assert!(unfired.is_empty(), "a run of a cancelled series was left: {unfired:?}");
    assert_eq!(timers.pending(), 0, "a run of a cancelled series is still counted");
    let late = late.load(Ordering::SeqCst);
    let under_way = shardwheel::loom_support::series_ended_under_way();
    assert!(under_way <= 1);
    assert!(
        late <= under_way,
        "the closure was called after cancel() returned true by a run that had not started ({late} calls, {under_way} under way)"
    );
    assert!(runs.load(Ordering::SeqCst) <= 2, "a third run");
    let stats = timers.stats();
    assert_eq!(stats.scheduled, stats.expired + stats.cancelled + stats.unfired + stats.pending);
    drop(handle);
    assert_eq!(Arc::strong_count(&runs), 1, "the closure outlived its series");
    assert_eq!(shardwheel::loom_support::live_entries(), 0, "a cell outlived the series");
}

/// cancel ∥ run 1 re-arming ∥ run 2 starting (waiting in the wheel, in the shard's batch).
#[test]
fn cancel_races_re_arm_and_the_next_run() {
    model("periodic: cancel ∥ re-arm ∥ the next run", cancel_races_two_runs);
}
