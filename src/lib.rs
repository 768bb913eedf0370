//! # shardwheel
//!
//! A sharded, multi-core timer service whose producers take no lock: one hierarchical hashed
//! timing wheel per core, lock-free stages and mailboxes between threads, and one
//! compare-and-swap per timeout.
//!
//! ```
//! use shardwheel::{TimerService, TimeoutState};
//! use std::sync::mpsc;
//! use std::time::Duration;
//!
//! let timers = TimerService::builder().shards(2).build()?;
//!
//! // A request timeout: armed, and almost always cancelled when the response comes.
//! let request = timers.schedule(Duration::from_secs(5), || println!("request timed out"))?;
//! assert!(request.cancel());
//!
//! // An idle timeout: activity pushes it out; it fires when the connection goes quiet.
//! let (tx, rx) = mpsc::channel();
//! let idle = timers.schedule(Duration::from_secs(60), move || tx.send("idle").unwrap())?;
//! assert!(idle.reset(Duration::from_secs(90))); // activity: later, one CAS
//! assert!(idle.reset(Duration::from_millis(10))); // the peer went quiet: earlier
//! assert_eq!(rx.recv()?, "idle");
//! assert_eq!(idle.state(), TimeoutState::Expired);
//!
//! // Stopping hands back every timeout that did not fire.
//! timers.schedule(Duration::MAX, || unreachable!("never fires"))?;
//! let unfired = timers.stop()?;
//! assert_eq!(unfired.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # How it works
//!
//! - **Shards.** Each shard is a thread (pinned to a core with `core_affinity`) that alone
//!   owns a [hierarchical hashed wheel](https://doi.org/10.1145/41457.37504): six levels of
//!   64 slots, `u64` occupancy bitmaps, O(1) insert and remove. The thread sleeps until the
//!   next occupied slot; a shard with nothing to do sleeps without a timeout and makes no
//!   wake-ups at all.
//! - **Routing.** A task that schedules from its own shard thread files the timeout straight
//!   into that wheel. Any other thread has a home shard, fixed for its life, and reaches it
//!   through its stage there (below) and the shard's lock-free mailbox; it wakes the shard
//!   only if its deadline is
//!   earlier than the one the shard sleeps until.
//!   [`TimerService::schedule_on`] picks a shard explicitly.
//! - **Stages.** A thread's arms first wait on its own ring for that shard (its stage), whose
//!   entries the thread and the shard claim with one CAS, and which the shard takes by the
//!   earliest deadline on it. When the ring fills, the thread drops the timeouts it has
//!   cancelled meanwhile, in its own cache, and keeps the rest: a timeout armed and cancelled
//!   by one thread (the request-timeout pattern) never reaches its shard at all. No lock is
//!   taken on the way. Arms and cancels are counted in per-thread slots, and a [`Timeout`]
//!   keeps its shard alive through a handle counted per (thread, shard), so no call writes a
//!   counter another producer writes. What the producers of one shard do share is its
//!   mailbox, for the messages they must send it (a stage that came due earlier, the cancel
//!   of a timeout it has filed, an earlier deadline). A timeout's cell comes from its arming
//!   thread's pool of pages; a cell freed on another thread (the shard's, after it fired)
//!   goes onto its page's own stack with one CAS, and the owner takes the whole stack back
//!   with one swap when it runs short.
//! - **One state word.** Each timeout's state and deadline share one `AtomicU64`, so
//!   [`Timeout::cancel`], [`Timeout::reset`] and the shard's expiry are each one CAS, and
//!   exactly one of cancel and expire wins. A reset to a later deadline is nothing but that
//!   CAS: the shard re-files the timeout when the old deadline comes.
//!
//! # Beyond callbacks
//!
//! - **`tokio::time`'s calls, ambient**: [`time::sleep`], [`time::timeout`],
//!   [`time::interval`], [`time::Instant`], [`time::pause`] and the rest, on a process-wide
//!   default service: code written against `tokio::time` moves by its `use` lines, and
//!   tokio's own time tests pass on it (what else differs, such as no conversion of
//!   `Elapsed` into `io::Error` for `?`, and the move from pingora-timeout: the repository's
//!   `docs/migration.md`).
//! - **Futures** for any executor on a service of your own: [`TimerService::sleep`],
//!   [`TimerService::sleep_until`], [`TimerService::timeout`] and [`TimerService::interval`].
//!   With the `hyper` cargo feature, [`TimerService`] is a `hyper::rt::Timer`.
//! - **Periodic timers**: [`TimerService::schedule_repeating`], one handle for the series;
//!   its lock-free `cancel()` returning `true` means no run that had not started calls the
//!   closure again (one already under way, at most one, may still be calling it when
//!   `cancel()` returns; it finishes, and none follows).
//! - **Offload**: with the `offload` cargo feature, `Builder::offload` runs expired tasks on a
//!   rayon pool instead of the shard thread.
//! - **Embedded mode**: a thread-per-core event loop owns a [`LocalWheel`] of typed payloads
//!   (no thread, no closure, no allocation per timer) and feeds its
//!   [`next_deadline`](LocalWheel::next_deadline) to `epoll_wait` or io_uring; other threads
//!   reach it through a [`RemoteWheel`].
//!
//! # Cargo features
//!
//! None is on by default. Each adds one dependency and the items that need it, which
//! docs.rs labels with their feature; what a build without it says:
//!
//! - **`hyper`**: [`TimerService`] implements `hyper::rt::Timer` (hyper 1.x), for
//!   `http1::Builder::timer` and hyper's other builders. Without it,
//!   `.timer(timers.clone())` fails with ``the trait bound `TimerService: Timer` is not
//!   satisfied``, and the compiler's help names hyper-util's `TokioTimer`, the one
//!   implementation it can see: the fix is `features = ["hyper"]`, not another timer.
//! - **`offload`**: `Builder::offload(rayon::ThreadPool)` runs expired tasks on a rayon pool
//!   instead of the shard thread. Without it: ``no method named `offload` found for struct
//!   `shardwheel::Builder` in the current scope``, with "private field, not a method" (the
//!   builder has a private field of that name).
//! - **`tokio`**: `io::TimeoutStream`, read, write and idle timeouts around any tokio
//!   `AsyncRead + AsyncWrite`. Without it: `` unresolved import `shardwheel::io` ``, and
//!   rustc's note says the item is gated behind the `tokio` feature.
//!
//! # Guarantees
//!
//! - A timeout never fires before its deadline; it fires at the first tick boundary at or
//!   after it. Timeouts armed by one thread for the same tick on the same shard fire in the
//!   order they were armed; timeouts armed by different threads for the same tick may fire
//!   in either order, even when one arm happens-before the other (ordering them would take a
//!   sequence number shared by every producer).
//! - A timeout ends exactly once: it fires, or a `cancel()` returns true for it, or `stop()`
//!   hands it back. A `cancel()` that returns true means the task never runs (for a series:
//!   see above).
//! - Every error hands the task back; bad input is an error, never a panic. A future has no
//!   task to hand back: one that no shard takes (every shard full, the service stopping or
//!   stopped) waits on the overflow timer and completes at its deadline, never early and
//!   never with a panic (tokio's panic there); [`Sleep::try_poll`], [`WithTimeout::try_poll`]
//!   and [`Interval::try_tick`] return `Err(`[`Stopped`]`)` for a stop instead.
#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly) labels the feature-gated items with their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod clock;
mod counts;
mod entry;
mod error;
mod future;
#[cfg(feature = "hyper")]
mod hyper_timer;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod io;
mod lateness;
mod local;
#[cfg(loom)]
mod loom_live;
#[cfg(loom)]
mod loom_queue;
mod mailbox;
#[cfg(feature = "metrics")]
mod metrics;
mod missed;
mod periodic;
mod routing;
mod service;
mod shard;
mod stage;
mod staging;
mod state;
mod stats;
mod sync;
mod task;
mod test_clock;
#[cfg(all(test, not(loom)))]
mod test_panics;
#[cfg(all(test, not(loom)))]
mod test_wakers;
pub mod time;
mod timeout;
mod wheel;

