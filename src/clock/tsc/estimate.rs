//! The estimate itself, apart from what it reads: one anchor per thread, one scale per
//! process, and the renewal that checks the one against the kernel and takes the next.
//! Generic over [`Platform`], so that the tests drive it from a simulated kernel
//! (`sim.rs`: a fake TSC and a fake `CLOCK_MONOTONIC` whose rate changes at any moment)
//! exactly as the process drives it from `rdtsc` and `Instant` (`mod.rs`). The proof it
//! keeps is in the module's docs (`mod.rs`).

use super::{CALIBRATION_NANOS, MARGIN_EIGHTHS, MAX_BRACKET, SKEW_NANOS, WINDOW_NANOS};
use crate::sync::plain::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// `Process::scale` before the calibration is done.
pub(super) const UNCALIBRATED: u64 = 0;

/// `Process::scale` where the estimate is not used: the TSC is unusable, or the check failed.
pub(super) const OFF: u64 = u64::MAX;

/// What the estimate reads, and where it keeps its state: the CPU and kernel (`mod.rs`), or a
/// simulated pair (`sim.rs`).
pub(super) trait Platform {
    /// The TSC, as soon as the CPU gets to it (it may run ahead of earlier instructions).
    fn read(&self) -> u64;
    /// The TSC, read before every later instruction executes.
    fn read_before(&self) -> u64;
    /// The TSC, read after every earlier instruction has executed.
    fn read_after(&self) -> u64;
    /// `CLOCK_MONOTONIC` in nanoseconds since the process's base; `None` before there is one.
    fn monotonic(&self) -> Option<u64>;
    /// `CLOCK_MONOTONIC_RAW` in nanoseconds (any origin): the TSC times a scale the kernel
    /// never adjusts.
    fn raw(&self) -> Option<u64>;
    /// The calling thread's anchor.
    fn anchor(&self) -> Anchor;
    fn set_anchor(&self, anchor: Anchor);
    /// What the process's threads share.
    fn process(&self) -> &Process;
}

/// What every thread shares: the scale, and the calibration's first pair.
#[derive(Debug)]
pub(super) struct Process {
    /// `mult` (nanoseconds per TSC cycle × 2³², margin included), [`UNCALIBRATED`] or
    /// [`OFF`]. Written once by the calibration's CAS, and perhaps later to `OFF`.
    pub(super) scale: AtomicU64,
    /// The calibration's first pair; `None` where the TSC is unusable.
    pub(super) first: OnceLock<Option<First>>,
}

/// A `CLOCK_MONOTONIC_RAW` reading and the TSC value read just after it.
#[derive(Clone, Copy, Debug)]
pub(super) struct First {
    raw: u64,
    tsc: u64,
}

/// A thread's anchor: the estimate at TSC value `t` is
/// `max(nanos + ⌊(t − tsc)·mult / 2³²⌋, floor)` while `t − tsc < window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Anchor {
    pub(super) tsc: u64,
    /// Nanoseconds since the base of the `Instant` read after `tsc`, plus the one
    /// nanosecond the estimate's rounding down takes back and [`SKEW_NANOS`].
    pub(super) nanos: u64,
    pub(super) mult: u64,
    /// Zero: no anchor.
    pub(super) window: u64,
    /// The most the thread's previous anchor gave: the estimate never goes below it, so that
    /// it never goes back on one thread (see "Monotonic" in the module's docs).
    pub(super) floor: u64,
}

impl Anchor {
    pub(super) const NONE: Anchor = Anchor { tsc: 0, nanos: 0, mult: 0, window: 0, floor: 0 };

    /// The estimate at `t` (in the window: the product fits, see `window_of`).
    #[inline]
    pub(super) fn at(self, t: u64) -> Option<u64> {
        let cycles = t.wrapping_sub(self.tsc);
        (cycles < self.window).then(|| (self.nanos + ((cycles * self.mult) >> 32)).max(self.floor))
    }

    /// The estimate at any `t` at or after the anchor, in 128 bits and without the floor
    /// (the check on a new anchor, however long ago the old one was taken).
    pub(super) fn at_any(self, t: u64) -> Option<u128> {
        let cycles = t.checked_sub(self.tsc)?;
        Some(u128::from(self.nanos) + ((u128::from(cycles) * u128::from(self.mult)) >> 32))
    }

    /// The most this anchor can have given by TSC value `t`: its estimate at `t`, or at the
    /// last cycle of its window if `t` is past it (zero for no anchor).
    pub(super) fn most_by(self, t: u64) -> u64 {
        if self.window == 0 {
            return 0;
        }
        let cycles = t.saturating_sub(self.tsc).min(self.window - 1);
        (self.nanos + ((cycles * self.mult) >> 32)).max(self.floor)
    }
}

impl Process {
    pub(super) const fn new() -> Process {
        Process { scale: AtomicU64::new(UNCALIBRATED), first: OnceLock::new() }
    }
}

/// The estimate of `CLOCK_MONOTONIC` in nanoseconds since the base, never below a reading of
/// it taken before this call (see the module's proof), or `None` where there is none.
#[inline(always)]
pub(super) fn estimate<P: Platform>(platform: &P) -> Option<u64> {
    match platform.anchor().at(platform.read()) {
        Some(estimate) => Some(estimate),
        // The renewal reads the anchor again: passing this copy would keep the whole of it
        // on the stack of every estimate, not just the fields `at` reads.
        None => renew(platform),
    }
}

