//! A cheaper "now" for deadlines: the CPU's time-stamp counter, scaled from a per-thread
//! anchor on `Instant`, and never behind `Instant::now()` at any rate the kernel allows, if
//! the kernel's readers see each new rate as it is computed (see "The assumption").
//!
//! `schedule(delay)`, `sleep(delay)` and `Timeout::reset(delay)` must know now. `Instant::now()`
//! (the vDSO's `clock_gettime`) costs some 25 ns; `rdtsc` some 10 ns. This module estimates
//! `Instant::now()` from the TSC so that the estimate is **never below** the real now (a
//! deadline counted from it is never early), whatever rate within its limits the kernel gives
//! its clock, and above it by tens of microseconds at most (the bound below). It is used only
//! where the TSC and `Instant` are one clock: x86_64 Linux whose clocksource is `tsc` (so
//! `CLOCK_MONOTONIC` is the TSC times the kernel's scale), with an invariant TSC (CPUID), and
//! not under Miri. Elsewhere, on a paused `TestClock` and under loom, `Clock` reads
//! `Instant::now()` as before.
//!
//! The estimator's logic is in `estimate.rs`, generic over what it reads; this file gives it
//! the CPU and the kernel, and `sim.rs` (tests) a simulated pair whose rate moves at will.
//!
//! # The kernel's rate, and how far it moves
//!
//! `CLOCK_MONOTONIC` is the TSC times the kernel's `mult`, which NTP steers; `CLOCK_MONOTONIC_RAW`
//! is the TSC times the clocksource's own `mult`, which nothing steers. The monotonic clock's
//! rate over the raw one is the NTP tick length over its nominal length (`kernel/time/ntp.c`),
//! the sum of:
//! - the tick, `adjtimex(ADJ_TICK)`: 900,000/`USER_HZ` to 1,100,000/`USER_HZ` µs, **±10 %**
//!   (how chronyd slews a large offset: its default `maxslewrate` is 83,333 ppm);
//! - the frequency, `ADJ_FREQUENCY`: **±500 ppm** (`MAXFREQ`);
//! - the PLL's phase correction: each second a share of the offset `ADJ_OFFSET` left (at most
//!   `MAXPHASE`, 0.5 s): a quarter of it at the smallest time constant (`SHIFT_PLL` = 2),
//!   **±12.5 %**; all of it under the PPS discipline (`STA_PPSTIME` with a PPS signal),
//!   **±50 %**;
//! - `adjtime`'s slew (`ADJ_OFFSET_SINGLESHOT`): **±500 ppm** (`MAX_TICKADJ`);
//! - the timekeeper's own nudge of `mult` by one unit, under a part per million.
//!
//! So at every moment the monotonic rate `m` is within **60.1 %** of the raw rate `r`, and it
//! may jump anywhere in that range at any moment (each change takes effect at the next tick).
//!
//! # How
//!
//! - **A process-wide scale**, `mult` (nanoseconds per TSC cycle, fixed point 32.32): an upper
//!   bound of the *raw* rate `r`, measured from two `CLOCK_MONOTONIC_RAW` readings ≥ 20 ms
//!   apart after the first `Clock` is made (no wait, no thread: until then every estimate is a
//!   plain `Instant::now()`), then raised by [`MARGIN_EIGHTHS`]/8 = 62.5 %, above the 60.1 %
//!   the kernel allows. Calibrating against the raw clock, not the monotonic one, is what
//!   keeps the margin one-sided: the monotonic clock's rate during a calibration may be
//!   anywhere in its range, the raw clock's is fixed.
//! - **A per-thread anchor** `(t₀, I₀)`: a TSC value read *before* an `Instant::now()` (an
//!   `lfence` keeps it before). It serves for one window, the TSC cycles of
//!   [`WINDOW_NANOS`] (32.8 µs) at the scale; then the next estimate takes a new anchor (one
//!   `Instant::now()` per thread per 20 µs or so at most). A thread that moved to another
//!   core keeps its anchor: the kernel that chose `tsc` as its clocksource keeps the cores'
//!   counters in step.
//! - **The estimate** at TSC value `t` is `max(I₀ + ⌊(t − t₀)·mult / 2³²⌋ + 1 + SKEW_NANOS,
//!   floor)` (the skew: see "Ordering" below; the floor: see "Monotonic").
//! - **A check on every new anchor**: the old anchor's estimate at a TSC value read *after*
//!   the new `Instant::now()` (its line carried on past its window, without the floor) must
//!   not be below it, nor that TSC value below the old anchor's. Both sides count TSC cycles,
//!   so the check sees only the kernel's clock gaining more over the cycles since the old
//!   anchor than the scale gives them, its skew and nanosecond included (more than 1.625
//!   times the raw rate on average), or the counter going back: a kernel clock no longer the
//!   TSC times a steered scale (the clocksource switched away from `tsc` after the one look
//!   at it, as the kernel's watchdog does to a TSC it distrusts, and the TSC slow against the
//!   new one), a TSC written or stepped back, or a rate published late whose step (see "The
//!   assumption") outgrew the old anchor's lead. It cannot see a change of the TSC's own rate
//!   (a VM moved to a host whose TSC runs at another rate, without TSC scaling): the kernel's
//!   clock is the TSC times its scale and changes rate with it, so per cycle nothing changed,
//!   and the estimate stays as near `Instant::now()` as before, which is all it promises. What
//!   it sees, it sees late: at the thread's next renewal, after the estimates of the window
//!   that renewal ends, and against a lead that grows with the time since the old anchor
//!   (62.5 % of it at the nominal rate, 1.5 % at the fastest): a smaller step passes unseen.
//!   When it fails, the estimate is switched off for the whole process, not for this thread
//!   alone (every thread's anchor runs at the one scale): every later call on that thread
//!   reads `Instant::now()`, and so does every other thread's once its own anchor's window is
//!   over (a thread does not look at the shared switch inside its window, which would put one
//!   more shared load on every estimate).
//!
//! # Never early: the proof
//!
//! Let `f` be the kernel's map from TSC values to `CLOCK_MONOTONIC` nanoseconds: continuous
//! (the kernel's readers see a new rate from the TSC value it was computed at: the assumption
//! below), increasing, piecewise linear with a slope `m` that moves at any moment but stays
//! within `r·(1 ± 0.601)` (above). The anchor's `I₀ = f(τ₀)` for the TSC value `τ₀` the vDSO
//! read, and `t₀ ≤ τ₀` (the `lfence` after reading `t₀` lets no later instruction, the vDSO's
//! read included, execute before it), so `I₀ ≥ f(t₀)`. A caller that read `I = f(τ)` and then
//! asks for an estimate gets one from a TSC value `t ≥ τ − E` (see "Ordering"; a `t` below
//! `t₀` is outside the window and takes a new anchor, whose answer is an `Instant::now()` read
//! after `τ`). With `s = mult/2³² ≥ r·(1 + 0.625)`:
//!
//! `I₀ + ⌊(t − t₀)·s⌋ + 1 + SKEW > f(t₀) + (t − t₀)·s + SKEW ≥ f(t₀) + (t − t₀)·m_max + SKEW
//! ≥ f(t) + SKEW ≥ f(t + E) ≥ f(τ) = I`
//!
//! where `m_max ≤ r·1.601 < s` is the largest slope over `[t₀, t + E]`, whenever in it the
//! kernel changed its rate and however often, and `SKEW ≥ E·m_max`. The floor only raises the
//! estimate. Calibration makes `s` an upper bound of `r` times the margin: `r` is constant (no
//! NTP steers the raw clock), and the first raw pair's TSC value is read after its reading,
//! the second's before, so `(R_b − R_a)/(t_b − t_a) ≥ r`.
//!
//! Ordering: the estimate reads the TSC with a plain `rdtsc`, which the CPU may execute ahead
//! of the instructions before it (the caller's `Instant::now()`, or the load that saw another
//! thread's signal). An `lfence` before it would rule that out, but costs some 20 ns in
//! place, most of what the estimate saves (CPU time per arm-and-cancel pair, one producer,
//! medians of five: 86 ns with `Instant::now()`, 58 ns with a plain `rdtsc`, 78 ns with
//! `lfence; rdtsc`). Instead every estimate is raised by [`SKEW_NANOS`]: an `rdtsc` runs ahead
//! only of instructions issued before it and not yet executed (at most a reorder buffer's,
//! some 200), and the slowest of those (a load that misses every cache: ~100 ns; a page walk,
//! a few hundred) takes far less than [`EARLY_NANOS`] (2 µs of the TSC's own time, so
//! `E·r ≤ 2 µs`), over which the kernel's clock moves at most `2 µs × 1.601 = 3.2 µs`:
//! `SKEW_NANOS` is 3.25 µs. This is the one assumption here that is about the CPU rather than
//! the kernel; the unit tests check it in place (`never_behind_instant`, many millions of
//! reads, several threads), and the simulated kernel checks that the skew covers an early
//! read of 2 µs at the fastest rate.
//!
//! # The assumption: a rate published as it is computed
//!
//! The proof's `f` is continuous because the kernel makes each new rate start where the old
//! one left its clock: its tick reads the clocksource, computes the new `mult` so that the
//! clock is continuous at that reading (`timekeeping_advance`, `kernel/time/timekeeping.c`),
//! and then writes the vDSO's data. A reader in between still counts at the old rate from the
//! old base; so the rate is published some time D after the reading it was computed at, and
//! when it lands `CLOCK_MONOTONIC` steps forward by D times the rate's increase (a decrease
//! steps the other way, which never makes an estimate early). D is the few instructions
//! between the two with interrupts off, but an SMI, or a host that deschedules the vCPU
//! there, stretches it: at D = 100 µs a move from the nominal rate to chrony's largest slew
//! (83,333 ppm) is a step of 8.3 µs; at D = 1 ms, into the tick's +10 %, 100 µs.
//!
//! Nothing here is set aside for that step. The margins are spent on what the proof covers
//! (the scale's 62.5 % over the kernel's 60.1 %, the skew on an early `rdtsc`, one
//! nanosecond of rounding), and a step is absorbed only by what the moment leaves of them: at
//! the nominal rate and with no early read, the skew's 3.25 µs and the lead the window has
//! gathered (up to 12.6 µs at its end); at the fastest rate, just after a new anchor, with a
//! read early by the CPU's whole bound, a few hundred nanoseconds (the anchor's bracket:
//! `an_early_read_at_the_fastest_rate_is_covered_by_the_skew`). The rest of the step puts the
//! estimate behind `Instant::now()` until the thread's next anchor (a window at most): a review
//! that drove the estimate with a kernel publishing its rate increases late measured up to
//! 0.67 µs behind at D = 100 µs under chrony's slew, 75.7 µs at D = 1 ms under the kernel's
//! largest. The check on a new anchor (above) sees such a step only if it outgrew the old
//! anchor's lead by then, and only after the fact: it then turns the estimate off for the
//! process. So "never behind `Instant::now()`" holds for a kernel whose readers see a new
//! rate from the reading it was computed at, and the README's guarantee says so. The
//! simulated kernel (`sim.rs`) publishes each rate that way (`Kernel::set_ppm` keeps its
//! clock continuous), so its tests do not reach this case.
//!
//! # Monotonic
//!
//! Over a window the estimate runs ahead of the kernel (its slope is the fastest the kernel
//! may take), and a new anchor starts it again just above the kernel: without more, the
//! estimate would step back at each new anchor. Each anchor keeps, as its floor, the most its
//! predecessor gave by then ([`Anchor::most_by`](estimate::Anchor::most_by) at the new
//! anchor's TSC value read after its `Instant`), and never answers below it. So the estimates
//! one thread reads, with its TSC reads in order, never go back; and the floor is not carried
//! forward in the estimate's own terms (the next anchor counts from its own `Instant`), so the
//! lead does not grow from window to window. The answer a renewal gives is `max(now, floor)`
//! for the same reason.
//!
//! # How late: the bound
//!
//! `estimate − f(t) ≤ (I₀ − f(t₀)) + 1 + SKEW + (t − t₀)·(s − m)`. The first term is at most
//! the anchor's bracket (`t₀` to the TSC read after `Instant::now()`; an anchor is kept only
//! if that is under [`MAX_BRACKET`] cycles, some 200 usually, ≤ 2.8 µs at 3 GHz) at the
//! fastest rate; the last is under the window times `1 − m/s`: `(t − t₀)·s` stays below the
//! window's 32.8 µs, and `m/s` is at least `0.399/1.625` (the slowest rate the kernel allows)
//! and at the kernel's nominal rate `1/1.625`. The floor is an earlier anchor's estimate,
//! under the same bound then and less now. So the estimate is ahead of `Instant::now()` by
//! at most `1 + 3.25 µs + 1.601 × bracket + 24.7 µs`: **under 33 µs** on a 3 GHz TSC
//! (42 µs on a 1 GHz one), and at the kernel's nominal rate (no slew) 12.6 µs of window, the
//! skew and the bracket: some 16 µs (`never_behind_instant` on a loaded 2.4 GHz VM: at most
//! 18.6 µs over three million reads, its brackets up to 2 µs wide). A deadline counted from
//! it is late by that much more than one counted from `Instant::now()`, a few percent of the
//! default 1 ms tick and well within the lateness bar (1 tick + 0.5 ms). The window is that
//! short to keep this bound so: a new anchor costs one `Instant::now()` between two fenced
//! TSC reads (some 60 ns) every 20 µs of the TSC's time on a busy thread (0.3 %).

