//! What a `Timeout::reset_at` costs when the per-thread memos of its conversions
//! (`Clock::deadline_at_for_reset`: a tick and the instants that round up to it) answer, and
//! when they do not. Each round resets timeouts 20 M times to later deadlines, four ways:
//!
//! - **one instant a turn**: one timeout, to 16 instants, each for a sixteenth of the round
//!   (a loop that reads the clock once a turn and resets every connection that spoke to
//!   `now + idle`);
//! - **an instant per reset**: the same timeout, to `first + i ns`, computed in the loop (a
//!   deadline computed per connection, as hyper's timer and `shardwheel-httpd` do): a
//!   million resets a tick, so a memo answers all but the first two of each tick;
//! - **two families in turn**: two timeouts reset in turn, each to an instant per reset, 5 s
//!   and 60 s ahead (a request timeout and an idle timeout): each family keeps its memo;
//! - **a tick per reset**: the first timeout, to `first + i ms`, computed in the loop: no
//!   memo ever answers, and every reset moves the deadline to a new tick (one CAS each), as
//!   deadlines jittered by more than a tick, or a third family of deadlines in turn, would.
//!
//! ```sh
//! cargo run --release --example reset_memo
//! ```

use shardwheel::TimerService;
use std::hint::black_box;
use std::time::{Duration, Instant};

const RESETS: u64 = 20_000_000;

/// Nanoseconds a reset over `RESETS` resets of `timeout` to `deadline(i)`.
fn per_reset(timeout: &shardwheel::Timeout, deadline: impl Fn(u64) -> Instant) -> f64 {
    let start = Instant::now();
    for i in 0..RESETS {
        black_box(timeout.reset_at(deadline(i)));
    }
    start.elapsed().as_nanos() as f64 / RESETS as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let timers = TimerService::builder().shards(1).build()?;
    let timeout = timers.schedule(Duration::from_secs(30), || {})?;
    let request = timers.schedule(Duration::from_secs(30), || {})?;
    let idle = timers.schedule(Duration::from_secs(30), || {})?;
    let families = [&request, &idle];
    // Each round's deadlines come after the previous round's, so every reset moves later.
    let mut base = Instant::now() + Duration::from_secs(30);
    for round in 1..=3 {
        let turns: Vec<Instant> = (0..16).map(|k| base + Duration::from_millis(k)).collect();
        let turn = per_reset(&timeout, |i| turns[(i * 16 / RESETS) as usize]);
        base += Duration::from_millis(16);
        let first = base;
        let each = per_reset(&timeout, |i| first + Duration::from_nanos(i));
        base += Duration::from_nanos(RESETS) + Duration::from_millis(1);
        let start = Instant::now();
        let firsts = [start + Duration::from_secs(5 * round), start + Duration::from_secs(60 * round)];
        for i in 0..RESETS {
            let k = (i & 1) as usize;
            black_box(families[k].reset_at(firsts[k] + Duration::from_nanos(i)));
        }
        let two = start.elapsed().as_nanos() as f64 / RESETS as f64;
        let first = base;
        let tick = per_reset(&timeout, |i| first + Duration::from_millis(i));
        base += Duration::from_millis(RESETS + 1);
        println!(
            "round {round}: one instant a turn {turn:.2} ns a reset; an instant per reset {each:.2} ns; two families in turn {two:.2} ns; a tick per reset {tick:.2} ns"
        );
    }
    for t in [timeout, request, idle] {
        assert!(t.cancel(), "a timeout was not pending");
    }
    Ok(())
}
