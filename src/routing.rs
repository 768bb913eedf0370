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
            let n = next_number(&NEXT_THREAD);
            t.set(n);
            n
        })
        .unwrap_or(NO_THREAD)
}

/// Whether the calling thread is the one numbered `n`: a read of its number, without giving
/// it one (a thread that has none yet is no thread's `n`; `n` is never [`NO_THREAD`]).
#[inline]
pub(crate) fn is_this_thread(n: usize) -> bool {
    debug_assert_ne!(n, NO_THREAD);
    THREAD.try_with(|t| t.get() == n).unwrap_or(false)
}

/// The next number from `counter`, never one handed out before: a thread's number is its
/// identity for `shard/handle.rs` (a thread that got another's would take that thread's
/// plain, unsynchronized count). Where `usize` is 32 bits a process that starts 2³² threads
/// would wrap a plain `fetch_add` back to [`NO_THREAD`] and then to numbers of threads still
/// running; instead, once the numbers run out, every later thread gets [`NO_THREAD`] (it
/// owns nothing: its counts are all atomic).
fn next_number(counter: &AtomicUsize) -> usize {
    // Relaxed: it only has to hand out distinct numbers.
    counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1)).unwrap_or(NO_THREAD)
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

/// The shard of service `service` this thread drives, if any. Inline: every arm's routing
/// (see `TimerService::schedule_routed`).
#[inline]
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Numbers never come round again: past the last one, a thread gets `NO_THREAD` (owns
    /// nothing), never a number another thread may still hold.
    #[test]
    fn thread_numbers_are_never_handed_out_twice() {
        let counter = AtomicUsize::new(usize::MAX - 1);
        assert_eq!(next_number(&counter), usize::MAX - 1);
        assert_eq!(next_number(&counter), NO_THREAD, "the numbers ran out");
        assert_eq!(next_number(&counter), NO_THREAD, "and stay out (not 0, 1, 2 again)");
        assert_eq!(next_number(&counter), NO_THREAD);
    }

    /// `is_this_thread`: true on the thread with that number alone, and false on a thread
    /// that has none yet (which it does not give one).
    #[test]
    fn a_thread_is_only_itself() {
        let here = this_thread();
        assert!(is_this_thread(here));
        let (there, asked_first) =
            std::thread::spawn(move || (is_this_thread(here), is_this_thread(here + 1))).join().unwrap();
        assert!(!there, "another thread is not this one");
        assert!(!asked_first, "a thread with no number yet is no thread's");
        let other = std::thread::spawn(this_thread).join().unwrap();
        assert!(other != here && !is_this_thread(other));
    }

    /// A thread drives a shard for its guard's lifetime and no longer, and only that
    /// service's shard (`shard::driver::tests` checks the same on a driver thread's exit).
    #[test]
    fn a_driver_guard_marks_its_thread_for_its_lifetime_only() {
        assert_eq!(driving(7), None, "a thread drives nothing at first");
        let guard = enter_driver(7, 3);
        assert_eq!(driving(7), Some(3));
        assert_eq!(driving(8), None, "another service's shards are not this thread's");
        drop(guard);
        assert_eq!(driving(7), None, "the guard gone, the thread drives nothing");
    }
}