// Not modelled under loom (this file is not built there: the mocked clock is the only one),
// so std's cell, thread-local and `OnceLock`, and the facade's `plain` atomics: one word,
// written by one CAS and perhaps once more to `OFF`; every other piece is per thread.
use crate::sync::plain::Ordering;
use estimate::{Anchor, OFF, Platform, Process};
use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Instant;

mod estimate;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

/// The most TSC cycles an anchor's bracket (a TSC read, `Instant::now()`, a TSC read) may
/// span for the anchor to be kept: ≤ 2.8 µs at 3 GHz; a bracket is some 200 cycles.
const MAX_BRACKET: u64 = 1 << 13;

/// How far ahead of the instructions before it the CPU may execute a plain `rdtsc`, in the
/// TSC's own nanoseconds (the raw clock's): see "Ordering" in the module's docs.
const EARLY_NANOS: u64 = 2_000;

/// The scale's margin over the raw rate, in eighths: 5/8 = 62.5 %, above the 60.1 % the
/// kernel's clock may run faster than the raw one (see the module's docs).
const MARGIN_EIGHTHS: u128 = 5;

/// What every estimate adds for a TSC read that ran ahead of the instructions before it:
/// [`EARLY_NANOS`] at the fastest rate the scale allows (`× (8 + 5)/8`), 3,250 ns.
const SKEW_NANOS: u64 = EARLY_NANOS * (8 + MARGIN_EIGHTHS as u64) / 8;

