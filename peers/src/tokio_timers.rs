//! tokio's timer driver, three ways.
//!
//! - [`TokioInRuntime`] (row "tokio", the headline): how a tokio server uses its timers.
//!   Producers are tasks on the runtime's worker threads, one per producer, on a multi-thread
//!   runtime with `worker_threads = producers`. A request timeout is a `tokio::time::sleep`
//!   that lives in the task's own state (pinned on the stack with `std::pin::pin!`, as
//!   `tokio::time::timeout` keeps its `Sleep` inline in its future, so no allocation), polled
//!   once with the task's own `Context` (tokio registers a `Sleep` with the driver on its
//!   first poll, with the task's real waker) and dropped, which deregisters it. Resets are
//!   `Sleep::reset` to a precomputed instant, in a task on a worker. Pending timeouts are
//!   `Sleep`s created and polled the same way in a task, then held (boxed: they outlive the
//!   task that polled them, as each would live in its own connection task's heap-allocated
//!   state).
//! - [`TokioSleepPeer`] (row "tokio (foreign threads)", never the headline): the same `Sleep`s
//!   armed from threads that are not the runtime's, under `Runtime::enter`, boxed and polled
//!   once with `Waker::noop()`; cancel = drop; reset = `Sleep::reset`. That is not how tokio
//!   is used: with the workers idle, every arm with a deadline earlier than the one the
//!   driver sleeps until unparks the driver, so this row makes tokio look slower than it is.
//!   The closure is dropped, never boxed: with tokio, what happens on timeout is code in the
//!   task that owns the `Sleep`, not an allocation. With a no-op waker nothing would run it
//!   anyway, so this peer is not used where timeouts must fire.
//! - [`TokioTaskPeer`]: a spawned task that sleeps, then runs the closure: how tokio code
//!   really gets "run this later". Used where timeouts must fire (expiry).
//!
//! The last two on a multi-thread runtime with one worker per core (tokio's default).

use super::Peer;
use std::collections::HashSet;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::time::Sleep;

/// The row label of [`TokioInRuntime`].
pub const IN_RUNTIME: &str = "tokio";
/// The row label of [`TokioSleepPeer`].
pub const FOREIGN_THREADS: &str = "tokio (foreign threads)";

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_time().build().expect("a tokio runtime")
}

/// How many times the runtime's workers parked (went idle, one of them on the timer driver)
/// since it was built: each park after an unpark is a wake-up.
fn worker_parks(rt: &Runtime) -> String {
    let m = rt.metrics();
    let parks: u64 = (0..m.num_workers()).map(|w| m.worker_park_count(w)).sum();
    format!("{} workers, worker parks {parks}", m.num_workers())
}

/// Polls once, with a waker that does nothing: registers the timer.
fn poll_once(sleep: Pin<&mut Sleep>) -> Poll<()> {
    sleep.poll(&mut Context::from_waker(Waker::noop()))
}

/// Polls once with the calling task's own context, as an `.await` on it would the first
/// time: registers the timer with the driver, with this task's waker.
async fn poll_once_in_task(mut sleep: Pin<&mut Sleep>) -> Poll<()> {
    poll_fn(|cx| Poll::Ready(sleep.as_mut().poll(cx))).await
}

/// Setup, before anything is timed: holds this task's worker thread (spinning) until `tasks`
/// tasks have arrived. A worker held here runs nothing else, so once all have arrived each
/// task has a worker of its own; they never yield after this (a `Sleep` polled once is
/// pending, and no other `.await` waits), so each finishes on that worker. With
/// `worker_threads ≥ tasks` and nothing else on the runtime they always arrive; if they do
/// not within 10 s, this panics instead of measuring producers sharing a worker.
fn hold_worker_until_all_arrive(arrived: &AtomicUsize, tasks: usize) {
    arrived.fetch_add(1, Ordering::AcqRel);
    let t = Instant::now();
    while arrived.load(Ordering::Acquire) < tasks {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "tokio: the producer tasks did not each get a worker thread of their own"
        );
        std::thread::yield_now();
    }
}

/// tokio's timers used from tasks on the runtime's own worker threads, one task per producer:
/// see the module's docs. Not a [`Peer`]: its producers are tasks, not threads, and its
/// timeouts live on the task's stack, so it has measurements of its own.
#[derive(Debug)]
pub struct TokioInRuntime {
    rt: Runtime,
    workers: usize,
}

impl TokioInRuntime {
    /// A multi-thread runtime with `workers` worker threads and the time driver.
    pub fn new(workers: usize) -> TokioInRuntime {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_time()
            .build()
            .expect("a tokio runtime");
        TokioInRuntime { rt, workers }
    }

