//! The ambient calls (`shardwheel::time`): tokio's `sleep`, `sleep_until`, `timeout`,
//! `timeout_at`, `interval`, `interval_at` and `Instant`, on the process-wide default
//! service: never early, deadlines as asked, resets through `Pin`, every missed-tick
//! behaviour, under tokio's runtimes and a plain executor. (Counted laziness and `configure`
//! are in `ambient_lazy.rs` and `ambient_configure.rs`: each needs a process of its own.)

use shardwheel::time::{self, Duration, Instant, MissedTickBehavior};
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_sleep_completes_at_its_deadline_never_before() {
    futures_executor::block_on(async {
        for delay in [0, 1, 3, 10, 25] {
            let start = Instant::now();
            let sleep = time::sleep(ms(delay));
            assert!(sleep.deadline() >= start + ms(delay), "the deadline counts from the call");
            // The TSC estimate may run ahead of `Instant::now()` by tens of microseconds.
            assert!(sleep.deadline() <= Instant::now() + ms(delay) + Duration::from_micros(100));
            sleep.await;
            assert!(start.elapsed() >= ms(delay), "{delay} ms: woke after {:?}", start.elapsed());
        }
    });
}

#[test]
fn sleep_until_keeps_the_deadline_as_asked() {
    futures_executor::block_on(async {
        let deadline = Instant::now() + Duration::from_nanos(7_654_321);
        let sleep = time::sleep_until(deadline);
        assert_eq!(sleep.deadline(), deadline, "exact, not rounded to the tick");
        assert!(!sleep.is_elapsed(), "not elapsed before its first poll");
        sleep.await;
        assert!(Instant::now() >= deadline);
        // A deadline already past completes by the next tick boundary.
        time::sleep_until(Instant::now() - ms(50)).await;
    });
}

/// The deadline counts from the call, not from the first poll (as tokio's): a sleep first
/// polled after its delay has passed completes at once.
#[test]
fn the_deadline_counts_from_the_call() {
    let sleep = time::sleep(ms(30));
    let called = Instant::now();
    assert!(sleep.deadline() <= called + ms(30) + Duration::from_micros(100), "the TSC's lead at most");
    assert!(!sleep.is_elapsed(), "never polled");
    std::thread::sleep(ms(30));
    let polled = Instant::now();
    futures_executor::block_on(sleep);
    // By the next tick boundary or so, not 30 ms from the poll (slack for a loaded machine).
    assert!(polled.elapsed() < ms(25), "waited {:?} from its first poll", polled.elapsed());
}

#[test]
fn a_sleep_resets_through_pin_earlier_and_later_and_after_completing() {
    futures_executor::block_on(async {
        let sleep = time::sleep(Duration::from_secs(3600));
        tokio::pin!(sleep);
        // Registered (pending), then moved earlier.
        assert!(futures_poll(sleep.as_mut()).is_pending());
        let sooner = Instant::now() + ms(5);
        sleep.as_mut().reset(sooner);
        assert_eq!(sleep.deadline(), sooner);
        sleep.as_mut().await;
        assert!(Instant::now() >= sooner);
        assert!(sleep.is_elapsed());
        // Completed, then moved later: waits again.
        let later = Instant::now() + ms(10);
        sleep.as_mut().reset(later);
        assert!(!sleep.is_elapsed());
        sleep.as_mut().await;
        assert!(Instant::now() >= later);
        // Registered, then moved later: one compare-and-swap, still never early.
        let far = Instant::now() + ms(3);
        sleep.as_mut().reset(far);
        assert!(futures_poll(sleep.as_mut()).is_pending());
        let farther = Instant::now() + ms(15);
        sleep.as_mut().reset(farther);
        sleep.as_mut().await;
        assert!(Instant::now() >= farther, "fired at the first deadline, not the reset one");
    });
}

fn futures_poll<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(std::task::Waker::noop()))
}

