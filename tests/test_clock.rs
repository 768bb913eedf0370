//! A paused clock (`Builder::build_paused`, `TestClock`): timeouts, sleeps, `timeout` and
//! intervals move only when the test advances the clock, fire exactly at the first tick at or
//! after their deadline (never before), and an hour passes in no time. Under tokio and under
//! futures-executor.

use shardwheel::{Elapsed, Missed, TimerService};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

#[test]
fn timeouts_fire_exactly_when_the_clock_reaches_them_and_never_before() {
    let (timers, clock) = TimerService::builder().shards(2).pin_threads(false).build_paused().unwrap();
    let real = Instant::now();
    let fired = Arc::new(AtomicUsize::new(0));
    // Deadlines 1 ms .. 1000 ms apart, on both shards.
    for ms in 1..=1000u64 {
        let fired = fired.clone();
        timers
            .schedule_on((ms % 2) as usize, Duration::from_millis(ms), move || {
                fired.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    for step in 1..=1000u64 {
        clock.advance(Duration::from_millis(1));
        assert_eq!(fired.load(Ordering::SeqCst) as u64, step, "after {step} ms exactly {step} have fired");
    }
    // An hour of timer time, at once.
    let (tx, rx) = mpsc::channel();
    timers.schedule(Duration::from_secs(3600), move || tx.send(()).unwrap()).unwrap();
    clock.advance(Duration::from_secs(3599));
    assert!(rx.try_recv().is_err(), "not a second early");
    clock.advance(Duration::from_secs(1));
    assert_eq!(rx.try_recv(), Ok(()));
    assert!(real.elapsed() < Duration::from_secs(60), "an hour and a second passed in real time");
    assert_eq!(clock.elapsed(), Duration::from_secs(3601));
    assert_eq!(timers.pending(), 0);
}

#[test]
fn deadlines_are_on_the_paused_timeline() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let at = clock.now() + Duration::from_secs(10);
    let (tx, rx) = mpsc::channel();
    let timeout = timers.schedule_at(at, move || tx.send(()).unwrap()).unwrap();
    assert_eq!(timeout.deadline(), at);
    let reset = clock.now() + Duration::from_secs(20);
    assert!(timeout.reset_at(reset));
    clock.advance(Duration::from_secs(10));
    assert!(rx.try_recv().is_err(), "moved later");
    clock.advance(Duration::from_secs(10));
    assert_eq!(rx.try_recv(), Ok(()));
    assert_eq!(clock.now(), reset);
}

#[test]
fn a_sleep_and_a_timeout_under_futures_executor_and_tokio() {
    let (timers, clock) = TimerService::builder().shards(2).pin_threads(false).build_paused().unwrap();
    // Polled by hand: pending until the clock reaches the deadline.
    let mut sleep = pin!(timers.sleep(Duration::from_secs(60)));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(sleep.as_mut().try_poll(&mut cx).is_pending());
    clock.advance(Duration::from_secs(59));
    assert!(sleep.as_mut().try_poll(&mut cx).is_pending(), "59 s: not yet");
    clock.advance(Duration::from_secs(1));
    assert_eq!(sleep.as_mut().try_poll(&mut cx), Poll::Ready(Ok(())));

    // futures-executor on a thread of its own, the test advancing.
    let t = timers.clone();
    let limited = std::thread::spawn(move || {
        futures_executor::block_on(t.timeout(Duration::from_secs(5), std::future::pending::<()>()))
    });
    while timers.pending() == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    clock.advance(Duration::from_secs(5));
    assert_eq!(limited.join().unwrap(), Err(Elapsed::new()));

    // A tokio task sleeping an hour, each task on a worker of its own.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let t = timers.clone();
    let start = clock.now();
    let c = clock.clone();
    let task = rt.spawn(async move {
        t.sleep(Duration::from_secs(3600)).await;
        c.now()
    });
    while timers.pending() == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    clock.advance(Duration::from_secs(1800));
    assert!(!task.is_finished());
    clock.advance(Duration::from_secs(1800));
    let woke_at = rt.block_on(task).unwrap();
    assert_eq!(woke_at - start, Duration::from_secs(3600));
}

#[test]
fn an_interval_ticks_on_the_paused_clock() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let mut every = timers.interval(Duration::from_secs(1));
    let start = futures_executor::block_on(every.tick());
    assert_eq!(start, clock.now(), "the first tick at once");
    let mut cx = Context::from_waker(Waker::noop());
    for k in 1..=5u32 {
        assert!(every.poll_tick(&mut cx).is_pending());
        clock.advance(Duration::from_millis(999));
        assert!(every.poll_tick(&mut cx).is_pending(), "tick {k}: a millisecond early");
        clock.advance(Duration::from_millis(1));
        assert_eq!(every.poll_tick(&mut cx), Poll::Ready(start + Duration::from_secs(u64::from(k))));
    }
}

/// Each way to restart an interval's schedule, on the paused clock: the next tick is due
/// where the reset says (`reset`: a period from now; `reset_after`: `after` from now;
/// `reset_at`: at; `reset_immediately`: now), not a millisecond before, and the one after
/// it a period later.
#[test]
fn an_interval_restarts_where_each_reset_says() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let period = Duration::from_secs(1);
    let mut cx = Context::from_waker(Waker::noop());
    type Reset = fn(&mut shardwheel::Interval, Instant) -> Instant;
    let resets: [(&str, Reset); 4] = [
        ("reset", |every, now| {
            every.reset();
            now + Duration::from_secs(1)
        }),
        ("reset_after", |every, now| {
            every.reset_after(Duration::from_millis(300));
            now + Duration::from_millis(300)
        }),
        ("reset_at", |every, now| {
            every.reset_at(now + Duration::from_millis(1700));
            now + Duration::from_millis(1700)
        }),
        ("reset_immediately", |every, now| {
            every.reset_immediately();
            now
        }),
    ];
    for (name, reset) in resets {
        let mut every = timers.interval(period);
        assert_eq!(futures_executor::block_on(every.tick()), clock.now(), "{name}: the first tick at once");
        // Off the interval's own grid (a period from its first tick), so that a reset that
        // changed nothing is seen.
        clock.advance(Duration::from_millis(450));
        let due = reset(&mut every, clock.now());
        if let Some(early) = (due - clock.now()).checked_sub(Duration::from_millis(1)) {
            clock.advance(early);
            assert!(every.poll_tick(&mut cx).is_pending(), "{name}: a millisecond early");
            clock.advance(Duration::from_millis(1));
        }
        assert_eq!(every.poll_tick(&mut cx), Poll::Ready(due), "{name}");
        assert!(every.poll_tick(&mut cx).is_pending(), "{name}: one tick at a time");
        clock.advance(period - Duration::from_millis(1));
        assert!(every.poll_tick(&mut cx).is_pending(), "{name}: the next tick a millisecond early");
        clock.advance(Duration::from_millis(1));
        assert_eq!(every.poll_tick(&mut cx), Poll::Ready(due + period), "{name}: the next tick a period on");
    }
}

