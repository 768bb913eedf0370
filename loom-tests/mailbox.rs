#![cfg(loom)]
//! The mailbox and the wake-up protocol (`src/mailbox.rs`): commands from other threads, a
//! shard that sleeps, and producers that must wake it when, and only when, it matters.

#[path = "harness.rs"]
mod harness;

use harness::{Probe, assert_exactly_once, drop_unfired, model, service, wait_for_run};
use shardwheel::TimerService;
use std::time::Duration;

/// An arm still in the mailbox ∥ cancel: the shard may file the entry before or after the
/// cancel (then the canceller sends an unlink notice), or see the cancel first (then it
/// never files it, and no notice is sent); the timeout ends once, and the shard lets go of
/// the entry on its next turn, not at its deadline or a stop.
#[test]
fn arm_in_mailbox_races_cancel() {
    model("arm in mailbox ∥ cancel", || {
        // Frozen time: the timeout cannot fire, so only the cancel decides.
        shardwheel::loom_support::freeze_clock();
        shardwheel::loom_support::arm_through_mailbox();
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::from_secs(10), task).unwrap();
        let t = timeout.clone();
        let canceller = loom::thread::spawn(move || t.cancel());
        assert!(canceller.join().unwrap(), "nothing else can end a frozen-time timeout");
        assert_eq!(timers.pending(), 0);
        drop(timeout);
        // A second timeout, due now, makes the shard take a turn, reading its mail in order.
        let (next, next_counts) = Probe::new();
        drop(timers.schedule(Duration::ZERO, next).unwrap());
        wait_for_run(&next_counts);
        // Were a cancelled entry left in the wheel, this would spin until loom gives up.
        while shardwheel::loom_support::live_entries() > 0 {
            loom::thread::yield_now();
        }
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&counts, 1, unfired);
    });
}

/// A producer arms an earlier deadline ∥ the shard goes to sleep until a later one: the
/// shard must wake for it. Time is frozen, so only a wake-up ends the shard's sleep.
#[test]
fn earlier_deadline_wakes_a_sleeping_shard() {
    model("earlier arm ∥ shard going to sleep", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (far_task, _far) = Probe::new();
        timers.schedule(Duration::from_secs(60), far_task).unwrap();
        let (task, counts) = Probe::new();
        let producer = {
            let timers = timers.clone();
            loom::thread::spawn(move || timers.schedule(Duration::ZERO, task).map(drop).is_ok())
        };
        assert!(producer.join().unwrap());
        wait_for_run(&counts);
        drop_unfired(timers.stop().unwrap());
    });
}

/// A reset to an earlier deadline ∥ the shard sleeping until the old one: the refile notice
/// must wake it. Time is frozen, so only a wake-up ends the shard's sleep.
#[test]
fn earlier_reset_wakes_a_sleeping_shard() {
    model("earlier reset ∥ shard sleeping", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (task, counts) = Probe::new();
        let timeout = timers.schedule(Duration::from_secs(60), task).unwrap();
        let resetter = loom::thread::spawn(move || timeout.reset(Duration::ZERO));
        assert!(resetter.join().unwrap());
        wait_for_run(&counts);
        drop_unfired(timers.stop().unwrap());
    });
}

/// A sleeping shard is woken once its backlog reaches the high-water mark (2 under loom),
/// even if no command's deadline asks for it: cancels of far timeouts cannot pile up.
#[test]
fn backlog_wakes_a_sleeping_shard() {
    model("backlog wake-up", || {
        shardwheel::loom_support::freeze_clock();
        // Through the mailbox, so that the shard files both and their cancels send notices.
        shardwheel::loom_support::arm_through_mailbox();
        let timers = TimerService::builder().shards(1).build().unwrap();
        let (a, _a) = Probe::new();
        let (b, _b) = Probe::new();
        let first = timers.schedule(Duration::from_secs(60), a).unwrap();
        let second = timers.schedule(Duration::from_secs(60), b).unwrap();
        let producer = loom::thread::spawn(move || {
            // Two unlink notices with no deadline: only the backlog can wake the shard.
            first.cancel();
            second.cancel();
        });
        producer.join().unwrap();
        // The shard either read the notices while awake, or slept and the second one woke
        // it. Were the backlog wake-up lost, the notices would wait forever: this spins
        // until loom gives up on the model.
        while timers.stats().queued >= 2 {
            loom::thread::yield_now();
        }
        drop_unfired(timers.stop().unwrap());
        assert_eq!(timers.pending(), 0);
    });
}

/// The exactly-once check also holds for a timeout armed while the shard sleeps.
#[test]
fn arm_while_sleeping_then_cancel() {
    model("arm while sleeping, then cancel", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (task, counts) = Probe::new();
        let producer = {
            let timers = timers.clone();
            loom::thread::spawn(move || timers.schedule(Duration::from_secs(5), task).unwrap())
        };
        let timeout = producer.join().unwrap();
        let cancelled = timeout.cancel();
        assert!(cancelled, "nothing else can end a frozen-time timeout");
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&counts, 1, unfired);
    });
}
