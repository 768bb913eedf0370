//! Mass expiry as a plain loop, for profilers (`valgrind --tool=callgrind`, `perf record`):
//! `N` timeouts armed on one shard, all due at the same tick, then waited for; the shard's
//! thread fires them in batches (its turn: poll the wheel, commit each, run each task).
//!
//! ```sh
//! cargo run --release --example expiry_loop -- [N]   # default 1000000
//! ```
//!
//! Two runs at different `N` give the cost of one expiry, the difference over the
//! difference, free of the start-up's (`docs/performance.md`).

use shardwheel::TimerService;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = match std::env::args().nth(1) {
        None => 1_000_000,
        Some(s) => s.parse().map_err(|e| format!("N ({s:?}): {e}"))?,
    };
    let timers = TimerService::builder().shards(1).build()?;
    let fired = Arc::new(AtomicUsize::new(0));
    let at = Instant::now() + Duration::from_millis(50);
    let started = Instant::now();
    for _ in 0..n {
        let fired = fired.clone();
        timers.schedule_at(at, move || {
            fired.fetch_add(1, Ordering::Relaxed);
        })?;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while fired.load(Ordering::Relaxed) < n {
        if Instant::now() > deadline {
            return Err("the timeouts did not all fire within 10 minutes".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let stats = timers.stats();
    println!("{n} fired in {:?}; {:?}", started.elapsed(), stats.lateness);
    timers.stop()?;
    Ok(())
}
