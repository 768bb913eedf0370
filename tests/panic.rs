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
            if info.payload().downcast_ref::<&str>() != Some(&MARKER) {
                default(info);
            }
        }));
    });
}

fn boom() {
    std::panic::panic_any(MARKER);
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
