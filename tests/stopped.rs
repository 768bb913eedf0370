//! The futures on a stopped service: never early, never a panic, never a hang. A `Sleep`,
//! `timeout` or `Interval` whose service stops before its deadline waits on the overflow
//! timer and completes at its deadline when awaited (the `try_` forms return `Stopped`),
//! under each executor; one whose deadline has passed completes at once. And a `Sleep`
//! awaited on one of its own service's shard threads panics instead of hanging it (a bug in
//! the caller, the one panic left).

use shardwheel::{Elapsed, Stopped, TimerService};
use std::any::Any;
use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

mod common;
use common::{PATIENCE, WakeCount, wait_until};

fn service() -> TimerService {
    TimerService::builder().shards(2).pin_threads(false).build().expect("valid settings")
}

/// The text of a panic's payload.
fn message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => payload.downcast::<&str>().map(|s| s.to_string()).unwrap_or_default(),
    }
}

/// Runs `fut` to completion on futures-executor's `block_on`; the panic message if it
/// panicked.
fn block_on_catching<F: Future>(fut: F) -> Result<F::Output, String> {
    catch_unwind(AssertUnwindSafe(|| futures_executor::block_on(fut))).map_err(message)
}

/// Runs `fut` as a task on a 2-worker tokio runtime; the panic message if it panicked.
fn tokio_catching<F: Future<Output: Send + 'static> + Send + 'static>(fut: F) -> Result<F::Output, String> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    rt.block_on(async { tokio::spawn(fut).await.map_err(|e| message(e.into_panic())) })
}

/// Asserts that `outcome` completed, no panic, and not before `deadline`.
fn assert_on_time<T: std::fmt::Debug>(outcome: Result<T, String>, deadline: Instant, what: &str) -> T {
    let now = Instant::now();
    let value = outcome.unwrap_or_else(|m| panic!("{what}: panicked on a stopped service: {m}"));
    assert!(now >= deadline, "{what}: completed {:?} before its deadline", deadline - now);
    value
}

/// A task that sleeps `each` `times` times in a row, counting each sleep that completed, and
/// returns when the last was due at the earliest.
fn sleeps(
    timers: &TimerService,
    each: Duration,
    times: u32,
    done: &Arc<AtomicUsize>,
) -> impl Future<Output = Instant> + Send + 'static {
    let (timers, done) = (timers.clone(), done.clone());
    async move {
        let start = Instant::now();
        for _ in 0..times {
            timers.sleep(each).await;
            done.fetch_add(1, Ordering::SeqCst);
        }
        start + each * times
    }
}

/// A task that awaits `times` ticks of a `period` interval; returns the first tick's due
/// time and when the last one came.
fn ticking(
    timers: &TimerService,
    period: Duration,
    times: u32,
) -> impl Future<Output = (Instant, Instant)> + Send + 'static {
    let timers = timers.clone();
    async move {
        let mut every = timers.interval(period);
        let first = every.tick().await;
        for _ in 1..times {
            every.tick().await;
        }
        (first, Instant::now())
    }
}

#[test]
fn a_sleep_first_polled_after_stop_completes_at_its_deadline_under_each_executor() {
    let timers = service();
    timers.stop().unwrap();
    let mut sleep = pin!(timers.sleep(Duration::from_secs(1)));
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(sleep.as_mut().try_poll(&mut cx), Poll::Ready(Err(Stopped::new())), "`try_poll` says so");
    assert_eq!(sleep.as_mut().try_poll(&mut cx), Poll::Ready(Err(Stopped::new())), "and stays so");
    assert!(!sleep.is_elapsed(), "a second from now has not come");
    assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Pending, "a poll as a future waits: no panic");
    assert_eq!(timers.stats().overflowed, 1, "on the overflow timer");

    // The loop of sleeps that once panicked at its first poll: each completes, on time.
    let done = Arc::new(AtomicUsize::new(0));
    // Three 15 ms sleeps in a row: done no sooner than 45 ms after the loop began.
    let earliest = Instant::now() + Duration::from_millis(45);
    let due = block_on_catching(sleeps(&timers, Duration::from_millis(15), 3, &done));
    assert!(assert_on_time(due, earliest, "futures-executor") <= Instant::now(), "never early");
    let earliest = Instant::now() + Duration::from_millis(45);
    let due = tokio_catching(sleeps(&timers, Duration::from_millis(15), 3, &done));
    assert!(assert_on_time(due, earliest, "tokio") <= Instant::now(), "never early");
    assert_eq!(done.load(Ordering::SeqCst), 6);
    assert_eq!(timers.stats().overflowed, 7);
    assert_eq!(timers.pending(), 0, "none of them on a shard");
}

