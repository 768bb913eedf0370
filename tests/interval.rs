//! `Interval`: ticks on the grid, never early, and each `Missed` policy after a stall of the
//! task that awaits it.

use shardwheel::{Missed, TimerService};
use std::time::{Duration, Instant};

fn service() -> TimerService {
    TimerService::builder().shards(1).pin_threads(false).build().expect("valid settings")
}

const PERIOD: Duration = Duration::from_millis(40);

/// Two ticks on time, a stall of the awaiting task (3.4 periods, to about 4.4p), then the next `n` ticks:
/// each one's due instant, and whether it came at once (within half a period of the call).
fn after_stall(missed: Missed, n: usize) -> (Instant, Vec<(Duration, bool)>) {
    let timers = service();
    let mut every = timers.interval(PERIOD);
    every.set_missed(missed);
    futures_executor::block_on(async {
        let start = every.tick().await;
        let second = every.tick().await;
        // Delay counts from when the first tick was taken, a hair after it was due.
        assert!(second >= start + PERIOD && second < start + PERIOD * 5 / 4);
        std::thread::sleep(PERIOD * 17 / 5);
        let mut ticks = Vec::new();
        for _ in 0..n {
            let called = Instant::now();
            let due = every.tick().await;
            let now = Instant::now();
            assert!(now >= due, "a tick came early");
            ticks.push((due - start, now - called < PERIOD / 2));
        }
        (start, ticks)
    })
}

#[test]
fn burst_takes_every_missed_tick_at_once() {
    let (_, ticks) = after_stall(Missed::Burst, 4);
    let p = PERIOD;
    assert_eq!(ticks[..3], [(2 * p, true), (3 * p, true), (4 * p, true)], "{ticks:?}");
    assert_eq!(ticks[3].0, 5 * p, "then back on the grid: {ticks:?}");
}

#[test]
fn skip_drops_the_missed_ticks_and_stays_on_the_grid() {
    let (_, ticks) = after_stall(Missed::Skip, 3);
    let p = PERIOD;
    assert_eq!(ticks[0], (2 * p, true), "the late tick comes at once: {ticks:?}");
    assert_eq!(ticks[1], (5 * p, false), "3p and 4p are skipped: {ticks:?}");
    assert_eq!(ticks[2].0, 6 * p);
}

#[test]
fn delay_restarts_the_period_from_the_late_tick() {
    let (_, ticks) = after_stall(Missed::Delay, 3);
    let p = PERIOD;
    // Each tick counts from when the one before was taken, a hair after it was due.
    assert!(ticks[0].1 && ticks[0].0 >= 2 * p && ticks[0].0 < 2 * p + p / 4, "{ticks:?}");
    // Taken at about 4.4p: the next is a period later, off the grid.
    assert!(ticks[1].0 >= p * 22 / 5 + p && !ticks[1].1, "{ticks:?}");
    assert!(ticks[2].0 >= ticks[1].0 + p, "then a period apart: {ticks:?}");
}

#[test]
fn a_zero_period_is_one_tick_not_a_busy_loop() {
    let timers = service();
    let mut every = timers.interval(Duration::ZERO);
    assert_eq!(every.period(), timers.tick());
    let start = Instant::now();
    futures_executor::block_on(async {
        for _ in 0..6 {
            every.tick().await;
        }
    });
    assert!(start.elapsed() >= timers.tick() * 5, "ticks came faster than one per service tick");
    assert!(timers.stats().expired >= 4, "the ticks waited on the timer");
}

#[test]
fn intervals_under_tokio_and_async_executor() {
    let timers = service();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let t = timers.clone();
    let run = async move {
        let mut every = t.interval(Duration::from_millis(5));
        let start = every.tick().await;
        for k in 1..=4u32 {
            let due = every.tick().await;
            assert_eq!(due, start + Duration::from_millis(5) * k);
            assert!(Instant::now() >= due);
        }
    };
    rt.block_on(rt.spawn(run)).unwrap();
    let ex = async_executor::Executor::new();
    let t = timers.clone();
    futures_lite::future::block_on(ex.run(async move {
        let mut every = t.interval(Duration::from_millis(5));
        every.tick().await;
        every.tick().await;
    }));
    assert_eq!(timers.pending(), 0, "a dropped interval leaves nothing pending");
}

#[test]
fn on_a_stopped_service_an_interval_does_not_spin() {
    let timers = service();
    let mut every = timers.interval(Duration::from_secs(1));
    futures_executor::block_on(every.tick());
    timers.stop().unwrap();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // The next tick is a second away and no timer is left to wait on it: pending, however
    // often it is polled (a loop around `tick` does not spin).
    for _ in 0..100 {
        assert!(every.poll_tick(&mut cx).is_pending());
    }
}
