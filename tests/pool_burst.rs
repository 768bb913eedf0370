//! A burst's memory comes back without a thread exit, burst after burst (issue 25, item 2).
//! A thread that lives on arms a million timeouts and cancels them, then keeps at most 100
//! live for a second; three times. After the second burst the light load's timeouts fire and
//! their cells are freed on the thread itself, so that its current page never runs dry and
//! only the count of its frees sweeps (`Quiet`). After each quiet second its pool must have given back the
//! burst's pages (`src/entry/pool/heap.rs`: a page emptied by frees elsewhere goes at its
//! class's next refill, or after `SWEEP_EVERY` frees on the thread), and the process's RSS
//! must be back within `SLACK` (the pool's 2 MiB and 2 MiB for the rest of the process) of
//! where it was before that burst.
//!
//! The first burst warms up what the process keeps whatever the pool does (the shard's wheel
//! grows to a million entries and keeps that room: one shard, so that every burst goes to it;
//! the mailbox's segments come back to glibc's heap and serve the next bursts; the vector of
//! handles is made once and reused), so its RSS after its quiet second is the baseline of the
//! later ones.
//!
//! Between the first and the second burst the thread frees a 16 MiB buffer, as a server
//! frees a large buffer now and then. glibc then raises its mmap threshold to 16 MiB
//! (`malloc(3)`, `M_MMAP_THRESHOLD`: the threshold follows the largest mapped chunk freed, up
//! to 32 MiB), and serves every smaller block from its heap, where a freed block in the middle
//! stays resident (a heap is trimmed only at its top, past a trim threshold of twice the mmap
//! threshold). A pool whose pages came from the allocator kept the second and third bursts'
//! pages resident after giving them back (about 30 MiB each time); the pool maps its pages
//! itself (`page.rs`, `os`), so RSS comes back whatever glibc's threshold. (Even without the
//! buffer, the first page the pool gave back raised the threshold above the size of the next
//! page's request, and the next bursts' pages came from the heap.)
//!
//! No `malloc_trim`: it hands back the free pages in the middle of glibc's heaps, which is
//! what a program that never calls it does not get.
//!
//! One test in this file on purpose: RSS and the pool's counts are the whole process's. Linux
//! only: RSS is read from `/proc`.
#![cfg(target_os = "linux")]

mod common;

use common::PATIENCE;
use shardwheel::{__cell_pool_pages, Timeout, TimerService};
use std::collections::VecDeque;
use std::thread;
use std::time::{Duration, Instant};

const BURST: usize = 1_000_000;
const BURSTS: usize = 3;
const STEADY_LIVE: usize = 100;
const MIB: usize = 1024 * 1024;
/// What RSS may grow by, from one burst's quiet second to a later one's: the budget
/// for the pool, 2 MiB per thread (its current page, the page it left at its last switch,
/// pages that hold a live cell, the process's four spare pages: the pool's count is asserted
/// apart, at most 8 pages), and 2 MiB for the rest of the process, whose heap glibc keeps
/// once its thresholds rose (a trim threshold of twice the mmap threshold: 32 MiB here).
/// Pages that stay resident after the pool gave them back cost 30 MiB a burst.
const SLACK: usize = 4 * MIB;
/// A 32 B cell's page holds 8,188 slots.
const SLOTS_PER_PAGE: usize = 8188;

/// Resident bytes of the process, from `/proc/self/status`.
fn rss() -> usize {
    // `VmRSS` is in KiB whatever the kernel's page size (statm counts pages, 4–64 KiB).
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("the status's VmRSS line");
    kib * 1024
}

/// Messages the shard's mailbox may hold before a burst waits for it.
const MAILBOX_BOUND: u64 = 8 * 1024;

/// Arms `BURST` timeouts far out, into `armed` (whose room is reused), and cancels them all.
/// The shard keeps up, within `MAILBOX_BOUND` messages: the mailbox's segments come from
/// glibc's heap, and a backlog of a million of them would leave that heap bigger after one
/// burst than after another, by how far the shard fell behind (up to 19 MiB seen), which is
/// no business of the pool's.
///
/// Bounds the rest too (the shard's scratch vectors, which keep their room): with the
/// mailbox bounded, RSS after a burst came back within 1.9 MiB of the first burst's in every
/// run seen, without the pool's own part (`SLACK`).
fn burst(timers: &TimerService, armed: &mut Vec<Timeout>) {
    let keep_up = |n: usize| {
        if n % 1024 == 0 {
            while timers.stats().queued > MAILBOX_BOUND {
                thread::sleep(Duration::from_micros(100));
            }
        }
    };
    for n in 0..BURST {
        armed.push(timers.schedule(Duration::from_secs(3600), || {}).unwrap());
        keep_up(n);
    }
    for (n, timeout) in armed.drain(..).enumerate() {
        assert!(timeout.cancel());
        keep_up(n);
    }
}

