//! Cells no reference points to any more, on their way back to be freed where they were
//! allocated.

use super::Header;
use std::ptr::NonNull;

/// A cell no reference points to any more, its task gone: only its memory is left.
pub(super) struct EmptyCell {
    pub(super) ptr: NonNull<Header>,
}

// SAFETY: the cell is unreachable from anywhere else and holds no task; freeing it on any
// thread is sound.
unsafe impl Send for EmptyCell {}

impl Drop for EmptyCell {
    fn drop(&mut self) {
        // SAFETY: nothing else refers to the cell and its task is gone (`EntryRef::release`).
        unsafe { (self.ptr.as_ref().vtable.dealloc)(self.ptr) };
    }
}

/// Cells whose last reference a shard let go of, waiting to be freed by a thread that
/// schedules on that shard.
///
/// Why: a cell is allocated by the scheduling thread and, as often as not, let go of last by
/// the shard (after an expiry, an unlink, or an arm found already cancelled). Freed there,
/// the memory lands in the shard thread's allocator cache while the scheduling thread's
/// stays empty, and with glibc's malloc both sides fall to their slow paths: measured with
/// callgrind, that was about a third of all instructions of an arm-and-cancel loop. Handed
/// back, the free lands where the next allocation of the same size will find it. The queue
/// is bounded: past [`RETURN_MAX`] cells the shard frees them itself.
pub(crate) struct Returned {
    queue: ReturnQueue,
}

/// Cells held for their producers at most; beyond, the shard frees them itself.
const RETURN_MAX: usize = 4096;

type ReturnQueue = crossbeam_queue::ArrayQueue<EmptyCell>;

impl Returned {
    pub(crate) fn new() -> Returned {
        Returned { queue: crossbeam_queue::ArrayQueue::new(RETURN_MAX) }
    }

    /// Shard side: keeps the cell for a producer, or frees it if too many wait. Under loom
    /// it is freed at once: the hand-back is a matter of allocator caches, not a protocol,
    /// and loom cannot see inside `ArrayQueue`.
    pub(super) fn put(&self, cell: EmptyCell) {
        #[cfg(not(loom))]
        let _ = self.queue.push(cell);
        #[cfg(loom)]
        drop(cell);
    }

    /// Producer side: frees one returned cell, if any, on the calling thread. Looks first:
    /// an empty `ArrayQueue`'s `pop` pays for a `SeqCst` fence, a plain load does not.
    pub(crate) fn free_one(&self) {
        if !self.queue.is_empty() {
            drop(self.queue.pop());
        }
    }

    /// Frees every returned cell (the shard has stopped: no producer will come for them,
    /// and a thread that still holds the shard's shared half should not keep them).
    pub(crate) fn free_all(&self) {
        while self.queue.pop().is_some() {}
    }
}

impl std::fmt::Debug for Returned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Returned").field("len", &self.queue.len()).finish()
    }
}
