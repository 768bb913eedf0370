//! The mocked clock under loom: time since every service's start, moved only by shard
//! sleeps and by the model itself. A plain thread-local: loom runs all of a model's threads
//! on the test's one OS thread, so they share it, and parallel tests do not.

use std::cell::Cell;
use std::time::{Duration, Instant};

std::thread_local! {
    static ELAPSED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    static FROZEN: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn frozen() -> bool {
    FROZEN.with(Cell::get)
}

pub(crate) fn freeze(frozen: bool) {
    FROZEN.with(|f| f.set(frozen));
}

pub(crate) fn elapsed() -> Duration {
    ELAPSED.with(Cell::get)
}

/// The mocked now of a clock that started at `start`. Here, not in `Clock::now`, so that
/// `.cargo/mutants.toml` leaves it out with this file (the plain build never compiles it).
pub(crate) fn now(start: Instant) -> Instant {
    start + elapsed()
}

/// Moves time forward to `to` (never back).
pub(crate) fn advance_to(to: Duration) {
    ELAPSED.with(|e| e.set(e.get().max(to)));
}

pub(crate) fn reset() {
    ELAPSED.with(|e| e.set(Duration::ZERO));
    freeze(false);
}
