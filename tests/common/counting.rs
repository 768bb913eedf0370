//! A counting global allocator: bytes allocated and not yet freed, process-wide (`live`), and
//! the calling thread's allocations less its frees (`thread_live`: what a thread keeps of
//! its own work, whatever other threads do meanwhile). A test file that uses it declares
//! `#[global_allocator] static ALLOCATOR: Counting = Counting;` and holds tests that may not
//! run in parallel with others (the process-wide count is the whole process's).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};

/// Bytes allocated and not yet freed, process-wide.
static LIVE: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// This thread's bytes allocated less those it freed. A `const` initializer: it
    /// allocates nothing, so the allocator may use it.
    static THREAD_LIVE: Cell<i64> = const { Cell::new(0) };
}

/// Adds `bytes` to the calling thread's count (skipped on a thread whose locals are being
/// torn down).
fn count_here(bytes: i64) {
    let _ = THREAD_LIVE.try_with(|live| live.set(live.get() + bytes));
}

/// Forwards to the system allocator, counting.
pub struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is a side
// effect that does not touch the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::SeqCst);
        count_here(layout.size() as i64);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::SeqCst);
        count_here(-(layout.size() as i64));
        // SAFETY: the caller's contract for `dealloc` is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::SeqCst);
        count_here(new_size as i64 - layout.size() as i64);
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Bytes allocated and not yet freed now.
pub fn live() -> i64 {
    LIVE.load(Ordering::SeqCst)
}

/// The calling thread's bytes allocated less those it freed, since it started.
pub fn thread_live() -> i64 {
    THREAD_LIVE.with(Cell::get)
}
