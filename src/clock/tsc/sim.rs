//! The estimate driven by a simulated kernel: a fake TSC, a fake `CLOCK_MONOTONIC_RAW` (the
//! TSC times a fixed rate) and a fake `CLOCK_MONOTONIC` whose rate over the raw one the test
//! moves at any moment, by anything the kernel allows (±10 % of tick, ±500 ppm of frequency,
//! the PLL's phase correction up to ±50 % under PPS; ±60.1 % in all) and, to see the check
//! work, by more. Each simulated thread has its own anchor; all share one `Process`. A caller
//! reads the simulated kernel, then asks for an estimate, whose plain TSC read may run ahead
//! of that reading by up to the CPU's bound ([`EARLY_NANOS`] of the TSC's time), as an
//! out-of-order `rdtsc` may. The assertions are the module's claims: never behind the
//! reading taken before, ahead by no more than the bound, never back on one thread.

use super::estimate::{Anchor, OFF, Platform, Process, UNCALIBRATED, estimate, start};
use super::{EARLY_NANOS, MAX_BRACKET, SKEW_NANOS, WINDOW_NANOS};
use crate::sync::plain::Ordering;
use proptest::prelude::*;
use std::cell::Cell;

/// The most the kernel moves `CLOCK_MONOTONIC`'s rate from the raw one, in ppm: a tick of
/// ±10 %, a frequency of ±500 ppm, the PLL's phase correction under PPS of ±50 %, `adjtime`'s
/// ±500 ppm (see the module's docs).
const KERNEL_PPM: i64 = 100_000 + 500 + 500_000 + 500;

/// Cycles a plain TSC read takes, and a clock read (the vDSO's).
const READ_CYCLES: u64 = 25;
const CLOCK_CYCLES: u64 = 70;

/// The simulated TSC and kernel clocks. `CLOCK_MONOTONIC` is kept as the kernel keeps it:
/// a base at the TSC value of the last rate change, in nanoseconds × 2³², plus the cycles
/// since times the current rate, read rounded down; so it is continuous, and changes rate
/// exactly where the test says.
#[derive(Debug)]
struct Kernel {
    /// The TSC now.
    now: Cell<u64>,
    /// Raw nanoseconds per cycle × 2³².
    raw_mult: u64,
    /// The current segment of `CLOCK_MONOTONIC`: its first TSC value, its value there
    /// (× 2³²) and its rate (nanoseconds per cycle × 2³²).
    since: Cell<u64>,
    base: Cell<u128>,
    rate: Cell<u128>,
    /// Extra cycles the next clock read takes (a preempted bracket).
    slow: Cell<u64>,
}

impl Kernel {
    /// A kernel whose TSC runs at `ghz_tenths`/10 GHz, at `ppm` from the raw rate.
    fn new(ghz_tenths: u64, ppm: i64) -> Kernel {
        let raw_mult = ((10u128 << 32) / u128::from(ghz_tenths)) as u64;
        let kernel = Kernel {
            // Not zero: the estimator must not care where the counter started.
            now: Cell::new(7_000_000_000),
            raw_mult,
            since: Cell::new(7_000_000_000),
            base: Cell::new(0),
            rate: Cell::new(0),
            slow: Cell::new(0),
        };
        kernel.set_ppm(ppm);
        kernel
    }

    fn pass(&self, cycles: u64) {
        self.now.set(self.now.get() + cycles);
    }

    fn monotonic_fixed(&self) -> u128 {
        self.base.get() + u128::from(self.now.get() - self.since.get()) * self.rate.get()
    }

    /// `CLOCK_MONOTONIC` now, in nanoseconds since the base.
    fn monotonic(&self) -> u64 {
        (self.monotonic_fixed() >> 32) as u64
    }

    /// From now on, `CLOCK_MONOTONIC` runs at `ppm` from the raw rate.
    fn set_ppm(&self, ppm: i64) {
        self.base.set(self.monotonic_fixed());
        self.since.set(self.now.get());
        let rate = i128::from(self.raw_mult) * i128::from(1_000_000 + ppm) / 1_000_000;
        self.rate.set(rate as u128);
    }

    /// [`EARLY_NANOS`] in cycles: the most a plain read runs ahead.
    fn early_cycles(&self) -> u64 {
        ((u128::from(EARLY_NANOS) << 32) / u128::from(self.raw_mult)) as u64
    }
}

