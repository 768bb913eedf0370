//! Push a pending timeout's deadline later, again and again: the idle timeout of a
//! connection that keeps talking. `K` pending 30 s timeouts (K = 1, 10 k, 1 M); each
//! iteration resets the next one (round-robin) to a later deadline, from one producer.
//!
//! In the `reset_later` group the deadlines are computed before each timed sample, never in
//! the timed loop: 16 instants
//! 1 ms apart, the first 30 s from then (and after the previous sample's last), each used for
//! a sixteenth of the sample in turn, so every reset moves a deadline later or keeps it
//! (`baselines::ResetTargets`, `baselines::for_each_target`).
//!
//! How each peer resets (the same workload, each the way its users do it):
//! - shardwheel: `Timeout::reset_at(precomputed)` from the producer thread (a later deadline
//!   is one CAS, no message);
//! - tokio (the headline): `Sleep::reset(precomputed tokio::time::Instant)` in a task on the
//!   worker of a 1-worker runtime, on `Sleep`s created and polled once (registered) in a task
//!   on that runtime;
//! - tokio (foreign threads): `Sleep::reset(precomputed)` on `Sleep`s registered from the
//!   producer thread under `Runtime::enter` (secondary row);
//! - `DelayQueue::reset_at(precomputed)`;
//! - the Netty-style wheel and the heap have no reset, so cancel + arm again with a fresh
//!   closure, as Netty users do (Netty's own `IdleStateHandler` avoids this with a lazy
//!   re-check; a timer user cannot). Their users' APIs take a delay (`newTimeout(delay)`,
//!   `schedule(delay)`) and read the clock themselves, so these two arm `DELAY` from now.
//!
//! A second group, `reset_each`, resets the same way with a deadline of its own for every
//! reset (`baselines::for_each_deadline`: the first, then 1 ns later each time, computed in
//! the timed loop), as a server that computes `now + idle` for each connection that spoke
//! does (hyper's timer resets so). shardwheel and tokio (the headline) only; the add is timed
//! for both. A million resets go to each tick, so shardwheel's per-thread memos of a tick's
//! instants answer all but the first two of each: the best case for them, and a server's
//! at a busy thread (at under five resets a tick the memos pay less than tokio's 1.5×:
//! `examples/reset_memo.rs` measures a reset that converts).
//!
//! `cargo bench --bench reset` prints a ratio table at the end.

use shardwheel_peers as baselines;

use baselines::delay_queue::DelayQueuePeer;
use baselines::heap::HeapPeer;
use baselines::netty::NettyPeer;
use baselines::report::{self, OtherLoad, Row};
use baselines::shardwheel::ShardwheelPeer;
use baselines::tokio_timers::{FOREIGN_THREADS, IN_RUNTIME, TokioInRuntime, TokioSleepPeer};
use baselines::{EachDeadline, Peer, ResetTargets, count_label, for_each_deadline, for_each_target};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [1, 10_000, 1_000_000];
const DELAY: Duration = Duration::from_secs(30);
const GROUP: &str = "reset_later";
/// The group of [`Pattern::Each`].
const GROUP_EACH: &str = "reset_each";
const PEERS: [&str; 6] = ["shardwheel", IN_RUNTIME, FOREIGN_THREADS, "DelayQueue", "Mutex<BinaryHeap>", "netty-wheel"];

/// Where each reset's deadline comes from.
#[derive(Clone, Copy, Debug)]
enum Pattern {
    /// 16 precomputed instants a sample, each for a sixteenth of it (a loop turn's one
    /// `now + idle` for every connection that spoke): group `reset_later`.
    Turns,
    /// A deadline of its own for every reset, computed in the loop: group `reset_each`.
    Each,
}

impl Pattern {
    fn group(self) -> &'static str {
        match self {
            Pattern::Turns => GROUP,
            Pattern::Each => GROUP_EACH,
        }
    }
}

