//! A thread's heap: its pages, one list per size class, and the page each class allocates
//! from now. Only its thread touches it (a thread-local); other threads reach its pages only
//! through `Page::free_remote`.
//!
//! Allocation takes from the current page's local list, then its never-used slots; that is
//! the whole inline path. When the page has neither, the heap refills out of line: it takes
//! what other threads freed into the current page and, if that leaves an eighth of it free,
//! keeps it; else it looks for another page with an eighth free, or makes one. Either way
//! it sweeps the class: every other page's foreign frees are collected and each page found
//! empty is released. A refill leaves an eighth of a page free, so one comes at most every
//! `slots / 8` allocations of the class, and a sweep costs one look per page.
//!
//! What a heap keeps, beyond its live cells: the current page of each class it used, and
//! empty pages not yet swept. A page emptied by frees on the owner thread goes at once; one
//! emptied by frees elsewhere goes at the class's next refill, or at the latest after
//! [`SWEEP_EVERY`] frees on the owner thread (a thread whose cells all come back to it never
//! refills, so its frees count down to a sweep of every class). A thread that stops arming
//! and freeing keeps every page it held, however many of their cells other threads free,
//! until its next refill of a class, its next sweep, or its exit (then every page goes, each
//! when its last cell is freed): `pool/mod.rs`, "What a quiet thread keeps".

use super::page::Page;
use super::{CLASSES, slot_bytes};
use crate::sync::plain::{AtomicU64, Ordering};
use std::cell::{Cell, RefCell};
use std::ptr::NonNull;

/// Heap ids: a page records its owner's, and a free compares it with its own thread's. Ids
/// are never reused, so a page whose owner has exited never looks like a new thread's. A
/// plain atomic: it only hands out distinct numbers (`sync::plain`).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Frees on the owner thread between two sweeps of every class (`Heap::free`): so a heap
/// whose current pages never run dry, because its cells all come back to it, still gives
/// back the pages that other threads emptied. One sweep looks once at each page.
pub(super) const SWEEP_EVERY: u32 = 4096;

/// One thread's heap.
pub(super) struct Heap {
    /// 0 until the heap makes its first page.
    id: Cell<u64>,
    /// Frees on this thread left before the next sweep of every class.
    frees_to_sweep: Cell<u32>,
    classes: RefCell<[Class; CLASSES]>,
}

/// One size class's pages.
struct Class {
    /// Every page of the class the heap owns; each knows its index here.
    pages: Vec<NonNull<Page>>,
    /// The page allocations come from.
    current: Option<NonNull<Page>>,
}

impl Heap {
    pub(super) const fn new() -> Heap {
        Heap {
            id: Cell::new(0),
            frees_to_sweep: Cell::new(SWEEP_EVERY),
            classes: RefCell::new([const { Class { pages: Vec::new(), current: None } }; CLASSES]),
        }
    }

    /// Whether `page` belongs to this heap.
    pub(super) fn owns(&self, page: &Page) -> bool {
        page.owner() == self.id.get()
    }

    /// A slot of `class`; `None` if the allocator has no memory for a new page. Inline: see
    /// `pool::alloc` (the page's own `take` stays a call); the rest is `refill`'s.
    #[inline]
    pub(super) fn alloc(&self, class: usize) -> Option<NonNull<u8>> {
        let mut classes = self.classes.borrow_mut();
        let c = &mut classes[class];
        if let Some(page) = c.current {
            // SAFETY: the heap's pages live until it releases or abandons them, and are its
            // own.
            if let Some(slot) = unsafe { Page::take(page) } {
                return Some(slot);
            }
        }
        self.refill(c, class)
    }

    /// The current page has no slot at hand: takes what other threads freed into it and
    /// keeps it if that leaves an eighth of it free, else switches to another page with an
    /// eighth free or a new one; sweeps the class's other pages either way. Out of line:
    /// at most once every `slots / 8` allocations of the class (and on its first).
    #[cold]
    #[inline(never)]
    fn refill(&self, c: &mut Class, class: usize) -> Option<NonNull<u8>> {
        if let Some(page) = c.current {
            // SAFETY: as in `alloc`.
            let p = unsafe { page.as_ref() };
            p.collect();
            if p.roomy() {
                c.sweep(Some(page));
                // SAFETY: as in `alloc`.
                return unsafe { Page::take(page) };
            }
        }
        let page = match c.sweep(None) {
            Some(page) => page,
            None => {
                if self.id.get() == 0 {
                    // Relaxed: only distinct values are needed.
                    self.id.set(NEXT_ID.fetch_add(1, Ordering::Relaxed));
                }
                let page = Page::new(self.id.get(), class, slot_bytes(class))?;
                // SAFETY: just made, ours.
                unsafe { page.as_ref() }.set_index(c.pages.len());
                c.pages.push(page);
                page
            }
        };
        c.current = Some(page);
        // SAFETY: as in `alloc`.
        unsafe { Page::take(page) }
    }

    /// Releases every empty page, the current ones too, and the room the page lists keep:
    /// what the thread holds for its next allocations, given back (`pool::trim`).
    #[cfg(not(loom))]
    pub(super) fn trim(&self) {
        let mut classes = self.classes.borrow_mut();
        for c in classes.iter_mut() {
            let mut i = 0;
            while i < c.pages.len() {
                // SAFETY: as in `alloc`.
                let page = unsafe { c.pages[i].as_ref() };
                page.collect();
                if page.used() == 0 {
                    if c.current == Some(c.pages[i]) {
                        c.current = None;
                    }
                    // Empty, not current any more: released (and `i` now holds the last).
                    c.remove(i);
                    continue;
                }
                i += 1;
            }
            if c.pages.is_empty() {
                c.pages = Vec::new();
            }
        }
    }