/// How long the process-wide calibration measures before the estimate is used.
const CALIBRATION_NANOS: u64 = 20_000_000;

/// How long an anchor serves, in nanoseconds as the scale counts them (2¹⁵, 32.8 µs): the
/// estimate's lead over the kernel grows over a window (see "How late").
const WINDOW_NANOS: u64 = 1 << 15;

/// The estimator's shared state in this process.
static PROCESS: Process = Process::new();

/// The base every anchor counts from: `None` where the TSC is unusable. Set by the first
/// `Clock::new`, with the calibration's first pair.
static BASE: OnceLock<Option<Instant>> = OnceLock::new();

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
    let base = (*BASE.get_or_init(first_pair))?;
    let nanos = |from: Instant, to: Instant| u64::try_from(to.saturating_duration_since(from).as_nanos()).ok();
    Some(Offset { add: nanos(start, base)?, sub: nanos(base, start)? })
}

/// An estimate of `Instant::now()` in nanoseconds since the base (never below the real now
/// read before this call; see the module's proof), or `None` where there is none.
#[inline]
pub(crate) fn now() -> Option<u64> {
    estimate::estimate(&Cpu)
}

/// The most the estimate runs ahead of `Instant::now()` in this process while the kernel's
/// rate is within 2.5 % of its nominal one (no large slew under way), for the tests: 1 + the
/// skew + the widest bracket at the fastest rate + 40 % of a window (the lead a window
/// gathers at such a rate: `1 − 1/1.625` is 38.5 %; see "How late"). Zero while uncalibrated.
#[cfg(test)]
pub(crate) fn lead_bound() -> u64 {
    match PROCESS.scale.load(Ordering::Acquire) {
        estimate::UNCALIBRATED | OFF => 0,
        mult => 1 + SKEW_NANOS + ((MAX_BRACKET * mult) >> 32) + WINDOW_NANOS * 2 / 5,
    }
}