    pub fn name(&self) -> &'static str {
        IN_RUNTIME
    }

    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Runs `fut` as a task on one of the runtime's workers, and waits for its result.
    pub fn on_worker<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> T {
        self.rt.block_on(self.rt.spawn(fut)).expect("a task on the tokio runtime panicked")
    }

    /// `n` sleeps, sleep `i` due `delay_of(i)` from when it is made, each created in a task on
    /// a worker and polled once there with the task's own context, so the driver's wheel holds
    /// them. The caller holds them for as long as they must stay pending (dropping one cancels
    /// it); they may be dropped from any thread.
    pub fn arm_registered(
        &self,
        n: usize,
        delay_of: impl Fn(usize) -> Duration + Send + 'static,
    ) -> Vec<Pin<Box<Sleep>>> {
        self.on_worker(async move {
            let mut sleeps = Vec::with_capacity(n);
            for i in 0..n {
                let mut sleep = Box::pin(tokio::time::sleep(delay_of(i)));
                assert!(poll_once_in_task(sleep.as_mut()).await.is_pending(), "tokio: a pre-armed sleep was due");
                sleeps.push(sleep);
            }
            sleeps
        })
    }

    /// The workload of `arm_cancel` and `scaling`, as a tokio server runs it: one task per
    /// worker, each doing `iters` times: `tokio::time::sleep(delay)` pinned on the task's
    /// stack, polled once with the task's context (registers), dropped (deregisters). The
    /// tasks are spawned and meet on their workers (see `hold_worker_until_all_arrive`)
    /// before anything is timed; each stamps its own start and end, and the result is the
    /// first start to the last end, as [`run_threads`](super::run_threads) measures threads.
    /// Panics if a sleep was not pending when polled, or two producers shared a worker.
    pub fn arm_cancel_pairs(&self, delay: Duration, iters: u64) -> Duration {
        let tasks = self.workers;
        let arrived = Arc::new(AtomicUsize::new(0));
        let running: Vec<_> = (0..tasks)
            .map(|_| {
                let arrived = arrived.clone();
                self.rt.spawn(async move {
                    hold_worker_until_all_arrive(&arrived, tasks);
                    let mut lost = 0u64;
                    let start = Instant::now();
                    for _ in 0..iters {
                        let sleep = pin!(tokio::time::sleep(delay));
                        lost += u64::from(poll_once_in_task(sleep).await.is_ready());
                        // Dropped here: deregistered, as a request's timeout when its response came.
                    }
                    let end = Instant::now();
                    (start, end, lost, std::thread::current().id())
                })
            })
            .collect();
        let spans = self.rt.block_on(async {
            let mut spans = Vec::with_capacity(running.len());
            for task in running {
                spans.push(task.await.expect("a producer task panicked"));
            }
            spans
        });
        let lost: u64 = spans.iter().map(|s| s.2).sum();
        assert_eq!(lost, 0, "tokio: a 30 s sleep was already due when first polled");
        let threads: HashSet<_> = spans.iter().map(|s| s.3).collect();
        assert_eq!(threads.len(), tasks, "tokio: producer tasks shared a worker thread");
        let start = spans.iter().map(|s| s.0).min().expect("at least one task");
        let end = spans.iter().map(|s| s.1).max().expect("at least one task");
        end - start
    }

    /// The workload of `reset`: `iters` times, in one task on a worker, `Sleep::reset` of
    /// `sleeps[next]` (round-robin) to the precomputed `targets` in turn (see
    /// [`for_each_target`](super::for_each_target)); no clock is read in the timed loop. Hands
    /// the sleeps back with the next index and the time the task measured. Panics if one of
    /// the sleeps has elapsed (a reset that lost), checked after the timed loop.
    pub fn resets(
        &self,
        mut sleeps: Vec<Pin<Box<Sleep>>>,
        mut next: usize,
        targets: Vec<tokio::time::Instant>,
        iters: u64,
    ) -> (Vec<Pin<Box<Sleep>>>, usize, Duration) {
        self.on_worker(async move {
            let start = Instant::now();
            super::for_each_target(iters, &targets, |_, at| reset_next(&mut sleeps, &mut next, at));
            let elapsed = start.elapsed();
            assert!(sleeps.iter().all(|s| !s.is_elapsed()), "tokio: a reset sleep elapsed");
            (sleeps, next, elapsed)
        })
    }

    /// [`resets`](Self::resets) with a deadline of its own for every reset (see
    /// [`for_each_deadline`](super::for_each_deadline)): `first + i ns`, computed in the loop.
    pub fn resets_each(
        &self,
        mut sleeps: Vec<Pin<Box<Sleep>>>,
        mut next: usize,
        first: tokio::time::Instant,
        iters: u64,
    ) -> (Vec<Pin<Box<Sleep>>>, usize, Duration) {
        self.on_worker(async move {
            let start = Instant::now();
            super::for_each_deadline(iters, first, |_, at| reset_next(&mut sleeps, &mut next, at));
            let elapsed = start.elapsed();
            assert!(sleeps.iter().all(|s| !s.is_elapsed()), "tokio: a reset sleep elapsed");
            (sleeps, next, elapsed)
        })
    }

    /// A sleep polled in a task wakes that task at its deadline and not before; the measured
    /// arm + cancel pattern runs with every producer on its own worker and every sleep pending;
    /// a registered sleep reset to a later instant waits for it.
    pub fn self_check(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        self.rt.spawn(async move {
            let armed = Instant::now();
            tokio::time::sleep(Duration::from_millis(5)).await;
            let _ = tx.send((armed, Instant::now()));
        });
        let (armed, woke) =
            rx.recv_timeout(Duration::from_secs(10)).expect("tokio: a 5 ms sleep in a task did not wake it in 10 s");
        assert!(woke >= armed + Duration::from_millis(5), "tokio: a sleep in a task woke it early");

        let _ = self.arm_cancel_pairs(Duration::from_secs(30), 1_000);

        let (tx, rx) = std::sync::mpsc::channel();
        self.rt.spawn(async move {
            let armed = Instant::now();
            let later = tokio::time::Instant::from_std(armed + Duration::from_millis(100));
            let mut sleep = pin!(tokio::time::sleep(Duration::from_millis(10)));
            assert!(poll_once_in_task(sleep.as_mut()).await.is_pending());
            sleep.as_mut().reset(later);
            sleep.await;
            let _ = tx.send((armed, Instant::now()));
        });
        let (armed, woke) =
            rx.recv_timeout(Duration::from_secs(10)).expect("tokio: a reset sleep in a task did not wake it in 10 s");
        assert!(woke >= armed + Duration::from_millis(100), "tokio: a sleep reset to 100 ms woke its task early");
    }

    pub fn diagnostics(&self) -> String {
        worker_parks(&self.rt)
    }
}

