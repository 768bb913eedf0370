//! One timeout's shared half, in one cell: the state word, the shard's key into its wheel, a
//! reference count, and the task itself, stored inline. The cell is a slot of the allocating
//! thread's pool (`pool/`) when it is at most 128 bytes, else a `Box`.
//!
//! ```text
//!  EntryRef ──▶ ┌──────────────── Cell<T> (one pool slot or Box) ─────────────┐
//!               │ Header: state (AtomicU64) │ refs (u32) │ key (u32) │ vtable │ task: T │
//!               └───────────────────────────────────────────────────────────┘
//! ```
//!
//! Ground rules:
//! - `state` is read and CASed by any thread (see `state.rs`).
//! - The task is written once, before the entry is shared, and moved out once, by whoever
//!   wins the terminal CAS (a cancel, the shard's expiry, or a stop): the CAS makes the
//!   winner unique, so the task is moved out once. The move is a read (the bytes stay as
//!   they are): a `Sleep` reads its own wake-up's waker in place meanwhile
//!   (`EntryRef::read_task`), and an ambient sleep stores to its deadline's atomic beside
//!   it, which that kind's move-out does not read (`TimerTask::move_out`). The winner gets an [`OwnedTask`],
//!   which moves the task out exactly once, whatever is done with it (run, cancelled,
//!   boxed, handed back, or dropped). A task still in place when the last reference goes
//!   (the state is then still PENDING) is dropped there.
//! - `key` belongs to the owning shard's thread alone: where the entry sits in its wheel.
//!   It is an atomic only so that this stays safe code; every access is `Relaxed` because
//!   one thread does them all.
//! - `refs` counts the `EntryRef`s: the handles, mailbox messages and the wheel's slot. The
//!   last one to go frees the cell, through its vtable: to its pool page (`pool::free`: the
//!   page's local list on the thread that made it, its remote stack elsewhere), or its `Box`.
//!
//! Why not `Arc<Entry>` with a `Box<dyn TimerTask>` inside: that is two allocations per
//! timeout, and at a million pending timeouts about 145 bytes each (measured by the
//! simulator); the single cell is 24 bytes plus the task, and the task is run without being
//! boxed at all when it is a closure (`TimerTask::run_unboxed`). Why not entries reclaimed
//! with `crossbeam-epoch`: reference counts already free each cell the moment its last user
//! lets go, with no deferred garbage and no pinning on the arm path. Why a pool rather than
//! the allocator: no allocator call on the arm path, a cell freed by the shard goes straight
//! back to the thread that made it (one CAS on its page), and a 32-byte cell takes 32 bytes,
//! not glibc's 48-byte chunk. A thread that goes on arming does not keep the peak's memory: a
//! page is unmapped once its owner finds it empty, at the latest one page's worth of arms
//! after (save the one page per size class it allocates from), and an exiting thread's pages
//! go back as their last cells are freed; a quiet thread keeps its pages (`pool/mod.rs`,
//! "What the pool keeps", "What a quiet thread keeps").
//!
//! The type-erased calls go through a static vtable per task type, as tokio's task header
//! does; it is the one place in the crate with raw pointers.

use crate::state::{Cancelled, StateCell};
use crate::sync::{AtomicU32, Ordering, UnsafeCell, fence};
use crate::task::TimerTask;
use crate::task::sealed::TOKEN;
use crate::wheel::{Key, Timed};
use std::any::TypeId;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr::NonNull;

mod owned;
mod pool;
#[cfg(all(test, not(loom)))]
mod tests;

pub(crate) use owned::{BorrowedTask, OwnedTask};
#[cfg(loom)]
pub(crate) use pool::loom_quarantine;
#[cfg(not(loom))]
pub(crate) use pool::{pages as pool_pages, trim as trim_pool};

/// For the loom models of the pool's own protocol (`loom_support::PoolSlot`): a slot of
/// the smallest size class, as a cell of 32 bytes gets. `None` as for [`pool::alloc`].
#[cfg(loom)]
pub(crate) fn loom_pool_alloc() -> Option<NonNull<u8>> {
    pool::alloc(0)
}

