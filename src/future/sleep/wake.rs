//! What a [`Sleep`](super::Sleep)'s cell holds and how a poll recognises its waker: the
//! task that wakes the sleep ([`WakeTask`]) and a waker's identity ([`WakerId`]). The
//! protocol they serve is in the parent module's docs ("The waker slot").

use crate::task::TimerTask;
use crate::task::sealed::Token;
use std::task::Waker;

/// A waker's identity, as [`Waker::will_wake`] compares it: its data pointer and vtable.
/// Kept as integers, so that a `Sleep` holds no pointer (it stays `Send + Sync`) and no
/// second clone of the waker (no reference count moves to keep it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct WakerId {
    data: usize,
    vtable: usize,
}

impl WakerId {
    pub(super) const NONE: WakerId = WakerId { data: 0, vtable: 0 };

    pub(super) fn of(waker: &Waker) -> WakerId {
        WakerId { data: waker.data() as usize, vtable: std::ptr::from_ref(waker.vtable()) as usize }
    }
}

/// The task in a sleep's cell: the waker to wake.
///
/// Running it wakes the waker (by dropping the task: see `Drop`). The sleep's own cancels (a
/// drop, a poll with a new waker) drop it unwoken, through `cancelled_unboxed`, which only
/// the crate reaches (the cell's vtable; the type is private, so no user holds it unboxed).
/// Ended any other way, it wakes, so that the sleeping task polls again and completes:
/// handed back by `stop()` and dropped, run, or told `cancelled()` by the user.
pub(crate) struct WakeTask {
    waker: Option<Waker>,
}

impl WakeTask {
    pub(super) fn new(waker: &Waker) -> WakeTask {
        WakeTask { waker: Some(waker.clone()) }
    }

    /// Drops the waker without waking it.
    pub(super) fn silence(mut self) {
        self.waker = None;
    }
}

impl TimerTask for WakeTask {
    fn run(self: Box<Self>) {
        drop(self);
    }

    /// Only a user calls this (on a task `stop()` handed back, through
    /// `Unfired::into_task`): the sleep is still waiting, so wake it (the drop does), and its
    /// next poll completes.
    fn cancelled(self: Box<Self>) {
        drop(self);
    }

    /// Runs in place, unboxed: the drop wakes.
    fn run_unboxed(self, _: Token) {
        drop(self);
    }

    /// The sleep's own cancel (a `Sleep` dropped, moved to another waker, or disarmed):
    /// nothing to wake.
    fn cancelled_unboxed(self, _: Token) {
        self.silence();
    }

    /// A wake-up is the crate's own short work: it runs on the shard even with offload, so
    /// a busy pool delays no sleep (and a task on the pool may block on one).
    fn runs_on_shard(_: Token) -> bool {
        true
    }

    /// Dropped, it wakes its sleep (see `Drop`).
    fn is_wake_up(_: Token) -> bool {
        true
    }
}

impl Drop for WakeTask {
    fn drop(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}
