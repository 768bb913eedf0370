//! `Sleep`'s unit tests: its size and traits, and a failed shard's refusal.

use super::{Sleep, WakeTask};
use std::mem::size_of;

fn assert_traits<T: std::future::Future<Output = ()> + Send + Sync + Unpin>() {}

/// The polling thread's home shard failed (its driver died): the sleep registers on the
/// next shard that runs, round from home; with every shard failed, the poll panics rather
/// than wait forever.
#[test]
fn a_sleep_refused_by_a_failed_shard_registers_on_the_next() {
    use crate::TimerService;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    let timers = TimerService::builder().shards(3).build().unwrap();
    let home = timers.route();
    let poll_once = |sleep: &mut Sleep| {
        let mut cx = Context::from_waker(Waker::noop());
        std::pin::Pin::new(sleep).poll(&mut cx)
    };
    let shard_of = |sleep: &Sleep| match &sleep.phase {
        super::Phase::Armed(timeout) => timeout.shard.shard().index,
        _ => panic!("not registered"),
    };
    let mut sleep = timers.sleep(Duration::from_secs(30));
    assert_eq!(poll_once(&mut sleep), Poll::Pending);
    assert_eq!(shard_of(&sleep), home, "its own shard first");
    for failed in 1..3 {
        timers.shard_at((home + failed - 1) % 3).fail();
        let mut sleep = timers.sleep(Duration::from_secs(30));
        assert_eq!(poll_once(&mut sleep), Poll::Pending);
        assert_eq!(shard_of(&sleep), (home + failed) % 3, "the next that runs, round from home");
    }
    drop(sleep);
    timers.shard_at((home + 2) % 3).fail();
    let mut sleep = timers.sleep(Duration::from_secs(30));
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_once(&mut sleep)));
    let message = refused.expect_err("no shard runs: the poll panics").downcast::<String>().unwrap();
    assert!(message.contains("could not register"), "{message}");
}

#[test]
fn sleep_is_send_sync_unpin_and_small() {
    assert_traits::<Sleep>();
    assert_eq!(size_of::<Sleep>(), 48);
    assert_eq!(size_of::<WakeTask>(), 16);
}
