//! `schedule_repeating`: one handle for a series; never early; each `Missed` policy after a
//! stall of the shard (a long task on the same shard); a panic ends the series and is
//! counted; `stop()` hands the series back once; bad input.

use shardwheel::{Missed, ScheduleError, TimerService};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{PATIENCE, wait_until};

fn one_shard() -> TimerService {
    TimerService::builder().shards(1).pin_threads(false).build().expect("valid settings")
}

/// A closure that records when it runs.
fn recorder() -> (Arc<Mutex<Vec<Instant>>>, impl FnMut() + Send + 'static) {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let out = runs.clone();
    (runs, move || out.lock().unwrap().push(Instant::now()))
}

fn count(runs: &Mutex<Vec<Instant>>) -> usize {
    runs.lock().unwrap().len()
}

#[test]
fn a_series_runs_on_its_grid_until_cancelled() {
    let timers = one_shard();
    let (runs, task) = recorder();
    let period = Duration::from_millis(10);
    let start = Instant::now();
    let handle = timers.schedule_repeating(Duration::from_millis(5), period, Missed::Skip, task).unwrap();
    assert!(handle.is_pending());
    assert!(wait_until(|| count(&runs) >= 5, PATIENCE));
    // Read while a run is under way (fired, successor not yet armed) it is 1: wait for 2.
    assert!(
        wait_until(|| timers.pending() == 2, PATIENCE),
        "a live series counts its handle and its waiting run: {}",
        timers.pending()
    );
    assert!(handle.cancel(), "the first cancel ends the series");
    assert!(!handle.cancel());
    assert!(handle.is_cancelled());
    let ended = count(&runs);
    assert!(wait_until(|| timers.pending() == 0, PATIENCE), "the waiting run was cancelled");
    std::thread::sleep(period * 3);
    assert!(count(&runs) <= ended + 1, "runs went on after cancel (one may have been under way)");
    let runs = runs.lock().unwrap();
    for (k, at) in runs.iter().enumerate() {
        let due = start + Duration::from_millis(5) + period * k as u32;
        assert!(*at >= due, "run {k} came {:?} early", due - *at);
    }
    let stats = timers.stats();
    assert_eq!(stats.scheduled, stats.expired + stats.cancelled + stats.unfired + stats.pending);
}

/// A series with period `P`, first run at once, and a task on the same shard that blocks it
/// from 0.2P to 3.8P; then the clock moves on to 6P. On the paused clock (`build_paused`): the
/// test moves the clock to 3.8P while the task holds the shard, and then a millisecond (a
/// tick) at a time, so that every instant below is exact, whatever the machine's load (on
/// the real clock, a loaded machine made the shard late by more than the margins allowed).
/// Returns the series' start, when the stall ended, and the runs, all read off that clock.
fn after_stall(missed: Missed) -> (Instant, Instant, Vec<Instant>) {
    const P: Duration = Duration::from_millis(50);
    let (timers, clock) = TimerService::builder().shards(1).pin_threads(false).build_paused().expect("valid settings");
    let start = clock.now();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let (out, now) = (runs.clone(), clock.clone());
    let handle =
        timers.schedule_repeating(Duration::ZERO, P, missed, move || out.lock().unwrap().push(now.now())).unwrap();
    let stall_end = Arc::new(Mutex::new(None));
    let stalled = Arc::new(AtomicBool::new(false));
    let (end, now, started) = (stall_end.clone(), clock.clone(), stalled.clone());
    timers
        .schedule(P / 5, move || {
            started.store(true, Ordering::SeqCst);
            // Holds the shard until the test has moved the clock to 3.8P (or, should it never,
            // for PATIENCE: the checks below then fail).
            let give_up = Instant::now() + PATIENCE;
            while now.now() < start + P * 19 / 5 && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(1));
            }
            *end.lock().unwrap() = Some(now.now());
        })
        .unwrap();
    std::thread::scope(|scope| {
        // To 0.2P: the stall starts; this `advance` returns once it is over (it waits for the
        // shard to fire what is due).
        let to_the_stall = scope.spawn(|| clock.advance(P / 5));
        assert!(wait_until(|| stalled.load(Ordering::SeqCst), PATIENCE), "the stall never started");
        // To 3.8P while the task holds the shard: P, 2P and 3P come due, and wait.
        clock.advance(P * 18 / 5);
        to_the_stall.join().unwrap();
    });
    while clock.now() < start + P * 6 {
        clock.advance(Duration::from_millis(1));
    }
    handle.cancel();
    let stall_end = stall_end.lock().unwrap().expect("the stall ran");
    assert_eq!(stall_end, start + P * 19 / 5, "the stall ended when the clock reached 3.8P");
    let runs = runs.lock().unwrap().clone();
    (start, stall_end, runs)
}

