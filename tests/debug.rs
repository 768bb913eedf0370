//! What the public types print with `{:?}`: readable, with no internal units.

use shardwheel::{TimerService, TimerTask};
use std::time::{Duration, Instant};

#[test]
fn a_timeout_prints_its_state_shard_and_deadline_from_now() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let soon = timers.schedule(Duration::from_secs(30), || {}).unwrap();
    let text = format!("{soon:?}");
    let prefix = "Timeout { state: Pending, shard: 0, deadline: in ";
    assert!(text.starts_with(prefix) && text.ends_with("s }"), "{text}");
    let secs: f64 = text[prefix.len()..text.len() - 3].parse().unwrap_or_else(|_| panic!("{text}"));
    assert!((29.0..=30.01).contains(&secs), "{text}");
    assert!(soon.cancel());
    assert!(format!("{soon:?}").contains("state: Cancelled"));
    let never = timers.schedule(Duration::MAX, || {}).unwrap();
    let text = format!("{never:?}");
    assert!(text.contains("deadline: never }"), "{text}");
    assert!(!text.contains("2305843009213693951"), "a raw tick leaked: {text}");
    let unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 1);
    assert!(format!("{:?}", unfired[0]).starts_with("Unfired { timeout: Timeout { state: Cancelled"));
    let task: Box<dyn TimerTask> = unfired.into_iter().next().unwrap().into_task();
    drop(task);
}

#[test]
fn a_past_deadline_prints_as_ago() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let fired = timers.schedule(Duration::ZERO, move || tx.send(()).unwrap()).unwrap();
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let text = format!("{fired:?}");
    assert!(text.contains("state: Expired") && text.ends_with(" ago }"), "{text}");
}

/// A `LocalWheel` prints each of its fields with its value: how many timers it holds, its
/// now, its tick, the instant it next has work (none when empty) and whether a remote
/// handle was made; each changes the text as it changes.
/// A wheel's builder prints every setting; by default the limit is the wheel's 2²⁸ slots.
#[test]
fn a_local_builder_prints_each_setting() {
    use shardwheel::{LocalWheel, Notify};
    #[derive(Debug)]
    struct Nothing;
    impl Notify for Nothing {
        fn notify(&self) {}
    }
    assert_eq!(
        format!("{:?}", LocalWheel::builder()),
        "LocalBuilder { tick: 1ms, capacity: 0, max_pending: 268435456, start: None, notifier: false }"
    );
    let start = Instant::now();
    let builder = LocalWheel::builder()
        .tick(Duration::from_millis(10))
        .capacity(100)
        .max_pending(50)
        .start(start)
        .notifier(Nothing);
    assert_eq!(
        format!("{builder:?}"),
        format!(
            "LocalBuilder {{ tick: 10ms, capacity: 100, max_pending: 50, start: Some({start:?}), notifier: true }}"
        )
    );
}

#[test]
fn a_local_wheel_prints_its_length_now_tick_next_deadline_and_remote() {
    use shardwheel::LocalWheel;
    let start = Instant::now();
    let mut wheel = LocalWheel::builder().tick(Duration::from_millis(10)).start(start).build::<u32>().unwrap();
    assert_eq!(
        format!("{wheel:?}"),
        format!("LocalWheel {{ len: 0, now: {start:?}, tick: 10ms, next_deadline: None, remote: false }}")
    );
    let at = start + Duration::from_millis(30);
    let key = wheel.arm_at(at, 7);
    wheel.arm_at(at + Duration::from_millis(10), 8);
    assert_eq!(
        format!("{wheel:?}"),
        format!("LocalWheel {{ len: 2, now: {start:?}, tick: 10ms, next_deadline: Some({at:?}), remote: false }}")
    );
    let remote = wheel.remote();
    assert_eq!(wheel.cancel(key), Some(7));
    let later = at + Duration::from_millis(10);
    assert_eq!(wheel.poll_expired(at), None);
    assert_eq!(
        format!("{wheel:?}"),
        format!("LocalWheel {{ len: 1, now: {at:?}, tick: 10ms, next_deadline: Some({later:?}), remote: true }}")
    );
    drop(remote);
}
