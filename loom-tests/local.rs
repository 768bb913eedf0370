#![cfg(loom)]
//! The remote handle of `LocalWheel` (`src/local/remote.rs`, the slot word in
//! `src/state.rs`): remote threads arm, cancel and reset while the owner polls, and wake it
//! through its notifier when, and only when, it matters.

#[path = "harness.rs"]
mod harness;

use harness::model;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use shardwheel::LocalWheel;
use std::time::Duration;

/// A payload that counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counted() -> (Counted, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    (Counted(drops.clone()), drops)
}

/// A remote arm ∥ the owner's poll: the poll either sees it or the next one does; it fires
/// exactly once, and is dropped exactly once.
#[test]
fn remote_arm_races_local_poll() {
    model("local: remote arm ∥ local poll", || {
        let mut wheel = LocalWheel::new();
        let now = wheel.now();
        let remote = wheel.remote();
        let (payload, drops) = counted();
        let arm = loom::thread::spawn(move || remote.arm_at(now, payload).is_ok());
        let first = wheel.poll_expired(now);
        assert!(arm.join().unwrap(), "the wheel lives: the arm is accepted");
        let second = wheel.poll_expired(now);
        assert!(first.is_some() != second.is_some(), "fired exactly once");
        assert!(wheel.poll_expired(now).is_none());
        assert!(wheel.is_empty());
        drop((first, second));
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}

/// A remote cancel ∥ the owner's expiry of a due timer: exactly one wins (the CAS decides),
/// the loser leaves the payload alone, and the payload is dropped exactly once.
#[test]
fn remote_cancel_races_local_expiry() {
    model("local: remote cancel ∥ local expiry", || {
        let mut wheel = LocalWheel::new();
        let now = wheel.now();
        let (payload, drops) = counted();
        let key = wheel.arm_at(now, payload);
        let remote = wheel.remote();
        let cancel = loom::thread::spawn(move || remote.cancel(key));
        let fired = wheel.poll_expired(now);
        let cancelled = cancel.join().unwrap();
        assert!(fired.is_some() != cancelled, "exactly one of expiry and cancel wins");
        assert_eq!(fired.as_ref().map(|(k, _)| *k), fired.is_some().then_some(key));
        // The cancel's notice is applied at the next poll: the slot is free again.
        assert!(wheel.poll_expired(now).is_none());
        assert!(wheel.is_empty());
        assert!(wheel.get(key).is_none());
        drop(fired);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}

/// A remote cancel of a timer not yet due ∥ the owner's poll: the cancel's message carries
/// no deadline, so the remote sends it with no fence after its push, and only the mail
/// flag's release/acquire pair makes the push visible to the owner's pops. If the poll was
/// told of the mail (and took the flag down) it must see the push: otherwise nothing would
/// drain it, and the next poll would still count the cancelled timer.
#[test]
fn remote_cancel_races_local_poll() {
    model("local: remote cancel ∥ local poll", || {
        let mut wheel = LocalWheel::new();
        let now = wheel.now();
        let (payload, drops) = counted();
        let key = wheel.arm_at(now + Duration::from_secs(1), payload);
        let remote = wheel.remote();
        let cancel = loom::thread::spawn(move || remote.cancel(key));
        assert!(wheel.poll_expired(now).is_none());
        assert!(cancel.join().unwrap(), "pending, and no other cancel: the remote one wins");
        assert!(wheel.poll_expired(now).is_none());
        assert!(wheel.is_empty(), "the poll after a remote cancel counts it out");
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}

/// A remote cancel ∥ the owner's cancel of the same pending timer: exactly one wins (the
/// owner's cancel must be a CAS once a remote exists), the payload is dropped exactly once.
#[test]
fn remote_cancel_races_owner_cancel() {
    model("local: remote cancel ∥ owner cancel", || {
        let mut wheel = LocalWheel::new();
        let (payload, drops) = counted();
        let key = wheel.arm(Duration::from_secs(1), payload);
        let remote = wheel.remote();
        let cancel = loom::thread::spawn(move || remote.cancel(key));
        let mine = wheel.cancel(key);
        let theirs = cancel.join().unwrap();
        assert!(mine.is_some() != theirs, "exactly one cancel wins");
        drop(mine);
        wheel.drain_remote();
        assert!(wheel.is_empty());
        assert!(wheel.get(key).is_none());
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}

/// A remote reset to a later deadline ∥ the owner's expiry at the old one: either the timer
/// fired and the reset returned false, or the reset returned true and the timer does not
/// fire at the old deadline (it waits for the new one), even if its message comes late.
#[test]
fn remote_reset_races_local_expiry() {
    model("local: remote reset ∥ local expiry", || {
        let mut wheel = LocalWheel::new();
        let now = wheel.now();
        let later = now + Duration::from_millis(50);
        let key = wheel.arm_at(now, 1u32);
        let remote = wheel.remote();
        let reset = loom::thread::spawn(move || remote.reset_at(key, later));
        let fired = wheel.poll_expired(now);
        let moved = reset.join().unwrap();
        assert!(fired.is_some() != moved, "fired, or moved: never both");
        let at_old = wheel.poll_expired(now + Duration::from_millis(1));
        if moved {
            assert!(at_old.is_none(), "a reset that returned true holds the old deadline");
            assert_eq!(wheel.poll_expired(later), Some((key, 1)));
        } else {
            assert!(at_old.is_none());
        }
        assert!(wheel.is_empty());
    });
}

/// A remote reset ∥ the owner's poll, then the owner's own reset: the last reset
/// that returned `true` wins, whichever side made it. When the owner saw the remote reset
/// return before it reset the timer itself (`done`), its reset is the later one, and the
/// remote reset's message, however late it is applied, must not move the timer back.
/// Otherwise either may be last, and the deadline the wheel settles on is the one it fires
/// at.
#[test]
fn owner_reset_after_a_remote_reset_wins() {
    model("local: remote reset, then the owner's reset", || {
        let mut wheel = LocalWheel::new();
        let now = wheel.now();
        let soon = now + Duration::from_millis(5);
        let far = now + Duration::from_secs(60);
        let key = wheel.arm_at(now + Duration::from_millis(1), 1u32);
        let remote = wheel.remote();
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let reset = loom::thread::spawn(move || {
            let moved = remote.reset_at(key, now);
            flag.store(true, Ordering::Release);
            moved
        });
        let early = wheel.poll_expired(now);
        let after = done.load(Ordering::Acquire);
        let mine = wheel.reset_at(key, far);
        let moved = reset.join().unwrap();
        assert!(moved, "the timer was pending when the remote reset it");
        if early.is_some() {
            assert!(!mine, "it fired at the remote reset's deadline: nothing left to reset");
            return;
        }
        assert!(mine);
        wheel.drain_remote();
        let settled = wheel.deadline(key).expect("pending");
        if after {
            assert_eq!(settled, far, "the owner's reset came last: it must win");
        }
        let fired = wheel.poll_expired(soon);
        assert_eq!(fired.is_some(), settled <= soon, "fires at the deadline the wheel settled on");
        if fired.is_none() {
            assert_eq!(wheel.poll_expired(far), Some((key, 1)));
        }
        assert!(wheel.is_empty());
    });
}

/// A remote arm earlier than the owner's sleep ∥ the owner going idle: either the owner sees
/// the command before it sleeps (`park` says don't sleep), or the remote sees the sleep and
/// calls the notifier. Nothing else ends the sleep here: a lost wake-up spins until loom
/// gives up on the model.
#[test]
fn remote_arm_races_owner_going_idle() {
    model("local: remote arm ∥ owner going idle", || {
        let notified = Arc::new(AtomicBool::new(false));
        let flag = notified.clone();
        let mut wheel = LocalWheel::builder().notifier(move || flag.store(true, Ordering::SeqCst)).build().unwrap();
        let now = wheel.now();
        wheel.arm_at(now + Duration::from_secs(3600), 0u32);
        let remote = wheel.remote();
        let arm = loom::thread::spawn(move || remote.arm_at(now, 1).is_ok());
        wheel.park(|timeout| match timeout {
            // Mail came before the sleep was announced: no sleep.
            Some(timeout) if timeout.is_zero() => {}
            // Sleeping until the far timer: only the notifier ends it.
            _ => {
                while !notified.load(Ordering::SeqCst) {
                    loom::thread::yield_now();
                }
            }
        });
        assert!(arm.join().unwrap());
        assert_eq!(wheel.poll_expired(now).map(|(_, p)| p), Some(1));
    });
}

/// A remote reset to an earlier deadline ∥ the owner going idle: as for an arm, either the
/// owner sees the reset's message before it sleeps, or the remote sees the sleep and calls
/// the notifier; the timer then fires at the reset's deadline.
#[test]
fn remote_reset_races_owner_going_idle() {
    model("local: remote reset ∥ owner going idle", || {
        let notified = Arc::new(AtomicBool::new(false));
        let flag = notified.clone();
        let mut wheel = LocalWheel::builder().notifier(move || flag.store(true, Ordering::SeqCst)).build().unwrap();
        let now = wheel.now();
        let key = wheel.arm_at(now + Duration::from_secs(3600), 0u32);
        let remote = wheel.remote();
        let reset = loom::thread::spawn(move || remote.reset_at(key, now));
        wheel.park(|timeout| match timeout {
            // The reset came before the sleep was announced: no sleep.
            Some(timeout) if timeout.is_zero() => {}
            // Sleeping until the far deadline: only the notifier ends it.
            _ => {
                while !notified.load(Ordering::SeqCst) {
                    loom::thread::yield_now();
                }
            }
        });
        assert!(reset.join().unwrap(), "pending: the reset wins");
        assert_eq!(wheel.poll_expired(now), Some((key, 0)));
    });
}

/// The owner's cancel ∥ a remote reset of the same timer: the owner's cancel always wins
/// (only a remote cancel can beat it), whether the reset's CAS came first or not, and the
/// reset's message, however late, moves nothing: not the cancelled timer, and not the
/// slot's next timer.
#[test]
fn owner_cancel_wins_over_remote_reset_in_flight() {
    model("local: owner cancel ∥ remote reset", || {
        let mut wheel = LocalWheel::new();
        let now = wheel.now();
        let (payload, drops) = counted();
        let key = wheel.arm_at(now + Duration::from_secs(1), payload);
        let remote = wheel.remote();
        let reset = loom::thread::spawn(move || remote.reset_at(key, now));
        let mine = wheel.cancel(key);
        assert!(mine.is_some(), "no remote cancel: the owner's cancel wins");
        drop(mine);
        let (next_payload, next_drops) = counted();
        let later = now + Duration::from_secs(60);
        let next = wheel.arm_at(later, next_payload);
        let _moved = reset.join().unwrap();
        assert!(wheel.poll_expired(now + Duration::from_millis(5)).is_none(), "a stale reset moved a timer");
        assert_eq!(wheel.deadline(next), Some(later));
        assert!(wheel.get(key).is_none());
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert_eq!(wheel.cancel(next).map(drop), Some(()));
        assert_eq!(next_drops.load(Ordering::SeqCst), 1);
        assert!(wheel.is_empty());
    });
}

/// A remote arm ∥ the owner dropping the wheel: the arm is handed back, or it returns `Ok`
/// and its payload is dropped by the time both are done, never left in the queue until the
/// last remote handle goes (the handle is still held when this checks).
#[test]
fn remote_arm_races_wheel_drop() {
    model("local: remote arm ∥ wheel drop", || {
        let wheel = LocalWheel::<Counted>::new();
        let now = wheel.now();
        let remote = wheel.remote();
        let (payload, drops) = counted();
        let arm = loom::thread::spawn(move || {
            let result = remote.arm_at(now, payload).map_err(|closed| closed.into_inner());
            (remote, result)
        });
        drop(wheel);
        let (remote, result) = arm.join().unwrap();
        match result {
            Err(payload) => {
                assert_eq!(drops.load(Ordering::SeqCst), 0);
                drop(payload);
            }
            Ok(()) => assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped, not left queued"),
        }
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        drop(remote);
    });
}