pub use builder::Builder;
pub use error::{BuildError, Closed, Elapsed, Full, ScheduleError, ScheduleErrorKind, StopError, Stopped};
pub use future::{Interval, Sleep, WithTimeout};
pub use lateness::Lateness;
pub use local::{ExpiredTimer, LocalBuilder, LocalWheel, Notify, RemoteWheel, TimerKey};
pub use missed::Missed;
pub use service::{TimerService, WeakTimerService};
pub use stats::Stats;
pub use task::TimerTask;
pub use test_clock::TestClock;
pub use timeout::{Timeout, TimeoutState, Unfired};

/// Gives back the memory the calling thread's cell pool keeps for its next timeouts (its
/// empty pages) and the process's spare pages: for tests that count the process's memory, so
/// that a page kept for reuse is not read as a leak. Not part of the API.
#[cfg(not(loom))]
#[doc(hidden)]
pub fn __trim_cell_pool() {
    crate::entry::trim_pool();
}

/// The cell pool's pages now, process-wide: `(blocks, spare)`, the 256 KiB blocks taken from
/// the kernel (mapped) and not given back, and how many of them are kept spare for new threads.
/// For tests that check the pool gives its memory back. Not part of the API.
#[cfg(not(loom))]
#[doc(hidden)]
pub fn __cell_pool_pages() -> (usize, usize) {
    crate::entry::pool_pages()
}

