//! A peer of `benches/baselines/` behind the scenario's [`SimTimer`] interface.
//!
//! The peer is driven exactly as the benchmarks drive it: `arm` boxes the task, `cancel`
//! cancels, and `reset` is the peer's own (`cancel` + a fresh arm for the Netty-style wheel
//! and the locked heap, as their users do). For such a reset the scenario hands over a fresh
//! task, built only when the timer asks for one.
//!
//! Stopping is dropping: the peer joins its worker and drops every task it still holds. It
//! cannot hand unfired tasks back, so the scenario counts them as they drop.

use crate::scenario::Task;
use crate::timer::SimTimer;
use shardwheel_peers::Peer;
use std::time::Duration;

/// A benchmark peer, running until `stop`.
pub struct Bench<P: Peer> {
    peer: Option<P>,
    name: &'static str,
    describe: String,
    /// Timeouts the peer holds, as it counts them.
    pending: fn(&P) -> Option<usize>,
}

impl<P: Peer> std::fmt::Debug for Bench<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bench").field("peer", &self.name).finish()
    }
}

impl<P: Peer> Bench<P> {
    /// Wraps `peer`; `what` says what it is, `pending` reads its count of pending timeouts.
    pub fn new(peer: P, what: &str, pending: fn(&P) -> Option<usize>) -> Bench<P> {
        Bench {
            name: peer.name(),
            describe: format!("{what}; reset = {}", peer.reset_kind()),
            peer: Some(peer),
            pending,
        }
    }

    fn peer(&self) -> &P {
        self.peer.as_ref().expect("the peer runs until stop")
    }
}

impl<P: Peer + Sync> SimTimer for Bench<P> {
    type Handle = P::Handle;
    type Unfired = ();

    fn name(&self) -> &'static str {
        self.name
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn lanes(&self) -> usize {
        1
    }

    fn producer_context<R>(&self, f: impl FnOnce() -> R) -> R {
        self.peer().enter(f)
    }

    fn arm(&self, _lane: usize, delay: Duration, task: Task) -> Option<P::Handle> {
        Some(self.peer().arm(delay, move || task.run()))
    }

    fn reset(&self, handle: &mut P::Handle, delay: Duration, fresh: impl FnOnce() -> Task) -> bool {
        let task = fresh();
        self.peer().reset(handle, delay, move || task.run())
    }

    fn cancel(&self, handle: P::Handle) -> bool {
        self.peer().cancel(handle)
    }

    fn pending(&self) -> Option<usize> {
        self.peer.as_ref().and_then(self.pending)
    }

    fn settle(&self) {
        self.peer().settle();
    }

    fn stop(&mut self) -> Vec<()> {
        // Dropping the peer joins its worker and drops the tasks it holds.
        drop(self.peer.take());
        Vec::new()
    }

    fn hands_back_unfired(&self) -> bool {
        false
    }
}
