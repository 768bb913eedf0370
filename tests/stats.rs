//! `pending()` and `stats()`: exact at rest, adding up, and an idle service that sleeps.
//! (`scheduled` is counted as `expired + cancelled + unfired + pending`, so each test checks
//! every one of those, and `scheduled`, against the counts it made itself.)

mod common;

use common::{ChanTask, Kind, events, next_event};
use shardwheel::{ScheduleError, Stats, TimerService};
use std::sync::mpsc;
use std::time::Duration;

const FAR: Duration = Duration::from_secs(3600);

#[test]
fn a_new_service_counts_nothing() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    let stats = timers.stats();
    assert_eq!(stats, Stats::default());
    assert_eq!(timers.pending(), 0);
}

#[test]
fn counts_are_exact_at_rest_and_add_up() {
    const FIRE: usize = 40;
    const CANCEL: usize = 25;
    const KEEP: usize = 15;
    let timers = TimerService::builder().shards(2).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let mut id = 0..;
    let mut next = || id.next().unwrap();
    // Spread over both shards, to check the sums.
    for i in 0..FIRE {
        timers.schedule_on(i % 2, Duration::from_millis(i as u64 % 7), ChanTask::new(next(), &tx)).unwrap();
    }
    let cancel: Vec<_> =
        (0..CANCEL).map(|i| timers.schedule_on(i % 2, FAR, ChanTask::new(next(), &tx)).unwrap()).collect();
    let keep: Vec<_> = (0..KEEP).map(|i| timers.schedule_on(i % 2, FAR, ChanTask::new(next(), &tx)).unwrap()).collect();
    for timeout in &cancel {
        assert!(timeout.cancel());
    }
    // At rest: every firing and every cancellation has reported through the channel.
    let done = events(&rx, FIRE + CANCEL);
    assert_eq!(done.iter().filter(|e| e.kind == Kind::Ran).count(), FIRE);
    let stats = timers.stats();
    assert_eq!(stats.scheduled, (FIRE + CANCEL + KEEP) as u64);
    assert_eq!(stats.expired, FIRE as u64);
    assert_eq!(stats.cancelled, CANCEL as u64);
    assert_eq!(stats.unfired, 0);
    assert_eq!(stats.pending, KEEP as u64);
    assert_eq!((stats.rejected, stats.panicked), (0, 0));
    assert_eq!(timers.pending(), KEEP);

    // Cancel one more, stop: the rest come back as unfired.
    assert!(keep[0].cancel());
    assert_eq!(next_event(&rx).kind, Kind::Cancelled);
    assert_eq!(timers.pending(), KEEP - 1, "pending() drops at the winning cancel");
    assert_eq!(timers.stop().unwrap().len(), KEEP - 1);
    let stats = timers.stats();
    assert_eq!(stats.scheduled, (FIRE + CANCEL + KEEP) as u64);
    assert_eq!(stats.expired, FIRE as u64);
    assert_eq!(stats.cancelled, CANCEL as u64 + 1);
    assert_eq!(stats.unfired, KEEP as u64 - 1);
    assert_eq!(stats.pending, 0);
    assert_eq!(timers.pending(), 0);
}

#[test]
fn pending_follows_each_step_exactly() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let a = timers.schedule(FAR, ChanTask::new(0, &tx)).unwrap();
    assert_eq!(timers.pending(), 1);
    let _b = timers.schedule(FAR, ChanTask::new(1, &tx)).unwrap();
    assert_eq!(timers.pending(), 2);
    // Not due before the reset below, however slow the machine (a reset of a timeout that
    // fired fails).
    let c = timers.schedule(Duration::from_secs(60), ChanTask::new(2, &tx)).unwrap();
    assert!(c.reset(FAR));
    assert_eq!(timers.pending(), 3, "a reset changes no count");
    assert!(c.reset(Duration::from_millis(1)));
    assert_eq!(next_event(&rx).id, 2);
    assert_eq!(timers.pending(), 2, "pending() drops when the timeout expires");
    assert!(a.cancel());
    assert_eq!(timers.pending(), 1, "pending() drops at the winning cancel, not at a later tick");
    assert!(!a.cancel());
    assert_eq!(timers.pending(), 1);
    assert_eq!(timers.stats().pending, 1);
}

