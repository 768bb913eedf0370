//! `Sleep` and `timeout`: never early, resets, cancellation by drop, the waker hand-over,
//! under several executors (after `stop()`: `tests/stopped.rs`).

use shardwheel::{Elapsed, Sleep, TimerService};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

mod common;
use common::{PATIENCE, WakeCount as Flag, wait_until};

fn service() -> TimerService {
    TimerService::builder().shards(2).pin_threads(false).build().expect("valid settings")
}

fn poll_with(sleep: &mut Sleep, flag: &Arc<Flag>) -> Poll<()> {
    let waker = Waker::from(flag.clone());
    Pin::new(sleep).poll(&mut Context::from_waker(&waker))
}

/// Sleeps of many lengths, all at once on one task each; none completes before its
/// deadline, and each completes within a generous bound after it. The tasks only record
/// what they saw; the checks run here, so an early wake-up fails with its numbers at once
/// (an assert inside a spawned task would only show as the tasks never finishing).
async fn never_early(timers: TimerService, spawn: impl Fn(Pin<Box<dyn Future<Output = ()> + Send>>)) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let n: usize = 40;
    for i in 0..n {
        let timers = timers.clone();
        let seen = seen.clone();
        spawn(Box::pin(async move {
            let delay = Duration::from_millis(1 + (i as u64 * 7) % 60);
            let start = Instant::now();
            timers.sleep(delay).await;
            let took = start.elapsed();
            seen.lock().unwrap().push((delay, took));
        }));
    }
    let start = Instant::now();
    loop {
        // A copy, so that a failed check poisons nothing the tasks still use.
        let now_seen = seen.lock().unwrap().clone();
        for &(delay, took) in &now_seen {
            assert!(took >= delay, "woke after {took:?}, asked {delay:?}");
        }
        if now_seen.len() == n {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "sleeps did not complete: {} of {n}", now_seen.len());
        // Yield to the executor with a sleep of our own.
        timers.sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn never_early_under_tokio_current_thread() {
    let timers = service();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, never_early(timers.clone(), |f| drop(tokio::task::spawn_local(f))));
    assert_eq!(timers.pending(), 0);
}

#[test]
fn never_early_under_tokio_multi_thread() {
    let timers = service();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let handle = rt.handle().clone();
    rt.block_on(never_early(timers.clone(), move |f| drop(handle.spawn(f))));
    assert_eq!(timers.pending(), 0);
}

#[test]
fn never_early_under_async_executor() {
    let timers = service();
    let ex = Arc::new(async_executor::Executor::new());
    let spawner = ex.clone();
    futures_lite::future::block_on(ex.run(never_early(timers.clone(), move |f| spawner.spawn(f).detach())));
    assert_eq!(timers.pending(), 0);
}

#[test]
fn never_early_under_block_on() {
    let timers = service();
    for ms in [0, 1, 2, 5, 13] {
        let delay = Duration::from_millis(ms);
        let start = Instant::now();
        futures_executor::block_on(timers.sleep(delay));
        assert!(start.elapsed() >= delay);
        let deadline = Instant::now() + delay;
        futures_executor::block_on(timers.sleep_until(deadline));
        assert!(Instant::now() >= deadline);
    }
    assert_eq!(timers.pending(), 0);
}

#[test]
fn timeouts_both_ways() {
    let timers = service();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    rt.block_on(async {
        // The future wins: its output, and the deadline is cancelled.
        let fast = timers.timeout(Duration::from_secs(10), timers.sleep(Duration::from_millis(5)));
        assert_eq!(fast.await, Ok(()));
        // The deadline wins, not before it.
        let start = Instant::now();
        let slow = timers.timeout(Duration::from_millis(30), timers.sleep(Duration::from_secs(10)));
        assert_eq!(slow.await, Err(Elapsed::new()));
        assert!(start.elapsed() >= Duration::from_millis(30));
        // A future ready at once never registers a deadline.
        assert_eq!(timers.timeout(Duration::ZERO, async { 5 }).await, Ok(5));
    });
    assert_eq!(timers.pending(), 0, "both sleeps of the lost race were cancelled");
}

