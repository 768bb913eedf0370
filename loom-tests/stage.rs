#![cfg(loom)]
//! Stages (`src/stage.rs`, `src/staging.rs`, `src/shard/stages.rs`): a thread's arms wait
//! on its own stage, a ring whose entries the owner's sweep and the shard's take claim with
//! one CAS; the shard takes a stage once its `due` comes, and forgets it once its thread has
//! exited and it is empty. Under loom a stage holds two entries, so a third arm sweeps it.

#[path = "harness.rs"]
mod harness;

use harness::{Probe, assert_exactly_once, drop_unfired, model, service, wait_for_run};
use shardwheel::ScheduleError;
use shardwheel::loom_support::{live_entries, live_stages};
use std::time::Duration;

/// The owner's sweep ∥ the shard taking the stage: the producer arms a timeout due now (its
/// announcement wakes the shard, which may take the stage at any point from then on), arms
/// and cancels a far one, and arms a third, which finds the stage full unless the shard took
/// it first. The sweep drops the cancelled entry and keeps the survivor on the stage.
/// Whatever the order: the due timeout runs once, the cancelled one never, the far one is
/// handed back by stop, and every entry is freed.
#[test]
fn sweep_races_take() {
    model("sweep ∥ shard taking the stage", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (due, due_counts) = Probe::new();
        let (cancelled, cancelled_counts) = Probe::new();
        let (far, far_counts) = Probe::new();
        let producer = {
            let timers = timers.clone();
            loom::thread::spawn(move || {
                drop(timers.schedule(Duration::ZERO, due).unwrap());
                let t = timers.schedule(Duration::from_secs(60), cancelled).unwrap();
                assert!(t.cancel(), "nothing else can end a frozen-time timeout");
                drop(t);
                drop(timers.schedule(Duration::from_secs(60), far).unwrap());
            })
        };
        producer.join().unwrap();
        wait_for_run(&due_counts);
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&due_counts, 0, 0);
        assert_exactly_once(&cancelled_counts, 1, 0);
        assert_exactly_once(&far_counts, 0, unfired);
        assert_eq!(unfired, 1);
        assert_eq!(timers.pending(), 0);
        drop(timers);
        assert_eq!(shardwheel::loom_support::live_entries(), 0, "every entry is freed");
    });
}

/// A thread exits with timeouts on its stage: one due now runs anyway (its stage's `due`
/// still promises it to the shard), and a far one is handed back by stop (the final drain
/// reaches the retired stage through the shard's stage wheel, or takes it from the mail).
#[test]
fn staged_timeouts_outlive_their_thread() {
    model("staged timeouts outlive their thread", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (due, due_counts) = Probe::new();
        let (far, far_counts) = Probe::new();
        let producer = {
            let timers = timers.clone();
            loom::thread::spawn(move || {
                drop(timers.schedule(Duration::from_secs(60), far).unwrap());
                drop(timers.schedule(Duration::ZERO, due).unwrap());
            })
        };
        producer.join().unwrap();
        wait_for_run(&due_counts);
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&due_counts, 0, 0);
        assert_exactly_once(&far_counts, 0, unfired);
        drop(timers);
        assert_eq!(shardwheel::loom_support::live_entries(), 0, "every entry is freed");
    });
}

/// A stage's whole life, and the next thread's: the first thread arms and cancels (its stage
/// is made and announced), and exits (retired: swept, promised as due now, announced); the
/// shard takes it and forgets it, so it is freed without a stop. A second thread then arms
/// a timeout due now on a new stage of its own, which runs.
#[test]
fn a_new_thread_after_one_exited() {
    model("a stage's life, then a new thread's", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let first = {
            let timers = timers.clone();
            loom::thread::spawn(move || {
                let t = timers.schedule(Duration::from_secs(60), || {}).unwrap();
                assert!(t.cancel());
            })
        };
        first.join().unwrap();
        // Were the retired stage never forgotten, this would spin until loom gives up.
        while live_stages() > 0 {
            loom::thread::yield_now();
        }
        let (task, counts) = Probe::new();
        let second = {
            let timers = timers.clone();
            loom::thread::spawn(move || drop(timers.schedule(Duration::ZERO, task).unwrap()))
        };
        second.join().unwrap();
        wait_for_run(&counts);
        assert_eq!(drop_unfired(timers.stop().unwrap()), 0);
        assert_exactly_once(&counts, 0, 0);
        drop(timers);
        assert_eq!(live_entries(), 0, "every entry is freed");
        // The second thread's stage goes with its thread-locals, which loom may destroy
        // after `join` returns.
        while live_stages() > 0 {
            loom::thread::yield_now();
        }
    });
}

