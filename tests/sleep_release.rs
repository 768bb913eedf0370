//! A sleep gives back what it holds on every way out of a phase (`src/future/sleep/slot.rs`,
//! `release`, and the slot's `Drop`): a registration's cell when the sleep moves to another
//! task or is taken back at `stop()`, and the overflow timer's entry box when it is dropped or
//! moves on from there. A leak here is silent: the sleep still completes on time. So the test
//! counts the cell pool's pages (a cell kept is a page kept) and this thread's heap bytes
//! (`common::counting`). Each way is taken twice, 20,000 sleeps at a time. (The change's
//! mutation run found `release` made a no-op, or either of its arms deleted, and the slot's
//! `Drop` made a no-op, passing every other test.)
//!
//! Its own test binary: the pool's counts and the allocator are the whole process's.

mod common;

use common::counting::{Counting, thread_live};
use common::settle_cell_pool;
use shardwheel::{__cell_pool_pages, TimerService};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SLEEPS: usize = 20_000;

/// A waker of its own identity.
struct Task;

impl Wake for Task {
    fn wake(self: Arc<Self>) {}
}

fn poll<F: Future>(future: &mut Pin<Box<F>>, waker: &Waker) -> Poll<F::Output> {
    future.as_mut().poll(&mut Context::from_waker(waker))
}

/// The pool holds no cell: once the shards have let go of every cancelled one, only the
/// spare pages are left, and those go back when trimmed.
fn assert_no_cell_held(timers: &TimerService, way: &str) {
    settle_cell_pool(timers, way);
    shardwheel::__trim_cell_pool();
    assert_eq!(__cell_pool_pages(), (0, 0), "{way}: pages left after the spare went back");
}

#[test]
fn every_way_out_of_a_phase_gives_back_what_the_sleep_held() {
    let (a, b) = (Waker::from(Arc::new(Task)), Waker::from(Arc::new(Task)));

    // A registration let go while the sleep lives on: moved to another task (the first cell
    // cancelled and let go, a second armed), twice; then dropped. The cells are made on a
    // thread that exits, so that its pages go back with their last cells.
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    for round in 0..2 {
        let (t, a, b) = (timers.clone(), a.clone(), b.clone());
        std::thread::spawn(move || {
            let mut sleeps: Vec<_> = (0..SLEEPS).map(|_| Box::pin(t.sleep(Duration::from_secs(3600)))).collect();
            for waker in [&a, &b, &a] {
                for sleep in &mut sleeps {
                    assert!(poll(sleep, waker).is_pending());
                }
            }
            let (blocks, _) = __cell_pool_pages();
            assert!(blocks >= 3, "round {round}: {blocks} pages for {SLEEPS} cells");
        })
        .join()
        .unwrap();
        assert_no_cell_held(&timers, "moved to another task");
    }
    timers.stop().unwrap();

    // A registration taken back at `stop()`: the next poll sees its cell cancelled by the
    // stop, lets go of it, and answers (on a stopped service, as `try_poll` says).
    for _ in 0..2 {
        let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
        let a = a.clone();
        let t = timers.clone();
        let sleeps = std::thread::spawn(move || {
            let mut sleeps: Vec<_> = (0..SLEEPS).map(|_| Box::pin(t.sleep(Duration::from_secs(3600)))).collect();
            for sleep in &mut sleeps {
                assert!(poll(sleep, &a).is_pending());
            }
            sleeps
        })
        .join()
        .unwrap();
        // Each sleep's wake-up is handed back with the rest; dropped, it wakes its sleep.
        assert_eq!(timers.stop().unwrap().len(), SLEEPS);
        for mut sleep in sleeps {
            assert!(sleep.as_mut().try_poll(&mut Context::from_waker(&b)).is_ready());
            // The registration is gone before the sleep is: the drop has none to let go of.
            drop(sleep);
        }
        assert_no_cell_held(&timers, "taken back at stop()");
    }

    // The overflow timer's entry box: every shard full, each sleep waits there; dropped in
    // that phase (the slot's `Drop`), or moved on by a reset (its `release`). Counted in
    // this thread's heap bytes: 20,000 boxes kept would be 320,000 bytes.
    let timers = TimerService::builder().shards(1).max_pending_per_shard(1).pin_threads(false).build().unwrap();
    let _holder = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
    for way in ["dropped", "reset", "dropped", "reset"] {
        let before = thread_live();
        let mut sleeps: Vec<_> = (0..SLEEPS).map(|_| Box::pin(timers.sleep(Duration::from_secs(3600)))).collect();
        for sleep in &mut sleeps {
            assert!(poll(sleep, &a).is_pending());
        }
        if way == "reset" {
            for sleep in &mut sleeps {
                sleep.as_mut().reset(std::time::Instant::now() + Duration::from_secs(7200));
            }
        }
        drop(sleeps);
        let kept = thread_live() - before;
        // The overflow timer's map may keep a node or two of room; not a box a sleep.
        assert!(kept < (SLEEPS * 4) as i64, "{way}: {kept} bytes kept after {SLEEPS} overflowed sleeps went");
    }
    timers.stop().unwrap();
}
