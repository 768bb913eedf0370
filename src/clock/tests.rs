//! The clock's conversions: rounding, memos, division, saturation, and deadlines from a
//! delay read against `Instant::now()`.

use super::memo::converted;
use super::*;

#[test]
fn rounds_deadlines_up_and_now_down() {
    let start = Instant::now();
    let clock = Clock::new(start, Duration::from_millis(1));
    let ms = 1_000_000;
    // Deadlines ahead of `now` round up ...
    assert_eq!(clock.deadline_nanos(0, 1_000), 1);
    assert_eq!(clock.deadline_nanos(0, ms), 1);
    assert_eq!(clock.deadline_nanos(0, ms + 1_000), 2);
    assert_eq!(clock.deadline_nanos(ms / 2, 7 * ms + 1), 8);
    // ... and deadlines already reached are the tick under way.
    assert_eq!(clock.deadline_nanos(5 * ms + 300, 5 * ms + 300), 5);
    assert_eq!(clock.deadline_nanos(5 * ms + 300, ms), 5);
    assert_eq!(clock.deadline_at(start), 0);
    assert_eq!(clock.deadline_at(start + Duration::from_micros(1500)), 2);
    assert_eq!(clock.deadline_at(start + Duration::from_millis(3)), 3);
    assert_eq!(clock.floor(start + Duration::from_micros(1999)), 1);
    assert_eq!(clock.instant_of(3), start + Duration::from_millis(3));
}

/// A memo answers only for its own clock: the same instant on three clocks (another tick,
/// another start), in turn, gets each clock's answer, the same as without the memo.
#[test]
fn a_remembered_reset_deadline_answers_only_for_its_own_clock() {
    let start = Instant::now();
    let ms = Clock::new(start, Duration::from_millis(1));
    let ten = Clock::new(start, Duration::from_millis(10));
    let later = Clock::new(start + Duration::from_millis(5), Duration::from_millis(1));
    let at = start + Duration::from_micros(12_345);
    for _ in 0..3 {
        for (clock, want) in [(&ms, 13), (&ten, 2), (&later, 8), (&ms, 13)] {
            assert_eq!(clock.deadline_at_for_reset(at), want);
            assert_eq!(clock.deadline_at_for_reset(at), clock.deadline_at(at));
        }
        let other = at + Duration::from_nanos(1);
        assert_eq!(ms.deadline_at_for_reset(other), ms.deadline_at(other));
        assert_eq!(ms.deadline_at_for_reset(start), 0);
    }
}

#[test]
fn a_remembered_tick_answers_exactly_for_the_instants_that_round_up_to_it() {
    let start = Instant::now() + Duration::from_secs(1);
    let clocks = [
        Clock::new(start, Duration::from_millis(1)),
        Clock::new(start, Duration::from_millis(10)),
        Clock::new(start + Duration::from_nanos(3), Duration::from_millis(1)),
        Clock::new(start, Duration::from_nanos(7)),
        Clock::new(start, Duration::from_nanos(999_983)),
        Clock::new(start, Duration::from_secs(3600)),
    ];
    // Instants on, just before and just after tick boundaries of every clock, and before
    // the start; visited in a scrambled order, clocks interleaved, so each call meets a
    // memo left by another instant, another tick or another clock.
    let mut offsets: Vec<i64> = vec![-2_000_000, -1, 0, 1, 2];
    for d in [1_000_000i64, 10_000_000, 7, 999_983, 3_600_000_000_000] {
        for k in [1i64, 2, 3, 1000, 123_457] {
            for e in [-1i64, 0, 1, 3] {
                offsets.push(d.saturating_mul(k).saturating_add(e));
            }
        }
    }
    let at = |offset: i64| {
        let magnitude = Duration::from_nanos(offset.unsigned_abs());
        if offset < 0 { start - magnitude } else { start + magnitude }
    };
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let clock = &clocks[(x % clocks.len() as u64) as usize];
        let at = at(offsets[((x >> 8) % offsets.len() as u64) as usize]);
        assert_eq!(clock.deadline_at_for_reset(at), clock.deadline_at(at), "{clock:?} at {at:?}");
    }
}

