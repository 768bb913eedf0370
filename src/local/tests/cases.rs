//! `LocalWheel` case by case: the corners the model (`model.rs`) reaches seldom or not at all
//! (generations coming round, the slot limit, panicking payloads, a start in the future), the
//! notifier and `park`, the remote drain, and that the wheel is `Send`.

use crate::error::BuildError;
use crate::local::poll::DRAIN_BUDGET;
use crate::local::{Entry, LocalWheel, TimerKey, slots};
use crate::state::SlotWord;
use crate::wheel::FIRST_KEY;
use std::time::{Duration, Instant};

#[test]
fn a_slot_whose_generation_comes_round_is_retired() {
    let seed = 7;
    let mut builder = LocalWheel::builder();
    builder.seed = Some(seed);
    let mut wheel = builder.build::<u32>().unwrap();
    let first = wheel.arm(Duration::from_secs(1), 1);
    assert_eq!(first.generation, seed);
    assert_eq!(wheel.cancel(first), Some(1));
    // As if the slot had been used 2³² − 2 times more: its next timer is the last of the round.
    wheel.slot_word_for_test(first).set_generation_for_test(seed.wrapping_sub(1));
    let last = wheel.arm(Duration::from_secs(1), 2);
    assert_eq!((last.index, last.generation), (first.index, seed - 1));
    assert_eq!(wheel.cancel(last), Some(2));
    // The slot is retired: the next timer gets another, and the first key stays stale.
    let next = wheel.arm(Duration::from_secs(1), 3);
    assert_ne!(next.index, first.index);
    assert_eq!(wheel.get(first), None);
    assert_eq!(wheel.cancel(first), None);
    for _ in 0..100 {
        let k = wheel.arm(Duration::ZERO, 0);
        assert_ne!(k.index, first.index);
        wheel.cancel(k);
    }
}

/// Each wheel starts its slots at a generation of its own: a key used on another wheel, at the
/// same slot, is stale there and touches nothing, for every pair of eight wheels made in a row
/// (their first generations all differ).
#[test]
fn a_key_of_another_wheel_is_stale_there() {
    let mut wheels: Vec<LocalWheel<usize>> = (0..8).map(|_| LocalWheel::new()).collect();
    let keys: Vec<TimerKey> = wheels.iter_mut().enumerate().map(|(i, w)| w.arm(Duration::from_secs(60), i)).collect();
    for (i, wheel) in wheels.iter_mut().enumerate() {
        for (j, key) in keys.iter().enumerate().filter(|&(j, _)| j != i) {
            assert_eq!(key.index, keys[i].index, "the same slot on each wheel");
            assert_ne!(key.generation, keys[i].generation, "wheels {i} and {j} start at one generation");
            assert_eq!(wheel.get(*key), None, "wheel {j}'s key on wheel {i}");
            assert_eq!(wheel.cancel(*key), None, "wheel {j}'s key on wheel {i}");
        }
        assert_eq!(wheel.cancel(keys[i]), Some(i), "its own timer is left");
    }
}

