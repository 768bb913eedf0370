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
        format!(
            "shardwheel TimerService: {shards} shards ({pinned} threads), tick {tick} µs, schedule_on the producer's shard"
        )
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
        format!(
            "Netty-architecture HashedWheelTimer: one wheel of 512 buckets with rounds, tick {} µs, one worker, MPSC \
             queues for arms and cancels; reset = {}",
            c.tick.as_micros(),
            self.reset_kind()
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
        format!(
            "tokio multi-thread runtime, {} workers: a task per timeout doing sleep_until(deadline).await, then the \
             work; cancel = JoinHandle::abort; reset = {}",
            c.shards,
            self.reset_kind()
        )
    }

    fn pending(&self) -> usize {
        self.alive()
    }
}

/// Runs the scenario on every peer, in table order, after shardwheel's run (`runs[0]`); tokio
/// has as many workers as shardwheel has shards.
pub fn run_peers(config: &Config, runs: &mut Vec<crate::scenario::Outcome>) {
    use crate::scenario::run;
    runs.push(run(config, NettyPeer::with(config.tick, 512), true));
    runs.push(run(config, HeapPeer::new(), true));
    runs.push(run(config, TokioTaskPeer::with_workers(config.shards), true));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::figures::{checks, passed};

    /// A short scenario with expiries of both kinds, cancels and resets: half a second.
    pub(crate) fn short_run() -> Config {
        let args = "--connections 2000 --producers 2 --shards 2 --idle-timeout-ms 200 --idle-fraction 0.5 \
            --request-timeout-ms 50 --lost-fraction 0.05 --in-flight 16 --pin-threads false --rate 40000 \
            --duration-secs 0.5";
        crate::args::tests::parse_str(args).unwrap().0
    }

    /// Every timer runs a short scenario with expiries of both kinds, cancels and resets, and
    /// passes the self-check: the adapters keep the exactly-once contract.
    #[test]
    fn every_timer_passes_a_short_run() {
        let config = tests::short_run();
        assert!(config.warnings().is_empty(), "{:?}", config.warnings());
        let mut runs = vec![crate::scenario::run(&config, shardwheel(&config).unwrap(), true)];
        run_peers(&config, &mut runs);
        assert_eq!(
            runs.iter().map(|o| o.timer).collect::<Vec<_>>(),
            ["shardwheel", "netty-wheel", "Mutex<BinaryHeap>", "tokio"]
        );
        for o in &runs {
            let c = &o.counts;
            assert!(passed(o), "{}: {:#?}", o.timer, checks(o));
            assert!(o.fired[0] > 0 && o.fired[1] > 0 && c.cancels_ok > 0 && c.resets_ok > 0, "{}: {c:?}", o.timer);
            assert!(c.resets_failed == 0 && o.unfired[0] + o.unfired[1] > 0, "{}: {c:?}", o.timer);
        }
    }
}

/// Timers that break the contract, run through the real scenario: each must fail the
/// self-check that guards what it breaks, and fail the whole run.
#[cfg(test)]
mod broken {
    use super::*;
    use crate::figures::{checks, succeeded};
    use shardwheel_peers::heap::HeapPeer;

    /// How the wrapped heap peer breaks its contract.
    #[derive(Clone, Copy, Debug)]
    enum Break {
        /// Fires every timeout at half its delay.
        Early,
        /// Forgets the task: it never runs and is never dropped.
        Loses,
        /// A reset arms a new timeout and leaves the old one to fire too.
        FiresTwice,
    }

    struct Broken(HeapPeer, Break);

    impl Peer for Broken {
        type Handle = <HeapPeer as Peer>::Handle;
        fn name(&self) -> &'static str {
            "broken"
        }
        fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Self::Handle {
            match self.1 {
                Break::Early => self.0.arm(delay / 2, task),
                Break::Loses => {
                    std::mem::forget(task);
                    self.0.arm(delay, || ())
                }
                Break::FiresTwice => self.0.arm(delay, task),
            }
        }
        fn arm_at<F: FnOnce() + Send + 'static>(&self, at: std::time::Instant, task: F) -> Self::Handle {
            self.0.arm_at(at, task)
        }
        fn cancel(&self, handle: Self::Handle) -> bool {
            self.0.cancel(handle)
        }
        fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Self::Handle, delay: Duration, task: F) -> bool {
            match self.1 {
                Break::FiresTwice => {
                    *handle = self.0.arm(delay, task);
                    true
                }
                _ => self.0.reset(handle, delay, task),
            }
        }
        fn reset_kind(&self) -> &'static str {
            "broken"
        }
    }

    impl SimTimer for Broken {
        fn describe(&self, _: &Config) -> String {
            "broken".into()
        }
        fn pending(&self) -> usize {
            self.0.entries()
        }
    }

    #[test]
    fn every_break_fails_the_check_that_guards_it_and_the_run() {
        let config = tests::short_run();
        let cases = [
            (Break::Early, "never_early"),
            (Break::Loses, "ended_exactly_once"),
            (Break::Loses, "dropped_exactly_once"),
            (Break::FiresTwice, "ended_exactly_once"),
        ];
        for (how, guard) in cases {
            let outcome = crate::scenario::run(&config, Broken(HeapPeer::new(), how), true);
            let failed: Vec<_> = checks(&outcome).iter().filter(|c| !c.ok).map(|c| c.key).collect();
            assert!(failed.contains(&guard), "{how:?} must fail {guard}; failed: {failed:?}");
            assert!(!succeeded(std::slice::from_ref(&outcome), true), "{how:?}: the run must fail");
        }
    }
}
