//! The ambient futures' unit tests: what they hold.

use super::{Duration, Instant, default};

/// An ambient future holds the default service by reference: making, polling to completion
/// and dropping one moves no reference count (a `TimerService::sleep` clones its handle).
#[test]
fn an_ambient_future_holds_no_handle_of_the_service() {
    let service = default::service();
    let handles = service.handles();
    let sleep = super::sleep(Duration::from_secs(60));
    let until = super::sleep_until(Instant::now() + Duration::from_secs(60));
    let limited = super::timeout(Duration::from_secs(60), async { 1 });
    let every = super::interval(Duration::from_secs(60));
    assert_eq!(service.handles(), handles, "no clone made");
    assert_eq!(futures_executor::block_on(limited), Ok(1));
    drop((sleep, until, every));
    assert_eq!(service.handles(), handles);
    let own = service.sleep(Duration::from_secs(60));
    assert_eq!(service.handles(), handles + 1, "the explicit service's sleep holds a clone");
    drop(own);
}

/// What a pending ambient sleep costs the task that holds it: 24 bytes, the explicit
/// `Sleep`'s (the service, the slot's word, the deadline as asked: `future/sleep/slot.rs`),
/// which fits the room a tokio task keeps for its future; so does a `Timeout` of a future
/// with no state. Its cell is apart, in the pool.
#[test]
fn an_ambient_sleep_and_timeout_are_24_bytes() {
    assert_eq!(size_of::<super::Sleep>(), size_of::<crate::Sleep>());
    assert_eq!(size_of::<super::Sleep>(), 24);
    assert_eq!(size_of::<super::Timeout<std::future::Pending<()>>>(), 24);
    // As `docs/migration.md` lists them beside tokio's.
    assert_eq!(size_of::<super::Timeout<std::future::Ready<()>>>(), 32);
    assert_eq!(size_of::<super::Interval>(), 48);
}

/// The deadline as asked comes back exactly, after, before and long before the clock's
/// start, and from a delay.
#[test]
fn a_deadline_comes_back_as_asked() {
    let service = default::service();
    let now = Instant::now();
    for at in [
        now,
        now + Duration::from_nanos(1_234_567),
        now - Duration::from_secs(3600),
        now + Duration::from_secs(86_400 * 365),
    ] {
        assert_eq!(super::sleep_until(at).deadline(), at);
    }
    let before = Instant::now();
    let sleep = super::sleep(Duration::from_millis(7));
    assert!(sleep.deadline() >= before + Duration::from_millis(7), "never before the call plus the delay");
    assert!(sleep.deadline() <= Instant::now() + Duration::from_millis(7) + Duration::from_micros(100));
    assert_eq!(service.clock().at_offset(service.clock().offset_of(before.into_std())), before.into_std());
}
