//! The estimate's pure parts, and the module's proof checked in place on this machine (the
//! simulated kernel, `sim.rs`, checks it at every rate the kernel allows).

use super::estimate::{Anchor, OFF, Platform, Process, UNCALIBRATED, renew, scale_of, start, window_of};
use super::*;
use std::time::Duration;

const NS_PER_CYCLE: u64 = 1 << 32;

#[test]
fn the_scale_is_an_upper_bound_raised_by_the_margin() {
    // 1 s over 3 × 10⁹ cycles: a 3 GHz TSC, 1/3 ns per cycle.
    let mult = scale_of(1_000_000_000, 3_000_000_000);
    let exact = (1u128 << 32) as f64 / 3.0;
    let raised = exact * 13.0 / 8.0;
    assert!(mult as f64 >= raised, "{mult} below {raised}");
    assert!((mult as f64) < raised + 6.0, "{mult} more than rounding above {raised}");
    // Exactly, in integers, over calibrations of 20 ms to an hour (a thread may first renew
    // long after the first pair) at 1 to 5 GHz: `mult / 2³²` is at least the measured rate
    // times 13/8, the raw clock's rounding included (the time it measured may be a
    // nanosecond more than it read), however many cycles make each rounding unit small.
    for seconds in [0.02, 1.0, 10.0, 100.0, 3600.0] {
        for ghz in [1.0, 3.0, 5.0] {
            let (nanos, cycles) = ((seconds * 1e9) as u64, (seconds * 1e9 * ghz) as u64);
            let mult = u128::from(scale_of(nanos, cycles));
            assert!(
                mult * u128::from(cycles) * 8 >= (u128::from(nanos + 1) << 32) * 13,
                "{seconds} s at {ghz} GHz: {mult} below the rate times 13/8"
            );
        }
    }
    // The margin is above the 60.1 % the kernel allows, and the skew is 2 µs at that rate.
    assert!(mult as f64 >= exact * 1.601 * 1.01);
    assert!(SKEW_NANOS as f64 >= EARLY_NANOS as f64 * 1.601, "{SKEW_NANOS}");
    // Rates no TSC has, and a TSC that did not move or went back.
    assert_eq!(scale_of(1_000_000_000, 0), OFF);
    assert_eq!(scale_of(1_000_000_000, u64::MAX - 5), OFF);
    assert_eq!(scale_of(u64::MAX - 5, 1_000_000_000), OFF, "a raw clock that went back");
    assert_eq!(scale_of(1_000_000_000, 10_000_000), OFF, "100 ns per cycle");
    assert_eq!(scale_of(1_000_000, 1_000_000_000), OFF, "1 ps per cycle");
    assert_ne!(scale_of(1_000_000_000, 1_000_000_000), OFF);
    // The counts' own limit, half the word (a difference past it is a counter that went
    // back): at it, a rate of 1 ns per cycle is taken; one above it, in either count, not.
    let half = u64::MAX / 2;
    assert_ne!(scale_of(half, half), OFF, "both counts at the limit");
    assert_eq!(scale_of(half, half + 1), OFF, "the TSC count past the limit");
    assert_eq!(scale_of(half + 1, half), OFF, "the raw clock's count past the limit");
}

/// A platform whose TSC and clocks read what the test set.
struct Fixed {
    tsc: std::cell::Cell<u64>,
    monotonic: std::cell::Cell<u64>,
    anchor: std::cell::Cell<Anchor>,
    process: Process,
}

impl Platform for Fixed {
    fn read(&self) -> u64 {
        self.tsc.get()
    }
    fn read_before(&self) -> u64 {
        self.tsc.get()
    }
    fn read_after(&self) -> u64 {
        self.tsc.get()
    }
    fn monotonic(&self) -> Option<u64> {
        Some(self.monotonic.get())
    }
    fn raw(&self) -> Option<u64> {
        Some(self.monotonic.get())
    }
    fn anchor(&self) -> Anchor {
        self.anchor.get()
    }
    fn set_anchor(&self, anchor: Anchor) {
        self.anchor.set(anchor);
    }
    fn process(&self) -> &Process {
        &self.process
    }
}

