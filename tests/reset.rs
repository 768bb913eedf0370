//! `Timeout::reset` / `reset_at`: the timeout fires at the new deadline, never the old one,
//! whether it moved later or earlier; a reset after the end returns false.

mod common;

use common::{ChanTask, Kind, PATIENCE, next_event};
use shardwheel::{TimeoutState, TimerService};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Lateness allowed beyond one tick: generous for a shared 2-core machine (see
/// `fire_timing.rs`). Lower bounds are strict.
const LATE_SLACK: Duration = Duration::from_millis(50);
const TICK: Duration = Duration::from_millis(1);

fn service() -> TimerService {
    TimerService::builder().shards(1).tick(TICK).build().expect("valid settings")
}

#[test]
fn reset_later_fires_at_the_new_deadline_not_the_old() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    // Far enough off that the reset comes first on a slow machine too; waited out below.
    let timeout = timers.schedule(Duration::from_millis(100), ChanTask::new(0, &tx)).unwrap();
    let old_deadline = timeout.deadline();
    let requested = Instant::now() + Duration::from_millis(300);
    assert!(timeout.reset(Duration::from_millis(300)));
    assert!(timeout.deadline() >= requested, "deadline() did not move to the new deadline");
    assert!(timeout.deadline() > old_deadline);
    // Well past the old deadline: it must not have fired.
    assert_eq!(rx.recv_timeout(Duration::from_millis(150)).unwrap_err(), RecvTimeoutError::Timeout);
    assert!(timeout.is_pending());
    let event = next_event(&rx);
    assert!(event.at >= requested, "fired {:?} before the new deadline", requested - event.at);
    assert!(event.at - requested <= TICK + LATE_SLACK, "fired {:?} late", event.at - requested);
    assert!(timeout.is_expired());
}

#[test]
fn repeated_resets_later_keep_pushing_the_deadline_out() {
    // The idle-connection pattern: activity keeps pushing the timeout out.
    let timers = service();
    let (tx, rx) = mpsc::channel();
    // Each deadline well past the next reset, so that a thread slept 10 ms over its 10 ms (a
    // loaded machine) still resets a pending timeout.
    const IDLE: Duration = Duration::from_millis(100);
    let timeout = timers.schedule(IDLE, ChanTask::new(0, &tx)).unwrap();
    let mut requested = Instant::now();
    // Some 250 ms of resets: the first deadlines pass long before the last reset.
    for _ in 0..25 {
        requested = Instant::now() + IDLE;
        assert!(timeout.reset(IDLE));
        std::thread::sleep(Duration::from_millis(10));
    }
    let event = next_event(&rx);
    assert!(event.at >= requested, "fired {:?} before the last reset's deadline", requested - event.at);
    assert_eq!(timers.stats().expired, 1);
}

#[test]
fn reset_earlier_fires_early() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    let timeout = timers.schedule(Duration::from_secs(10), ChanTask::new(0, &tx)).unwrap();
    // Once straight away (the arm may still be in the mailbox), once after the shard filed
    // it and went to sleep until the far deadline.
    let late = timers.schedule(Duration::from_secs(10), ChanTask::new(1, &tx)).unwrap();
    let requested = Instant::now() + Duration::from_millis(20);
    assert!(timeout.reset(Duration::from_millis(20)));
    assert!(timeout.deadline() < Instant::now() + Duration::from_secs(1));
    let event = next_event(&rx);
    assert_eq!(event.id, 0);
    assert!(event.at >= requested);
    assert!(event.at - requested <= TICK + LATE_SLACK, "fired {:?} late", event.at - requested);

    std::thread::sleep(Duration::from_millis(20));
    let requested = Instant::now() + Duration::from_millis(20);
    assert!(late.reset(Duration::from_millis(20)));
    let event = next_event(&rx);
    assert_eq!(event.id, 1);
    assert!(event.at >= requested);
    assert!(event.at - requested <= TICK + LATE_SLACK, "fired {:?} late", event.at - requested);
}

#[test]
fn reset_to_zero_fires_on_the_next_turn() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    let timeout = timers.schedule(Duration::from_secs(3600), ChanTask::new(0, &tx)).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    let asked = Instant::now();
    assert!(timeout.reset(Duration::ZERO));
    let event = next_event(&rx);
    assert!(event.at >= asked && event.at - asked <= TICK + LATE_SLACK);
}

