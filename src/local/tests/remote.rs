//! `LocalWheel` with remote handles, case by case: their answers, the notifier and `park`,
//! the remote drain and its budget, resets from afar against the owner's, and what a remote
//! leaves behind on each way a timer goes.

use crate::local::poll::DRAIN_BUDGET;
use crate::local::{LocalWheel, TimerKey, slots};
use std::time::{Duration, Instant};

/// A remote handle's `cancel`, `reset` and `reset_at` each answer `true` exactly when the key
/// names a pending timer: not for one the owner cancelled, one that fired, a stale key whose
/// slot holds another timer now, a key no timer ever had, nor once the wheel is dropped.
#[test]
fn a_remote_answers_true_only_for_a_pending_timer() {
    use crate::local::RemoteWheel;
    type Op = fn(&RemoteWheel<u32>, TimerKey, Instant) -> bool;
    let ops: [(&str, Op); 3] = [
        ("cancel", |r, k, _| r.cancel(k)),
        ("reset", |r, k, _| r.reset(k, Duration::from_secs(90))),
        ("reset_at", |r, k, at| r.reset_at(k, at)),
    ];
    let mut wheel = LocalWheel::new();
    let remote = wheel.remote();
    let later = wheel.now() + Duration::from_secs(90);
    for (name, op) in ops {
        let pending = wheel.arm(Duration::from_secs(30), 1);
        assert!(op(&remote, pending, later), "{name}: a pending timer");
        let cancelled = wheel.arm(Duration::from_secs(30), 2);
        assert_eq!(wheel.cancel(cancelled), Some(2));
        assert!(!op(&remote, cancelled, later), "{name}: a timer the owner cancelled");
        let fired = wheel.arm(Duration::ZERO, 3);
        let soon = Instant::now() + Duration::from_millis(10);
        let mut expired = Vec::new();
        while let Some((key, _)) = wheel.poll_expired(soon) {
            expired.push(key);
        }
        assert_eq!(expired, [fired], "{name}");
        assert!(!op(&remote, fired, later), "{name}: a timer that fired");
        // A slot of theirs, reused: their old keys are stale.
        let reused = wheel.arm(Duration::from_secs(30), 4);
        assert!(reused.index == cancelled.index || reused.index == fired.index, "{name}: a freed slot reused");
        assert!(!op(&remote, cancelled, later) && !op(&remote, fired, later), "{name}: a stale key");
        let never = TimerKey { index: u32::MAX - 1, generation: 0 };
        assert!(!op(&remote, never, later), "{name}: a key no timer had");
        wheel.drain_remote();
        for key in [pending, reused] {
            wheel.cancel(key);
        }
    }
    let last = wheel.arm(Duration::from_secs(30), 5);
    drop(wheel);
    for (name, op) in ops {
        assert!(!op(&remote, last, later), "{name}: the wheel was dropped");
    }
}

/// A wheel whose notifier counts its calls, and the count.
fn counting_notifier() -> (LocalWheel<u32>, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = calls.clone();
    let wheel = LocalWheel::builder()
        .notifier(move || {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })
        .build::<u32>()
        .unwrap();
    (wheel, calls)
}

#[test]
fn notifier_runs_only_for_an_earlier_arm_while_the_owner_sleeps() {
    use std::sync::atomic::Ordering;
    let (mut wheel, calls) = counting_notifier();
    let remote = wheel.remote();
    let now = wheel.now();
    wheel.arm(Duration::from_secs(10), 0);
    // Awake (not parked yet): nobody is notified.
    remote.arm_at(now + Duration::from_secs(1), 1).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(wheel.prepare_park(), Some(Duration::ZERO), "mail waits: don't sleep");
    assert_eq!(wheel.poll_expired(now), None);
    // Going to sleep until (at most) 1 s: a later arm does not notify, an earlier one does,
    // once.
    let sleep = wheel.prepare_park().unwrap();
    assert!(sleep > Duration::ZERO && sleep <= Duration::from_secs(1));
    remote.arm_at(now + Duration::from_secs(5), 2).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    remote.arm_at(now + Duration::from_millis(20), 3).unwrap();
    remote.arm_at(now + Duration::from_millis(10), 4).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one wake-up per sleep");
    let mut fired = Vec::new();
    while let Some((_, p)) = wheel.poll_expired(now + Duration::from_secs(20)) {
        fired.push(p);
    }
    assert_eq!(fired, [4, 3, 1, 2, 0]);
}

