//! `Builder::offload`: expired tasks run on a rayon pool, so a task that blocks delays no
//! other timeout of its shard; runs and panics are still counted. The default stays on the
//! shard thread. Needs the `offload` feature: `cargo test --features offload --test offload`.
#![cfg(feature = "offload")]

use shardwheel::TimerService;
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{PATIENCE, wait_until};

fn pool() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(2).thread_name(|i| format!("offload-{i}")).build().unwrap()
}

/// Blocks both threads of `pool()` with a task each; returns once both are blocked. Each
/// stays blocked until the returned barrier is waited on (by the caller, the third party).
fn block_the_pool(timers: &TimerService) -> std::sync::Arc<std::sync::Barrier> {
    use std::sync::{Arc, Barrier};
    let (release, blocked) = (Arc::new(Barrier::new(3)), Arc::new(Barrier::new(3)));
    for _ in 0..2 {
        let (release, blocked) = (release.clone(), blocked.clone());
        timers
            .schedule(Duration::ZERO, move || {
                blocked.wait();
                release.wait();
            })
            .unwrap();
    }
    blocked.wait();
    release
}

/// One shard; a task due at 10 ms blocks for 200 ms; ten more are due every 10 ms after it.
/// Returns how late each of those ten ran.
fn lateness_behind_a_blocking_task(timers: &TimerService) -> Vec<Duration> {
    let start = Instant::now();
    timers.schedule_at(start + Duration::from_millis(10), || std::thread::sleep(Duration::from_millis(200))).unwrap();
    let (tx, rx) = mpsc::channel();
    for k in 1..=10u32 {
        let due = start + Duration::from_millis(10) + Duration::from_millis(10) * k;
        let tx = tx.clone();
        timers.schedule_at(due, move || tx.send(Instant::now().saturating_duration_since(due)).unwrap()).unwrap();
    }
    (0..10).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect()
}

#[test]
fn a_blocking_task_on_the_pool_delays_no_other_timeout_of_its_shard() {
    let timers = TimerService::builder().shards(1).pin_threads(false).offload(pool()).build().unwrap();
    let late = lateness_behind_a_blocking_task(&timers);
    let worst = late.iter().max().unwrap();
    println!("offloaded: worst lateness behind a 200 ms task: {worst:?}");
    assert!(*worst < Duration::from_millis(100), "held up by the blocking task: {late:?}");
    assert!(wait_until(|| timers.stats().expired == 11, PATIENCE), "every run counted");
}

#[test]
fn by_default_tasks_run_on_the_shard_thread_in_turn() {
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let late = lateness_behind_a_blocking_task(&timers);
    let worst = late.iter().max().unwrap();
    assert!(*worst >= Duration::from_millis(100), "the default should run tasks on the shard, in turn: {late:?}");
}

#[test]
fn panics_on_the_pool_are_counted_and_tasks_run_there() {
    let timers = TimerService::builder().shards(2).pin_threads(false).offload(pool()).build().unwrap();
    let (tx, rx) = mpsc::channel();
    timers
        .schedule(Duration::from_millis(1), move || tx.send(std::thread::current().name().map(str::to_owned)).unwrap())
        .unwrap();
    let name = rx.recv_timeout(PATIENCE).unwrap().unwrap();
    assert!(name.starts_with("offload-"), "ran on {name}");
    timers.schedule(Duration::from_millis(1), || panic!("a task that fails on the pool")).unwrap();
    assert!(wait_until(|| timers.stats().panicked == 1, PATIENCE), "the panic was not counted");
    // Sleeps are woken from the shard (see below), and counted as expiries all the same.
    futures_executor::block_on(timers.sleep(Duration::from_millis(2)));
    let stats = timers.stats();
    assert_eq!(stats.expired, 3);
    assert_eq!(stats.pending, 0);
    assert!(timers.stop().unwrap().is_empty());
}

