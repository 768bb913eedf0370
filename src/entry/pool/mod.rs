//! The cell pool: per-thread heaps of exact-size slots, so that arming and cancelling on
//! one thread reuses memory that thread owns, with no call to the allocator and no atomic
//! operation, and a cell freed on another thread goes straight back to its page.
//!
//! ```text
//!  thread A's heap ──▶ class 32 B: [page]──[page]──…     page (PAGE_BYTES, aligned to them)
//!                      class 48 B: [page]                ┌────────┬──────┬──────┬─────┐
//!                      …                                 │ header │ slot │ slot │ ... │
//!                                                        └────────┴──────┴──────┴─────┘
//!  free on A:        slot ──▶ header.local_free   (owner only, plain stores)
//!  free elsewhere:   slot ──▶ header.remote       (one CAS; A takes the stack with one swap)
//!  A exits:          each page released if empty, else abandoned: its last free releases it
//! ```
//!
//! The design is mimalloc's (Leijen, Zorn and de Moura, "Mimalloc: Free List Sharding in
//! Action", 2019), cut down to what cells need: size classes of 16 B steps from 32 B to
//! [`MAX_POOLED`] (larger or more aligned cells stay `Box`es); a cell's page is found by
//! masking its address, so a cell carries no field for the pool. See `page.rs` for who may
//! touch which field, and `heap.rs` for when pages are made and released.
//!
//! Why not the allocator: with glibc a 32 B cell costs a 48 B chunk, and a cell freed by
//! the shard thread lands in that thread's cache, away from the scheduling thread that will
//! allocate the next one (the old remedy, a queue per shard that handed cells back to be
//! freed where they were allocated, was a hot spot every producer of the shard CASed). Here
//! a foreign free is one CAS on the cell's own page, which only its owner and the threads
//! freeing its cells touch.
//!
//! What the pool keeps, beyond the live cells (`heap.rs` has the rules):
//! - per thread and size class it used, the page it allocates from, even empty;
//! - pages that still hold a live cell: one cell keeps its 256 KiB page (a cancelled cell
//!   counts until the shard has let go of it);
//! - pages emptied by frees on other threads, until the owner's next sweep: at the class's
//!   next refill (at most one page's worth of allocations of the class: 8,188 for 32 B
//!   cells, 2,046 for 128 B), or after [`heap::SWEEP_EVERY`] (4,096) frees on the owner
//!   thread, whichever comes first. A page emptied by frees on its own thread goes at once;
//! - process-wide, up to four released pages (1 MiB, `page.rs`, `spare`) for the next thread
//!   that needs one.
//!
//! So after a burst the memory follows the live cells within a page's worth of arms, or
//! 4,096 frees, not the peak (`tests/pool_burst.rs`: three bursts of a million arms on a
//! thread that lives on, each followed by a second of light load; RSS back within 4 MiB of
//! the first burst's after each). Each page is a mapping of its own (`os.rs`:
//! `mmap`, and `munmap` when it goes), so a page given back leaves the process's RSS at once,
//! whatever the allocator would do: through glibc's `malloc`, pages came from its heap as
//! soon as its dynamic mmap threshold rose (the first page freed, or any large buffer freed,
//! raises it), and stayed resident after the pool gave them back (30 MiB a burst).
//!
//! What a quiet thread keeps: a thread that stops allocating and freeing cells keeps every
//! page its heap held when it went quiet, however many of their cells other threads free
//! afterwards: each class's current page, and every page that then held a live cell, emptied
//! since or not. A thread that goes quiet right after arming a million timeouts keeps their
//! 123 pages (31 MiB) while the shard frees every cell. They come back only through the
//! thread: a class's pages at its next refill (within a page's worth of its arms of that
//! class), every class's after 4,096 frees of its own cells on the thread, or at its exit
//! (each page then as its last cell is freed). No other thread gives them back: a foreign
//! free only pushes onto the page's remote stack, and it cannot tell that it emptied the page,
//! because only the owner counts the page's live cells, with plain stores. Handing an emptied
//! page on from another thread would need a count of live cells that both sides update
//! atomically, and a way for the owner to take a page back that a freer is releasing: an
//! atomic operation on the arm path and a new protocol to model (not done).