/// The inner future wins after the deadline registered: the deadline is cancelled at once,
/// not when the `WithTimeout` is dropped, and it wakes nothing later.
#[test]
fn a_timeout_whose_future_wins_lets_go_of_its_deadline() {
    let timers = service();
    let flag = Arc::new(Flag::default());
    let mut polls = 0;
    let inner = std::future::poll_fn(move |_| {
        polls += 1;
        if polls == 1 { Poll::Pending } else { Poll::Ready(7) }
    });
    // Long enough that the second poll comes first on a slow machine too; waited out below.
    let mut limited = Box::pin(timers.timeout(Duration::from_millis(100), inner));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(limited.as_mut().poll(&mut cx).is_pending());
    assert_eq!(timers.pending(), 1, "the deadline registered");
    assert_eq!(limited.as_mut().poll(&mut cx), Poll::Ready(Ok(7)));
    assert_eq!(timers.pending(), 0, "the deadline outlived the race it lost");
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(flag.woken(), 0, "a finished timeout woke its task for nothing");
    assert_eq!(timers.stats().expired, 0);
    drop(limited);
}

#[test]
fn a_panic_inside_a_timeout_reaches_the_awaiting_task() {
    let timers = service();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let t = timers.clone();
    let joined = rt.block_on(rt.spawn(async move {
        t.timeout(Duration::from_secs(10), async {
            t.sleep(Duration::from_millis(2)).await;
            panic!("inside the timed future");
        })
        .await
    }));
    assert!(joined.expect_err("the task panicked").is_panic());
    // The shards are fine, and the deadline was cancelled as the panic unwound.
    assert_eq!(timers.stats().panicked, 0);
    assert!(wait_until(|| timers.pending() == 0, PATIENCE));
    futures_executor::block_on(timers.sleep(Duration::from_millis(1)));
}

#[test]
fn resets_later_earlier_and_after_firing() {
    let timers = service();
    let flag = Arc::new(Flag::default());
    // Registered, then pushed later: completes at the new deadline, not the old.
    let mut sleep = timers.sleep(Duration::from_millis(10));
    assert!(poll_with(&mut sleep, &flag).is_pending());
    let later = Instant::now() + Duration::from_millis(60);
    sleep.reset(later);
    assert!(sleep.deadline() >= later);
    futures_executor::block_on(&mut sleep);
    assert!(Instant::now() >= later, "a reset to later was not kept");
    assert!(sleep.is_elapsed());
    // Fired, then reset: waits again.
    let again = Instant::now() + Duration::from_millis(15);
    sleep.reset(again);
    assert!(!sleep.is_elapsed());
    futures_executor::block_on(&mut sleep);
    assert!(Instant::now() >= again);
    // Registered far out, then pulled earlier: completes early enough.
    let mut far = timers.sleep(Duration::from_secs(60));
    assert!(poll_with(&mut far, &flag).is_pending());
    let start = Instant::now();
    far.reset(start + Duration::from_millis(10));
    futures_executor::block_on(&mut far);
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(10) && took < Duration::from_secs(5), "took {took:?}");
    // Reset before the first poll: only the deadline moves.
    let mut idle = timers.sleep(Duration::from_secs(60));
    let target = Instant::now() + Duration::from_millis(3);
    idle.reset(target);
    assert!(idle.deadline() >= target && idle.deadline() < target + timers.tick() * 2);
    let start = Instant::now();
    futures_executor::block_on(&mut idle);
    assert!(Instant::now() >= target, "early");
    assert!(start.elapsed() < Duration::from_secs(5), "waited for the old deadline");
    assert_eq!(timers.pending(), 0);
}

#[test]
fn dropping_cancels_and_pending_goes_back_to_zero() {
    let timers = service();
    let flag = Arc::new(Flag::default());
    let made: Vec<Sleep> = (0..100).map(|i| timers.sleep(Duration::from_secs(30 + i))).collect();
    assert_eq!(timers.pending(), 0, "a sleep registers on its first poll, not when made");
    let mut polled = made;
    for s in &mut polled {
        assert!(poll_with(s, &flag).is_pending());
    }
    assert_eq!(timers.pending(), 100);
    // Dropped on another thread than the one that polled them.
    std::thread::spawn(move || drop(polled)).join().unwrap();
    assert_eq!(timers.pending(), 0);
    let stats = timers.stats();
    assert_eq!((stats.cancelled, stats.expired), (100, 0));
    assert_eq!(flag.woken(), 0, "a cancelled sleep wakes nothing");
}

