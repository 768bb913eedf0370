//! A flood of mail does not starve expiry: every loop of a shard's turn is bounded, so a
//! due timeout fires within one budget of mail however fast other threads write to the
//! shard's mailbox.

mod common;

use common::PATIENCE;
use shardwheel::TimerService;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn a_mail_flood_delays_a_due_timeout_by_at_most_a_budget() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    // Two threads each move a timeout of their own earlier and later without pause: every
    // earlier reset is a refile notice in the shard's mailbox.
    let flooders: Vec<_> = (0..2)
        .map(|_| {
            let (timers, stop, sent) = (timers.clone(), stop.clone(), sent.clone());
            thread::spawn(move || {
                let timeout = timers.schedule(Duration::from_secs(60), || {}).unwrap();
                let (later, earlier) =
                    (Instant::now() + Duration::from_secs(70), Instant::now() + Duration::from_secs(50));
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    assert!(timeout.reset_at(later));
                    assert!(timeout.reset_at(earlier));
                    n += 1;
                }
                sent.fetch_add(n, Ordering::Relaxed);
                assert!(timeout.cancel());
            })
        })
        .collect();
    // Let the flood build up, then arm the probe.
    thread::sleep(Duration::from_millis(50));
    let (tx, rx) = mpsc::channel();
    let deadline = Instant::now() + Duration::from_millis(20);
    timers.schedule_at(deadline, move || tx.send(Instant::now()).unwrap()).unwrap();
    let fired = rx.recv_timeout(PATIENCE).expect("the probe fired during the flood");
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    let late = fired.saturating_duration_since(deadline);
    let sent = sent.load(Ordering::Relaxed);
    eprintln!("probe fired {late:?} late under a flood of {sent} refile notices");
    assert!(fired >= deadline, "never early");
    assert!(sent >= 10_000, "the flood was real: {sent} refile notices");
    // A budget of mail is 4096 commands, well under a millisecond of work; the bound leaves
    // room for a shared, slow test machine.
    assert!(late < Duration::from_millis(200), "{late:?} late under a flood of {sent} notices");
    assert_eq!(timers.stats().pending, 0);
}

/// The other way round: 200 threads whose stages keep falling due must not hold back the
/// mail: earlier resets, each a notice in the mailbox, still fire on time. (That every turn
/// gives each source its share is proven deterministically in the driver's unit tests,
/// `a_turn_reads_its_mail_even_with_more_stages_due_than_it_takes`; this is the scenario
/// end to end, with real threads.)
#[test]
fn due_stages_of_200_threads_do_not_starve_earlier_resets() {
    const THREADS: usize = 200;
    const FLOOD: Duration = Duration::from_secs(3);
    const RESET_TO: Duration = Duration::from_millis(50);
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..THREADS)
        .map(|_| {
            let (timers, stop, started) = (timers.clone(), stop.clone(), started.clone());
            thread::spawn(move || {
                started.fetch_add(1, Ordering::SeqCst);
                let end = Instant::now() + FLOOD + PATIENCE;
                // Bounded in count and in time, whatever the test does.
                for _ in 0..5_000_000u64 {
                    if stop.load(Ordering::Relaxed) || Instant::now() >= end {
                        break;
                    }
                    // A steady flood the shard keeps up with (this is not an overload
                    // test: then every later timeout waits its turn, as it should).
                    for _ in 0..2 {
                        timers.schedule(Duration::ZERO, || {}).unwrap();
                    }
                    thread::sleep(Duration::from_millis(2));
                }
            })
        })
        .collect();
    while started.load(Ordering::SeqCst) < THREADS as u64 {
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_millis(200));
    // Timeouts armed far out, then moved earlier: each move is a notice in the mailbox.
    let (tx, rx) = mpsc::channel();
    let probes: Vec<_> = (0..8)
        .map(|i| {
            let tx = tx.clone();
            timers.schedule(Duration::from_secs(3600), move || tx.send((i, Instant::now())).unwrap()).unwrap()
        })
        .collect();
    let mut worst = Duration::ZERO;
    for round in 0..3 {
        let _ = round;
        let moved_at = Instant::now();
        let due = moved_at + RESET_TO;
        let i = probes.iter().position(|p| p.reset_at(due)).expect("a probe still pending");
        let (fired, at) = rx.recv_timeout(FLOOD + PATIENCE).expect("the earlier reset fires");
        assert_eq!(fired, i);
        assert!(at >= due, "fired early");
        worst = worst.max(at - due);
    }
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    drop(timers.stop().unwrap());
    eprintln!("worst lateness of an earlier reset under the flood: {worst:?}");
    // On time, by a margin for a loaded 2-core machine, and far within the flood (a starved
    // notice waits for the flood to end: 13 s).
    assert!(worst < Duration::from_secs(2), "an earlier reset fired {worst:?} late under the flood");
}
