//! `timeout` as a server uses it, in tasks on a tokio runtime with 1 worker and with 2, one
//! task per worker (checked), against the timeouts such a server could use instead, each run
//! the way its users run it (all inside tokio tasks; async-io's timer thread is its own):
//!
//! - **ready at once**: `timeout(30 s, ready)`, made, polled once (the future completes),
//!   dropped. Most of a server's reads and writes are ready when first polled: every library
//!   here skips its timer then, so this row is the cost of the call itself: for those whose
//!   deadline counts from the call (shardwheel's, tokio's, async-io's timer made with the
//!   timeout), one clock read. Bar (issue 29): shardwheel's ambient `time::timeout` ≥ 1.0×
//!   pingora's `fast_timeout` and async-io's.
//! - **registered**: `timeout(30 s, pending)`, made, polled once (the deadline registers),
//!   dropped (it is cancelled): a request timeout that did not fire. Bar: ≥ 1.2× tokio's and
//!   ≥ 1.1× `fast_timeout` on 2 workers.
//!
//! The rows: shardwheel's ambient `time::timeout` (the default service, a shard per core)
//! and `TimerService::timeout` (an explicit service, a shard per worker), `tokio::time::timeout`,
//! pingora-timeout's `fast_timeout` (its own timer thread, 10 ms resolution) and
//! `tokio_timeout` (tokio's timer, made on the first poll), and async-io's `Timer::after`
//! raced with the future (`futures_lite::FutureExt::or`, the future first), made with the
//! timeout, and made lazily on the first poll.
//!
//! ```sh
//! cargo bench --bench timeout
//! python3 benches/median.py --runs 5 --bench timeout --subject 'shardwheel time::timeout'
//! ```

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_lite::FutureExt;
use shardwheel::TimerService;
use std::future::{Future, pending, ready};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

#[path = "common/workers.rs"]
mod workers;
use workers::{on_workers, poll_once, worker_counts};

/// Long enough never to fire while measured.
const DELAY: Duration = Duration::from_secs(30);

/// async-io's timeout as most smol code writes it: the future raced with a timer made with
/// it (one clock read, the deadline counted from the call, as tokio's and shardwheel's), the
/// future polled first.
fn async_io_timeout<F: Future>(delay: Duration, future: F) -> impl Future<Output = Result<F::Output, ()>> {
    let timer = async_io::Timer::after(delay);
    async move { Ok(future.await) }.or(async move {
        timer.await;
        Err(())
    })
}

/// The same with the timer made inside the racing block (`.or(async { Timer::after(d).await;
/// … })`): it is made only if the future is pending on the first poll, so a ready future
/// reads no clock, and the deadline counts from the first poll instead (pingora's
/// `tokio_timeout` is lazy the same way). Shown for what it costs; not the same promise.
fn async_io_lazy_timeout<F: Future>(delay: Duration, future: F) -> impl Future<Output = Result<F::Output, ()>> {
    async move { Ok(future.await) }.or(async move {
        async_io::Timer::after(delay).await;
        Err(())
    })
}

/// One row: `workers` tasks each make `n` timeouts with `make`, poll each once and drop it;
/// an iteration whose poll is not as `expected` (ready, or pending) fails the run.
macro_rules! row {
    ($g:expr, $rt:expr, $workers:expr, $name:expr, $expect_ready:expr, $make:expr) => {
        $g.bench_function(BenchmarkId::new($name, $workers), |b| {
            b.iter_custom(|iters| {
                on_workers($rt, $workers, iters, move |n| async move {
                    let mut wrong = 0;
                    for _ in 0..n {
                        let timeout = pin!($make());
                        let ready = matches!(poll_once(timeout).await, Poll::Ready(Ok(_)));
                        wrong += u64::from(ready != $expect_ready);
                    }
                    wrong
                })
            })
        });
    };
}

fn timeouts(c: &mut Criterion) {
    // Pingora's timer thread starts on its first use: before the measurement.
    drop(pingora_timeout::fast_timeout::fast_timeout(DELAY, ready(())));
    for workers in worker_counts() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_time()
            .build()
            .expect("a tokio runtime");
        let explicit = TimerService::builder().shards(workers).build().expect("a valid service");
        for (case, expect_ready) in [("ready at once", true), ("registered, dropped", false)] {
            let mut g = c.benchmark_group(format!("timeout {case}; {workers} workers"));
            g.throughput(Throughput::Elements(workers as u64));
            macro_rules! future {
                () => {
                    async move { if expect_ready { 1 } else { pending::<u32>().await } }
                };
            }
            row!(g, &rt, workers, "shardwheel time::timeout", expect_ready, || shardwheel::time::timeout(
                DELAY,
                future!()
            ));
            // Copied into every task (the tasks are `'static`): the handle, leaked for the run.
            let service: &'static TimerService = Box::leak(Box::new(explicit.clone()));
            row!(g, &rt, workers, "shardwheel TimerService::timeout", expect_ready, || service
                .timeout(DELAY, future!()));
            row!(g, &rt, workers, "tokio::time::timeout", expect_ready, || tokio::time::timeout(DELAY, future!()));
            row!(g, &rt, workers, "pingora fast_timeout", expect_ready, || {
                pingora_timeout::fast_timeout::fast_timeout(DELAY, future!())
            });
            row!(g, &rt, workers, "pingora tokio_timeout", expect_ready, || pingora_timeout::tokio_timeout(
                DELAY,
                future!()
            ));
            row!(g, &rt, workers, "async-io Timer", expect_ready, || async_io_timeout(DELAY, future!()));
            row!(g, &rt, workers, "async-io Timer, lazy", expect_ready, || async_io_lazy_timeout(DELAY, future!()));
            g.finish();
        }
        assert_eq!(explicit.pending(), 0, "every registered timeout was cancelled");
    }
}

criterion_group!(benches, timeouts);
criterion_main!(benches);
