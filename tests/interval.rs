//! `Interval`: ticks on the grid, never early, and each `Missed` policy after a stall of the
//! task that awaits it.

use shardwheel::{Missed, TimerService};
use std::time::{Duration, Instant};

fn service() -> TimerService {
    TimerService::builder().shards(1).pin_threads(false).build().expect("valid settings")
}

/// Long enough that a loaded machine's hiccups (tens of ms) do not make an on-time tick
/// late by a whole period.
const PERIOD: Duration = Duration::from_millis(100);

/// One tick taken after the stall, as offsets from the interval's start.
#[derive(Debug, Clone, Copy)]
struct Tick {
    /// When it was due (what `tick` returned).
    due: Duration,
    /// When `tick` was called.
    called: Duration,
    /// When it returned.
    taken: Duration,
}

impl Tick {
    /// It was due already when asked for: it came without waiting on the timer.
    fn at_once(&self) -> bool {
        self.due <= self.called
    }
}

/// The first grid point strictly after `t` (offsets from the start).
fn grid_after(t: Duration) -> Duration {
    PERIOD * (t.as_nanos() / PERIOD.as_nanos() + 1) as u32
}

/// Two ticks, a stall of the awaiting task (3.4 periods, to about 4.4p or later on a loaded
/// machine), then the next `n` ticks. Every tick is checked never early, exactly.
fn after_stall(missed: Missed, n: usize) -> Vec<Tick> {
    let timers = service();
    let mut every = timers.interval(PERIOD);
    every.set_missed(missed);
    assert_eq!(every.missed(), missed, "the policy set is the policy read");
    futures_executor::block_on(async {
        let start = every.tick().await;
        let second = every.tick().await;
        assert!(Instant::now() >= second, "a tick came early");
        // The first tick was taken at once (long before 1p): every policy stays on the grid.
        assert_eq!(second, start + PERIOD);
        std::thread::sleep(PERIOD * 17 / 5);
        let mut ticks = Vec::new();
        for _ in 0..n {
            let called = Instant::now();
            let due = every.tick().await;
            let taken = Instant::now();
            assert!(taken >= due, "a tick came early: due {:?}, taken {:?}", due - start, taken - start);
            ticks.push(Tick { due: due - start, called: called - start, taken: taken - start });
        }
        ticks
    })
}

#[test]
fn burst_takes_every_missed_tick_at_once() {
    let ticks = after_stall(Missed::Burst, 5);
    let p = PERIOD;
    // Every tick on the grid, none skipped, whenever the stall really ended.
    for (k, tick) in ticks.iter().enumerate() {
        assert_eq!(tick.due, p * (k as u32 + 2), "{ticks:?}");
    }
    // The stall ended at 4.4p or later: 2p, 3p and 4p were due by then, and came at once.
    assert!(ticks[..3].iter().all(Tick::at_once), "{ticks:?}");
}

#[test]
fn skip_drops_the_missed_ticks_and_stays_on_the_grid() {
    let ticks = after_stall(Missed::Skip, 3);
    let p = PERIOD;
    assert_eq!(ticks[0].due, 2 * p, "the late tick comes: {ticks:?}");
    assert!(ticks[0].at_once());
    // The next is the first grid point after the late tick was taken (read somewhere
    // between the call and the return): 5p when the stall ended at 4.4p, later if it ended
    // later; 3p and 4p are skipped.
    let (lo, hi) = (grid_after(ticks[0].called), grid_after(ticks[0].taken));
    assert!(ticks[1].due >= lo && ticks[1].due <= hi, "{ticks:?}");
    assert!(ticks[1].due >= 5 * p, "a missed tick came: {ticks:?}");
    // Then on the grid, one period on, unless that one fell behind too.
    if ticks[1].taken < ticks[1].due + p {
        assert_eq!(ticks[2].due, ticks[1].due + p, "{ticks:?}");
    }
    assert_eq!(ticks[2].due.as_nanos() % p.as_nanos(), 0, "off the grid: {ticks:?}");
}

#[test]
fn delay_restarts_the_period_from_the_late_tick() {
    let ticks = after_stall(Missed::Delay, 3);
    let p = PERIOD;
    assert_eq!(ticks[0].due, 2 * p, "the late tick comes: {ticks:?}");
    assert!(ticks[0].at_once());
    // Taken at about 4.4p: the next is a period after it was taken, off the grid.
    assert!(ticks[1].due >= ticks[0].called + p && ticks[1].due <= ticks[0].taken + p, "{ticks:?}");
    // Then a period apart: the new grid, unless that tick fell behind too.
    if ticks[1].taken < ticks[1].due + p {
        assert_eq!(ticks[2].due, ticks[1].due + p, "{ticks:?}");
    } else {
        assert!(ticks[2].due >= ticks[1].called + p, "{ticks:?}");
    }
}

/// Delay moves the grid only after the interval fell behind: ticks taken a little late
/// (but before the next was due) are followed by the next one on the grid, with no drift.
#[test]
fn delay_does_not_drift_while_no_tick_is_behind() {
    let timers = service();
    let mut every = timers.interval(PERIOD);
    every.set_missed(Missed::Delay);
    futures_executor::block_on(async {
        let start = every.tick().await;
        for k in 1..=3u32 {
            let due = every.tick().await;
            assert!(Instant::now() >= due, "a tick came early");
            assert_eq!(due, start + PERIOD * k, "the grid drifted");
            // Take the next tick a quarter period late: late, but not behind.
            std::thread::sleep(PERIOD / 4);
        }
    });
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
        // Burst keeps every tick on the grid however late one is taken on a loaded machine.
        every.set_missed(Missed::Burst);
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

/// `Debug` names the type and shows the period and the policy a user set.
#[test]
fn debug_shows_the_period_and_the_policy() {
    let timers = service();
    let mut every = timers.interval(Duration::from_millis(250));
    every.set_missed(Missed::Delay);
    let shown = format!("{every:?}");
    assert!(shown.starts_with("Interval"), "{shown}");
    assert!(shown.contains("period: 250ms"), "{shown}");
    assert!(shown.contains("missed: Delay"), "{shown}");
}