#[test]
fn a_sleep_pending_at_stop_is_woken_and_then_completes_at_its_deadline() {
    // Handed back by `stop()`, and ended each way a user can end it: each wakes the sleep,
    // whose next poll waits on the overflow timer (`try_poll` says the service stopped).
    let ways: [fn(shardwheel::Unfired); 3] = [drop, |u| u.into_task().run(), |u| u.into_task().cancelled()];
    for end in ways {
        let timers = service();
        let flag = Arc::new(WakeCount::default());
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        // Far enough out that `stop()` and the end come before it even under valgrind (some
        // fifty times slower: 40 ms once passed first there, and the sleep was rightly done).
        let deadline = Instant::now() + Duration::from_millis(300);
        let mut sleep = pin!(timers.sleep_until(deadline));
        assert!(sleep.as_mut().try_poll(&mut cx).is_pending());
        let mut unfired = timers.stop().unwrap();
        assert_eq!(unfired.len(), 1);
        assert_eq!(flag.woken(), 0);
        end(unfired.pop().unwrap());
        assert_eq!(flag.woken(), 1, "ending the handed-back task wakes the sleep");
        assert_eq!(sleep.as_mut().try_poll(&mut cx), Poll::Ready(Err(Stopped::new())));
        assert!(!sleep.is_elapsed());
        let polled = catch_unwind(AssertUnwindSafe(|| sleep.as_mut().poll(&mut cx))).map_err(message);
        assert_eq!(polled, Ok(Poll::Pending), "a poll after the wake-up waits, no panic");
        assert!(wait_until(|| flag.woken() == 2, PATIENCE), "the overflow timer wakes it");
        assert!(Instant::now() >= deadline, "not before its deadline");
        assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Ready(()));
    }

    // A task awaiting a sleep when the service stops: it completes at its deadline, it
    // neither panics nor hangs. Under tokio, and under futures-executor on a thread of its own.
    let timers = service();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    let deadline = Instant::now() + Duration::from_millis(300);
    let t = timers.clone();
    let task = rt.spawn(async move { t.sleep_until(deadline).await });
    let t = timers.clone();
    let thread = std::thread::spawn(move || block_on_catching(t.sleep_until(deadline)));
    assert!(wait_until(|| timers.pending() == 2, PATIENCE), "both sleeps register");
    drop(timers.stop().unwrap());
    let joined = rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), task).await });
    let joined = joined.expect("the task ends: it does not hang");
    assert_on_time(joined.map_err(|e| message(e.into_panic())), deadline, "tokio");
    assert_on_time(thread.join().unwrap(), deadline, "futures-executor");
}

#[test]
fn a_sleep_whose_deadline_has_passed_completes_after_stop() {
    let timers = service();
    timers.stop().unwrap();
    let past = Instant::now() - Duration::from_millis(50);
    let mut sleep = pin!(timers.sleep_until(past));
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(sleep.as_mut().try_poll(&mut cx), Poll::Ready(Ok(())), "on time: complete");
    assert!(sleep.is_elapsed());
    assert_eq!(block_on_catching(timers.sleep(Duration::ZERO)), Ok(()));
}

