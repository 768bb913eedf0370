//! A cheaper "now" for deadlines: the CPU's time-stamp counter, scaled from a per-thread
//! anchor on `Instant`, and never behind `Instant::now()`.
//!
//! `schedule(delay)`, `sleep(delay)` and `Timeout::reset(delay)` must know now. `Instant::now()`
//! (the vDSO's `clock_gettime`) costs some 25 ns; `rdtsc` some 10 ns. This module estimates
//! `Instant::now()` from the TSC so that the estimate is **never below** the real now
//! (a deadline counted from it is never early) and above it by a few microseconds at most
//! (the bound below). It is used only where the TSC and `Instant` are one clock: x86_64
//! Linux whose clocksource is `tsc` (so `CLOCK_MONOTONIC` is the TSC times the kernel's
//! scale), with an invariant TSC (CPUID). Elsewhere, on a paused `TestClock`
//! and under loom, `Clock` reads `Instant::now()` as before.
//!
//! # How
//!
//! - **A process-wide scale**, `mult` (nanoseconds per TSC cycle, fixed point 32.32), measured
//!   over the first ≥ 20 ms after the first `Clock` is made (no wait, no thread: until then
//!   every estimate is a plain `Instant::now()`), taken as an upper bound of the average rate
//!   and then raised by 2⁻⁸ (3,906 ppm), so that it stays above the kernel's rate however NTP
//!   slews it (frequency ±500 ppm, `adjtime` ±500 ppm: the rate moves by 2,000 ppm at most).
//! - **A per-thread anchor** `(t₀, I₀)`: a TSC value read *before* an `Instant::now()` (an
//!   `lfence` keeps it before). It serves for one window, the TSC cycles of about 1 ms;
//!   then the next estimate takes a new anchor (one `Instant::now()` per thread per
//!   millisecond at most). A thread that moved to another core keeps its anchor: the kernel
//!   that chose `tsc` as its clocksource keeps the cores' counters in step.
//! - **The estimate** at TSC value `t` is `I₀ + ⌊(t − t₀)·mult / 2³²⌋ + 1 + SKEW_NANOS`
//!   (the last term: see "Ordering" below).
//! - **A check on every new anchor**: the old anchor's estimate at a TSC value read *after*
//!   the new `Instant::now()` must not be below it. If it ever is (the kernel's rate moved by
//!   more than the margin: someone changed `adjtimex`'s tick, the VM migrated to a host with
//!   another TSC rate), the estimate is switched off for good: every later call on that
//!   thread reads `Instant::now()`, and so does every other thread's once its own anchor's
//!   window (about 1 ms) is over (a thread does not look at the shared switch inside its
//!   window, which would put one more shared load on every estimate).
//!
//! # Never early: the proof
//!
//! Let `f` be the kernel's map from TSC values to `CLOCK_MONOTONIC` nanoseconds: continuous,
//! increasing, piecewise linear with slope `m` (nanoseconds per cycle) that NTP moves slowly.
//! The anchor's `I₀ = f(τ₀)` for the TSC value `τ₀` the vDSO read, and `t₀ ≤ τ₀` (the
//! `lfence` after reading `t₀` lets no later instruction, the vDSO's read included, execute
//! before it), so `I₀ ≥ f(t₀)`. A caller that read `I = f(τ)` and then asks for an estimate
//! gets one from a TSC value `t ≥ τ` (see the note on ordering below). With `s = mult/2³²`:
//!
//! `I₀ + ⌊(t − t₀)·s⌋ + 1 > f(t₀) + (t − t₀)·s ≥ f(t₀) + (t − t₀)·m_max ≥ f(t) ≥ f(τ) = I`
//!
//! as long as `s ≥ m_max`, the largest slope over `[t₀, t]`. Calibration makes `s` an upper
//! bound of the average slope (the first pair's TSC value is read after its `Instant`, the
//! second's before, so `(I_b − I_a)/(t_b − t_a) ≥ (f(t_b) − f(t_a))/(t_b − t_a)`) plus the
//! 3,906 ppm margin; the check above switches the estimate off where that assumption fails.
//!
//! Ordering: the estimate reads the TSC with a plain `rdtsc`, which the CPU may execute ahead
//! of the instructions before it (the caller's `Instant::now()`, or the load that saw
//! another thread's signal). An `lfence` before it would rule that out, but costs some 20 ns
//! in place, most of what the estimate saves (CPU time per arm-and-cancel pair, one
//! producer, medians of five: 86 ns with `Instant::now()`, 58 ns with a plain `rdtsc`,
//! 78 ns with `lfence; rdtsc`). Instead every
//! estimate is raised by [`SKEW_NANOS`] (2 µs): an `rdtsc` runs ahead only of instructions
//! issued before it and not yet executed (at most a reorder buffer's, some 200), and the
//! slowest of those (a load that misses every cache: ~100 ns; a page walk, a few hundred)
//! takes far less. So `f(t) ≥ f(τ) − SKEW_NANOS`, and the chain above holds with
//! `I₀ + SKEW_NANOS` in place of `I₀`. This is the one assumption here that is
//! about the CPU rather than the kernel; the unit tests check it in place
//! (`never_behind_instant`, many millions of reads, several threads).
//!
//! # How late: the bound
//!
//! `estimate − f(t) ≤ (I₀ − f(t₀)) + (t − t₀)·(s − m_min) + 1 + SKEW_NANOS`. The first term is
//! at most the anchor's own bracket (`t₀` to the TSC read after `Instant::now()`; an anchor
//! is kept only if that is under [`MAX_BRACKET`] cycles, some 60 ns usually, ≤ 2.8 µs at
//! 3 GHz); the
//! second is at most a window (~1 ms) times the margin plus the calibration's error and
//! NTP's drift (≤ 3,906 + 1,000 + 2,000 ppm; the calibration's error is at most its two
//! brackets over its 20 ms, ≤ 820 ppm on a 1 GHz TSC): 7 µs. So a deadline counted from the
//! estimate is late by under 12 µs more than one counted from `Instant::now()` on a 3 GHz
//! TSC (20 µs on a 1 GHz one): about 1 % of the default 1 ms tick, and well within the
//! lateness bar (1 tick + 0.5 ms).