#[test]
fn burst_catches_up_back_to_back_after_a_stall() {
    let p = Duration::from_millis(50);
    let (start, stall_end, runs) = after_stall(Missed::Burst);
    let late: Vec<_> = runs.iter().filter(|&&t| t >= stall_end).collect();
    // Due at P, 2P and 3P, all missed: taken one after another as the stall ends.
    assert!(late[..3].iter().all(|&&t| t == stall_end), "not back to back: {:?}", gaps(stall_end, &late));
    // Then back on the grid: 4P, 5P.
    assert_eq!(*late[3], start + p * 4, "{:?}", gaps(stall_end, &late));
    assert_eq!(*late[4], start + p * 5);
}

#[test]
fn skip_drops_the_missed_runs_and_keeps_the_grid_after_a_stall() {
    let p = Duration::from_millis(50);
    let (start, stall_end, runs) = after_stall(Missed::Skip);
    let late: Vec<_> = runs.iter().filter(|&&t| t >= stall_end).collect();
    // The run that was waiting (due at P) comes as the stall ends; 2P and 3P are skipped.
    assert_eq!(*late[0], stall_end, "{:?}", gaps(stall_end, &late));
    // The grid point 4P, not a period after the late run (4.8P).
    assert_eq!(*late[1], start + p * 4, "a skipped run came, or not on the grid: {:?}", gaps(stall_end, &late));
    assert_eq!(*late[2], start + p * 5);
    assert_eq!(runs.len(), 5, "0, the late one, 4P, 5P, 6P: {:?}", gaps(start, &runs.iter().collect::<Vec<_>>()));
}

#[test]
fn delay_waits_a_period_after_the_late_run() {
    let p = Duration::from_millis(50);
    let (_, stall_end, runs) = after_stall(Missed::Delay);
    let late: Vec<_> = runs.iter().filter(|&&t| t >= stall_end).collect();
    assert_eq!(*late[0], stall_end, "{:?}", gaps(stall_end, &late));
    assert_eq!(late[1].duration_since(*late[0]), p, "{:?}", gaps(stall_end, &late));
    assert_eq!(late[2].duration_since(*late[1]), p);
}

fn gaps(from: Instant, runs: &[&Instant]) -> Vec<Duration> {
    runs.iter().map(|t| t.duration_since(from)).collect()
}

#[test]
fn a_run_that_panics_ends_the_series_and_is_counted() {
    let timers = one_shard();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handle = timers
        .schedule_repeating(Duration::ZERO, Duration::from_millis(2), Missed::Burst, move || {
            if counted.fetch_add(1, Ordering::SeqCst) == 2 {
                panic!("the third run fails");
            }
        })
        .unwrap();
    assert!(wait_until(|| handle.is_cancelled(), PATIENCE), "the panic did not end the series");
    assert!(wait_until(|| timers.stats().panicked == 1, PATIENCE));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(runs.load(Ordering::SeqCst), 3, "no run after the panic");
    assert_eq!(timers.pending(), 0);
    assert!(!handle.cancel(), "already over");
    // The shard goes on.
    let (tx, rx) = std::sync::mpsc::channel();
    timers.schedule(Duration::from_millis(1), move || tx.send(()).unwrap()).unwrap();
    rx.recv_timeout(PATIENCE).unwrap();
}

