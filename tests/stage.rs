//! Stages: a thread's arms wait on its own stage until its shard needs them, and the arms it
//! cancels meanwhile never reach the shard at all. These tests pin down what a user sees of
//! that: no shard work for arm-and-cancel, and no staged timeout late, lost or stuck, whoever
//! resets it and whether or not its thread is still alive.

mod common;

use common::PATIENCE;
use shardwheel::TimerService;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

fn one_shard() -> TimerService {
    TimerService::builder().shards(1).build().unwrap()
}

/// The request-timeout pattern: arm 30 s, cancel, many times over. The cancelled arms are
/// dropped by the arming thread's own sweeps; the shard is not woken for them (it used to be,
/// once per 1024 arms, for the mailbox backlog) and nothing waits in its mailbox.
#[test]
fn arms_cancelled_by_their_own_thread_never_reach_the_shard() {
    let timers = one_shard();
    // Let the shard go to sleep without a timeout.
    thread::sleep(Duration::from_millis(20));
    let before = timers.stats().wakeups;
    for _ in 0..20_000 {
        let t = timers.schedule(Duration::from_secs(30), || {}).unwrap();
        assert!(t.cancel());
    }
    thread::sleep(Duration::from_millis(20));
    let stats = timers.stats();
    // The first arm announces its stage, due in 30 s: one wake-up, so the shard can plan for it.
    assert!(stats.wakeups - before <= 1, "{} wake-ups for 20,000 cancelled arms", stats.wakeups - before);
    assert_eq!(stats.queued, 0, "no command for the shard");
    assert_eq!((stats.cancelled, stats.pending), (20_000, 0));
}

/// A timeout still on its thread's stage, reset to an earlier deadline from another thread,
/// fires at the new deadline, not when its stage comes due.
#[test]
fn a_staged_timeout_reset_earlier_by_another_thread_fires_on_time() {
    let timers = one_shard();
    let (tx, rx) = mpsc::channel();
    let timeout = timers.schedule(Duration::from_secs(60), move || tx.send(Instant::now()).unwrap()).unwrap();
    let t = timeout.clone();
    let reset_at = thread::spawn(move || {
        let at = Instant::now();
        assert!(t.reset(Duration::from_millis(20)));
        at
    })
    .join()
    .unwrap();
    let fired = rx.recv_timeout(PATIENCE).expect("fired at its new deadline");
    assert!(fired >= reset_at + Duration::from_millis(20), "never early");
    assert!(timeout.is_expired());
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "fired once");
}

/// A thread that arms and exits leaves its timeouts in good hands: one due soon fires, one due
/// far away is handed back by `stop`, and the thread's stage is gone with them.
#[test]
fn staged_timeouts_outlive_the_thread_that_armed_them() {
    let timers = one_shard();
    let fired = Arc::new(AtomicUsize::new(0));
    let producer = {
        let (timers, fired) = (timers.clone(), fired.clone());
        thread::spawn(move || {
            for i in 0..100 {
                let fired = fired.clone();
                timers
                    .schedule(Duration::from_millis(10 + i % 7), move || {
                        fired.fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap();
            }
            timers.schedule(Duration::from_secs(3600), || {}).unwrap()
        })
    };
    let far = producer.join().unwrap();
    assert!(common::wait_until(|| fired.load(Ordering::SeqCst) == 100, PATIENCE), "every near timeout fired");
    let unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 1);
    assert!(unfired[0].timeout().ptr_eq(&far));
}

/// Survivors of a sweep (timeouts nobody cancels: idle timeouts) reach the shard and fire, in
/// the order one thread armed them, mixed with cancelled ones.
#[test]
fn sweeps_pass_on_what_was_not_cancelled_in_order() {
    let timers = one_shard();
    let (tx, rx) = mpsc::channel();
    let deadline = Instant::now() + Duration::from_millis(100);
    let mut kept = 0;
    for i in 0..1_000 {
        let tx = tx.clone();
        let t = timers.schedule_at(deadline, move || tx.send(i).unwrap()).unwrap();
        if i % 3 == 0 {
            assert!(t.cancel());
        } else {
            kept += 1;
        }
    }
    drop(tx);
    let order: Vec<i32> = rx.iter().take(kept).collect();
    let expected: Vec<i32> = (0..1_000).filter(|i| i % 3 != 0).collect();
    assert_eq!(order, expected, "same deadline, one thread: fired in arming order");
    assert_eq!(timers.stats().expired, kept as u64);
}
