//! The embedded, thread-per-core mode: [`LocalWheel`], owned by one event loop, and its
//! [`RemoteWheel`] for other threads (design §7.1).
//!
//! # One wheel, one clock arithmetic
//!
//! A `LocalWheel` is the service's wheel (`src/wheel/`), holding [`Entry`]s (a deadline tick
//! and the payload), driven one due timer at a time ([`Wheel::pop_due`]) instead of in
//! batches, with the service's tick arithmetic (`src/clock/mod.rs`). It reads no clock: its now
//! is the last instant given to [`LocalWheel::poll_expired`].
//!
//! # Keys
//!
//! A [`TimerKey`] is the timer's slot (its node in the wheel's slab) and the slot's
//! generation. The generation sits in the slot's word (`SlotWord`, `src/state.rs`; the words
//! are in `slots.rs`), with the timer's state: every operation by key first checks it, so a
//! stale key finds a vacant slot or another generation and changes nothing. A slot whose
//! generation has come all the way round is retired (`Wheel::retire`), so a stale key is
//! never aliased.
//!
//! # Memory: 32 bytes per pending `u64` timer
//!
//! A node is 24 bytes for a `u64` payload (the payload, the deadline tick stored as a
//! `NonZeroU64` so that `Option<Entry>` needs no tag, and two `u32` links: the lists are
//! circular with sentinels and carry no list id), and the slot word 8 more, in pages that
//! never move (`slots.rs`), so that remote threads can reach it. Nothing is allocated per
//! timer in steady state: nodes and words freed by cancels and expiries are reused (the slab
//! grows only past the most timers ever pending; remote commands travel in the queue's
//! blocks of 31).
//!
//! # Atomics on the local path
//!
//! The slot words are atomics because a [`RemoteWheel`] may CAS them. Until the first
//! [`LocalWheel::remote`] call none exists and no other thread can reach a word, so the owner
//! reads and writes them with loads and stores only (`Acquire` loads and `Relaxed` stores:
//! ordinary `mov`s on x86, an `ldar` for the load on ARM) and never a read-modify-write: a
//! cancel is the look-up's load and one store, an expiry a load and a store. From then on, the owner's
//! cancel and expiry are each one uncontended CAS on the word (a `lock cmpxchg` on a line
//! the owner just read, a few nanoseconds), so that a remote cancel is decided exactly, and
//! `poll_expired` first drains the remote commands when a flag the remotes set says some
//! wait (one plain load per call otherwise: `Shared::has_mail`).
//!
//! # Files
//!
//! Here, the type and its making; `arm.rs`, the owner's calls by key (arm, cancel, reset,
//! get); `poll.rs`, the loop's side (`poll_expired`, the remote commands' drain, `park`);
//! `remote.rs`, [`RemoteWheel`] and the queue it shares with the owner; `slots.rs`, the slot
//! words; `key.rs`, [`TimerKey`]; `builder.rs`, [`LocalBuilder`].

mod arm;
mod builder;
mod key;
mod poll;
mod remote;
mod slots;
#[cfg(all(test, not(loom)))]
mod tests;

pub use builder::LocalBuilder;
pub use key::TimerKey;
pub use remote::{Notify, RemoteWheel};

use crate::clock::Clock;
use crate::state::NEVER;
use crate::sync::plain::AtomicUsize;
use crate::sync::{Arc, Ordering};
use crate::wheel::{Timed, Wheel};
use remote::Shared;
use slots::Slots;
use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

/// A timer handed out by [`LocalWheel::poll_expired_with_deadline`]: its key, its payload,
/// and the deadline it fired for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiredTimer<T> {
    /// The key it was armed with (now stale).
    pub key: TimerKey,
    /// Its payload.
    pub payload: T,
    /// Its deadline, rounded up to the tick boundary it fired at or after.
    pub deadline: Instant,
}

/// What the wheel holds: the deadline tick (plus one, so `Option<Entry<T>>` uses the zero
/// as its `None` and needs no tag) and the payload.
struct Entry<T> {
    deadline: NonZeroU64,
    payload: T,
}

impl<T> Entry<T> {
    fn new(deadline: u64, payload: T) -> Entry<T> {
        Entry { deadline: Self::encode(deadline), payload }
    }

    fn encode(deadline: u64) -> NonZeroU64 {
        NonZeroU64::MIN.saturating_add(deadline.min(NEVER))
    }
}

