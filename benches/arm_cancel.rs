//! Arm a 30 s timeout and cancel it at once: the per-request timeout of a server, where
//! almost every timeout is cancelled. From 1 and 2 producer threads, with 0, 10 k and 1 M
//! timeouts already pending (due between 60 s and 660 s, spread evenly, so none fires
//! during the run). One iteration = one arm + cancel pair per producer; throughput is
//! pairs/s over all producers. Every row gets a fresh peer, so no row inherits another's
//! leftovers (the heap's dead entries, say). `DelayQueue` is single-threaded: 1 producer.
//!
//! tokio, the headline row "tokio", is measured as a tokio server uses it: a multi-thread
//! runtime with one worker per producer, one task per worker, each doing `sleep` (pinned in
//! the task), one poll with the task's context (registers), drop (deregisters); the pending
//! timeouts are `Sleep`s registered the same way, inside the runtime, held for the whole row
//! (see `TokioInRuntime`). The row "tokio (foreign threads)" arms the same `Sleep`s from
//! producer threads that are not the runtime's, under `Runtime::enter`: shown for contrast,
//! not how tokio is used.
//!
//! `cargo bench --bench arm_cancel` prints a ratio table at the end.
//!
//! Profiling mode, without criterion (for `perf` and `valgrind --tool=callgrind`):
//! `arm_cancel --pairs PEER PENDING PRODUCERS N` pre-arms `PENDING`, runs `N` pairs on each
//! of `PRODUCERS` threads (tasks, for `tokio`; `tokio-foreign` is the foreign-thread row),
//! prints the time, and exits. Running it for two values of `N`
//! and subtracting gives the cost of the pairs alone (instructions, with callgrind).

use shardwheel_peers as baselines;

use baselines::delay_queue::DelayQueuePeer;
use baselines::heap::HeapPeer;
use baselines::netty::NettyPeer;
use baselines::report::{self, OtherLoad, Row};
use baselines::shardwheel::ShardwheelPeer;
use baselines::tokio_timers::{FOREIGN_THREADS, IN_RUNTIME, TokioInRuntime, TokioSleepPeer};
use baselines::{Peer, arm_cancel_pairs, count_label, prearm, prearm_delay, run_threads};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use std::time::{Duration, Instant};

const PENDING: [usize; 3] = [0, 10_000, 1_000_000];
const PRODUCERS: [usize; 2] = [1, 2];
const DELAY: Duration = Duration::from_secs(30);
const PEERS: [&str; 6] = ["shardwheel", IN_RUNTIME, FOREIGN_THREADS, "DelayQueue", "Mutex<BinaryHeap>", "netty-wheel"];

/// `iters` arm + cancel pairs of 30 s timeouts.
fn pairs<P: Peer>(peer: &P, iters: u64) {
    arm_cancel_pairs(peer, DELAY, iters);
}

fn group_name(pending: usize) -> String {
    format!("arm_cancel_pending_{}", count_label(pending))
}

/// Measures the row `name/{producers}p`: `pairs(iters)` runs `iters` pairs on each of
/// `producers` producers and returns the time they took.
fn measure_row(
    g: &mut BenchmarkGroup<'_, WallTime>,
    pending: usize,
    name: &str,
    producers: usize,
    diagnostics: impl Fn() -> String,
    mut pairs: impl FnMut(u64) -> Duration,
) {
    g.throughput(Throughput::Elements(producers as u64));
    let (mut ran, load) = (false, OtherLoad::start());
    g.bench_function(BenchmarkId::new(name, format!("{producers}p")), |b| {
        ran = true;
        b.iter_custom(&mut pairs)
    });
    if ran {
        let load = load.cores();
        report::note_load(&group_name(pending), name, &format!("{producers}p"), load);
        eprintln!("  [{name} {producers}p, {pending} pending] {}; other processes: {load:.2} cores", diagnostics());
    }
}

fn wanted(pending: usize, name: &str, producers: usize) -> bool {
    report::wanted(&format!("{}/{name}/{producers}p", group_name(pending)))
}

/// A row on `producers` fresh threads.
fn threaded<P: Peer + Sync>(g: &mut BenchmarkGroup<'_, WallTime>, new: impl Fn() -> P, pending: usize) {
    for producers in PRODUCERS {
        let peer = new();
        if !wanted(pending, peer.name(), producers) {
            continue;
        }
        let handles = prearm(&peer, pending);
        measure_row(
            g,
            pending,
            peer.name(),
            producers,
            || peer.diagnostics(),
            |iters| run_threads(&peer, producers, |peer, _| pairs(peer, iters)),
        );
        drop(handles);
    }
}

/// A single-producer row on this thread (a peer that is not `Sync`).
fn local<P: Peer>(g: &mut BenchmarkGroup<'_, WallTime>, peer: P, pending: usize) {
    if !wanted(pending, peer.name(), 1) {
        return;
    }
    let handles = prearm(&peer, pending);
    measure_row(
        g,
        pending,
        peer.name(),
        1,
        || peer.diagnostics(),
        |iters| {
            peer.enter(|| {
                let t = Instant::now();
                pairs(&peer, iters);
                t.elapsed()
            })
        },
    );
    drop(handles);
}

