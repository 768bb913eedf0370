//! A request timeout that did not fire, as an async server has it: a sleep made, polled once
//! with the task's own context (it registers) and dropped (it is cancelled), in tasks on a
//! tokio runtime with 1 worker, and on one with 2 workers, one task per worker (checked: each
//! task holds its worker until every task has one). shardwheel's `Sleep` against
//! `tokio::time::sleep`, on the same runtime, in the same run, with one shard per worker. The
//! bars: ≥ 1.5× tokio on 1 worker, ≥ 2× on 2.
//!
//! Both sleeps are pinned on the task's stack (as `tokio::time::timeout` and
//! `TimerService::timeout` keep theirs inline in their future); each costs what its design
//! costs: tokio takes its driver's lock to register and again to deregister; shardwheel
//! allocates one cell, stages it, and cancels it with one CAS.
//!
//! ```sh
//! cargo bench --bench sleep
//! cargo bench --bench sleep -- --warm-up-time 1 --measurement-time 2   # shorter
//! ```

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use shardwheel::TimerService;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// Worker threads, and producer tasks (one per worker): a thread alone, and every core busy
/// here. `SLEEP_WORKERS=1,4,16` measures other counts (`benches/many_cores.sh` sets it).
const WORKERS: [usize; 2] = [1, 2];

/// The worker counts to measure: `SLEEP_WORKERS` (comma-separated) or [`WORKERS`].
fn worker_counts() -> Vec<usize> {
    match std::env::var("SLEEP_WORKERS") {
        Ok(list) => {
            list.split(',').map(|w| w.trim().parse().expect("SLEEP_WORKERS: comma-separated worker counts")).collect()
        }
        Err(_) => WORKERS.to_vec(),
    }
}
/// Long enough never to fire while measured.
const DELAY: Duration = Duration::from_secs(30);

/// Polls once with the calling task's own context: registers with the task's real waker.
async fn poll_once<F: Future>(mut sleep: Pin<&mut F>) -> Poll<F::Output> {
    poll_fn(|cx| Poll::Ready(sleep.as_mut().poll(cx))).await
}

/// Holds this task's worker until all `workers` producer tasks have one of their own (setup,
/// untimed).
fn meet(arrived: &AtomicUsize, workers: usize) {
    arrived.fetch_add(1, Ordering::AcqRel);
    let t = Instant::now();
    while arrived.load(Ordering::Acquire) < workers {
        assert!(t.elapsed() < Duration::from_secs(10), "the producer tasks did not each get a worker");
        std::thread::yield_now();
    }
}

/// Runs `body(iters)` as one task on each of the `workers` workers; the time from the first
/// start to the last end.
fn on_workers<B, F>(rt: &Runtime, workers: usize, iters: u64, body: B) -> Duration
where
    B: Fn(u64) -> F + Send + Sync + Clone + 'static,
    F: Future<Output = u64> + Send,
{
    let arrived = Arc::new(AtomicUsize::new(0));
    // One task at a time, each spawned once the ones before it hold their workers: a task
    // spawned while every earlier one spins on its worker can only be taken by an idle
    // worker. (Spawned together, a worker may take two from the injection queue at once, and
    // the other, parked, is not always woken to steal one: `meet` then times out.)
    let tasks: Vec<_> = (0..workers)
        .map(|i| {
            let t = Instant::now();
            while arrived.load(Ordering::Acquire) < i {
                assert!(t.elapsed() < Duration::from_secs(10), "a producer task did not start");
                std::thread::yield_now();
            }
            let (arrived, body) = (arrived.clone(), body.clone());
            rt.spawn(async move {
                meet(&arrived, workers);
                let start = Instant::now();
                let lost = body(iters).await;
                (start, Instant::now(), lost)
            })
        })
        .collect();
    let spans: Vec<_> = rt.block_on(async {
        let mut spans = Vec::new();
        for t in tasks {
            spans.push(t.await.expect("a producer task panicked"));
        }
        spans
    });
    assert_eq!(spans.iter().map(|s| s.2).sum::<u64>(), 0, "a 30 s sleep was already due when first polled");
    let start = spans.iter().map(|s| s.0).min().expect("tasks ran");
    spans.iter().map(|s| s.1).max().expect("tasks ran") - start
}

fn sleep_made_polled_dropped(c: &mut Criterion) {
    for workers in worker_counts() {
        on_runtime(c, workers);
    }
}

/// Both rows on one runtime of `workers` workers, with a service of one shard per worker.
fn on_runtime(c: &mut Criterion, workers: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_time()
        .build()
        .expect("a tokio runtime");
    let timers = TimerService::builder().shards(workers).build().expect("a valid service");
    let mut g = c.benchmark_group(format!("sleep made, polled once, dropped; {workers} workers"));
    g.throughput(Throughput::Elements(workers as u64));
    g.bench_function(BenchmarkId::new("tokio::time::sleep", workers), |b| {
        b.iter_custom(|iters| {
            on_workers(&rt, workers, iters, |n| async move {
                let mut lost = 0;
                for _ in 0..n {
                    let sleep = pin!(tokio::time::sleep(DELAY));
                    lost += u64::from(poll_once(sleep).await.is_ready());
                }
                lost
            })
        });
    });
    g.bench_function(BenchmarkId::new("shardwheel Sleep", workers), |b| {
        b.iter_custom(|iters| {
            let timers = timers.clone();
            on_workers(&rt, workers, iters, move |n| {
                let timers = timers.clone();
                async move {
                    let mut lost = 0;
                    for _ in 0..n {
                        let sleep = pin!(timers.sleep(DELAY));
                        lost += u64::from(poll_once(sleep).await.is_ready());
                    }
                    lost
                }
            })
        });
    });
    g.finish();
    let stats = timers.stats();
    println!(
        "shardwheel, {workers} workers: {} sleeps registered, {} pending after the run",
        stats.scheduled,
        timers.pending()
    );
}

criterion_group!(benches, sleep_made_polled_dropped);
criterion_main!(benches);
