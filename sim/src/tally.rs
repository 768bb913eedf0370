//! What every thread counts: a producer in plain locals ([`Counts`]), published once per
//! batch; a [`Task`] its firing and lateness in [`Shared`] when it runs, and its drop in its
//! `Drop`, on whichever thread drops it. All counters are `Relaxed`: they carry no data, and
//! exact values are read after joining their writers. And what the run costs the process:
//! CPU time (`getrusage`), live heap and resident bytes (read as the memory benches do).

use crate::args::Config;
use crate::histogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use shardwheel_peers::report::resident_bytes as rss_bytes;

/// A figure per kind of timeout: `[idle, request]`.
pub type PerKind<T> = [T; 2];

/// Defines [`Counts`], a field per counter, and their sum.
macro_rules! counts {
    ($($field:ident),* $(,)?) => {
        /// What one producer did (or all of them, summed); see `counts!` for each counter.
        #[derive(Clone, Copy, Debug, Default)]
        pub struct Counts {
            $(pub $field: u64,)*
        }

        impl Counts {
            pub fn add(&mut self, o: &Counts) {
                $(self.$field += o.$field;)*
            }
        }
    };
}

// Activity events (each: one reset, one request) that found an active connection; timeouts
// scheduled; `reset()` = true, = false on an active connection (its idle timeout had fired);
// `cancel()` of a request = true (the response came in time), = false (the timeout won);
// requests never answered (their handles are dropped, so they fire); arms the timer refused;
// tasks built (beyond one per idle arm, for timers that reset by arming again); connections
// chosen to go quiet.
counts! {
    events, idle_armed, request_armed, resets_ok, resets_failed, cancels_ok, cancels_failed,
    lost, idle_failed, request_failed, created_idle, created_request, quiet,
}

impl Counts {
    pub fn scheduled(&self) -> u64 {
        self.idle_armed + self.request_armed
    }

    pub fn schedule_failed(&self) -> u64 {
        self.idle_failed + self.request_failed
    }

    /// Idle tasks built for resets that arm again (each replaced a pending idle timeout, or
    /// was dropped unused when the reset lost).
    pub fn reset_tasks(&self) -> u64 {
        self.created_idle - self.idle_armed - self.idle_failed
    }
}

/// A producer's published counts (locked once per batch by it, once a second by the main
/// thread) and the drops of its tasks: all, and those dropped without having run. Aligned so
/// that no two producers share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct ProducerTally {
    pub published: Mutex<Counts>,
    dropped: PerKind<AtomicU64>,
    unrun: PerKind<AtomicU64>,
}

/// Everything the threads share, leaked once per run so that tasks hold a `&'static` to it:
/// the time origin (deadlines are ns since it), the tasks that ran, those that ran early and
/// the earliest (ns before its deadline), the largest lateness (µs) since the progress line
/// last took it, the lateness histograms, how late a plain sleep of a tick woke up meanwhile
/// (corrected for coordinated omission: the operating system's share), and the settings.
#[derive(Debug)]
pub struct Shared {
    pub start: Instant,
    pub producers: Box<[ProducerTally]>,
    pub fired: PerKind<AtomicU64>,
    pub early: AtomicU64,
    pub worst_early_ns: AtomicU64,
    pub interval_max_us: AtomicU64,
    pub lateness: PerKind<Histogram>,
    pub sleep_lateness: Histogram,
    pub config: Config,
}

