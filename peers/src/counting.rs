//! A counting global allocator for the memory benchmarks: bytes requested and not yet freed,
//! and allocations made. A benchmark binary installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: shardwheel_peers::counting::Counting = shardwheel_peers::counting::Counting;
//! ```
//!
//! and reads [`live`] and [`allocations`] before and after the work it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// Forwards every call to [`System`], counting as it goes.
#[derive(Debug)]
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

/// Bytes requested and not yet freed, by requested size. SeqCst: a benchmark reads it around
/// its work and wants every allocation before the read counted.
pub fn live() -> isize {
    LIVE.load(Ordering::SeqCst)
}

/// Allocations (and reallocations) made so far.
pub fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::SeqCst)
}

// SAFETY: every call is forwarded unchanged to `System`; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: counts, ordered with nothing; `live()` reads them with SeqCst.
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // Relaxed: as in `alloc`.
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Relaxed: as in `alloc`.
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc` is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Relaxed: as in `alloc`.
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