/// How the light load's timeouts end, and so where their cells are freed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Quiet {
    /// Cancelled far from their deadline: the shard lets go of each last, so each cell is
    /// freed on the shard thread, onto its page's remote stack, and the thread's current page
    /// runs dry every page's worth of arms (a refill, which sweeps the class).
    Cancelled,
    /// Fired (1 ms out), their handles dropped well after: the handle lets go last, so each
    /// cell is freed on the arming thread, back onto its current page, which never runs dry;
    /// only the count of frees on the thread (`SWEEP_EVERY`) sweeps the burst's pages.
    Fired,
}

/// A second of light load: at most `STEADY_LIVE` live, armed and let go of in turn, ten at a
/// time every millisecond; on until the thread has armed two pages' worth (`heap.rs` gives
/// back a page emptied elsewhere within one page's worth of arms, or `SWEEP_EVERY` frees on
/// the thread) and the shard has read most of the cancels. Returns the timeouts still live,
/// and the arms made.
fn light_load(timers: &TimerService, quiet: Quiet) -> (VecDeque<Timeout>, usize) {
    let mut live = VecDeque::with_capacity(STEADY_LIVE + 1);
    let start = Instant::now();
    let mut arms = 0;
    while start.elapsed() < Duration::from_secs(1) || arms < 2 * SLOTS_PER_PAGE || timers.stats().queued > 1024 {
        for _ in 0..10 {
            let delay = match quiet {
                Quiet::Cancelled => Duration::from_secs(3600),
                Quiet::Fired => Duration::from_millis(1),
            };
            live.push_back(timers.schedule(delay, || {}).unwrap());
            if live.len() > STEADY_LIVE {
                let oldest = live.pop_front().unwrap();
                match quiet {
                    Quiet::Cancelled => assert!(oldest.cancel()),
                    // Armed ten rounds ago (at least 10 ms): fired, and the shard has let go
                    // of it (if it has not, the shard's later drop frees the cell: then
                    // that cell's free is a foreign one, which the test allows).
                    Quiet::Fired => drop(oldest),
                }
            }
        }
        arms += 10;
        thread::sleep(Duration::from_millis(1));
        assert!(start.elapsed() < PATIENCE, "the light load ends");
    }
    (live, arms)
}

/// One burst and the light load after it.
#[derive(Debug)]
struct Step {
    /// RSS at the burst's end.
    peak: usize,
    /// RSS after the light load.
    after: usize,
    /// The pool's `(blocks, spare)` after the light load.
    pages: (usize, usize),
    quiet: Quiet,
    arms: usize,
    took: Duration,
}

#[test]
fn every_burst_s_memory_comes_back_while_its_thread_lives_on() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    // A thread of its own that lives through every burst, as a server's worker does.
    let steps: Vec<Step> = {
        let timers = timers.clone();
        thread::spawn(move || {
            let mut armed = Vec::with_capacity(BURST);
            let mut steps = Vec::new();
            for n in 0..BURSTS {
                if n == 1 {
                    // A large buffer freed: glibc's mmap threshold rises to its size.
                    drop(std::hint::black_box(vec![0u8; 16 * MIB]));
                }
                let start = Instant::now();
                burst(&timers, &mut armed);
                let peak = rss();
                // The second burst's cells are freed on this thread after it, the others' on
                // the shard: both ways a page goes back (`heap.rs`).
                let quiet = if n == 1 { Quiet::Fired } else { Quiet::Cancelled };
                let (live, arms) = light_load(&timers, quiet);
                steps.push(Step { peak, after: rss(), pages: __cell_pool_pages(), quiet, arms, took: start.elapsed() });
                for timeout in live {
                    timeout.cancel();
                }
            }
            steps
        })
        .join()
        .unwrap()
    };
    for (n, step) in steps.iter().enumerate() {
        eprintln!(
            "burst {}: RSS {} KiB at its end, {} KiB after {} arms with {STEADY_LIVE} live ({:?}); \
             pool (blocks, spare) {:?}; {:?}",
            n + 1,
            step.peak / 1024,
            step.after / 1024,
            step.arms,
            step.quiet,
            step.pages,
            step.took
        );
    }
    for (n, step) in steps.iter().enumerate() {
        // The thread keeps its current page, the page it left when it last switched, and the
        // pages that still hold a live cell: here the cancelled cells the shard has not read
        // yet (up to 1,024 wait in its mailbox while it sleeps). A few, not the burst's 123.
        let held = step.pages.0 - step.pages.1;
        assert!(held <= 8, "the pool holds {held} pages after burst {}", n + 1);
    }
    let baseline = steps[0].after;
    for (n, step) in steps.iter().enumerate().skip(1) {
        assert!(
            step.after <= baseline + SLACK,
            "RSS {} KiB after burst {}, {} KiB after the first",
            step.after / 1024,
            n + 1,
            baseline / 1024
        );
    }
    assert!(timers.stop().unwrap().is_empty());
}
