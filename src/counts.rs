//! Per-thread counts: how many timeouts each thread armed and cancelled on one shard, each in
//! a slot of the shard's that only that thread writes, and that `stats()` sums.
//!
//! Why: a shared counter bumped on every arm and every cancel is a read-modify-write on a
//! cache line that every producer of the shard writes. A slot of one's own costs a plain load
//! and store on a line nobody else writes, and the sum is exact whenever no call is in flight.
//!
//! Ground rules:
//! - Slots form a list that only grows (a Treiber stack: a new slot is pushed with one CAS of
//!   `head`), freed with the shard. A thread claims a free slot (`in_use` false → true, a CAS)
//!   on its first arm or cancel on the shard, writes it alone while it holds it, and gives it
//!   back when it lets go of its handle to the shard (`shard/handle.rs`: as it exits, or as
//!   it forgets the stage of a stopped shard); the next thread to claim it goes on adding to
//!   its counts. So the
//!   list is as long as the most threads that ever used the shard at once, however many come
//!   and go.
//! - A reader sums every slot, held or not, with plain loads: a count read while its writer is
//!   mid-call may be one behind, as "exact at rest" allows.

use crate::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::ptr;

/// One thread's counts.
#[derive(Debug)]
pub(crate) struct Slot {
    armed: AtomicU64,
    cancelled: AtomicU64,
    in_use: AtomicBool,
    /// The slot pushed before this one; written once, before the slot is published.
    next: *mut Slot,
}

/// Adds one to a count only its holder writes: a load and a store, no read-modify-write.
fn bump(count: &AtomicU64) {
    // Relaxed: the holder is the only writer (a slot changes hands through the Release
    // store in `give_back` and the Acquire CAS in `claim`); readers need no order with it.
    count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl Slot {
    /// Holder only.
    pub(crate) fn armed(&self) {
        bump(&self.armed);
    }

    /// Holder only.
    pub(crate) fn cancelled(&self) {
        bump(&self.cancelled);
    }

    /// Holder only, as it lets go of its handle to the shard (its thread exits, or the
    /// shard stopped): the slot is free for another thread.
    pub(crate) fn give_back(&self) {
        // Release: this thread's counts before the next holder's; pairs with the Acquire CAS
        // in `claim`.
        self.in_use.store(false, Ordering::Release);
    }
}

// SAFETY: a `Slot` is shared between its holder and the readers that sum it: its counts
// and flag are atomics, and `next` is written before the slot is published (by the Release
// CAS in `claim`) and never again, so shared references to it are sound on any thread.
unsafe impl Sync for Slot {}

/// A shard's slots. (`Send` and `Sync` through `AtomicPtr`; the slots behind it stay valid
/// until it is dropped, as the list only grows.)
#[derive(Debug)]
pub(crate) struct Slots {
    head: AtomicPtr<Slot>,
}

impl Slots {
    pub(crate) fn new() -> Slots {
        Slots { head: AtomicPtr::new(ptr::null_mut()) }
    }

    fn iter(&self) -> impl Iterator<Item = &Slot> {
        // Acquire: pairs with the Release CAS that published each slot.
        let mut p = self.head.load(Ordering::Acquire);
        std::iter::from_fn(move || {
            // SAFETY: every pointer on the list is a live slot until `self` is dropped, and
            // its `next` was written before it was published.
            let slot = unsafe { p.as_ref() }?;
            p = slot.next;
            Some(slot)
        })
    }

    /// A slot for the calling thread to hold: a free one, or a new one. The reference lives
    /// as long as `self`.
    pub(crate) fn claim(&self) -> &Slot {
        for slot in self.iter() {
            // Relaxed load: a hint; Acquire CAS: pairs with the previous holder's Release
            // store in `give_back`, so its counts are where this thread goes on from.
            if !slot.in_use.load(Ordering::Relaxed)
                && slot.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return slot;
            }
        }
        let slot = Box::into_raw(Box::new(Slot {
            armed: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            in_use: AtomicBool::new(true),
            next: ptr::null_mut(),
        }));
        // Relaxed: the CAS below decides.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `slot` is not published yet: this thread alone can reach it.
            unsafe { (*slot).next = head };
            // Release: the slot's fields before it is reachable; pairs with `iter`'s Acquire.
            match self.head.compare_exchange_weak(head, slot, Ordering::Release, Ordering::Relaxed) {
                // SAFETY: published, so it lives as long as `self`.
                Ok(_) => return unsafe { &*slot },
                Err(actual) => head = actual,
            }
        }
    }

    /// `(slots, held)`: how long the list is, and how many of its slots a thread holds now.
    /// For the tests and loom models of the hand-over.
    #[cfg(any(test, loom))]
    pub(crate) fn census(&self) -> (usize, usize) {
        // Relaxed: a count for a check, which must order nothing: a model that waits on it
        // must not gain from it the order that `give_back` and `claim` are meant to give.
        self.iter().fold((0, 0), |(n, held), slot| (n + 1, held + usize::from(slot.in_use.load(Ordering::Relaxed))))
    }

    /// Timeouts armed and cancelled, over every slot.
    pub(crate) fn sum(&self) -> (u64, u64) {
        // Relaxed: counts, read as "exact at rest" allows (module docs).
        self.iter().fold((0, 0), |(a, c), slot| {
            (a + slot.armed.load(Ordering::Relaxed), c + slot.cancelled.load(Ordering::Relaxed))
        })
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // Relaxed: `&mut self`, nobody else can reach the list.
        let mut p = self.head.load(Ordering::Relaxed);
        while !p.is_null() {
            // SAFETY: each slot came from `Box::into_raw` in `claim` and is freed once, here.
            let slot = unsafe { Box::from_raw(p) };
            p = slot.next;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_their_counts_kept() {
        let slots = Slots::new();
        let a = slots.claim();
        a.armed();
        a.armed();
        a.cancelled();
        let b = slots.claim();
        assert!(!ptr::eq(a, b), "a held slot is not handed out again");
        b.armed();
        assert_eq!(slots.sum(), (3, 1));
        a.give_back();
        let c = slots.claim();
        assert!(ptr::eq(a, c), "a given-back slot is reused");
        c.cancelled();
        assert_eq!(slots.sum(), (3, 2), "and its counts go on");
    }

    /// `census` counts every slot of the list and, of those, the held ones: none, one and
    /// two of each, a slot given back (listed, not held), reused, and all given back.
    #[test]
    fn census_counts_the_slots_and_the_held_ones() {
        let slots = Slots::new();
        assert_eq!(slots.census(), (0, 0));
        let a = slots.claim();
        assert_eq!(slots.census(), (1, 1));
        let b = slots.claim();
        assert_eq!(slots.census(), (2, 2));
        a.give_back();
        assert_eq!(slots.census(), (2, 1), "a given-back slot stays listed");
        let c = slots.claim();
        assert_eq!(slots.census(), (2, 2), "and is reused");
        let d = slots.claim();
        assert_eq!(slots.census(), (3, 3));
        for slot in [b, c, d] {
            slot.give_back();
        }
        assert_eq!(slots.census(), (3, 0));
    }
}
