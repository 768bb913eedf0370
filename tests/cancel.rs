//! `Timeout::cancel`: true exactly once, `cancelled()` on the cancelling thread before it
//! returns, the task never runs, and a cancel after the end changes nothing.

mod common;

use common::{ChanTask, DropCounter, Kind, next_event};
use shardwheel::{TimeoutState, TimerService, TimerTask};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, TryRecvError};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const FAR: Duration = Duration::from_secs(3600);

fn service(shards: usize) -> TimerService {
    TimerService::builder().shards(shards).build().expect("valid settings")
}

#[test]
fn cancel_is_true_exactly_once() {
    let timers = service(1);
    let (tx, rx) = mpsc::channel();
    let timeout = timers.schedule(FAR, ChanTask::new(0, &tx)).unwrap();
    let clone = timeout.clone();
    assert!(timeout.cancel(), "the first cancel wins");
    assert!(!timeout.cancel(), "a second cancel loses");
    assert!(!clone.cancel(), "a clone speaks for the same timeout");
    assert_eq!(next_event(&rx).kind, Kind::Cancelled);
    assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty, "cancelled() ran more than once");
    assert_eq!(timers.stats().cancelled, 1);
}

#[test]
fn racing_cancels_from_many_threads_have_exactly_one_winner() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 200;
    let timers = service(2);
    let drops = DropCounter::new(ROUNDS);
    let (tx, rx) = mpsc::channel();
    for round in 0..ROUNDS {
        let timeout = timers.schedule(FAR, ChanTask::with_token(round, &tx, drops.token(round))).unwrap();
        let barrier = Arc::new(Barrier::new(THREADS));
        let winners: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (timeout, barrier) = (timeout.clone(), barrier.clone());
                    s.spawn(move || {
                        barrier.wait();
                        timeout.cancel()
                    })
                })
                .collect();
            handles.into_iter().map(|h| usize::from(h.join().unwrap())).sum()
        });
        assert_eq!(winners, 1, "round {round}: {winners} cancels returned true");
        assert!(timeout.is_cancelled());
        assert_eq!(drops.count(round), 1, "round {round}: the task was not dropped by the winning cancel");
    }
    let events: Vec<_> = rx.try_iter().collect();
    assert_eq!(events.len(), ROUNDS, "cancelled() must run once per timeout");
    assert!(events.iter().all(|e| e.kind == Kind::Cancelled));
    assert_eq!(timers.stats().cancelled, ROUNDS as u64);
    assert_eq!(timers.pending(), 0);
    drops.assert_each_dropped_once();
}

#[test]
fn cancelled_runs_on_the_cancelling_thread_before_cancel_returns() {
    let timers = service(2);
    let drops = DropCounter::new(2);
    let (tx, rx) = mpsc::channel();
    // Cancel from the test thread, and from another thread (not a shard thread either).
    let first = timers.schedule_on(0, FAR, ChanTask::with_token(0, &tx, drops.token(0))).unwrap();
    assert!(first.cancel());
    // Already there: cancelled() ran, and the task was dropped, before cancel() returned.
    let event = rx.try_recv().expect("cancelled() had not run when cancel() returned");
    assert_eq!((event.id, event.kind), (0, Kind::Cancelled));
    assert_eq!(event.thread, std::thread::current().id());
    assert_eq!(drops.count(0), 1, "the task must be dropped before cancel() returns");

    let second = timers.schedule_on(1, FAR, ChanTask::with_token(1, &tx, drops.token(1))).unwrap();
    let (me, event, dropped) = std::thread::spawn(move || {
        assert!(second.cancel());
        (std::thread::current().id(), rx.try_recv(), drops.count(1))
    })
    .join()
    .unwrap();
    let event = event.expect("cancelled() had not run when cancel() returned");
    assert_eq!((event.id, event.kind, event.thread), (1, Kind::Cancelled, me));
    assert_eq!(dropped, 1);
}

#[test]
fn a_cancelled_task_never_runs() {
    let timers = service(1);
    let (tx, rx) = mpsc::channel();
    let timeouts: Vec<_> =
        (0..50).map(|id| timers.schedule(Duration::from_millis(200), ChanTask::new(id, &tx)).unwrap()).collect();
    for timeout in &timeouts {
        assert!(timeout.cancel());
    }
    // A sentinel due after all of them: once it ran, any of them that was going to run did.
    timers.schedule(Duration::from_millis(300), ChanTask::new(1000, &tx)).unwrap();
    let mut ids = Vec::new();
    loop {
        let event = next_event(&rx);
        if event.id == 1000 {
            assert_eq!(event.kind, Kind::Ran);
            break;
        }
        assert_eq!(event.kind, Kind::Cancelled, "cancelled timeout {} ran", event.id);
        ids.push(event.id);
    }
    assert_eq!(ids, (0..50).collect::<Vec<_>>());
    let stats = timers.stats();
    assert_eq!((stats.expired, stats.cancelled), (1, 50));
}