/// A simulated thread: its anchor, and how early its next plain read runs.
#[derive(Debug)]
struct Thread<'a> {
    kernel: &'a Kernel,
    process: &'a Process,
    anchor: Cell<Anchor>,
    early: Cell<u64>,
    /// The latest TSC value this thread read in order (plain reads, and reads before an
    /// `lfence`): a later plain read is not below it.
    last: Cell<u64>,
    /// The latest estimate, to check that none goes back.
    estimated: Cell<u64>,
}

impl Platform for Thread<'_> {
    fn read(&self) -> u64 {
        let k = self.kernel;
        let t = k.now.get().saturating_sub(self.early.get()).max(self.last.get());
        self.last.set(t);
        k.pass(READ_CYCLES);
        t
    }

    fn read_before(&self) -> u64 {
        let t = self.kernel.now.get();
        self.last.set(t);
        self.kernel.pass(READ_CYCLES);
        t
    }

    fn read_after(&self) -> u64 {
        let t = self.kernel.now.get();
        self.kernel.pass(READ_CYCLES);
        t
    }

    fn monotonic(&self) -> Option<u64> {
        let k = self.kernel;
        k.pass(CLOCK_CYCLES / 2 + k.slow.replace(0));
        let now = k.monotonic();
        k.pass(CLOCK_CYCLES / 2);
        Some(now)
    }

    fn raw(&self) -> Option<u64> {
        let k = self.kernel;
        k.pass(CLOCK_CYCLES / 2 + k.slow.replace(0));
        let raw = ((u128::from(k.now.get()) * u128::from(k.raw_mult)) >> 32) as u64;
        k.pass(CLOCK_CYCLES / 2);
        Some(raw + 123_456_789)
    }

    fn anchor(&self) -> Anchor {
        self.anchor.get()
    }

    fn set_anchor(&self, anchor: Anchor) {
        self.anchor.set(anchor);
    }

    fn process(&self) -> &Process {
        self.process
    }
}

impl<'a> Thread<'a> {
    fn new(kernel: &'a Kernel, process: &'a Process) -> Thread<'a> {
        Thread {
            kernel,
            process,
            anchor: Cell::new(Anchor::NONE),
            early: Cell::new(0),
            last: Cell::new(0),
            estimated: Cell::new(0),
        }
    }

    /// A caller's read of the kernel, then an estimate whose plain read runs `early` cycles
    /// ahead (at most the CPU's bound): the reading, the estimate, and the kernel's time
    /// just after it.
    fn call(&self, early: u64) -> (u64, Option<u64>, u64) {
        let k = self.kernel;
        let before = k.monotonic();
        k.pass(CLOCK_CYCLES);
        self.early.set(early.min(k.early_cycles()));
        let estimate = estimate(self);
        (before, estimate, k.monotonic())
    }

    /// [`Thread::call`], checked against the module's claims: `Err` says which failed.
    fn checked_call(&self, early: u64) -> Result<Option<u64>, String> {
        let (before, estimate, after) = self.call(early);
        let Some(estimate) = estimate else { return Ok(None) };
        if estimate < before {
            return Err(format!("{estimate} behind the kernel's {before} by {} ns", before - estimate));
        }
        let bound = ahead_bound(self.process);
        if estimate > after + bound {
            return Err(format!("{estimate} ahead of the kernel's {after} by {} ns, over {bound}", estimate - after));
        }
        if estimate < self.estimated.get() {
            return Err(format!("{estimate} went back from {}", self.estimated.get()));
        }
        self.estimated.set(estimate);
        Ok(Some(estimate))
    }
}

/// The module's bound on the lead: 1 + the skew + the widest bracket at the fastest rate +
/// 76 % of a window (`1 − 0.399/1.625`, and the calibration's error).
fn ahead_bound(process: &Process) -> u64 {
    let mult = process.scale.load(Ordering::Relaxed);
    let bracket = if mult == OFF || mult == UNCALIBRATED { 0 } else { (MAX_BRACKET * mult) >> 32 };
    1 + SKEW_NANOS + bracket + WINDOW_NANOS * 76 / 100
}