    /// Takes back a slot of one of this heap's pages, freed on its thread.
    ///
    /// # Safety
    /// `page` is this heap's and the page of `slot`, which was handed out and is not used
    /// any more.
    pub(super) unsafe fn free(&self, page: NonNull<Page>, slot: NonNull<u8>) {
        // SAFETY: the heap's pages live until it releases or abandons them.
        let p = unsafe { page.as_ref() };
        // SAFETY: passed on from the caller.
        unsafe { p.free_local(slot) };
        if p.used() == 0 {
            self.release_if_spare(page);
        }
        // After the page's own check: a sweep may release it.
        let left = self.frees_to_sweep.get().wrapping_sub(1);
        self.frees_to_sweep.set(left);
        if left == 0 {
            self.sweep_all();
        }
    }

    /// An empty page that is not its class's current one is given back now rather than
    /// kept. Out of line: the free's inline path stays short.
    #[inline(never)]
    fn release_if_spare(&self, page: NonNull<Page>) {
        // SAFETY: the heap's pages live until it releases or abandons them.
        let p = unsafe { page.as_ref() };
        let mut classes = self.classes.borrow_mut();
        let c = &mut classes[p.class()];
        if c.current != Some(page) {
            c.remove(p.index());
        }
    }
}

impl Heap {
    /// Sweeps every class, keeping each current page (see [`SWEEP_EVERY`]); restarts the
    /// count. Out of line: once every `SWEEP_EVERY` frees on the owner thread.
    #[cold]
    #[inline(never)]
    fn sweep_all(&self) {
        self.frees_to_sweep.set(SWEEP_EVERY);
        for c in self.classes.borrow_mut().iter_mut() {
            let current = c.current;
            c.sweep(current);
        }
    }
}

#[cfg(all(test, not(loom)))]
impl Heap {
    /// The pages of `class` this heap holds.
    pub(super) fn pages(&self, class: usize) -> usize {
        self.classes.borrow()[class].pages.len()
    }

    /// The pages of `class` this heap lists, in order; each must know its place in the list
    /// (`Page::index`), which the release of an empty page relies on.
    pub(super) fn listed(&self, class: usize) -> Vec<NonNull<Page>> {
        let pages = self.classes.borrow()[class].pages.clone();
        for (i, page) in pages.iter().enumerate() {
            // SAFETY: the heap's pages live until it releases or abandons them.
            assert_eq!(unsafe { page.as_ref() }.index(), i, "a page that does not know its place in the list");
        }
        pages
    }
}

impl Class {
    /// Collects every page's foreign frees and releases each page found empty, except
    /// `keep`. Without a page to keep, returns the first page with an eighth of its slots
    /// free, which it keeps (the caller's next current page), or `None`.
    fn sweep(&mut self, keep: Option<NonNull<Page>>) -> Option<NonNull<Page>> {
        let mut chosen = keep;
        let mut i = 0;
        while i < self.pages.len() {
            // SAFETY: the heap's pages live until it releases or abandons them.
            let page = unsafe { self.pages[i].as_ref() };
            if Some(self.pages[i]) != keep {
                page.collect();
                if chosen.is_none() && page.roomy() {
                    chosen = Some(self.pages[i]);
                } else if page.used() == 0 {
                    // Empty, and not the one kept: released (and `i` now holds the last page).
                    self.remove(i);
                    continue;
                }
            }
            i += 1;
        }
        if keep.is_some() { None } else { chosen }
    }

    /// Releases the empty page at `i`; the last page takes its place.
    fn remove(&mut self, i: usize) {
        let page = self.pages.swap_remove(i);
        if let Some(moved) = self.pages.get(i) {
            // SAFETY: the heap's pages live until it releases or abandons them.
            unsafe { moved.as_ref() }.set_index(i);
        }
        // SAFETY: the page is empty (the caller checked `used() == 0` after collecting),
        // not the current page, and no longer listed: nothing will touch it again.
        unsafe { Page::release(page) };
    }
}

impl Heap {
    /// The thread exits: each page is released if empty, or abandoned to its cells' last
    /// free (`Page::abandon`). The heap forgets its id, so that a later free on this thread
    /// of a cell of those pages goes the foreign way.
    pub(super) fn abandon_all(&self) {
        self.id.set(0);
        for c in self.classes.borrow_mut().iter_mut() {
            c.current = None;
            for page in c.pages.drain(..) {
                // SAFETY: ours, and neither we nor anyone touches it after unless told to
                // release it.
                if unsafe { Page::abandon(page) } {
                    // SAFETY: `abandon` says no cell of it is live, to us alone.
                    unsafe { Page::release(page) };
                }
            }
        }
    }
}

impl Drop for Heap {
    /// The thread exits. Under loom the models call [`Heap::abandon_all`] themselves
    /// (`loom_support::exit_pool`): loom runs a thread's thread-local destructors in an order
    /// that changes from one execution to the next (a `HashMap`'s), which it cannot replay
    /// when two of them (this one and the stages') touch atomics.
    fn drop(&mut self) {
        #[cfg(not(loom))]
        self.abandon_all();
    }
}

impl std::fmt::Debug for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pages = self.classes.try_borrow().map(|c| c.iter().map(|c| c.pages.len()).sum::<usize>()).ok();
        f.debug_struct("Heap").field("id", &self.id.get()).field("pages", &pages).finish()
    }
}