/// For the loom models: the calling thread's pool heap is given up, as its exit does.
#[cfg(loom)]
pub(crate) fn loom_pool_exit() {
    pool::loom_exit();
}

/// # Safety
/// As for [`pool::free`].
#[cfg(loom)]
pub(crate) unsafe fn loom_pool_free(slot: NonNull<u8>) {
    // SAFETY: passed on from the caller.
    unsafe { pool::free(slot) }
}

/// "Not in the wheel."
const NO_KEY: u32 = u32::MAX;
/// More references than this is a bug (a leak of handles in a loop): abort, as `Arc` does.
const MAX_REFS: u32 = u32::MAX / 2;

/// The type-independent front of every cell. `repr(C)` so that a pointer to a `Cell<T>` is a
/// pointer to its header.
#[repr(C)]
struct Header {
    state: StateCell,
    refs: AtomicU32,
    key: AtomicU32,
    vtable: &'static VTable,
    /// Under loom, a loom `Arc` that lives exactly as long as the cell, so that loom's leak
    /// check sees a cell that is never freed.
    #[cfg(loom)]
    leak_check: crate::sync::Arc<()>,
    /// Under loom, what makes a move-out a write loom sees: the move itself is a read of
    /// the task (`Cell::take`, so that a sleep may read its own fields meanwhile), and two
    /// reads do not conflict; two move-outs (two winners of the terminal CAS: a broken
    /// protocol) write this cell twice, unordered, which loom reports.
    #[cfg(loom)]
    taken: UnsafeCell<()>,
}

/// What the type-erased code needs to do with a task of a given type. Each function takes a
/// pointer to a live `Cell<T>` of the matching `T`.
struct VTable {
    /// Moves the task out and runs it.
    run: unsafe fn(NonNull<Header>),
    /// Moves the task out and tells it it was cancelled.
    cancelled: unsafe fn(NonNull<Header>),
    /// Moves the task out into a `Box`.
    boxed: unsafe fn(NonNull<Header>) -> Box<dyn TimerTask>,
    /// Drops the task in place.
    drop_task: unsafe fn(NonNull<Header>),
    /// Frees the cell (the task must be gone).
    dealloc: unsafe fn(NonNull<Header>),
    type_id: fn() -> TypeId,
    /// [`TimerTask::runs_on_shard`] of the task's type.
    #[cfg_attr(not(feature = "offload"), allow(dead_code))]
    runs_on_shard: fn() -> bool,
    /// [`TimerTask::left_pending_by_stop`] of the task's type.
    left_pending_by_stop: fn() -> bool,
    /// [`TimerTask::is_wake_up`] of the task's type.
    is_wake_up: fn() -> bool,
}

#[repr(C)]
struct Cell<T> {
    header: Header,
    task: UnsafeCell<MaybeUninit<T>>,
}

impl<T: TimerTask> Cell<T> {
    /// The vtable of a cell in a `Box`.
    const VTABLE: VTable = VTable {
        run: Self::run,
        cancelled: Self::cancelled,
        boxed: Self::boxed,
        drop_task: Self::drop_task,
        dealloc: Self::dealloc,
        type_id: TypeId::of::<T>,
        runs_on_shard: || T::runs_on_shard(TOKEN),
        left_pending_by_stop: || T::left_pending_by_stop(TOKEN),
        is_wake_up: || T::is_wake_up(TOKEN),
    };

    /// The vtable of a cell in a pool slot: only the way it is freed differs, so a cell
    /// carries no flag for it.
    const POOLED_VTABLE: VTable = VTable { dealloc: Self::dealloc_pooled, ..Self::VTABLE };

    /// The pool's size class for this cell, if it is pooled.
    const CLASS: Option<usize> = pool::class_of(size_of::<Self>(), align_of::<Self>());

