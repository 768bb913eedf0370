#![cfg(loom)]
//! Stages (`src/stage.rs`): a thread's arms wait on its own stage, which its owner sweeps
//! and the shard takes once the stage's `due` comes. Under loom a stage holds two entries,
//! so a third arm sweeps it.

#[path = "harness.rs"]
mod harness;

use harness::{Probe, assert_exactly_once, drop_unfired, model, service, wait_for_run};
use std::time::Duration;

/// The owner's sweep ∥ the shard taking the stage: the producer arms a timeout due now (its
/// announcement wakes the shard, which may take the stage at any point from then on), arms
/// and cancels a far one, and arms a third, which finds the stage full unless the shard took
/// it first. The sweep drops the cancelled entry and sends the survivor through the mailbox.
/// Whatever the order: the due timeout runs once, the cancelled one never, the far one is
/// handed back by stop, and every entry is freed.
#[test]
fn sweep_races_take() {
    model("sweep ∥ shard taking the stage", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (due, due_counts) = Probe::new();
        let (cancelled, cancelled_counts) = Probe::new();
        let (far, far_counts) = Probe::new();
        let producer = {
            let timers = timers.clone();
            loom::thread::spawn(move || {
                drop(timers.schedule(Duration::ZERO, due).unwrap());
                let t = timers.schedule(Duration::from_secs(60), cancelled).unwrap();
                assert!(t.cancel(), "nothing else can end a frozen-time timeout");
                drop(t);
                drop(timers.schedule(Duration::from_secs(60), far).unwrap());
            })
        };
        producer.join().unwrap();
        wait_for_run(&due_counts);
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&due_counts, 0, 0);
        assert_exactly_once(&cancelled_counts, 1, 0);
        assert_exactly_once(&far_counts, 0, unfired);
        assert_eq!(unfired, 1);
        assert_eq!(timers.pending(), 0);
        drop(timers);
        assert_eq!(shardwheel::loom_support::live_entries(), 0, "every entry is freed");
    });
}

/// A thread exits with timeouts on its stage: one due now runs anyway (its stage's `due`
/// still promises it to the shard), and a far one is handed back by stop (the final drain
/// reaches the retired stage through the shard's registry).
#[test]
fn staged_timeouts_outlive_their_thread() {
    model("staged timeouts outlive their thread", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (due, due_counts) = Probe::new();
        let (far, far_counts) = Probe::new();
        let producer = {
            let timers = timers.clone();
            loom::thread::spawn(move || {
                drop(timers.schedule(Duration::from_secs(60), far).unwrap());
                drop(timers.schedule(Duration::ZERO, due).unwrap());
            })
        };
        producer.join().unwrap();
        wait_for_run(&due_counts);
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&due_counts, 0, 0);
        assert_exactly_once(&far_counts, 0, unfired);
        drop(timers);
        assert_eq!(shardwheel::loom_support::live_entries(), 0, "every entry is freed");
    });
}