// Not modelled under loom (this file is not built there: the mocked clock is the only one),
// so std's cell, thread-local and `OnceLock`, and the facade's `plain` atomics: one word,
// written by one CAS and perhaps once more to `OFF`; every other piece is per thread.
use crate::sync::plain::{AtomicU64, Ordering};
use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Instant;

/// The most TSC cycles an anchor's bracket (a TSC read, `Instant::now()`, a TSC read) may
/// span for the anchor to be kept: ≤ 2.8 µs at 3 GHz; a bracket is some 200 cycles.
const MAX_BRACKET: u64 = 1 << 13;

/// What every estimate adds for a TSC read that ran ahead of the instructions before it:
/// see "Ordering" in the module's docs.
const SKEW_NANOS: u64 = 2_000;

/// How long the process-wide calibration measures before the estimate is used.
const CALIBRATION_NANOS: u64 = 20_000_000;

/// How long an anchor serves, in nanoseconds (as the scale counts them).
const WINDOW_NANOS: u128 = 1_000_000;

/// `SCALE` before the calibration is done.
const UNCALIBRATED: u64 = 0;

/// `SCALE` where the estimate is not used: the TSC is unusable, or the check failed.
const OFF: u64 = u64::MAX;

/// The scale: `mult` (nanoseconds per TSC cycle × 2³², margin included), [`UNCALIBRATED`]
/// or [`OFF`]. Written once by the calibration's CAS, and perhaps later to `OFF`.
static SCALE: AtomicU64 = AtomicU64::new(UNCALIBRATED);

/// The calibration's start and the base every anchor counts from: `None` where the TSC is
/// unusable. Set by the first `Clock::new`.
static START: OnceLock<Option<Start>> = OnceLock::new();

/// The first pair: `base`, and the TSC value read just after it.
#[derive(Clone, Copy, Debug)]
struct Start {
    base: Instant,
    tsc: u64,
}

/// A thread's anchor: the estimate at TSC value `t` is `nanos + ⌊(t − tsc)·mult / 2³²⌋`
/// while `t − tsc < window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Anchor {
    tsc: u64,
    /// Nanoseconds since `Start::base` of the `Instant` read after `tsc`, plus the one
    /// nanosecond the estimate's rounding down takes back and [`SKEW_NANOS`].
    nanos: u64,
    mult: u64,
    /// Zero: no anchor.
    window: u64,
}

impl Anchor {
    const NONE: Anchor = Anchor { tsc: 0, nanos: 0, mult: 0, window: 0 };

    /// The estimate at `t` (in the window: the product fits, see `window_of`).
    #[inline]
    fn at(self, t: u64) -> Option<u64> {
        let cycles = t.wrapping_sub(self.tsc);
        (cycles < self.window).then(|| self.nanos + ((cycles * self.mult) >> 32))
    }

