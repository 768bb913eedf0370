//! The peers every benchmark runs the same workload on, behind one small trait.
//!
//! - [`shardwheel`]: this crate's `TimerService` and `Timeout`.
//! - [`tokio_timers`]: tokio's timer driver. The headline row "tokio" is
//!   [`tokio_timers::TokioInRuntime`]: `Sleep`s created, polled once and dropped inside tasks
//!   on the runtime's worker threads, one task per producer, as a tokio server uses them; it
//!   is not a [`Peer`] (its producers are tasks, not threads) and has measurements of its
//!   own. The secondary row "tokio (foreign threads)" arms the same `Sleep`s from other
//!   threads under `Runtime::enter`; and tokio tasks that sleep, where timeouts must fire.
//! - [`delay_queue`]: `tokio_util::time::DelayQueue`, single-threaded (one producer only).
//! - [`heap`]: a `Mutex<BinaryHeap>` and one worker, cancelling as `ScheduledThreadPoolExecutor`
//!   does by default (a flag; the entry stays in the heap until its time).
//! - [`netty`]: a Netty `HashedWheelTimer` architecture (one global wheel with rounds, one
//!   ticking worker, MPSC queues for arms and cancels).
//!
//! This crate is shared: the benchmarks (`benches/`, as `use shardwheel_peers as baselines;`)
//! and the simulator's `--compare` (`sim/`) drive the very same peers. Every bench binary
//! calls [`self_check_all`] first: a short functional check of every peer (fires, never
//! early, cancel wins and the task never runs, reset moves the deadline), so a broken peer
//! cannot produce a flattering ratio. There is no `#[cfg(test)]` here: benches are not tests.
//!
//! Calling convention: every call on a peer happens inside [`Peer::enter`] on that thread
//! (tokio's foreign-thread peers need their runtime entered there).

// A peer's `new` starts threads or a runtime: a `Default` that does so would surprise.
#![allow(clippy::new_without_default)]

pub mod counting;
pub mod delay_queue;
pub mod heap;
pub mod netty;
pub mod report;
pub mod shardwheel;
pub mod tokio_timers;

use std::sync::mpsc;
use std::time::{Duration, Instant};

mod peer;
pub use peer::{Peer, Task};
/// The tokio the peers run on, for callers that need its types (`tokio::time::Instant`).
pub use tokio;

/// The functional check every closure-running peer passes before it is measured.
pub fn generic_check<P: Peer>(peer: &P) {
    let name = peer.name();
    peer.enter(|| {
        // It fires, and never before its deadline.
        let (tx, rx) = mpsc::channel();
        let armed = Instant::now();
        let _h = peer.arm(Duration::from_millis(5), move || tx.send(Instant::now()).unwrap());
        let fired = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{name}: a 5 ms timeout did not fire within 10 s"));
        assert!(
            fired >= armed + Duration::from_millis(5),
            "{name}: fired early ({:?} after arming a 5 ms timeout)",
            fired - armed
        );

        // A cancel that wins means the task never runs.
        let (tx, rx) = mpsc::channel::<()>();
        let h = peer.arm(Duration::from_millis(20), move || tx.send(()).unwrap());
        assert!(peer.cancel(h), "{name}: cancelling a pending timeout returned false");
        assert!(rx.recv_timeout(Duration::from_millis(100)) != Ok(()), "{name}: a cancelled timeout ran");

        // A reset to later moves the deadline: it does not fire at the old one, and does fire.
        let (tx, rx) = mpsc::channel();
        let mut h = peer.arm(Duration::from_millis(20), move || tx.send(Instant::now()).unwrap());
        let reset_at = Instant::now();
        let (tx2, rx2) = mpsc::channel();
        assert!(
            peer.reset(&mut h, Duration::from_millis(300), move || tx2.send(Instant::now()).unwrap()),
            "{name}: reset of a pending timeout returned false"
        );
        let fired = rx
            .recv_timeout(Duration::from_secs(10))
            .or_else(|_| rx2.recv_timeout(Duration::from_secs(10)))
            .unwrap_or_else(|_| panic!("{name}: a reset timeout never fired"));
        assert!(
            fired >= reset_at + Duration::from_millis(300),
            "{name}: a timeout reset to 300 ms fired after {:?}",
            fired - reset_at
        );
        drop(h);
    });
}

/// `iters` arm + cancel pairs with `delay`, each closure capturing a `u64`: the workload of
/// `arm_cancel` and `scaling`. Every cancel must win (the timeouts are far from due).
pub fn arm_cancel_pairs<P: Peer>(peer: &P, delay: Duration, iters: u64) {
    let mut lost = 0u64;
    for i in 0..iters {
        let handle = peer.arm(delay, move || {
            std::hint::black_box(i);
        });
        lost += u64::from(!peer.cancel(std::hint::black_box(handle)));
    }
    assert_eq!(lost, 0, "{}: a cancel of a pending timeout lost", peer.name());
}

/// Checks every peer once (about a second in all). Each bench binary calls it first.
pub fn self_check_all() {
    let t = Instant::now();
    // Peers whose tasks run by themselves pass the generic check; the others (tokio in its
    // runtime, which is no `Peer`; tokio's no-op-waker sleeps; the DelayQueue that must be
    // polled) check themselves.
    generic_check(&shardwheel::ShardwheelPeer::new(2));
    tokio_timers::TokioInRuntime::new(2).self_check();
    tokio_timers::TokioSleepPeer::new().self_check();
    generic_check(&tokio_timers::TokioTaskPeer::new());
    delay_queue::DelayQueuePeer::new().self_check();
    generic_check(&heap::HeapPeer::new());
    generic_check(&netty::NettyPeer::new());
    eprintln!("baselines: every peer passed its self-check ({:.2?})", t.elapsed());
}