/// Takes the calibration's first pair, once per process: whether there is one (a raw reading
/// whose bracket was narrow, in eight tries). Without one the estimate is off for good.
pub(super) fn start<P: Platform>(platform: &P) -> bool {
    let process = platform.process();
    let first = process.first.get_or_init(|| {
        let pair = (0..8).find_map(|_| {
            let (before, raw, after) = (platform.read_before(), platform.raw(), platform.read_after());
            raw.filter(|_| after.wrapping_sub(before) <= MAX_BRACKET).map(|raw| First { raw, tsc: after })
        });
        if pair.is_none() {
            // Relaxed: a plain flag; no data is published with it.
            process.scale.store(OFF, Ordering::Relaxed);
        }
        pair
    });
    first.is_some()
}

/// No anchor, or an old one: reads `CLOCK_MONOTONIC` (which is the answer), checks the old
/// anchor against it, calibrates if it is time, and takes a new anchor.
#[cold]
#[inline(never)]
pub(super) fn renew<P: Platform>(platform: &P) -> Option<u64> {
    let old = platform.anchor();
    let process = platform.process();
    let first = (*process.first.get()?)?;
    // Acquire: pairs with the calibration's CAS (nothing else is published with it; the
    // value is all that is read).
    let scale = process.scale.load(Ordering::Acquire);
    if scale == OFF {
        return None;
    }
    let before = platform.read_before();
    let nanos = platform.monotonic()?;
    let after = platform.read_after();
    if old.window != 0 && old.at_any(after).is_none_or(|estimate| estimate < u128::from(nanos)) {
        // The old anchor's estimate fell behind the kernel (or the TSC went back): over the
        // cycles since that anchor the kernel's clock gained more than the scale allows, which
        // its own rates never do. Both sides count TSC cycles, so this is the kernel's clock
        // no longer the TSC's (its clocksource switched away), a TSC stepped back, or a rate
        // published late whose step outgrew the old anchor's lead; never a change in the
        // TSC's own rate (a VM moved to another host), which the kernel's clock follows. Seen
        // late, at this renewal: the module's docs, "The assumption". Off for the whole
        // process, not this thread alone: every other thread's anchor has the same scale.
        // Relaxed: a plain flag, read with the scale.
        process.scale.store(OFF, Ordering::Relaxed);
        platform.set_anchor(Anchor::NONE);
        return Some(nanos);
    }
    let floor = old.most_by(after);
    // A bracket the thread was not interrupted in: the anchor's error is at most its width.
    let narrow = after.wrapping_sub(before) <= MAX_BRACKET;
    let mult = match scale {
        UNCALIBRATED if narrow => calibrate(platform, first, nanos),
        mult => mult,
    };
    if mult != UNCALIBRATED && mult != OFF && narrow {
        let nanos = nanos.saturating_add(1 + SKEW_NANOS);
        platform.set_anchor(Anchor { tsc: before, nanos, mult, window: window_of(mult), floor });
    }
    Some(nanos.max(floor))
}

/// The scale once `nanos` (since the base) is far enough from the first pair, from a second
/// raw pair, published by CAS; `UNCALIBRATED` before then, or if that pair's bracket is wide.
fn calibrate<P: Platform>(platform: &P, first: First, nanos: u64) -> u64 {
    if nanos < CALIBRATION_NANOS {
        return UNCALIBRATED;
    }
    let (before, raw, after) = (platform.read_before(), platform.raw(), platform.read_after());
    let Some(raw) = raw.filter(|_| after.wrapping_sub(before) <= MAX_BRACKET) else {
        return UNCALIBRATED;
    };
    // The first pair's TSC value was read after its raw reading, this one's before: the
    // cycles counted are at most those between the two readings, the rate at least the raw
    // clock's (an upper bound, as the proof needs).
    let mult = scale_of(raw.wrapping_sub(first.raw), before.wrapping_sub(first.tsc));
    // AcqRel/Acquire: the first calibration wins; the loser takes the winner's value.
    match platform.process().scale.compare_exchange(UNCALIBRATED, mult, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => mult,
        Err(current) => current,
    }
}

/// `mult` from `nanos` of `CLOCK_MONOTONIC_RAW` over `cycles` of TSC: an upper bound of the
/// raw rate (one nanosecond more for the raw clock's rounding), raised by the margin
/// (`MARGIN_EIGHTHS`/8) and rounded up; [`OFF`] for a rate no TSC has (below 100 MHz or above
/// 20 GHz; or a clock that went back).
pub(super) fn scale_of(nanos: u64, cycles: u64) -> u64 {
    if cycles == 0 || cycles > u64::MAX / 2 || nanos > u64::MAX / 2 {
        return OFF;
    }
    let raw = (u128::from(nanos) + 1) << 32;
    // 0.05 to 10 nanoseconds per cycle.
    if !((1u128 << 32) / 20..=10u128 << 32).contains(&raw.div_ceil(u128::from(cycles))) {
        return OFF;
    }
    let raised = raw * (8 + MARGIN_EIGHTHS);
    (raised.div_ceil(u128::from(cycles) * 8) + 1) as u64
}

/// The TSC cycles of [`WINDOW_NANOS`] at scale `mult`: at most 2¹⁵ × 2³² / `mult`, under 2¹⁹
/// cycles for the slowest scale `scale_of` gives, and `cycles × mult` is at most 2⁴⁷.
pub(super) fn window_of(mult: u64) -> u64 {
    // 2⁴⁷ fits a word: a 64-bit division, not a 128-bit one, on every renewal.
    (WINDOW_NANOS << 32) / mult
}