#[test]
fn a_timeout_gives_the_output_or_elapsed_never_early() {
    futures_executor::block_on(async {
        assert_eq!(time::timeout(ms(50), async { 7 }).await, Ok(7));
        let start = Instant::now();
        let outcome = time::timeout(ms(20), std::future::pending::<()>()).await;
        assert_eq!(outcome, Err(time::error::Elapsed::new()));
        assert!(start.elapsed() >= ms(20), "elapsed early: {:?}", start.elapsed());
        let deadline = Instant::now() + ms(10);
        assert!(time::timeout_at(deadline, std::future::pending::<()>()).await.is_err());
        assert!(Instant::now() >= deadline);
        // The future wins over a deadline that has passed if it is ready when polled.
        let late = time::timeout_at(Instant::now() - ms(1), async { "ready" });
        assert_eq!(late.await, Ok("ready"));
        // A future that finishes after a wait, before its deadline.
        let quick = time::timeout(Duration::from_secs(60), time::sleep(ms(5)));
        assert_eq!(quick.await, Ok(()));
    });
}

#[test]
fn a_timeout_hands_back_its_future() {
    let mut limited = time::timeout(ms(10), async { 3 });
    let _: &mut _ = limited.get_mut();
    let _: &_ = limited.get_ref();
    assert_eq!(futures_executor::block_on(limited.into_inner()), 3);
}

#[test]
fn an_interval_ticks_on_its_grid_the_first_at_once() {
    futures_executor::block_on(async {
        let start = Instant::now();
        let mut every = time::interval(ms(15));
        assert_eq!(every.period(), ms(15));
        assert_eq!(every.missed_tick_behavior(), MissedTickBehavior::Burst, "tokio's default");
        for behavior in [MissedTickBehavior::Delay, MissedTickBehavior::Skip, MissedTickBehavior::Burst] {
            every.set_missed_tick_behavior(behavior);
            assert_eq!(every.missed_tick_behavior(), behavior, "as set");
        }
        let first = every.tick().await;
        assert!(first >= start && first <= Instant::now());
        for k in 1..=4 {
            let due = every.tick().await;
            assert_eq!(due, first + ms(15) * k, "tick {k} on the grid");
            assert!(Instant::now() >= due, "tick {k} early");
        }
        let at = Instant::now() + ms(7);
        let mut later = time::interval_at(at, ms(10));
        assert_eq!(later.tick().await, at);
        assert!(Instant::now() >= at);
    });
}

/// On a paused clock (exact instants): falls `stall` behind after the first tick, then
/// takes the next ticks as soon as each is due; returns the first tick and the three after
/// the late one, with the clock's time when the late one was taken.
fn behind(behavior: MissedTickBehavior, period: Duration, stall: Duration) -> (Instant, Instant, [Instant; 3]) {
    futures_executor::block_on(async {
        time::pause();
        time::auto_advance(false);
        let mut every = time::interval(period);
        every.set_missed_tick_behavior(behavior);
        let first = every.tick().await;
        time::advance(stall).await;
        let taken = Instant::now();
        assert_eq!(every.tick().await, first + period, "the late tick is the one that was due");
        let mut after = [first; 3];
        for tick in &mut after {
            // Move the clock to the next tick's deadline, a millisecond at a time.
            loop {
                let mut next = pin!(every.tick());
                if let Poll::Ready(due) = next.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop())) {
                    assert!(Instant::now() >= due, "never early");
                    *tick = due;
                    break;
                }
                time::advance(ms(1)).await;
            }
        }
        time::resume();
        (first, taken, after)
    })
}

#[test]
fn burst_takes_the_missed_ticks_at_once() {
    let p = ms(20);
    let (first, _, after) = behind(MissedTickBehavior::Burst, p, ms(75));
    assert_eq!(after, [first + p * 2, first + p * 3, first + p * 4], "every missed tick, on the grid");
}

#[test]
fn delay_moves_the_grid_to_a_period_after_the_late_tick() {
    let p = ms(20);
    let (_, taken, after) = behind(MissedTickBehavior::Delay, p, ms(75));
    assert_eq!(after, [taken + p, taken + p * 2, taken + p * 3], "a period after the late tick, then on");
}

#[test]
fn skip_drops_the_missed_ticks_and_stays_on_the_grid() {
    let p = ms(20);
    let (first, _, after) = behind(MissedTickBehavior::Skip, p, ms(75));
    // Taken at 75 ms: 40 and 60 are dropped, 80 is the first of the grid still ahead.
    assert_eq!(after, [first + p * 4, first + p * 5, first + p * 6]);
}

