//! `Instant`s as `CLOCK_MONOTONIC` nanoseconds, for `--trace`: the server
//! (`shardwheel-httpd --trace`) builds this same file into its binary, so the two sides of
//! a trace are on one clock and join on one machine.

use std::sync::OnceLock;
use std::time::Instant;

/// `instant` as `CLOCK_MONOTONIC` nanoseconds, the clock `Instant` reads on Linux: offset
/// from one pair of readings taken together (the first call), so two processes on one
/// machine agree to within that pair's gap (well under a microsecond).
pub fn mono_ns(instant: Instant) -> i128 {
    static ANCHOR: OnceLock<(Instant, i128)> = OnceLock::new();
    let &(anchor, anchor_ns) = ANCHOR.get_or_init(|| {
        let instant = Instant::now();
        let ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|t| i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec()))
            .unwrap_or(0);
        (instant, ns)
    });
    if instant >= anchor {
        anchor_ns + (instant - anchor).as_nanos() as i128
    } else {
        anchor_ns - (anchor - instant).as_nanos() as i128
    }
}
