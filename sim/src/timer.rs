//! The small timer interface the scenario drives, and shardwheel behind it.
//!
//! Every timer in the comparison implements [`SimTimer`], and `scenario::run` is generic over
//! it: every timer runs literally the same workload, the same code path, the same tasks.
//! Only what each operation costs differs.

use crate::scenario::Task;
use shardwheel::{BuildError, Stats, Timeout, TimerService, Unfired};
use std::time::Duration;

/// A timer service as the connection scenario uses it.
///
/// The contract every implementation keeps, which the self-check verifies:
/// - a task armed with [`arm`](SimTimer::arm) ends exactly once: it runs ([`Task::run`], not
///   before its deadline), or a `cancel` returns true for it (and it is dropped), or a
///   `reset` replaces it (and it is dropped), or it is dropped after
///   [`stop`](SimTimer::stop) (handed back, or held by a handle);
/// - once `stop` returns, no task runs any more and every timer thread has been joined.
pub trait SimTimer: Sync {
    /// What `arm` returns; owned by the producer thread that armed it.
    type Handle: Send;
    /// What `stop` hands back for each timeout that never ended (dropped by the scenario).
    type Unfired: Send;

    /// The name in tables and JSON.
    fn name(&self) -> &'static str;

    /// One line: what this timer is and how it is set up.
    fn describe(&self) -> String;

    /// How many threads fire timeouts (the lanes `arm` can address are `0..lanes()`; a timer
    /// with one queue ignores the lane).
    fn lanes(&self) -> usize;

    /// Runs `f` on a producer thread, inside whatever context the timer needs there (tokio:
    /// the runtime's). The default calls `f`.
    fn producer_context<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Arms `task` to run once `delay` has passed, preferably on `lane`. `None`: refused
    /// (the task has been dropped).
    fn arm(&self, lane: usize, delay: Duration, task: Task) -> Option<Self::Handle>;

    /// Moves a pending timeout's deadline to `delay` from now; false if it had already
    /// fired (or been cancelled). A timer without a reset of its own cancels and arms again,
    /// with the task `fresh` builds.
    fn reset(&self, handle: &mut Self::Handle, delay: Duration, fresh: impl FnOnce() -> Task) -> bool;

    /// Cancels a pending timeout; true iff this call won (the task will never run).
    fn cancel(&self, handle: Self::Handle) -> bool;

    /// Gives up a handle whose timeout must still fire (a request that never gets its
    /// response). The default drops it; timers whose handle cancels on drop keep it.
    fn detach(&self, handle: Self::Handle) {
        drop(handle);
    }

    /// Timeouts pending now, if the timer can tell.
    fn pending(&self) -> Option<usize>;

    /// Waits until every timeout armed so far has reached the structure that holds it (for
    /// timers that file arms asynchronously, through a queue); the memory figures are taken
    /// then. The default: arms are filed synchronously.
    fn settle(&self) {}

    /// Stops the timer: joins its threads; hands back the timeouts that never ended, if it
    /// can.
    fn stop(&mut self) -> Vec<Self::Unfired>;

    /// Whether `stop` hands back every timeout that never ended (else it drops them, and its
    /// list is empty).
    fn hands_back_unfired(&self) -> bool {
        true
    }

    /// The service's own counters, if it keeps them.
    fn stats(&self) -> Option<Stats> {
        None
    }
}

/// shardwheel's [`TimerService`]: one shard (thread and wheel) per lane.
#[derive(Debug)]
pub struct Shardwheel {
    service: TimerService,
    pinned: bool,
}

impl Shardwheel {
    pub fn new(shards: usize, tick: Duration, pin_threads: bool) -> Result<Shardwheel, BuildError> {
        let service = TimerService::builder()
            .shards(shards)
            .tick(tick)
            .pin_threads(pin_threads)
            .thread_name("sim-timer")
            .build()?;
        Ok(Shardwheel { service, pinned: pin_threads })
    }
}

impl SimTimer for Shardwheel {
    type Handle = Timeout;
    type Unfired = Unfired;

    fn name(&self) -> &'static str {
        "shardwheel"
    }

    fn describe(&self) -> String {
        format!(
            "shardwheel TimerService: {} shards ({} threads), tick {} µs, schedule_on the producer's shard",
            self.service.shard_count(),
            if self.pinned { "pinned" } else { "unpinned" },
            self.service.tick().as_micros()
        )
    }

    fn lanes(&self) -> usize {
        self.service.shard_count()
    }

    fn arm(&self, lane: usize, delay: Duration, task: Task) -> Option<Timeout> {
        self.service.schedule_on(lane, delay, move || task.run()).ok()
    }

    fn reset(&self, handle: &mut Timeout, delay: Duration, _fresh: impl FnOnce() -> Task) -> bool {
        handle.reset(delay)
    }

    fn cancel(&self, handle: Timeout) -> bool {
        handle.cancel()
    }

    fn pending(&self) -> Option<usize> {
        Some(self.service.pending())
    }

    // `settle` keeps its default: a shard links the arms in its mailbox as they come, except
    // the last few (under 1,024 per shard) when it sleeps, since a sleeping shard is woken
    // only for an earlier deadline or a fuller mailbox. Those may wait for its next wake-up,
    // seconds away here; they change the memory figure by a thousandth.

    fn stop(&mut self) -> Vec<Unfired> {
        self.service.stop().expect("stop() from the main thread, not a shard's")
    }

    fn stats(&self) -> Option<Stats> {
        Some(self.service.stats())
    }
}
