//! The slot words of a [`LocalWheel`](super::LocalWheel), at addresses that never move.
//!
//! The wheel's nodes live in a `Vec` that moves when it grows, which only its owner touches.
//! A [`RemoteWheel`](super::RemoteWheel) must reach a timer's [`SlotWord`] from another
//! thread, so the words live apart, in fixed-size pages that are never moved or freed while
//! the wheel or a remote handle lives: the owner keeps the pages in a `Vec` of its own (two
//! dependent loads per look-up, no atomic), and publishes each in a two-level directory of
//! `OnceLock`s that remote threads read without a lock. Pages are allocated one at a time
//! as the slab grows, so the words cost 8 bytes per slot plus at most one partly used page
//! (32 KiB), not a doubling.
//!
//! Safe code throughout: `OnceLock` does the publishing (its `set` releases, its `get`
//! acquires), and only the owner ever sets.

use crate::state::SlotWord;
use crate::sync::Arc;
use std::sync::OnceLock;

/// Words per page, and pages per directory entry. Under loom, tiny: a model arms a handful
/// of timers, and each loom atomic is costly to create.
#[cfg(not(loom))]
const PAGE_BITS: u32 = 12;
#[cfg(not(loom))]
const MID_BITS: u32 = 8;
#[cfg(not(loom))]
const TOP: usize = 256;
#[cfg(loom)]
const PAGE_BITS: u32 = 2;
#[cfg(loom)]
const MID_BITS: u32 = 1;
#[cfg(loom)]
const TOP: usize = 4;

pub(crate) const PAGE: usize = 1 << PAGE_BITS;
const MID: usize = 1 << MID_BITS;
/// The most slots a wheel can have: 2²⁸ (eight gibibytes of `u64` timers), or 32 under
/// loom.
pub(crate) const MAX_SLOTS: usize = TOP * MID * PAGE;

/// Whether a wheel of `pages` pages of slots may make one more within [`MAX_SLOTS`].
const fn may_add_page(pages: usize) -> bool {
    (pages + 1) * PAGE <= MAX_SLOTS
}

/// `PAGE` words on the heap (built there: an inline array would be built on the stack, and
/// a 32 KiB frame costs a stack probe per page on every call that might build one).
/// A fixed-size array, so the word's index needs no bounds check.
#[derive(Debug)]
struct Page {
    words: Box<[SlotWord; PAGE]>,
}

impl Page {
    #[cold]
    #[inline(never)]
    fn new(seed: u32) -> Arc<Page> {
        let words: Box<[SlotWord]> = (0..PAGE).map(|_| SlotWord::vacant(seed)).collect();
        Arc::new(Page { words: words.try_into().expect("PAGE words") })
    }
}

/// One directory entry: `MID` pages, each published once.
type Mid = Box<[OnceLock<Arc<Page>>]>;

/// The remote threads' way to the pages.
#[derive(Debug)]
pub(crate) struct Directory {
    top: Box<[OnceLock<Mid>]>,
}

impl Directory {
    pub(crate) fn new() -> Directory {
        Directory { top: (0..TOP).map(|_| OnceLock::new()).collect() }
    }

    /// The word of slot `index`, if its page was published (else no key names it).
    #[inline]
    pub(crate) fn get(&self, index: u32) -> Option<&SlotWord> {
        let index = index as usize;
        let mid = self.top.get(index >> (PAGE_BITS + MID_BITS))?.get()?;
        let page = mid[(index >> PAGE_BITS) & (MID - 1)].get()?;
        Some(&page.words[index & (PAGE - 1)])
    }

    fn publish(&self, page_no: usize, page: Arc<Page>) {
        let mid = self.top[page_no >> MID_BITS].get_or_init(|| (0..MID).map(|_| OnceLock::new()).collect());
        let _ = mid[page_no & (MID - 1)].set(page);
    }
}

/// The owner's view of the pages.
#[derive(Debug)]
pub(crate) struct Slots {
    pages: Vec<Arc<Page>>,
    /// The generation a slot's first timer gets (see `LocalWheel`'s docs on keys).
    seed: u32,
}

impl Slots {
    pub(crate) fn new(seed: u32) -> Slots {
        Slots { pages: Vec::new(), seed }
    }

    #[inline]
    pub(crate) fn seed(&self) -> u32 {
        self.seed
    }

    /// The word of slot `index`, which the owner has made.
    #[inline]
    pub(crate) fn word(&self, index: u32) -> &SlotWord {
        &self.pages[(index >> PAGE_BITS) as usize].words[index as usize & (PAGE - 1)]
    }

    /// The word of slot `index`, if it was ever made.
    pub(crate) fn get(&self, index: u32) -> Option<&SlotWord> {
        self.pages.get((index >> PAGE_BITS) as usize).map(|p| &p.words[index as usize & (PAGE - 1)])
    }

    /// The word of slot `index`, made (with a new page published in `directory`) if it was
    /// not yet. `None` past [`MAX_SLOTS`].
    #[inline]
    pub(crate) fn ensure(&mut self, index: u32, directory: &Directory) -> Option<&SlotWord> {
        if ((index >> PAGE_BITS) as usize) >= self.pages.len() && !self.grow(index, directory) {
            return None;
        }
        self.get(index)
    }

    #[cold]
    fn grow(&mut self, index: u32, directory: &Directory) -> bool {
        let page_no = (index >> PAGE_BITS) as usize;
        while self.pages.len() <= page_no {
            if !may_add_page(self.pages.len()) {
                return false;
            }
            let page = Page::new(self.seed);
            directory.publish(self.pages.len(), page.clone());
            self.pages.push(page);
        }
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The last page is made, one more is not: a wheel of one page below the limit, of
    /// two, and at it (a wheel cannot be grown there in a test, 2 GiB of words).
    #[test]
    fn pages_are_made_up_to_max_slots_and_no_further() {
        let last = MAX_SLOTS / PAGE;
        assert_eq!(last * PAGE, MAX_SLOTS, "whole pages");
        assert!(may_add_page(0), "the first page");
        assert!(may_add_page(last - 2));
        assert!(may_add_page(last - 1), "the last page");
        assert!(!may_add_page(last), "past MAX_SLOTS");
    }

    /// A slot is made on the page its index names, made on demand whatever pages exist
    /// already: the next page, and pages past index 2²⁰ (where `index << PAGE_BITS`, the
    /// wrong shift, would wrap a `u32` to 0 and find the page "made"), after the first.
    #[test]
    #[cfg_attr(miri, ignore = "257 pages of words, slow under Miri; it checks page arithmetic")]
    fn a_slot_is_made_on_its_own_page_past_those_made() {
        let directory = Directory::new();
        let mut slots = Slots::new(0);
        assert!(slots.ensure(0, &directory).is_some());
        for index in [PAGE as u32, 1 << 20, (1 << 20) + 1] {
            assert!(slots.ensure(index, &directory).is_some(), "slot {index}");
            assert_eq!(slots.pages.len(), index as usize / PAGE + 1, "slot {index}");
        }
    }
}
