//! A `Sleep` costs at most 72 bytes: its own size (24) plus its cell (the waker in a cell
//! of the thread's pool: a 24-byte header and the `Option<Waker>`, in a slot rounded up to
//! 16 bytes: 48), and its first poll calls the allocator not at all, measured by a global allocator
//! that records what this thread allocates during the first poll. One test in this file:
//! the allocator is the whole process's.

use shardwheel::{Sleep, TimerService};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

thread_local! {
    /// While set, this thread's allocations are recorded: (count, bytes).
    static RECORDING: Cell<Option<(usize, usize)>> = const { Cell::new(None) };
}

struct Recording;

// SAFETY: every call is forwarded unchanged to the system allocator; the record is a side
// effect in a const-initialized thread-local `Cell`, which itself never allocates.
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = RECORDING.try_with(|r| {
            if let Some((n, bytes)) = r.get() {
                r.set(Some((n + 1, bytes + layout.size())));
            }
        });
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Recording = Recording;

#[test]
fn a_sleep_and_its_pooled_cell_fit_in_72_bytes_with_no_allocation() {
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    // The thread's first schedule on the shard makes its stage and count slot: not the
    // sleep's cost. Warm up with one sleep.
    let mut warm = timers.sleep(Duration::from_secs(60));
    assert!(Pin::new(&mut warm).poll(&mut cx).is_pending());
    drop(warm);
    let mut sleep = timers.sleep(Duration::from_secs(60));
    RECORDING.with(|r| r.set(Some((0, 0))));
    let made = std::mem::size_of::<Sleep>();
    assert!(Pin::new(&mut sleep).poll(&mut cx).is_pending());
    let (count, bytes) = RECORDING.with(|r| r.replace(None)).unwrap();
    println!("Sleep: {made} B, first poll: {count} allocation(s), {bytes} B");
    assert_eq!((count, bytes), (0, 0), "a registered sleep's cell comes from the thread's pool");
    let slot = (24 + std::mem::size_of::<Option<Waker>>()).next_multiple_of(16);
    assert!(made + slot <= 72, "Sleep {made} B + its pool slot {slot} B > 72 B");
    drop(sleep);
    assert_eq!(timers.pending(), 0);
}