#[test]
fn a_series_runs_once_per_period_of_paused_time() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let series = timers
        .schedule_repeating(Duration::from_secs(10), Duration::from_secs(10), Missed::Skip, move || {
            r.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    for k in 1..=6 {
        clock.advance(Duration::from_secs(10));
        assert_eq!(runs.load(Ordering::SeqCst), k);
    }
    assert!(series.cancel());
    clock.advance(Duration::from_secs(100));
    assert_eq!(runs.load(Ordering::SeqCst), 6);
}

#[test]
fn advancing_a_stopped_or_dropped_service_only_moves_the_clock() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    timers.schedule(Duration::from_secs(1), || {}).unwrap();
    assert_eq!(timers.stop().unwrap().len(), 1);
    clock.advance(Duration::from_secs(2));
    drop(timers);
    clock.advance(Duration::from_secs(2));
    assert_eq!(clock.elapsed(), Duration::from_secs(4));
    assert!(format!("{clock:?}").contains("TestClock"));
}

/// A timeout due at a tick the shard has already caught up with (`Duration::ZERO`,
/// `schedule_at(now)`, an advance shorter than a tick), and one armed due now on another shard
/// by a task that `advance` made run: each has fired and run when `advance` returns.
#[test]
fn advance_waits_for_what_is_due_now_even_within_a_tick_and_across_shards() {
    let (timers, clock) = TimerService::builder().shards(2).pin_threads(false).build_paused().unwrap();
    clock.advance(Duration::from_millis(5));
    let (tx, rx) = mpsc::channel();
    let t = tx.clone();
    timers.schedule(Duration::ZERO, move || t.send("zero").unwrap()).unwrap();
    clock.advance(Duration::ZERO);
    assert_eq!(rx.try_recv(), Ok("zero"));
    let t = tx.clone();
    timers.schedule_at(clock.now(), move || t.send("now").unwrap()).unwrap();
    clock.advance(Duration::from_micros(999));
    assert_eq!(rx.try_recv(), Ok("now"));
    // A chain: a task on shard 0 arms a timeout due now on shard 1, whose task arms one on
    // shard 0 again.
    let (t, s) = (tx.clone(), timers.clone());
    timers
        .schedule_on(0, Duration::from_millis(1), move || {
            let s2 = s.clone();
            s.schedule_on(1, Duration::ZERO, move || {
                s2.schedule_on(0, Duration::ZERO, move || t.send("chain").unwrap()).unwrap();
            })
            .unwrap();
        })
        .unwrap();
    // (The clock stands at 5.999 ms: a 1 ms delay is due at tick 7.)
    clock.advance(Duration::from_millis(1));
    assert!(rx.try_recv().is_err(), "never early");
    clock.advance(Duration::from_micros(1));
    let got = rx.try_recv();
    assert_eq!(got, Ok("chain"));
}

