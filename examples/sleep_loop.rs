//! The request-timeout pattern of an async server as a plain loop, for profilers (`perf
//! record`, `valgrind --tool=callgrind`): one thread makes a `Sleep`, polls it once with a
//! reference-counted waker (as an executor's task waker is) and drops it, `N` times.
//!
//! ```sh
//! cargo run --release --example sleep_loop -- [N]   # default: 2000000
//! ```
//!
//! `benches/sleep.rs` measures the same inside tokio tasks against `tokio::time::sleep`;
//! this loop has no executor around it, so a profile shows the sleep alone.

use shardwheel::TimerService;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

/// A waker with a reference count, like a task's; counts its wake-ups (none are expected).
struct Task(AtomicU64);

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        None => 2_000_000,
        Some(s) => s.parse().map_err(|e| format!("N ({s:?}): {e}"))?,
    };
    let timers = TimerService::builder().shards(1).build()?;
    let task = Arc::new(Task(AtomicU64::new(0)));
    let waker = Waker::from(task.clone());
    let mut cx = Context::from_waker(&waker);
    let start = Instant::now();
    for _ in 0..n {
        let sleep = pin!(timers.sleep(Duration::from_secs(30)));
        assert!(sleep.poll(&mut cx).is_pending(), "a 30 s sleep completed at once");
    }
    let took = start.elapsed();
    println!("{n} sleeps made, polled, dropped: {:.1} ns each", took.as_nanos() as f64 / n as f64);
    assert_eq!(task.0.load(Ordering::Relaxed), 0, "a cancelled sleep woke its task");
    timers.stop()?;
    Ok(())
}
