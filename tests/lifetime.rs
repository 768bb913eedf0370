//! How long a service lives: weak handles for tasks that schedule on their own service, and
//! a last drop that closes the shards without waiting for them.

mod common;

use common::{DropCounter, PATIENCE, wait_until};
use shardwheel::{ScheduleError, TimerService};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const FAR: Duration = Duration::from_secs(3600);

#[test]
fn a_weak_handle_upgrades_while_a_strong_one_lives() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let weak = timers.downgrade();
    let strong = weak.upgrade().expect("the service lives");
    let (tx, rx) = mpsc::channel();
    strong.schedule(Duration::from_millis(1), move || tx.send(()).unwrap()).unwrap();
    rx.recv_timeout(PATIENCE).expect("a timeout scheduled through an upgraded handle fires");
    assert!(format!("{weak:?}").contains("alive: true"));
    drop(strong);
    drop(timers);
    assert!(weak.upgrade().is_none(), "no strong handle is left");
    assert!(format!("{weak:?}").contains("alive: false"));
}

#[test]
fn a_task_holding_a_weak_handle_does_not_keep_the_service_alive() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let drops = DropCounter::new(1);
    let token = drops.token(0);
    let weak = timers.downgrade();
    timers
        .schedule(FAR, move || {
            let _token = &token;
            drop(weak.upgrade());
        })
        .unwrap();
    drop(timers);
    // Had the task held a strong clone, the shard would wait an hour with it.
    assert!(wait_until(|| drops.total() == 1, PATIENCE), "the service outlived its last strong handle");
    drops.assert_each_dropped_once();
}

#[test]
fn a_task_holding_a_strong_clone_keeps_the_service_alive() {
    // The trip the weak handle exists for, shown: the task's clone is a clone like any other.
    let timers = TimerService::builder().shards(1).build().unwrap();
    let weak = timers.downgrade();
    let held = timers.clone();
    let timeout = timers.schedule(FAR, move || drop(held)).unwrap();
    drop(timers);
    let alive = weak.upgrade().expect("the task's clone keeps the service");
    assert!(timeout.is_pending());
    assert!(timeout.cancel(), "cancelling the task drops its clone");
    drop(alive);
    assert!(weak.upgrade().is_none());
}

#[test]
fn the_last_drop_does_not_wait_for_a_running_task() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let (finish_tx, finish_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    timers
        .schedule(Duration::ZERO, move || {
            started_tx.send(()).unwrap();
            // Blocks until the test lets it go (or gives up).
            let _ = finish_rx.recv_timeout(PATIENCE);
            done_tx.send(()).unwrap();
        })
        .unwrap();
    let pending = DropCounter::new(1);
    let token = pending.token(0);
    timers.schedule(FAR, move || drop(token)).unwrap();
    started_rx.recv_timeout(PATIENCE).expect("the task runs");
    let weak = timers.downgrade();
    let before = Instant::now();
    drop(timers);
    let waited = before.elapsed();
    assert!(waited < Duration::from_millis(500), "the last drop waited {waited:?} for the running task");
    assert!(weak.upgrade().is_none());
    assert_eq!(pending.total(), 0, "the shard is still in its task: the pending timeout waits for it");
    finish_tx.send(()).unwrap();
    done_rx.recv_timeout(PATIENCE).expect("the task finishes");
    assert!(wait_until(|| pending.total() == 1, PATIENCE), "the shard dropped its pending timeout on its way out");
    pending.assert_each_dropped_once();
}

#[test]
fn a_stopped_service_still_upgrades_and_refuses_schedules() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let weak = timers.downgrade();
    assert!(timers.stop().unwrap().is_empty());
    let strong = weak.upgrade().expect("stopped, not dropped");
    assert!(matches!(strong.schedule(FAR, || {}), Err(ScheduleError::Shutdown(_))));
}

/// Records the name of the thread it is dropped on.
struct DroppedOn(mpsc::Sender<String>);

impl Drop for DroppedOn {
    fn drop(&mut self) {
        let _ = self.0.send(std::thread::current().name().unwrap_or("?").to_owned());
    }
}

#[test]
fn after_the_last_drop_pending_tasks_are_dropped_on_their_shard_threads() {
    // Whichever finishes first, the shard's shutdown or the caller's drop, the tasks are
    // dropped by the shard: the caller runs no task's `Drop`. Twenty rounds, as the race is
    // decided by timing.
    for round in 0..20 {
        let timers = TimerService::builder().shards(2).thread_name("abandoned").build().unwrap();
        let (tx, rx) = mpsc::channel();
        for shard in 0..2 {
            let on = DroppedOn(tx.clone());
            timers
                .schedule_on(shard, FAR, move || {
                    let _on = &on;
                })
                .unwrap();
        }
        drop(tx);
        drop(timers);
        let threads: Vec<String> = rx.iter().collect();
        assert_eq!(threads.len(), 2, "round {round}: each pending task is dropped once");
        for name in &threads {
            assert!(name.starts_with("abandoned-"), "round {round}: a task was dropped on {name:?}");
        }
    }
}

/// Panics when dropped.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("a pending task's Drop panics");
    }
}

#[test]
fn a_pending_task_that_panics_when_dropped_after_the_last_drop_harms_nothing() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let bomb = PanicsOnDrop;
    timers
        .schedule(FAR, move || {
            let _bomb = &bomb;
        })
        .unwrap();
    let drops = DropCounter::new(1);
    let token = drops.token(0);
    timers.schedule(FAR, move || drop(token)).unwrap();
    drop(timers);
    // The shard catches the panic and goes on dropping; the process is not aborted.
    assert!(wait_until(|| drops.total() == 1, PATIENCE), "the shard stopped dropping after a panic");
    drops.assert_each_dropped_once();
}