/// The notifier's threshold, at, one before and one after the tick the owner sleeps until:
/// an arm for that tick, or later, is served by the wake-up the owner has planned; only an
/// earlier one notifies.
#[test]
fn notifier_runs_for_an_arm_before_the_sleeps_end_not_at_it() {
    use std::sync::atomic::Ordering;
    let (mut wheel, calls) = counting_notifier();
    let remote = wheel.remote();
    let now = wheel.now();
    // Within the first 64 ticks (level 0): the slot the owner sleeps until starts at the
    // timer's own tick.
    let end = now + Duration::from_millis(30);
    wheel.arm_at(end, 0);
    let sleep = wheel.prepare_park().unwrap();
    assert!(sleep <= Duration::from_millis(31), "{sleep:?}");
    remote.arm_at(end + Duration::from_millis(1), 1).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "woken for a tick after the sleep's end");
    remote.arm_at(end, 2).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "woken for the tick it sleeps until");
    remote.arm_at(end - Duration::from_millis(1), 3).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "an earlier tick wakes it");
    let mut fired = Vec::new();
    while let Some((_, p)) = wheel.poll_expired(now + Duration::from_secs(1)) {
        fired.push(p);
    }
    assert_eq!(fired, [3, 0, 2, 1]);
}

/// The remote threads find a slot's word through a directory of pages, each published as
/// the owner first uses it: a remote cancel of the first and last timer of each of three
/// pages (4,096 slots each) wins, and the owner never fires what it cancelled.
#[test]
fn a_remote_cancel_finds_its_timer_on_every_page() {
    let mut wheel = LocalWheel::new();
    let remote = wheel.remote();
    let now = wheel.now();
    let keys: Vec<TimerKey> = (0..3 * slots::PAGE).map(|i| wheel.arm_at(now + Duration::from_millis(1), i)).collect();
    let edges: Vec<usize> = (0..3).flat_map(|page| [page * slots::PAGE, (page + 1) * slots::PAGE - 1]).collect();
    for &i in &edges {
        assert!(remote.cancel(keys[i]), "timer {i}, on page {}", i / slots::PAGE);
        assert!(!remote.cancel(keys[i]), "timer {i} cancelled twice");
    }
    let mut fired = 0;
    while let Some((_, i)) = wheel.poll_expired(now + Duration::from_secs(1)) {
        assert!(!edges.contains(&i), "timer {i} fired after its remote cancel");
        fired += 1;
    }
    assert_eq!(fired, keys.len() - edges.len());
}

#[test]
fn a_dropped_wheel_hands_remote_arms_back() {
    let wheel = LocalWheel::<String>::new();
    let remote = wheel.remote();
    remote.arm(Duration::from_secs(1), "queued".into()).unwrap();
    assert!(!remote.is_closed(), "the wheel lives");
    drop(wheel);
    assert_eq!(remote.arm(Duration::ZERO, "late".into()).unwrap_err().into_inner(), "late");
    assert!(remote.is_closed());
}

/// With a remote handle out, `poll_expired` drains the remote queue only when mail waits,
/// not once per fired timer; mail sent mid-loop is still applied by the next call.
#[test]
fn poll_expired_drains_only_when_mail_waits() {
    let mut wheel = LocalWheel::<u32>::new();
    let start = wheel.now();
    let remote = wheel.remote();
    for i in 0..100 {
        wheel.arm_at(start, i);
    }
    let mut fired = 0;
    while wheel.poll_expired(start).is_some() {
        fired += 1;
    }
    assert_eq!(fired, 100);
    assert_eq!(wheel.drains, 0, "no mail: no drain");
    wheel.arm_at(start, 100);
    assert!(wheel.poll_expired(start).is_some());
    remote.arm_at(start, 101).unwrap();
    assert_eq!(wheel.poll_expired(start).map(|(_, p)| p), Some(101), "mail sent mid-loop comes out");
    assert_eq!(wheel.drains, 1);
    assert!(wheel.poll_expired(start).is_none());
    assert_eq!(wheel.drains, 1);
}