    /// The estimate at any `t` at or after the anchor, in 128 bits (the check on a new
    /// anchor, however long ago the old one was taken).
    fn at_any(self, t: u64) -> Option<u128> {
        let cycles = t.checked_sub(self.tsc)?;
        Some(u128::from(self.nanos) + ((u128::from(cycles) * u128::from(self.mult)) >> 32))
    }
}

std::thread_local! {
    static ANCHOR: Cell<Anchor> = const { Cell::new(Anchor::NONE) };
}

/// Where a clock's start is from the base, so that `nanos since base + add − sub` is
/// nanoseconds since the clock's start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Offset {
    add: u64,
    sub: u64,
}

impl Offset {
    #[inline]
    pub(crate) fn since_start(self, since_base: u64) -> u64 {
        since_base.saturating_add(self.add).saturating_sub(self.sub)
    }
}

/// The offset of a clock that starts at `start`, or `None` where the TSC is unusable. The
/// first call checks the TSC and takes the calibration's first pair (some 20 µs, once per
/// process: reads a sysfs file).
pub(crate) fn offset(start: Instant) -> Option<Offset> {
    let base = START.get_or_init(first_pair).as_ref()?.base;
    let nanos = |from: Instant, to: Instant| u64::try_from(to.saturating_duration_since(from).as_nanos()).ok();
    Some(Offset { add: nanos(start, base)?, sub: nanos(base, start)? })
}

/// An estimate of `Instant::now()` in nanoseconds since the base (never below the real now
/// read before this call; see the module's proof), or `None` where there is none.
#[inline]
pub(crate) fn now() -> Option<u64> {
    let anchor = ANCHOR.with(Cell::get);
    match anchor.at(read()) {
        Some(estimate) => Some(estimate),
        None => renew(anchor),
    }
}

/// No anchor, or an old one: reads `Instant::now()` (which is the answer), checks the old
/// anchor against it, calibrates if it is time, and takes a new anchor.
#[cold]
#[inline(never)]
fn renew(old: Anchor) -> Option<u64> {
    let start = (*START.get()?)?;
    // Acquire: pairs with the calibration's CAS (nothing else is published with it; the
    // value is all that is read).
    let scale = SCALE.load(Ordering::Acquire);
    if scale == OFF {
        return None;
    }
    let (before, now, after) = bracket();
    let nanos = u64::try_from(now.saturating_duration_since(start.base).as_nanos()).unwrap_or(u64::MAX);
    if old.window != 0 && old.at_any(after).is_none_or(|estimate| estimate < u128::from(nanos)) {
        // The old anchor's estimate fell behind `Instant` (or the TSC went back): the
        // kernel's rate left the margin. Relaxed: a plain flag, read with the scale.
        SCALE.store(OFF, Ordering::Relaxed);
        ANCHOR.with(|a| a.set(Anchor::NONE));
        return Some(nanos);
    }
    // A bracket the thread was not interrupted in: the anchor's error, and the
    // calibration's, are at most its width.
    let narrow = after.wrapping_sub(before) <= MAX_BRACKET;
    let mult = match scale {
        UNCALIBRATED if narrow => calibrate(start.tsc, before, nanos),
        mult => mult,
    };
    if mult != UNCALIBRATED && mult != OFF && narrow {
        let anchor = Anchor { tsc: before, nanos: nanos.saturating_add(1 + SKEW_NANOS), mult, window: window_of(mult) };
        ANCHOR.with(|a| a.set(anchor));
    }
    Some(nanos)
}

/// The scale once `nanos` (since the base, read after TSC value `before`) is far enough
/// from the first pair (TSC `first` read after the base), published by CAS; `UNCALIBRATED`
/// before then.
fn calibrate(first: u64, before: u64, nanos: u64) -> u64 {
    if nanos < CALIBRATION_NANOS {
        return UNCALIBRATED;
    }
    let mult = scale_of(nanos, before.wrapping_sub(first));
    // AcqRel/Acquire: the first calibration wins; the loser takes the winner's value.
    match SCALE.compare_exchange(UNCALIBRATED, mult, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => mult,
        Err(current) => current,
    }
}

