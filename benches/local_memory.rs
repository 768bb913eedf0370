//! Bytes per pending timer of the embedded mode, and allocations in steady state:
//! `LocalWheel<u64>` against `nexus_timer::Wheel<u64>` and `tokio_util`'s
//! `DelayQueue<u64>`, 1 M timers at random deadlines 1–60 s out.
//!
//! A counting `#[global_allocator]` measures the bytes each peer asked for (allocations
//! minus frees, by requested size) after arming the 1 M, minus before; the keys the caller
//! keeps are in a `Vec` allocated beforehand and not counted (their size is printed apart).
//! Then 1 M arm+cancel pairs at the same load: the allocations they made (steady state:
//! none). Each peer runs in a process of its own (this binary runs itself with `--peer`).
//!
//! Not a criterion benchmark: `cargo bench --bench local_memory` prints the table.

use shardwheel_peers::counting;
use std::process::Command;
use std::time::{Duration, Instant};

const N: usize = 1_000_000;
const PEERS: [&str; 3] = ["LocalWheel", "nexus-timer", "DelayQueue"];

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

/// xorshift64*: the same deadlines for every peer.
fn delays(n: usize) -> Vec<Duration> {
    let mut x = 7u64;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            Duration::from_micros(1_000_000 + x.wrapping_mul(0x2545_F491_4F6C_DD1D) % 59_000_000)
        })
        .collect()
}

/// What one peer measured: bytes per pending timer, key size, allocations per 1 M pairs.
fn measure(peer: &str) -> (f64, usize, usize) {
    let start = Instant::now();
    let at: Vec<Instant> = delays(N).into_iter().map(|d| start + d).collect();
    macro_rules! run {
        ($make:expr, $arm:expr, $cancel:expr, $key:ty) => {{
            let mut keys: Vec<$key> = Vec::with_capacity(N);
            let before = counting::live();
            let mut wheel = $make;
            for (i, &t) in at.iter().enumerate() {
                keys.push($arm(&mut wheel, t, i as u64));
            }
            let bytes = counting::live() - before;
            let allocs = counting::allocations();
            for (i, &t) in at.iter().enumerate() {
                let key = $arm(&mut wheel, t, i as u64);
                std::hint::black_box($cancel(&mut wheel, key));
            }
            let pair_allocs = counting::allocations() - allocs;
            for key in keys.drain(..) {
                $cancel(&mut wheel, key);
            }
            (bytes as f64 / N as f64, std::mem::size_of::<$key>(), pair_allocs)
        }};
    }
    match peer {
        "LocalWheel" => run!(
            shardwheel::LocalWheel::builder().start(start).build::<u64>().unwrap(),
            |w: &mut shardwheel::LocalWheel<u64>, t, v| w.arm_at(t, v),
            |w: &mut shardwheel::LocalWheel<u64>, k| w.cancel(k),
            shardwheel::TimerKey
        ),
        "nexus-timer" => run!(
            // Chunks of 2²⁰ entries, as a user of 1 M timers sizes it (as `benches/local.rs`).
            nexus_timer::Wheel::<u64>::unbounded(1 << 20, start),
            |w: &mut nexus_timer::Wheel<u64>, t, v| w.schedule(t, v),
            |w: &mut nexus_timer::Wheel<u64>, k| w.cancel(k),
            nexus_timer::TimerHandle<u64>
        ),
        "DelayQueue" => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            let _guard = rt.enter();
            run!(
                tokio_util::time::DelayQueue::<u64>::new(),
                |w: &mut tokio_util::time::DelayQueue<u64>, t: Instant, v| w.insert_at(v, t.into()),
                |w: &mut tokio_util::time::DelayQueue<u64>, k| w.remove(&k).into_inner(),
                tokio_util::time::delay_queue::Key
            )
        }
        other => panic!("no peer {other}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--peer") {
        let (bytes, key, allocs) = measure(&args[i + 1]);
        println!("{bytes:.1} {key} {allocs}");
        return;
    }
    if args.iter().any(|a| a == "--list" || a == "--test") {
        return;
    }
    println!("1,000,000 pending u64 timers, deadlines 1–60 s; then 1,000,000 arm+cancel pairs");
    println!("{:<14} {:>16} {:>10} {:>22}", "peer", "bytes / pending", "key (B)", "allocations / 1M pairs");
    let me = std::env::current_exe().expect("this binary");
    for peer in PEERS {
        let out = Command::new(&me).args(["--peer", peer]).output().expect("a child run");
        let line = String::from_utf8_lossy(&out.stdout);
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3 {
            println!("{peer:<14} {:>16} {:>10} {:>22}", f[0], f[1], f[2]);
        } else {
            println!("{peer:<14} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}
