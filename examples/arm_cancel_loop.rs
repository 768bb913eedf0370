//! The request-timeout pattern as a plain loop, for profilers (`perf record`, `valgrind
//! --tool=callgrind`): `P` producer threads each arm a 30 s timeout and cancel it, `N` times,
//! on their own shard, with `PENDING` far timeouts already waiting.
//!
//! ```sh
//! cargo run --release --example arm_cancel_loop -- [P] [PENDING] [N]   # defaults: 2 1000000 2000000
//! ```
//!
//! The benches in `benches/arm_cancel.rs` measure the same against the peers; this loop has
//! no harness around it, so a profile shows the service alone.

use shardwheel::TimerService;
use std::time::{Duration, Instant};

fn arg(i: usize, default: usize) -> Result<usize, String> {
    match std::env::args().nth(i) {
        None => Ok(default),
        Some(s) => s.parse().map_err(|e| format!("argument {i} ({s:?}): {e}")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let producers = arg(1, 2)?.max(1);
    let pending = arg(2, 1_000_000)?;
    let n = arg(3, 2_000_000)?;
    let timers = TimerService::builder().shards(producers).build()?;
    let mut keep = Vec::with_capacity(pending);
    for i in 0..pending {
        let delay = Duration::from_secs(60 + (i % 1000) as u64);
        keep.push(timers.schedule_on(i % producers, delay, move || {
            std::hint::black_box(i);
        })?);
    }
    let wakeups = timers.stats().wakeups;
    let start = Instant::now();
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let timers = timers.clone();
            std::thread::spawn(move || {
                for i in 0..n {
                    let t = timers.schedule_on(p, Duration::from_secs(30), move || {
                        std::hint::black_box(i);
                    });
                    t.expect("the service runs").cancel();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "a producer panicked")?;
    }
    let elapsed = start.elapsed();
    println!(
        "{producers} producer(s), {pending} pending: {:.1} ns per pair per producer, {:.2} M pairs/s in all, {} shard wake-ups",
        elapsed.as_nanos() as f64 / n as f64,
        (n * producers) as f64 / elapsed.as_secs_f64() / 1e6,
        timers.stats().wakeups - wakeups,
    );
    drop(keep);
    Ok(())
}