#[test]
fn cancel_after_expiry_returns_false_and_changes_nothing() {
    let timers = service(1);
    let (tx, rx) = mpsc::channel();
    let timeout = timers.schedule(Duration::from_millis(1), ChanTask::new(0, &tx)).unwrap();
    assert_eq!(next_event(&rx).kind, Kind::Ran);
    assert_eq!(timeout.state(), TimeoutState::Expired);
    let before = timers.stats();
    let deadline = timeout.deadline();
    assert!(!timeout.cancel());
    assert_eq!(timeout.state(), TimeoutState::Expired);
    assert_eq!(timeout.deadline(), deadline);
    assert_eq!(timers.stats(), before);
    assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty, "cancelled() must not run after expiry");
}

#[test]
fn states_follow_the_timeout() {
    let timers = service(1);
    let (tx, rx) = mpsc::channel();
    let doomed = timers.schedule(FAR, ChanTask::new(0, &tx)).unwrap();
    let clone = doomed.clone();
    assert_eq!(doomed.state(), TimeoutState::Pending);
    assert!(doomed.is_pending() && !doomed.is_cancelled() && !doomed.is_expired());
    assert!(doomed.cancel());
    for t in [&doomed, &clone] {
        assert_eq!(t.state(), TimeoutState::Cancelled);
        assert!(!t.is_pending() && t.is_cancelled() && !t.is_expired());
    }
    assert!(!doomed.reset(Duration::ZERO), "cancelled is final");
    assert_eq!(doomed.state(), TimeoutState::Cancelled);

    let fired = timers.schedule(Duration::from_millis(1), ChanTask::new(1, &tx)).unwrap();
    assert_eq!(next_event(&rx).kind, Kind::Cancelled);
    assert_eq!(next_event(&rx).kind, Kind::Ran);
    assert_eq!(fired.state(), TimeoutState::Expired);
    assert!(!fired.is_pending() && !fired.is_cancelled() && fired.is_expired());
}

/// Cancel racing the shard's expiry: exactly one side wins, every time.
#[test]
fn cancel_racing_expiry_ends_each_timeout_exactly_once() {
    const N: usize = 2000;
    let timers = service(2);
    let drops = DropCounter::new(N);
    let ran = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    let mut won = vec![false; N];
    for (id, won) in won.iter_mut().enumerate() {
        let timeout = timers.schedule(Duration::ZERO, ChanTask::with_token(id, &tx, drops.token(id))).unwrap();
        if id % 3 != 0 {
            std::hint::spin_loop();
        }
        *won = timeout.cancel();
        if !*won {
            assert!(timeout.is_expired(), "cancel() lost, so the shard must have committed to run it");
        }
    }
    let events = common::events(&rx, N);
    let mut seen = vec![0u8; N];
    for e in events {
        seen[e.id] += 1;
        match e.kind {
            Kind::Cancelled => assert!(won[e.id], "cancelled() of {} ran but cancel() returned false", e.id),
            Kind::Ran => {
                assert!(!won[e.id], "{} ran although cancel() returned true", e.id);
                ran.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    assert!(seen.iter().all(|&n| n == 1), "some timeout ended more than once or never");
    assert!(common::wait_until(|| drops.total() == N, common::PATIENCE));
    drops.assert_each_dropped_once();
    let cancelled = won.iter().filter(|&&w| w).count() as u64;
    let stats = timers.stats();
    assert_eq!(stats.cancelled, cancelled);
    assert_eq!(stats.expired, ran.load(Ordering::Relaxed) as u64);
    assert_eq!(stats.scheduled, N as u64);
    assert_eq!(stats.pending, 0);
}

/// A task whose `cancelled()` panics.
struct PanicsWhenCancelled;

impl TimerTask for PanicsWhenCancelled {
    fn run(self: Box<Self>) {}
    fn cancelled(self: Box<Self>) {
        panic!("cancelled() panics");
    }
}

/// Panics when dropped.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("drop panics");
    }
}

#[test]
fn a_panic_in_cancelled_or_drop_is_caught_and_counted_and_the_cancel_stands() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    // Silence the two planted panics only: other tests of this binary run meanwhile, and
    // their failures must still print.
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let planted =
            info.payload().downcast_ref::<&str>().is_some_and(|m| *m == "cancelled() panics" || *m == "drop panics");
        if !planted {
            default(info);
        }
    }));
    let first = timers.schedule(Duration::from_secs(60), PanicsWhenCancelled).unwrap();
    let guard = PanicsOnDrop;
    let second = timers
        .schedule(Duration::from_secs(60), move || {
            let _keep = &guard;
        })
        .unwrap();
    let (a, b) = (first.cancel(), second.cancel());
    assert!(a && b, "each cancel won and returned normally");
    assert!(first.is_cancelled() && second.is_cancelled());
    assert!(!first.cancel(), "and stands");
    let stats = timers.stats();
    assert_eq!((stats.panicked, stats.cancelled, stats.pending), (2, 2, 0));
}