#[test]
fn a_tick_is_remembered_on_its_second_conversion_and_two_families_keep_theirs() {
    let start = Instant::now() + Duration::from_secs(1);
    let ms = Clock::new(start, Duration::from_millis(1));
    // Two families, each reset later and later within one tick of its own: a request
    // timeout 5 s ahead and an idle timeout 60 s ahead, in turn.
    let request = start + Duration::from_micros(5_000_100);
    let idle = start + Duration::from_micros(60_000_100);
    let n = |k: u64| Duration::from_nanos(k);
    let conversions = |resets: &[Instant]| {
        let before = converted();
        for &at in resets {
            assert_eq!(ms.deadline_at_for_reset(at), ms.deadline_at(at));
        }
        converted() - before
    };
    // Each family's first two resets convert (the second makes its memo); then both are
    // answered, the request timeout's by the older memo.
    assert_eq!(conversions(&[request, idle, request + n(1), idle + n(1)]), 4);
    assert_eq!(conversions(&[request + n(2), idle + n(2), request + n(3), idle + n(3)]), 0);
    // A new tick for each family: two conversions each again, then answered.
    let (request, idle) = (request + Duration::from_millis(1), idle + Duration::from_millis(1));
    assert_eq!(conversions(&[request, idle, request + n(1), idle + n(1)]), 4);
    assert_eq!(conversions(&[request + n(2), idle + n(2)]), 0);
    // An earlier instant of a remembered tick is not in its memo (its `from` is later):
    // converted, and right.
    assert_eq!(conversions(&[request - n(1)]), 1);
    // Another clock's reset to an instant the first clock's memo holds is its own
    // conversion.
    let ten = Clock::new(start, Duration::from_millis(10));
    let before = converted();
    assert_eq!(ten.deadline_at_for_reset(idle + n(2)), ten.deadline_at(idle + n(2)));
    assert_eq!(converted() - before, 1);
}