/// A row for a [`Peer`], on this thread: `reset_to(peer, handle, target, iteration)` resets
/// one timeout to `target` (or, for peers whose API takes a delay, `DELAY` from now) and
/// says whether it won.
fn row<P: Peer>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    pattern: Pattern,
    peer: P,
    size: usize,
    reset_to: impl Fn(&P, &mut P::Handle, Instant, u64) -> bool,
) {
    let group = pattern.group();
    let id = format!("{group}/{}/{}", peer.name(), count_label(size));
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
    let (mut targets, mut each) = (ResetTargets::new(DELAY), EachDeadline::new(DELAY));
    g.throughput(Throughput::Elements(1));
    let (mut ran, load) = (false, OtherLoad::start());
    g.bench_function(BenchmarkId::new(peer.name(), count_label(size)), |b| {
        ran = true;
        b.iter_custom(|iters| {
            let (targets, first) = match pattern {
                Pattern::Turns => (targets.next_sample(), None),
                Pattern::Each => (Vec::new(), Some(each.next_sample(iters))),
            };
            peer.enter(|| {
                let mut failed = 0u64;
                let reset = |i, at| {
                    failed += u64::from(!reset_to(&peer, &mut handles[next], at, i));
                    next += 1;
                    if next == size {
                        next = 0;
                    }
                };
                let t = Instant::now();
                match first {
                    None => for_each_target(iters, &targets, reset),
                    Some(first) => for_each_deadline(iters, first, reset),
                }
                let elapsed = t.elapsed();
                assert_eq!(failed, 0, "{}: a reset of a pending timeout failed", peer.name());
                elapsed
            })
        })
    });
    if ran {
        let load = load.cores();
        report::note_load(group, peer.name(), &count_label(size), load);
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

/// tokio's row: `size` sleeps registered in a task on a 1-worker runtime, reset round-robin
/// in a task on that worker (see [`TokioInRuntime::resets`] and
/// [`TokioInRuntime::resets_each`]).
fn tokio_row(g: &mut BenchmarkGroup<'_, WallTime>, pattern: Pattern, size: usize) {
    let group = pattern.group();
    if !report::wanted(&format!("{group}/{IN_RUNTIME}/{}", count_label(size))) {
        return;
    }
    let tokio = TokioInRuntime::new(1);
    let mut sleeps = Some(tokio.arm_registered(size, |_| DELAY));
    let mut next = 0;
    let (mut targets, mut each) = (ResetTargets::new(DELAY), EachDeadline::new(DELAY));
    g.throughput(Throughput::Elements(1));
    let (mut ran, load) = (false, OtherLoad::start());
    g.bench_function(BenchmarkId::new(IN_RUNTIME, count_label(size)), |b| {
        ran = true;
        b.iter_custom(|iters| {
            let taken = sleeps.take().expect("the sleeps came back");
            let (back, at, elapsed) = match pattern {
                Pattern::Turns => {
                    let targets = targets.next_sample().into_iter().map(baselines::tokio::time::Instant::from_std);
                    tokio.resets(taken, next, targets.collect(), iters)
                }
                Pattern::Each => {
                    let first = baselines::tokio::time::Instant::from_std(each.next_sample(iters));
                    tokio.resets_each(taken, next, first, iters)
                }
            };
            (sleeps, next) = (Some(back), at);
            elapsed
        })
    });
    if ran {
        let load = load.cores();
        report::note_load(group, IN_RUNTIME, &count_label(size), load);
        eprintln!(
            "  [{IN_RUNTIME} {size} timeouts, Sleep::reset in a task on the worker] {}; other processes: {load:.2} cores",
            tokio.diagnostics(),
        );
    }
    // Before the runtime: dropping a registered sleep deregisters it from the live driver.
    drop(sleeps);
}

fn reset(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUP);
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    let turns = Pattern::Turns;
    for size in SIZES {
        row(&mut g, turns, ShardwheelPeer::new(2), size, |peer, h, at, _| peer.reset_at(h, at));
        tokio_row(&mut g, turns, size);
        row(&mut g, turns, TokioSleepPeer::new(), size, |peer, h, at, _| peer.reset_at(h, at.into()));
        row(&mut g, turns, DelayQueuePeer::new(), size, |peer, k, at, _| peer.reset_at(k, at.into()));
        row(&mut g, turns, HeapPeer::new(), size, |peer, h, _, i| {
            peer.reset(h, DELAY, move || {
                black_box(i);
            })
        });
        row(&mut g, turns, NettyPeer::new(), size, |peer, h, _, i| {
            peer.reset(h, DELAY, move || {
                black_box(i);
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group(GROUP_EACH);
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    for size in SIZES {
        row(&mut g, Pattern::Each, ShardwheelPeer::new(2), size, |peer, h, at, _| peer.reset_at(h, at));
        tokio_row(&mut g, Pattern::Each, size);
    }
    g.finish();
}

fn main() {
    report::mark_start();
    baselines::self_check_all();
    let mut c = Criterion::default().configure_from_args();
    reset(&mut c);
    c.final_summary();
    let tables: [(&str, &str, &[&str]); 2] = [
        (GROUP, "reset to a later precomputed deadline (≈ 30 s ahead)", &PEERS),
        (GROUP_EACH, "reset to a deadline of its own, computed per reset (≈ 30 s ahead)", &PEERS[..2]),
    ];
    for (group, what, peers) in tables {
        let rows: Vec<Row> = SIZES
            .iter()
            .map(|&size| Row {
                label: format!("{} pending, reset round-robin", count_label(size)),
                group: group.to_owned(),
                parameter: count_label(size),
                ops_per_iter: 1.0,
            })
            .collect();
        report::print_table(&format!("{what}, resets/s; ×N = shardwheel ÷ peer"), "", &rows, peers);
    }
}
