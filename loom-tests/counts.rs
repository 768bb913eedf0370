#![cfg(loom)]
//! The per-thread count slots (`src/counts.rs`): a thread claims a free slot with a CAS,
//! counts its arms and cancels in it alone, and gives it back as it exits; the next thread to
//! claim it goes on from its counts, and `stats()` / `pending()` sum every slot.
//!
//! What must hold, whichever way the threads interleave:
//! - a slot handed over carries its counts: the next holder's counts add to the last one's
//!   (the Release store of `give_back` pairs with the Acquire CAS of `claim`);
//! - a reader summing meanwhile never sees a count above the truth, nor one go backwards, and
//!   the sum is exact at rest;
//! - two threads racing for one free slot: exactly one gets it, the other a new one;
//! - every exiting thread gives its slot back, one that only cancelled on the shard too, so
//!   the list grows with the threads alive at once, not with the threads that came and went.
//!
//! The first two models drive a bare list of slots (`loom_support::CountSlots`), so that
//! nothing but the hand-over orders a holder's counts before the next holder's. The last two
//! go through the service, where the give-back happens in the thread-local that an exiting
//! thread drops (loom may drop it after `join` returns: the models wait for it, and a
//! give-back that never comes fails them at loom's branch limit).

#[path = "harness.rs"]
mod harness;

use harness::{Probe, assert_exactly_once, drop_unfired, model, service};
use loom::sync::Arc;
use loom::thread;
use shardwheel::TimerService;
use shardwheel::loom_support::{CountSlots, count_slots, freeze_clock};
use std::time::Duration;

/// Counts `(armed, cancelled)` in a slot of its own, gives it back, and returns the slot's
/// address.
fn hold(slots: &CountSlots, armed: u64, cancelled: u64) -> usize {
    let slot = slots.claim();
    (0..armed).for_each(|_| slot.armed());
    (0..cancelled).for_each(|_| slot.cancelled());
    let addr = slot.addr();
    slot.give_back();
    addr
}

/// Two threads each claim a slot, count in it and give it back, while a third sums: when the
/// second claims after the first gave back, it gets the same slot and must go on from the
/// first's counts. The reader's sums never go backwards nor above the truth; at rest the sum
/// is exact, the list is one slot per thread that held one at once, and a free slot is
/// reused before a new one is pushed.
#[test]
fn a_slot_is_handed_over_with_its_counts() {
    model("counts: a slot handed over with its counts", || {
        let slots = Arc::new(CountSlots::default());
        let a = {
            let slots = slots.clone();
            thread::spawn(move || hold(&slots, 2, 1))
        };
        let b = {
            let slots = slots.clone();
            thread::spawn(move || hold(&slots, 1, 2))
        };
        let first = slots.sum();
        let second = slots.sum();
        assert!(first.0 <= second.0 && first.1 <= second.1, "a sum went backwards: {first:?}, then {second:?}");
        assert!(second.0 <= 3 && second.1 <= 3, "a sum above the truth: {second:?}");
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert_eq!(slots.sum(), (3, 3), "not exact at rest (a slot handed over without its counts)");
        let (len, held) = slots.census();
        assert_eq!(held, 0, "a slot given back is still held");
        assert_eq!(len, if a == b { 1 } else { 2 }, "one slot per thread that held one at once");
        let again = hold(&slots, 1, 0);
        assert!(again == a || again == b, "a free slot was not reused");
        assert_eq!(slots.census().0, len);
        assert_eq!(slots.sum(), (4, 3), "its counts did not go on");
    });
}

/// One free slot (its counts `(1, 0)`), and two threads racing to claim it, each holding what
/// it gets: exactly one of them gets it, the other a new slot; no count is lost.
#[test]
fn two_threads_race_for_one_free_slot() {
    model("counts: two threads race for one free slot", || {
        let slots = Arc::new(CountSlots::default());
        let free = hold(&slots, 1, 0);
        let claim = || {
            let slots = slots.clone();
            thread::spawn(move || {
                let slot = slots.claim();
                slot.armed();
                slot.addr()
            })
        };
        let (a, b) = (claim(), claim());
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert_ne!(a, b, "two threads hold one slot");
        assert!(a == free || b == free, "the free slot went to neither");
        assert_eq!(slots.census(), (2, 2));
        assert_eq!(slots.sum(), (3, 0), "a count was lost");
    });
}

/// Waits until no thread but the model's own holds a slot: every other thread's exit has
/// given its slot back (a give-back that never comes fails the model at loom's branch limit).
fn wait_for_give_backs(timers: &TimerService) {
    while count_slots(timers).1 > 1 {
        thread::yield_now();
    }
}

/// The model's thread arms two far timeouts (time is frozen); two threads each cancel one,
/// and exit, having only cancelled on the shard, while the model's thread reads `stats()`.
/// Each exit gives its slot back (the list holds at most the three threads' slots, and only
/// the model's thread holds one at the end); when the second claims after the first exited,
/// it goes on from the first's count; the reader's count never goes backwards nor above the
/// truth, and at rest it is exact.
#[test]
fn threads_that_only_cancel_give_their_slots_back() {
    model("counts: threads that only cancel give their slots back", || {
        freeze_clock();
        let timers = service();
        let (a, a_counts) = Probe::new();
        let (b, b_counts) = Probe::new();
        let a = timers.schedule(Duration::from_secs(60), a).unwrap();
        let b = timers.schedule(Duration::from_secs(60), b).unwrap();
        let canceller = |t: shardwheel::Timeout| thread::spawn(move || assert!(t.cancel(), "the only cancel wins"));
        let (ca, cb) = (canceller(a), canceller(b));
        let first = timers.stats().cancelled;
        let second = timers.stats().cancelled;
        assert!(first <= second && second <= 2, "cancelled read {first}, then {second}");
        ca.join().unwrap();
        cb.join().unwrap();
        wait_for_give_backs(&timers);
        assert!(count_slots(&timers).0 <= 3, "more slots than threads");
        let stats = timers.stats();
        assert_eq!((stats.scheduled, stats.cancelled, stats.pending), (2, 2, 0), "not exact at rest");
        assert_eq!(timers.pending(), 0);
        assert_eq!(drop_unfired(timers.stop().unwrap()), 0);
        assert_exactly_once(&a_counts, 1, 0);
        assert_exactly_once(&b_counts, 1, 0);
    });
}

/// Thread churn with threads that only cancel: one cancels and exits, and, once it has given
/// its slot back, another does the same. The second reuses the first's slot (the list stays
/// at two: the model's thread's and theirs) and goes on from its count.
#[test]
fn a_cancel_only_thread_leaves_its_slot_to_the_next() {
    model("counts: a cancel-only thread leaves its slot to the next", || {
        freeze_clock();
        let timers = service();
        let (a, a_counts) = Probe::new();
        let (b, b_counts) = Probe::new();
        let a = timers.schedule(Duration::from_secs(60), a).unwrap();
        let b = timers.schedule(Duration::from_secs(60), b).unwrap();
        for t in [a, b] {
            thread::spawn(move || assert!(t.cancel(), "the only cancel wins")).join().unwrap();
            wait_for_give_backs(&timers);
            assert_eq!(count_slots(&timers), (2, 1), "a thread that only cancelled kept its slot");
        }
        let stats = timers.stats();
        assert_eq!((stats.scheduled, stats.cancelled, stats.pending), (2, 2, 0), "a count was lost");
        assert_eq!(drop_unfired(timers.stop().unwrap()), 0);
        assert_exactly_once(&a_counts, 1, 0);
        assert_exactly_once(&b_counts, 1, 0);
    });
}