    /// # Safety
    /// `ptr` points to a live `Cell<T>` whose task is in place, and the caller has the
    /// exclusive right to move it out (it won the terminal CAS, or holds the last reference
    /// of a still-pending entry); the task is not touched again.
    unsafe fn take(ptr: NonNull<Header>) -> T {
        // SAFETY: by the contract, `ptr` is a `Cell<T>` (the vtable that brought us here is
        // `Cell<T>::VTABLE`), and the task is initialized and ours alone to move out.
        // A read, not a write: the move leaves the bytes as they are, and a sleep may read
        // its own fields of the task meanwhile (`EntryRef::read_task`). Through the task's
        // own `move_out`, which for an ambient sleep's wake-up reads only what it moves.
        let cell = unsafe { &*ptr.cast::<Cell<T>>().as_ptr() };
        #[cfg(loom)]
        cell.header.taken.with_mut(|_| ());
        // SAFETY: as above.
        unsafe { cell.task.with(|task| T::move_out((*task).as_ptr(), TOKEN)) }
    }

    /// # Safety
    /// As for [`Cell::take`].
    unsafe fn run(ptr: NonNull<Header>) {
        // SAFETY: passed on from the caller.
        unsafe { Self::take(ptr) }.run_unboxed(TOKEN);
    }

    /// # Safety
    /// As for [`Cell::take`].
    unsafe fn cancelled(ptr: NonNull<Header>) {
        // SAFETY: passed on from the caller.
        unsafe { Self::take(ptr) }.cancelled_unboxed(TOKEN);
    }

    /// # Safety
    /// As for [`Cell::take`].
    unsafe fn boxed(ptr: NonNull<Header>) -> Box<dyn TimerTask> {
        // SAFETY: passed on from the caller.
        Box::new(unsafe { Self::take(ptr) })
    }

    /// # Safety
    /// As for [`Cell::take`].
    unsafe fn drop_task(ptr: NonNull<Header>) {
        // SAFETY: passed on from the caller.
        drop(unsafe { Self::take(ptr) });
    }

    /// # Safety
    /// `ptr` came from `Box::leak` of a `Cell<T>` in [`EntryRef::with_refs`], no reference
    /// to it remains, and its task has been moved out or dropped.
    unsafe fn dealloc(ptr: NonNull<Header>) {
        // SAFETY: by the contract; `MaybeUninit` does not drop the (gone) task again.
        drop(unsafe { Box::from_raw(ptr.cast::<Cell<T>>().as_ptr()) });
    }

    /// # Safety
    /// `ptr` is a pool slot holding a `Cell<T>` ([`EntryRef::with_refs`]), no reference to
    /// it remains, and its task has been moved out or dropped.
    unsafe fn dealloc_pooled(ptr: NonNull<Header>) {
        // SAFETY: by the contract the cell is dead; dropping it in place drops its header
        // (under loom, its leak-check `Arc`) and not the (gone) task (`MaybeUninit`).
        unsafe { std::ptr::drop_in_place(ptr.cast::<Cell<T>>().as_ptr()) };
        // SAFETY: the slot came from `pool::alloc` and nothing uses it any more.
        unsafe { pool::free(ptr.cast()) };
    }
}

/// A counted reference to an entry.
pub(crate) struct EntryRef {
    ptr: NonNull<Header>,
}

// SAFETY: the header's fields are atomics; the task is `Send` (`TimerTask: Send`) and is
// only ever moved out by the one thread that won the right to it (module docs), so sharing
// and sending references across threads is sound.
unsafe impl Send for EntryRef {}
// SAFETY: as for `Send`: through `&EntryRef` only atomics are touched, the task moved out by
// the unique CAS winner (a read), or, by a sleep through `read_task`, read in place (its
// waker's bytes, which no one writes once the entry is shared) or stored to through an
// atomic the move-out does not read: no two threads ever write the same bytes, nor one
// write bytes another reads.
unsafe impl Sync for EntryRef {}