/// Hooks for the loom models in `loom-tests/`: the mocked clock. Not part of the API.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_support {
    /// Time since the services started, on the mocked clock.
    pub fn now() -> std::time::Duration {
        crate::clock::mock::elapsed()
    }

    /// Freezes the mocked clock: a shard's timed sleep then lasts until it is woken, so a
    /// model can prove the wake-up comes. Thawed by `reset_clock`.
    pub fn freeze_clock() {
        crate::clock::mock::freeze(true);
    }

    /// Puts the mocked clock back to zero, thawed, and the live-entry count to zero; call at
    /// the start of every model.
    pub fn reset_clock() {
        crate::clock::mock::reset();
        crate::loom_live::reset();
        crate::entry::loom_quarantine::empty();
        crate::periodic::loom_ends::reset();
    }

    /// How many series ended (`cancel()` and the like) while one of their runs was under way
    /// (started, so allowed to call the closure after the `cancel()` returned).
    pub fn series_ended_under_way() -> usize {
        crate::periodic::loom_ends::under_way()
    }

    /// The overflow timer's turn (its thread's, which loom does not run): wakes every sleep
    /// waiting there whose deadline `Instant::now()` has reached, or, with `all`, every one
    /// (as a turn far in the future would). Returns how many it woke.
    pub fn fire_overflow(all: bool) -> usize {
        let now = std::time::Instant::now();
        let now = if all { now + std::time::Duration::from_secs(100 * 365 * 86_400) } else { now };
        let (due, _) = crate::future::overflow::timer().fire_due(now);
        let woken = due.len();
        due.into_iter().for_each(std::task::Waker::wake);
        woken
    }

    /// Sleeps waiting on the overflow timer.
    pub fn overflow_len() -> usize {
        crate::future::overflow::timer().len()
    }

    /// Timeout entries allocated and not yet freed.
    pub fn live_entries() -> isize {
        crate::loom_live::get()
    }

    /// Does what the calling thread's exit does to its stages and its shard handles (each
    /// stage swept, retired and announced; each handle's count merged), now: under loom, a
    /// thread's thread-locals are dropped after the thread is done, outside the model's
    /// schedule, where a destructor's atomic operations may never run to their end (the
    /// same reason as [`exit_pool`]).
    pub fn exit_stages() {
        crate::staging::loom_exit();
    }

    /// Shard handles (`shard/handle.rs`: what a thread's timeouts count on) made and not
    /// yet freed. Below zero: one was freed twice.
    pub fn live_handles() -> isize {
        crate::loom_live::handles()
    }

    /// Pool pages (`entry/pool/`) made and not yet released: once every thread that
    /// allocated cells has exited and every cell is freed, none.
    pub fn live_pages() -> isize {
        crate::loom_live::pages()
    }

    /// Gives up the calling thread's pool heap, as the thread's exit does outside loom (under
    /// loom, thread-local destructors run in an order loom cannot replay, so a model says
    /// where its thread exits): empty pages are released, the others abandoned to their last
    /// free.
    pub fn exit_pool() {
        crate::entry::loom_pool_exit();
    }

    /// A bare slot of the cell pool (the size a 32-byte cell gets), for the models of the
    /// pool's own protocol: made on the calling thread's heap, freed where it is dropped.
    #[derive(Debug)]
    pub struct PoolSlot(std::ptr::NonNull<u8>);

    // SAFETY: a slot is plain memory that its holder alone uses; it may be freed on any
    // thread (`entry/pool/`).
    unsafe impl Send for PoolSlot {}

    impl PoolSlot {
        /// A slot from this thread's heap; panics if the thread has none (it is exiting).
        pub fn alloc() -> PoolSlot {
            PoolSlot(crate::entry::loom_pool_alloc().expect("a heap on this thread"))
        }

        /// The slot's address, to tell slots apart (and see one reused).
        pub fn addr(&self) -> usize {
            self.0.as_ptr() as usize
        }
    }

    impl Drop for PoolSlot {
        fn drop(&mut self) {
            // SAFETY: the slot came from the pool and this holder alone used it.
            unsafe { crate::entry::loom_pool_free(self.0) };
        }
    }

    /// Stages (a thread's arms for one shard) made and not yet freed.
    pub fn live_stages() -> isize {
        crate::loom_live::stages()
    }

    /// Moves the mocked clock forward to `to` after the services' start.
    pub fn advance_clock(to: std::time::Duration) {
        crate::clock::mock::advance_to(to);
    }

    /// `(slots, held)`: the per-thread count slots (`counts.rs`) of every shard of `timers`,
    /// and how many of them a thread holds now. Read with `Relaxed` loads: waiting on it
    /// orders nothing.
    pub fn count_slots(timers: &crate::TimerService) -> (usize, usize) {
        (0..timers.shard_count())
            .map(|i| timers.shard_at(i).counts.census())
            .fold((0, 0), |(n, held), (m, h)| (n + m, held + h))
    }

    /// A bare list of count slots (`counts.rs`), for the models of its hand-over alone.
    #[derive(Debug)]
    pub struct CountSlots(crate::counts::Slots);

    impl Default for CountSlots {
        fn default() -> Self {
            CountSlots(crate::counts::Slots::new())
        }
    }

    impl CountSlots {
        /// A slot for the calling thread: a free one, or a new one.
        pub fn claim(&self) -> CountSlot<'_> {
            CountSlot(self.0.claim())
        }

        /// `(armed, cancelled)` over every slot.
        pub fn sum(&self) -> (u64, u64) {
            self.0.sum()
        }

        /// `(slots, held)`, as `count_slots`.
        pub fn census(&self) -> (usize, usize) {
            self.0.census()
        }
    }

    /// A claimed slot: its holder alone counts in it, until it gives it back.
    #[derive(Debug)]
    pub struct CountSlot<'a>(&'a crate::counts::Slot);

    impl CountSlot<'_> {
        /// Counts an arm.
        pub fn armed(&self) {
            self.0.armed();
        }

        /// Counts a cancel.
        pub fn cancelled(&self) {
            self.0.cancelled();
        }

        /// Gives the slot back, as its holder lets go of it (its thread exits).
        pub fn give_back(self) {
            self.0.give_back();
        }

        /// The slot's address, to tell slots apart.
        pub fn addr(&self) -> usize {
            std::ptr::from_ref(self.0) as usize
        }
    }

    /// Fails shard `index` of `timers` from the calling thread, as its driver's panic does
    /// (`Shard::fail`): for the models of what a schedule sees while a shard fails.
    pub fn fail_shard(timers: &crate::TimerService, index: usize) {
        timers.shard_at(index).fail();
    }

    /// Makes the calling thread's arms skip its stages and go straight to the mailbox, as a
    /// thread whose thread-locals are gone arms: for the models of the mailbox protocol
    /// itself.
    pub fn arm_through_mailbox() {
        crate::staging::loom_bypass::set();
    }

    /// A one-shard service with a `tick` whose wheel holds at most `limit` timeouts, so that
    /// a model reaches the gate's marks and the limit (`shard/gate.rs`) in a few arms.
    pub fn service_with_wheel_limit(tick: std::time::Duration, limit: usize) -> crate::TimerService {
        let mut builder = crate::TimerService::builder().shards(1).tick(tick);
        builder.wheel_limit = Some(limit);
        builder.build().expect("valid settings")
    }
}

/// The README's recipes, compiled and run as doc tests. One is hyper's, one Prometheus's and
/// one `io::TimeoutStream`'s, so they run with those features: `cargo test -p shardwheel
/// --features hyper,metrics,tokio --doc` (CI runs it).
#[cfg(all(doctest, feature = "hyper", feature = "metrics", feature = "tokio"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The migration guide's programs (`docs/migration.md`), compiled and the shardwheel one run
/// as doc tests. docs/ is not in the package: this is built only by `cargo test --doc` here.
#[cfg(doctest)]
#[doc = include_str!("../docs/migration.md")]
pub struct MigrationDoctests;