/// `mult` from `nanos` of `Instant` over `cycles` of TSC (an upper bound of the average
/// rate, as the module's proof needs), raised by 2⁻⁸ and rounded up; [`OFF`] for a rate no
/// TSC has (below 100 MHz or above 20 GHz; or a TSC that went back).
fn scale_of(nanos: u64, cycles: u64) -> u64 {
    if cycles == 0 || cycles > u64::MAX / 2 {
        return OFF;
    }
    let raised = (u128::from(nanos) << 32) * 257 / 256;
    let mult = raised.div_ceil(u128::from(cycles)) + 1;
    // 0.05 to 10 nanoseconds per cycle.
    if !((1u128 << 32) / 20..=10u128 << 32).contains(&mult) {
        return OFF;
    }
    mult as u64
}

/// The TSC cycles of [`WINDOW_NANOS`] at scale `mult`: at most 2³² × 10⁶ / `mult` ≤ 2 × 10⁷
/// cycles, so `cycles × mult` stays under 2⁵⁴.
fn window_of(mult: u64) -> u64 {
    ((WINDOW_NANOS << 32) / u128::from(mult)) as u64
}

/// The first pair, if the TSC is usable.
fn first_pair() -> Option<Start> {
    if !usable() {
        SCALE.store(OFF, Ordering::Relaxed);
        return None;
    }
    // A bracket not interrupted (a few tries; none in eight: an `Instant::now()` too slow
    // for the estimate to pay). Its TSC value is read after the `Instant`.
    let found = (0..8).map(|_| bracket()).find(|&(before, _, after)| after.wrapping_sub(before) <= MAX_BRACKET);
    let Some((_, base, tsc)) = found else {
        SCALE.store(OFF, Ordering::Relaxed);
        return None;
    };
    Some(Start { base, tsc })
}

/// A TSC value read before `Instant::now()`, the instant, and one read after it.
fn bracket() -> (u64, Instant, u64) {
    let before = read_before();
    let now = Instant::now();
    (before, now, read_after())
}

/// Whether this CPU's TSC and this kernel's `Instant` are one clock.
fn usable() -> bool {
    // Miri runs neither CPUID nor RDTSC: under it the estimate is off (`.ci/miri.sh`).
    !cfg!(miri)
        && cpu_has_invariant_tsc()
        && std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .is_ok_and(|source| source.trim() == "tsc")
}

use arch::{cpu_has_invariant_tsc, read, read_after, read_before};

#[cfg(target_arch = "x86_64")]
mod arch {
    use std::arch::x86_64::{__cpuid, _mm_lfence, _rdtsc};

    /// The TSC, as soon as the CPU gets to it (`rdtsc`; see "Ordering" in the module's docs).
    #[inline(always)]
    pub(crate) fn read() -> u64 {
        // SAFETY: `rdtsc` reads no memory and has no precondition; `usable` checked the
        // TSC before any estimate is made.
        unsafe { _rdtsc() }
    }

    /// The TSC, read after every earlier instruction has executed (`lfence; rdtsc`).
    #[inline(always)]
    pub(crate) fn read_after() -> u64 {
        // SAFETY: `lfence` (SSE2, in every x86_64) and `rdtsc` read no memory and have no
        // precondition; `usable` checked the TSC before any estimate is made.
        unsafe {
            _mm_lfence();
            _rdtsc()
        }
    }

    /// The TSC, read before every later instruction executes (`rdtsc; lfence`).
    #[inline(always)]
    pub(crate) fn read_before() -> u64 {
        // SAFETY: as in `read_after`.
        unsafe {
            let t = _rdtsc();
            _mm_lfence();
            t
        }
    }