#[test]
fn a_timeout_on_a_stopped_service_never_says_elapsed_early() {
    let timers = service();
    timers.stop().unwrap();
    // `timeout(1 h, pending())` once said `Elapsed` at once, then panicked: now it waits for
    // its deadline, on the overflow timer.
    let deadline = Instant::now() + Duration::from_millis(30);
    let t = timers.clone();
    let outcome = block_on_catching(async move { t.timeout_at(deadline, std::future::pending::<()>()).await });
    assert_eq!(assert_on_time(outcome, deadline, "futures-executor"), Err(Elapsed::new()));
    let deadline = Instant::now() + Duration::from_millis(30);
    let t = timers.clone();
    let outcome = tokio_catching(async move { t.timeout_at(deadline, std::future::pending::<()>()).await });
    assert_eq!(assert_on_time(outcome, deadline, "tokio"), Err(Elapsed::new()));
    let mut limited = pin!(timers.timeout(Duration::from_secs(3600), std::future::pending::<()>()));
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(limited.as_mut().try_poll(&mut cx), Poll::Ready(Err(Stopped::new())));
    // The request a stopped timer wraps is not lost: it finishes, and wins.
    let t = timers.clone();
    let request = async move {
        t.timeout(Duration::from_secs(3600), async {
            std::thread::sleep(Duration::from_millis(5));
            tokio::task::yield_now().await;
            "answered"
        })
        .await
    };
    assert_eq!(tokio_catching(request), Ok(Ok("answered")));
    // A future that is ready wins, stopped or not; a deadline already past is on time.
    assert_eq!(block_on_catching(timers.timeout(Duration::from_secs(3600), async { 7 })), Ok(Ok(7)));
    let past = Instant::now() - Duration::from_millis(50);
    assert_eq!(block_on_catching(timers.timeout_at(past, std::future::pending::<()>())), Ok(Err(Elapsed::new())));
}

#[test]
fn an_interval_after_stop_ticks_on_time_and_try_tick_says_stopped() {
    let timers = service();
    let t = timers.clone();
    // The select loop that ticked 19 times in 100 ms at a 5 ms period after the stop: a
    // branch that wakes the task every millisecond, beside the interval. `try_tick` ends it.
    let outcome = tokio_catching(async move {
        let mut every = t.interval(Duration::from_millis(5));
        every.tick().await;
        every.tick().await;
        drop(t.stop().unwrap());
        let mut ticks = 0;
        let mut wakes = 0;
        let end = tokio::time::Instant::now() + Duration::from_millis(100);
        loop {
            tokio::select! {
                tick = every.try_tick() => match tick {
                    Ok(_) => ticks += 1,
                    Err(stopped) => return Ok::<_, Stopped>((ticks, wakes, stopped)),
                },
                _ = tokio::time::sleep(Duration::from_millis(1)) => {
                    wakes += 1;
                    if tokio::time::Instant::now() >= end {
                        return Ok((ticks, wakes, Stopped::new()));
                    }
                }
            }
        }
    });
    let (ticks, _wakes, _) = outcome.expect("no panic").expect("infallible");
    assert_eq!(ticks, 0, "`try_tick` ticked after the stop");

    // Awaited plainly, the ticks go on after the stop, paced: never faster than the period.
    let period = Duration::from_millis(5);
    // The first tick is due at once; the fifth four periods later.
    let earliest = Instant::now() + period * 4;
    let (first, last) = assert_on_time(block_on_catching(ticking(&timers, period, 5)), earliest, "futures-executor");
    assert!(last >= first + period * 4, "four periods after the first tick: {:?}", last - first);
    let earliest = Instant::now() + period * 4;
    let (first, last) = assert_on_time(tokio_catching(ticking(&timers, period, 5)), earliest, "tokio");
    assert!(last >= first + period * 4, "four periods after the first tick: {:?}", last - first);
    let mut every = timers.interval(Duration::from_secs(1));
    assert_eq!(futures_executor::block_on(every.try_tick()), Err(Stopped::new()));
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..100 {
        assert_eq!(every.try_poll_tick(&mut cx), Poll::Ready(Err(Stopped::new())), "no spinning, no ticking");
    }
}

