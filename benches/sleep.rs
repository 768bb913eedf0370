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
use std::pin::pin;
use std::time::Duration;

#[path = "common/workers.rs"]
mod workers;
use workers::{on_workers, poll_once, worker_counts};

/// Long enough never to fire while measured.
const DELAY: Duration = Duration::from_secs(30);

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