/// A renewal checks the old anchor against the kernel's clock: the estimate is off (for the
/// process) only if the old anchor's estimate fell behind the clock, not if it meets it
/// exactly (an upper bound may equal what it bounds), nor if it is ahead.
#[test]
fn a_renewal_turns_the_estimate_off_only_if_the_old_anchor_fell_behind() {
    for (clock, off) in [(5_199, false), (5_200, false), (5_201, true)] {
        let platform = Fixed {
            tsc: std::cell::Cell::new(10),
            monotonic: std::cell::Cell::new(10),
            anchor: std::cell::Cell::new(Anchor::NONE),
            process: Process::new(),
        };
        assert!(start(&platform), "the first pair");
        platform.process.scale.store(NS_PER_CYCLE, std::sync::atomic::Ordering::Relaxed);
        // The old anchor, past its window at TSC 1,200: its estimate there is 5,200 ns.
        platform.anchor.set(Anchor { tsc: 1_000, nanos: 5_000, mult: NS_PER_CYCLE, window: 100, floor: 0 });
        platform.tsc.set(1_200);
        platform.monotonic.set(clock);
        assert_eq!(renew(&platform), Some(clock.max(5_099)), "the clock, or the old anchor's most");
        let scale = platform.process.scale.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(scale == OFF, off, "the clock at {clock} against an estimate of 5,200");
        assert_eq!(platform.anchor().window == 0, off, "a new anchor unless off");
    }
}

/// The first pair is taken only where the TSC is usable: elsewhere the estimate is switched
/// off for the process, and no pair is read; where it is, the base is an instant of this
/// call and the calibration waits for its second pair.
#[test]
fn the_first_pair_is_taken_only_where_the_tsc_is_usable() {
    use std::sync::atomic::Ordering::Relaxed;
    let fixed = || Fixed {
        tsc: std::cell::Cell::new(10),
        monotonic: std::cell::Cell::new(10),
        anchor: std::cell::Cell::new(Anchor::NONE),
        process: Process::new(),
    };
    let unusable = fixed();
    assert_eq!(first_pair_on(&unusable, false), None);
    assert_eq!(unusable.process.scale.load(Relaxed), OFF, "switched off");
    assert!(unusable.process.first.get().is_none(), "no pair read");
    let usable = fixed();
    let before = std::time::Instant::now();
    let base = first_pair_on(&usable, true).expect("a narrow bracket: the first pair");
    assert!(base >= before && base <= std::time::Instant::now());
    assert_eq!(usable.process.scale.load(Relaxed), UNCALIBRATED, "calibrated by a later renewal");
    assert!(usable.process.first.get().is_some());
}

/// `Fixed`, whose next bracket (a `read_before` .. `read_after` pair) is as wide as
/// `wide` says, once: a thread interrupted between the two reads.
struct Interrupted {
    fixed: Fixed,
    wide: std::cell::Cell<u64>,
}

impl Platform for Interrupted {
    fn read(&self) -> u64 {
        self.fixed.read()
    }
    fn read_before(&self) -> u64 {
        self.fixed.read_before()
    }
    fn read_after(&self) -> u64 {
        self.fixed.read_after() + self.wide.take()
    }
    fn monotonic(&self) -> Option<u64> {
        self.fixed.monotonic()
    }
    fn raw(&self) -> Option<u64> {
        self.fixed.raw()
    }
    fn anchor(&self) -> Anchor {
        self.fixed.anchor()
    }
    fn set_anchor(&self, anchor: Anchor) {
        self.fixed.set_anchor(anchor);
    }
    fn process(&self) -> &Process {
        self.fixed.process()
    }
}

/// The calibration's second pair is taken by a renewal at `CALIBRATION_NANOS` from the
/// first, not a nanosecond sooner, and only by a renewal whose own bracket is narrow: an
/// interrupted one calibrates nothing and sets no anchor; the next, narrow, does both.
#[test]
fn a_renewal_calibrates_from_the_calibration_time_on_and_only_when_narrow() {
    use std::sync::atomic::Ordering::Relaxed;
    for (at, wide, calibrates) in [
        (CALIBRATION_NANOS - 1, 0, false),
        (CALIBRATION_NANOS, 0, true),
        (CALIBRATION_NANOS + 1, 0, true),
        (CALIBRATION_NANOS, MAX_BRACKET + 1, false),
        (CALIBRATION_NANOS, MAX_BRACKET, true),
    ] {
        let case = format!("a renewal at {at} ns, a bracket {wide} cycles wide");
        let platform = Interrupted {
            fixed: Fixed {
                tsc: std::cell::Cell::new(10),
                monotonic: std::cell::Cell::new(10),
                anchor: std::cell::Cell::new(Anchor::NONE),
                process: Process::new(),
            },
            wide: std::cell::Cell::new(0),
        };
        assert!(start(&platform), "{case}: the first pair");
        // A cycle a nanosecond, from the first pair on.
        platform.fixed.tsc.set(at);
        platform.fixed.monotonic.set(at);
        platform.wide.set(wide);
        assert_eq!(renew(&platform), Some(at), "{case}: the kernel's clock");
        let scale = platform.process().scale.load(Relaxed);
        assert_eq!(scale != UNCALIBRATED, calibrates, "{case}: calibrated");
        assert_ne!(scale, OFF, "{case}");
        assert_eq!(platform.anchor().window != 0, calibrates, "{case}: an anchor set");
        if calibrates {
            // The anchor's `I₀`: the clock, one nanosecond for the estimate's rounding down
            // and the skew above it (the proof's `+ 1 + SKEW`).
            assert_eq!(platform.anchor().nanos, at + 1 + SKEW_NANOS, "{case}: the anchor's nanoseconds");
            assert_eq!(platform.anchor().mult, scale, "{case}: the anchor's scale");
        }
        if !calibrates && at >= CALIBRATION_NANOS {
            // The next renewal, not interrupted, calibrates.
            assert_eq!(renew(&platform), Some(at));
            assert_ne!(platform.process().scale.load(Relaxed), UNCALIBRATED, "{case}: the next, narrow");
            assert_ne!(platform.anchor().window, 0);
        }
    }
}

