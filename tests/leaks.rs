//! No leaks: a counting global allocator shows that after `stop()` and drop, every byte the
//! service allocated is freed: entries that fired, were cancelled (also while still in a
//! mailbox), were reset, were handed back by `stop`, and the shards themselves.
//!
//! This file holds one test on purpose: the allocator counts the whole process, and a
//! second test running in parallel would be counted too.

mod common;

use common::counting::{Counting, live};
use shardwheel::TimerService;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One service's whole life: every way a timeout can end, then stop and drop.
fn workload() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    // Fire. (Counted with an atomic, not a channel: a blocking `mpsc` receive may cache a
    // 48-byte wait context in the receiving thread's thread-locals, depending on timing,
    // which this test would count as ours.)
    let fired = Arc::new(AtomicUsize::new(0));
    for i in 0..1_000 {
        let f = fired.clone();
        timers
            .schedule(Duration::from_millis(i % 5), move || {
                f.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    // Cancel at once, most while the arm is still in the mailbox; from other threads too.
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let timers = timers.clone();
            thread::spawn(move || {
                for _ in 0..5_000 {
                    let payload = vec![0u8; 32];
                    let t = timers.schedule(Duration::from_secs(60), move || drop(payload)).unwrap();
                    assert!(t.cancel());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // Reset later and earlier, then leave pending for stop to hand back; and never.
    for _ in 0..1_000 {
        let t = timers.schedule(Duration::from_secs(60), || {}).unwrap();
        t.reset(Duration::from_secs(120));
        t.reset(Duration::from_secs(90));
    }
    timers.schedule(Duration::MAX, || {}).unwrap();
    while fired.load(Ordering::SeqCst) < 1000 {
        thread::sleep(Duration::from_millis(1));
    }
    let unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 1_001);
    drop(unfired);
    drop(timers);
}

#[test]
fn a_stopped_and_dropped_service_frees_everything() {
    // Warm up what the process keeps for good once it has been used a few times: this
    // thread's thread-locals, the standard library's channel and thread bookkeeping, the
    // test harness's buffers. Measured after three runs, that is steady.
    for _ in 0..3 {
        workload();
    }
    // The cell pool keeps pages for this thread's next timeouts, and a few spare ones for new
    // threads: which are kept when depends on which page emptied last. Given back before
    // each count, so a page kept for reuse is not read as a leak, and a leaked timeout (which
    // keeps its page) still is.
    // Made before the first count: its one allocation is not a window's.
    let mut drift = Vec::with_capacity(3);
    shardwheel::__trim_cell_pool();
    let mut before = live();
    // One 32-byte block comes and goes between two counts in about a third of the runs
    // (+32 or −32; once −64, on a machine busy with a build: not explained yet). A leak
    // grows with every window of three services, which noise does not: a window within 32
    // bytes of the one before it passes; three windows that are not, fail. A leaked
    // timeout keeps its pool page (256 KiB); a leaked handle (40 B), stage or mailbox block
    // per service is three services' worth a window: all far more than 32 bytes, each
    // window.
    for _ in 0..3 {
        for _ in 0..3 {
            workload();
        }
        shardwheel::__trim_cell_pool();
        let after = live();
        if (after - before).abs() <= 32 {
            return;
        }
        drift.push(after - before);
        before = after;
    }
    panic!("{drift:?} bytes still allocated after each of three windows of three services stopped and dropped");
}
