//! The service's own tests: the cores its shards take, and what a timeout counts on.

use super::TimerService;
use std::sync::Arc;
use std::time::Duration;

/// Services started in turn take consecutive cores, wrapping around; a service never
/// puts two of its shards on one core; the counter wrapping around is harmless.
#[test]
fn services_take_cores_in_turn() {
    let cores = [10, 11, 12];
    assert_eq!(super::cores_from(&cores, 0, 1), [Some(10)]);
    assert_eq!(super::cores_from(&cores, 1, 1), [Some(11)], "the next one-shard service moves on");
    assert_eq!(super::cores_from(&cores, 2, 2), [Some(12), Some(10)], "wraps around");
    assert_eq!(super::cores_from(&cores, 4, 5), [Some(11), Some(12), Some(10), None, None]);
    assert_eq!(super::cores_from(&cores, usize::MAX, 2), [Some(10), Some(11)]);
    assert!(super::cores_from::<u8>(&[], 3, 2).is_empty(), "no cores listed: nothing pinned");
    // The real thing: as many entries as shards.
    let listed = core_affinity::get_core_ids().unwrap_or_default().len();
    assert_eq!(super::pick_cores(2).len(), if listed == 0 { 0 } else { 2 });
}

/// Timeouts count on their thread's handle for the shard, not on the shard: a thousand
/// of them, and their drops, leave the shard's own count where one thread's first
/// schedule put it (see `shard/handle.rs`).
#[test]
fn timeouts_do_not_count_on_the_shard() {
    let timers = TimerService::builder().shards(1).build().expect("the service starts");
    let shard = &timers.inner.shards[0];
    // The shard's thread takes its own references as it starts: wait for it to run.
    let (tx, rx) = std::sync::mpsc::channel();
    timers.schedule(Duration::ZERO, move || tx.send(()).unwrap()).expect("the service runs");
    rx.recv_timeout(Duration::from_secs(10)).expect("the shard runs");
    std::thread::scope(|s| {
        s.spawn(|| {
            let first = timers.schedule(Duration::from_secs(60), || {}).expect("the service runs");
            let after_first = Arc::strong_count(shard);
            let many: Vec<_> =
                (0..1000).map(|_| timers.schedule(Duration::from_secs(60), || {}).expect("the service runs")).collect();
            assert_eq!(Arc::strong_count(shard), after_first, "a schedule touched the shard's count");
            for t in &many {
                assert!(t.cancel());
            }
            drop(many);
            drop(first);
            assert_eq!(Arc::strong_count(shard), after_first, "a drop touched the shard's count");
        });
    });
    timers.stop().expect("not on a timer thread");
}
