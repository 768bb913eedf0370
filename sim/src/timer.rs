//! The timer interface the scenario drives ([`SimTimer`]): shardwheel's `TimerService`, and
//! the peers of `--compare` (the benchmarks' own, from `shardwheel-peers`) through [`Bench`],
//! so that every timer runs literally the same workload. tokio's cancel is
//! `JoinHandle::abort`: one racing the task's run may count a win although the task ran,
//! which the self-check would show.

use crate::args::Config;
use crate::scenario::{self, Outcome};
use crate::tally::Task;
use shardwheel::{BuildError, Stats, Timeout, TimerService};
use shardwheel_peers::{Peer, heap::HeapPeer, netty::NettyPeer, tokio_timers::TokioTaskPeer};
use std::time::Duration;

/// A timer service as the connection scenario uses it.
///
/// The contract, which the self-check verifies: a task armed with [`arm`](SimTimer::arm) ends
/// exactly once: it runs ([`Task::run`], not before its deadline), or a `cancel` returns true
/// for it, or a `reset` replaces it, or it is dropped by [`stop`](SimTimer::stop) or with its
/// handle; once `stop` returns, no task runs any more.
pub trait SimTimer: Sync {
    type Handle: Send;

    /// The name in tables and JSON; one line on how it is set up.
    fn name(&self) -> &'static str;
    fn describe(&self) -> String;

    /// Threads that fire timeouts: `arm` addresses lanes `0..lanes()` (one queue: ignored).
    fn lanes(&self) -> usize {
        1
    }

    /// Runs a producer thread's `f` inside whatever context the timer needs (tokio: its runtime).
    fn producer_context<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Arms `task` to run once `delay` has passed, preferably on `lane`; `None`: refused.
    fn arm(&self, lane: usize, delay: Duration, task: Task) -> Option<Self::Handle>;

    /// Moves a pending timeout's deadline to `delay` from now; false if it had ended. A timer
    /// without a reset of its own cancels and arms again, with the task `fresh` builds (built
    /// only then: shardwheel's reset builds none).
    fn reset(&self, handle: &mut Self::Handle, delay: Duration, fresh: impl FnOnce() -> Task) -> bool;

    /// Cancels a pending timeout; true iff this call won (the task will never run).
    fn cancel(&self, handle: Self::Handle) -> bool;

    /// Timeouts pending now.
    fn pending(&self) -> usize;

    /// Waits until every arm so far has reached the structure that holds it (then the memory
    /// is measured).
    fn settle(&self) {}

    /// Stops the timer, joins its threads and drops what never ended: how many timeouts it
    /// handed back, and its own counters then (`None`: a timer that keeps neither).
    fn stop(self) -> (Option<u64>, Option<Stats>);
}

/// shardwheel's [`TimerService`] as the command line sets it up, one shard (thread and wheel)
/// per lane. `settle` keeps its default: a sleeping shard may leave its last few arms in its
/// mailbox until its next wake-up; they change the memory figure by a thousandth.
#[derive(Debug)]
pub struct Shardwheel(TimerService, bool);

impl Shardwheel {
    pub fn new(c: &Config) -> Result<Shardwheel, BuildError> {
        let builder = TimerService::builder().shards(c.shards).tick(c.tick).pin_threads(c.pin_threads);
        Ok(Shardwheel(builder.thread_name("sim-timer").build()?, c.pin_threads))
    }
}

impl SimTimer for Shardwheel {
    type Handle = Timeout;

    fn name(&self) -> &'static str {
        "shardwheel"
    }

    fn describe(&self) -> String {
        let (shards, tick, pinned) = (self.0.shard_count(), self.0.tick().as_micros(), ["unpinned", "pinned"]);
        let pinned = pinned[usize::from(self.1)];
        format!(
            "shardwheel TimerService: {shards} shards ({pinned} threads), tick {tick} µs, schedule_on the producer's shard"
        )
    }

    fn lanes(&self) -> usize {
        self.0.shard_count()
    }

    fn arm(&self, lane: usize, delay: Duration, task: Task) -> Option<Timeout> {
        self.0.schedule_on(lane, delay, move || task.run()).ok()
    }

    fn reset(&self, handle: &mut Timeout, delay: Duration, _fresh: impl FnOnce() -> Task) -> bool {
        handle.reset(delay)
    }

    fn cancel(&self, handle: Timeout) -> bool {
        handle.cancel()
    }

    fn pending(&self) -> usize {
        self.0.pending()
    }

    fn stop(self) -> (Option<u64>, Option<Stats>) {
        let unfired = self.0.stop().expect("stop() from the main thread, not a shard's").len() as u64;
        (Some(unfired), Some(self.0.stats()))
    }
}