#[test]
fn a_sleep_awaited_on_its_own_shard_thread_panics_instead_of_hanging() {
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let t = timers.clone();
    timers
        .schedule(Duration::ZERO, move || {
            let outcome = block_on_catching(t.sleep(Duration::from_millis(5)));
            tx.send(outcome).unwrap();
        })
        .unwrap();
    let outcome = rx.recv_timeout(Duration::from_secs(10)).expect("the task ends: the shard does not hang");
    let m = outcome.expect_err("the sleep cannot complete on its own shard's thread");
    assert!(m.contains("shard thread"), "{m}");
    // A sleep already due, polled once there without waiting (`now_or_never`), completes.
    let (tx, rx) = mpsc::channel();
    let t = timers.clone();
    timers
        .schedule(Duration::ZERO, move || {
            let mut due = pin!(t.sleep(Duration::ZERO));
            let polled = catch_unwind(AssertUnwindSafe(|| due.as_mut().poll(&mut Context::from_waker(Waker::noop()))));
            tx.send(polled.map_err(message)).unwrap();
        })
        .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), Ok(Poll::Ready(())));
    // The shard goes on: a sleep from another thread still completes.
    futures_executor::block_on(timers.sleep(Duration::from_millis(2)));
    // A sleep of another service is fine there.
    let other = service();
    let (tx, rx) = mpsc::channel();
    timers
        .schedule(Duration::ZERO, move || {
            tx.send(block_on_catching(other.sleep(Duration::from_millis(2)))).unwrap();
        })
        .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(Ok(())));
}

/// `Sleep` is still usable behind `Pin<&mut>` for the fallible form in a `poll_fn`.
#[test]
fn try_poll_composes_with_poll_fn() {
    let timers = service();
    let mut sleep = Box::pin(timers.sleep(Duration::from_millis(2)));
    let start = Instant::now();
    let outcome = futures_executor::block_on(poll_fn(|cx| Pin::as_mut(&mut sleep).try_poll(cx)));
    assert_eq!(outcome, Ok(()));
    assert!(start.elapsed() >= Duration::from_millis(2), "never early");
}

/// A sleep that overflowed for a full service, then the service stopped: `try_poll` says so
/// (it said `Pending` on), and awaiting it still completes at its deadline.
#[test]
fn try_poll_reports_a_stop_for_a_sleep_that_had_overflowed() {
    let timers = TimerService::builder().shards(1).max_pending_per_shard(1).pin_threads(false).build().unwrap();
    let _holder = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut sleep = pin!(timers.sleep(Duration::from_secs(3600)));
    assert_eq!(sleep.as_mut().try_poll(&mut cx), Poll::Pending, "full: it overflows, no error");
    assert_eq!(timers.stats().overflowed, 1);
    drop(timers.stop().unwrap());
    assert_eq!(sleep.as_mut().try_poll(&mut cx), Poll::Ready(Err(Stopped::new())));
    let deadline = Instant::now() + Duration::from_millis(100);
    let mut short = pin!(timers.sleep_until(deadline));
    assert_eq!(short.as_mut().try_poll(&mut cx), Poll::Ready(Err(Stopped::new())));
    futures_executor::block_on(short.as_mut());
    assert!(Instant::now() >= deadline, "awaited, it completes at its deadline");
}

/// `Stopped` reads as what happened, and travels as any error does (`Box<dyn Error>`, `?`).
#[test]
fn stopped_says_what_happened() {
    let boxed: Box<dyn std::error::Error + Send + Sync> = Stopped::new().into();
    assert_eq!(boxed.to_string(), "the timer service was stopped before the deadline: the wait can never end on time");
    assert_eq!(boxed.downcast_ref::<Stopped>(), Some(&Stopped::new()));
}

/// `try_poll_tick` after a stop says `Stopped` and never ticks, with the next tick not yet
/// due, due at that very instant, or past due: a paused clock stops the service a nanosecond
/// before the tick, exactly at it (its sleep fired as the clock got there), and a nanosecond
/// after.
#[test]
fn try_tick_after_a_stop_says_stopped_before_at_and_after_the_tick() {
    let period = Duration::from_millis(10);
    let nano = Duration::from_nanos(1);
    for (by, when) in [(period - nano, "before"), (period, "at"), (period + nano, "after")] {
        let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
        let mut every = timers.interval(period);
        let mut cx = Context::from_waker(Waker::noop());
        let first = match every.try_poll_tick(&mut cx) {
            Poll::Ready(Ok(first)) => first,
            other => panic!("{when}: the first tick is due at once, got {other:?}"),
        };
        assert_eq!(every.try_poll_tick(&mut cx), Poll::Pending, "{when}: the second waits");
        clock.advance(by);
        assert_eq!(clock.now(), first + by);
        drop(timers.stop().unwrap());
        assert_eq!(every.try_poll_tick(&mut cx), Poll::Ready(Err(Stopped::new())), "{when} the tick");
    }
}