mod heap;
mod os;
mod page;
#[cfg(all(test, not(loom)))]
mod tests;

use heap::Heap;
use page::Page;
#[cfg(loom)]
pub(crate) use page::loom_quarantine;
use std::ptr::NonNull;

/// Step between size classes.
const CLASS_STEP: usize = 16;
/// The smallest slot: a cell is at least its 24 B header.
const MIN_POOLED: usize = 32;
/// The largest pooled cell; larger ones are `Box`es.
pub(super) const MAX_POOLED: usize = 128;
/// Size classes: 32, 48, …, `MAX_POOLED` bytes.
const CLASSES: usize = (MAX_POOLED - MIN_POOLED) / CLASS_STEP + 1;

crate::sync::const_thread_local! {
    static HEAP: Heap = Heap::new();
}

/// The size class of a cell of `size` bytes aligned to `align`, or `None` if it is not
/// pooled. Slots are aligned to 16 bytes (pages are aligned, the header and every slot size
/// are multiples of 16).
pub(super) const fn class_of(size: usize, align: usize) -> Option<usize> {
    if size > MAX_POOLED || align > CLASS_STEP {
        return None;
    }
    let size = if size < MIN_POOLED { MIN_POOLED } else { size };
    Some((size.next_multiple_of(CLASS_STEP) - MIN_POOLED) / CLASS_STEP)
}

/// The slot size of `class`.
const fn slot_bytes(class: usize) -> usize {
    MIN_POOLED + class * CLASS_STEP
}

/// A slot of `class` from the calling thread's heap; `None` if the thread's heap is gone
/// (a thread-local destructor arming as its thread exits) or there is no memory for a new
/// page (the kernel refuses a mapping): the caller then uses a `Box`.
///
/// Inline, with the heap's fast path: every arm allocates, with its class a constant of the
/// task's type, and as two calls of their own the allocation cost 33 instructions more per
/// arm and cancel (554 → 521 by callgrind over `examples/arm_cancel_loop.rs`; a `Sleep` 610
/// → 589 over `examples/sleep_loop.rs`). A page that runs out goes to `Heap::refill`, out
/// of line.
#[inline]
pub(super) fn alloc(class: usize) -> Option<NonNull<u8>> {
    HEAP.try_with(|heap| heap.alloc(class)).ok().flatten()
}

/// Gives back what the pool holds for later allocations: the calling thread's empty pages
/// (its current ones too) and the process's spare pages. For tests that count the
/// process's memory, which must not see a page kept for reuse as a leak.
#[cfg(not(loom))]
pub(crate) fn trim() {
    let _ = HEAP.try_with(Heap::trim);
    page::drain_spares();
}

/// The pool's pages now, process-wide: the blocks mapped and not given back, and how many of
/// those are spare (`page::counts`).
#[cfg(not(loom))]
pub(crate) fn pages() -> (usize, usize) {
    page::counts()
}

/// Under loom: what the calling thread's exit does outside loom (see `Heap`'s `Drop`).
#[cfg(loom)]
pub(super) fn loom_exit() {
    HEAP.with(Heap::abandon_all);
}

/// Gives a slot back: to the local list if this thread owns its page, else to the page's
/// remote stack (or, if its owner has exited, towards the page's release).
///
/// # Safety
/// `slot` came from [`alloc`] and is not used any more (its cell was dropped, or moved out).
pub(super) unsafe fn free(slot: NonNull<u8>) {
    let page = Page::of(slot);
    let local = HEAP.try_with(|heap| {
        // SAFETY: the page lives while the cell in `slot` does, and it still does.
        if heap.owns(unsafe { page.as_ref() }) {
            // SAFETY: our page, and the slot is free (the caller's contract).
            unsafe { heap.free(page, slot) };
            true
        } else {
            false
        }
    });
    if matches!(local, Ok(true)) {
        return;
    }
    // SAFETY: the page is the slot's, and the slot is free; we do not touch the page again
    // unless told to release it.
    if unsafe { Page::free_remote(page, slot) } {
        // SAFETY: `free_remote` tells exactly one caller, once no cell of the page is live.
        unsafe { Page::release(page) };
    }
}