#[test]
fn an_anchor_serves_its_window_only() {
    let anchor = Anchor { tsc: 1_000, nanos: 5, mult: NS_PER_CYCLE, window: 100, floor: 0 };
    assert_eq!(anchor.at(1_000), Some(5));
    assert_eq!(anchor.at(1_099), Some(104));
    assert_eq!(anchor.at(1_100), None, "past the window");
    assert_eq!(anchor.at(999), None, "a TSC behind the anchor (another core's)");
    assert_eq!(Anchor::NONE.at(12_345), None, "no anchor");
    // Half a nanosecond per cycle rounds down (the anchor's `+ 1` makes up for it).
    let half = Anchor { mult: NS_PER_CYCLE / 2, ..anchor };
    assert_eq!(half.at(1_003), Some(6));
    assert_eq!(anchor.at_any(1_000 + (1 << 40)), Some(5 + (1 << 40)));
    assert_eq!(anchor.at_any(999), None);
    // The floor holds the estimate up until the anchor's own count passes it.
    let floored = Anchor { floor: 50, ..anchor };
    assert_eq!(floored.at(1_000), Some(50));
    assert_eq!(floored.at(1_060), Some(65));
    assert_eq!(floored.at_any(1_000), Some(5), "the check counts without the floor");
    // The most an anchor gave by a TSC value: its estimate there, or its window's last.
    assert_eq!(anchor.most_by(1_010), 15);
    assert_eq!(anchor.most_by(5_000), 104);
    assert_eq!(anchor.most_by(10), 5, "before the anchor: its first");
    assert_eq!(floored.most_by(1_010), 50);
    assert_eq!(Anchor::NONE.most_by(5_000), 0);
}

#[test]
fn a_window_is_two_to_the_fifteen_nanoseconds_and_its_product_fits() {
    assert_eq!(window_of(NS_PER_CYCLE), 1 << 15);
    assert_eq!(window_of(NS_PER_CYCLE / 4), 1 << 17, "4 GHz");
    // The slowest and the fastest scale `scale_of` gives, and ones between.
    let slowest = scale_of(50_000_000, 1_000_000_000);
    let fastest = scale_of(9_999_999_000, 1_000_000_000);
    for mult in [slowest, NS_PER_CYCLE / 3, NS_PER_CYCLE, fastest] {
        assert_ne!(mult, OFF);
        assert!(window_of(mult) < 1 << 19, "{} cycles at {mult}", window_of(mult));
        assert!(window_of(mult).checked_mul(mult).is_some_and(|p| p <= 1 << 47));
        let span = (u128::from(window_of(mult)) * u128::from(mult)) >> 32;
        assert!((32_700..=32_768).contains(&span), "{span} ns at {mult}");
    }
}

#[test]
fn offsets_count_from_the_clocks_start() {
    let Some(base) = *BASE.get_or_init(first_pair) else { return };
    let after = offset(base + Duration::from_millis(3)).unwrap();
    assert_eq!(after.since_start(5_000_000), 2_000_000);
    assert_eq!(after.since_start(1_000_000), 0, "before the start");
    if let Some(before) = base.checked_sub(Duration::from_millis(3)) {
        assert_eq!(offset(before).unwrap().since_start(5_000_000), 8_000_000);
    }
}

