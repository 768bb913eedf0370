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