#[test]
fn a_series_runs_on_the_pool_one_run_at_a_time() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let timers = TimerService::builder().shards(1).pin_threads(false).offload(pool()).build().unwrap();
    let (runs, running) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (r, busy) = (runs.clone(), running.clone());
    let handle = timers
        .schedule_repeating(Duration::ZERO, Duration::from_millis(1), shardwheel::Missed::Burst, move || {
            assert_eq!(busy.fetch_add(1, Ordering::SeqCst), 0, "two runs of one series at once");
            std::thread::sleep(Duration::from_millis(3));
            busy.fetch_sub(1, Ordering::SeqCst);
            r.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    assert!(wait_until(|| runs.load(Ordering::SeqCst) >= 5, PATIENCE));
    assert!(handle.cancel());
    assert!(wait_until(|| timers.pending() == 0, PATIENCE));
    assert_eq!(timers.stats().panicked, 0);
}

/// Sleeps are the crate's own work, not user tasks: their wake-ups run on the shard even
/// with offload, so a pool whose every thread is blocked delays no sleep.
#[test]
fn a_saturated_pool_delays_no_sleep() {
    use std::sync::Arc;
    let timers = TimerService::builder().shards(1).pin_threads(false).offload(pool()).build().unwrap();
    // Both pool threads blocked until the sleep below is done.
    let release = block_the_pool(&timers);
    let start = Instant::now();
    let waited = Arc::new(std::sync::Mutex::new(None));
    let (t, w) = (timers.clone(), waited.clone());
    // The sleep is awaited on another thread, so that a sleep never woken fails the test
    // (after PATIENCE) instead of hanging it; the pool is released either way.
    let sleeper = std::thread::spawn(move || {
        futures_executor::block_on(t.sleep(Duration::from_millis(20)));
        *w.lock().unwrap() = Some(start.elapsed());
    });
    let woke = wait_until(|| waited.lock().unwrap().is_some(), PATIENCE);
    release.wait();
    sleeper.join().unwrap();
    assert!(woke, "a sleep waited for the blocked pool");
    let took = waited.lock().unwrap().unwrap();
    assert!(took >= Duration::from_millis(20), "early: {took:?}");
    // Generous for a loaded machine; the pool stays blocked for PATIENCE if the wake-up
    // waits for it.
    assert!(took < Duration::from_secs(2), "the wake-up waited for the pool: {took:?}");
}

/// A series' end is the crate's own work too: a series whose handle was reset (its expiry
/// ends the series) ends on the shard at that deadline, its waiting run cancelled there,
/// with every pool thread blocked. Queued behind the pool, the end would wait for a thread,
/// and the run due meanwhile would start first.
#[test]
fn a_series_ended_by_its_handles_deadline_ends_with_the_pool_blocked() {
    let timers = TimerService::builder().shards(1).pin_threads(false).offload(pool()).build().unwrap();
    let release = block_the_pool(&timers);
    let hour = Duration::from_secs(3600);
    let series = timers.schedule_repeating(hour, hour, shardwheel::Missed::Skip, || ()).unwrap();
    assert_eq!(timers.pending(), 2, "the handle and its waiting run");
    assert!(series.reset(Duration::from_millis(20)), "the handle now has a deadline");
    let ended = wait_until(|| timers.pending() == 0, PATIENCE);
    let state = series.state();
    release.wait();
    assert!(ended, "the series' end waited for the blocked pool");
    assert_eq!(state, shardwheel::TimeoutState::Expired, "ended by its handle's deadline");
}

/// A task on a one-thread pool that blocks on a sleep: the wake-up must not need the pool.
#[test]
fn a_sleep_awaited_inside_a_task_on_a_one_thread_pool_completes() {
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let timers = TimerService::builder().shards(1).pin_threads(false).offload(one).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let t = timers.clone();
    timers
        .schedule(Duration::ZERO, move || {
            let start = Instant::now();
            futures_executor::block_on(t.sleep(Duration::from_millis(5)));
            tx.send(start.elapsed()).unwrap();
        })
        .unwrap();
    let took = rx.recv_timeout(PATIENCE).expect("the sleep inside the pool's only thread was never woken");
    assert!(took >= Duration::from_millis(5), "early: {took:?}");
}

/// On the pool too, a task's panic whose payload panics as it is dropped is caught and
/// counted: it used to unwind out of rayon's job, which aborts the process.
#[test]
fn a_panic_whose_payload_panics_on_drop_is_caught_on_the_pool() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            std::panic::panic_any("deliberate test panic: the payload's drop");
        }
    }
    let timers = TimerService::builder().shards(1).pin_threads(false).offload(pool()).build().unwrap();
    timers.schedule(Duration::from_millis(1), || std::panic::panic_any(PanicsOnDrop)).unwrap();
    assert!(wait_until(|| timers.stats().panicked == 2, PATIENCE), "both panics counted: {:?}", timers.stats());
    let (tx, rx) = mpsc::channel();
    timers.schedule(Duration::from_millis(1), move || tx.send(()).unwrap()).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(()));
    assert_eq!(timers.stats().failed_shards, 0);
}
