//! Scheduling from a thread-local's destructor, as a thread exits: a user's thread-local
//! destroyed after the library's own may still arm a timeout, poll a `Sleep` or start a
//! series. Each must work (through the shard's mailbox), never panic: a panic inside a
//! thread-local destructor aborts the whole process.
//!
//! Each case runs in a child process (this test binary, re-run with one test selected), so
//! that an abort fails the one test with a clear message instead of killing the test run.

use shardwheel::{Missed, TimerService};
use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::process::Command;
use std::sync::mpsc;
use std::task::{Context, Waker};
use std::time::Duration;

/// The environment variable that tells a child which case to run.
const CASE: &str = "SHARDWHEEL_THREAD_EXIT_CASE";

/// What a user's thread-local does as it is destroyed.
struct OnExit(Option<Box<dyn FnOnce()>>);

impl Drop for OnExit {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

thread_local! {
    static ON_EXIT: RefCell<OnExit> = const { RefCell::new(OnExit(None)) };
}

/// On a new thread: registers `at_exit` in a thread-local first (so it is destroyed last,
/// after the library's thread-locals), then schedules once so the library's thread-locals
/// are live, and exits.
fn exit_thread_running(timers: &TimerService, at_exit: impl FnOnce() + Send + 'static) {
    let timers = timers.clone();
    std::thread::spawn(move || {
        ON_EXIT.with(|e| e.borrow_mut().0 = Some(Box::new(at_exit)));
        let warm = timers.schedule(Duration::from_secs(60), || {}).unwrap();
        assert!(warm.cancel());
        let mut sleep = pin!(timers.sleep(Duration::from_secs(60)));
        assert!(sleep.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
    })
    .join()
    .expect("the thread exits cleanly");
}

/// The child's side: runs case `name`, and exits 0 only if it behaved.
fn child(name: &str) {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel::<&'static str>();
    match name {
        "schedule" => {
            let t = timers.clone();
            exit_thread_running(&timers, move || {
                let tx = tx.clone();
                t.schedule(Duration::from_millis(5), move || tx.send("fired").unwrap())
                    .expect("a schedule from a destructor works");
            });
        }
        "sleep" => {
            let t = timers.clone();
            exit_thread_running(&timers, move || {
                let mut sleep = pin!(t.sleep(Duration::from_millis(5)));
                let waker = Waker::noop();
                assert!(sleep.as_mut().poll(&mut Context::from_waker(waker)).is_pending());
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while sleep.as_mut().poll(&mut Context::from_waker(waker)).is_pending() {
                    assert!(std::time::Instant::now() < deadline, "the sleep completes");
                    std::thread::sleep(Duration::from_millis(1));
                }
                tx.send("fired").unwrap();
            });
        }
        "repeating" => {
            let t = timers.clone();
            exit_thread_running(&timers, move || {
                let tx = tx.clone();
                let mut n = 0;
                let series = t
                    .schedule_repeating(Duration::from_millis(2), Duration::from_millis(2), Missed::Skip, move || {
                        n += 1;
                        if n == 2 {
                            let _ = tx.send("fired");
                        }
                    })
                    .expect("a series from a destructor works");
                drop(series);
            });
        }
        other => panic!("no case {other}"),
    }
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("fired"));
    timers.stop().unwrap();
    println!("{DONE}{name}");
}

/// What a child prints when its case passed: proof that it ran the case at all.
const DONE: &str = "thread_exit case passed: ";

/// Runs case `name` in a child process and checks it exited cleanly.
fn run_case(name: &str, test: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CASE, name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "case {name}: the child {} (an abort means a panic in a thread-local destructor)\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("{DONE}{name}")), "case {name} did not run in the child:\n{stdout}");
}

/// In the child, runs the case; in the parent, re-runs itself as the child.
fn case(name: &str, test: &str) {
    match std::env::var(CASE) {
        Ok(c) if c == name => child(name),
        Ok(_) => {}
        Err(_) => run_case(name, test),
    }
}

#[test]
fn a_destructor_can_schedule() {
    case("schedule", "a_destructor_can_schedule");
}

#[test]
fn a_destructor_can_poll_a_sleep() {
    case("sleep", "a_destructor_can_poll_a_sleep");
}

#[test]
fn a_destructor_can_start_a_series() {
    case("repeating", "a_destructor_can_start_a_series");
}
