//! Bytes per pending timeout, at 1 M pending, each with a small boxed closure (capturing a
//! `u64`), deadlines spread between 60 s and 660 s.
//!
//! Two measures per peer, each peer in a fresh process (this binary runs itself with
//! `--peer NAME`), so one peer's freed memory cannot flatter the next:
//! - **requested**: bytes the peer asked the allocator for (a counting `#[global_allocator]`:
//!   allocations minus frees, by requested size) after the timeouts are armed and taken in,
//!   minus before. The handles the caller keeps are counted apart (`handle` column:
//!   `size_of` the handle, in a `Vec` allocated beforehand).
//! - **resident**: growth of the process's resident set (`/proc/self/statm`) over the same
//!   span, handles included: what the allocator really used, its per-chunk overhead too.
//!   `resident-handle` takes the handle's size off: the timeout alone, as a caller that does
//!   not keep the handle holds it (the design's measure, with its bar of 64 B).
//!
//! Not a criterion benchmark: `cargo bench --bench memory` prints the table.

use shardwheel_peers as baselines;

use baselines::counting;
use baselines::delay_queue::DelayQueuePeer;
use baselines::heap::HeapPeer;
use baselines::netty::NettyPeer;
use baselines::report;
use baselines::shardwheel::ShardwheelPeer;
use baselines::tokio_timers::{TokioInRuntime, TokioTaskPeer};
use baselines::{Peer, prearm, prearm_delay};
use std::process::Command;
use std::time::Duration;

const N: usize = 1_000_000;
const PEERS: [&str; 6] =
    ["shardwheel", "tokio", "tokio (task + sleep)", "DelayQueue", "Mutex<BinaryHeap>", "netty-wheel"];

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting;

/// Arms `N` timeouts on `peer`, lets it take them in, prints one tab-separated line:
/// name, requested bytes/timeout, handle bytes, resident bytes/timeout, allocations/timeout.
fn measure<P: Peer>(peer: P) {
    measure_with(
        peer.name(),
        || {
            let handles = prearm(&peer, N);
            std::thread::sleep(Duration::from_millis(300));
            peer.settle();
            handles
        },
        || peer.diagnostics(),
    );
    // Exit without tearing a million timeouts down.
    std::mem::forget(peer);
}

/// What [`measure`] prints, for `arm` arming `N` timeouts and handing back their handles.
fn measure_with<H>(name: &str, arm: impl FnOnce() -> Vec<H>, diagnostics: impl FnOnce() -> String) {
    // Let the peer's threads start and settle their own allocations first.
    std::thread::sleep(Duration::from_millis(200));
    let live = counting::live();
    let allocations = counting::allocations();
    let resident = report::resident_bytes().unwrap_or(0);
    let handles = arm();
    let live = counting::live() - live - (handles.capacity() * size_of::<H>()) as isize;
    let allocations = counting::allocations() - allocations;
    let resident = report::resident_bytes().unwrap_or(0).saturating_sub(resident);
    println!(
        "{}\t{:.1}\t{}\t{:.1}\t{:.2}",
        name,
        live as f64 / N as f64,
        size_of::<H>(),
        resident as f64 / N as f64,
        allocations as f64 / N as f64,
    );
    eprintln!("  [{name}] {}", diagnostics());
    // Exit without tearing a million timeouts down.
    std::mem::forget(handles);
}

/// tokio as a tokio server holds its pending timeouts: `Sleep`s created and polled once in a
/// task on the runtime (registered with the driver), each boxed, as it would sit in its own
/// connection task's state. (No closure: what runs on timeout is that task's code.)
fn measure_tokio() {
    let tokio = TokioInRuntime::new(2);
    measure_with(
        tokio.name(),
        || {
            let sleeps = tokio.arm_registered(N, |i| prearm_delay(i, N));
            std::thread::sleep(Duration::from_millis(300));
            sleeps
        },
        || tokio.diagnostics(),
    );
    std::mem::forget(tokio);
}

fn child(name: &str) {
    match name {
        "shardwheel" => measure(ShardwheelPeer::new(2)),
        "tokio" => measure_tokio(),
        "tokio (task + sleep)" => measure(TokioTaskPeer::new()),
        "DelayQueue" => measure(DelayQueuePeer::new()),
        "Mutex<BinaryHeap>" => measure(HeapPeer::new()),
        "netty-wheel" => measure(NettyPeer::new()),
        other => panic!("no peer named {other:?}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--peer") {
        child(&args[at + 1]);
        return;
    }
    if args.iter().any(|a| a == "--list") {
        // `cargo bench -- --list` and friends: nothing to list.
        return;
    }
    baselines::self_check_all();
    let exe = std::env::current_exe().expect("this binary's path");
    println!();
    println!("memory per pending timeout, {N} pending, closure capturing a u64 (each peer in a fresh process)");
    println!(
        "{:<22} | {:>16} | {:>7} | {:>17} | {:>16} | {:>16} | {:>13}",
        "peer", "requested B", "handle", "requested+handle", "resident B", "resident-handle", "allocs"
    );
    let mut first: Option<f64> = None;
    for peer in PEERS {
        if !report::wanted(peer) {
            continue;
        }
        let out = Command::new(&exe).args(["--peer", peer]).output().expect("run a child");
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8_lossy(&out.stdout);
        let f: Vec<&str> = line.trim().split('\t').collect();
        if !out.status.success() || f.len() != 5 {
            println!("{peer:<22} | failed: {}", out.status);
            continue;
        }
        let requested: f64 = f[1].parse().unwrap_or(f64::NAN);
        let handle: f64 = f[2].parse().unwrap_or(f64::NAN);
        let total = requested + handle;
        let ratio = match first {
            None => {
                first = Some(total);
                String::new()
            }
            Some(sw) => format!(" (×{:.2})", total / sw),
        };
        let resident: f64 = f[3].parse().unwrap_or(f64::NAN);
        println!(
            "{:<22} | {:>14.1} B | {:>5} B | {:>9.1} B{:<6} | {:>14.1} B | {:>14.1} B | {:>13}",
            f[0],
            requested,
            f[2],
            total,
            ratio,
            resident,
            resident - handle,
            f[4]
        );
    }
    println!(
        "(×N: the peer's requested+handle bytes ÷ shardwheel's. resident-handle: the timeout alone, its handle dropped, \
         the design's measure; the bar for shardwheel is ≤ 64 B)"
    );
}
