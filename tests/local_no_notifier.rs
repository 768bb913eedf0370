//! A `LocalWheel` with a remote handle and no notifier cannot sleep through a remote
//! command: its `park` sleeps a tick at most, so a remote arm or reset earlier than the
//! owner's next deadline is seen within a tick of its sending (it once slept 255.8 ms past a
//! remote reset to 10 ms, with no error). With a notifier, the sleep is the deadline's.

use shardwheel::LocalWheel;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The owner parks in `std::thread::sleep` (nothing else can end its sleep) with a timer
/// five seconds out; another thread resets it to 10 ms while the owner sleeps.
#[test]
fn a_remote_reset_earlier_is_seen_within_a_tick_without_a_notifier() {
    let mut wheel = LocalWheel::<&str>::new();
    let key = wheel.arm(Duration::from_secs(5), "idle");
    let remote = wheel.remote();
    let (sent_tx, sent_rx) = mpsc::channel();
    let resetter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20)); // the owner is asleep by now
        let at = Instant::now() + Duration::from_millis(10);
        assert!(remote.reset_at(key, at));
        sent_tx.send(at).unwrap();
    });
    let started = Instant::now();
    let fired = loop {
        wheel.park(|timeout| {
            let timeout = timeout.expect("a remote handle and no notifier: a bounded sleep");
            assert!(timeout <= Duration::from_millis(1), "a tick at most: {timeout:?}");
            std::thread::sleep(timeout);
        });
        if let Some((_, what)) = wheel.poll_expired(Instant::now()) {
            break (what, Instant::now());
        }
        assert!(started.elapsed() < Duration::from_secs(4), "slept through the remote reset");
    };
    resetter.join().unwrap();
    let at = sent_rx.recv().unwrap();
    assert_eq!(fired.0, "idle");
    assert!(fired.1 >= at, "never early");
    // A tick, plus the scheduling of two threads on a loaded machine.
    assert!(fired.1 - at < Duration::from_millis(500), "fired {:?} after its deadline", fired.1 - at);
}

/// With a notifier the owner sleeps until its deadline (or forever, with nothing pending):
/// the notifier ends the sleep when a remote command needs it.
#[test]
fn with_a_notifier_the_sleep_is_the_deadlines() {
    let mut wheel = LocalWheel::builder().notifier(|| {}).build::<u32>().unwrap();
    let _remote = wheel.remote();
    assert_eq!(wheel.prepare_park(), None, "nothing pending: until woken");
    wheel.drain_remote();
    wheel.arm(Duration::from_secs(5), 1);
    let timeout = wheel.prepare_park().expect("a timer pending");
    assert!(timeout > Duration::from_secs(4), "{timeout:?}");
    // Without a remote handle, no cap either: nobody else can send.
    let mut alone = LocalWheel::<u32>::new();
    alone.arm(Duration::from_secs(5), 1);
    assert!(alone.prepare_park().unwrap() > Duration::from_secs(4));
    assert_eq!(LocalWheel::<u32>::new().prepare_park(), None);
}
