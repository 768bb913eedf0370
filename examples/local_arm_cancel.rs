//! A loop of `LocalWheel` arm+cancel pairs with 1 M timers pending, and a mass expiry, for
//! profiling (`perf record --call-graph dwarf target/release/examples/local_arm_cancel`).
//!
//! `cargo run --release --example local_arm_cancel [pairs]` (0: the one-deadline mass expiry alone)

use shardwheel::LocalWheel;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn main() {
    let pairs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(50_000_000);
    let start = Instant::now();
    let mut x = 7u64;
    let mut delay = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        Duration::from_micros(1_000_000 + x.wrapping_mul(0x2545_F491_4F6C_DD1D) % 59_000_000)
    };
    let mut wheel = LocalWheel::builder().start(start).build::<u64>().expect("valid settings");
    for i in 0..if pairs == 0 { 0 } else { 1_000_000 } {
        wheel.arm_at(start + delay(), i);
    }
    let ring: Vec<Instant> = (0..1 << 16).map(|_| start + delay()).collect();
    let t = Instant::now();
    for i in 0..pairs {
        let key = wheel.arm_at(ring[i & 0xFFFF], i as u64);
        black_box(wheel.cancel(key));
    }
    let el = t.elapsed();
    println!("arm+cancel: {:.1} ns per pair", el.as_nanos() as f64 / pairs as f64);
    // A mass expiry: 1 M more timers due at the same instant, then everything at 61 s.
    let at = start + Duration::from_secs(30);
    let mut same = LocalWheel::builder().start(start).build::<u64>().expect("valid settings");
    for i in 0..1_000_000 {
        same.arm_at(at, i);
    }
    let t = Instant::now();
    let mut n = 0;
    while let Some(fired) = same.poll_expired(at) {
        black_box(fired);
        n += 1;
    }
    println!("mass expiry, one deadline: {:.1} ns per fired timer ({n})", t.elapsed().as_nanos() as f64 / n as f64);
    if pairs == 0 {
        return;
    }
    let t = Instant::now();
    let mut n = 0;
    while let Some(fired) = wheel.poll_expired(start + Duration::from_secs(61)) {
        black_box(fired);
        n += 1;
    }
    println!("mass expiry, random 1–60 s: {:.1} ns per fired timer ({n})", t.elapsed().as_nanos() as f64 / n as f64);
}
