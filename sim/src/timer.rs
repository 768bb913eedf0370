//! The timers the scenario drives: shardwheel and the peers of `--compare`, all through the
//! benchmarks' own adapters (`shardwheel-peers`), so that every timer runs literally the same
//! workload, driven as the benchmarks drive it. [`SimTimer`] adds what the scenario needs
//! beyond [`Peer`]. tokio's cancel is `JoinHandle::abort`: one racing the task's run may count
//! a win although the task ran, which the self-check would show.

use crate::args::Config;
use crate::tally::Task;
use shardwheel::{BuildError, Stats, TimerService};
use shardwheel_peers::{
    Peer, heap::HeapPeer, netty::NettyPeer, shardwheel::ShardwheelPeer, tokio_timers::TokioTaskPeer,
};
use std::time::Duration;

/// A [`Peer`] as the connection scenario uses it.
///
/// The contract, which the self-check verifies: a task armed with [`arm_on`](SimTimer::arm_on)
/// ends exactly once: it runs ([`Task::run`], not before its deadline), or a `cancel` returns
/// true for it, or a reset replaces it, or it is dropped by [`stop`](SimTimer::stop) or with
/// its handle; once `stop` returns, no task runs any more.
pub trait SimTimer: Peer + Sync + Sized {
    /// The name in tables and JSON (the peer's own, unless it says otherwise).
    fn label(&self) -> &'static str {
        self.name()
    }

    /// One line on how it is set up.
    fn describe(&self, config: &Config) -> String;

    /// Threads that fire timeouts: `arm_on` addresses lanes `0..lanes()` (one queue: ignored).
    fn lanes(&self) -> usize {
        1
    }

    /// Arms `task` to run once `delay` has passed, preferably on `lane`; `None`: refused.
    fn arm_on(&self, _lane: usize, delay: Duration, task: Task) -> Option<Self::Handle> {
        Some(self.arm(delay, move || task.run()))
    }

    /// [`Peer::reset`], with the task `fresh` builds for a peer that cancels and arms again
    /// (built only then: shardwheel's reset builds none).
    fn reset_with(&self, handle: &mut Self::Handle, delay: Duration, fresh: impl FnOnce() -> Task) -> bool {
        let task = fresh();
        self.reset(handle, delay, move || task.run())
    }

    fn pending(&self) -> usize;

    /// Waits until the arms so far have reached the structure that holds them, before the
    /// memory is measured and the steady state starts: [`Peer::settle`] by default.
    fn settle_arms(&self) {
        self.settle();
    }

    /// Stops the timer, joins its threads and drops what never ended: how many timeouts it
    /// handed back, and its own counters then. Default: dropping it, which tells neither.
    fn stop(self) -> (Option<u64>, Option<Stats>) {
        (None, None)
    }
}

/// shardwheel's `TimerService` as the command line sets it up, one shard per lane.
pub fn shardwheel(c: &Config) -> Result<ShardwheelPeer, BuildError> {
    let builder = TimerService::builder().shards(c.shards).tick(c.tick).pin_threads(c.pin_threads);
    Ok(ShardwheelPeer::from_service(builder.thread_name("sim-timer").build()?))
}

impl SimTimer for ShardwheelPeer {
    fn describe(&self, c: &Config) -> String {
        let (shards, tick, pinned) = (c.shards, c.tick.as_micros(), if c.pin_threads { "pinned" } else { "unpinned" });
        let setup = format!("{shards} shards ({pinned} threads), tick {tick} µs");
        format!("shardwheel TimerService: {setup}, schedule_on the producer's shard")
    }

    fn lanes(&self) -> usize {
        self.service().shard_count()
    }

    fn arm_on(&self, lane: usize, delay: Duration, task: Task) -> Option<Self::Handle> {
        self.service().schedule_on(lane, delay, move || task.run()).ok()
    }

    fn reset_with(&self, handle: &mut Self::Handle, delay: Duration, _fresh: impl FnOnce() -> Task) -> bool {
        handle.reset(delay)
    }

    fn pending(&self) -> usize {
        self.service().pending()
    }

    /// Not the peer's settle, which sleeps 5 ms after the mailboxes drain: that pause, before
    /// the steady state, leaves the last connections of a tight round-robin (CI's run) without
    /// activity past their idle timeout. A sleeping shard may keep its last few arms in its
    /// mailbox until its next wake-up; they change the memory figure by a thousandth.
    fn settle_arms(&self) {}

    fn stop(self) -> (Option<u64>, Option<Stats>) {
        let unfired = self.service().stop().expect("stop() from the main thread, not a shard's").len() as u64;
        (Some(unfired), Some(self.service().stats()))
    }
}

impl SimTimer for NettyPeer {
    /// One wheel of Netty's default `ticksPerWheel`, 512 buckets, ticking as shardwheel does.
    fn describe(&self, c: &Config) -> String {
        let (tick, reset) = (c.tick.as_micros(), self.reset_kind());
        format!(
            "Netty-architecture HashedWheelTimer: one wheel of 512 buckets with rounds, tick {tick} µs, one worker, \
             MPSC queues for arms and cancels; reset = {reset}"
        )
    }

    fn pending(&self) -> usize {
        NettyPeer::pending(self).max(0) as usize
    }
}

impl SimTimer for HeapPeer {
    fn describe(&self, _: &Config) -> String {
        let how = "Mutex<BinaryHeap> + Condvar, one worker, as ScheduledThreadPoolExecutor; cancel marks, the entry \
                   leaves the heap at its deadline";
        format!("{how}; reset = {}", self.reset_kind())
    }

    fn pending(&self) -> usize {
        self.entries()
    }
}

impl SimTimer for TokioTaskPeer {
    fn label(&self) -> &'static str {
        "tokio"
    }

    fn describe(&self, c: &Config) -> String {
        let (workers, reset) = (c.shards, self.reset_kind());
        format!(
            "tokio multi-thread runtime, {workers} workers: a task per timeout doing sleep_until(deadline).await, \
             then the work; cancel = JoinHandle::abort; reset = {reset}"
        )
    }

    fn pending(&self) -> usize {
        self.alive()
    }
}