/// A key's raw form is the generation in the high half and the slot in the low half, and
/// goes back to the same key: for keys of many slots and of one slot over many generations,
/// every raw differs, each names its own timer (`from_raw` cancels it), and a stale one's raw
/// names nothing. At the corners of both halves too.
#[test]
fn a_key_goes_to_its_raw_form_and_back_to_its_own_timer() {
    use std::collections::HashSet;
    for (index, generation) in [(0, 0), (7, 5), (u32::MAX, 0), (0, u32::MAX), (u32::MAX, u32::MAX)] {
        let key = TimerKey { index, generation };
        let raw = (u64::from(generation) << 32) | u64::from(index);
        assert_eq!(key.into_raw(), raw, "{key:?}");
        assert_eq!(TimerKey::from_raw(raw), key);
    }
    let mut wheel = LocalWheel::new();
    let mut raws = HashSet::new();
    // Many slots at once, then one slot through many generations.
    let live: Vec<(TimerKey, u64)> = (0..100).map(|i| (wheel.arm(Duration::from_secs(60), i), i)).collect();
    for &(key, _) in &live {
        assert!(raws.insert(key.into_raw()), "two keys with one raw form: {key:?}");
        assert_eq!(TimerKey::from_raw(key.into_raw()), key);
    }
    let mut stale = Vec::new();
    for i in 100..200 {
        let key = wheel.arm(Duration::from_secs(60), i);
        assert!(raws.insert(key.into_raw()), "two keys with one raw form: {key:?}");
        assert_eq!(wheel.cancel(TimerKey::from_raw(key.into_raw())), Some(i), "its raw form names its timer");
        stale.push(key.into_raw());
    }
    for raw in stale {
        assert_eq!(wheel.cancel(TimerKey::from_raw(raw)), None, "a stale key's raw form names nothing");
    }
    for (key, i) in live {
        assert_eq!(wheel.cancel(TimerKey::from_raw(key.into_raw())), Some(i));
    }
}

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

#[test]
fn far_and_bad_input_never_panics() {
    let mut wheel = LocalWheel::new();
    let now = wheel.now();
    let forever = wheel.arm(Duration::MAX, 1);
    let far = now.checked_add(Duration::from_secs(1 << 40)).map(|at| wheel.arm_at(at, 2));
    let past = wheel.arm_at(now.checked_sub(Duration::from_secs(5)).unwrap_or(now), 3);
    assert_eq!(wheel.poll_expired(now), Some((past, 3)));
    assert_eq!(wheel.poll_expired(now + Duration::from_secs(1 << 20)), None);
    assert!(wheel.deadline(forever).is_some_and(|d| d > now + Duration::from_secs(1 << 30)));
    if let Some(far) = far {
        assert!(wheel.deadline(far).is_some());
        assert_eq!(wheel.cancel(far), Some(2));
    }
    assert!(wheel.reset_at(forever, now));
    assert_eq!(wheel.poll_expired(now), Some((forever, 1)), "an earlier instant is ignored, what was due fires");
    assert_eq!(wheel.next_deadline(), None);
}

/// A poll at an instant past the wheel's last tick (2⁶¹ ticks, some 73 million years of
/// 1 ms ticks: the tick saturates there) fires what is due, then, polled there again, finds
/// nothing: the wheel's own lists are never mistaken for a timer.
#[test]
fn a_poll_past_the_last_tick_fires_what_is_due_and_then_nothing() {
    let mut wheel = LocalWheel::new();
    let now = wheel.now();
    let Some(end) = now.checked_add(Duration::from_secs(1 << 52)) else { return };
    let soon = wheel.arm_at(now + Duration::from_secs(1), 1);
    assert_eq!(wheel.poll_expired(end), Some((soon, 1)));
    for _ in 0..3 {
        assert_eq!(wheel.poll_expired(end), None);
    }
    assert!(wheel.is_empty());
    let late = wheel.arm_at(now + Duration::from_secs(2), 2);
    assert_eq!(wheel.poll_expired(end), Some((late, 2)), "one armed after is due at once");
    assert_eq!(wheel.poll_expired(end), None);
}

#[test]
fn sizes() {
    assert_eq!(std::mem::size_of::<TimerKey>(), 8);
    // A node: the entry (payload and deadline, no tag) and two links.
    assert_eq!(std::mem::size_of::<Option<Entry<u64>>>(), 16);
    assert_eq!(std::mem::size_of::<SlotWord>(), 8);
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
    drop(wheel);
    assert_eq!(remote.arm(Duration::ZERO, "late".into()).unwrap_err().into_inner(), "late");
    assert!(remote.is_closed());
}

/// A payload whose `Drop` panics when its flag says so.
struct Bomb(bool);

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 && !std::thread::panicking() {
            panic!("payload drop panics");
        }
    }
}

