//! One page of the cell pool: [`PAGE_BYTES`] aligned to their own size, a header, then
//! slots of one size class. A cell's page is its address with the low bits masked off.
//!
//! Ground rules (mimalloc's free-list sharding, Leijen et al., 2019):
//! - Immutable after the page is made, read by any thread that holds a cell of it: `owner`,
//!   `slot_bytes`, `slots`, `class`. The page was made before any of its cells was handed
//!   out, and a cell reaches another thread only through a synchronizing hand-over, so these
//!   plain reads are ordered after the writes.
//! - Owner thread only, no atomics: `local_free` (a list threaded through free slots),
//!   `carved` (slots handed out at least once), `used` (slots handed out and not known to be
//!   free), `index` (the page's place in its heap's list).
//! - Any thread: `remote`, a push-only stack of slots freed by threads other than the owner
//!   (one CAS to push; the owner takes the whole stack with one `swap`, so there is no ABA:
//!   a slot is never popped alone). When the owner thread exits it swaps in a marker (`abandoned_marker`):
//!   from then on the page is nobody's, and `abandoned` counts its live cells down.
//! - Who releases a page, exactly once: its owner, when it finds the page empty; or, once
//!   the page is abandoned, whichever of the owner's exit and the last foreign free brings
//!   `abandoned` to zero (the owner adds the cells still live after its swap, each foreign
//!   free subtracts one; the count can reach zero only once both sides are done).

use crate::sync::{AtomicPtr, AtomicUsize, Ordering};
use std::cell::Cell;
use std::ptr::{self, NonNull};

/// Bytes in a page, and the alignment its address has: a cell's page is its address with
/// the low bits cleared. 256 KiB: a block is a mapping of its own (`os`), three system calls
/// to make and one to give back, paid once per thousands of cells, while a bigger page holds
/// more memory back per size class a thread uses. (Through glibc's allocator, as before, an
/// aligned block also cost 4–8 KiB of its own whatever its size: 12 % of 64 KiB.)
#[cfg(not(miri))]
pub(super) const PAGE_BYTES: usize = 256 * 1024;
/// Under Miri, 16 KiB: the pool's tests fill pages, and a page of 256 KiB is thousands of
/// slots, minutes each under the interpreter (as loom's pages hold two slots).
/// (Written as a shift, not as `16 * 1024`: the plain build's `256 * 1024` and this one
/// gave mutants of one name, and only the plain one is ever compiled by a plain test.)
#[cfg(miri)]
pub(super) const PAGE_BYTES: usize = 1 << 14;

/// Where the first slot starts: the header, rounded up to a cache line.
const DATA_OFFSET: usize = size_of::<Page>().next_multiple_of(64);

/// Slots per page under loom, whatever their size: a model reaches page reuse (the remote
/// stack, a full page) in a couple of allocations (as tokio shrinks its queues under loom).
#[cfg(loom)]
pub(super) const LOOM_SLOTS: usize = 2;

/// The marker in `remote` of a page whose owner thread has exited. Odd, so never a slot.
fn abandoned_marker() -> *mut Free {
    ptr::without_provenance_mut(1)
}

/// A free slot's first word: the next free slot.
#[derive(Debug)]
pub(super) struct Free {
    next: *mut Free,
}

/// A page's header, at its start.
pub(super) struct Page {
    owner: u64,
    class: usize,
    slot_bytes: usize,
    slots: usize,
    local_free: Cell<*mut Free>,
    carved: Cell<usize>,
    used: Cell<usize>,
    index: Cell<usize>,
    remote: AtomicPtr<Free>,
    abandoned: AtomicUsize,
    /// Under loom: one cell per slot that its allocation and its free each write, so that a
    /// slot reused before its free happens-before the reuse is a data race loom reports.
    #[cfg(loom)]
    tokens: [crate::sync::UnsafeCell<()>; LOOM_SLOTS],
    /// Under loom: set when the page is released, to report a second release.
    #[cfg(loom)]
    released: std::sync::atomic::AtomicBool,
}