/// Starts the estimate on `thread` and runs it through the calibration (20 ms of the
/// simulated kernel, at whatever rate it runs), checking every answer.
fn calibrate(thread: &Thread<'_>) -> Result<(), String> {
    assert!(start(thread), "a first pair");
    let process = thread.process;
    for _ in 0..100 {
        thread.checked_call(0)?;
        if process.scale.load(Ordering::Relaxed) != UNCALIBRATED {
            return Ok(());
        }
        thread.kernel.pass(thread.kernel.early_cycles() * 1_000);
    }
    Err("no calibration in 100 calls".into())
}

/// One step of a schedule: which of two threads calls, the cycles before it, how early its
/// read runs (in 1/256ths of the CPU's bound), and a new rate (ppm from raw) set at a
/// moment within the gap, or none.
#[derive(Clone, Copy, Debug)]
struct Step {
    thread: bool,
    gap: u64,
    early: u8,
    ppm: Option<(i64, u64)>,
    slow: bool,
}

/// Runs `steps` on a kernel at `ghz_tenths`, calibrated at `ppm`: the claims at every call.
fn run(ghz_tenths: u64, ppm: i64, steps: &[Step]) -> Result<(), String> {
    let kernel = Kernel::new(ghz_tenths, ppm);
    let process = Process::new();
    let threads = [Thread::new(&kernel, &process), Thread::new(&kernel, &process)];
    calibrate(&threads[0])?;
    for (i, step) in steps.iter().enumerate() {
        match step.ppm {
            Some((ppm, within)) => {
                let within = within % (step.gap + 1);
                kernel.pass(within);
                kernel.set_ppm(ppm);
                kernel.pass(step.gap - within);
            }
            None => kernel.pass(step.gap),
        }
        if step.slow {
            // A bracket the thread was interrupted in: wider than `MAX_BRACKET`.
            kernel.slow.set(2 * MAX_BRACKET);
        }
        let early = kernel.early_cycles() * u64::from(step.early) / 255;
        let thread = &threads[usize::from(step.thread)];
        let answer = thread.checked_call(early).map_err(|e| format!("step {i} ({step:?}): {e}"))?;
        if answer.is_none() {
            return Err(format!("step {i}: the estimate went off at a rate the kernel allows"));
        }
    }
    Ok(())
}

/// xorshift.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Rates the kernel allows, at their edges: nominal, the tick's ±10 % with the frequency's
/// ±500 ppm, chrony's largest slew, the PLL's phase correction at its fastest (with and
/// without PPS), and everything at once.
const RATES: [i64; 13] =
    [0, 500, -500, 100_500, -100_500, 83_333, -83_333, 226_000, -226_000, 500_000, -500_000, KERNEL_PPM, -KERNEL_PPM];

/// The case and more: two threads, the rate moved among the kernel's extremes at
/// arbitrary moments (mid-window, just after an anchor, just before one), calls at every
/// spacing from back to back to idle for many windows, reads early by anything up to the
/// CPU's bound, now and then a bracket too wide to anchor; on TSCs of 1, 2.5 and 4 GHz,
/// calibrated while the kernel runs at either extreme. Never behind, never further ahead than
/// the bound, never back.
#[test]
fn never_behind_a_kernel_that_slews_at_any_moment() {
    let mut x = 0x9E37_79B9_7F4A_7C15;
    for (ghz_tenths, calibrated_at) in [(10, 0), (25, -KERNEL_PPM), (25, KERNEL_PPM), (40, -100_500), (30, 100_500)] {
        let mut steps = Vec::with_capacity(200_000);
        for _ in 0..200_000 {
            let r = next(&mut x);
            // Mostly within a window (some 30 µs), sometimes back to back, sometimes idle.
            let gap = match r % 16 {
                0 => 0,
                1 => r >> 40,
                2..=12 => (r >> 20) % 4_000,
                _ => (r >> 20) % 60_000,
            };
            let ppm = (r % 5 == 0).then(|| (RATES[((r >> 8) % RATES.len() as u64) as usize], r >> 33));
            steps.push(Step { thread: r & (1 << 7) != 0, gap, early: (r >> 12) as u8, ppm, slow: r % 97 == 0 });
        }
        run(ghz_tenths, calibrated_at, &steps).unwrap();
    }
}