/// After a payload's `Drop` panicked (caught by the caller), the slot's bookkeeping is done:
/// the old key stays stale and the next timer in the slot gets a new key.
fn assert_slot_moved_on(wheel: &mut LocalWheel<Bomb>, old: TimerKey) {
    let new = wheel.arm(Duration::from_secs(60), Bomb(false));
    assert_eq!(new.index, old.index, "the freed slot is reused");
    assert_ne!(new, old, "a stale key must never name the new timer");
    assert!(wheel.get(old).is_none());
    assert!(wheel.cancel(old).is_none());
    assert!(wheel.cancel(new).is_some());
}

#[test]
fn a_panicking_drop_on_the_unlink_path_leaves_no_alias() {
    let mut wheel = LocalWheel::<Bomb>::new();
    let key = wheel.arm(Duration::from_secs(1), Bomb(true));
    let remote = wheel.remote();
    assert!(remote.cancel(key));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wheel.drain_remote()));
    assert!(caught.is_err(), "the payload's drop panicked");
    assert_slot_moved_on(&mut wheel, key);
}

#[test]
fn a_panicking_drop_on_the_expiry_path_leaves_no_alias() {
    let mut wheel = LocalWheel::<Bomb>::new();
    let start = wheel.now();
    // Due at the wheel's now, whatever time the test takes (`arm` would count from the
    // clock, which moves on: under valgrind, past the instant polled below).
    let key = wheel.arm_at(start, Bomb(true));
    let remote = wheel.remote();
    // Fill the drain budget so the cancel's notice waits and the expiry finds the word
    // CANCELLED first.
    for _ in 0..DRAIN_BUDGET {
        remote.arm_at(start + Duration::from_secs(3600), Bomb(false)).unwrap();
    }
    assert!(remote.cancel(key));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wheel.poll_expired(start)));
    assert!(caught.is_err(), "the payload's drop panicked");
    assert_slot_moved_on(&mut wheel, key);
}