/// A boxed `Sleep`, registered from a thread that is not the runtime's: see the module's docs.
#[derive(Debug)]
pub struct TokioSleepPeer {
    rt: Runtime,
}

/// A registered `Sleep`: dropping it deregisters it.
#[derive(Debug)]
pub struct SleepHandle {
    sleep: Pin<Box<Sleep>>,
}

impl TokioSleepPeer {
    pub fn new() -> TokioSleepPeer {
        TokioSleepPeer { rt: runtime() }
    }

    /// `Sleep::reset` to `deadline`, computed by the caller (no clock read); `false` if the
    /// sleep had elapsed.
    pub fn reset_at(&self, handle: &mut SleepHandle, deadline: tokio::time::Instant) -> bool {
        if handle.sleep.is_elapsed() {
            return false;
        }
        handle.sleep.as_mut().reset(deadline);
        true
    }

    fn registered(mut sleep: Pin<Box<Sleep>>) -> SleepHandle {
        let _ = poll_once(sleep.as_mut());
        SleepHandle { sleep }
    }

    /// Its tasks never run (no-op waker), so check the timer itself: it elapses, not early;
    /// a dropped one is gone; a reset one waits for its new deadline.
    pub fn self_check(&self) {
        self.enter(|| {
            let armed = Instant::now();
            let mut h = self.arm(Duration::from_millis(5), || {});
            assert!(poll_once(h.sleep.as_mut()).is_pending(), "tokio (foreign threads): a 5 ms sleep elapsed at once");
            let t = Instant::now();
            while poll_once(h.sleep.as_mut()).is_pending() {
                assert!(t.elapsed() < Duration::from_secs(10), "tokio (foreign threads): a 5 ms sleep never elapsed");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(armed.elapsed() >= Duration::from_millis(5), "tokio (foreign threads): elapsed early");
            let h = self.arm(Duration::from_secs(30), || {});
            assert!(self.cancel(h), "tokio (foreign threads): cancel of a pending sleep returned false");
            let mut h = self.arm(Duration::from_millis(10), || {});
            assert!(self.reset(&mut h, Duration::from_secs(30), || {}));
            let mut h2 = self.arm(Duration::from_millis(10), || {});
            let later = tokio::time::Instant::now() + Duration::from_secs(30);
            assert!(self.reset_at(&mut h2, later));
            std::thread::sleep(Duration::from_millis(50));
            assert!(poll_once(h.sleep.as_mut()).is_pending(), "tokio (foreign threads): a sleep reset to 30 s elapsed");
            assert!(
                poll_once(h2.sleep.as_mut()).is_pending(),
                "tokio (foreign threads): a sleep reset to an instant 30 s ahead elapsed"
            );
        });
    }
}

impl Peer for TokioSleepPeer {
    type Handle = SleepHandle;