impl<T> Timed for Entry<T> {
    fn deadline(&self) -> u64 {
        self.deadline.get() - 1
    }
}

impl<T> fmt::Debug for Entry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry").field("deadline", &self.deadline()).finish_non_exhaustive()
    }
}

/// A timer wheel owned by one thread's event loop: typed payloads (a connection id), no
/// closure, no allocation per timer, no clock read and no atomic read-modify-write on the
/// local path, and a [`park`](LocalWheel::park) that says how long to sleep and tells remote
/// threads, for that long, that a new earlier deadline must wake the owner.
///
/// `Send` (for `T: Send`), so it can be built on one thread and handed to the loop that
/// owns it, or moved with its loop; `!Sync`: one thread drives it at a time. Other threads
/// reach it through a [`RemoteWheel`]. Moving it is sound with no `unsafe`: every field is
/// `Send` by itself (the remote queue is multi-producer, multi-consumer; "only the owner
/// pops" means one thread at a time, which ownership of the wheel gives). The notifier
/// wakes whatever it was built to wake: after a move, it must still wake the thread that
/// now drives the wheel.
///
/// ```
/// # use std::time::Duration;
/// let mut wheel = shardwheel::LocalWheel::new();
/// let key = wheel.arm(Duration::from_secs(5), 1u64);
/// let remote = wheel.remote();
/// let owner = std::thread::spawn(move || wheel.cancel(key)); // the loop's own thread
/// assert_eq!(owner.join().unwrap(), Some(1));
/// assert!(!remote.cancel(key));
/// ```
///
/// A payload that is not `Send` keeps the wheel on its thread:
///
/// ```compile_fail
/// let wheel = shardwheel::LocalWheel::<std::rc::Rc<u8>>::new();
/// std::thread::spawn(move || drop(wheel));
/// ```
///
/// and the wheel is never shared between threads:
///
/// ```compile_fail
/// fn shared<S: Sync>(_: &S) {}
/// shared(&shardwheel::LocalWheel::<u64>::new());
/// ```
///
/// Timers fire at the first tick boundary at or after their deadline (never early), earliest
/// first, and in the order they were armed (or last reset) within a tick.
///
/// ```
/// use shardwheel::LocalWheel;
/// use std::time::{Duration, Instant};
///
/// let mut wheel = LocalWheel::new(); // a 1 ms tick; its now is the instant it was made
/// let request = wheel.arm(Duration::from_millis(50), 1u64);
/// let idle = wheel.arm(Duration::from_millis(10), 2u64);
/// assert_eq!(wheel.cancel(request), Some(1)); // the response came
///
/// // The event loop: sleep until the next deadline (or a remote wake-up), then take what
/// // is due. `park` hands the sleep its timeout (here, at most 10 ms: the idle timer).
/// wheel.park(|timeout| std::thread::sleep(timeout.expect("one timer pending")));
/// while let Some((key, conn)) = wheel.poll_expired(Instant::now()) {
///     assert_eq!((key, conn), (idle, 2));
/// }
/// assert!(wheel.is_empty());
/// ```
pub struct LocalWheel<T> {
    wheel: Wheel<Entry<T>>,
    slots: Slots,
    shared: Arc<Shared<T>>,
    clock: Clock,
    now: Instant,
    /// `now` in nanoseconds since the clock's start, for `arm_from_last_poll` and `arm`.
    now_nanos: u64,
    /// `now`'s tick: computed once per new `now`, not once per `poll_expired` call.
    now_tick: u64,
    /// Whether a `RemoteWheel` was ever made: from then on the slot words are CASed.
    remote_made: std::cell::Cell<bool>,
    /// Whether `prepare_park` announced a sleep to the remotes that has not been taken back
    /// yet (`Shared::woke`): one store per sleep, not one per fired timer.
    announced: bool,
    /// Whether the next `poll_expired` must drain whatever the mail flag says: the last
    /// drain ran out of budget, or `prepare_park` found commands waiting.
    must_drain: bool,
    /// How many times the remote queue was drained.
    #[cfg(test)]
    drains: usize,
    /// Slots the wheel may use, to reach the 2²⁸ limit in a test.
    #[cfg(test)]
    slot_limit: usize,
    /// Remote arms dropped because the wheel had no slot left for them.
    remote_arms_dropped: u64,
    /// Slot → (generation, ticket of the reset in effect), for the timers a remote has
    /// reset: see [`SlotWord`](crate::state::SlotWord)'s docs. A timer missing here has
    /// ticket 0 in effect. Empty until a remote resets, so the other paths pay one
    /// `is_empty` check.
    resets_in_effect: HashMap<u32, (u32, u32)>,
    max_pending: usize,
}