/// tokio's row: a runtime with one worker per producer, one producer task per worker, the
/// pending sleeps registered in the runtime and held for the row.
fn in_runtime(g: &mut BenchmarkGroup<'_, WallTime>, pending: usize) {
    for producers in PRODUCERS {
        if !wanted(pending, IN_RUNTIME, producers) {
            continue;
        }
        let tokio = TokioInRuntime::new(producers);
        let held = tokio.arm_registered(pending, move |i| prearm_delay(i, pending));
        measure_row(
            g,
            pending,
            IN_RUNTIME,
            producers,
            || tokio.diagnostics(),
            |iters| tokio.arm_cancel_pairs(DELAY, iters),
        );
        // Before the runtime: dropping a registered sleep deregisters it from the live driver.
        drop(held);
    }
}

fn arm_cancel(c: &mut Criterion) {
    for pending in PENDING {
        let mut g = c.benchmark_group(group_name(pending));
        g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
        threaded(&mut g, || ShardwheelPeer::new(2), pending);
        in_runtime(&mut g, pending);
        threaded(&mut g, TokioSleepPeer::new, pending);
        local(&mut g, DelayQueuePeer::new(), pending);
        threaded(&mut g, HeapPeer::new, pending);
        threaded(&mut g, NettyPeer::new, pending);
        g.finish();
    }
}

fn profile_threaded<P: Peer + Sync>(peer: P, pending: usize, producers: usize, n: u64) {
    let handles = prearm(&peer, pending);
    let t = run_threads(&peer, producers, |peer, _| pairs(peer, n));
    let total = n * producers as u64;
    println!(
        "{}: {total} pairs in {t:.2?} ({:.1} ns/pair, {}pairs/s)",
        peer.name(),
        t.as_nanos() as f64 / total as f64,
        report::si(total as f64 / t.as_secs_f64())
    );
    eprintln!("  {}", peer.diagnostics());
    drop(handles);
}

/// `--pairs PEER PENDING PRODUCERS N`.
fn profile(args: &[String]) {
    let [name, pending, producers, n] = args else {
        panic!("usage: arm_cancel --pairs PEER PENDING PRODUCERS N");
    };
    let pending: usize = pending.parse().expect("PENDING: a number");
    let producers: usize = producers.parse().expect("PRODUCERS: a number");
    let n: u64 = n.parse().expect("N: a number");
    match name.as_str() {
        "shardwheel" => profile_threaded(ShardwheelPeer::new(2), pending, producers, n),
        "tokio" => {
            let tokio = TokioInRuntime::new(producers);
            let held = tokio.arm_registered(pending, move |i| prearm_delay(i, pending));
            let t = tokio.arm_cancel_pairs(DELAY, n);
            let total = n * producers as u64;
            println!(
                "tokio: {total} pairs in {t:.2?} ({:.1} ns/pair, {}pairs/s)",
                t.as_nanos() as f64 / total as f64,
                report::si(total as f64 / t.as_secs_f64())
            );
            eprintln!("  {}", tokio.diagnostics());
            drop(held);
        }
        "tokio-foreign" | FOREIGN_THREADS => profile_threaded(TokioSleepPeer::new(), pending, producers, n),
        "Mutex<BinaryHeap>" | "heap" => profile_threaded(HeapPeer::new(), pending, producers, n),
        "netty-wheel" | "netty" => profile_threaded(NettyPeer::new(), pending, producers, n),
        "DelayQueue" => {
            assert_eq!(producers, 1, "DelayQueue is single-threaded");
            let peer = DelayQueuePeer::new();
            let handles = prearm(&peer, pending);
            let t = peer.enter(|| {
                let t = Instant::now();
                pairs(&peer, n);
                t.elapsed()
            });
            println!("DelayQueue: {n} pairs in {t:.2?} ({:.1} ns/pair)", t.as_nanos() as f64 / n as f64);
            drop(handles);
        }
        other => panic!("no peer named {other:?}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--pairs") {
        return profile(&args[at + 1..]);
    }
    report::mark_start();
    baselines::self_check_all();
    let mut c = Criterion::default().configure_from_args();
    arm_cancel(&mut c);
    c.final_summary();
    let rows: Vec<Row> = PENDING
        .iter()
        .flat_map(|&pending| {
            PRODUCERS.map(|producers| Row {
                label: format!("{} pending, {producers}p", count_label(pending)),
                group: group_name(pending),
                parameter: format!("{producers}p"),
                ops_per_iter: producers as f64,
            })
        })
        .collect();
    report::print_table("arm + cancel (30 s timeout), pairs/s; ×N = shardwheel ÷ peer", "", &rows, &PEERS);
}