/// tokio's threshold, exactly: a tick taken up to 5 ms after it was due is on time (the next
/// one on the grid, whatever the behaviour); one taken later is behind.
#[test]
fn a_tick_taken_up_to_5_ms_late_is_on_time() {
    let p = ms(20);
    for behavior in [MissedTickBehavior::Delay, MissedTickBehavior::Skip, MissedTickBehavior::Burst] {
        // Taken at due + 5 ms: on time.
        let (first, _, after) = behind(behavior, p, p + ms(5));
        assert_eq!(after[0], first + p * 2, "{behavior:?}: on the grid");
    }
    // Taken at due + 6 ms: behind, and the behaviour decides.
    let (first, taken, after) = behind(MissedTickBehavior::Delay, p, p + ms(6));
    assert_eq!(after[0], taken + p, "Delay: a period after the late tick");
    assert_ne!(after[0], first + p * 2);
    let (first, _, after) = behind(MissedTickBehavior::Skip, p, p + ms(6));
    assert_eq!(after[0], first + p * 2, "Skip: the next of the grid still ahead");
}

#[test]
fn an_interval_resets() {
    futures_executor::block_on(async {
        let mut every = time::interval(Duration::from_secs(60));
        every.tick().await;
        every.reset_immediately();
        let start = Instant::now();
        every.tick().await;
        assert!(start.elapsed() < Duration::from_secs(30), "due at once");
        let asked = Instant::now() + ms(5);
        every.reset_at(asked);
        assert_eq!(every.tick().await, asked);
        let before = Instant::now();
        every.reset_after(ms(8));
        let due = every.tick().await;
        assert!(due >= before + ms(8) && Instant::now() >= due);
        let before = Instant::now();
        every.reset();
        assert!(time::timeout(ms(50), every.tick()).await.is_err(), "a period from now: a minute");
        assert!(before.elapsed() >= ms(50));
    });
}

/// As tokio's: a zero period is a bug in the caller, said at once.
#[test]
#[should_panic(expected = "`period` must be non-zero.")]
fn a_zero_period_panics_as_tokios() {
    let _ = time::interval(Duration::ZERO);
}

/// A period under the tick is kept as asked (the ticks come no faster than the tick).
#[test]
fn a_period_under_the_tick_is_kept() {
    let every = time::interval(Duration::from_nanos(10));
    assert_eq!(every.period(), Duration::from_nanos(10));
}

/// Under tokio's multi-thread runtime, each task on a worker of its own: 200 tasks each
/// sleep and time out; all complete, none early.
#[test]
fn under_a_tokio_runtime_every_task_completes_on_time() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..200u64)
            .map(|i| {
                tokio::spawn(async move {
                    let start = Instant::now();
                    let delay = ms(1 + i % 20);
                    time::sleep(delay).await;
                    assert!(start.elapsed() >= delay);
                    let start = Instant::now();
                    assert!(time::timeout(delay, std::future::pending::<()>()).await.is_err());
                    assert!(start.elapsed() >= delay);
                    assert_eq!(time::timeout(delay, async { i }).await, Ok(i));
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

#[test]
fn instants_behave_as_tokios() {
    let a = Instant::now();
    let b = a + ms(5);
    assert_eq!(b - a, ms(5));
    assert_eq!(a - b, Duration::ZERO, "saturating");
    assert_eq!(b.checked_duration_since(a), Some(ms(5)));
    assert_eq!(a.checked_duration_since(b), None);
    assert_eq!(a.saturating_duration_since(b), Duration::ZERO);
    assert_eq!(b.duration_since(a), ms(5));
    assert_eq!(b.checked_sub(ms(5)), Some(a));
    assert_eq!(a.checked_add(ms(5)), Some(b));
    let mut c = a;
    c += ms(2);
    c -= ms(1);
    assert_eq!(c, a + ms(1));
    assert_eq!(Instant::from_std(a.into_std()), a);
    let std: std::time::Instant = a.into();
    assert_eq!(Instant::from(std), a);
    assert!(format!("{a:?}").contains("Instant"));
}