/// Remote arms past the wheel's slot limit are dropped and counted on the owner's drain
/// path, never a panic; the owner's own `arm` still panics there, as documented.
#[test]
fn remote_arms_past_the_slot_limit_are_dropped_not_a_panic() {
    let mut wheel = LocalWheel::<u32>::new();
    wheel.slot_limit = 2;
    let start = wheel.now();
    let remote = wheel.remote();
    for i in 0..5 {
        remote.arm_at(start, i).unwrap();
    }
    let mut fired = Vec::new();
    while let Some((_, p)) = wheel.poll_expired(start) {
        fired.push(p);
    }
    assert_eq!(fired, [0, 1]);
    assert_eq!(wheel.dropped_remote_arms(), 3);
    assert!(wheel.is_empty());
}

#[test]
fn a_remote_made_mid_expiry_takes_over_the_rest() {
    // The first expiries take the exclusive path (plain load and store on the slot word);
    // a remote made between two polls of the same due batch must switch the rest to the CAS
    // path, so that its cancel is exact.
    let mut wheel = LocalWheel::new();
    let now = wheel.now();
    let keys: Vec<TimerKey> = (0..4u32).map(|i| wheel.arm_at(now, i)).collect();
    assert_eq!(wheel.poll_expired(now), Some((keys[0], 0)));
    let remote = wheel.remote();
    assert!(remote.cancel(keys[2]), "pending: the remote cancel wins");
    assert!(!remote.cancel(keys[0]), "already fired on the exclusive path: stale");
    assert_eq!(wheel.poll_expired(now), Some((keys[1], 1)));
    assert_eq!(wheel.poll_expired(now), Some((keys[3], 3)), "the cancelled one is skipped");
    assert_eq!(wheel.poll_expired(now), None);
    assert!(wheel.is_empty());
    assert_eq!(wheel.cancel(keys[2]), None);
    // The slots are reused at their next generation; the old keys stay stale.
    let again = wheel.arm_at(now, 9);
    assert!(keys.iter().all(|&k| k != again && wheel.get(k).is_none()));
    assert_eq!(wheel.cancel(again), Some(9));
}

#[test]
fn a_loser_of_the_expiry_cas_does_not_end_the_poll() {
    // A remote cancel and a remote reset whose notices wait behind a full drain budget: the
    // expiry CAS meets them (`Cancelled`, `ResetInFlight`) and must go on to the next due
    // timer in the same call, not report "nothing due".
    let mut wheel = LocalWheel::<u32>::new();
    let start = wheel.now();
    let remote = wheel.remote();
    let cancelled = wheel.arm_at(start, 1);
    let moved = wheel.arm_at(start, 2);
    let fires = wheel.arm_at(start, 3);
    for _ in 0..DRAIN_BUDGET {
        remote.arm_at(start + Duration::from_secs(3600), 0).unwrap();
    }
    assert!(remote.cancel(cancelled));
    assert!(remote.reset_at(moved, start + Duration::from_secs(60)));
    assert_eq!(wheel.poll_expired(start), Some((fires, 3)), "past both losers");
    assert_eq!(wheel.poll_expired(start), None);
    assert_eq!(wheel.get(cancelled), None);
    assert_eq!(wheel.poll_expired(start + Duration::from_secs(59)), None, "the reset holds");
    assert_eq!(wheel.poll_expired(start + Duration::from_secs(60)), Some((moved, 2)));
}

/// A remote reset, then a later reset by the owner. Both return `true`; the
/// owner's is the last, so the remote one's message, applied at the next poll, must not
/// move the timer back to the remote deadline.
#[test]
fn the_owners_later_reset_wins_over_an_older_remote_reset() {
    let mut wheel = LocalWheel::<u32>::new();
    let now = wheel.now();
    let key = wheel.arm_at(now + Duration::from_secs(1), 7);
    let remote = wheel.remote();
    assert!(remote.reset_at(key, now + Duration::from_millis(1)));
    assert!(wheel.reset_at(key, now + Duration::from_secs(60)));
    assert_eq!(wheel.deadline(key), Some(now + Duration::from_secs(60)));
    assert_eq!(wheel.poll_expired(now + Duration::from_millis(5)), None, "fired early: the older reset won");
    assert_eq!(wheel.deadline(key), Some(now + Duration::from_secs(60)));
    assert_eq!(wheel.poll_expired(now + Duration::from_secs(60)), Some((key, 7)));
}