#[test]
fn the_memo_stays_exact_at_the_limits_of_the_tick_count() {
    let start = Instant::now();
    for tick in [Duration::from_nanos(1), Duration::from_nanos(u64::MAX)] {
        let clock = Clock::new(start, tick);
        let never = Duration::from_nanos(NEVER.saturating_mul(tick.as_nanos() as u64));
        let far = Duration::from_nanos(u64::MAX);
        for base in [never, far] {
            for k in [0u64, 1, 2, 5] {
                for at in [start + base - Duration::from_nanos(k), start + base + Duration::from_nanos(k)] {
                    // Twice each: the second would be answered by a memo, if one was made.
                    for _ in 0..2 {
                        assert_eq!(clock.deadline_at_for_reset(at), clock.deadline_at(at), "{tick:?} at {at:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn division_by_the_tick_is_exact() {
    let ticks = [1, 2, 3, 7, 10_000, 999_983, 1_000_000, 1 << 32, 3_600_000_000_000, u64::MAX / 3, u64::MAX];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for &d in &ticks {
        let clock = Clock::new(Instant::now(), Duration::from_nanos(d));
        let check = |n: u64| {
            assert_eq!(clock.div(n), n / d, "{n} / {d}");
            assert_eq!(clock.div_ceil(n), n.div_ceil(d), "⌈{n} / {d}⌉");
        };
        for n in [0, 1, d - 1, d, d.saturating_add(1), u64::MAX - 1, u64::MAX] {
            check(n);
        }
        for k in [1u64, 2, 3, 1000, 1 << 20] {
            check(d.saturating_mul(k));
            check(d.saturating_mul(k).saturating_sub(1));
        }
        for _ in 0..10_000 {
            // xorshift: values spread over every magnitude.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            check(x);
            check(x >> (x % 64));
        }
    }
}

/// Past 584 years from the start (nanoseconds beyond `u64`), `deadline_nanos` divides in 128
/// bits (`deadline_nanos_far`) and must round as the near path does: a deadline already
/// reached is the tick under way (`now`, rounded down), one ahead the first tick at or after
/// it; at a tick boundary, one nanosecond below and one above, on both sides of where the
/// far path begins (`u64::MAX`), for ticks whose count there is below `NEVER`.
#[test]
fn far_deadlines_round_as_near_ones() {
    for tick in [1_000_000_000u64, 3_600_000_000_000, 999_999_937] {
        let clock = Clock::new(Instant::now(), Duration::from_nanos(tick));
        let t = u128::from(tick);
        let first_far = u128::from(u64::MAX) + 1;
        // Tick boundaries around where the far path begins, and far beyond it.
        for k in [first_far / t, first_far / t + 1, first_far / t + 2, 5 * first_far / t] {
            let boundary = k * t;
            for now in [boundary - 1, boundary, boundary + 1] {
                // Reached: at `now`, and before it.
                for deadline in [now, now - 1, 0] {
                    let want = u64::try_from(now / t).unwrap().min(NEVER);
                    assert_eq!(
                        clock.deadline_nanos(now, deadline),
                        want,
                        "tick {tick}: now {now}, deadline {deadline}"
                    );
                }
                // Ahead: one nanosecond and a whole tick after `now`.
                for deadline in [now + 1, now + t] {
                    let want = u64::try_from(deadline.div_ceil(t)).unwrap().min(NEVER);
                    assert_eq!(
                        clock.deadline_nanos(now, deadline),
                        want,
                        "tick {tick}: now {now}, deadline {deadline}"
                    );
                }
            }
        }
        assert!(u64::try_from(5 * first_far / t).unwrap() < NEVER, "the counts checked are below NEVER");
    }
}

/// `floor` (the tick now, and the embedded wheel's `tick_at`) past 584 years from the start,
/// where the nanoseconds no longer fit in 64 bits: the tick that began last, as near an
/// instant: one nanosecond below a tick boundary, at it and above it, on both sides of where
/// the far path begins.
#[test]
fn far_instants_floor_as_near_ones() {
    for tick in [1_000_000_000u64, 3_600_000_000_000, 999_999_937] {
        let start = Instant::now();
        let clock = Clock::new(start, Duration::from_nanos(tick));
        let t = u128::from(tick);
        let first_far = u128::from(u64::MAX) + 1;
        for k in [first_far / t, first_far / t + 1, 5 * first_far / t] {
            for nanos in [k * t - 1, k * t, k * t + 1] {
                let at = start
                    + Duration::new(u64::try_from(nanos / 1_000_000_000).unwrap(), (nanos % 1_000_000_000) as u32);
                let want = u64::try_from(nanos / t).unwrap().min(NEVER);
                assert_eq!(clock.tick_at(at), want, "tick {tick}: {nanos} ns from the start");
            }
        }
    }
}

#[test]
fn saturates_to_never() {
    let clock = Clock::new(Instant::now(), Duration::from_micros(10));
    assert_eq!(clock.deadline_after(Duration::MAX), NEVER);
    let coarse = Clock::new(Instant::now(), Duration::from_secs(3600));
    assert!(coarse.instant_of(NEVER) > Instant::now() + Duration::from_secs(1 << 40));
    let far = clock.instant_of(NEVER);
    assert!(far > Instant::now());
    assert!(clock.until(NEVER) > Duration::from_secs(1 << 40));
}

/// `deadline_after` (the TSC estimate, where there is one) against `Instant::now()` read
/// before and after it: a deadline's tick begins at or after `before + delay`, and
/// within a tick and the estimate's lead (`tsc::lead_bound`) of `after + delay`. On the
/// smallest tick, over half a second (past the estimate's calibration).
#[test]
fn deadlines_from_a_delay_are_never_early() {
    let tick = Duration::from_micros(10);
    let clock = Clock::new(Instant::now(), tick);
    let end = Instant::now() + Duration::from_millis(500);
    // Not zero: a zero delay is the tick under way (see `deadline_nanos`).
    let mut delay = Duration::from_nanos(1);
    while Instant::now() < end {
        let before = Instant::now();
        let at = clock.instant_of(clock.deadline_after(delay));
        let after = Instant::now();
        assert!(at >= before + delay, "{delay:?}: {:?} early", (before + delay) - at);
        let late = at.saturating_duration_since(after + delay);
        // The estimate's lead at this machine's rate once calibrated (zero before, and where
        // there is no estimate).
        let lead = Duration::from_nanos(tsc::lead_bound());
        assert!(late <= tick + lead.max(Duration::from_micros(1)), "{delay:?}: {late:?} late");
        delay = Duration::from_nanos((delay.as_nanos() as u64 + 7_919) % 50_000_000 + 1);
    }
    let (paused, _) = Clock::paused(Instant::now(), tick);
    assert!(paused.fast.is_none(), "a paused clock reads its own time");
    assert_eq!(paused.deadline_after(Duration::from_micros(25)), 3);
}

/// A zero delay is the tick under way, read from `Instant::now()`; any other delay counts
/// from the estimate where there is one. A clock whose estimate runs 5 ms ahead (its offset
/// taken 5 ms before its start) shows which was read: the zero delay's tick does not move
/// with it, a delay's does. Where there is no estimate both read `Instant::now()`.
#[test]
fn a_zero_delay_reads_the_real_clock_and_any_other_the_estimate() {
    let tick = Duration::from_micros(10);
    let lead = Duration::from_millis(5);
    let delay = Duration::from_millis(1);
    let start = Instant::now();
    let ahead = start.checked_sub(lead).and_then(tsc::offset);
    let clock = Clock { fast: ahead, ..Clock::new(start, tick) };
    for round in 0..3 {
        let before = Instant::now();
        let zero = clock.deadline_after(Duration::ZERO);
        let after = Instant::now();
        assert!(
            (clock.floor(before)..=clock.floor(after) + 1).contains(&zero),
            "round {round}: a zero delay's tick {zero} is not now's ({}..={})",
            clock.floor(before),
            clock.floor(after) + 1
        );
        let before = Instant::now();
        let later = clock.deadline_after(delay);
        let after = Instant::now();
        // The estimate's own lead over the real now at this machine's rate (zero where
        // there is none), as in `deadlines_from_a_delay_are_never_early`.
        let slack = Duration::from_nanos(tsc::lead_bound()).max(Duration::from_micros(1));
        let (from, to) = match ahead {
            Some(_) => (before + lead + delay, after + lead + delay + slack),
            None => (before + delay, after + delay),
        };
        assert!(
            (clock.floor(from)..=clock.floor(to) + 1).contains(&later),
            "round {round}: a {delay:?} delay's tick {later} is not {}..={} (estimate: {})",
            clock.floor(from),
            clock.floor(to) + 1,
            ahead.is_some()
        );
        // The embedded wheel's read (`real_nanos_for_delay`, which counts the delay itself)
        // chooses alike.
        let before = clock.nanos_at(Instant::now());
        let zero = clock.real_nanos_for_delay(Duration::ZERO);
        let after = clock.nanos_at(Instant::now());
        assert!((before..=after).contains(&zero), "round {round}: {zero} ns for a zero delay, not {before}..={after}");
        let before = clock.nanos_at(Instant::now());
        let read = clock.real_nanos_for_delay(delay);
        let after = clock.nanos_at(Instant::now());
        let (from, to) = match ahead {
            Some(_) => (before + lead.as_nanos() as u64, after + (lead + slack).as_nanos() as u64),
            None => (before, after),
        };
        assert!((from..=to).contains(&read), "round {round}: {read} ns for {delay:?}, not {from}..={to}");
    }
}

#[test]
fn past_instants_are_due_now() {
    let clock = Clock::new(Instant::now(), Duration::from_millis(1));
    let before = Instant::now().checked_sub(Duration::from_secs(1));
    if let Some(before) = before {
        assert_eq!(clock.deadline_at(before), 0);
    }
    let now = Instant::now();
    assert!(clock.deadline_at(now) <= clock.now_tick() + 1, "by the next tick boundary");
}

/// A zero delay is the tick under way, read from `Instant::now()`: never a tick that a later
/// read of `Instant::now()` has not reached. The TSC estimate, which a delay that is not zero
/// counts from (never behind `Instant::now()`, so never early), may be ahead of it by tens of
/// microseconds: counted from the estimate, a zero delay would be the next tick whenever a
/// tick boundary fell in between, which a 100 ns tick makes most of the time. The same for
/// each of the three ways a deadline is counted from a delay. (Where the estimate is not
/// ahead of a later read, as on the 2-core VM of 2026-11-30, 40 to 391 ns behind it over
/// 20,000 reads, counting a zero delay from it would pass too: `.cargo/mutants.toml`.)
#[test]
fn a_zero_delay_is_never_a_tick_a_later_read_has_not_reached() {
    let clock = Clock::new(Instant::now(), Duration::from_nanos(100));
    for _ in 0..20_000 {
        let tick = clock.deadline_after(Duration::ZERO);
        let (at, exact_tick) = clock.deadline_after_exact(Duration::ZERO, Duration::from_secs(60));
        let nanos = clock.real_nanos_for_delay(Duration::ZERO);
        let later = clock.nanos_at(Instant::now());
        let later_tick = clock.tick_at(Instant::now());
        assert!(tick <= later_tick, "deadline_after: tick {tick}, a later read's {later_tick}");
        assert!(exact_tick <= later_tick, "deadline_after_exact: tick {exact_tick}, a later read's {later_tick}");
        assert!(at <= later, "deadline_after_exact: {at} ns, a later read's {later}");
        assert!(nanos <= later, "real_nanos_for_delay: {nanos} ns, a later read's {later}");
    }
}
