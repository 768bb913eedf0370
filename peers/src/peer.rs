//! The one small trait every peer implements: the benchmarks drive it, and the simulator's
//! its scenario runs every timer, shardwheel included, through it (`sim/src/timer.rs`).

use std::time::{Duration, Instant};

/// The small boxed closure peers without a generic task type store.
pub type Task = Box<dyn FnOnce() + Send + 'static>;

/// One timer implementation, driven the same way by every benchmark.
pub trait Peer {
    /// What `arm` returns and `cancel` / `reset` take.
    type Handle: Send + 'static;

    /// The row label.
    fn name(&self) -> &'static str;

    /// Runs `f` on this thread with whatever context the peer needs (tokio: its runtime
    /// entered). Producers wrap their whole loop in it, so it costs nothing per operation.
    fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Arms a timeout that runs `task` after `delay`. The closure is boxed once, by the peer.
    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Self::Handle;

    /// Arms a timeout that runs `task` at `deadline`.
    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, task: F) -> Self::Handle;

    /// Arms one of the timeouts that are already pending when a measurement starts
    /// (`i`: its index). Default: `arm`. Shardwheel spreads them over its shards.
    fn prearm<F: FnOnce() + Send + 'static>(&self, _i: usize, delay: Duration, task: F) -> Self::Handle {
        self.arm(delay, task)
    }

    /// Cancels; `true` iff it was pending and now will never run.
    fn cancel(&self, handle: Self::Handle) -> bool;

    /// Moves a pending timeout's deadline to `delay` from now. Peers with a reset of their
    /// own use it and drop `fresh` (a closure that was never boxed: free); peers without one
    /// cancel and re-arm with `fresh`, as their users do.
    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Self::Handle, delay: Duration, fresh: F) -> bool;

    /// How `reset` works, for the tables.
    fn reset_kind(&self) -> &'static str;

    /// Waits until work the producers handed over (mailboxes, queues, first polls) has been
    /// taken in by the peer's own threads, so that what is measured next starts from a
    /// settled state.
    fn settle(&self) {}

    /// Something worth printing after a measurement (wake-ups, queue lengths), if any.
    fn diagnostics(&self) -> String {
        String::new()
    }
}
