//! A task that panics is caught and counted; its shard goes on firing.

mod common;

use common::{ChanTask, Kind, next_event};
use shardwheel::{TimerService, TimerTask};
use std::sync::Once;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The payload of the test panics, so the hook can keep them quiet.
const MARKER: &str = "deliberate test panic";

/// Silences the deliberate panics (and only those) so the test output stays readable.
fn quiet_deliberate_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            if payload.downcast_ref::<&str>() != Some(&MARKER) && !payload.is::<PanicsOnDrop>() {
                default(info);
            }
        }));
    });
}

fn boom() {
    std::panic::panic_any(MARKER);
}

/// A panic payload whose own `Drop` panics: with `PanicsOnDrop(n)`, `n` more panics follow
/// the first, each payload's drop panicking with the next (the last with `MARKER`).
struct PanicsOnDrop(u32);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        match self.0 {
            0 => {}
            1 => boom(),
            n => std::panic::panic_any(PanicsOnDrop(n - 1)),
        }
    }
}

/// Panics with a payload that panics `n` times more as it is dropped.
fn boom_twice(n: u32) {
    std::panic::panic_any(PanicsOnDrop(n));
}

struct Panicky;

impl TimerTask for Panicky {
    fn run(self: Box<Self>) {
        boom();
    }
}

#[test]
fn a_panicking_task_is_counted_and_the_shard_goes_on() {
    quiet_deliberate_panics();
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    timers.schedule(Duration::from_millis(5), boom).unwrap();
    timers.schedule(Duration::from_millis(10), Panicky).unwrap();
    timers.schedule(Duration::from_millis(30), ChanTask::new(0, &tx)).unwrap();
    let event = next_event(&rx);
    assert_eq!((event.id, event.kind), (0, Kind::Ran), "the shard stopped firing after a panic");
    // The panics came first on the same shard thread, so they are counted by now.
    let stats = timers.stats();
    assert_eq!(stats.panicked, 2);
    assert_eq!(stats.expired, 3, "a task that panicked still expired");
    assert_eq!(stats.pending, 0);
    // And it keeps going: a later schedule still fires.
    timers.schedule(Duration::from_millis(1), ChanTask::new(1, &tx)).unwrap();
    assert_eq!(next_event(&rx).id, 1);
}

#[test]
fn a_panic_does_not_skip_the_rest_of_its_batch() {
    quiet_deliberate_panics();
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    // Same deadline: one batch, with the panic in the middle.
    let at = Instant::now() + Duration::from_millis(20);
    timers.schedule_at(at, ChanTask::new(0, &tx)).unwrap();
    for _ in 0..3 {
        timers.schedule_at(at, boom).unwrap();
    }
    timers.schedule_at(at, ChanTask::new(1, &tx)).unwrap();
    assert_eq!(next_event(&rx).id, 0);
    assert_eq!(next_event(&rx).id, 1, "the tasks after a panicking one in its batch must run");
    let stats = timers.stats();
    assert_eq!((stats.panicked, stats.expired), (3, 5));
}

#[test]
fn many_panics_do_not_wear_the_shard_out() {
    quiet_deliberate_panics();
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    for _ in 0..200 {
        timers.schedule(Duration::ZERO, boom).unwrap();
    }
    timers.schedule(Duration::from_millis(5), ChanTask::new(0, &tx)).unwrap();
    assert_eq!(next_event(&rx).kind, Kind::Ran);
    assert_eq!(timers.stats().panicked, 200);
    assert!(timers.stop().unwrap().is_empty());
}

/// A task whose panic's payload panics as it is dropped (and that one's too): every panic is
/// caught and counted, the rest of its batch runs, and the shard goes on. Before, the payload
/// was dropped outside the catch: the shard failed, the rest of the batch read Expired but
/// never ran, and later schedules got `ShardFailed`.
#[test]
fn a_panic_whose_payload_panics_on_drop_does_not_fail_the_shard() {
    quiet_deliberate_panics();
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let at = Instant::now() + Duration::from_millis(20);
    timers.schedule_at(at, || boom_twice(1)).unwrap();
    timers.schedule_at(at, || boom_twice(3)).unwrap();
    timers.schedule_at(at, ChanTask::new(0, &tx)).unwrap();
    assert_eq!(next_event(&rx).id, 0, "the rest of the batch runs");
    let stats = timers.stats();
    assert_eq!(stats.failed_shards, 0, "a task's panic never fails its shard");
    assert_eq!(stats.panicked, 2 + 4, "each panic counted, the payloads' own included");
    timers.schedule(Duration::from_millis(1), ChanTask::new(1, &tx)).expect("the shard still takes timeouts");
    assert_eq!(next_event(&rx).id, 1);
}

struct CancelPanicsTwice;

impl TimerTask for CancelPanicsTwice {
    fn run(self: Box<Self>) {}
    fn cancelled(self: Box<Self>) {
        boom_twice(2);
    }
}

/// `cancel()` on a task whose `cancelled()` panics with such a payload: the cancel stands and
/// nothing escapes to the caller (the payload's panic used to).
#[test]
fn a_cancel_whose_task_panics_with_a_payload_that_panics_on_drop_does_not_unwind() {
    quiet_deliberate_panics();
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let timeout = timers.schedule(Duration::from_secs(60), CancelPanicsTwice).unwrap();
    let cancelled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| timeout.cancel()));
    assert!(matches!(cancelled, Ok(true)), "cancel returns true and does not unwind");
    assert!(timeout.is_cancelled());
    assert_eq!(timers.stats().panicked, 3);
    assert_eq!(timers.stats().failed_shards, 0);
}

/// A series whose closure panics with such a payload ends (as any panicking series), and
/// its shard goes on.
#[test]
fn a_series_that_panics_with_a_payload_that_panics_on_drop_ends_alone() {
    quiet_deliberate_panics();
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let series = timers
        .schedule_repeating(Duration::from_millis(1), Duration::from_millis(1), shardwheel::Missed::Skip, || {
            boom_twice(1)
        })
        .unwrap();
    let deadline = Instant::now() + common::PATIENCE;
    while !series.is_cancelled() {
        assert!(Instant::now() < deadline, "the series ends");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (tx, rx) = mpsc::channel();
    timers.schedule(Duration::from_millis(1), ChanTask::new(0, &tx)).expect("the shard still takes timeouts");
    assert_eq!(next_event(&rx).id, 0);
    assert_eq!(timers.stats().failed_shards, 0);
    assert!(common::wait_until(|| timers.stats().panicked == 2, common::PATIENCE));
}