impl Page {
    /// A new empty page for `class`'s slots of `slot_bytes`, owned by heap `owner`; `None`
    /// if there is no memory for it (`os::map`).
    pub(super) fn new(owner: u64, class: usize, slot_bytes: usize) -> Option<NonNull<Page>> {
        #[cfg(not(loom))]
        let raw = spare::take().or_else(blocks::alloc)?.cast::<Page>();
        #[cfg(loom)]
        let raw = super::os::map()?.cast::<Page>();
        #[cfg(not(loom))]
        let slots = (PAGE_BYTES - DATA_OFFSET) / slot_bytes;
        #[cfg(loom)]
        let slots = LOOM_SLOTS;
        let page = Page {
            owner,
            class,
            slot_bytes,
            slots,
            local_free: Cell::new(ptr::null_mut()),
            carved: Cell::new(0),
            used: Cell::new(0),
            index: Cell::new(0),
            remote: AtomicPtr::new(ptr::null_mut()),
            abandoned: AtomicUsize::new(0),
            #[cfg(loom)]
            tokens: std::array::from_fn(|_| crate::sync::UnsafeCell::new(())),
            #[cfg(loom)]
            released: std::sync::atomic::AtomicBool::new(false),
        };
        // SAFETY: `raw` is a fresh block of `PAGE_BYTES`, aligned to them, so it holds a
        // `Page` at its start.
        unsafe { raw.as_ptr().write(page) };
        #[cfg(loom)]
        {
            crate::loom_live::add_page(1);
            loom_quarantine::keep(raw.cast());
        }
        Some(raw)
    }

    /// The page a slot lies in.
    pub(super) fn of(slot: NonNull<u8>) -> NonNull<Page> {
        // Pages are aligned to `PAGE_BYTES`, and every slot lies inside its page.
        let page = slot.as_ptr().map_addr(|a| a & !(PAGE_BYTES - 1));
        // SAFETY: a slot's address is at least `DATA_OFFSET` above its page's, which is
        // not null.
        unsafe { NonNull::new_unchecked(page.cast()) }
    }

    pub(super) fn owner(&self) -> u64 {
        self.owner
    }

    pub(super) fn class(&self) -> usize {
        self.class
    }

    /// Owner only: where the page sits in its heap's list.
    pub(super) fn index(&self) -> usize {
        self.index.get()
    }

    /// Owner only.
    pub(super) fn set_index(&self, index: usize) {
        self.index.set(index);
    }

    /// Owner only: slots handed out and not known to be free.
    pub(super) fn used(&self) -> usize {
        self.used.get()
    }

    /// Owner only: slots that can be handed out now, without collecting.
    pub(super) fn free_slots(&self) -> usize {
        self.slots - self.used.get()
    }

    /// Owner only: whether the page is worth switching to (an eighth of it free), so that
    /// a heap does not hop between nearly full pages.
    pub(super) fn roomy(&self) -> bool {
        self.free_slots() * 8 >= self.slots
    }

    /// Owner only: a free slot of `page`, if it has one without collecting.
    ///
    /// An associated function of the page's pointer, not a method of `&self`: a new slot's
    /// pointer is derived from the pointer the block was allocated with, whose provenance
    /// covers the whole page. One derived from `&self` would cover only the header, and a
    /// write through it to the slot would be undefined behaviour (Miri's Stacked Borrows
    /// reports it).
    ///
    /// # Safety
    /// The caller owns `page`, which is live.
    pub(super) unsafe fn take(page: NonNull<Page>) -> Option<NonNull<u8>> {
        // SAFETY: the caller's contract.
        let this = unsafe { page.as_ref() };
        let slot = if let Some(free) = NonNull::new(this.local_free.get()) {
            // SAFETY: a slot on the local list is free and ours (owner only), and holds
            // its successor.
            this.local_free.set(unsafe { free.as_ref().next });
            free.cast::<u8>()
        } else if this.carved.get() < this.slots {
            let n = this.carved.get();
            this.carved.set(n + 1);
            // SAFETY: slot `n` lies inside the page (`n < slots`, which fit after the header).
            unsafe { page.cast::<u8>().add(DATA_OFFSET + n * this.slot_bytes) }
        } else {
            return None;
        };
        this.used.set(this.used.get() + 1);
        this.touch(slot);
        Some(slot)
    }

