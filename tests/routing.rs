//! Which shard a timeout lands on: `schedule_on` picks it, user threads have a stable home
//! shard, and a task that schedules stays on its own shard.

mod common;

use common::{ChanTask, PATIENCE, events};
use shardwheel::{ScheduleError, Timeout, TimerService};
use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::Duration;

const FAR: Duration = Duration::from_secs(3600);

#[test]
fn schedule_on_lands_on_that_shard_and_runs_on_its_thread() {
    const SHARDS: usize = 3;
    let timers = TimerService::builder().shards(SHARDS).thread_name("route").build().unwrap();
    assert_eq!(timers.shard_count(), SHARDS);
    let (tx, rx) = mpsc::channel();
    for k in 0..SHARDS {
        let timeout = timers.schedule_on(k, Duration::from_millis(1), ChanTask::new(k, &tx)).unwrap();
        assert_eq!(timeout.shard(), k);
    }
    for event in events(&rx, SHARDS) {
        let expected = format!("route-{}", event.id);
        assert_eq!(event.thread_name.as_deref(), Some(expected.as_str()), "task for shard {} ran elsewhere", event.id);
    }
}

#[test]
fn schedule_on_a_missing_shard_hands_the_task_back() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    let (tx, _rx) = mpsc::channel();
    for index in [timers.shard_count(), timers.shard_count() + 1, usize::MAX] {
        match timers.schedule_on(index, Duration::ZERO, ChanTask::new(index, &tx)) {
            Err(ScheduleError::NoSuchShard(task)) => assert_eq!(task.id, index),
            other => panic!("expected NoSuchShard for {index}, got {other:?}"),
        }
    }
    let stats = timers.stats();
    assert_eq!((stats.scheduled, stats.rejected, stats.pending), (0, 0, 0));
}

#[test]
fn a_user_thread_always_gets_the_same_home_shard() {
    let timers = TimerService::builder().shards(4).build().unwrap();
    let shards: BTreeSet<usize> = (0..50).map(|_| timers.schedule(FAR, || ()).unwrap().shard()).collect();
    assert_eq!(shards.len(), 1, "one thread's timeouts went to several shards: {shards:?}");
    // Also from a thread of its own, and with schedule_at.
    let other = std::thread::spawn({
        let timers = timers.clone();
        move || {
            let first = timers.schedule(FAR, || ()).unwrap().shard();
            (0..50).all(|_| timers.schedule_at(std::time::Instant::now() + FAR, || ()).unwrap().shard() == first)
        }
    });
    assert!(other.join().unwrap(), "a spawned thread's timeouts went to several shards");
}

#[test]
fn different_threads_are_spread_over_the_shards() {
    const SHARDS: usize = 4;
    let timers = TimerService::builder().shards(SHARDS).build().unwrap();
    // One thread after another, each scheduling once.
    let mut used = [0usize; SHARDS];
    for _ in 0..32 {
        let timers = timers.clone();
        let shard = std::thread::spawn(move || timers.schedule(FAR, || ()).unwrap().shard()).join().unwrap();
        used[shard] += 1;
    }
    assert!(used.iter().all(|&n| n > 0), "32 threads did not reach all {SHARDS} shards: {used:?}");
}

#[test]
fn a_task_that_schedules_lands_on_its_own_shard() {
    const SHARDS: usize = 3;
    let timers = TimerService::builder().shards(SHARDS).thread_name("self").build().unwrap();
    let (handles_tx, handles_rx) = mpsc::channel::<(usize, Timeout)>();
    let (tx, rx) = mpsc::channel();
    for k in 0..SHARDS {
        let (inner, handles_tx, tx) = (timers.clone(), handles_tx.clone(), tx.clone());
        timers
            .schedule_on(k, Duration::ZERO, move || {
                let timeout = inner.schedule(Duration::from_millis(2), ChanTask::new(k, &tx)).unwrap();
                handles_tx.send((k, timeout)).unwrap();
            })
            .unwrap();
    }
    for _ in 0..SHARDS {
        let (k, timeout) = handles_rx.recv_timeout(PATIENCE).unwrap();
        assert_eq!(timeout.shard(), k, "a task on shard {k} scheduled onto shard {}", timeout.shard());
    }
    for event in events(&rx, SHARDS) {
        assert_eq!(event.thread_name, Some(format!("self-{}", event.id)));
    }
}

/// A task's `schedule` files the timeout straight into its own shard's wheel, with no
/// mailbox message and no wake-up: the shard must still see it before it goes back to sleep.
#[test]
fn a_timeout_armed_by_a_task_on_its_own_shard_fires() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let inner = timers.clone();
    timers
        .schedule(Duration::ZERO, move || {
            inner.schedule(Duration::from_millis(1), ChanTask::new(0, &tx)).unwrap();
        })
        .unwrap();
    assert!(
        rx.recv_timeout(Duration::from_secs(2)).is_ok(),
        "a 1 ms timeout armed from a task had not fired after 2 s"
    );
}
