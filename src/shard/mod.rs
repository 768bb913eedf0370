//! A shard's shared half: what any thread may touch (mailbox, counters, pending count).
//! The wheel and everything else single-threaded live in `driver.rs`, on the shard's thread.
//!
//! Ground rules:
//! - `pending` counts the shard's pending timeouts. It rises when a schedule reserves a place
//!   (before the timeout is visible to anyone) and falls at the winning terminal CAS, on
//!   whichever thread won it, so it is exact whenever no call is in flight. With a
//!   `max_pending_per_shard` limit the reservation is a CAS loop that never overshoots, so
//!   the limit is exact too.
//! - Everything else shared is in the mailbox (`mailbox.rs`) or the counters (`stats.rs`).
//!   The stages other threads arm through (`stage.rs`) are theirs; the shard learns of them
//!   through the mailbox (`stages.rs`).

pub(crate) mod driver;
mod stages;

use crate::clock::Clock;
use crate::entry::Returned;
use crate::mailbox::Mailbox;
use crate::stats::Counters;
use crate::sync::{AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) service: u64,
    pub(crate) clock: Clock,
    pub(crate) mailbox: Mailbox,
    pub(crate) counters: Counters,
    /// Cells this shard let go of last, for the threads that schedule here to free.
    pub(crate) returned: Returned,
    /// `usize::MAX` when unbounded.
    max_pending: usize,
    pending: CachePadded<AtomicUsize>,
}

impl Shard {
    pub(crate) fn new(index: usize, service: u64, clock: Clock, max_pending: Option<usize>) -> Shard {
        Shard {
            index,
            service,
            clock,
            mailbox: Mailbox::new(),
            counters: Counters::default(),
            returned: Returned::new(),
            max_pending: max_pending.unwrap_or(usize::MAX),
            pending: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Reserves a place for one more pending timeout; `false` if the shard is full.
    pub(crate) fn try_reserve(&self) -> bool {
        // Relaxed throughout: `pending` is a count that publishes no data (see the counters
        // in `stats.rs`); the CAS loop alone makes the limit exact.
        if self.max_pending == usize::MAX {
            self.pending.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let mut cur = self.pending.load(Ordering::Relaxed);
        loop {
            if cur >= self.max_pending {
                return false;
            }
            match self.pending.compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Gives a place back: a timeout left PENDING (or a reservation was not used).
    pub(crate) fn release(&self) {
        // Relaxed: see `try_reserve`.
        self.pending.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn pending(&self) -> usize {
        // Relaxed: see `try_reserve`.
        self.pending.load(Ordering::Relaxed)
    }
}