    /// Owner only: moves the slots other threads freed onto the local list; how many.
    pub(super) fn collect(&self) -> usize {
        // Relaxed: a look before the swap; an empty stack is left alone (a push that lands
        // just after is taken next time).
        if self.remote.load(Ordering::Relaxed).is_null() {
            return 0;
        }
        // Acquire: pairs with the Release push in `free_remote`, so each freer's last use of
        // its cell happens before the slot is handed out again.
        let mut list = self.remote.swap(ptr::null_mut(), Ordering::Acquire);
        debug_assert!(list != abandoned_marker(), "only the owner abandons, and then stops");
        let mut n = 0;
        while let Some(free) = NonNull::new(list) {
            // SAFETY: slots on the taken stack are free and now ours; each holds its successor.
            list = unsafe { free.as_ref().next };
            // SAFETY: as above; the slot is written only by us from here on.
            unsafe { (*free.as_ptr()).next = self.local_free.get() };
            self.local_free.set(free.as_ptr());
            n += 1;
        }
        self.used.set(self.used.get() - n);
        n
    }

    /// Owner only: takes back a slot of this page freed on the owner thread.
    ///
    /// # Safety
    /// `slot` is a slot of this page that was handed out and is not used any more.
    pub(super) unsafe fn free_local(&self, slot: NonNull<u8>) {
        self.touch(slot);
        let free = slot.cast::<Free>();
        // SAFETY: the slot is ours again (the caller's contract), big enough for a `Free`.
        unsafe { free.as_ptr().write(Free { next: self.local_free.get() }) };
        self.local_free.set(free.as_ptr());
        self.used.set(self.used.get() - 1);
    }

    /// Any thread but the owner (or the owner after its heap is gone): gives back a slot.
    /// `true` if the caller must now release the page (abandoned, and this was its last cell).
    ///
    /// # Safety
    /// `page` is the page of `slot` (from [`Page::of`]), `slot` was handed out and is not
    /// used any more, and the caller does not touch the page again unless told to release it.
    pub(super) unsafe fn free_remote(page: NonNull<Page>, slot: NonNull<u8>) -> bool {
        // SAFETY: the page lives while one of its cells does, and this slot is one.
        let this = unsafe { page.as_ref() };
        this.touch(slot);
        let free = slot.cast::<Free>();
        // Relaxed: the CAS below publishes; this is its first guess.
        let mut head = this.remote.load(Ordering::Relaxed);
        loop {
            if head == abandoned_marker() {
                // AcqRel: Release so this free happens before the page's release, wherever
                // that runs; Acquire so that, if this is the last, every other side's use
                // of the page happens before ours (the release sequence of `abandoned`).
                return this.abandoned.fetch_sub(1, Ordering::AcqRel) == 1;
            }
            // SAFETY: the slot is ours until the CAS publishes it.
            unsafe { free.as_ptr().write(Free { next: head }) };
            // Release: pairs with the owner's Acquire swap in `collect`: our use of the cell
            // (and the link just written) happens before the slot is reused. Relaxed on
            // failure: we only retry.
            match this.remote.compare_exchange_weak(head, free.as_ptr(), Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return false,
                Err(actual) => head = actual,
            }
        }
    }

    /// Owner only, as its thread exits: gives the page up. `true` if the caller must release
    /// it now (no cell of it is live); otherwise the last foreign free will.
    ///
    /// # Safety
    /// The caller owns the page, and neither it nor its heap touches the page afterwards
    /// unless told to release it.
    pub(super) unsafe fn abandon(page: NonNull<Page>) -> bool {
        // SAFETY: an owned page lives until its owner releases or abandons it.
        let this = unsafe { page.as_ref() };
        // AcqRel: Acquire takes the last pushes (as in `collect`); Release is not needed for
        // the marker itself (foreign frees only compare it) but costs nothing here.
        let mut list = this.remote.swap(abandoned_marker(), Ordering::AcqRel);
        let mut gone = 0;
        while let Some(free) = NonNull::new(list) {
            // SAFETY: slots on the taken stack are free; each holds its successor.
            list = unsafe { free.as_ref().next };
            gone += 1;
        }
        let live = this.used.get() - gone;
        if live == 0 {
            // No cell left to free: no foreign thread can reach the page any more.
            return true;
        }
        // AcqRel: Release so our last use of the page happens before its release by the last
        // foreign free; Acquire so that, if the frees all came first, theirs happen before
        // ours. The count wraps below zero while frees overtake this add.
        this.abandoned.fetch_add(live, Ordering::AcqRel).wrapping_add(live) == 0
    }