/// A benchmark peer, driven as the benchmarks drive it: its own `arm`, `cancel` and `reset`
/// (cancel + arm again where it has no reset). Stopping is dropping: the peer joins its
/// threads and drops what it still holds. `pending` reads its count of pending timeouts.
pub struct Bench<P> {
    peer: P,
    name: &'static str,
    describe: String,
    pending: fn(&P) -> usize,
}

impl<P: Peer + Sync> SimTimer for Bench<P> {
    type Handle = P::Handle;

    fn name(&self) -> &'static str {
        self.name
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn producer_context<R>(&self, f: impl FnOnce() -> R) -> R {
        self.peer.enter(f)
    }

    fn arm(&self, _lane: usize, delay: Duration, task: Task) -> Option<P::Handle> {
        Some(self.peer.arm(delay, move || task.run()))
    }

    fn reset(&self, handle: &mut P::Handle, delay: Duration, fresh: impl FnOnce() -> Task) -> bool {
        let task = fresh();
        self.peer.reset(handle, delay, move || task.run())
    }

    fn cancel(&self, handle: P::Handle) -> bool {
        self.peer.cancel(handle)
    }

    fn pending(&self) -> usize {
        (self.pending)(&self.peer)
    }

    fn settle(&self) {
        self.peer.settle();
    }

    fn stop(self) -> (Option<u64>, Option<Stats>) {
        (None, None)
    }
}

/// Runs the scenario on `peer`, named `name` in the tables, described by `what` and how it resets.
fn run<P: Peer + Sync>(
    config: &Config,
    name: &'static str,
    peer: P,
    what: String,
    pending: fn(&P) -> usize,
) -> Outcome {
    let describe = format!("{what}; reset = {}", peer.reset_kind());
    scenario::run(config, Bench { peer, name, describe, pending }, name)
}

/// Runs the scenario on every peer, in table order, after shardwheel's run (`runs[0]`). The
/// Netty-style wheel has Netty's default `ticksPerWheel`, 512 buckets.
pub fn run_peers(config: &Config, runs: &mut Vec<Outcome>) {
    let (tick, workers) = (config.tick.as_micros(), config.shards);
    let netty = format!(
        "Netty-architecture HashedWheelTimer: one wheel of 512 buckets with rounds, tick {tick} µs, one worker, MPSC \
         queues for arms and cancels"
    );
    let pending = |p: &NettyPeer| p.pending().max(0) as usize;
    runs.push(run(config, "netty-wheel", NettyPeer::with(config.tick, 512), netty, pending));
    let heap = "Mutex<BinaryHeap> + Condvar, one worker, as ScheduledThreadPoolExecutor; cancel marks, the entry \
                leaves the heap at its deadline";
    runs.push(run(config, "Mutex<BinaryHeap>", HeapPeer::new(), heap.into(), HeapPeer::entries));
    let tokio = format!(
        "tokio multi-thread runtime, {workers} workers: a task per timeout doing sleep_until(deadline).await, then \
         the work; cancel = JoinHandle::abort"
    );
    runs.push(run(config, "tokio", TokioTaskPeer::with_workers(workers), tokio, TokioTaskPeer::alive));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::{checks, passed};

    /// Every timer runs a short scenario with expiries of both kinds, cancels and resets, and
    /// passes the self-check: the adapters keep the exactly-once contract.
    #[test]
    fn every_timer_passes_a_short_run() {
        let args = "--connections 2000 --producers 2 --shards 2 --idle-timeout-ms 200 --idle-fraction 0.5 \
            --request-timeout-ms 50 --lost-fraction 0.05 --in-flight 16 --pin-threads false --rate 40000 \
            --duration-secs 0.5";
        let config = crate::args::tests::parse_str(args).unwrap().0;
        assert!(config.warnings().is_empty(), "{:?}", config.warnings());
        let mut runs = vec![scenario::run(&config, Shardwheel::new(&config).unwrap(), "shardwheel")];
        run_peers(&config, &mut runs);
        assert_eq!(runs.len(), 4);
        for o in &runs {
            let c = &o.counts;
            assert!(passed(o), "{}: {:#?}", o.timer, checks(o));
            assert!(o.fired[0] > 0 && o.fired[1] > 0 && c.cancels_ok > 0 && c.resets_ok > 0, "{}: {c:?}", o.timer);
            assert!(c.resets_failed == 0 && o.unfired[0] + o.unfired[1] > 0, "{}: {c:?}", o.timer);
        }
    }
}