/// The skew, checked where it is needed: a read as early as the CPU's bound allows, just
/// after a new anchor (where the estimate's lead over the kernel is least), with the kernel
/// at its fastest. The estimate there is a few nanoseconds clear of the kernel; a skew that
/// does not count the rate (2 µs flat) or none at all falls behind.
#[test]
fn an_early_read_at_the_fastest_rate_is_covered_by_the_skew() {
    for ghz_tenths in [10, 30] {
        let kernel = Kernel::new(ghz_tenths, 0);
        let process = Process::new();
        let thread = Thread::new(&kernel, &process);
        calibrate(&thread).unwrap();
        kernel.set_ppm(KERNEL_PPM);
        let early = kernel.early_cycles();
        let mut least = u64::MAX;
        for lag in 0..400 {
            // A new anchor, then a call whose read runs back to the anchor's own TSC value.
            kernel.pass(1 << 20);
            thread.checked_call(0).unwrap();
            let anchor = thread.anchor.get();
            assert_ne!(anchor.window, 0, "anchored");
            kernel.pass((anchor.tsc + early + lag).saturating_sub(kernel.now.get() + CLOCK_CYCLES));
            let (before, estimate, _) = thread.call(early);
            let estimate = estimate.unwrap();
            assert!(estimate >= before, "{} ns behind at {} GHz, {lag} cycles", before - estimate, ghz_tenths / 10);
            least = least.min(estimate - before);
        }
        // The edge: what is left is the anchor's bracket and the caller's own clock read,
        // under 300 ns; a flat 2 µs skew takes 1,250 ns off.
        assert!(least < 300, "the test reached the skew's edge: {least} ns to spare");
    }
}

/// A failed check (the kernel's clock gaining on the TSC faster than any rate it allows, as
/// it can once it is not the TSC's: a clocksource switched away from a TSC that runs slow
/// against the new one) switches the estimate off for the whole process: a thread that takes
/// its first anchor after the check failed elsewhere gets none, and the thread that found it
/// gets no new one. Were it this thread's anchor alone, the other would anchor at the
/// failed scale and fall behind within its window.
#[test]
fn a_failed_check_switches_the_estimate_off_for_every_thread() {
    let kernel = Kernel::new(30, 0);
    let process = Process::new();
    let (a, b) = (Thread::new(&kernel, &process), Thread::new(&kernel, &process));
    calibrate(&a).unwrap();
    kernel.pass(1 << 20);
    a.checked_call(0).unwrap();
    assert_ne!(a.anchor.get().window, 0, "anchored");
    // 2.5 times the raw rate: past the margin's 1.625.
    kernel.set_ppm(1_500_000);
    // Until the check fails on `a`: its anchor dropped at its next renewal.
    let mut calls = 0;
    while a.anchor.get() != Anchor::NONE {
        let _ = a.call(0);
        kernel.pass(1_000);
        calls += 1;
        assert!(calls < 1_000, "the check failed within a window and a call");
    }
    // From here on, both threads: never behind, over many windows.
    for _ in 0..10_000 {
        for thread in [&b, &a] {
            let (before, estimate, _) = thread.call(0);
            if let Some(estimate) = estimate {
                assert!(estimate >= before, "{} ns behind after the check failed", before - estimate);
            }
        }
        kernel.pass(500);
    }
    assert_eq!(b.anchor.get(), Anchor::NONE, "the other thread took no anchor");
    assert_eq!(process.scale.load(Ordering::Relaxed), OFF);
}

/// The module's claims over random schedules: rates anywhere in the kernel's range, changed
/// at random moments, random spacings and early reads.
fn step() -> impl Strategy<Value = Step> {
    (
        any::<bool>(),
        0u64..80_000,
        any::<u8>(),
        prop::option::weighted(0.3, (-KERNEL_PPM..=KERNEL_PPM, any::<u64>())),
        prop::bool::weighted(0.01),
    )
        .prop_map(|(thread, gap, early, ppm, slow)| Step { thread, gap, early, ppm, slow })
}

/// 64 cases unless `PROPTEST_CASES` says otherwise (CI's valgrind run asks for fewer).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn never_behind_under_random_slew_schedules(
        ghz_tenths in 5u64..50,
        calibrated_at in -KERNEL_PPM..=KERNEL_PPM,
        steps in prop::collection::vec(step(), 1..2_000),
    ) {
        let outcome = run(ghz_tenths, calibrated_at, &steps);
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}