    fn name(&self) -> &'static str {
        FOREIGN_THREADS
    }

    fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.rt.enter();
        f()
    }

    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, _task: F) -> SleepHandle {
        Self::registered(Box::pin(tokio::time::sleep(delay)))
    }

    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, _task: F) -> SleepHandle {
        Self::registered(Box::pin(tokio::time::sleep_until(deadline.into())))
    }

    fn cancel(&self, handle: SleepHandle) -> bool {
        let pending = !handle.sleep.is_elapsed();
        drop(handle); // deregisters
        pending
    }

    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut SleepHandle, delay: Duration, _fresh: F) -> bool {
        if handle.sleep.is_elapsed() {
            return false;
        }
        handle.sleep.as_mut().reset(tokio::time::Instant::now() + delay);
        true
    }

    fn reset_kind(&self) -> &'static str {
        "Sleep::reset"
    }

    fn diagnostics(&self) -> String {
        worker_parks(&self.rt)
    }
}

/// A spawned task per timeout: `sleep_until(deadline).await; task()`. Cancel = abort.
#[derive(Debug)]
pub struct TokioTaskPeer {
    rt: Runtime,
    /// Tasks that have polled their sleep once (registered it with the driver).
    registered: Arc<AtomicUsize>,
    spawned: AtomicUsize,
}

impl TokioTaskPeer {
    pub fn new() -> TokioTaskPeer {
        Self::on(runtime())
    }

    /// The same on a runtime with `workers` worker threads (the simulator's `--compare` gives
    /// it one per shard of shardwheel's).
    pub fn with_workers(workers: usize) -> TokioTaskPeer {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_time().build();
        Self::on(rt.expect("a tokio runtime"))
    }

    fn on(rt: Runtime) -> TokioTaskPeer {
        TokioTaskPeer { rt, registered: Arc::new(AtomicUsize::new(0)), spawned: AtomicUsize::new(0) }
    }

    /// Tasks alive on the runtime: the timeouts that have neither fired nor been dropped (an
    /// aborted task counts until a worker drops it).
    pub fn alive(&self) -> usize {
        self.rt.metrics().num_alive_tasks()
    }

    fn spawn<F: FnOnce() + Send + 'static>(
        &self,
        deadline: tokio::time::Instant,
        task: F,
    ) -> tokio::task::JoinHandle<()> {
        self.spawned.fetch_add(1, Ordering::Relaxed);
        let registered = self.registered.clone();
        self.rt.spawn(async move {
            let mut sleep = std::pin::pin!(tokio::time::sleep_until(deadline));
            let mut first = true;
            poll_fn(|cx| {
                let r = sleep.as_mut().poll(cx);
                if first {
                    first = false;
                    registered.fetch_add(1, Ordering::Relaxed);
                }
                r
            })
            .await;
            task()
        })
    }
}

impl Peer for TokioTaskPeer {
    type Handle = tokio::task::JoinHandle<()>;

    fn name(&self) -> &'static str {
        "tokio (task + sleep)"
    }

    fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.rt.enter();
        f()
    }

    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Self::Handle {
        self.spawn(tokio::time::Instant::now() + delay, task)
    }

    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, task: F) -> Self::Handle {
        self.spawn(deadline.into(), task)
    }

    fn cancel(&self, handle: Self::Handle) -> bool {
        let pending = !handle.is_finished();
        handle.abort();
        pending
    }

    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Self::Handle, delay: Duration, fresh: F) -> bool {
        if handle.is_finished() {
            return false;
        }
        handle.abort();
        *handle = self.arm(delay, fresh);
        true
    }

    fn reset_kind(&self) -> &'static str {
        "abort + spawn again"
    }

    /// Until every spawned task has registered its sleep.
    fn settle(&self) {
        let t = Instant::now();
        while self.registered.load(Ordering::Relaxed) < self.spawned.load(Ordering::Relaxed)
            && t.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// One reset of a round-robin over `sleeps`: `sleeps[*next]` to `at`, and `next` moves on.
#[inline]
fn reset_next(sleeps: &mut [Pin<Box<Sleep>>], next: &mut usize, at: tokio::time::Instant) {
    sleeps[*next].as_mut().reset(at);
    *next += 1;
    if *next == sleeps.len() {
        *next = 0;
    }
}
