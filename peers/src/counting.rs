//! The workspace's one counting global allocator, for the memory benchmarks and the
//! simulator: bytes requested and not yet freed, and allocations made. A binary installs it
//! with
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: shardwheel_peers::counting::Counting = shardwheel_peers::counting::Counting;
//! ```
//!
//! and reads [`live`] and [`allocations`] before and after the work it measures.
//!
//! The counters are striped: each thread adds to a stripe of its own, so threads that
//! allocate at once (a simulator's producers, tokio's workers) do not fight over one cache
//! line, which would tax the timers that allocate most. Only the sums mean anything: a block
//! may be freed on another thread than the one that allocated it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

/// Forwards every call to [`System`], counting as it goes.
#[derive(Debug)]
pub struct Counting;

const STRIPES: usize = 64;

/// One thread's counters, on a line of its own.
#[repr(align(128))]
struct Stripe {
    live: AtomicI64,
    allocations: AtomicUsize,
}

static STRIPE_COUNTERS: [Stripe; STRIPES] =
    [const { Stripe { live: AtomicI64::new(0), allocations: AtomicUsize::new(0) } }; STRIPES];
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe; `usize::MAX` until first used. `const`-initialized and without
    /// a destructor, so using it never allocates and works during thread teardown.
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Bytes requested and not yet freed, by requested size, over the whole process (0 unless
/// [`Counting`] is the global allocator). Exact once the threads that allocated have been
/// joined (or otherwise synchronized with), as a benchmark's reading around its work is; the
/// SeqCst loads add no ordering the counts need.
pub fn live() -> isize {
    STRIPE_COUNTERS.iter().map(|s| s.live.load(Ordering::SeqCst)).sum::<i64>() as isize
}

/// Allocations (and reallocations) made so far.
pub fn allocations() -> usize {
    STRIPE_COUNTERS.iter().map(|s| s.allocations.load(Ordering::SeqCst)).sum()
}

/// Counts a call that returned `p`, if it succeeded: `bytes` more live, and one allocation
/// if `allocation`.
fn count(p: *mut u8, bytes: i64, allocation: bool) -> *mut u8 {
    if !p.is_null() {
        let stripe = STRIPE.try_with(|s| {
            if s.get() == usize::MAX {
                // Relaxed: an id, ordered with nothing.
                s.set(NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES);
            }
            s.get()
        });
        let stripe = &STRIPE_COUNTERS[stripe.unwrap_or(0)];
        // Relaxed: counts, ordered with nothing; `live()` and `allocations()` read them
        // with SeqCst.
        stripe.live.fetch_add(bytes, Ordering::Relaxed);
        if allocation {
            stripe.allocations.fetch_add(1, Ordering::Relaxed);
        }
    }
    p
}

// SAFETY: every method forwards to `System` with the same arguments, so the `GlobalAlloc`
// contract holds as it does for `System`; the counting touches only atomics and a
// const-initialized thread-local, and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        count(unsafe { System.alloc(layout) }, layout.size() as i64, true)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on as is.
        count(unsafe { System.alloc_zeroed(layout) }, layout.size() as i64, true)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on as is (`ptr` came from
        // this allocator, that is from `System`, with `layout`).
        unsafe { System.dealloc(ptr, layout) };
        count(ptr, -(layout.size() as i64), false);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        count(unsafe { System.realloc(ptr, layout, new_size) }, new_size as i64 - layout.size() as i64, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_live_bytes_and_allocations_across_threads() {
        // The test binary has the system allocator: call the counting one directly, with a
        // block large enough (and never touched, so cheap) that other tests cannot hide it.
        let layout = Layout::from_size_align(256 << 20, 8).unwrap();
        let (live_before, allocations_before) = (live(), allocations());
        // SAFETY: a non-zero-sized layout; the block is freed below with the same layout.
        let p = unsafe { Counting.alloc(layout) };
        assert!(!p.is_null());
        assert!(live() >= live_before + (128 << 20));
        assert!(allocations() > allocations_before);
        // Freed on another thread: another stripe, the same sum.
        let p = p as usize;
        // SAFETY: `p` came from `Counting.alloc(layout)` and is freed once.
        std::thread::spawn(move || unsafe { Counting.dealloc(p as *mut u8, layout) }).join().unwrap();
        assert!(live() < live_before + (128 << 20));
    }
}
