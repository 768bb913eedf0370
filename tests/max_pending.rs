//! `max_pending_per_shard`: exact, and room comes back the moment a timeout ends.

mod common;

use common::{ChanTask, Kind, next_event};
use shardwheel::{ScheduleError, TimerService};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const FAR: Duration = Duration::from_secs(3600);

fn limited(n: usize) -> TimerService {
    TimerService::builder().shards(1).max_pending_per_shard(n).build().expect("valid settings")
}

#[test]
fn exactly_n_are_accepted_and_the_next_is_rejected_with_its_task() {
    const N: usize = 10;
    let timers = limited(N);
    let (tx, rx) = mpsc::channel();
    let timeouts: Vec<_> = (0..N).map(|id| timers.schedule(FAR, ChanTask::new(id, &tx)).unwrap()).collect();
    assert_eq!(timers.pending(), N);
    match timers.schedule(FAR, ChanTask::new(100, &tx)) {
        Err(ScheduleError::Rejected(task)) => assert_eq!(task.id, 100, "the rejected task comes back"),
        other => panic!("expected Rejected, got {other:?}"),
    }
    let err = timers.schedule_at(Instant::now(), ChanTask::new(101, &tx)).unwrap_err();
    assert!(matches!(err, ScheduleError::Rejected(_)));
    assert_eq!(err.into_task().id, 101);
    let err = timers.schedule_on(0, Duration::ZERO, ChanTask::new(102, &tx)).unwrap_err();
    assert!(matches!(&err, ScheduleError::Rejected(t) if t.id == 102));
    let stats = timers.stats();
    assert_eq!((stats.scheduled, stats.rejected, stats.pending), (N as u64, 3, N as u64));
    assert_eq!(timers.pending(), N);
    // A reset does not take or give a place.
    assert!(timeouts[0].reset(FAR * 2));
    assert!(matches!(timers.schedule(FAR, || ()), Err(ScheduleError::Rejected(_))));
    assert_eq!(timers.stats().rejected, 4);
    assert!(rx.try_recv().is_err(), "no task ran or was cancelled");
}

#[test]
fn a_cancel_makes_room_at_once() {
    let timers = limited(3);
    let timeouts: Vec<_> = (0..3).map(|_| timers.schedule(FAR, || ()).unwrap()).collect();
    assert!(matches!(timers.schedule(FAR, || ()), Err(ScheduleError::Rejected(_))));
    for timeout in &timeouts {
        assert!(timeout.cancel());
        // No waiting for the shard: the place is free when cancel() returns.
        let replacement = timers.schedule(FAR, || ()).expect("a cancel must make room at once");
        assert!(matches!(timers.schedule(FAR, || ()), Err(ScheduleError::Rejected(_))));
        assert!(replacement.is_pending());
    }
    assert_eq!(timers.pending(), 3);
    assert_eq!(timers.stats().rejected, 4);
}

#[test]
fn an_expiry_makes_room_at_once() {
    let timers = limited(2);
    let (tx, rx) = mpsc::channel();
    timers.schedule(FAR, ChanTask::new(0, &tx)).unwrap();
    timers.schedule(Duration::from_millis(5), ChanTask::new(1, &tx)).unwrap();
    assert!(matches!(timers.schedule(FAR, || ()), Err(ScheduleError::Rejected(_))));
    let event = next_event(&rx);
    assert_eq!((event.id, event.kind), (1, Kind::Ran));
    // The task has run, so the shard committed to it earlier: its place is free now.
    timers.schedule(FAR, || ()).expect("an expiry must make room by the time its task runs");
    assert!(matches!(timers.schedule(FAR, || ()), Err(ScheduleError::Rejected(_))));
    assert_eq!(timers.stats().rejected, 2);
}

#[test]
fn the_limit_is_per_shard() {
    let timers = TimerService::builder().shards(2).max_pending_per_shard(2).build().unwrap();
    for shard in 0..2 {
        for _ in 0..2 {
            timers.schedule_on(shard, FAR, || ()).unwrap();
        }
        assert!(matches!(timers.schedule_on(shard, FAR, || ()), Err(ScheduleError::Rejected(_))));
    }
    assert_eq!(timers.pending(), 4);
    assert_eq!(timers.stats().rejected, 2);
}

#[test]
fn racing_producers_never_overshoot_the_limit() {
    const LIMIT: usize = 500;
    const THREADS: usize = 4;
    const TRIES: usize = 300;
    let timers = limited(LIMIT);
    let barrier = Arc::new(Barrier::new(THREADS));
    let accepted: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (timers, barrier) = (&timers, barrier.clone());
                s.spawn(move || {
                    barrier.wait();
                    (0..TRIES).filter(|_| timers.schedule(FAR, || ()).is_ok()).count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(accepted, LIMIT, "exactly the limit must be accepted");
    let stats = timers.stats();
    assert_eq!(stats.rejected, (THREADS * TRIES - LIMIT) as u64);
    assert_eq!((stats.scheduled, stats.pending), (LIMIT as u64, LIMIT as u64));
}
