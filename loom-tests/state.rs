#![cfg(loom)]
//! Races on the state word, through the public API, with the real shard driver.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use shardwheel::TimerService;
use std::time::Duration;

#[test]
fn cancel_races_expire() {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    loom::model(|| {
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        shardwheel::loom_support::reset_clock();
        let timers = TimerService::builder().shards(1).build().unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let timeout = timers
            .schedule(Duration::ZERO, move || {
                r.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        let t = timeout.clone();
        let canceller = loom::thread::spawn(move || t.cancel());
        let cancelled = canceller.join().unwrap();
        let unfired = timers.stop().unwrap();
        let ran = ran.load(Ordering::Relaxed);
        assert_eq!(
            ran + cancelled as usize + unfired.len(),
            1,
            "ran {ran}, cancelled {cancelled}, unfired {}",
            unfired.len()
        );
    });
    eprintln!("explored {}", RUNS.load(std::sync::atomic::Ordering::Relaxed));
}