/// Whether the estimate is on, and so every test below: only where the kernel's clock is
/// the TSC, and there only if the first pair's bracket was narrow (under valgrind, which
/// runs code some fifty times slower, every bracket may be wide, and the estimate stays
/// off: then the tests below check that it is off).
fn tsc_is_the_clock() -> bool {
    let tsc = std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc");
    let possible = tsc && cfg!(all(target_arch = "x86_64", target_os = "linux")) && cpu_has_invariant_tsc();
    let on = BASE.get_or_init(first_pair).is_some();
    assert!(possible || !on, "the TSC estimate is on where the kernel's clock is not the TSC");
    if possible && !on {
        eprintln!("the TSC estimate gave up: the first pair's brackets were all wide");
    }
    on
}

fn since_base(at: Instant) -> u64 {
    at.saturating_duration_since(BASE.get().unwrap().unwrap()).as_nanos() as u64
}

/// The module's proof, checked in place: no estimate is below `Instant::now()` read just
/// before it, nor more than the lateness bound (at this machine's rate, within 2.5 % of the
/// nominal one) above one read just after it; and one thread's estimates never go back; on
/// four threads at once, over a second (tens of thousands of anchors each), after the
/// calibration.
#[test]
fn never_behind_instant() {
    if !tsc_is_the_clock() {
        assert_eq!(now(), None);
        return;
    }
    let calibrated = Instant::now() + Duration::from_secs(2);
    while PROCESS.scale.load(Ordering::Acquire) == UNCALIBRATED {
        assert!(now().is_some());
        assert!(Instant::now() < calibrated, "calibrated within 2 s");
    }
    assert!(renew(&Cpu).is_some());
    let mult = PROCESS.scale.load(Ordering::Acquire);
    // 1 + the skew + the widest bracket at the fastest rate + 40 % of a window (the lead a
    // window gathers at a rate within 2.5 % of the nominal one: 1 − 1/1.625 is 38.5 %).
    let bound = lead_bound();
    eprintln!("scale {} ns per cycle, lead bound {bound} ns", mult as f64 / (1u64 << 32) as f64);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let end = Instant::now() + Duration::from_secs(1);
                let (mut reads, mut fast_reads, mut worst_ahead, mut min_lead) = (0u64, 0u64, 0u64, u64::MAX);
                let mut last = 0;
                loop {
                    let anchor = Cpu.anchor();
                    let before = Instant::now();
                    let estimate = now().expect("the estimate stays on");
                    let fast = anchor.window != 0 && Cpu.anchor() == anchor;
                    let after = Instant::now();
                    assert!(estimate >= since_base(before), "{estimate} behind {before:?}");
                    assert!(estimate >= last, "{estimate} went back from {last}");
                    last = estimate;
                    let ahead = estimate.saturating_sub(since_base(after));
                    if fast {
                        fast_reads += 1;
                        min_lead = min_lead.min(estimate - since_base(before));
                    }
                    assert!(ahead <= bound, "{ahead} ns ahead of Instant::now(), over {bound}");
                    worst_ahead = worst_ahead.max(ahead);
                    reads += 1;
                    if after > end {
                        eprintln!("{reads} reads, {fast_reads} from an anchor: least lead over before {min_lead} ns, most ahead of after {worst_ahead} ns (bound {bound})");
                        return (reads, fast_reads);
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        let (reads, fast_reads) = thread.join().unwrap();
        assert!(reads > 1_000, "{reads} reads");
        assert!(fast_reads > reads / 2, "{fast_reads} of {reads} reads from an anchor");
    }
    assert_ne!(PROCESS.scale.load(Ordering::Acquire), OFF, "the check never found the estimate behind");
}

/// `usable`'s decision as a function of its inputs: the TSC is used only when not under
/// Miri, with an invariant TSC, and with the kernel's clocksource `tsc` (the sysfs line,
/// newline and all); each condition false, alone or with others, says no. An input after
/// one that said no is not asked for: no CPUID under Miri, no read of the file without an
/// invariant TSC.
#[test]
fn the_tsc_is_used_only_when_all_three_conditions_hold() {
    let sources =
        [("tsc\n", true), ("tsc", true), ("hpet\n", false), ("acpi_pm\n", false), ("", false), ("tsc hpet\n", false)];
    for miri in [false, true] {
        for invariant in [false, true] {
            for readable in [false, true] {
                for (text, is_tsc) in sources {
                    let (asked, read) = (Cell::new(false), Cell::new(false));
                    let cpu = || {
                        asked.set(true);
                        invariant
                    };
                    let file = || {
                        read.set(true);
                        if readable { Ok(text.to_string()) } else { Err(std::io::ErrorKind::NotFound.into()) }
                    };
                    let case =
                        format!("miri {miri}, invariant TSC {invariant}, clocksource {:?}", readable.then_some(text));
                    assert_eq!(usable_given(miri, cpu, file), !miri && invariant && readable && is_tsc, "{case}");
                    assert_eq!(asked.get(), !miri, "{case}: CPUID asked");
                    assert_eq!(read.get(), !miri && invariant, "{case}: the clocksource read");
                }
            }
        }
    }
}

/// CPUID's invariant-TSC bit, as the kernel reads it: on Intel and AMD CPUs Linux sets
/// `nonstop_tsc` in `/proc/cpuinfo` from that bit and from nothing else (`early_init_intel`,
/// `early_init_amd`), so the two agree, whichever this CPU says. Elsewhere (another vendor,
/// a guest whose user-space CPUID is not the kernel's) the test says nothing; under
/// valgrind, which answers CPUID from a model of its own, `.ci/valgrind.sh` skips it.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn the_invariant_tsc_bit_is_the_one_the_kernel_reads() {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else { return };
    let field = |name: &str| info.lines().find(|l| l.starts_with(name)).map(str::to_owned);
    let (Some(vendor), Some(flags)) = (field("vendor_id"), field("flags")) else { return };
    if !vendor.ends_with("GenuineIntel") && !vendor.ends_with("AuthenticAMD") {
        return;
    }
    let nonstop = flags.split_whitespace().any(|f| f == "nonstop_tsc");
    assert_eq!(cpu_has_invariant_tsc(), nonstop, "CPUID against /proc/cpuinfo's nonstop_tsc");
}