#[test]
fn reset_at_moves_the_deadline_to_the_instant() {
    let tick = Duration::from_millis(4);
    let timers = TimerService::builder().shards(1).tick(tick).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let timeout = timers.schedule(Duration::from_secs(10), ChanTask::new(0, &tx)).unwrap();
    let at = Instant::now() + Duration::from_micros(30_500);
    assert!(timeout.reset_at(at));
    let deadline = timeout.deadline();
    assert!(deadline >= at && deadline - at < tick, "deadline() {deadline:?} is not {at:?} rounded up to a tick");
    let event = next_event(&rx);
    assert!(event.at >= at, "fired {:?} early", at - event.at);
    assert!(event.at - at <= tick + LATE_SLACK);
    assert_eq!(timeout.deadline(), deadline);

    // Later, with reset_at (from a deadline the reset comes before, on a slow machine too).
    let timeout = timers.schedule(Duration::from_millis(100), ChanTask::new(1, &tx)).unwrap();
    let at = Instant::now() + Duration::from_millis(200);
    assert!(timeout.reset_at(at));
    let event = next_event(&rx);
    assert!(event.at >= at, "fired {:?} before the reset_at instant", at - event.at);
}

#[test]
fn reset_after_fire_or_cancel_returns_false_and_changes_nothing() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    let fired = timers.schedule(Duration::from_millis(1), ChanTask::new(0, &tx)).unwrap();
    assert_eq!(next_event(&rx).kind, Kind::Ran);
    let deadline = fired.deadline();
    assert!(!fired.reset(Duration::from_millis(5)));
    assert!(!fired.reset_at(Instant::now() + Duration::from_secs(1)));
    assert_eq!(fired.state(), TimeoutState::Expired);
    assert_eq!(fired.deadline(), deadline);

    let cancelled = timers.schedule(Duration::from_secs(60), ChanTask::new(1, &tx)).unwrap();
    assert!(cancelled.cancel());
    assert_eq!(next_event(&rx).kind, Kind::Cancelled);
    let deadline = cancelled.deadline();
    assert!(!cancelled.reset(Duration::ZERO));
    assert!(!cancelled.reset_at(Instant::now()));
    assert_eq!(cancelled.state(), TimeoutState::Cancelled);
    assert_eq!(cancelled.deadline(), deadline);
    // Nothing ran: a reset must not resurrect a cancelled timeout.
    assert_eq!(rx.recv_timeout(Duration::from_millis(50)).unwrap_err(), RecvTimeoutError::Timeout);
    let stats = timers.stats();
    assert_eq!((stats.scheduled, stats.expired, stats.cancelled, stats.pending), (2, 1, 1, 0));
}

#[test]
fn cancel_after_reset_earlier_still_wins() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    let timeout = timers.schedule(Duration::from_secs(10), ChanTask::new(0, &tx)).unwrap();
    // Earlier, but not so soon that a slow machine fires it before the cancel.
    assert!(timeout.reset(Duration::from_millis(200)));
    assert!(timeout.cancel());
    assert_eq!(next_event(&rx).kind, Kind::Cancelled);
    timers.schedule(Duration::from_millis(300), ChanTask::new(1, &tx)).unwrap();
    let event = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!((event.id, event.kind), (1, Kind::Ran), "the cancelled timeout ran after its reset");
}

/// A reset to a later deadline is one CAS on the state word: no mailbox message, and the
/// sleeping shard is not woken. An earlier one does tell the shard, which wakes for it.
#[test]
fn reset_later_sends_no_message_and_wakes_nobody() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let timeout = timers.schedule(Duration::from_secs(60), || ()).unwrap();
    // Let the shard file the arm and go back to sleep.
    assert!(common::wait_until(|| timers.stats().queued == 0, PATIENCE));
    std::thread::sleep(Duration::from_millis(20));
    let before = timers.stats();
    for i in 1..=1_000 {
        assert!(timeout.reset(Duration::from_secs(60 + i)));
    }
    let after = timers.stats();
    assert_eq!(after.queued, 0, "a later reset must not send a command");
    assert_eq!(after.wakeups, before.wakeups, "a later reset must not wake the shard");
    // An earlier reset does send one notice (and wakes the shard for it).
    assert!(timeout.reset(Duration::from_secs(30)));
    assert!(common::wait_until(|| timers.stats().wakeups > before.wakeups, PATIENCE));
}
