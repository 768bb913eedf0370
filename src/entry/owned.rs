//! The right to an entry's task, held by the winner of its terminal CAS.

use super::{Cell, EntryRef};
use crate::task::TimerTask;
use std::any::TypeId;
use std::mem::ManuallyDrop;

/// The right to an entry's task, held by the winner of its terminal CAS. Moves the task out
/// exactly once: by one of the consuming methods, or, if dropped unused, by dropping it.
pub(crate) struct OwnedTask {
    entry: ManuallyDrop<EntryRef>,
}

impl OwnedTask {
    pub(super) fn new(entry: EntryRef) -> OwnedTask {
        OwnedTask { entry: ManuallyDrop::new(entry) }
    }

    /// Takes the entry reference back out, leaving nothing for `Drop` to do.
    fn into_entry(self) -> EntryRef {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the reference is moved out once.
        unsafe { ManuallyDrop::take(&mut this.entry) }
    }

    /// Runs the task (on the shard, after a won expiry).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn run(self) {
        let entry = self.into_entry();
        // SAFETY: we won the terminal CAS, so the task is in place and ours; `entry` keeps
        // the cell alive during the call.
        unsafe { (entry.header().vtable.run)(entry.ptr) };
    }

    /// Whether the task must run on its shard thread even with offload
    /// ([`TimerTask::runs_on_shard`]).
    #[cfg_attr(not(feature = "offload"), allow(dead_code))]
    pub(crate) fn runs_on_shard(&self) -> bool {
        (self.entry.header().vtable.runs_on_shard)()
    }

    /// Runs the task (on its shard, or the offload pool), then lets go of the entry. If the
    /// task panics, the reference is dropped as the panic unwinds.
    pub(crate) fn run_on_shard(self) {
        let entry = self.into_entry();
        // SAFETY: we won the terminal CAS, so the task is in place and ours; `entry` keeps
        // the cell alive during the call.
        unsafe { (entry.header().vtable.run)(entry.ptr) };
    }

    /// Tells the task it was cancelled (after a won `cancel()`; `Timeout::cancel` uses
    /// [`BorrowedTask`]).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn cancelled(self) {
        let entry = self.into_entry();
        // SAFETY: as in `run`.
        unsafe { (entry.header().vtable.cancelled)(entry.ptr) };
    }

    /// The task in a box, for the user (`Unfired::into_task`).
    pub(crate) fn boxed(self) -> Box<dyn TimerTask> {
        let entry = self.into_entry();
        // SAFETY: as in `run`.
        unsafe { (entry.header().vtable.boxed)(entry.ptr) }
    }

    /// Whether the task is a `Sleep`'s wake-up (dropping it wakes the sleep).
    pub(crate) fn is_wake_up(&self) -> bool {
        (self.entry.header().vtable.is_wake_up)()
    }

    /// The task as the type it was scheduled with (to hand it back in an error).
    ///
    /// Panics if `T` is not that type: the caller scheduled it, so a mismatch is a bug here.
    pub(crate) fn downcast<T: TimerTask>(self) -> T {
        let entry = self.into_entry();
        assert!((entry.header().vtable.type_id)() == TypeId::of::<T>(), "task type mismatch");
        // SAFETY: as in `run`, and the type check above makes the cell a `Cell<T>`.
        unsafe { Cell::<T>::take(entry.ptr) }
    }
}

/// The right to an entry's task, as [`OwnedTask`], for a winner that holds a reference to
/// the entry throughout (`Timeout::cancel`): the borrow keeps the cell alive.
pub(crate) struct BorrowedTask<'a> {
    pub(super) entry: &'a EntryRef,
}

impl BorrowedTask<'_> {
    /// Tells the task it was cancelled.
    pub(crate) fn cancelled(self) {
        let this = ManuallyDrop::new(self);
        // SAFETY: we won the terminal CAS, so the task is in place and ours; the borrowed
        // reference keeps the cell alive during the call; `this` is not dropped, so the task
        // is moved out once.
        unsafe { (this.entry.header().vtable.cancelled)(this.entry.ptr) };
    }
}

impl Drop for BorrowedTask<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `cancelled`; `drop` runs once, and only if `cancelled` did not.
        unsafe { (self.entry.header().vtable.drop_task)(self.entry.ptr) };
    }
}

impl Drop for OwnedTask {
    fn drop(&mut self) {
        // SAFETY: as in `run`; `drop` runs once, and the reference is not used afterwards.
        unsafe {
            let entry = ManuallyDrop::take(&mut self.entry);
            (entry.header().vtable.drop_task)(entry.ptr);
        }
    }
}

impl std::fmt::Debug for OwnedTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedTask").finish_non_exhaustive()
    }
}