impl EntryRef {
    /// A pending entry holding `task`, with one reference (the one returned).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn new<T: TimerTask>(deadline: u64, task: T) -> EntryRef {
        Self::with_refs(deadline, task, 1)
    }

    /// A pending entry holding `task`, and two references to it: the handle's and the one
    /// that goes to the shard. Counted at once rather than cloned: one atomic operation less
    /// on the arm path.
    pub(crate) fn new_pair<T: TimerTask>(deadline: u64, task: T) -> (EntryRef, EntryRef) {
        let entry = Self::with_refs(deadline, task, 2);
        let other = EntryRef { ptr: entry.ptr };
        (entry, other)
    }

    /// A cell in a slot of the calling thread's pool if its size class is pooled and the
    /// thread's heap is there, else in a `Box`. Inline: the arm path's (see
    /// `TimerService::schedule_routed`).
    #[inline]
    fn with_refs<T: TimerTask>(deadline: u64, task: T, refs: u32) -> EntryRef {
        let slot = Cell::<T>::CLASS.and_then(pool::alloc);
        let vtable = if slot.is_some() { &Cell::<T>::POOLED_VTABLE } else { &Cell::<T>::VTABLE };
        let cell = Cell {
            header: Header {
                state: StateCell::new_pending(deadline),
                refs: AtomicU32::new(refs),
                key: AtomicU32::new(NO_KEY),
                vtable,
                #[cfg(loom)]
                leak_check: crate::sync::Arc::new(()),
                #[cfg(loom)]
                taken: UnsafeCell::new(()),
            },
            task: UnsafeCell::new(MaybeUninit::new(task)),
        };
        #[cfg(loom)]
        crate::loom_live::add(1);
        let ptr = match slot {
            Some(slot) => {
                let ptr = slot.cast::<Cell<T>>();
                // SAFETY: a free slot of the class of `Cell<T>`: at least its size, aligned
                // to 16 bytes, which is at least its alignment (`pool::class_of`).
                unsafe { ptr.as_ptr().write(cell) };
                ptr
            }
            None => NonNull::from(Box::leak(Box::new(cell))),
        };
        EntryRef { ptr: ptr.cast() }
    }

    fn header(&self) -> &Header {
        // SAFETY: this reference keeps the cell alive (`refs` ≥ 1 while it exists).
        unsafe { self.ptr.as_ref() }
    }

    pub(crate) fn state(&self) -> &StateCell {
        &self.header().state
    }

    /// PENDING → CANCELLED; on success the task, now the caller's alone, and whether the
    /// shard had filed the entry (then it must be told).
    pub(crate) fn cancel(&self) -> Option<(OwnedTask, Cancelled)> {
        self.state().try_cancel().map(|linked| (OwnedTask::new(self.clone()), linked))
    }

    /// PENDING → CANCELLED, for a canceller that holds this reference until it is done with
    /// the task: on success the right to the task, borrowed from this reference rather than
    /// counted (one atomic operation less per cancel), and whether the shard had filed it.
    pub(crate) fn cancel_borrowed(&self) -> Option<(BorrowedTask<'_>, Cancelled)> {
        self.state().try_cancel().map(|linked| (BorrowedTask { entry: self }, linked))
    }

    /// PENDING(deadline) → EXPIRED, for the owning shard; on success the task.
    pub(crate) fn expire(&self, deadline: u64) -> Option<OwnedTask> {
        self.state().try_expire(deadline).then(|| OwnedTask::new(self.clone()))
    }

    /// [`TimerTask::left_pending_by_stop`] of the entry's task type.
    pub(crate) fn left_pending_by_stop(&self) -> bool {
        (self.header().vtable.left_pending_by_stop)()
    }

    /// Where the entry sits in its shard's wheel. Owning shard's thread only.
    pub(crate) fn key(&self) -> Option<Key> {
        // Relaxed: only the owning shard's thread reads or writes `key`.
        Key::from_raw(self.header().key.load(Ordering::Relaxed))
    }

    /// Owning shard's thread only.
    pub(crate) fn set_key(&self, key: Option<Key>) {
        // Relaxed: only the owning shard's thread reads or writes `key`.
        self.header().key.store(key.map_or(NO_KEY, Key::into_raw), Ordering::Relaxed);
    }

    /// Runs `f` on the entry's task in place, without taking it: for a `Sleep`, which reads
    /// its wake-up's waker (to know it) and keeps its own deadline there.
    ///
    /// # Safety
    /// The cell holds a `T` (the entry was made with a task of type `T`), and `f` reads only
    /// what no one writes once the entry is shared (a winner's move-out, `Cell::take`, is a
    /// read), or stores only through an atomic that `T`'s move-out does not read. The cell
    /// is not freed while this reference lives. What `f` reads of a task already moved out
    /// is the bytes it left, which must be read as such (no use of a value the move gave
    /// away).
    #[inline]
    pub(crate) unsafe fn read_task<T: TimerTask, R>(&self, f: impl FnOnce(&T) -> R) -> R {
        debug_assert!((self.header().vtable.type_id)() == TypeId::of::<T>(), "a task of another type");
        // SAFETY: by the contract, a `Cell<T>` whose task was written before the entry was
        // shared and is only read since; this reference keeps it alive.
        unsafe { (*self.ptr.cast::<Cell<T>>().as_ptr()).task.with(|task| f((*task).assume_init_ref())) }
    }

    /// True if both refer to the same entry.
    pub(crate) fn ptr_eq(&self, other: &EntryRef) -> bool {
        self.ptr == other.ptr
    }

    /// The reference as a raw pointer, for a slot of a stage's ring; it still counts.
    pub(crate) fn into_raw(self) -> *mut () {
        ManuallyDrop::new(self).ptr.as_ptr().cast()
    }

    /// # Safety
    /// `raw` came from [`EntryRef::into_raw`], and the reference it stands for is turned
    /// back into an `EntryRef` only once.
    pub(crate) unsafe fn from_raw(raw: *mut ()) -> EntryRef {
        // SAFETY: by the contract, `raw` is the non-null pointer of a counted reference.
        EntryRef { ptr: unsafe { NonNull::new_unchecked(raw.cast()) } }
    }
}

