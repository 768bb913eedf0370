//! What a run costs the process: CPU time (`getrusage`), live heap bytes (a counting global
//! allocator), resident memory (the peers' reading of `/proc/self/statm`, as the benches').

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

pub use shardwheel_peers::report::resident_bytes as rss_bytes;

/// CPU time: user, system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
}

impl Usage {
    pub fn total(&self) -> Duration {
        self.user + self.system
    }
}

/// CPU time the whole process has used so far (every thread, live or joined); `None` off Unix.
pub fn cpu_time() -> Option<Usage> {
    #[cfg(unix)]
    {
        // SAFETY: `rusage` is plain old data (integers and `timeval`s), for which all-zero
        // bytes are a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a valid, writable `rusage`; `getrusage` only writes into it.
        let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0;
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
        ok.then(|| Usage { user: tv(usage.ru_utime), system: tv(usage.ru_stime) })
    }
    #[cfg(not(unix))]
    None
}

/// CPU time used since `before` (a [`cpu_time`] reading), if both readings exist.
pub fn cpu_since(before: Option<Usage>) -> Option<Usage> {
    let (before, now) = (before?, cpu_time()?);
    Some(Usage { user: now.user.saturating_sub(before.user), system: now.system.saturating_sub(before.system) })
}

/// Counter stripes: a thread adds to its own, so threads allocating at once do not fight over
/// one cache line (the peers' single counter would tax the timers that allocate most). Only
/// the sum means anything: a block may be freed on another thread.
const STRIPES: usize = 64;

#[repr(align(128))]
struct Stripe(AtomicI64);

static LIVE: [Stripe; STRIPES] = [const { Stripe(AtomicI64::new(0)) }; STRIPES];
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe; `usize::MAX` until first used. `const`-initialized and without
    /// a destructor, so using it never allocates and works during thread teardown.
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Adds `bytes` to this thread's stripe, if the block `p` was allocated.
fn count(p: *mut u8, bytes: i64) -> *mut u8 {
    if !p.is_null() {
        let stripe = STRIPE.try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_STRIPE.fetch_add(1, Relaxed) % STRIPES);
            }
            s.get()
        });
        LIVE[stripe.unwrap_or(0)].0.fetch_add(bytes, Relaxed);
    }
    p
}

/// The system allocator, counting live bytes.
#[derive(Debug)]
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the same arguments, so the `GlobalAlloc`
// contract holds as it does for `System`; the counting touches only atomics and a
// const-initialized thread-local, and never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which we pass on unchanged.
        count(unsafe { System.alloc(layout) }, layout.size() as i64)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        count(unsafe { System.alloc_zeroed(layout) }, layout.size() as i64)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `dealloc`'s contract (`ptr` came from this allocator,
        // that is from `System`, with `layout`).
        unsafe { System.dealloc(ptr, layout) };
        count(ptr, -(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract, passed on unchanged.
        count(unsafe { System.realloc(ptr, layout, new_size) }, new_size as i64 - layout.size() as i64)
    }
}

/// Bytes allocated and not yet freed, over the whole process (0 unless [`CountingAlloc`] is
/// the global allocator).
pub fn heap_live() -> u64 {
    LIVE.iter().map(|s| s.0.load(Relaxed)).sum::<i64>().max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_rss_and_the_counting_allocator_measure() {
        let (before, start) = (cpu_time(), std::time::Instant::now());
        while start.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(start.elapsed());
        }
        assert!(cpu_since(before).is_some_and(|used| used.total() >= Duration::from_millis(10)) || !cfg!(unix));
        assert!(!cfg!(target_os = "linux") || rss_bytes().unwrap() > 0);
        // The test binary has the system allocator: call the counting one directly, with a
        // block large enough (and never touched, so cheap) that other tests cannot hide it.
        let (layout, before) = (Layout::from_size_align(256 << 20, 8).unwrap(), heap_live());
        // SAFETY: a non-zero-sized layout; the block is freed below with the same layout.
        let p = unsafe { CountingAlloc.alloc(layout) };
        assert!(!p.is_null() && heap_live() >= before + (128 << 20));
        // SAFETY: `p` came from `CountingAlloc.alloc(layout)`.
        unsafe { CountingAlloc.dealloc(p, layout) };
    }
}
