//! 1 M timeouts due over one second, all of which fire: how late they fire, and whether
//! the timer keeps up.
//!
//! Each run: two producer threads arm 1 M timeouts (each half, in deadline order) due at
//! `T0 + i µs`, `T0` far enough ahead that arming (and the peer taking them in) is over
//! before the first is due; each task records `now − its requested deadline` (negative:
//! fired early). Criterion times `T0` → the last firing (≈ 1 s when the peer keeps up); the
//! lateness percentiles over every run are printed at the end. A run whose arming overran
//! `T0` is reported (its early deadlines could not be met by anyone).
//!
//! Peers: shardwheel (2 shards, 1 ms tick), tokio (a spawned task per timeout that sleeps,
//! then runs the closure: tokio's way to run something later), `DelayQueue` (filled by one
//! thread, then drained by one tokio task, its owner), the heap, the Netty-style wheel.
//!
//! `cargo bench --bench expiry`.

use shardwheel_peers as baselines;

use baselines::delay_queue::DelayQueuePeer;
use baselines::heap::HeapPeer;
use baselines::netty::NettyPeer;
use baselines::report::{self, OtherLoad};
use baselines::shardwheel::ShardwheelPeer;
use baselines::tokio_timers::TokioTaskPeer;
use baselines::{Peer, run_threads};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const N: usize = 1_000_000;
const SPREAD: Duration = Duration::from_secs(1);
const PRODUCERS: usize = 2;
const GROUP: &str = "expiry_1M_over_1s";

type Buffer = Arc<Mutex<Vec<(u32, i64)>>>;

/// Every thread that ran a task, with its records `(index, lateness ns)`. Per thread, so
/// the timer threads never share a cache line to record.
static BUFFERS: Mutex<Vec<Buffer>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: Buffer = {
        let buffer = Buffer::default();
        BUFFERS.lock().unwrap().push(buffer.clone());
        buffer
    };
}

/// Called by each task when it runs.
fn record(index: u32, deadline: Instant) {
    let now = Instant::now();
    let late = if now >= deadline { (now - deadline).as_nanos() as i64 } else { -((deadline - now).as_nanos() as i64) };
    MINE.with(|b| b.lock().unwrap().push((index, late)));
}

fn recorded() -> usize {
    BUFFERS.lock().unwrap().iter().map(|b| b.lock().unwrap().len()).sum()
}

fn take_records() -> Vec<(u32, i64)> {
    let mut all = Vec::with_capacity(N);
    for b in BUFFERS.lock().unwrap().iter() {
        all.append(&mut b.lock().unwrap());
    }
    all
}

fn deadline(t0: Instant, i: usize) -> Instant {
    t0 + SPREAD.mul_f64(i as f64 / N as f64)
}

/// What the runs of one peer found.
#[derive(Default)]
struct Findings {
    lateness: Vec<i64>,
    runs: usize,
    overran: usize,
    missing: usize,
    margin: Option<Duration>,
    other_load: f64,
}

impl Findings {
    /// The margin for the next run: 3 s at first, then 1.5 × the last arming time + 0.2 s.
    fn margin(&self) -> Duration {
        self.margin.unwrap_or(Duration::from_secs(3))
    }

    /// Waits for every task, checks, keeps the lateness; returns `T0` → last firing.
    fn finish_run(&mut self, t0: Instant, arm_start: Instant, armed: Instant) -> Duration {
        self.runs += 1;
        if armed > t0 {
            self.overran += 1;
        }
        self.margin = Some(((armed - arm_start).mul_f64(1.5) + Duration::from_millis(200)).min(Duration::from_secs(5)));
        let wait = Instant::now();
        while recorded() < N && wait.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let records = take_records();
        self.missing += N - records.len().min(N);
        let mut last = Duration::ZERO;
        for &(i, late) in &records {
            let fired = deadline(t0, i as usize) - t0 + Duration::from_nanos(late.max(0) as u64);
            last = last.max(fired);
            self.lateness.push(late);
        }
        last
    }
}

/// One run on a peer that fires its tasks itself.
fn run<P: Peer + Sync>(peer: &P, found: &mut Findings) -> Duration {
    let arm_start = Instant::now();
    let t0 = arm_start + found.margin();
    run_threads(peer, PRODUCERS, |peer, t| {
        for i in (t..N).step_by(PRODUCERS) {
            let at = deadline(t0, i);
            drop(peer.arm_at(at, move || record(i as u32, at)));
        }
    });
    peer.settle();
    found.finish_run(t0, arm_start, Instant::now())
}

