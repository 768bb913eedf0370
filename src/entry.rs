//! One timeout's shared half: the state word, the task, and the shard's key into its wheel.
//!
//! Ground rules:
//! - `state` is read and CASed by any thread (see `state.rs`).
//! - `task` is written once, before the entry is shared, and taken once, by whoever wins
//!   the terminal CAS (a cancel, the shard's expiry, or a stop). The CAS makes the winner
//!   unique, so the take is an exclusive access; that is the only `unsafe` here.
//! - `key` belongs to the owning shard's thread alone: it says where the entry sits in the
//!   shard's wheel. It is an atomic only so that this stays safe code; every access is
//!   `Relaxed` because one thread does them all.
//!
//! Memory: entries are reference counted (`Arc`). The handle, a mailbox message and the
//! wheel each hold a count; the entry is freed when the last of them lets go. Nothing has to
//! be reclaimed from a shared structure after a quiescent period, so epoch-based pooling
//! (`crossbeam-epoch`) would only add a deferred free without saving the allocation that
//! the `Arc` already costs once per timeout.

use crate::state::StateCell;
use crate::sync::{AtomicU32, Ordering, UnsafeCell};
use crate::task::TimerTask;
use crate::wheel::Key;
use std::any::Any;

/// A task with its type erased, which can be turned back into its own type (to hand it back
/// in an error) or upcast to `dyn TimerTask` (to give it to the user after a stop).
pub(crate) trait ErasedTask: TimerTask {
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<T: TimerTask> ErasedTask for T {
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

pub(crate) type BoxedTask = Box<dyn ErasedTask>;

/// "Not in the wheel."
const NO_KEY: u32 = u32::MAX;

pub(crate) struct Entry {
    pub(crate) state: StateCell,
    key: AtomicU32,
    task: UnsafeCell<Option<BoxedTask>>,
}

// SAFETY: `task` is only touched by the unique winner of the terminal CAS on `state` (or
// before the entry is shared), and `BoxedTask` is `Send`; the other fields are atomics.
unsafe impl Sync for Entry {}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("state", &self.state.load())
            .finish_non_exhaustive()
    }
}

impl Entry {
    pub(crate) fn new(deadline: u64, task: BoxedTask) -> Entry {
        Entry {
            state: StateCell::new_pending(deadline),
            key: AtomicU32::new(NO_KEY),
            task: UnsafeCell::new(Some(task)),
        }
    }

    /// PENDING → CANCELLED; on success the task, now the caller's alone.
    pub(crate) fn cancel(&self) -> Option<BoxedTask> {
        if self.state.try_cancel() {
            // SAFETY: this thread won the terminal CAS; no other thread touches `task` again.
            Some(unsafe { self.take_task() })
        } else {
            None
        }
    }

    /// PENDING(deadline) → EXPIRED, for the owning shard; on success the task.
    pub(crate) fn expire(&self, deadline: u64) -> Option<BoxedTask> {
        if self.state.try_expire(deadline) {
            // SAFETY: this thread won the terminal CAS; no other thread touches `task` again.
            Some(unsafe { self.take_task() })
        } else {
            None
        }
    }

    /// # Safety
    /// The caller must have won the terminal CAS on `state`, which makes it the only thread
    /// that will ever access `task` again.
    unsafe fn take_task(&self) -> BoxedTask {
        // SAFETY: exclusive by the caller's contract; the winning CAS's Acquire half pairs
        // with the Release that published the entry, so the stored task is visible.
        self.task
            .with_mut(|task| unsafe { (*task).take() })
            .expect("a task is taken once, by the CAS winner")
    }

    /// Where the entry sits in its shard's wheel. Owning shard's thread only.
    pub(crate) fn key(&self) -> Option<Key> {
        // Relaxed: only the owning shard's thread reads or writes `key`.
        Key::from_raw(self.key.load(Ordering::Relaxed))
    }

    /// Owning shard's thread only.
    pub(crate) fn set_key(&self, key: Option<Key>) {
        // Relaxed: only the owning shard's thread reads or writes `key`.
        self.key.store(key.map_or(NO_KEY, Key::into_raw), Ordering::Relaxed);
    }
}
