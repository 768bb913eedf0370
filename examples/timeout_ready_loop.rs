//! A `timeout` whose future is ready at once, as a plain loop, for profilers (`perf record`,
//! `valgrind --tool=callgrind`): one thread makes `shardwheel::time::timeout(30 s, ready)`,
//! polls it once (the future completes) and drops it, `N` times; `explicit` as the second
//! argument does the same with `TimerService::timeout`.
//!
//! ```sh
//! cargo run --release --example timeout_ready_loop -- [N] [ambient|explicit]
//! ```
//!
//! `benches/timeout.rs` measures the same inside tokio tasks against tokio's, pingora's and
//! async-io's; this loop has no executor around it, so a profile shows the timeout alone.

use shardwheel::TimerService;
use std::future::{Future, ready};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = match args.next() {
        None => 2_000_000,
        Some(s) => s.parse().map_err(|e| format!("N ({s:?}): {e}"))?,
    };
    let explicit = match args.next().as_deref() {
        None | Some("ambient") => None,
        Some("explicit") => Some(TimerService::builder().shards(1).build()?),
        Some(other) => return Err(format!("ambient or explicit, not {other:?}").into()),
    };
    let mut cx = Context::from_waker(Waker::noop());
    // The default service starts before the clock does.
    drop(shardwheel::time::sleep(Duration::ZERO));
    let start = Instant::now();
    let mut done = 0u64;
    for i in 0..n {
        let ready = match &explicit {
            None => pin!(shardwheel::time::timeout(Duration::from_secs(30), ready(i))).poll(&mut cx),
            Some(timers) => pin!(timers.timeout(Duration::from_secs(30), ready(i))).poll(&mut cx),
        };
        done += u64::from(ready == Poll::Ready(Ok(i)));
    }
    let took = start.elapsed();
    assert_eq!(done, n, "every timeout completed at once");
    println!("{n} ready timeouts in {took:?}: {:.1} ns each", took.as_nanos() as f64 / n as f64);
    Ok(())
}
