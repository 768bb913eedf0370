//! The benches' harness for tasks on a tokio runtime's workers, one task per worker
//! (checked: each task holds its worker until every task has one), shared by
//! `benches/sleep.rs` and `benches/timeout.rs`.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// Worker threads, and producer tasks (one per worker): a thread alone, and every core busy
/// here. `SLEEP_WORKERS=1,4,16` measures other counts (`benches/many_cores.sh` sets it).
const WORKERS: [usize; 2] = [1, 2];

/// The worker counts to measure: `SLEEP_WORKERS` (comma-separated) or [`WORKERS`].
pub fn worker_counts() -> Vec<usize> {
    match std::env::var("SLEEP_WORKERS") {
        Ok(list) => {
            list.split(',').map(|w| w.trim().parse().expect("SLEEP_WORKERS: comma-separated worker counts")).collect()
        }
        Err(_) => WORKERS.to_vec(),
    }
}
/// Polls once with the calling task's own context: registers with the task's real waker.
pub async fn poll_once<F: Future>(mut sleep: Pin<&mut F>) -> Poll<F::Output> {
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
/// start to the last end. Each body returns how many of its iterations did not do what the
/// row measures (a sleep already due at its first poll, a timeout that did not complete at
/// once): any is a failed run.
pub fn on_workers<B, F>(rt: &Runtime, workers: usize, iters: u64, body: B) -> Duration
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
    assert_eq!(spans.iter().map(|s| s.2).sum::<u64>(), 0, "an iteration did not do what it measures");
    let start = spans.iter().map(|s| s.0).min().expect("tasks ran");
    spans.iter().map(|s| s.1).max().expect("tasks ran") - start
}