/// Two remote resets whose messages arrive in the other order than their CASes: the later
/// CAS wins (and the timer fires at neither's deadline before the winner is applied).
#[test]
fn the_later_of_two_remote_resets_wins_whatever_order_their_messages_take() {
    let mut wheel = LocalWheel::<u32>::new();
    let now = wheel.now();
    let key = wheel.arm_at(now + Duration::from_secs(1), 7);
    let remote = wheel.remote();
    // Two resets, their messages sent in the order of their CASes; then the owner resets,
    // and a third remote reset comes after it: it alone must count.
    assert!(remote.reset_at(key, now + Duration::from_millis(1)));
    assert!(wheel.reset_at(key, now + Duration::from_secs(60)));
    assert!(remote.reset_at(key, now + Duration::from_secs(2)));
    assert_eq!(wheel.poll_expired(now + Duration::from_millis(5)), None);
    assert_eq!(wheel.deadline(key), Some(now + Duration::from_secs(2)));
    assert_eq!(wheel.poll_expired(now + Duration::from_secs(2)), Some((key, 7)));
}

/// `next_deadline` is a getter. Called (any number of times) before a poll, it
/// announces nothing: a remote arm while the owner runs calls no notifier. The sleep is
/// announced by `park` alone, for as long as its closure runs, and taken back after.
#[test]
fn next_deadline_is_a_getter_and_park_announces_the_sleep() {
    use std::sync::atomic::Ordering;
    let (mut wheel, calls) = counting_notifier();
    let remote = wheel.remote();
    let now = wheel.now();
    wheel.arm_at(now + Duration::from_secs(10), 0);
    let first = wheel.next_deadline();
    assert!(first.is_some_and(|at| at > now + Duration::from_secs(1)));
    for _ in 0..3 {
        assert_eq!(wheel.next_deadline(), first);
    }
    remote.arm_at(now + Duration::from_secs(1), 1).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the owner runs: the getter announced no sleep");
    assert_eq!(wheel.next_deadline(), first, "mail is not applied by a getter");
    assert_eq!(wheel.poll_expired(now), None);
    assert!(wheel.next_deadline().is_some_and(|at| at <= now + Duration::from_secs(1)));
    // The sleep: a remote arm earlier than it, made while it lasts, notifies once.
    let slept = wheel.park(|timeout| {
        assert!(timeout.is_some_and(|t| t <= Duration::from_secs(1)));
        remote.arm_at(now + Duration::from_millis(5), 2).unwrap();
        remote.arm_at(now + Duration::from_millis(3), 3).unwrap();
        calls.load(Ordering::SeqCst)
    });
    assert_eq!(slept, 1, "woken once");
    // Back from the sleep: no notification while the owner runs.
    remote.arm_at(now + Duration::from_millis(1), 4).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let mut fired = Vec::new();
    while let Some((_, p)) = wheel.poll_expired(now + Duration::from_secs(20)) {
        fired.push(p);
    }
    assert_eq!(fired, [4, 3, 2, 1, 0]);
}

/// `park` with mail waiting does not sleep: its closure gets a zero timeout.
#[test]
fn park_with_mail_waiting_says_dont_sleep() {
    let mut wheel = LocalWheel::<u32>::new();
    let remote = wheel.remote();
    remote.arm(Duration::from_secs(5), 1).unwrap();
    assert_eq!(wheel.park(|timeout| timeout), Some(Duration::ZERO));
    assert_eq!(wheel.drain_remote(), 1);
    assert!(wheel.park(|timeout| timeout).is_some_and(|t| t > Duration::ZERO));
    let empty = LocalWheel::<u32>::new().park(|timeout| timeout);
    assert_eq!(empty, None, "nothing pending: sleep until woken");
}

