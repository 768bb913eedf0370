//! `Sleep`'s unit tests: its size and traits, and a failed shard's refusal.

use super::{Sleep, WakeTask};
use std::mem::size_of;

fn assert_traits<T: std::future::Future<Output = ()> + Send + Sync + Unpin>() {}

/// The polling thread's home shard failed (its driver died): the sleep registers on the
/// next shard that runs, round from home; with every shard failed, it waits on the overflow
/// timer and completes at its deadline, no panic.
#[test]
fn a_sleep_refused_by_a_failed_shard_registers_on_the_next() {
    use crate::TimerService;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    let timers = TimerService::builder().shards(3).build().unwrap();
    let home = timers.route();
    let poll_once = |sleep: &mut Sleep| {
        let mut cx = Context::from_waker(Waker::noop());
        std::pin::Pin::new(sleep).poll(&mut cx)
    };
    let shard_of = |sleep: &Sleep| match &sleep.phase {
        super::Phase::Armed(timeout) => timeout.shard.shard().index,
        _ => panic!("not registered"),
    };
    let mut sleep = timers.sleep(Duration::from_secs(30));
    assert_eq!(poll_once(&mut sleep), Poll::Pending);
    assert_eq!(shard_of(&sleep), home, "its own shard first");
    for failed in 1..3 {
        timers.shard_at((home + failed - 1) % 3).fail();
        let mut sleep = timers.sleep(Duration::from_secs(30));
        assert_eq!(poll_once(&mut sleep), Poll::Pending);
        assert_eq!(shard_of(&sleep), (home + failed) % 3, "the next that runs, round from home");
    }
    drop(sleep);
    timers.shard_at((home + 2) % 3).fail();
    let deadline = std::time::Instant::now() + Duration::from_millis(20);
    let mut sleep = timers.sleep_until(deadline);
    assert_eq!(poll_once(&mut sleep), Poll::Pending, "no shard runs: no panic");
    assert!(matches!(sleep.phase, super::Phase::Overflow { .. }), "on the overflow timer");
    assert_eq!(timers.stats().overflowed, 1);
    futures_executor::block_on(&mut sleep);
    assert!(std::time::Instant::now() >= deadline, "never early");
}

#[test]
fn sleep_is_send_sync_unpin_and_small() {
    assert_traits::<Sleep>();
    assert_eq!(size_of::<Sleep>(), 48);
    assert_eq!(size_of::<WakeTask>(), 16);
}

/// `stop()` closes its shards one after another: a sleep whose cell the first shard's final
/// drain took back, polled from a thread whose home is a shard not closed yet, ends as on a
/// stopped service. It must not register on that shard (and come back from `stop()` twice).
#[test]
fn a_sleep_taken_back_by_a_closing_shard_ends_and_never_registers_again() {
    use crate::{TimeoutState, TimerService};
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};

    let timers = TimerService::builder().shards(2).build().unwrap();
    let home = timers.route();
    let mut sleep = timers.sleep(Duration::from_secs(30));
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(std::pin::Pin::new(&mut sleep).poll(&mut cx), Poll::Pending);
    // What `stop()` does to the first shard it closes: the driver's final drain takes the
    // cell back (it reads cancelled), while the other shard still runs.
    timers.shard_at(home).mailbox.close();
    let until = Instant::now() + Duration::from_secs(30);
    while !matches!(&sleep.phase, super::Phase::Armed(t) if t.state() == TimeoutState::Cancelled) {
        assert!(Instant::now() < until, "the closed shard never took the cell back");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Threads take their home shards in turn: one of the next few has the other shard.
    let mut polled = None;
    for _ in 0..8 {
        let (timers, mut moved) = (timers.clone(), sleep);
        let (back, result) = std::thread::spawn(move || {
            if timers.route() == home {
                return (moved, None);
            }
            let mut cx = Context::from_waker(Waker::noop());
            let result = std::pin::Pin::new(&mut moved).try_poll(&mut cx);
            (moved, Some(result))
        })
        .join()
        .unwrap();
        sleep = back;
        if result.is_some() {
            polled = result;
            break;
        }
    }
    let polled = polled.expect("a thread whose home is the open shard");
    assert!(matches!(polled, Poll::Ready(Err(_))), "the wait ends as stopped, not {polled:?}");
    drop(sleep);
    assert_eq!(timers.stop().unwrap().len(), 1, "the cell comes back once, from the shard that took it");
}
