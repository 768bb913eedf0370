//! The cell pool's pages at the edge of their life: pages released while the process's spare
//! pages are full (four, `src/entry/pool/page.rs`, `spare`) are given back (unmapped), none
//! lost. Threads that each fill three pages with timeouts, cancel them and exit release a
//! two dozen pages, eight of them or more with the spare full; once every cell is freed, the pool holds
//! its spare pages and nothing else (`__cell_pool_pages` counts the blocks it mapped and
//! has not given back).
//!
//! One test in this file on purpose: the pool's counts are the whole process's.

mod common;

use common::settle_cell_pool;
use shardwheel::{__cell_pool_pages, TimerService};
use std::thread;
use std::time::Duration;

/// A 32 B cell's page holds 8,188 slots: a thread fills six pages, more than the spare holds.
const PER_THREAD: usize = 45_000;
const THREADS: usize = 4;

#[test]
fn pages_released_with_the_spare_full_go_back_to_the_allocator() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    for _ in 0..THREADS {
        let timers = timers.clone();
        thread::spawn(move || {
            let armed: Vec<_> =
                (0..PER_THREAD).map(|_| timers.schedule(Duration::from_secs(3600), || {}).unwrap()).collect();
            // The count sees the pages that hold them: six at least, this thread's alone.
            let (blocks, _) = __cell_pool_pages();
            assert!(blocks >= PER_THREAD.div_ceil(8_188), "{blocks} pages counted with {PER_THREAD} cells live");
            for timeout in armed {
                assert!(timeout.cancel());
            }
            // The thread exits: its pages go back as their last cells are freed (on the
            // shards, or here).
        })
        .join()
        .unwrap();
    }
    // Every cell is freed once the shards have let go of the cancelled entries; then only
    // the spare pages are left.
    let spare = settle_cell_pool(&timers, "every cell freed");
    assert!(spare <= 4, "{spare} spare pages");
    shardwheel::__trim_cell_pool();
    assert_eq!(__cell_pool_pages(), (0, 0), "pages left after the spare is given back");
    assert!(timers.stop().unwrap().is_empty());
}