    /// CPUID: an invariant TSC (leaf 0x8000_0007, EDX bit 8: the rate is constant and the
    /// counter runs in every power state). Linux only: elsewhere nothing says that
    /// `Instant` is read from the TSC.
    pub(crate) fn cpu_has_invariant_tsc() -> bool {
        // A leaf past the highest one (leaf 0x8000_0000's EAX) is not asked for.
        let invariant = __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0;
        invariant && cfg!(target_os = "linux")
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod arch {
    pub(crate) fn read() -> u64 {
        0
    }

    pub(crate) fn read_after() -> u64 {
        0
    }

    pub(crate) fn read_before() -> u64 {
        0
    }

    pub(crate) fn cpu_has_invariant_tsc() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const NS_PER_CYCLE: u64 = 1 << 32;

    #[test]
    fn the_scale_is_an_upper_bound_raised_by_the_margin() {
        // 1 s over 3 × 10⁹ cycles: a 3 GHz TSC, 1/3 ns per cycle.
        let mult = scale_of(1_000_000_000, 3_000_000_000);
        let exact = (1u128 << 32) as f64 / 3.0;
        let raised = exact * (1.0 + 1.0 / 256.0);
        assert!(mult as f64 >= raised, "{mult} below {raised}");
        assert!((mult as f64) < raised + 3.0, "{mult} more than rounding above {raised}");
        // Rates no TSC has, and a TSC that did not move or went back.
        assert_eq!(scale_of(1_000_000_000, 0), OFF);
        assert_eq!(scale_of(1_000_000_000, u64::MAX - 5), OFF);
        assert_eq!(scale_of(1_000_000_000, 10_000_000), OFF, "100 ns per cycle");
        assert_eq!(scale_of(1_000_000, 1_000_000_000), OFF, "1 ps per cycle");
        assert_ne!(scale_of(1_000_000_000, 1_000_000_000), OFF);
    }

    #[test]
    fn an_anchor_serves_its_window_only() {
        let anchor = Anchor { tsc: 1_000, nanos: 5, mult: NS_PER_CYCLE, window: 100 };
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
    }

    #[test]
    fn a_window_is_a_millisecond_and_its_product_fits() {
        assert_eq!(window_of(NS_PER_CYCLE), 1_000_000);
        assert_eq!(window_of(NS_PER_CYCLE / 4), 4_000_000, "4 GHz");
        for mult in [NS_PER_CYCLE / 20, NS_PER_CYCLE / 3, NS_PER_CYCLE, 10 * NS_PER_CYCLE] {
            assert!(window_of(mult).checked_mul(mult).is_some());
            let span = (u128::from(window_of(mult)) * u128::from(mult)) >> 32;
            assert!((999_990..=1_000_000).contains(&span), "{span} ns at {mult}");
        }
    }

    #[test]
    fn offsets_count_from_the_clocks_start() {
        let Some(base) = START.get_or_init(first_pair).map(|s| s.base) else { return };
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
        let on = START.get_or_init(first_pair).is_some();
        assert!(possible || !on, "the TSC estimate is on where the kernel's clock is not the TSC");
        if possible && !on {
            eprintln!("the TSC estimate gave up: the first pair's brackets were all wide");
        }
        on
    }

    fn since_base(at: Instant) -> u64 {
        at.saturating_duration_since(START.get().unwrap().unwrap().base).as_nanos() as u64
    }

    /// The module's proof, checked in place: no estimate is below `Instant::now()` read just
    /// before it, nor more than the lateness bound above one read just after it; on four
    /// threads at once, over a second (a thousand anchors each), after the calibration.
    #[test]
    fn never_behind_instant() {
        if !tsc_is_the_clock() {
            assert_eq!(now(), None);
            return;
        }
        let calibrated = Instant::now() + Duration::from_secs(2);
        while SCALE.load(Ordering::Acquire) == UNCALIBRATED {
            assert!(now().is_some());
            assert!(Instant::now() < calibrated, "calibrated within 2 s");
        }
        // A new anchor: the estimate from it starts the skew and a nanosecond above the
        // `Instant` it read.
        let read = renew(ANCHOR.with(Cell::get)).unwrap();
        let anchor = ANCHOR.with(Cell::get);
        if anchor.window != 0 {
            assert_eq!(anchor.nanos, read + 1 + SKEW_NANOS);
        }
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let end = Instant::now() + Duration::from_secs(1);
                    let (mut reads, mut fast_reads, mut worst_ahead, mut min_lead) = (0u64, 0u64, 0u64, u64::MAX);
                    loop {
                        let anchor = ANCHOR.with(Cell::get);
                        let before = Instant::now();
                        let estimate = now().expect("the estimate stays on");
                        let fast = anchor.window != 0 && ANCHOR.with(Cell::get) == anchor;
                        let after = Instant::now();
                        assert!(estimate >= since_base(before), "{estimate} behind {before:?}");
                        let ahead = estimate.saturating_sub(since_base(after));
                        if fast {
                            fast_reads += 1;
                            min_lead = min_lead.min(estimate - since_base(before));
                        }
                        assert!(ahead <= 20_000, "{ahead} ns ahead of Instant::now()");
                        worst_ahead = worst_ahead.max(ahead);
                        reads += 1;
                        if after > end {
                            eprintln!("{reads} reads, {fast_reads} from an anchor: least lead over before {min_lead} ns, most ahead of after {worst_ahead} ns");
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
        assert_ne!(SCALE.load(Ordering::Acquire), OFF, "the check never found the estimate behind");
    }
}