#[test]
fn polled_from_two_tasks_in_turn_wakes_the_latest_waker() {
    let timers = service();
    let (a, b) = (Arc::new(Flag::default()), Arc::new(Flag::default()));
    // Long enough that the three polls come first on a slow machine too.
    let mut sleep = timers.sleep(Duration::from_millis(150));
    assert!(poll_with(&mut sleep, &a).is_pending());
    assert!(poll_with(&mut sleep, &a).is_pending(), "the same waker: kept");
    assert_eq!(timers.stats().scheduled, 1, "the same waker is stored once");
    assert!(poll_with(&mut sleep, &b).is_pending());
    assert_eq!(timers.pending(), 1, "the old registration was handed over, not added to");
    assert!(wait_until(|| b.woken() == 1, PATIENCE), "the latest waker was not woken");
    assert_eq!(a.woken(), 0, "the earlier waker is not woken");
    assert!(poll_with(&mut sleep, &b).is_ready());
    // And under tokio, a sleep moved from one task to another.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    rt.block_on(async {
        let mut sleep = timers.sleep(Duration::from_millis(30));
        let first = tokio::spawn(async move {
            // Polled once by this task, which then ends: its waker is stored and dropped.
            std::future::poll_fn(|cx| {
                assert!(Pin::new(&mut sleep).poll(cx).is_pending());
                Poll::Ready(())
            })
            .await;
            // Handed back in a tuple, so as not to look like a forgotten `.await`.
            (sleep,)
        });
        let (sleep,) = first.await.unwrap();
        let start = Instant::now();
        tokio::spawn(sleep).await.unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
    });
}

#[test]
fn debug_names_the_phase() {
    let timers = service();
    let mut sleep = timers.sleep(Duration::from_secs(1));
    assert!(format!("{sleep:?}").contains("idle"));
    let flag = Arc::new(Flag::default());
    assert!(poll_with(&mut sleep, &flag).is_pending());
    assert!(format!("{sleep:?}").contains("registered"));
    assert!(format!("{:?}", timers.timeout(Duration::from_secs(1), async {})).starts_with("WithTimeout"));
}

/// `Debug` tells a sleep that ended on its clock ("done") from one its service's `stop()`
/// ended before its deadline ("stopped").
#[test]
fn debug_tells_done_from_stopped() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut done = Box::pin(timers.sleep(Duration::from_millis(10)));
    clock.advance(Duration::from_millis(10));
    assert_eq!(done.as_mut().try_poll(&mut cx), Poll::Ready(Ok(())));
    let shown = format!("{done:?}");
    assert!(shown.contains("\"done\""), "{shown}");
    let mut cut = Box::pin(timers.sleep(Duration::from_secs(10)));
    timers.stop().unwrap();
    assert!(matches!(cut.as_mut().try_poll(&mut cx), Poll::Ready(Err(_))));
    let shown = format!("{cut:?}");
    assert!(shown.contains("\"stopped\""), "{shown}");
}

/// A sleep whose cell `stop()` took back is not elapsed before its deadline and is once the
/// deadline has passed (`is_elapsed` reads the clock for a cell the shard cancelled), and
/// `try_poll` agrees with it either side. On a paused clock, so that "passed" is exact.
#[test]
fn a_sleep_stop_took_back_is_elapsed_once_its_deadline_passes() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let mut sleep = Box::pin(timers.sleep(Duration::from_secs(10)));
    let mut later = Box::pin(timers.sleep(Duration::from_secs(10)));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(sleep.as_mut().try_poll(&mut cx).is_pending());
    assert!(later.as_mut().try_poll(&mut cx).is_pending());
    assert_eq!(timers.stop().unwrap().len(), 2, "stop takes both cells back");
    assert!(!sleep.is_elapsed(), "taken back before its deadline: not elapsed");
    assert!(!later.is_elapsed());
    assert!(matches!(sleep.as_mut().try_poll(&mut cx), Poll::Ready(Err(_))), "stopped before its deadline");
    clock.advance(Duration::from_secs(10));
    assert!(later.is_elapsed(), "its deadline has passed: elapsed, stopped or not");
    assert_eq!(later.as_mut().try_poll(&mut cx), Poll::Ready(Ok(())));
}
