//! Deadlines at and beyond the wheel's horizon: no panic, no overflow, no firing; pending
//! until cancelled or stopped.

mod common;

use common::{ChanTask, Kind, next_event};
use shardwheel::{TimeoutState, TimerService};
use std::sync::mpsc::{self, TryRecvError};
use std::time::{Duration, Instant};

const TEN_YEARS: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

#[test]
fn far_deadlines_neither_panic_nor_fire_and_stay_pending() {
    // The default tick, and the smallest (whose horizon is shortest: about 8 days).
    for tick in [Duration::from_millis(1), shardwheel::Builder::MIN_TICK] {
        let timers = TimerService::builder().shards(1).tick(tick).build().unwrap();
        let (tx, rx) = mpsc::channel();
        let now = Instant::now();
        let far = [
            timers.schedule(Duration::MAX, ChanTask::new(0, &tx)).unwrap(),
            timers.schedule(TEN_YEARS, ChanTask::new(1, &tx)).unwrap(),
            timers.schedule_at(now + TEN_YEARS, ChanTask::new(2, &tx)).unwrap(),
            timers.schedule_on(0, Duration::from_secs(u64::MAX / 2), ChanTask::new(3, &tx)).unwrap(),
        ];
        // A near timeout on the same shard: once it fired, the shard has been through its
        // wheel at least once with the far ones in it.
        timers.schedule(Duration::from_millis(20), ChanTask::new(9, &tx)).unwrap();
        assert_eq!(next_event(&rx).id, 9, "a far timeout fired (tick {tick:?})");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty, "a far timeout fired (tick {tick:?})");
        for t in &far {
            assert_eq!(t.state(), TimeoutState::Pending);
            assert!(t.deadline() >= now + TEN_YEARS, "deadline() {:?} is not far", t.deadline());
        }
        assert_eq!(timers.pending(), far.len());
    }
}

#[test]
fn far_timeouts_are_cancellable() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let max = timers.schedule(Duration::MAX, ChanTask::new(0, &tx)).unwrap();
    let ten = timers.schedule_at(Instant::now() + TEN_YEARS, ChanTask::new(1, &tx)).unwrap();
    assert!(max.cancel());
    assert!(ten.cancel());
    assert_eq!(next_event(&rx).kind, Kind::Cancelled);
    assert_eq!(next_event(&rx).kind, Kind::Cancelled);
    assert_eq!(timers.pending(), 0);
    assert_eq!(timers.stats().cancelled, 2);
}

#[test]
fn far_timeouts_are_returned_by_stop() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let max = timers.schedule_on(0, Duration::MAX, ChanTask::new(0, &tx)).unwrap();
    let ten = timers.schedule_on(1, TEN_YEARS, ChanTask::new(1, &tx)).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    let unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 2);
    assert!(max.is_cancelled() && ten.is_cancelled());
    for u in unfired {
        u.into_task().run();
    }
    let mut ids = [next_event(&rx).id, next_event(&rx).id];
    ids.sort();
    assert_eq!(ids, [0, 1]);
}

#[test]
fn resets_to_and_from_far_deadlines() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    // Pushed out to never: does not fire at the old deadline (far enough off that the reset
    // comes first on a slow machine too; waited out below).
    const OLD: Duration = Duration::from_millis(50);
    let old = Instant::now() + OLD;
    let pushed = timers.schedule(OLD, ChanTask::new(0, &tx)).unwrap();
    assert!(pushed.reset(Duration::MAX));
    // Pulled in from never: fires.
    let pulled = timers.schedule(Duration::MAX, ChanTask::new(1, &tx)).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let asked = Instant::now() + Duration::from_millis(20);
    assert!(pulled.reset(Duration::from_millis(20)));
    let event = next_event(&rx);
    assert_eq!(event.id, 1);
    assert!(event.at >= asked);
    // Past the old deadline by 30 ms.
    std::thread::sleep((old + Duration::from_millis(30)).saturating_duration_since(Instant::now()));
    assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
    assert!(pushed.is_pending());
    assert!(pushed.reset_at(Instant::now() + TEN_YEARS));
    assert!(pushed.cancel());
}