    /// Frees the page's memory.
    ///
    /// # Safety
    /// The page has no live cell, and no thread will touch it again: its owner found it
    /// empty, or the abandoned count said so to exactly one caller.
    pub(super) unsafe fn release(page: NonNull<Page>) {
        #[cfg(loom)]
        {
            // SAFETY: under loom a page's memory is given back to the allocator only when
            // the next execution starts (`loom_quarantine`), so this read is valid even in a
            // second release, which it reports.
            let again = unsafe { page.as_ref() }.released.swap(true, std::sync::atomic::Ordering::Relaxed);
            assert!(!again, "a pool page released twice");
            crate::loom_live::add_page(-1);
        }
        // SAFETY: by the contract, nothing else refers to the header.
        unsafe { ptr::drop_in_place(page.as_ptr()) };
        #[cfg(not(loom))]
        if let Err(page) = spare::put(page.cast()) {
            // SAFETY: the block came from `blocks::alloc` in `Page::new`, and holds no page
            // any more.
            unsafe { blocks::dealloc(page) };
        }
    }

    /// Under loom, writes the slot's token: each allocation and each free of a slot does,
    /// so loom checks that they are ordered.
    #[cfg_attr(not(loom), allow(clippy::unused_self))]
    fn touch(&self, slot: NonNull<u8>) {
        #[cfg(loom)]
        {
            let base = ptr::from_ref(self).addr();
            let n = (slot.as_ptr().addr() - base - DATA_OFFSET) / self.slot_bytes;
            self.tokens[n].with_mut(|_| ());
        }
        #[cfg(not(loom))]
        let _ = slot;
    }
}

/// A few empty pages kept for the next thread that needs one, process-wide: a new thread's
/// first cell would otherwise map a fresh block (`os`: three system calls, and the kernel
/// zeroes each of its pages at the first touch), and a thread that exits with its pages empty
/// would unmap them. Bounded at [`spare::SLOTS`] pages, so an idle process keeps at most 1 MiB here. Lock-free:
/// a page is put in an empty slot with a CAS and taken with a swap, whole, so no ABA. Plain
/// `std` atomics, not loom's: a `static` cannot hold loom's, and under loom there is no
/// spare (every page comes from and goes back to the allocator).
#[cfg(not(loom))]
mod spare {
    use std::ptr::{self, NonNull};
    use std::sync::atomic::{AtomicPtr, Ordering};

    /// Spare pages kept at most.
    pub(super) const SLOTS: usize = 4;

    static SPARE: [AtomicPtr<u8>; SLOTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SLOTS];

    /// A spare page's block, if one is kept.
    pub(super) fn take() -> Option<NonNull<u8>> {
        SPARE.iter().find_map(|slot| {
            // Relaxed: a look before the swap.
            if slot.load(Ordering::Relaxed).is_null() {
                return None;
            }
            // Acquire: pairs with the Release CAS in `put`: the page's last use by the thread
            // that released it happens before our reuse.
            NonNull::new(slot.swap(ptr::null_mut(), Ordering::Acquire))
        })
    }

    /// Gives every spare page's block back (`blocks::dealloc`).
    pub(super) fn drain() {
        while let Some(page) = take() {
            // SAFETY: a spare block came from `blocks::alloc` in `Page::new`, holds no page
            // any more, and `take` made it ours alone.
            unsafe { super::blocks::dealloc(page) };
        }
    }

    /// Spare pages kept now.
    pub(super) fn count() -> usize {
        // Relaxed: a count for tests and statistics, exact once the pool is quiet.
        SPARE.iter().filter(|slot| !slot.load(Ordering::Relaxed).is_null()).count()
    }

    /// Keeps an empty page's block, or hands it back if every slot is taken.
    pub(super) fn put(page: NonNull<u8>) -> Result<(), NonNull<u8>> {
        for slot in &SPARE {
            // Release: see `take`. Relaxed on failure: the slot is taken; try the next.
            if slot.compare_exchange(ptr::null_mut(), page.as_ptr(), Ordering::Release, Ordering::Relaxed).is_ok() {
                return Ok(());
            }
        }
        Err(page)
    }
}