/// A task that arms a timeout due now on its own shard files it straight into the wheel,
/// not through the mailbox: the shard looks at its wheel again after its tasks have run, and
/// `advance` waits for that timeout's task too. Its task takes 50 ms, so an `advance` that
/// returned after the first task alone would find nothing sent.
#[test]
fn advance_waits_for_a_timeout_a_task_arms_due_now_on_its_own_shard() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let (tx, rx) = mpsc::channel();
    let s = timers.clone();
    timers
        .schedule(Duration::from_millis(1), move || {
            s.schedule(Duration::ZERO, move || {
                std::thread::sleep(Duration::from_millis(50));
                tx.send("armed by a task, due now, on its own shard").unwrap();
            })
            .unwrap();
        })
        .unwrap();
    clock.advance(Duration::from_millis(2));
    assert_eq!(rx.try_recv(), Ok("armed by a task, due now, on its own shard"));
}

/// `advance` from a task on one of the service's shard threads panics at once, with the
/// reason, before it moves the clock; it used to wait for its own shard forever, and the test
/// thread's `advance` with it. Run on a thread of its own so that a hang fails the test.
#[test]
fn advance_from_a_task_on_a_shard_panics_at_once_and_never_hangs() {
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (timers, clock) = TimerService::builder().shards(2).pin_threads(false).build_paused().unwrap();
        let (tx, rx) = mpsc::channel();
        let inner = clock.clone();
        timers
            .schedule(Duration::from_secs(1), move || {
                let caught = std::panic::catch_unwind(|| inner.advance(Duration::from_secs(5)));
                let message = caught.err().and_then(|p| p.downcast::<String>().ok()).map(|m| *m);
                tx.send(message).unwrap();
            })
            .unwrap();
        clock.advance(Duration::from_secs(1));
        let message = rx.try_recv().expect("the task ran before advance returned");
        let message = message.expect("advance from a shard's task panics");
        assert!(message.contains("TestClock::advance called from a timer task"), "{message}");
        assert_eq!(clock.elapsed(), Duration::from_secs(1), "the refused advance did not move the clock");
        assert_eq!(timers.stats().failed_shards, 0);
        done_tx.send(()).unwrap();
    });
    assert_eq!(done_rx.recv_timeout(Duration::from_secs(60)), Ok(()), "advance hung (or the check failed)");
}

/// The paused clock's arithmetic at its extremes: an `advance` past the end of its counter
/// (584 years of nanoseconds) stops there, never wraps round to the past, and the shards
/// still answer (a pending timeout fires, nothing hangs).
#[test]
fn advance_saturates_at_the_end_of_the_clock_and_never_wraps() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let (tx, rx) = mpsc::channel();
    timers.schedule(Duration::from_secs(3600), move || tx.send(()).unwrap()).unwrap();
    let start = clock.now();
    clock.advance(Duration::from_nanos(u64::MAX - 10));
    assert_eq!(rx.try_recv(), Ok(()), "what was due fired");
    let before = clock.now();
    clock.advance(Duration::from_nanos(20));
    assert_eq!(clock.elapsed(), Duration::from_nanos(u64::MAX), "stopped at the end, not wrapped");
    assert!(clock.now() >= before, "time never goes back");
    clock.advance(Duration::MAX);
    assert_eq!(clock.elapsed(), Duration::from_nanos(u64::MAX));
    assert_eq!(clock.now() - start, Duration::from_nanos(u64::MAX));
    drop(timers.stop().unwrap());
}