/// The invariant-TSC bit read from CPUID's answers, whatever this CPU says: bit 8 of EDX
/// alone, and only where the highest extended leaf reaches 0x8000_0007 (at, below and above
/// it), leaf 0x8000_0007 not asked for otherwise.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn the_invariant_tsc_bit_is_bit_8_of_a_leaf_the_cpu_has() {
    use arch::reports_invariant_tsc;
    let bit = 1u32 << 8;
    for (max_leaf, edx, invariant) in [
        (0x8000_0007, bit, true),
        (0x8000_0008, u32::MAX, true),
        (0x8000_0007, !bit, false),
        (0x8000_0008, 0, false),
        (0x8000_0007, bit << 1, false),
        (0x8000_0007, bit >> 1, false),
    ] {
        assert_eq!(reports_invariant_tsc(max_leaf, || edx), invariant, "max leaf {max_leaf:#x}, EDX {edx:#x}");
    }
    let asked = Cell::new(false);
    let edx = || {
        asked.set(true);
        u32::MAX
    };
    assert!(!reports_invariant_tsc(0x8000_0006, edx), "a leaf past the highest");
    assert!(!asked.get(), "a leaf past the highest is not asked for");
}

/// The CPU's three reads of the TSC (`read`, `read_before`, `read_after`, as the estimate
/// makes them: `Cpu`'s, which are `arch`'s), on any x86_64
/// Linux whatever its clocksource: each counts cycles at a rate a TSC has (`scale_of`
/// takes it, against `CLOCK_MONOTONIC_RAW` over 20 ms), and `read_before` then
/// `read_after` bracket a kernel read in order, as an anchor's bracket does. An estimate
/// would also check them, but where its first pair's brackets are all wide it gives up
/// quietly (see `tsc_is_the_clock`): this checks the reads themselves.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn each_read_of_the_tsc_counts_at_a_tsc_s_rate_and_brackets_in_order() {
    type Read = fn(&Cpu) -> u64;
    let reads: [(&str, Read); 3] =
        [("read", Cpu::read), ("read_before", Cpu::read_before), ("read_after", Cpu::read_after)];
    for (name, read) in reads {
        let (raw0, t0) = (Cpu.raw().unwrap(), read(&Cpu));
        std::thread::sleep(Duration::from_millis(20));
        let (t1, raw1) = (read(&Cpu), Cpu.raw().unwrap());
        let (nanos, cycles) = (raw1 - raw0, t1.wrapping_sub(t0));
        assert_ne!(scale_of(nanos, cycles), OFF, "{name}: {cycles} cycles in {nanos} ns is no TSC's rate");
    }
    for _ in 0..8 {
        let (before, raw, after) = (Cpu.read_before(), Cpu.raw(), Cpu.read_after());
        assert!(raw.is_some());
        assert!(before <= after, "read_before {before} after read_after {after}");
    }
}
