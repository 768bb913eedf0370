//! What a `Timeout::reset_at` costs with and without the per-thread memo of its last
//! conversion (`Clock::deadline_at_for_reset`): one timeout reset 50 M times, first to 16
//! instants each used for a sixteenth of the run (a loop turn's one `now + idle` for every
//! connection: the memo answers), then to a different instant on every reset (a deadline
//! computed per connection, as hyper's timer and `shardwheel-httpd` do: the memo misses).
//!
//! ```sh
//! cargo run --release --example reset_memo
//! ```

use shardwheel::TimerService;
use std::hint::black_box;
use std::time::{Duration, Instant};

const RESETS: u64 = 50_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let timers = TimerService::builder().shards(1).build()?;
    let timeout = timers.schedule(Duration::from_secs(30), || {})?;
    let base = Instant::now() + Duration::from_secs(30);
    let turns: Vec<Instant> = (0..16).map(|i| base + Duration::from_millis(i)).collect();
    let fresh: Vec<Instant> = (0..1024).map(|i| base + Duration::from_nanos(i)).collect();
    for round in 1..=3 {
        let start = Instant::now();
        for i in 0..RESETS {
            black_box(timeout.reset_at(turns[(i * 16 / RESETS) as usize]));
        }
        let same = start.elapsed().as_nanos() as f64 / RESETS as f64;
        let start = Instant::now();
        for i in 0..RESETS {
            black_box(timeout.reset_at(fresh[(i & 1023) as usize]));
        }
        let other = start.elapsed().as_nanos() as f64 / RESETS as f64;
        println!("round {round}: one instant a turn {same:.2} ns a reset; a new instant every reset {other:.2} ns");
    }
    assert!(timeout.cancel(), "the timeout was still pending");
    Ok(())
}
