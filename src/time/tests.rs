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

/// Each of tokio's missed-tick behaviours names the service's `Missed` of the same meaning,
/// both ways (a `From` that answered the default, `Burst`, for all would keep one of three).
#[test]
fn each_missed_tick_behaviour_converts_to_its_own_kind_and_back() {
    use super::MissedTickBehavior;
    use crate::Missed;
    for (tokio, ours) in [
        (MissedTickBehavior::Burst, Missed::Burst),
        (MissedTickBehavior::Delay, Missed::Delay),
        (MissedTickBehavior::Skip, Missed::Skip),
    ] {
        assert_eq!(Missed::from(tokio), ours);
        assert_eq!(MissedTickBehavior::from(ours), tokio);
    }
}

/// The ambient futures' `Debug` says what they wait for.
#[test]
fn the_ambient_futures_debug_shows_their_deadline_and_period() {
    let every = super::interval(Duration::from_millis(250));
    let shown = format!("{every:?}");
    for part in ["Interval", "next", "period: 250ms", "missed_tick_behavior: Burst"] {
        assert!(shown.contains(part), "{part:?} not in {shown}");
    }
    let limited = super::timeout(Duration::from_secs(5), std::future::pending::<()>());
    let shown = format!("{limited:?}");
    for part in ["Timeout", "delay: Sleep", ".."] {
        assert!(shown.contains(part), "{part:?} not in {shown}");
    }
}

/// A `Timeout` whose future won lets go of its deadline's registration then, not when it is
/// dropped: kept past the deadline, it wakes its task for nothing never (as tokio's, whose
/// entry goes with the future).
#[test]
fn a_timeout_whose_future_won_is_not_woken_at_its_deadline() {
    use std::future::Future;
    use std::task::{Context, Poll};

    let (wakes, waker) = crate::test_wakers::WakeCount::waker();
    let mut cx = Context::from_waker(&waker);
    let mut ready = false;
    let mut limited = Box::pin(super::timeout(
        Duration::from_millis(20),
        std::future::poll_fn(|_| if std::mem::replace(&mut ready, true) { Poll::Ready(7) } else { Poll::Pending }),
    ));
    assert!(limited.as_mut().poll(&mut cx).is_pending(), "the deadline registered");
    assert_eq!(limited.as_mut().poll(&mut cx), Poll::Ready(Ok(7)), "the future won");
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(wakes.woken(), 0, "woken at a deadline that no longer counts");
    drop(limited);
}