/// A timer a remote reset leaves the record of that reset behind on every path out of the
/// wheel: cancelled by the owner, cancelled by a remote (its notice drained, or met by the
/// expiry first), and fired. The record would otherwise outlive its timer, one for each
/// timer ever reset from afar.
#[test]
fn a_timers_remote_resets_are_forgotten_on_every_way_out() {
    let mut wheel = LocalWheel::<u32>::new();
    let start = wheel.now();
    let remote = wheel.remote();
    let keys: Vec<TimerKey> = (0..4).map(|i| wheel.arm_at(start + Duration::from_secs(10), i)).collect();
    for (i, &key) in keys.iter().enumerate() {
        assert!(remote.reset_at(key, start + Duration::from_secs(1 + i as u64)));
    }
    wheel.drain_remote();
    assert_eq!(wheel.resets_in_effect.len(), 4, "each remote reset is in effect");
    assert_eq!(wheel.cancel(keys[0]), Some(0));
    assert_eq!(wheel.resets_in_effect.len(), 3, "cancelled by the owner");
    assert!(remote.cancel(keys[1]));
    wheel.drain_remote();
    assert_eq!(wheel.resets_in_effect.len(), 2, "cancelled by a remote, its notice drained");
    assert_eq!(wheel.poll_expired(start + Duration::from_secs(3)), Some((keys[2], 2)));
    assert_eq!(wheel.resets_in_effect.len(), 1, "fired");
    // The cancel's notice behind a full drain budget: the expiry meets the cancel first.
    for _ in 0..DRAIN_BUDGET {
        remote.arm_at(start + Duration::from_secs(3600), 9).unwrap();
    }
    assert!(remote.cancel(keys[3]));
    assert_eq!(wheel.poll_expired(start + Duration::from_secs(4)), None);
    assert!(wheel.resets_in_effect.is_empty(), "cancelled by a remote, met by the expiry");
}

/// An owner back from a sleep that no remote ended (its own deadline came) is awake: a
/// remote arm earlier than that sleep's end, made after the owner's next poll, notifies
/// nobody. Then a sleep announced again is ended by an earlier arm, once.
#[test]
fn an_owner_back_from_its_own_deadline_is_not_notified() {
    use std::sync::atomic::Ordering;
    let (mut wheel, calls) = counting_notifier();
    let remote = wheel.remote();
    let now = wheel.now();
    // An hour: under Miri, whose clock runs with the instructions it executes, seconds
    // pass before the park.
    wheel.arm_at(now + Duration::from_secs(3600), 0);
    let sleep = wheel.prepare_park().unwrap();
    assert!(sleep > Duration::ZERO && sleep <= Duration::from_secs(3600));
    assert_eq!(wheel.poll_expired(now + Duration::from_millis(1)), None, "woken early, by nothing");
    remote.arm_at(now + Duration::from_millis(10), 1).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the owner is awake: no notice");
    assert_eq!(wheel.poll_expired(now + Duration::from_millis(1)), None);
    assert!(wheel.prepare_park().unwrap() <= Duration::from_millis(10));
    remote.arm_at(now + Duration::from_millis(5), 2).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "asleep again: the earlier arm wakes it");
}

/// A remote handle prints whether its wheel is gone and how many commands wait for it.
#[test]
fn a_remote_prints_whether_closed_and_what_waits() {
    let mut wheel = LocalWheel::<u32>::new();
    let remote = wheel.remote();
    assert_eq!(format!("{remote:?}"), "RemoteWheel { closed: false, queued: 0 }");
    remote.arm(Duration::from_secs(1), 1).unwrap();
    remote.arm(Duration::from_secs(1), 2).unwrap();
    assert_eq!(format!("{remote:?}"), "RemoteWheel { closed: false, queued: 2 }");
    wheel.drain_remote();
    drop(wheel);
    assert_eq!(format!("{remote:?}"), "RemoteWheel { closed: true, queued: 0 }");
}

/// A poll applies at most `DRAIN_BUDGET` remote commands, so that a flood of mail cannot
/// hold the owner's loop: the rest wait for the next poll, which applies them.
#[test]
fn a_poll_applies_its_drain_budget_and_no_more() {
    let mut wheel = LocalWheel::<usize>::new();
    let remote = wheel.remote();
    let start = wheel.now();
    for i in 0..DRAIN_BUDGET + 2 {
        remote.arm_at(start + Duration::from_secs(3600), i).unwrap();
    }
    assert!(wheel.poll_expired(start).is_none());
    assert_eq!(wheel.len(), DRAIN_BUDGET, "one budget's worth applied");
    assert!(wheel.poll_expired(start).is_none());
    assert_eq!(wheel.len(), DRAIN_BUDGET + 2, "the rest at the next poll");
}
