#![cfg(loom)]
//! Where a future goes when no shard takes it (`src/future/overflow.rs`), and the graceful
//! stop's refusal (`TimerService::stop_gracefully`, the mailbox's DRAINING bit):
//!
//! - a `Sleep` on a full service waits on the overflow timer; a poll that brings a new waker,
//!   or a drop, races the timer's turn: no wake-up is lost, a replaced waker is never woken
//!   after the poll that replaced it returned `Pending`, and every waker clone is freed;
//! - a schedule racing a graceful stop is refused (its task handed back), or pending (and
//!   then fires, or comes back from the stop): exactly once, nothing lost.
//!
//! The overflow timer's thread is not run under loom: its turn (`fire_due` and the wakes
//! after it) is a model thread of its own (`loom_support::fire_overflow`).

#[path = "harness.rs"]
mod harness;

use harness::{Probe, assert_exactly_once, drop_unfired, flag, model, poll, woken};
use shardwheel::loom_support::{advance_clock, fire_overflow, overflow_len};
use shardwheel::{ScheduleError, TimerService};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// A one-shard service that holds one timeout, and holds one already: every sleep overflows.
/// The mocked clock is frozen, so that the one it holds never comes due (the shard's sleep
/// would move the clock to it) and makes room.
fn full() -> (TimerService, shardwheel::Timeout) {
    shardwheel::loom_support::freeze_clock();
    let timers = TimerService::builder().shards(1).tick(harness::TICK).max_pending_per_shard(1).build().unwrap();
    let holder = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
    (timers, holder)
}

/// A poll with a new waker ∥ the overflow timer's turn: the poll sees the firing (`Ready`),
/// or its waker is the one woken (and the replaced one never is, after it).
#[test]
fn overflow_poll_with_a_new_waker_races_the_timers_turn() {
    model("overflow: poll storing a new waker ∥ the timer's turn", || {
        let (timers, holder) = full();
        let (a, b) = (flag(), flag());
        let mut sleep = timers.sleep(Duration::from_millis(5));
        assert!(poll(&mut sleep, &a).is_pending(), "overflows: the shard is full");
        assert_eq!(overflow_len(), 1);
        // The timer's turn comes with the deadline: the service's clock passes it first (the
        // real clock's time is the thread's; the mocked one must be moved by hand).
        let turn = loom::thread::spawn(|| {
            advance_clock(Duration::from_millis(10));
            fire_overflow(true)
        });
        match poll(&mut sleep, &b) {
            Poll::Ready(()) => {}
            Poll::Pending => {
                while woken(&b) == 0 {
                    loom::thread::yield_now();
                }
                assert_eq!(woken(&a), 0, "the replaced waker was woken");
                assert!(poll(&mut sleep, &b).is_ready(), "woken, but not complete");
            }
        }
        assert_eq!(turn.join().unwrap(), 1);
        drop(sleep);
        assert_eq!(overflow_len(), 0);
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (1, 1), "a waker clone outlived its entry");
        holder.cancel();
        drop(timers.stop().unwrap());
    });
}

/// A sleep dropped on another thread ∥ the timer's turn: the entry is woken or removed, not
/// both, and its waker freed exactly once.
#[test]
fn overflow_drop_races_the_timers_turn() {
    model("overflow: drop ∥ the timer's turn", || {
        let (timers, holder) = full();
        let a = flag();
        let mut sleep = timers.sleep(Duration::from_millis(5));
        assert!(poll(&mut sleep, &a).is_pending());
        assert_eq!(
            (overflow_len(), timers.stats().overflowed, timers.pending()),
            (1, 1, 1),
            "overflows: the shard is full"
        );
        let dropper = loom::thread::spawn(move || drop(sleep));
        advance_clock(Duration::from_millis(10));
        let fired = fire_overflow(true);
        dropper.join().unwrap();
        assert_eq!(woken(&a), fired, "woken only if the turn took it first");
        assert_eq!(overflow_len(), 0);
        assert_eq!(Arc::strong_count(&a), 1, "the waker was freed");
        holder.cancel();
        drop(timers.stop().unwrap());
    });
}

/// A schedule ∥ a graceful stop (no grace: it stops at once once the drain is set): refused
/// with its task handed back, or accepted and then fired or handed back by the stop, exactly
/// once either way.
#[test]
fn schedule_races_a_graceful_stop() {
    model("graceful stop: schedule ∥ stop_gracefully", || {
        let timers = harness::service();
        let (probe, counts) = Probe::new();
        let t = timers.clone();
        let producer = loom::thread::spawn(move || match t.schedule(Duration::ZERO, probe) {
            Ok(_) => 0,
            Err(ScheduleError::Shutdown(task)) => {
                drop(task);
                1
            }
            Err(e) => panic!("refused with {e}"),
        });
        let unfired = drop_unfired(timers.stop_gracefully(Duration::ZERO).unwrap());
        let refused = producer.join().unwrap();
        if refused == 1 {
            assert_eq!((counts.runs(), unfired), (0, 0), "refused, and yet it ran or came back");
            assert_eq!(counts.drops(), 1, "the task handed back, dropped once");
        } else {
            assert_exactly_once(&counts, 0, unfired);
        }
        assert_eq!(timers.pending(), 0);
    });
}
