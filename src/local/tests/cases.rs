//! `LocalWheel` case by case: the corners the model (`model.rs`) reaches seldom or not at all
//! (generations coming round, the slot limit, panicking payloads, a start in the future, a
//! poll past the last tick), and that the wheel is `Send`. The remote handle, the notifier
//! and `park`: `remote.rs`.

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

/// An entry prints its deadline tick (as asked, without the `+ 1` it is stored with), and
/// not its payload, which need not be `Debug`.
#[test]
fn an_entry_prints_its_deadline_tick() {
    struct Opaque;
    assert_eq!(format!("{:?}", Entry::new(41, Opaque)), "Entry { deadline: 41, .. }");
}