impl Timed for EntryRef {
    /// The deadline in the state word now: a reset moves the entry when the wheel next files
    /// it (see `wheel/mod.rs`).
    fn deadline(&self) -> u64 {
        self.state().load().deadline()
    }
}

impl Clone for EntryRef {
    fn clone(&self) -> EntryRef {
        // Relaxed: a new reference is made from one the caller holds, so the cell cannot be
        // freed meanwhile; nothing is published by the count (as `Arc::clone`).
        let old = self.header().refs.fetch_add(1, Ordering::Relaxed);
        if old > MAX_REFS {
            std::process::abort();
        }
        EntryRef { ptr: self.ptr }
    }
}

impl Drop for EntryRef {
    /// Drops this reference; if it was the last, drops a task still in place and frees the
    /// cell (to its pool page, or its `Box`).
    fn drop(&mut self) {
        let this = &*self;
        let refs = &this.header().refs;
        // The last reference, seen with a load: no locked instruction. Sound because a
        // reference is only ever made from one held (`clone`; a stage's claim moves the one
        // the slot held), so with this one the only one left, no other thread can make
        // another. Most cells end this way: the handle is dropped first (a decrement), and the
        // stage's sweep or the shard then drops the last reference. Linux's `skb_unref` does
        // the same. Acquire: pairs with the Release decrement of every reference dropped
        // before, so the free happens after each of their uses.
        if refs.load(Ordering::Acquire) != 1 {
            // Release: every use of the cell through this reference happens before the
            // free; pairs with the Acquire fence below in whichever thread drops the last
            // reference (as `Arc::drop`).
            if refs.fetch_sub(1, Ordering::Release) != 1 {
                return;
            }
            // Acquire: see the Release above; the free happens after every other use.
            fence(Ordering::Acquire);
        }
        if matches!(this.state().load(), crate::state::State::Pending { .. }) {
            // SAFETY: the last reference, so no other thread can reach the cell; the entry
            // never left PENDING, so its task is still in place and nobody took the right
            // to it.
            unsafe { (this.header().vtable.drop_task)(this.ptr) };
        }
        #[cfg(loom)]
        crate::loom_live::add(-1);
        // SAFETY: the last reference, so nothing else refers to the cell; its task is gone
        // (dropped above, or moved out by the winner of the terminal CAS, whose `OwnedTask`
        // held a reference until it was done); the vtable frees it the way it was made.
        unsafe { (this.header().vtable.dealloc)(this.ptr) };
    }
}

impl std::fmt::Debug for EntryRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryRef").field("state", &self.state().load()).finish_non_exhaustive()
    }
}
