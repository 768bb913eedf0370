//! Does the service scale with shards? Arm a 30 s timeout and cancel it, as `arm_cancel`
//! with nothing else pending: shardwheel with 1 shard and 1 producer thread against 2 shards
//! and 2 producers (each producer's home shard is its own: checked), and for contrast tokio
//! as a tokio server uses it (a runtime with 1 or 2 workers, one producer task on each, each
//! `sleep` pinned in the task, polled once with its context and dropped: `TokioInRuntime`)
//! and the Netty-style wheel (always one worker) with 1 and 2 producers.
//!
//! On a machine with fewer than `shards + producers` cores the threads share cores, so the
//! ratio measures how little work the shard threads add per pair as much as how well the
//! arm path avoids shared cache lines: see the note printed at the end.
//!
//! `cargo bench --bench scaling` prints the ratios at the end.

use shardwheel_peers as baselines;

use baselines::netty::NettyPeer;
use baselines::report::{self, OtherLoad};
use baselines::shardwheel::ShardwheelPeer;
use baselines::tokio_timers::{IN_RUNTIME, TokioInRuntime};
use baselines::{Peer, arm_cancel_pairs, run_threads};
use criterion::{BenchmarkId, Criterion, Throughput};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const DELAY: Duration = Duration::from_secs(30);
const GROUP: &str = "scaling_arm_cancel";

fn pairs<P: Peer>(peer: &P, iters: u64) {
    arm_cancel_pairs(peer, DELAY, iters);
}

/// `1s1p`: 1 shard, 1 producer (no `+`: criterion's filter is a regex).
fn param(n: usize) -> String {
    format!("{n}s{n}p")
}

fn main() {
    report::mark_start();
    baselines::self_check_all();
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group(GROUP);
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for n in [1, 2] {
        if !report::wanted(&format!("{GROUP}/shardwheel/{}", param(n))) {
            continue;
        }
        let peer = ShardwheelPeer::new(n);
        // Which shards the producers' timeouts went to, as a bit set.
        let shards_used = AtomicUsize::new(0);
        g.throughput(Throughput::Elements(n as u64));
        let load = OtherLoad::start();
        g.bench_function(BenchmarkId::new("shardwheel", param(n)), |b| {
            b.iter_custom(|iters| {
                run_threads(&peer, n, |peer, _| {
                    let probe = peer.arm(DELAY, || {});
                    shards_used.fetch_or(1 << probe.shard(), Ordering::Relaxed);
                    peer.cancel(probe);
                    pairs(peer, iters)
                })
            })
        });
        let used = shards_used.load(Ordering::Relaxed).count_ones();
        if used > 0 {
            let load = load.cores();
            report::note_load(GROUP, "shardwheel", &param(n), load);
            eprintln!(
                "  [shardwheel {n}+{n}] producers' home shards: {used} of {n}; {}; other processes: {load:.2} cores",
                peer.diagnostics(),
            );
            assert_eq!(used as usize, n, "the producers did not each get their own home shard");
        }
    }
    for n in [1, 2] {
        if !report::wanted(&format!("{GROUP}/{IN_RUNTIME}/{n}p")) {
            continue;
        }
        let tokio = TokioInRuntime::new(n);
        g.throughput(Throughput::Elements(n as u64));
        let (mut ran, load) = (false, OtherLoad::start());
        g.bench_function(BenchmarkId::new(IN_RUNTIME, format!("{n}p")), |b| {
            ran = true;
            b.iter_custom(|iters| tokio.arm_cancel_pairs(DELAY, iters))
        });
        if ran {
            let load = load.cores();
            report::note_load(GROUP, IN_RUNTIME, &format!("{n}p"), load);
            eprintln!("  [{IN_RUNTIME} {n}p] {}; other processes: {load:.2} cores", tokio.diagnostics());
        }
    }
    for n in [1, 2] {
        if !report::wanted(&format!("{GROUP}/netty-wheel/{n}p")) {
            continue;
        }
        let peer = NettyPeer::new();
        g.throughput(Throughput::Elements(n as u64));
        let (mut ran, load) = (false, OtherLoad::start());
        g.bench_function(BenchmarkId::new("netty-wheel", format!("{n}p")), |b| {
            ran = true;
            b.iter_custom(|iters| run_threads(&peer, n, |peer, _| pairs(peer, iters)))
        });
        if ran {
            let load = load.cores();
            report::note_load(GROUP, "netty-wheel", &format!("{n}p"), load);
            eprintln!("  [netty-wheel {n}p] {}; other processes: {load:.2} cores", peer.diagnostics());
        }
    }
    g.finish();
    c.final_summary();

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!();
    println!("scaling: arm + cancel pairs/s, nothing else pending; {cores} cores available");
    let show = |label: &str, function: &str, [one, two]: [String; 2]| match (
        report::rate(GROUP, function, &one, 1.0),
        report::rate(GROUP, function, &two, 2.0),
    ) {
        (Some(r1), Some(r2)) => println!(
            "{label:<30} 1: {}pairs/s   2: {}pairs/s   2 ÷ 1 = ×{:.2}   (other processes: {:.2} / {:.2} cores)",
            report::si(r1),
            report::si(r2),
            r2 / r1,
            report::load_of(GROUP, function, &one).unwrap_or(f64::NAN),
            report::load_of(GROUP, function, &two).unwrap_or(f64::NAN),
        ),
        _ => println!("{label:<30} not measured in this run"),
    };
    show("shardwheel (shards + producers)", "shardwheel", [param(1), param(2)]);
    show("tokio (workers = producer tasks)", IN_RUNTIME, ["1p".to_owned(), "2p".to_owned()]);
    show("netty-wheel (producers)", "netty-wheel", ["1p".to_owned(), "2p".to_owned()]);
    let vs_tokio = |n: usize| match (
        report::rate(GROUP, "shardwheel", &param(n), n as f64),
        report::rate(GROUP, IN_RUNTIME, &format!("{n}p"), n as f64),
    ) {
        (Some(sw), Some(tokio)) => format!("×{:.2}", sw / tokio),
        _ => "-".to_owned(),
    };
    println!(
        "{:<30} 1: {}   2: {}   (shardwheel n shards + n producers ÷ tokio n workers, n producer tasks)",
        "shardwheel ÷ tokio",
        vs_tokio(1),
        vs_tokio(2)
    );
    if cores < 4 {
        println!(
            "note: {cores} cores for up to 4 busy threads (2 shard threads + 2 producers): 2+2 can only reach ×2 \
             if the shard threads' share of the work per pair is near zero; with shard work s and producer \
             work p per pair, the ceiling here is about 2·max(p, s)/(p + s)."
        );
    }
}