/// `1_000_000` → "1M", `10_000` → "10k".
pub fn count_label(n: usize) -> String {
    match n {
        0 => "0".to_owned(),
        n if n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// The delay of pre-armed timeout `i` of `n`: between 60 s and 660 s, spread evenly.
pub fn prearm_delay(i: usize, n: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_nanos((600_000_000_000u128 * i as u128 / n as u128) as u64)
}

/// Pre-arms `n` timeouts due between 60 s and 660 s from now, spread evenly
/// ([`prearm_delay`]), each with a closure capturing a `u64`, and waits for the peer to take
/// them in. The caller keeps the handles (dropping a tokio handle would cancel it). tokio in
/// its runtime pre-arms with [`tokio_timers::TokioInRuntime::arm_registered`] instead.
pub fn prearm<P: Peer>(peer: &P, n: usize) -> Vec<P::Handle> {
    let mut handles = Vec::with_capacity(n);
    peer.enter(|| {
        for i in 0..n {
            let delay = prearm_delay(i, n);
            let x = i as u64;
            handles.push(peer.prearm(i, delay, move || {
                std::hint::black_box(x);
            }));
        }
    });
    peer.settle();
    handles
}

/// How many precomputed deadlines one timed sample of resets moves its timeouts to.
pub const RESET_TARGETS: usize = 16;

/// The later deadlines resets move timeouts to, computed before each timed sample so that no
/// reset reads the clock: [`RESET_TARGETS`] instants 1 ms apart (one tick, for shardwheel and
/// tokio alike), the first `delay` from now and at least 1 ms after the previous sample's
/// last. Used in turn by [`for_each_target`], every timeout's deadline only moves later.
#[derive(Debug)]
pub struct ResetTargets {
    delay: Duration,
    last: Option<Instant>,
}

impl ResetTargets {
    pub fn new(delay: Duration) -> ResetTargets {
        ResetTargets { delay, last: None }
    }

    /// The targets for the next sample (read the clock once, before it is timed).
    pub fn next_sample(&mut self) -> Vec<Instant> {
        const STEP: Duration = Duration::from_millis(1);
        let mut first = Instant::now() + self.delay;
        if let Some(last) = self.last {
            first = first.max(last + STEP);
        }
        let targets: Vec<Instant> = (0..RESET_TARGETS as u32).map(|k| first + STEP * k).collect();
        self.last = targets.last().copied();
        targets
    }
}

/// Calls `f(i, target)` for `i` in `0..iters`: the `targets` in order, each for an equal
/// share of the iterations (the last one also for the remainder). The target changes only in
/// the outer loop, so the inner loop is the call alone; with `targets` in increasing order, a
/// round-robin over timeouts moves each one's deadline only later.
pub fn for_each_target<T: Copy>(iters: u64, targets: &[T], mut f: impl FnMut(u64, T)) {
    let share = iters / targets.len() as u64;
    let mut i = 0;
    for (k, &target) in targets.iter().enumerate() {
        let end = if k + 1 == targets.len() { iters } else { i + share };
        while i < end {
            f(i, target);
            i += 1;
        }
    }
}

/// The start of a sample of [`for_each_deadline`] resets: `delay` from now, and after
/// the previous sample's last deadline, so that every timeout's deadline only moves later
/// across samples too. Read before the sample is timed.
#[derive(Debug)]
pub struct EachDeadline {
    delay: Duration,
    last: Option<Instant>,
}

impl EachDeadline {
    pub fn new(delay: Duration) -> EachDeadline {
        EachDeadline { delay, last: None }
    }

    /// The first deadline of a sample of `iters` resets; the sample's deadlines are this one
    /// plus 0, 1, … `iters − 1` ns.
    pub fn next_sample(&mut self, iters: u64) -> Instant {
        let mut first = Instant::now() + self.delay;
        if let Some(last) = self.last {
            first = first.max(last + Duration::from_millis(1));
        }
        self.last = Some(first + Duration::from_nanos(iters));
        first
    }
}

/// Calls `f(i, first + i ns)` for `i` in `0..iters`: a deadline of its own for every reset,
/// computed in the loop as a server computes `now + idle` for each connection that spoke
/// (hyper's timer resets so), so the add is timed too, for every peer alike. The deadlines
/// increase by 1 ns a reset: a round-robin over timeouts moves each one's deadline only
/// later, to a new tick once a million resets (so, at 1 M timeouts, on every reset).
pub fn for_each_deadline<T: Copy + std::ops::Add<Duration, Output = T>>(
    iters: u64,
    first: T,
    mut f: impl FnMut(u64, T),
) {
    for i in 0..iters {
        f(i, first + Duration::from_nanos(i));
    }
}

/// Runs `work(peer, thread index)` on `threads` fresh threads at once (each inside
/// `peer.enter`), released together by a barrier; returns the wall time from the first
/// thread's start to the last thread's finish, each stamped by the thread itself (thread
/// start-up and joins are not counted).
pub fn run_threads<P: Peer + Sync>(peer: &P, threads: usize, work: impl Fn(&P, usize) + Sync) -> Duration {
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        let running: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    peer.enter(|| {
                        barrier.wait();
                        let start = Instant::now();
                        work(peer, t);
                        (start, Instant::now())
                    })
                })
            })
            .collect();
        let spans: Vec<(Instant, Instant)> =
            running.into_iter().map(|t| t.join().expect("a producer thread panicked")).collect();
        let start = spans.iter().map(|s| s.0).min().expect("at least one thread");
        let end = spans.iter().map(|s| s.1).max().expect("at least one thread");
        end - start
    })
}