impl<T> LocalWheel<T> {
    /// A wheel with a 1 ms tick whose time starts now.
    ///
    /// ```
    /// let wheel = shardwheel::LocalWheel::<u64>::new();
    /// assert!(wheel.is_empty());
    /// ```
    pub fn new() -> LocalWheel<T> {
        LocalWheel::from_parts(Instant::now(), Duration::from_millis(1), 0, slots::MAX_SLOTS, None, None)
    }

    fn from_parts(
        start: Instant,
        tick: Duration,
        capacity: usize,
        max_pending: usize,
        notifier: Option<Box<dyn Notify>>,
        seed: Option<u32>,
    ) -> LocalWheel<T> {
        let clock = Clock::new(start, tick);
        LocalWheel {
            wheel: Wheel::with_capacity(capacity),
            slots: Slots::new(seed.unwrap_or_else(next_seed)),
            shared: Arc::new(Shared::new(clock.clone(), notifier)),
            clock,
            now: start,
            now_nanos: 0,
            now_tick: 0,
            remote_made: std::cell::Cell::new(false),
            announced: false,
            must_drain: false,
            #[cfg(test)]
            drains: 0,
            #[cfg(test)]
            slot_limit: slots::MAX_SLOTS,
            remote_arms_dropped: 0,
            resets_in_effect: HashMap::new(),
            max_pending,
        }
    }

    /// The wheel's now: the latest instant given to `poll_expired` (or its start).
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::<()>::new();
    /// let later = wheel.now() + Duration::from_secs(1);
    /// wheel.poll_expired(later);
    /// wheel.poll_expired(later - Duration::from_millis(500)); // earlier: ignored
    /// assert_eq!(wheel.now(), later);
    /// ```
    pub fn now(&self) -> Instant {
        self.now
    }

    /// A handle for other threads: see [`RemoteWheel`]. From the first call on, the owner's
    /// cancels and expiries are each one uncontended CAS on the timer's slot word (before it,
    /// a load and a store, since no other thread can reach the word), so that a remote cancel
    /// is decided exactly.
    ///
    /// ```
    /// let wheel = shardwheel::LocalWheel::<u64>::new();
    /// let remote = wheel.remote();
    /// std::thread::spawn(move || drop(remote)).join().unwrap();
    /// ```
    pub fn remote(&self) -> RemoteWheel<T>
    where
        T: Send,
    {
        self.remote_made.set(true);
        RemoteWheel::new(self.shared.clone())
    }

    #[cfg(test)]
    pub(crate) fn slot_word_for_test(&self, key: TimerKey) -> &crate::state::SlotWord {
        self.slots.word(key.index)
    }
}

impl LocalWheel<()> {
    /// Settings other than the defaults: see [`LocalBuilder`]. (Defined on
    /// `LocalWheel<()>` only so that `LocalWheel::builder()` needs no type: the payload
    /// type is chosen by [`LocalBuilder::build`].)
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wheel = shardwheel::LocalWheel::builder().tick(Duration::from_millis(10)).build::<u64>()?;
    /// # Ok::<(), shardwheel::BuildError>(())
    /// ```
    pub fn builder() -> LocalBuilder {
        LocalBuilder::new()
    }
}

impl<T> Default for LocalWheel<T> {
    fn default() -> Self {
        LocalWheel::new()
    }
}

impl<T> Drop for LocalWheel<T> {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl<T> fmt::Debug for LocalWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalWheel")
            .field("len", &self.len())
            .field("now", &self.now)
            .field("tick", &self.clock.tick())
            .field("next_deadline", &self.wheel.next_deadline().map(|t| self.clock.instant_of(t)))
            .field("remote", &self.remote_made.get())
            .finish()
    }
}

/// Each wheel's first generation: spread, so that a key used on the wrong wheel is almost
/// always stale there.
fn next_seed() -> u32 {
    static WHEELS: AtomicUsize = AtomicUsize::new(1);
    // Relaxed: an id, ordered with nothing.
    (WHEELS.fetch_add(1, Ordering::Relaxed) as u32).wrapping_mul(0x9E37_79B9)
}