impl Shared {
    pub fn leak(config: &Config) -> &'static Shared {
        Box::leak(Box::new(Shared {
            start: Instant::now(),
            producers: (0..config.producers).map(|_| ProducerTally::default()).collect(),
            fired: Default::default(),
            early: AtomicU64::new(0),
            worst_early_ns: AtomicU64::new(0),
            interval_max_us: AtomicU64::new(0),
            lateness: [Histogram::new(), Histogram::new()],
            sleep_lateness: Histogram::new(),
            config: config.clone(),
        }))
    }

    /// Every producer's published counts, summed.
    pub fn counts(&self) -> Counts {
        self.producers.iter().fold(Counts::default(), |mut total, p| {
            total.add(&p.published.lock().unwrap_or_else(|e| e.into_inner()));
            total
        })
    }

    /// Tasks dropped (`unrun`: only those dropped without having run), summed over producers.
    pub fn drops(&self, unrun: bool) -> PerKind<u64> {
        let of = |p: &ProducerTally, k: usize| (if unrun { &p.unrun } else { &p.dropped })[k].load(Relaxed);
        [0, 1].map(|k| self.producers.iter().map(|p| of(p, k)).sum())
    }

    pub fn expired(&self) -> PerKind<u64> {
        self.fired.each_ref().map(|a| a.load(Relaxed))
    }

    /// Nanoseconds from the time origin to `at`.
    pub fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_nanos() as u64
    }
}

/// The requested deadlines of a producer's idle timeouts (ns since the time origin), shared
/// with their tasks; resets move them (`Producer::reset_idle` says why a stale read can only
/// overstate lateness). A newtype, so that the task holds a thin pointer.
#[derive(Debug)]
pub struct DeadlineTable(pub Box<[AtomicU64]>);

/// `size_of` a [`Task`], which every timer stores per pending timeout (its closure holds it).
pub const TASK_BYTES: u64 = size_of::<Task>() as u64;

/// What every timer runs when a timeout fires: records the lateness against the requested
/// deadline and counts the firing; its `Drop` counts its drop, exactly once, wherever it
/// happens. 32 bytes, the size of the closures a server would arm.
#[derive(Debug)]
pub struct Task {
    shared: &'static Shared,
    producer: u32,
    /// Set when the task runs, just before it drops.
    ran: bool,
    what: What,
}

/// An idle timeout's deadline is in the table, since resets move it; a request's never moves.
#[derive(Debug)]
pub enum What {
    Idle { table: Arc<DeadlineTable>, at: u32 },
    Request { deadline_ns: u64 },
}

impl Task {
    pub fn new(shared: &'static Shared, producer: usize, what: What) -> Task {
        Task { shared, producer: producer as u32, ran: false, what }
    }

    /// Indexes the per-kind figures: 0 idle, 1 request.
    fn kind(&self) -> usize {
        usize::from(matches!(self.what, What::Request { .. }))
    }

    /// The timeout fired: measure how late, count it, drop the task.
    pub fn run(mut self) {
        let deadline = match &self.what {
            What::Idle { table, at } => table.0[*at as usize].load(Relaxed),
            What::Request { deadline_ns } => *deadline_ns,
        };
        let (shared, kind) = (self.shared, self.kind());
        let now = shared.nanos(Instant::now());
        shared.fired[kind].fetch_add(1, Relaxed);
        if now < deadline {
            shared.early.fetch_add(1, Relaxed);
            shared.worst_early_ns.fetch_max(deadline - now, Relaxed);
        } else {
            let late_us = (now - deadline) / 1_000;
            shared.lateness[kind].record(late_us);
            shared.interval_max_us.fetch_max(late_us, Relaxed);
        }
        self.ran = true;
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        let (tally, kind) = (&self.shared.producers[self.producer as usize], self.kind());
        tally.dropped[kind].fetch_add(1, Relaxed);
        if !self.ran {
            tally.unrun[kind].fetch_add(1, Relaxed);
        }
    }
}

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

/// Bytes allocated and not yet freed, process-wide, by the peers' counting allocator (`main`'s).
pub fn heap_live() -> u64 {
    shardwheel_peers::counting::live().max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_is_small_and_counts_its_drop_once() {
        assert_eq!(TASK_BYTES, 32);
        let shared = Shared::leak(&crate::args::tests::parse_str("--producers 1").unwrap().0);
        Task::new(shared, 0, What::Request { deadline_ns: 0 }).run();
        drop(Task::new(shared, 0, What::Request { deadline_ns: 0 }));
        assert_eq!((shared.drops(false), shared.drops(true), shared.expired()), ([0, 2], [0, 1], [0, 1]));
    }

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