/// One run on `DelayQueue`: filled on this thread, drained by one task that owns it.
fn run_delay_queue(peer: &DelayQueuePeer, found: &mut Findings) -> Duration {
    let arm_start = Instant::now();
    let t0 = arm_start + found.margin();
    let mut queue = peer.take_queue();
    peer.enter(|| {
        for i in 0..N {
            let at = deadline(t0, i);
            queue.insert_at(Box::new(move || record(i as u32, at)), at.into());
        }
    });
    let armed = Instant::now();
    let owner = peer.runtime().spawn(async move {
        while let Some(expired) = std::future::poll_fn(|cx| queue.poll_expired(cx)).await {
            (expired.into_inner())();
        }
        queue
    });
    let last = found.finish_run(t0, arm_start, armed);
    peer.put_queue(peer.runtime().block_on(owner).expect("the DelayQueue task"));
    last
}

fn bench<P>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    peer: &P,
    mut one: impl FnMut(&P, &mut Findings) -> Duration,
) -> Option<Findings> {
    if !report::wanted(&format!("{GROUP}/{}", report::safe(name))) {
        return None;
    }
    let mut found = Findings::default();
    let load = OtherLoad::start();
    g.bench_function(name, |b| b.iter_custom(|iters| (0..iters).map(|_| one(peer, &mut found)).sum::<Duration>()));
    found.other_load = load.cores();
    (found.runs > 0).then_some(found)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(ns: i64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn main() {
    report::mark_start();
    baselines::self_check_all();
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group(GROUP);
    // One iteration is a whole run (~1 s timed, a few s in all): ten of them per peer.
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(10));
    let mut results: Vec<(String, Findings)> = Vec::new();
    let mut keep = |name: &str, found: Option<Findings>| {
        if let Some(found) = found {
            results.push((name.to_owned(), found));
        }
    };
    {
        let peer = ShardwheelPeer::new(2);
        keep("shardwheel", bench(&mut g, "shardwheel", &peer, run));
        eprintln!("  [shardwheel] {}", peer.diagnostics());
    }
    {
        let peer = TokioTaskPeer::new();
        keep("tokio (task + sleep)", bench(&mut g, "tokio (task + sleep)", &peer, run));
    }
    {
        let peer = DelayQueuePeer::new();
        keep("DelayQueue", bench(&mut g, "DelayQueue", &peer, run_delay_queue));
    }
    {
        let peer = HeapPeer::new();
        keep("Mutex<BinaryHeap>", bench(&mut g, "Mutex<BinaryHeap>", &peer, run));
    }
    {
        let peer = NettyPeer::new();
        keep("netty-wheel", bench(&mut g, "netty-wheel", &peer, run));
        eprintln!("  [netty-wheel] {}", peer.diagnostics());
    }
    g.finish();
    c.final_summary();

    println!();
    println!("expiry: 1 M timeouts due over 1 s; lateness = firing time − requested deadline, over every run");
    println!(
        "{:<22} | {:>5} | {:>10} | {:>10} | {:>10} | {:>10} | {:>10} | {:>6} | {:>7} | {:>7} | {:>10} | T0→last fired (criterion)",
        "peer", "runs", "p50", "p90", "p99", "p99.9", "max", "early", "missing", "overran", "other load"
    );
    for (name, mut found) in results {
        found.lateness.sort_unstable();
        if found.lateness.is_empty() {
            continue;
        }
        let l = &found.lateness;
        let early = l.iter().filter(|&&x| x < 0).count();
        let total = report::typical_ns(GROUP, &report::safe(&name), "")
            .map_or("-".to_owned(), |ns| format!("{:.3} s", ns / 1e9));
        println!(
            "{:<22} | {:>5} | {:>10} | {:>10} | {:>10} | {:>10} | {:>10} | {:>6} | {:>7} | {:>7} | {:>10} | {}",
            name,
            found.runs,
            ms(percentile(l, 0.50)),
            ms(percentile(l, 0.90)),
            ms(percentile(l, 0.99)),
            ms(percentile(l, 0.999)),
            ms(*l.last().unwrap()),
            early,
            found.missing,
            found.overran,
            format!("{:.2} cores", found.other_load),
            total
        );
    }
    println!("(early: tasks that ran before their deadline; overran: runs whose arming was not over by T0)");
}
