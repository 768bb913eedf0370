//! What the public types print with `{:?}`: readable, with no internal units.

use shardwheel::{TimerService, TimerTask};
use std::time::Duration;

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