/// Liveness with an empty wheel: a timeout a few ticks out, staged, is all there is. The
/// shard must plan its sleep by the stage's due (the mocked clock then jumps to it), take
/// it, and fire the timeout at its tick, not before.
#[test]
fn a_staged_delay_fires_with_an_empty_wheel() {
    model("a staged delay, nothing else", || {
        let timers = service();
        let (task, counts) = Probe::new();
        let producer = {
            let timers = timers.clone();
            loom::thread::spawn(move || drop(timers.schedule(Duration::from_millis(3), task).unwrap()))
        };
        producer.join().unwrap();
        wait_for_run(&counts);
        assert!(counts.ran_at() >= 3, "fired at {} ms, before its deadline", counts.ran_at());
        drop_unfired(timers.stop().unwrap());
        assert_exactly_once(&counts, 0, 0);
    });
}

/// A sweep ∥ stop: the producer arms and cancels one timeout, then arms two more (the last
/// finds the stage full and sweeps it) while another thread stops the service. Each armed
/// timeout is cancelled, handed back by stop, or refused with `Shutdown`; none is lost, none
/// ends twice.
#[test]
fn sweep_races_stop() {
    model("sweep ∥ stop", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let probes = [Probe::new(), Probe::new(), Probe::new()];
        let counts: Vec<_> = probes.iter().map(|(_, c)| c.clone()).collect();
        let producer = {
            let timers = timers.clone();
            loom::thread::spawn(move || {
                let [(a, _), (b, _), (c, _)] = probes;
                let schedule = |task| match timers.schedule(Duration::from_secs(60), task) {
                    Ok(t) => Some(t),
                    Err(ScheduleError::Shutdown(task)) => {
                        drop(task);
                        None
                    }
                    Err(e) => panic!("unexpected {e}"),
                };
                let a = schedule(a);
                let cancelled = a.as_ref().is_some_and(|t| t.cancel());
                let (b, c) = (schedule(b).is_some(), schedule(c).is_some());
                ([a.is_some(), b, c], cancelled)
            })
        };
        let unfired = timers.stop().unwrap();
        let (scheduled, cancelled) = producer.join().unwrap();
        // Only the list can still hold a task now: a live one was handed back.
        let held: Vec<bool> = counts.iter().map(|c| c.drops() == 0).collect();
        assert_eq!(held, [scheduled[0] && !cancelled, scheduled[1], scheduled[2]], "scheduled, not lost");
        assert_eq!(drop_unfired(unfired), held.iter().filter(|&&h| h).count());
        for (i, c) in counts.iter().enumerate() {
            if scheduled[i] {
                assert_exactly_once(c, usize::from(i == 0 && cancelled), usize::from(held[i]));
            } else {
                // Refused: handed back to the producer, which dropped it.
                assert_eq!((c.runs(), c.cancels(), c.drops()), (0, 0, 1));
            }
        }
        assert_eq!(timers.pending(), 0);
        drop(timers);
        // A timeout the producer took back may sit in its closed stage until its
        // thread-locals go, which loom may do after `join` returns.
        while live_entries() > 0 || live_stages() > 0 {
            loom::thread::yield_now();
        }
    });
}

/// Two arms in a row from one thread that stays alive, both due now: the first one's
/// announcement must wake the shard (time is frozen, and no thread exits to retire a stage
/// and wake it for another reason); both run, in the order they were armed.
#[test]
fn announcements_wake_the_shard_while_their_thread_lives() {
    model("two arms in a row, their thread alive", || {
        shardwheel::loom_support::freeze_clock();
        let timers = service();
        let (first, first_counts) = Probe::new();
        let (second, second_counts) = Probe::new();
        drop(timers.schedule(Duration::ZERO, first).unwrap());
        drop(timers.schedule(Duration::ZERO, second).unwrap());
        wait_for_run(&first_counts);
        wait_for_run(&second_counts);
        assert_eq!(drop_unfired(timers.stop().unwrap()), 0);
        assert_exactly_once(&first_counts, 0, 0);
        assert_exactly_once(&second_counts, 0, 0);
    });
}
