//! Which shard a call goes to.
//!
//! - On a shard thread of the same service: that shard, straight into its wheel.
//! - Any other thread: its home shard, fixed for the thread's life, so the timeouts of one
//!   event loop stay together. Homes are handed out round-robin as threads first schedule.

use crate::sync::Ordering;
use crate::sync::plain::AtomicUsize;
use crate::sync::{const_thread_local, thread_local};
use std::cell::Cell;

/// The next thread's sequence number. Relaxed: it only has to hand out distinct numbers.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's sequence number, assigned when it first schedules.
    static THREAD_SEQ: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

const_thread_local! {
    /// `(service id, shard index)` if this thread is a shard driver.
    static DRIVING: Cell<Option<(u64, usize)>> = Cell::new(None);
}

/// This thread's home shard among `shards`.
///
/// Every thread-local here is read with `try_with`: a user's thread-local destructor may
/// schedule after these are gone, and `with` would panic there (which aborts the process).
/// A thread being torn down goes to shard 0.
pub(crate) fn home_shard(shards: usize) -> usize {
    THREAD_SEQ.try_with(|seq| seq % shards).unwrap_or(0)
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