/// A `start` in the future would round every instant before it to tick 0 and ignore the
/// real now as earlier than `start`: a timer armed for between now and `start` would fire
/// at once, early. `build` refuses it.
#[test]
fn a_start_in_the_future_is_refused() {
    let later = Instant::now() + Duration::from_millis(500);
    match LocalWheel::builder().start(later).build::<u8>() {
        Err(BuildError::StartInFuture { by }) => assert!(by > Duration::ZERO && by <= Duration::from_millis(500)),
        other => panic!("expected StartInFuture, got {:?}", other.map(|w| w.now())),
    }
    // A start in the past (or now) is fine, and a timer armed for an instant that has not
    // come yet does not fire before it.
    let start = Instant::now();
    let mut wheel = LocalWheel::builder().start(start).build::<u8>().unwrap();
    let at = start + Duration::from_millis(200);
    wheel.arm_at(at, 1);
    assert_eq!(wheel.poll_expired(start + Duration::from_millis(100)), None);
    assert!(wheel.poll_expired(at).is_some());
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
fn a_ready_timer_reset_later_does_not_fire_and_forged_keys_far_out_are_stale() {
    let mut wheel = LocalWheel::new();
    let now = wheel.now();
    let a = wheel.arm_at(now, 'a');
    let b = wheel.arm_at(now, 'b');
    assert_eq!(wheel.poll_expired(now), Some((a, 'a')));
    // `b` is on the ready list (a poll is under way at `now`): a reset to later moves it.
    assert!(wheel.reset_at(b, now + Duration::from_millis(5)));
    assert_eq!(wheel.poll_expired(now), None);
    assert_eq!(wheel.poll_expired(now + Duration::from_millis(4)), None);
    assert_eq!(wheel.poll_expired(now + Duration::from_millis(5)), Some((b, 'b')));
    // Forged keys at and past the last slot, and where `index + FIRST_KEY` would wrap.
    let c = wheel.arm(Duration::from_secs(1), 'c');
    for index in
        [slots::MAX_SLOTS as u32 - 1, slots::MAX_SLOTS as u32, u32::MAX - FIRST_KEY, u32::MAX - FIRST_KEY + 1, u32::MAX]
    {
        for generation in [c.generation, 0, u32::MAX] {
            let key = TimerKey { index, generation };
            assert_eq!(wheel.get(key), None);
            assert_eq!(wheel.deadline(key), None);
            assert!(!wheel.reset_at(key, now));
            assert_eq!(wheel.cancel(key), None);
        }
    }
    assert_eq!(wheel.cancel(c), Some('c'));
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

/// `arm(delay)` counts from the clock, not from the last poll: a loop busy for
/// 20 ms since its last poll that arms 30 ms must not see the timer due 10 ms later.
#[test]
fn arm_by_delay_never_fires_before_the_delay_in_real_time() {
    let mut wheel = LocalWheel::<u32>::new();
    let polled = wheel.now();
    assert_eq!(wheel.poll_expired(polled), None);
    std::thread::sleep(Duration::from_millis(20)); // the loop is busy, no poll
    let armed = Instant::now();
    let key = wheel.arm(Duration::from_millis(30), 1);
    let due = wheel.deadline(key).unwrap();
    assert!(due >= armed + Duration::from_millis(30), "due {:?} after arming, not 30 ms", due - armed);
    assert_eq!(wheel.poll_expired(polled + Duration::from_millis(31)), None, "fired early");
    assert_eq!(wheel.poll_expired(due), Some((key, 1)));
    // The fast form counts from the last poll, as its name says.
    let now = wheel.now();
    let fast = wheel.arm_from_last_poll(Duration::from_millis(30), 2);
    assert_eq!(wheel.deadline(fast), Some(now + Duration::from_millis(30)));
}

/// The wheel moves to another thread (with timers and a remote handle out).
#[test]
fn a_local_wheel_is_send() {
    fn send<S: Send>(_: &S) {}
    let mut wheel = LocalWheel::<u64>::new();
    send(&wheel);
    let now = wheel.now();
    let key = wheel.arm_at(now, 1);
    let remote = wheel.remote();
    remote.arm_at(now, 2).unwrap();
    let fired = std::thread::spawn(move || {
        let mut fired = Vec::new();
        while let Some((_, p)) = wheel.poll_expired(now) {
            fired.push(p);
        }
        fired
    })
    .join()
    .unwrap();
    assert_eq!(fired, [1, 2]);
    assert!(!remote.cancel(key));
}

/// Compile-time: `LocalWheel<T>` is `Send` for every `T: Send`.
const _: fn() = || {
    fn send<S: Send>() {}
    send::<LocalWheel<u64>>();
    send::<LocalWheel<String>>();
    send::<LocalWheel<Box<dyn std::any::Any + Send>>>();
};

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

/// `is_empty` and `len` follow the timers pending: one armed, not empty; it fires or is
/// cancelled, empty again.
#[test]
fn a_wheel_with_a_timer_pending_is_not_empty() {
    let mut wheel = LocalWheel::<u32>::new();
    let now = wheel.now();
    assert!(wheel.is_empty());
    let key = wheel.arm_at(now + Duration::from_secs(1), 1);
    assert!(!wheel.is_empty());
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.cancel(key), Some(1));
    assert!(wheel.is_empty());
    let key = wheel.arm_at(now, 2);
    assert!(!wheel.is_empty());
    assert_eq!(wheel.poll_expired(now), Some((key, 2)));
    assert!(wheel.is_empty());
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

/// An entry prints its deadline tick (as asked, without the `+ 1` it is stored with), and
/// not its payload, which need not be `Debug`.
#[test]
fn an_entry_prints_its_deadline_tick() {
    struct Opaque;
    assert_eq!(format!("{:?}", Entry::new(41, Opaque)), "Entry { deadline: 41, .. }");
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