/// The base and the first pair, if the TSC is usable.
fn first_pair() -> Option<Instant> {
    first_pair_on(&Cpu, usable())
}

/// [`first_pair`] on `platform`, given whether its TSC is usable: the estimate switched off
/// for the process if not, else the base and the first pair (`None` if no bracket was
/// narrow). Apart so that a test can give it a platform and either answer.
fn first_pair_on<P: Platform>(platform: &P, usable: bool) -> Option<Instant> {
    if !usable {
        // Relaxed: a plain flag; no data is published with it.
        platform.process().scale.store(OFF, Ordering::Relaxed);
        return None;
    }
    let base = Instant::now();
    estimate::start(platform).then_some(base)
}

/// Whether this CPU's TSC and this kernel's `Instant` are one clock.
fn usable() -> bool {
    usable_given(cfg!(miri), cpu_has_invariant_tsc, || {
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    })
}

/// [`usable`]'s decision from its inputs, each asked for only if those before it allow: not
/// under Miri (which runs no `rdtsc` nor CPUID; it reads `Instant::now()`), an invariant TSC,
/// and the kernel's clocksource `tsc`. Apart so that a test can give it every input.
fn usable_given(
    miri: bool,
    invariant_tsc: impl FnOnce() -> bool,
    clocksource: impl FnOnce() -> std::io::Result<String>,
) -> bool {
    !miri && invariant_tsc() && clocksource().is_ok_and(|source| source.trim() == "tsc")
}

