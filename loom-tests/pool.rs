#![cfg(loom)]
//! The cell pool (`src/entry/pool/`): a thread allocates cells from its own pages; a cell
//! freed on another thread goes onto its page's remote stack (a CAS), which the owner takes
//! whole (a swap) when its page runs out; an exiting owner abandons its pages, and whichever
//! of its exit and the last foreign free finds no cell left releases the page.
//!
//! What must hold, whichever way the threads interleave:
//! - a slot is handed out again only after its free happens-before the reuse: each
//!   allocation and each free of a slot writes a loom cell of the page's (`Page::touch`),
//!   so a reuse that is not ordered after the foreign free is a data race loom reports
//!   (the Release push pairs with the owner's Acquire swap);
//! - no slot is handed out twice while live;
//! - every page is released exactly once (a second release panics, under loom), and none
//!   is left once every thread has exited and every cell is freed (`live_pages`);
//! - two frees onto one live page's remote stack at once both land (the loser of the CAS
//!   links its slot to the winner's and retries): the owner takes both slots back.
//!
//! Under loom a page holds two slots, so a model reaches a full page, the remote stack and
//! a sweep in a few allocations.

#[path = "harness.rs"]
mod harness;

use harness::model;
use loom::thread;
use shardwheel::loom_support::{PoolSlot, exit_pool, live_pages};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether some execution of `foreign_free_races_the_owners_allocation` handed the slot
/// freed on the other thread out again (else the model would not check the reuse at all).
/// A plain atomic: it only outlives the executions.
static REUSED: AtomicBool = AtomicBool::new(false);

/// Waits for every page to be released (by a free on another thread that may still be under
/// way). A page never released fails the model at loom's branch limit. Each model's owner
/// thread gives up its heap with `exit_pool` where it exits: under loom, thread-local
/// destructors run in an order loom cannot replay.
fn wait_for_no_pages() {
    while live_pages() != 0 {
        thread::yield_now();
    }
}

/// owner allocates (its page full: it takes the remote stack) ∥ foreign free of one of its
/// cells.
#[test]
fn foreign_free_races_the_owners_allocation() {
    model("foreign free ∥ owner allocates from a full page", || {
        thread::spawn(|| {
            let a = PoolSlot::alloc();
            let b = PoolSlot::alloc();
            let a_addr = a.addr();
            let freer = thread::spawn(move || drop(a));
            // Loom's exploration does not reorder a plain load (the owner's look at its remote
            // stack) before a later CAS of another thread; yielding here lets the free come
            // first in some executions, so the reuse itself is checked.
            thread::yield_now();
            // The page is full: this takes `a` back if its free came, else makes a new page.
            let c = PoolSlot::alloc();
            assert_ne!(c.addr(), b.addr(), "a live slot handed out twice");
            if c.addr() == a_addr {
                REUSED.store(true, Ordering::Relaxed);
            }
            freer.join().unwrap();
            let d = PoolSlot::alloc();
            assert!(d.addr() != b.addr() && d.addr() != c.addr(), "a live slot handed out twice");
            drop((b, c, d));
            exit_pool();
        })
        .join()
        .unwrap();
        wait_for_no_pages();
    });
    assert!(REUSED.load(Ordering::Relaxed), "no execution reused the slot freed elsewhere");
}

/// owner exits, abandoning its page ∥ foreign free of one of its cells; the other cell is
/// freed after the exit.
#[test]
fn owner_exit_races_a_foreign_free() {
    model("owner exits ∥ foreign free; the page released once", || {
        let (b, freer) = thread::spawn(|| {
            let a = PoolSlot::alloc();
            let b = PoolSlot::alloc();
            let freer = thread::spawn(move || drop(a));
            exit_pool();
            (b, freer)
        })
        .join()
        .unwrap();
        drop(b);
        freer.join().unwrap();
        wait_for_no_pages();
    });
}

/// Two foreign frees of an abandoned page's last cells race: exactly one releases it.
#[test]
fn last_foreign_frees_race() {
    model("foreign free ∥ foreign free of an abandoned page", || {
        let (a, b) = thread::spawn(|| {
            let slots = (PoolSlot::alloc(), PoolSlot::alloc());
            exit_pool();
            slots
        })
        .join()
        .unwrap();
        let freer = thread::spawn(move || drop(a));
        drop(b);
        freer.join().unwrap();
        wait_for_no_pages();
    });
}

/// Two foreign frees onto one live page at once: the loser of the CAS retries on the
/// winner's head, and the owner takes both slots back from the remote stack (its page is
/// full, so a slot lost there would show as a new page's slot).
#[test]
fn two_foreign_frees_race_onto_a_live_page() {
    model("foreign free ∥ foreign free onto a live page", || {
        let a = PoolSlot::alloc();
        let b = PoolSlot::alloc();
        let mut freed = [a.addr(), b.addr()];
        let one = thread::spawn(move || drop(a));
        let two = thread::spawn(move || drop(b));
        one.join().unwrap();
        two.join().unwrap();
        let (c, d) = (PoolSlot::alloc(), PoolSlot::alloc());
        let mut again = [c.addr(), d.addr()];
        freed.sort_unstable();
        again.sort_unstable();
        assert_eq!(again, freed, "a foreign free was lost from the remote stack");
        drop((c, d));
        exit_pool();
        wait_for_no_pages();
    });
}
