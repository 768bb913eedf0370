//! Which shard a call goes to.
//!
//! - On a shard thread of the same service: that shard, straight into its wheel.
//! - Any other thread: its home shard, fixed for the thread's life, so the timeouts of one
//!   event loop stay together. Homes are handed out round-robin as threads first schedule.

use crate::sync::Ordering;
use crate::sync::const_thread_local;
use crate::sync::plain::AtomicUsize;
use std::cell::Cell;

/// The next thread's number (from 1). Relaxed: it only has to hand out distinct numbers.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(1);

/// A thread being torn down, whose number is gone (it goes to shard 0 and owns nothing).
pub(crate) const NO_THREAD: usize = 0;

const_thread_local! {
    /// This thread's number, given when it first asks; [`NO_THREAD`] until then.
    static THREAD: Cell<usize> = Cell::new(NO_THREAD);
}

const_thread_local! {
    /// `(shards, home)`: this thread's home among `shards` shards, as last worked out
    /// (`shards` 0: never), so that an arm pays no division.
    static HOME: Cell<(usize, usize)> = Cell::new((0, 0));
}

const_thread_local! {
    /// `(service id, shard index)` if this thread is a shard driver.
    static DRIVING: Cell<Option<(u64, usize)>> = Cell::new(None);
}

/// This thread's number: never another thread's, never [`NO_THREAD`], given in the order
/// threads first ask. A thread being torn down after its number is gone gets [`NO_THREAD`].
/// (The cells are `const` and need no drop, so std never tears them down: only loom does.)
#[inline]
pub(crate) fn this_thread() -> usize {
    THREAD
        .try_with(|t| {
            let n = t.get();
            if n != NO_THREAD {
                return n;
            }
            let n = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            t.set(n);
            n
        })
        .unwrap_or(NO_THREAD)
}

/// This thread's home shard among `shards`: threads are spread round-robin, in the order
/// they first ask.
///
/// Every thread-local here is read with `try_with`: a user's thread-local destructor may
/// schedule after these are gone, and `with` would panic there (which aborts the process).
/// A thread being torn down goes to shard 0.
#[inline]
pub(crate) fn home_shard(shards: usize) -> usize {
    HOME.try_with(|home| {
        let (n, shard) = home.get();
        if n == shards {
            return shard;
        }
        let shard = this_thread().wrapping_sub(1) % shards;
        home.set((shards, shard));
        shard
    })
    .unwrap_or(0)
}

/// The shard of service `service` this thread drives, if any.
pub(crate) fn driving(service: u64) -> Option<usize> {
    DRIVING.try_with(|d| d.get().filter(|&(s, _)| s == service).map(|(_, shard)| shard)).ok().flatten()
}

/// Marks this thread as the driver of one shard, for the guard's lifetime.
pub(crate) fn enter_driver(service: u64, shard: usize) -> DriverGuard {
    DRIVING.with(|d| d.set(Some((service, shard))));
    DriverGuard(())
}

#[derive(Debug)]
pub(crate) struct DriverGuard(());

impl Drop for DriverGuard {
    fn drop(&mut self) {
        DRIVING.with(|d| d.set(None));
    }
}
