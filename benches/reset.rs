//! Push a pending timeout's deadline later, again and again: the idle timeout of a
//! connection that keeps talking. `K` pending 30 s timeouts (K = 1, 10 k, 1 M); each
//! iteration resets the next one (round-robin) to 30 s from now, from one producer thread.
//!
//! How each peer resets (the same workload, each the way its users do it):
//! shardwheel `Timeout::reset` (a later deadline is one CAS, no message); tokio
//! `Sleep::reset` on a registered `Sleep`; `DelayQueue::reset`; the Netty-style wheel and
//! the heap have no reset, so cancel + arm again with a fresh closure, as Netty users do
//! (Netty's own `IdleStateHandler` avoids this with a lazy re-check; a timer user cannot).
//!
//! `cargo bench --bench reset` prints a ratio table at the end.

#[path = "baselines/mod.rs"]
mod baselines;

use baselines::delay_queue::DelayQueuePeer;
use baselines::heap::HeapPeer;
use baselines::netty::NettyPeer;
use baselines::report::{self, OtherLoad, Row};
use baselines::shardwheel::ShardwheelPeer;
use baselines::tokio_timers::TokioSleepPeer;
use baselines::{Peer, count_label};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [1, 10_000, 1_000_000];
const DELAY: Duration = Duration::from_secs(30);
const GROUP: &str = "reset_later";
const PEERS: [&str; 5] = ["shardwheel", "tokio", "DelayQueue", "Mutex<BinaryHeap>", "netty-wheel"];

fn row<P: Peer>(g: &mut BenchmarkGroup<'_, WallTime>, peer: P, size: usize) {
    let id = format!("{GROUP}/{}/{}", peer.name(), count_label(size));
    if !report::wanted(&id) {
        return;
    }
    let mut handles: Vec<P::Handle> = peer.enter(|| {
        (0..size)
            .map(|i| {
                let x = i as u64;
                peer.arm(DELAY, move || {
                    black_box(x);
                })
            })
            .collect()
    });
    peer.settle();
    let mut next = 0;
    g.throughput(Throughput::Elements(1));
    let (mut ran, load) = (false, OtherLoad::start());
    g.bench_function(BenchmarkId::new(peer.name(), count_label(size)), |b| {
        ran = true;
        b.iter_custom(|iters| {
            peer.enter(|| {
                let mut failed = 0u64;
                let t = Instant::now();
                for i in 0..iters {
                    let ok = peer.reset(&mut handles[next], DELAY, move || {
                        black_box(i);
                    });
                    failed += u64::from(!ok);
                    next += 1;
                    if next == size {
                        next = 0;
                    }
                }
                let elapsed = t.elapsed();
                assert_eq!(failed, 0, "{}: a reset of a pending timeout failed", peer.name());
                elapsed
            })
        })
    });
    if ran {
        let load = load.cores();
        report::note_load(GROUP, peer.name(), &count_label(size), load);
        eprintln!(
            "  [{} {} timeouts, {}] {}; other processes: {load:.2} cores",
            peer.name(),
            size,
            peer.reset_kind(),
            peer.diagnostics(),
        );
    }
    drop(handles);
}

fn reset(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUP);
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    for size in SIZES {
        row(&mut g, ShardwheelPeer::new(2), size);
        row(&mut g, TokioSleepPeer::new(), size);
        row(&mut g, DelayQueuePeer::new(), size);
        row(&mut g, HeapPeer::new(), size);
        row(&mut g, NettyPeer::new(), size);
    }
    g.finish();
}

fn main() {
    report::mark_start();
    baselines::self_check_all();
    let mut c = Criterion::default().configure_from_args();
    reset(&mut c);
    c.final_summary();
    let rows: Vec<Row> = SIZES
        .iter()
        .map(|&size| Row {
            label: format!("{} pending, reset round-robin", count_label(size)),
            group: GROUP.to_owned(),
            parameter: count_label(size),
            ops_per_iter: 1.0,
        })
        .collect();
    report::print_table(
        "reset to a later deadline (30 s from now), resets/s; ×N = shardwheel ÷ peer",
        "",
        &rows,
        &PEERS,
    );
}