/// The pages' blocks, from the kernel (`os`) and back, counted: a page lost on its way back
/// (say, released while the spare is full and then neither kept nor freed) shows as a block
/// that no count accounts for (`tests/pool_pages.rs`).
#[cfg(not(loom))]
mod blocks {
    use crate::sync::plain::{AtomicUsize, Ordering};
    use std::ptr::NonNull;

    /// Blocks taken and not given back. A plain atomic: a count outside loom (`sync::plain`).
    static LIVE: AtomicUsize = AtomicUsize::new(0);

    /// A new block; `None` if there is no memory for it.
    pub(super) fn alloc() -> Option<NonNull<u8>> {
        let block = super::super::os::map()?;
        // Relaxed: a count, read for tests and statistics only.
        LIVE.fetch_add(1, Ordering::Relaxed);
        Some(block)
    }

    /// # Safety
    /// `block` came from [`alloc`] and nothing uses it any more.
    pub(super) unsafe fn dealloc(block: NonNull<u8>) {
        // Relaxed: as in `alloc`.
        LIVE.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: by the contract, from `os::map`, and unused.
        unsafe { super::super::os::unmap(block) };
    }

    pub(super) fn live() -> usize {
        // Relaxed: as in `alloc`.
        LIVE.load(Ordering::Relaxed)
    }
}

/// The pool's pages now, process-wide: `(blocks, spare)`, the blocks mapped (`os`) and not
/// given back (in a heap, abandoned to their last cells, or spare), and how many of them are
/// spare. Exact once no thread is allocating or freeing cells.
#[cfg(not(loom))]
pub(super) fn counts() -> (usize, usize) {
    (blocks::live(), spare::count())
}

/// Gives the spare pages back (`pool::trim`).
#[cfg(not(loom))]
pub(super) fn drain_spares() {
    spare::drain();
}

/// Under loom, every page's memory is kept until the model's next execution starts: a page
/// released twice is then reported by its `released` flag rather than corrupting the
/// allocator, and the pages of threads that never gave up their heap (`exit_pool`) are
/// freed too. Loom's own leak check never sees `std::alloc`; `live_pages` counts instead.
#[cfg(loom)]
pub(crate) mod loom_quarantine {
    use std::cell::RefCell;
    use std::ptr::NonNull;

    std::thread_local! {
        static KEPT: RefCell<Vec<NonNull<u8>>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn keep(page: NonNull<u8>) {
        KEPT.with(|k| k.borrow_mut().push(page));
    }

    /// Gives the kept pages back to the allocator (no execution can reach them any more).
    pub(crate) fn empty() {
        for page in KEPT.with(|k| std::mem::take(&mut *k.borrow_mut())) {
            // SAFETY: each page came from `os::map`, and belongs to an execution that has
            // ended.
            unsafe { super::super::os::unmap(page) };
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{PAGE_BYTES, blocks};

    #[test]
    fn a_block_is_a_whole_aligned_page_of_its_own() {
        // Mapped one after another, as a burst maps them: whichever address the kernel
        // gives, the block is aligned, and every byte of it is ours.
        let blocks: Vec<_> = (0..8).map(|_| blocks::alloc().expect("memory for a page")).collect();
        for (i, block) in blocks.iter().enumerate() {
            assert_eq!(block.as_ptr().addr() % PAGE_BYTES, 0, "aligned to its size");
            // SAFETY: the block is ours, `PAGE_BYTES` long.
            unsafe {
                block.as_ptr().write(i as u8);
                block.as_ptr().add(PAGE_BYTES - 1).write(i as u8);
            }
        }
        for (i, block) in blocks.iter().enumerate() {
            // SAFETY: as above; no other block overlaps it, so the bytes are still ours.
            unsafe {
                assert_eq!(block.as_ptr().read(), i as u8);
                assert_eq!(block.as_ptr().add(PAGE_BYTES - 1).read(), i as u8);
            }
        }
        for block in blocks {
            // SAFETY: from `blocks::alloc`, unused from here.
            unsafe { blocks::dealloc(block) };
        }
    }
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page").field("owner", &self.owner).field("class", &self.class).finish_non_exhaustive()
    }
}
