//! Deadlines counted from a delay (`schedule`, `sleep`, `Timeout::reset`) are never before
//! `Instant::now()` read before the call plus the delay, however "now" is read (the TSC
//! estimate of `src/clock/tsc/` where the kernel's clock is the TSC, `Instant::now()`
//! elsewhere), and late by at most a tick and the estimate's few microseconds; and the
//! timeouts never fire before that. Several producer threads, several seconds (thousands of
//! the estimate's anchors per thread, and its calibration), the smallest tick.

mod common;

use common::wait_until;
use shardwheel::{Builder, TimerService};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const TICK: Duration = Builder::MIN_TICK;

/// How far past `after + delay` a deadline may be: a tick of rounding up and the estimate's
/// lead (some 16 µs while the kernel is not slewing, as here; 33 µs at 3 GHz under its fastest
/// slew: `src/clock/tsc/`), with room.
const DEADLINE_SLACK: Duration = Duration::from_micros(10 + 30);

/// Checks a deadline the service computed from `delay` between `before` and `after`.
fn check(what: &str, deadline: Instant, before: Instant, after: Instant, delay: Duration) {
    assert!(deadline >= before + delay, "{what} {delay:?}: deadline {:?} early", (before + delay) - deadline);
    let late = deadline.saturating_duration_since(after + delay);
    assert!(late <= DEADLINE_SLACK, "{what} {delay:?}: deadline {late:?} past now + delay");
}

#[test]
fn deadlines_from_delays_are_never_early_and_fire_no_earlier() {
    let timers = TimerService::builder().shards(2).tick(TICK).build().expect("valid settings");
    let (fired, early) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let producers: Vec<_> = (0..4u64)
        .map(|seed| {
            let (timers, fired, early) = (timers.clone(), fired.clone(), early.clone());
            std::thread::spawn(move || {
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ (seed + 1);
                let end = Instant::now() + Duration::from_secs(3);
                let mut scheduled = 0;
                while Instant::now() < end {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // 1 ns to 2 ms: most within a few ticks, where an early deadline shows.
                    let delay = Duration::from_nanos(1 + x % 2_000_000);
                    let before = Instant::now();
                    let due = before + delay;
                    let (one_fired, one_early) = (fired.clone(), early.clone());
                    let timeout = timers
                        .schedule(delay, move || {
                            if Instant::now() < due {
                                one_early.fetch_add(1, Ordering::Relaxed);
                            }
                            one_fired.fetch_add(1, Ordering::Relaxed);
                        })
                        .expect("schedule");
                    check("schedule", timeout.deadline(), before, Instant::now(), delay);
                    scheduled += 1;
                    if x % 16 == 0 {
                        // A reset, from now, of a timeout that cannot have fired before it: every
                        // other one is left to fire, never before `before + delay` (`before` read
                        // just ahead of the reset, handed to its task); the rest are cancelled,
                        // and a cancel may lose only to that firing (the delay can be 1 ns).
                        let reset_from = Arc::new(OnceLock::new());
                        let (from, one_fired, one_early) = (reset_from.clone(), fired.clone(), early.clone());
                        let far = timers
                            .schedule(Duration::from_secs(3600), move || {
                                let from: Instant = *from.get().expect("set before the reset");
                                if Instant::now() < from + delay {
                                    one_early.fetch_add(1, Ordering::Relaxed);
                                }
                                one_fired.fetch_add(1, Ordering::Relaxed);
                            })
                            .expect("schedule");
                        let before = Instant::now();
                        reset_from.set(before).expect("set once");
                        assert!(far.reset(delay));
                        check("reset", far.deadline(), before, Instant::now(), delay);
                        if x % 32 == 0 || !far.cancel() {
                            assert!(x % 32 == 0 || far.is_expired(), "a cancel lost to {:?}", far.state());
                            // It fires (or fired), counted with the others.
                            scheduled += 1;
                        }
                        let before = Instant::now();
                        let sleep = timers.sleep(delay);
                        check("sleep", sleep.deadline(), before, Instant::now(), delay);
                    }
                    if scheduled % 64 == 0 {
                        // Keep the pending count modest: a breath for the shards.
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                scheduled
            })
        })
        .collect();
    let scheduled: usize = producers.into_iter().map(|p| p.join().unwrap()).sum();
    assert!(scheduled > 10_000, "only {scheduled} scheduled");
    assert!(wait_until(|| fired.load(Ordering::Relaxed) == scheduled, Duration::from_secs(10)), "every timeout fires");
    assert_eq!(early.load(Ordering::Relaxed), 0, "timeouts that fired before Instant::now() + delay");
}