/// On a paused clock a timeout's lateness is exact: the time of the turn that fires it less
/// the start of its deadline's tick. One fired as the clock reaches it is under a
/// microsecond late; two with different deadlines fired by one turn (the clock jumps past
/// both) each count their own, 8 ms and 3 ms, in the buckets that hold them.
#[test]
fn lateness_is_the_turns_time_less_each_deadline() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let ms = Duration::from_millis;
    timers.schedule(ms(10), || ()).unwrap();
    clock.advance(ms(10));
    timers.schedule(ms(2), || ()).unwrap(); // due at 12 ms
    timers.schedule(ms(7), || ()).unwrap(); // due at 17 ms
    clock.advance(ms(10)); // one turn at 20 ms fires both
    assert_eq!(timers.pending(), 0);
    let late = timers.stats().lateness;
    let counted: Vec<_> = late.buckets().filter(|&(_, n)| n > 0).collect();
    let us = Duration::from_micros;
    assert_eq!(
        counted,
        [(us(1), 1), (us(4096), 1), (us(8192), 1)],
        "0 µs, 3 ms (under 4,096 µs) and 8 ms (under 8,192 µs)"
    );
    // `Debug` shows the count and the buckets that hold something, those alone.
    let shown = format!("{late:?}");
    assert!(shown.starts_with("Lateness { count: 3,"), "{shown}");
    assert!(shown.ends_with("buckets: [(1µs, 1), (4.096ms, 1), (8.192ms, 1)] }"), "{shown}");
}

/// A timeout reset to later is not fired at the deadline the wheel filed it at: the shard
/// finds the later deadline when that slot comes due, files it again there (the lazy
/// re-arm), and fires it then, once.
#[test]
fn a_timeout_reset_later_fires_at_its_new_deadline_not_its_old() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let ms = Duration::from_millis;
    let fired = Arc::new(AtomicUsize::new(0));
    let counted = fired.clone();
    let timeout = timers
        .schedule(ms(10), move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    clock.advance(ms(1)); // the shard has filed it at 10 ms
    assert!(timeout.reset(ms(99)), "due at 100 ms now");
    clock.advance(ms(9));
    assert_eq!(fired.load(Ordering::SeqCst), 0, "fired at its old deadline");
    clock.advance(ms(89));
    assert_eq!(fired.load(Ordering::SeqCst), 0, "fired before its new deadline");
    clock.advance(ms(1));
    assert_eq!(fired.load(Ordering::SeqCst), 1, "fired at its new deadline");
    assert!(timeout.is_expired());
}

/// A paused clock's shard sleeps until the clock is advanced (or it is woken), never for the
/// real time until its next deadline: with a timeout a millisecond ahead on the paused clock
/// and the clock left alone, real time passes and the shard does not wake (a timed park
/// would wake it about every millisecond, each time to find the clock where it was).
#[test]
fn a_paused_shard_sleeps_until_advanced_however_near_its_next_deadline() {
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().unwrap();
    let (tx, rx) = mpsc::channel();
    let timeout = timers.schedule(Duration::from_millis(1), move || tx.send(()).unwrap()).unwrap();
    // Let the shard take the arm and go to sleep.
    std::thread::sleep(Duration::from_millis(50));
    let before = timers.stats().wakeups;
    std::thread::sleep(Duration::from_millis(200));
    let woken = timers.stats().wakeups - before;
    assert!(woken <= 1, "{woken} wake-ups in 200 ms of real time with the paused clock still");
    assert!(timeout.is_pending() && rx.try_recv().is_err(), "nothing fires until the clock moves");
    clock.advance(Duration::from_millis(1));
    assert_eq!(rx.try_recv(), Ok(()), "then it fires at once");
}