#[test]
fn rejected_schedules_are_counted_but_not_scheduled() {
    let timers = TimerService::builder().shards(1).max_pending_per_shard(1).build().unwrap();
    timers.schedule(FAR, || ()).unwrap();
    for _ in 0..5 {
        assert!(matches!(timers.schedule(FAR, || ()), Err(ScheduleError::Rejected(_))));
    }
    let stats = timers.stats();
    assert_eq!((stats.scheduled, stats.rejected, stats.pending), (1, 5, 1));
}

#[test]
fn an_idle_service_makes_no_wakeups() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(timers.stats().wakeups, 0, "a service with nothing scheduled must not wake up");
}

#[test]
fn a_far_future_timeout_makes_no_wakeups() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    timers.schedule(FAR, || ()).unwrap();
    // Filing the timeout may take the one wake-up that brings the arm to the shard.
    std::thread::sleep(Duration::from_millis(50));
    let after_arm = timers.stats().wakeups;
    assert!(after_arm <= 1, "arming one timeout woke the shard {after_arm} times");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(timers.stats().wakeups, after_arm, "a timeout an hour away must not wake the shard now");
    // Duration::MAX, likewise.
    timers.schedule(Duration::MAX, || ()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let after_arm = timers.stats().wakeups;
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(timers.stats().wakeups, after_arm);
}

#[test]
fn arms_later_than_the_next_deadline_do_not_wake_the_shard() {
    // docs/protocols.md §4: a producer wakes a sleeping shard only for an earlier deadline.
    let timers = TimerService::builder().shards(1).build().unwrap();
    timers.schedule(Duration::from_secs(2), || ()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let before = timers.stats().wakeups;
    for _ in 0..100 {
        timers.schedule(Duration::from_secs(5), || ()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(timers.stats().wakeups, before, "arming later timeouts woke the shard");
    assert_eq!(timers.pending(), 101);
    // They were not lost on the way: stop() finds every one.
    assert_eq!(timers.stop().unwrap().len(), 101);
}

#[test]
fn wakeups_are_counted_when_the_shard_sleeps_and_wakes() {
    // The counterpart of the idle tests: the counter does count, so a 0 above means something.
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    for id in 0..3 {
        timers.schedule(Duration::from_millis(10), ChanTask::new(id, &tx)).unwrap();
        next_event(&rx);
    }
    assert!(timers.stats().wakeups >= 1);
}

/// Arms `left` more links of a chain, each a timeout due now whose task arms the next, then
/// says so on `done`.
fn chain(timers: TimerService, left: u32, done: mpsc::Sender<()>) {
    if left == 0 {
        done.send(()).unwrap();
        return;
    }
    let t = timers.clone();
    timers.schedule(Duration::ZERO, move || chain(t, left - 1, done)).unwrap();
}

/// A task that arms a timeout due now on its own shard files it straight into the wheel, and
/// the shard looks at its wheel again before it sleeps: a chain of 100 such arms fires in the
/// wake-up that began it. A shard that went to sleep until a tick already past would wake at
/// once, a wake-up (and a system call) a link.
#[test]
fn a_chain_of_arms_due_now_on_the_shards_own_thread_fires_in_one_wakeup() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let t = timers.clone();
    timers.schedule(Duration::from_millis(20), move || chain(t, 100, tx)).unwrap();
    rx.recv_timeout(Duration::from_secs(30)).expect("the chain ended");
    let stats = timers.stats();
    assert_eq!(stats.expired, 101);
    // One to file the first arm, one at its deadline, and a few to spare for a sleep that
    // ends before its tick has begun.
    assert!(stats.wakeups <= 10, "{} wake-ups for a chain of 100 links due at once", stats.wakeups);
}
