#![cfg(loom)]
//! Shutdown (`TimerService::stop`, the mailbox's close handshake and the driver's final
//! drain): nothing scheduled is lost, nothing ends twice.

#[path = "harness.rs"]
mod harness;

use harness::{Probe, assert_exactly_once, drop_unfired, model, service};
use shardwheel::ScheduleError;
use std::time::Duration;

/// schedule ∥ stop: the timeout lands in stop's list (or fires), or the schedule fails
/// with `Shutdown` and hands the task back: never lost, never both. The arm goes on the
/// producer's stage, whose promise and announcement order it with the final drain
/// (`src/stage.rs`, "Shutdown").
#[test]
fn schedule_races_stop() {
    model("schedule ∥ stop", || schedule_races_stop_model(false));
}

/// The same through the mailbox (as a thread whose thread-locals are gone arms), whose close
/// handshake then decides (`src/mailbox.rs`).
#[test]
fn schedule_through_mailbox_races_stop() {
    model("schedule through the mailbox ∥ stop", || schedule_races_stop_model(true));
}

fn schedule_races_stop_model(through_mailbox: bool) {
    let timers = service();
    let (task, counts) = Probe::new();
    let producer = {
        let timers = timers.clone();
        loom::thread::spawn(move || {
            if through_mailbox {
                shardwheel::loom_support::arm_through_mailbox();
            }
            match timers.schedule(Duration::from_secs(10), task) {
                Ok(_) => true,
                Err(ScheduleError::Shutdown(task)) => {
                    drop(task);
                    false
                }
                Err(e) => panic!("unexpected {e}"),
            }
        })
    };
    let unfired = drop_unfired(timers.stop().unwrap());
    let scheduled = producer.join().unwrap();
    assert_eq!(scheduled, counts.runs() + unfired == 1, "scheduled {scheduled}, unfired {unfired}");
    assert!(counts.runs() + unfired <= 1);
    assert_eq!(counts.drops(), 1, "the task is dropped exactly once");
    assert_eq!(timers.pending(), 0);
    let stats = timers.stats();
    assert_eq!(stats.scheduled, u64::from(scheduled), "a schedule refused by the stop is not counted");
    assert_eq!(stats.expired + stats.unfired, u64::from(scheduled));
}

/// stop ∥ expire: the task runs, or stop hands it back; not both.
#[test]
fn stop_races_expire() {
    model("stop ∥ expire", || {
        let timers = service();
        let (task, counts) = Probe::new();
        timers.schedule(Duration::ZERO, task).unwrap();
        let stopper = {
            let timers = timers.clone();
            loom::thread::spawn(move || drop_unfired(timers.stop().unwrap()))
        };
        let unfired = stopper.join().unwrap();
        assert_exactly_once(&counts, 0, unfired);
        assert!(timers.stop().unwrap().is_empty(), "a second stop returns nothing");
    });
}

/// stop ∥ cancel: the cancel wins, or stop hands the timeout back; not both.
#[test]
fn stop_races_cancel() {
    model("stop ∥ cancel", || {
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::from_secs(10), task).unwrap();
        let canceller = loom::thread::spawn(move || timeout.cancel());
        let unfired = drop_unfired(timers.stop().unwrap());
        let cancelled = canceller.join().unwrap();
        assert_exactly_once(&counts, cancelled as usize, unfired);
        assert_eq!(timers.pending(), 0);
    });
}

/// schedule ∥ a shard failing (its driver's panic: `Shard::fail`): the schedule succeeds or
/// fails with `ShardFailed`, never `Shutdown`, since the service is not stopped (a caller
/// that read `Shutdown` would give up on a service that runs; a `Sleep` would report it
/// stopped). `fail()` marks the shard failed before it closes the mailbox, so whoever finds
/// it closed finds why; the other order leaves a window that this model reaches.
#[test]
fn schedule_races_a_failing_shard() {
    model("schedule ∥ a shard failing", || {
        let timers = service();
        let (task, _counts) = Probe::new();
        let producer = {
            let timers = timers.clone();
            loom::thread::spawn(move || {
                shardwheel::loom_support::arm_through_mailbox();
                match timers.schedule(Duration::from_secs(10), task) {
                    Ok(_) | Err(ScheduleError::ShardFailed(_)) => {}
                    Err(e) => panic!("a failing shard read as {e}: the service is not stopped"),
                }
            })
        };
        shardwheel::loom_support::fail_shard(&timers, 0);
        producer.join().unwrap();
        drop_unfired(timers.stop().unwrap());
    });
}
