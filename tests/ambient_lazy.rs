//! The ambient calls are lazy: a `timeout` whose future is ready at once, and a `sleep`
//! made and dropped before its first poll, register nothing with the default service (its
//! counts do not move); one that waits registers once and is cancelled when dropped. In a
//! process of its own (one test): the default service is the whole process's.

use shardwheel::time::{self, Duration, Instant};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};

#[test]
fn only_a_future_that_waits_registers() {
    // Started, and every count settled.
    futures_executor::block_on(time::sleep(Duration::from_millis(1)));
    let before = time::stats();
    assert_eq!(before.pending, 0);
    for i in 0..1_000u32 {
        assert_eq!(futures_executor::block_on(time::timeout(Duration::from_secs(60), async { i })), Ok(i));
        assert_eq!(
            futures_executor::block_on(time::timeout_at(Instant::now() + Duration::from_secs(60), async { i })),
            Ok(i)
        );
        drop(time::sleep(Duration::from_secs(60)));
        drop(time::sleep_until(Instant::now() + Duration::from_secs(60)));
    }
    let after = time::stats();
    assert_eq!(after.scheduled, before.scheduled, "ready at once or never polled: nothing registered");
    // A timeout whose future waits registers on its first poll, and its drop cancels it.
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut waiting = pin!(time::timeout(Duration::from_secs(60), std::future::pending::<()>()));
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        assert!(waiting.as_mut().poll(&mut cx).is_pending(), "the same waker: no second registration");
        let now = time::stats();
        assert_eq!((now.scheduled, now.pending), (before.scheduled + 1, 1));
    }
    let dropped = time::stats();
    assert_eq!(
        (dropped.scheduled, dropped.cancelled, dropped.pending),
        (before.scheduled + 1, before.cancelled + 1, 0)
    );
}
