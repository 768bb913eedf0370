//! A burst's memory comes back without a thread exit (issue 25, item 2). A thread arms a
//! million timeouts and cancels them, then keeps at most 100 live for a second: its pool must
//! give back the burst's pages (`src/entry/pool/heap.rs`: a page emptied by frees elsewhere
//! goes at its class's next refill, or after `SWEEP_EVERY` frees on the thread), and the
//! process's RSS must come back to within 2 MiB of before the burst.
//!
//! A first burst on a thread that exits warms up what the process keeps whatever the pool
//! does (the shard's wheel grows to a million entries and keeps that room: one shard, so that
//! both bursts go to it; the vector of handles is made once and reused), so that the second
//! burst, on this thread, is measured alone.
//!
//! One test in this file on purpose: RSS and the pool's counts are the whole process's. Linux
//! with glibc only: RSS is read from `/proc`, and glibc's `malloc_trim` is called.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use common::{PATIENCE, wait_until};
use shardwheel::{__cell_pool_pages, Timeout, TimerService};
use std::collections::VecDeque;
use std::thread;
use std::time::{Duration, Instant};

const BURST: usize = 1_000_000;
const STEADY_LIVE: usize = 100;
const MIB: usize = 1024 * 1024;

// glibc's: hands the free memory at the top of its heaps back to the kernel.
unsafe extern "C" {
    fn malloc_trim(pad: usize) -> i32;
}

/// Resident bytes once glibc has given back what it holds free. Small blocks freed by the
/// burst's other allocations (the shard's mailbox segments, say) stay in glibc's heaps, by
/// luck of where they lie, and move the plain RSS by several MiB from run to run; the
/// pool's pages are mapped on their own and unmapped when freed (`page.rs`, `blocks`), so
/// this trim does not touch them, and the pool's own count is asserted beside it.
fn trimmed_rss() -> usize {
    // SAFETY: `malloc_trim` has no precondition (glibc, which is the test's libc on Linux).
    unsafe { malloc_trim(0) };
    rss()
}

/// Resident bytes of the process, from `/proc/self/statm`.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("statm's resident field");
    pages * 4096
}

/// Arms `BURST` timeouts far out, into `armed` (whose room is reused), and cancels them all.
fn burst(timers: &TimerService, armed: &mut Vec<Timeout>) {
    armed.extend((0..BURST).map(|_| timers.schedule(Duration::from_secs(3600), || {}).unwrap()));
    for timeout in armed.drain(..) {
        assert!(timeout.cancel());
    }
}

/// Waits until the shards have let go of every cancelled entry.
fn settle(timers: &TimerService) {
    assert!(wait_until(|| timers.stats().pending == 0, PATIENCE), "the shards let go of the burst");
    thread::sleep(Duration::from_millis(50));
}

#[test]
fn a_burst_s_memory_comes_back_while_its_thread_lives_on() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let mut armed = Vec::with_capacity(BURST);
    armed = {
        let timers = timers.clone();
        thread::spawn(move || {
            burst(&timers, &mut armed);
            armed
        })
        .join()
        .unwrap()
    };
    settle(&timers);
    assert!(
        wait_until(
            || {
                let (b, s) = __cell_pool_pages();
                b == s
            },
            PATIENCE
        ),
        "the warm-up thread's pages went back"
    );
    let (rss_before, pages_before) = (rss(), __cell_pool_pages());
    let trimmed_before = trimmed_rss();

    burst(&timers, &mut armed);
    let peak = (rss(), __cell_pool_pages());
    // A second of light load: at most `STEADY_LIVE` live, armed and cancelled in turn, ten
    // at a time every millisecond; on until the thread has armed two pages' worth (8,188
    // cells of 32 B fill a page: `heap.rs` gives back a page emptied elsewhere within one
    // page's worth of arms) and the shard has read most of the cancels.
    let mut live = VecDeque::with_capacity(STEADY_LIVE + 1);
    let start = Instant::now();
    let mut arms = 0;
    while start.elapsed() < Duration::from_secs(1) || arms < 2 * 8188 || timers.stats().queued > 1024 {
        for _ in 0..10 {
            live.push_back(timers.schedule(Duration::from_secs(3600), || {}).unwrap());
            if live.len() > STEADY_LIVE {
                assert!(live.pop_front().unwrap().cancel());
            }
        }
        arms += 10;
        thread::sleep(Duration::from_millis(1));
        assert!(start.elapsed() < PATIENCE, "the light load ends");
    }
    let steady = start.elapsed();
    let (rss_after, pages_after) = (rss(), __cell_pool_pages());
    let trimmed_after = trimmed_rss();
    eprintln!(
        "RSS {} KiB before the burst ({} KiB trimmed), {} KiB at its peak, {} KiB after ({} KiB trimmed): \
         {arms} arms in {steady:?} with {STEADY_LIVE} live; \
         pool (blocks, spare) {pages_before:?} before, {:?} at the peak, {pages_after:?} after",
        rss_before / 1024,
        trimmed_before / 1024,
        peak.0 / 1024,
        rss_after / 1024,
        trimmed_after / 1024,
        peak.1,
    );
    // The thread keeps its current page, the page it left when it last switched, and the
    // pages that still hold a live cell: here the cancelled cells the shard has not read yet
    // (up to 1,024 wait in its mailbox while it sleeps). A few, not the burst's 120.
    let held = pages_after.0 - pages_after.1;
    assert!(held <= 8, "the pool holds {held} pages after the burst");
    assert!(
        trimmed_after <= trimmed_before + 2 * MIB,
        "RSS {} KiB after the burst, {} KiB before (trimmed)",
        trimmed_after / 1024,
        trimmed_before / 1024
    );
    for timeout in live {
        assert!(timeout.cancel());
    }
    assert!(timers.stop().unwrap().is_empty());
}
