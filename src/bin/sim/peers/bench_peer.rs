//! The `Peer` trait of `benches/baselines/mod.rs`, mirrored so that the simulator can include
//! the baselines' `netty.rs` and `heap.rs` as they are (they name `super::Peer` and
//! `super::Task`).
//!
//! The simulator cannot include `benches/baselines/mod.rs` itself: it also declares the
//! `DelayQueue` and tokio peers, which need `tokio-util` (a dev-dependency, not available to
//! the binary) and tokio (only with the `compare` feature). Keep the signatures in step with
//! the original; if the trait moves to a file of its own (`benches/baselines/peer.rs`), this
//! file becomes a `#[path]` include of it.

use std::time::{Duration, Instant};

/// The small boxed closure peers without a generic task type store.
pub type Task = Box<dyn FnOnce() + Send + 'static>;

/// One timer implementation, driven the same way by every benchmark (and the simulator).
#[allow(dead_code)] // `arm_at`, `prearm`, `diagnostics`: the benchmarks use them
pub trait Peer {
    /// What `arm` returns and `cancel` / `reset` take.
    type Handle: Send + 'static;

    /// The row label.
    fn name(&self) -> &'static str;

    /// Runs `f` on this thread with whatever context the peer needs.
    fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Arms a timeout that runs `task` after `delay`.
    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Self::Handle;

    /// Arms a timeout that runs `task` at `deadline`.
    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, task: F) -> Self::Handle;

    /// Arms one of the timeouts already pending when a measurement starts.
    fn prearm<F: FnOnce() + Send + 'static>(&self, _i: usize, delay: Duration, task: F) -> Self::Handle {
        self.arm(delay, task)
    }

    /// Cancels; `true` iff it was pending and now will never run.
    fn cancel(&self, handle: Self::Handle) -> bool;

    /// Moves a pending timeout's deadline to `delay` from now; peers without a reset of
    /// their own cancel and re-arm with `fresh`, as their users do.
    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Self::Handle, delay: Duration, fresh: F) -> bool;

    /// How `reset` works, for the tables.
    fn reset_kind(&self) -> &'static str;

    /// Waits until work the producers handed over has been taken in by the peer's threads.
    fn settle(&self) {}

    /// Something worth printing after a measurement, if any.
    fn diagnostics(&self) -> String {
        String::new()
    }
}