/// The estimator's platform in this process: the CPU's TSC, the kernel's clocks, the calling
/// thread's anchor.
#[derive(Clone, Copy, Debug)]
struct Cpu;

impl Platform for Cpu {
    #[inline(always)]
    fn read(&self) -> u64 {
        arch::read()
    }

    fn read_before(&self) -> u64 {
        arch::read_before()
    }

    fn read_after(&self) -> u64 {
        arch::read_after()
    }

    fn monotonic(&self) -> Option<u64> {
        let base = (*BASE.get()?)?;
        Some(u64::try_from(Instant::now().saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX))
    }

    fn raw(&self) -> Option<u64> {
        arch::raw()
    }

    #[inline(always)]
    fn anchor(&self) -> Anchor {
        ANCHOR.with(Cell::get)
    }

    fn set_anchor(&self, anchor: Anchor) {
        ANCHOR.with(|a| a.set(anchor));
    }

    fn process(&self) -> &Process {
        &PROCESS
    }
}

use arch::cpu_has_invariant_tsc;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod arch {
    use std::arch::x86_64::{__cpuid, _mm_lfence, _rdtsc, CpuidResult};

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

    /// `struct timespec` on x86_64 Linux.
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }

    /// `CLOCK_MONOTONIC_RAW` in `<linux/time.h>`.
    const CLOCK_MONOTONIC_RAW: i32 = 4;

    // SAFETY: the C library's `clock_gettime` (which std links on Linux), declared with its
    // C signature: `int clock_gettime(clockid_t, struct timespec *)`, `clockid_t` an `int`.
    unsafe extern "C" {
        fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
    }

    /// `CLOCK_MONOTONIC_RAW` in nanoseconds (the vDSO's; std has no reading of it).
    pub(crate) fn raw() -> Option<u64> {
        let mut time = Timespec { sec: 0, nsec: 0 };
        // SAFETY: `time` is a valid, writable `timespec` for the call's duration; the clock id
        // is one Linux has had since 2.6.28 (an unknown one fails with `EINVAL`, no write).
        if unsafe { clock_gettime(CLOCK_MONOTONIC_RAW, &mut time) } != 0 {
            return None;
        }
        let (sec, nsec) = (u64::try_from(time.sec).ok()?, u64::try_from(time.nsec).ok()?);
        sec.checked_mul(1_000_000_000)?.checked_add(nsec)
    }

    /// CPUID leaf `leaf`. `__cpuid` is a safe function from Rust 1.89 (or so) and an `unsafe`
    /// one before it: the `unsafe` block serves both (the declared MSRV is 1.85), and is
    /// unused on the newer.
    fn cpuid(leaf: u32) -> CpuidResult {
        // SAFETY: CPUID is in every x86_64 CPU, reads no memory and has no precondition.
        #[allow(unused_unsafe)]
        unsafe {
            __cpuid(leaf)
        }
    }

    /// CPUID: an invariant TSC (leaf 0x8000_0007, EDX bit 8: the rate is constant and the
    /// counter runs in every power state).
    pub(crate) fn cpu_has_invariant_tsc() -> bool {
        reports_invariant_tsc(cpuid(0x8000_0000).eax, || cpuid(0x8000_0007).edx)
    }

    /// What CPUID's answers say: the highest extended leaf, `max_leaf` (leaf 0x8000_0000's
    /// EAX), reaches 0x8000_0007, and that leaf's EDX has bit 8. A leaf past the highest one
    /// is not asked for (`edx` is called only then). Apart from the CPUID calls so that a
    /// test can give it every answer, not only this CPU's.
    pub(crate) fn reports_invariant_tsc(max_leaf: u32, edx: impl FnOnce() -> u32) -> bool {
        max_leaf >= 0x8000_0007 && edx() & (1 << 8) != 0
    }
}

/// Elsewhere nothing says that `Instant` is read from the TSC: the estimate is never on. A
/// file of its own, so that `.cargo/mutants.toml` can leave out its mutants, which no test
/// on x86_64 Linux can see (it is not built there).
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[path = "elsewhere.rs"]
mod arch;