#[test]
fn stop_hands_the_series_back_once() {
    let timers = one_shard();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handle = timers
        .schedule_repeating(Duration::from_secs(60), Duration::from_secs(60), Missed::Skip, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    let mut unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 1, "the series, once");
    assert!(timers.stop().unwrap().is_empty(), "and not again");
    assert!(handle.is_pending(), "the series is the caller's now");
    // Running the handed-back task runs the closure once; the next run is refused.
    unfired.pop().unwrap().into_task().run();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(handle.is_cancelled(), "a refused successor ends the series");
    assert_eq!(timers.pending(), 0);

    // Dropped instead, the series ends too.
    let timers = one_shard();
    let handle =
        timers.schedule_repeating(Duration::from_secs(60), Duration::from_secs(1), Missed::Skip, || {}).unwrap();
    drop(timers.stop().unwrap());
    assert!(handle.is_cancelled());
    assert_eq!(timers.pending(), 0);
    let stats = timers.stats();
    assert_eq!(stats.scheduled, stats.expired + stats.cancelled + stats.unfired + stats.pending);
}

/// A run under way on the shard when `stop()` is called: its successor still reaches
/// `stop()`'s list (the shard files it before its final drain), so the series is handed
/// back once, not ended silently.
#[test]
fn stop_during_a_run_hands_the_series_back_once() {
    let timers = one_shard();
    let (started_tx, started) = std::sync::mpsc::channel();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handle = timers
        .schedule_repeating(Duration::ZERO, Duration::from_secs(60), Missed::Skip, move || {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                started_tx.send(()).unwrap();
                // Still running when `stop()` closes the shard.
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .unwrap();
    started.recv_timeout(PATIENCE).unwrap();
    let mut unfired = timers.stop().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(unfired.len(), 1, "the series, once, even with a run under way");
    assert!(handle.is_pending(), "the series is the caller's now");
    unfired.pop().unwrap().into_task().run();
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the handed-back run runs the closure");
    assert!(handle.is_cancelled(), "its successor is refused: the series ends");
    assert_eq!(timers.pending(), 0);
    let stats = timers.stats();
    assert_eq!(stats.scheduled, stats.expired + stats.cancelled + stats.unfired + stats.pending);
}

/// A handle that was reset ends its series when it expires: the handle's own task ends it
/// (not a cancel), and no run starts after. Twice on one service, and each series' waiting
/// run is let go (nothing pending after).
#[test]
fn a_reset_handle_ends_its_series_when_it_expires() {
    let timers = one_shard();
    for round in 0..2 {
        let (runs, record) = recorder();
        let handle = timers.schedule_repeating(Duration::ZERO, Duration::from_millis(5), Missed::Skip, record).unwrap();
        assert!(wait_until(|| count(&runs) >= 2, PATIENCE), "round {round}: the series runs");
        assert!(handle.reset(Duration::from_millis(30)), "round {round}: the series now ends in 30 ms");
        assert!(wait_until(|| handle.is_expired(), PATIENCE), "round {round}: the handle expires: {handle:?}");
        // The series' waiting run is let go; a run under way then (one at most) may still
        // finish, and none starts after: a dozen periods pass with one more run at most.
        assert!(wait_until(|| timers.pending() == 0, PATIENCE), "round {round}: {} pending", timers.pending());
        let ended = count(&runs);
        std::thread::sleep(Duration::from_millis(60));
        assert!(count(&runs) <= ended + 1, "round {round}: {} runs after the series ended", count(&runs) - ended);
        assert!(!handle.cancel(), "round {round}: an ended series has nothing to cancel");
    }
    assert!(timers.stop().unwrap().is_empty());
}

/// A handle that was reset (the series ends at a deadline) is filed on the shard; `stop()`
/// still hands back the series once: its waiting run, not the handle too.
#[test]
fn stop_hands_a_reset_series_back_once() {
    let timers = one_shard();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handle = timers
        .schedule_repeating(Duration::from_secs(60), Duration::from_secs(60), Missed::Skip, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    // The shard has read the series' arm and sleeps until its first run, a minute out.
    std::thread::sleep(Duration::from_millis(50));
    assert!(handle.reset(Duration::from_secs(3600)), "the series now ends in an hour");
    // The reset's notice is due later than the shard's sleep, so it does not wake the shard
    // (by design: a notice is read before its deadline, `Stats::queued`); this test used to
    // wait for `queued == 0` as if it did, and failed whenever the shard was already asleep.
    // A timeout due now wakes it; the turn that fires it reads the notice (sent before it)
    // too, and files the handle.
    let (tx, rx) = std::sync::mpsc::channel();
    timers.schedule(Duration::ZERO, move || tx.send(()).unwrap()).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(()));
    assert_eq!(timers.stats().queued, 0, "the notice was read with the mail of that turn");
    let mut unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 1, "the series, once: {unfired:?}");
    assert!(handle.is_pending());
    unfired.pop().unwrap().into_task().run();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handed-back run runs the closure");
    assert!(handle.is_cancelled());
    assert_eq!(timers.pending(), 0);
    let stats = timers.stats();
    assert_eq!(stats.scheduled, stats.expired + stats.cancelled + stats.unfired + stats.pending);
}

#[test]
fn a_zero_period_is_one_tick_not_a_busy_loop() {
    let timers = one_shard();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let start = Instant::now();
    let handle = timers
        .schedule_repeating(Duration::ZERO, Duration::ZERO, Missed::Skip, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    handle.cancel();
    let elapsed = start.elapsed();
    let n = runs.load(Ordering::SeqCst);
    let ticks = (elapsed.as_micros() / timers.tick().as_micros()) as usize;
    assert!(n >= 2 && n <= ticks + 2, "{n} runs in {elapsed:?} ({ticks} ticks)");
}

#[test]
fn refused_series_hand_their_task_back() {
    let timers = one_shard();
    timers.stop().unwrap();
    let err = timers.schedule_repeating(Duration::ZERO, Duration::from_millis(1), Missed::Skip, || {}).unwrap_err();
    assert!(matches!(err, ScheduleError::Shutdown(_)));
    // The handle takes the only place: the first run is refused, and nothing is left.
    let full = TimerService::builder().shards(1).max_pending_per_shard(1).build().unwrap();
    let err = full.schedule_repeating(Duration::ZERO, Duration::from_millis(1), Missed::Skip, || {}).unwrap_err();
    assert!(matches!(err, ScheduleError::Rejected(_)));
    assert_eq!(full.pending(), 0);
    let two = TimerService::builder().shards(1).max_pending_per_shard(2).build().unwrap();
    let handle = two.schedule_repeating(Duration::from_secs(1), Duration::from_secs(1), Missed::Skip, || {}).unwrap();
    assert_eq!(two.pending(), 2);
    assert!(handle.cancel());
    assert_eq!(two.pending(), 0);
}

#[test]
fn huge_delays_and_periods_are_not_a_panic() {
    let timers = one_shard();
    let handle = timers.schedule_repeating(Duration::MAX, Duration::MAX, Missed::Burst, || {}).unwrap();
    let soon = timers.schedule_repeating(Duration::ZERO, Duration::MAX, Missed::Skip, || {}).unwrap();
    assert!(wait_until(|| timers.stats().expired == 1, PATIENCE), "the first run of the second series");
    assert!(handle.is_pending() && soon.is_pending());
    let mut every = timers.interval(Duration::MAX);
    futures_executor::block_on(every.tick());
    every.reset();
    assert!(handle.cancel() && soon.cancel());
    assert_eq!(timers.stats().panicked, 0);
}

#[test]
fn dropping_the_service_ends_its_series() {
    let timers = one_shard();
    let handle = timers.schedule_repeating(Duration::ZERO, Duration::from_millis(1), Missed::Skip, || {}).unwrap();
    drop(timers);
    assert!(wait_until(|| handle.is_cancelled(), PATIENCE), "the series outlived its service");
}

/// What `cancel() == true` means for a series, under real threads, many times over: a run
/// that had not started when the cancel ended the series never calls the closure, so after
/// `cancel()` returned `true` the closure is called at most once more (by the run already
/// under way, if any), and never after that call. The series fires every tick (its runs are
/// almost always waiting in the wheel, in the shard's batch, or under way as the cancel
/// lands), from a thread other than the shard's.
#[test]
fn after_cancel_returned_true_no_run_starts_that_had_not() {
    let timers = one_shard();
    for round in 0..200 {
        let returned = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicUsize::new(0));
        let late = Arc::new(AtomicUsize::new(0));
        let (told, called, seen) = (returned.clone(), calls.clone(), late.clone());
        let handle = timers
            .schedule_repeating(Duration::ZERO, Duration::ZERO, Missed::Burst, move || {
                if told.load(Ordering::SeqCst) {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                called.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        // Land the cancel at a different point of a run each round.
        let wait = Duration::from_micros(50 * (round % 40));
        let start = Instant::now();
        while calls.load(Ordering::SeqCst) == 0 || start.elapsed() < wait {
            std::hint::spin_loop();
        }
        assert!(handle.cancel(), "round {round}: the only cancel wins");
        returned.store(true, Ordering::SeqCst);
        let at_cancel = calls.load(Ordering::SeqCst);
        // Several ticks: a run that wrongly started would have called the closure by now.
        std::thread::sleep(timers.tick() * 5);
        let after = calls.load(Ordering::SeqCst);
        assert!(after <= at_cancel + 1, "round {round}: {} calls after cancel() returned true", after - at_cancel);
        assert!(late.load(Ordering::SeqCst) <= 1, "round {round}: more than the run under way saw the cancel");
        assert!(wait_until(|| timers.pending() == 0, PATIENCE), "round {round}: a run of the series is left");
        assert!(
            wait_until(|| Arc::strong_count(&calls) == 1, PATIENCE),
            "round {round}: the closure outlived its series"
        );
    }
    assert!(timers.stop().unwrap().is_empty(), "nothing of the cancelled series is handed back");
    let stats = timers.stats();
    assert_eq!(stats.scheduled, stats.expired + stats.cancelled + stats.unfired + stats.pending);
}

/// A run in the shard's batch behind a task that cancels the series (same shard, same turn:
/// no run is under way as the cancel lands) never calls the closure.
///
/// No timing is assumed: a task holds the shard until both the cancelling task and the
/// series' first run are due, and the cancel's deadline is before the run's whatever the
/// pace of the test thread, so both expire into one batch, the cancel first.
#[test]
fn a_run_in_the_batch_behind_the_cancel_never_calls_the_closure() {
    let timers = one_shard();
    for round in 0..50 {
        let calls = Arc::new(AtomicUsize::new(0));
        let called = calls.clone();
        let (release, gate) = std::sync::mpsc::channel::<()>();
        timers.schedule(Duration::from_millis(1), move || gate.recv().unwrap()).unwrap();
        // Taken before the series is made: the cancel is due 1 ms before its first run.
        let before = Instant::now();
        let handle = timers
            .schedule_repeating(Duration::from_millis(3), Duration::from_secs(60), Missed::Skip, move || {
                called.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let series = handle.clone();
        timers.schedule_at(before + Duration::from_millis(2), move || tx.send(series.cancel()).unwrap()).unwrap();
        // Both due (with a tick to spare), then let the shard go on.
        std::thread::sleep((before + Duration::from_millis(5)).saturating_duration_since(Instant::now()));
        release.send(()).unwrap();
        assert!(rx.recv_timeout(PATIENCE).unwrap(), "round {round}: the cancel wins");
        assert!(wait_until(|| timers.pending() == 0, PATIENCE), "round {round}: a run of the series is left");
        // The run in the batch finds the series over and drops the closure unrun.
        assert!(
            wait_until(|| Arc::strong_count(&calls) == 1, PATIENCE),
            "round {round}: the closure outlived its series"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 0, "round {round}: a run not started called the closure");
    }
}
