//! Under loom, the mailbox's queue: a loom-visible stand-in for `crossbeam_queue::SegQueue`,
//! whose atomics loom cannot see.
//!
//! Like `SegQueue` it is lock-free for producers: a push is a CAS loop on the head of a
//! stack of nodes (Treiber), which fails only when another push succeeded. The one consumer
//! (the shard's driver, or a `LocalWheel`'s owner) pops as `SegQueue::pop` does: a `SeqCst`
//! fence and a plain (`Relaxed`) load decide whether the queue is empty, and only then does
//! it take what was pushed (here the whole stack, with one `Acquire` swap, kept reversed into
//! arrival order in a buffer of its own). The load is what matters: like `SegQueue`'s read of
//! its tail index, it can miss a push that nothing has ordered before it, so a model sees
//! whether the orderings whose job is to make a push visible to the consumer (the
//! `LocalWheel` mail flag's release/acquire pair, the mailboxes' fences) do it. (An earlier
//! stand-in took the stack with the swap alone: a read-modify-write always reads the latest
//! push, so no model could fail for want of those orderings.) Like `SegQueue`'s `len`/`is_empty`, which read its indices without
//! touching the items, its length is a separate atomic that a push raises after linking its
//! node: so a producer's push and the driver's emptiness check are ordered only by what the
//! mailbox's handshakes put around them, and loom can show a missing fence. (An earlier
//! stand-in guarded the items with a spin lock; with two other threads spinning on yields,
//! loom's scheduler could livelock on it, a failure of the model, not of the code.)

use loom::sync::atomic::{AtomicIsize, AtomicPtr, Ordering, fence};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ptr;

struct Node<T> {
    value: T,
    next: *mut Node<T>,
}

pub(crate) struct Queue<T> {
    head: AtomicPtr<Node<T>>,
    /// Items pushed and not yet popped; may dip below zero while a push is between linking
    /// its node and counting it, and so, unlike `SegQueue`'s (which over-reports), may
    /// under-report for a moment: that can only make a model fail spuriously, never hide
    /// a lost wake-up.
    len: AtomicIsize,
    /// The consumer's own: nodes taken off the stack, oldest first.
    taken: RefCell<VecDeque<T>>,
}

// SAFETY: the nodes hold `T`s moved in by producers and out by the one consumer; `taken` is
// touched by the consumer alone (the mailbox's ground rules: only the driver pops).
unsafe impl<T: Send> Sync for Queue<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Queue<T> {}

impl<T> Queue<T> {
    pub(crate) fn new() -> Self {
        Queue { head: AtomicPtr::new(ptr::null_mut()), len: AtomicIsize::new(0), taken: RefCell::new(VecDeque::new()) }
    }

    pub(crate) fn push(&self, value: T) {
        let node = Box::into_raw(Box::new(Node { value, next: ptr::null_mut() }));
        // Relaxed: the CAS below decides.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is ours until the CAS publishes it.
            unsafe { (*node).next = head };
            // Release: the node's contents before it is reachable; pairs with the consumer's
            // Acquire swap.
            match self.head.compare_exchange(head, node, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => head = actual,
            }
        }
        // SeqCst, as `SegQueue`'s index updates.
        self.len.fetch_add(1, Ordering::SeqCst);
    }

    /// Consumer only.
    pub(crate) fn pop(&self) -> Option<T> {
        let mut taken = self.taken.borrow_mut();
        if taken.is_empty() {
            // As `SegQueue::pop`: a SeqCst fence, then a Relaxed load decides "empty" (its
            // `tail.index` load). Relaxed: it may miss a push that nothing ordered before
            // this pop, as the real one may; the swap below then reads from the push it saw
            // or a later one.
            fence(Ordering::SeqCst);
            if self.head.load(Ordering::Relaxed).is_null() {
                return None;
            }
            // Acquire: pairs with the pushes' Release CAS, for the nodes' contents.
            let mut node = self.head.swap(ptr::null_mut(), Ordering::Acquire);
            let mut batch = Vec::new();
            while !node.is_null() {
                // SAFETY: the swap made the stack ours; each node came from `Box::into_raw`.
                let boxed = unsafe { Box::from_raw(node) };
                node = boxed.next;
                batch.push(boxed.value);
            }
            taken.extend(batch.into_iter().rev());
        }
        let value = taken.pop_front();
        if value.is_some() {
            // SeqCst, as `SegQueue`'s index updates.
            self.len.fetch_sub(1, Ordering::SeqCst);
        }
        value
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn len(&self) -> usize {
        // SeqCst, as `SegQueue`'s index loads.
        self.len.load(Ordering::SeqCst).max(0) as usize
    }
}

impl<T> Drop for Queue<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

impl<T> std::fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("len", &self.len()).finish()
    }
}
