//! `Sleep`'s unit tests: its size and traits, and a failed shard's refusal.

use super::{Sleep, WakeTask, WakeTaskAt};
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
    let shard_of = |sleep: &Sleep| match sleep.slot.phase() {
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
    assert!(matches!(sleep.slot.phase(), super::Phase::Overflow { .. }), "on the overflow timer");
    assert_eq!(timers.stats().overflowed, 1);
    futures_executor::block_on(&mut sleep);
    assert!(std::time::Instant::now() >= deadline, "never early");
}

#[test]
fn sleep_is_send_sync_unpin_and_small() {
    assert_traits::<Sleep>();
    // The service, the slot's word and the deadline as asked (`slot.rs`).
    assert_eq!(size_of::<Sleep>(), 24);
    assert_eq!(size_of::<Sleep<&'static crate::TimerService>>(), 24);
    // The explicit sleep's cell: the waker alone, with the 24-byte header 40 B (a 48-byte
    // slot); the ambient sleep's keeps the deadline as asked beside it: 48 B, the same slot.
    assert_eq!(size_of::<WakeTask>(), 16);
    assert_eq!(size_of::<WakeTaskAt>(), 24);
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
    while !matches!(sleep.slot.phase(), super::Phase::Armed(t) if t.state() == TimeoutState::Cancelled) {
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

/// A registered sleep that keeps its deadline as asked (the ambient kind, here on a service
/// of the test's own, held `&'static` as the default one is) keeps it in its cell, beside
/// the waker (`slot.rs`), and a reset moves it there while the shard may be taking the
/// waker out: the shard's move-out reads the waker alone (`WakeTask::move_out`), so the
/// two never touch the same bytes (Miri runs this test: a move-out that read the whole task
/// would race the store). Each reset is to a deadline already past (two, in turn), so the
/// shard fires the sleep at once, racing the resets.
#[test]
fn a_reset_racing_the_expiry_keeps_the_deadline_as_asked() {
    use crate::TimerService;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};

    let owned = TimerService::builder().shards(1).pin_threads(false).tick(Duration::from_millis(1)).build().unwrap();
    let raw = Box::into_raw(Box::new(owned));
    // SAFETY: `raw` is a live box, freed below only after the last use of this reference.
    let timers: &'static TimerService = unsafe { &*raw };
    let mut cx = Context::from_waker(Waker::noop());
    let sleep_at = |at: Instant| {
        let clock = timers.clock();
        Sleep::on(timers, clock.deadline_at(at), clock.offset_of(at))
    };
    for _ in 0..if cfg!(miri) { 2 } else { 20 } {
        let start = Instant::now();
        let mut sleep = sleep_at(start + Duration::from_millis(1));
        let mut asked = sleep.at();
        assert_eq!(asked, timers.clock().offset_of(start + Duration::from_millis(1)));
        let mut resets = 0u64;
        while std::pin::Pin::new(&mut sleep).poll(&mut cx).is_pending() {
            let at = start + Duration::from_nanos(resets % 2);
            sleep.reset(at);
            asked = timers.clock().offset_of(at);
            assert_eq!(sleep.at(), asked, "the deadline as asked, where the sleep keeps it now");
            resets += 1;
            assert!(resets < 10_000_000, "the shard never fired the sleep");
        }
        assert!(sleep.is_elapsed());
        assert_eq!(sleep.at(), asked, "kept through the expiry");
        // Done and reset again: it waits anew, its deadline as asked where it is kept then.
        let again = Instant::now() + Duration::from_secs(60);
        sleep.reset(again);
        assert_eq!(sleep.at(), timers.clock().offset_of(again));
        assert_eq!(std::pin::Pin::new(&mut sleep).poll(&mut cx), Poll::Pending);
        assert_eq!(sleep.at(), timers.clock().offset_of(again), "and in the new cell");
    }
    assert_eq!(timers.stop().unwrap().len(), 0, "every sleep let go of its cell");
    // SAFETY: the box made above, through its own pointer; nothing refers to it any more:
    // every sleep is dropped, `timers` is not used again, and the stopped service's threads
    // are joined.
    drop(unsafe { Box::from_raw(raw) });
}
