//! What a run costs the process: CPU time (`getrusage`), live heap bytes (the peers' counting
//! global allocator, as the memory benches'), resident memory (the peers' reading of
//! `/proc/self/statm`, as the benches').

use std::time::Duration;

pub use shardwheel_peers::report::resident_bytes as rss_bytes;

/// CPU time: user, system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
}

impl Usage {
    pub fn total(&self) -> Duration {
        self.user + self.system
    }
}

/// CPU time the whole process has used so far (every thread, live or joined); `None` off Unix.
pub fn cpu_time() -> Option<Usage> {
    #[cfg(unix)]
    {
        // SAFETY: `rusage` is plain old data (integers and `timeval`s), for which all-zero
        // bytes are a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a valid, writable `rusage`; `getrusage` only writes into it.
        let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0;
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
        ok.then(|| Usage { user: tv(usage.ru_utime), system: tv(usage.ru_stime) })
    }
    #[cfg(not(unix))]
    None
}

/// CPU time used since `before` (a [`cpu_time`] reading), if both readings exist.
pub fn cpu_since(before: Option<Usage>) -> Option<Usage> {
    let (before, now) = (before?, cpu_time()?);
    Some(Usage { user: now.user.saturating_sub(before.user), system: now.system.saturating_sub(before.system) })
}

/// Bytes allocated and not yet freed, over the whole process (0 unless the peers' counting
/// allocator, which `main` installs, is the global allocator).
pub fn heap_live() -> u64 {
    shardwheel_peers::counting::live().max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spinning shows in the CPU time: 10 ms of it, however long a loaded machine takes to
    /// grant them (a fixed 30 ms of wall time gave less than 10 ms under load).
    #[test]
    fn cpu_and_rss_measure() {
        let (before, start) = (cpu_time(), std::time::Instant::now());
        let used = || cpu_since(before).map_or(Duration::ZERO, |used| used.total());
        while used() < Duration::from_millis(10) && start.elapsed() < Duration::from_secs(10) {}
        assert!(used() >= Duration::from_millis(10) || !cfg!(unix), "{:?} in {:?}", used(), start.elapsed());
        assert!(!cfg!(target_os = "linux") || rss_bytes().unwrap() > 0);
    }
}
