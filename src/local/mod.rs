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
//! generation. The generation sits in the slot's [`SlotWord`] (`src/state.rs`), with the
//! timer's state: every operation by key first checks it, so a stale key finds a vacant
//! slot or another generation and changes nothing. A slot whose generation has come all
//! the way round is retired (`Wheel::retire`), so a stale key is never aliased.
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

mod builder;
mod key;
mod remote;
mod slots;
#[cfg(all(test, not(loom)))]
mod tests;

pub use builder::LocalBuilder;
pub use key::TimerKey;
pub use remote::{Notify, RemoteWheel};

use crate::clock::Clock;
use crate::error::Full;
use crate::state::{NEVER, SlotExpiry, SlotWord};
use crate::sync::plain::AtomicUsize;
use crate::sync::{Arc, Ordering};
use crate::wheel::{FIRST_KEY, Key, Timed, Wheel};
use remote::{ASLEEP_UNTIL_WOKEN, Command, Shared};
use slots::Slots;
use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

/// Remote commands applied per `poll_expired` call at most, so a flood from other threads
/// cannot hold up the owner's expiries; the rest wait for the next call (and
/// `prepare_park` says "don't sleep" while any wait).
const DRAIN_BUDGET: usize = 1024;

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
    /// reset: see [`SlotWord`]'s docs. A timer missing here has ticket 0 in effect. Empty
    /// until a remote resets, so the other paths pay one `is_empty` check.
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

    /// Arms `payload` to fire `delay` from now, in real time: this **reads the clock** (the
    /// CPU's time-stamp counter, scaled so that it is never behind `Instant::now()`, some
    /// 10 ns; `Instant::now()`, some 25 ns, where there is no usable one), so the timer never
    /// fires before `delay` has passed,
    /// however long ago the loop last polled. (Counted from the later of the clock and the
    /// wheel's [`now`](LocalWheel::now), for a loop that polls with instants of its own.)
    /// A loop that already holds the current instant saves the clock read with
    /// [`arm_at`](LocalWheel::arm_at), or, counting from its last poll,
    /// [`arm_from_last_poll`](LocalWheel::arm_from_last_poll). `Duration::ZERO` fires at the
    /// next poll; `Duration::MAX` stays pending until cancelled. Does not check
    /// `max_pending`.
    ///
    /// # Panics
    ///
    /// Only past 2²⁸ timers in one wheel (eight gibibytes of `u64` timers).
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let before = Instant::now();
    /// let key = wheel.arm(Duration::from_secs(5), "conn 3");
    /// assert!(wheel.deadline(key).unwrap() >= before + Duration::from_secs(5));
    /// ```
    #[inline]
    pub fn arm(&mut self, delay: Duration, payload: T) -> TimerKey {
        // Never behind `Instant::now()` (the TSC estimate, `src/clock/tsc.rs`), so never early.
        let now = self.clock.real_nanos_for_delay(delay).max(self.now_nanos);
        let deadline = self.clock.deadline_after_nanos(now, delay);
        self.arm_tick(deadline, payload)
    }

    /// Arms `payload` to fire `delay` after the wheel's [`now`](LocalWheel::now), the last
    /// instant given to `poll_expired`: no clock is read. For a loop that polls with the
    /// current instant and arms right after, as most event loops do; a loop that was busy
    /// since its last poll counts from that poll, so the timer may fire before `delay` has
    /// passed in real time (use [`arm`](LocalWheel::arm) there). `Duration::ZERO` fires at
    /// the next poll; `Duration::MAX` stays pending until cancelled. Does not check
    /// `max_pending`.
    ///
    /// # Panics
    ///
    /// Only past 2²⁸ timers in one wheel.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let key = wheel.arm_from_last_poll(Duration::from_secs(5), "conn 3");
    /// assert_eq!(wheel.deadline(key), Some(wheel.now() + Duration::from_secs(5)));
    /// ```
    #[inline]
    pub fn arm_from_last_poll(&mut self, delay: Duration, payload: T) -> TimerKey {
        let deadline = self.clock.deadline_after_nanos(self.now_nanos, delay);
        self.arm_tick(deadline, payload)
    }

    /// Arms `payload` to fire at `deadline` (at the first tick boundary at or after it). A
    /// deadline in the past fires at the next poll; one too far to count stays pending.
    ///
    /// # Panics
    ///
    /// Only past 2²⁸ timers in one wheel.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let past = wheel.now().checked_sub(Duration::from_secs(1)).unwrap_or(wheel.now());
    /// let key = wheel.arm_at(past, 'p');
    /// assert_eq!(wheel.poll_expired(wheel.now()), Some((key, 'p')));
    /// ```
    #[inline]
    pub fn arm_at(&mut self, deadline: Instant, payload: T) -> TimerKey {
        let deadline = self.clock.deadline_at(deadline);
        self.arm_tick(deadline, payload)
    }

    /// As [`arm_at`](LocalWheel::arm_at), but hands the payload back in [`Full`] if the
    /// wheel already holds [`max_pending`](LocalBuilder::max_pending) timers.
    ///
    /// ```
    /// # use std::time::Instant;
    /// let mut wheel = shardwheel::LocalWheel::builder().max_pending(1).build()?;
    /// let first = wheel.try_arm_at(Instant::now(), 1).unwrap();
    /// assert_eq!(wheel.try_arm_at(Instant::now(), 2).unwrap_err().into_inner(), 2);
    /// wheel.cancel(first);
    /// assert!(wheel.try_arm_at(Instant::now(), 3).is_ok(), "a cancel makes room at once");
    /// # Ok::<(), shardwheel::BuildError>(())
    /// ```
    pub fn try_arm_at(&mut self, deadline: Instant, payload: T) -> Result<TimerKey, Full<T>> {
        if self.wheel.len() >= self.max_pending.min(slots::MAX_SLOTS) {
            return Err(Full(payload));
        }
        Ok(self.arm_at(deadline, payload))
    }

    #[inline]
    fn arm_tick(&mut self, deadline: u64, payload: T) -> TimerKey {
        match self.try_arm_tick(deadline, payload) {
            Ok(key) => key,
            Err(payload) => {
                drop(payload);
                panic!("a LocalWheel holds at most {} timers", slots::MAX_SLOTS);
            }
        }
    }

    /// Files `payload`, or hands it back if the wheel has no slot left (past 2²⁸).
    #[inline]
    fn try_arm_tick(&mut self, deadline: u64, payload: T) -> Result<TimerKey, T> {
        let key = self.wheel.insert(Entry::new(deadline, payload));
        let index = key.into_raw() - FIRST_KEY;
        #[cfg(test)]
        let word =
            if (index as usize) < self.slot_limit { self.slots.ensure(index, &self.shared.directory) } else { None };
        #[cfg(not(test))]
        let word = self.slots.ensure(index, &self.shared.directory);
        match word {
            Some(word) => Ok(TimerKey { index, generation: word.arm() }),
            None => Err(self.unfile(key)),
        }
    }

    /// Takes back a timer just filed that got no slot word (past 2²⁸ slots): out of the
    /// wheel before the caller drops the payload. Out of line, so that the arm path inlined
    /// into callers carries no copy of the wheel's removal.
    #[cold]
    #[inline(never)]
    fn unfile(&mut self, key: Key) -> T {
        self.wheel.remove(key).payload
    }

    /// The wheel's key and slot word for `key`, if it names a pending timer.
    #[inline]
    fn find(&self, key: TimerKey) -> Option<(Key, &SlotWord)> {
        let word = self.slots.get(key.index)?;
        if !word.is_pending(key.generation) {
            return None;
        }
        // No overflow: a slot with a word is below `MAX_SLOTS` (2²⁸).
        Some((Key::from_raw(key.index + FIRST_KEY)?, word))
    }

    /// Cancels the timer `key` names and hands its payload back. `None` if it fired, was
    /// cancelled (here or by a [`RemoteWheel`]), or `key` is stale.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let key = wheel.arm(Duration::from_secs(5), String::from("payload"));
    /// assert_eq!(wheel.cancel(key).as_deref(), Some("payload"));
    /// assert_eq!(wheel.cancel(key), None);
    /// ```
    #[inline]
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        // The form with a remote handle out (a CAS, and the resets a remote may have left)
        // is out of line, so that what is inlined into the caller is the plain form alone.
        if self.remote_made.get() {
            return self.cancel_shared(key);
        }
        let (wheel_key, word) = self.find(key)?;
        // `find` saw it pending, and no other thread can reach the word.
        word.vacate_exclusive(key.generation);
        let entry = self.wheel.remove(wheel_key);
        self.retire_if_round(wheel_key, key.generation);
        Some(entry.payload)
    }

    /// [`cancel`](LocalWheel::cancel) once a remote handle exists: one CAS on the slot word
    /// decides between this cancel and a remote's cancel or reset.
    #[inline(never)]
    fn cancel_shared(&mut self, key: TimerKey) -> Option<T> {
        let (wheel_key, word) = self.find(key)?;
        if !word.try_cancel_owned(key.generation) {
            return None;
        }
        self.forget_resets(key.index);
        let entry = self.wheel.remove(wheel_key);
        self.retire_if_round(wheel_key, key.generation);
        Some(entry.payload)
    }

    /// A slot just vacated from generation `generation`: retired if its next generation
    /// would be the one it started at (then every key it ever had could come back).
    #[inline]
    fn retire_if_round(&mut self, wheel_key: Key, generation: u32) {
        if generation.wrapping_add(1) == self.slots.seed() {
            self.wheel.retire(wheel_key);
        }
    }

    /// Moves the timer `key` names to fire at `deadline`, behind the timers already armed
    /// for the same tick. `false` (and nothing changes) if `key` is stale.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let key = wheel.arm(Duration::from_secs(1), ());
    /// let later = wheel.now() + Duration::from_secs(30);
    /// assert!(wheel.reset_at(key, later));
    /// assert_eq!(wheel.deadline(key), Some(later));
    /// ```
    pub fn reset_at(&mut self, key: TimerKey, deadline: Instant) -> bool {
        // Remembered per thread: an event loop's resets of one tick's worth of time go to one
        // tick (see `Clock::deadline_at_for_reset`).
        let tick = self.clock.deadline_at_for_reset(deadline);
        let Some((wheel_key, word)) = self.find(key) else { return false };
        // This reset comes after every remote reset whose CAS the word shows: their
        // messages, still on their way, must not undo it (a remote reset after this load
        // is later, and wins when applied).
        let seq = word.reset_seq();
        if seq != self.reset_in_effect(key) {
            self.resets_in_effect.insert(key.index, (key.generation, seq));
        }
        self.reset_tick(wheel_key, tick);
        true
    }

    /// The ticket of the reset in effect on the timer `key` names (0: none from a remote).
    #[inline]
    fn reset_in_effect(&self, key: TimerKey) -> u32 {
        if self.resets_in_effect.is_empty() {
            return 0;
        }
        match self.resets_in_effect.get(&key.index) {
            Some(&(generation, ticket)) if generation == key.generation => ticket,
            _ => 0,
        }
    }

    /// The timer in slot `index` is gone: its resets no longer matter.
    #[inline]
    fn forget_resets(&mut self, index: u32) {
        if !self.resets_in_effect.is_empty() {
            self.resets_in_effect.remove(&index);
        }
    }

    fn reset_tick(&mut self, wheel_key: Key, tick: u64) {
        if let Some(entry) = self.wheel.get_mut(wheel_key) {
            entry.deadline = Entry::<T>::encode(tick);
            self.wheel.refile(wheel_key);
        }
    }

    /// When the timer `key` names is due: its deadline rounded up to a tick boundary.
    /// `None` if `key` is stale.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let key = wheel.arm_from_last_poll(Duration::from_micros(1500), ());
    /// assert_eq!(wheel.deadline(key), Some(wheel.now() + Duration::from_millis(2)));
    /// ```
    pub fn deadline(&self, key: TimerKey) -> Option<Instant> {
        let (wheel_key, _) = self.find(key)?;
        self.wheel.get(wheel_key).map(|e| self.clock.instant_of(e.deadline()))
    }

    /// The payload of the timer `key` names; `None` if `key` is stale.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let key = wheel.arm(Duration::from_secs(1), 42);
    /// assert_eq!(wheel.get(key), Some(&42));
    /// ```
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        let (wheel_key, _) = self.find(key)?;
        self.wheel.get(wheel_key).map(|e| &e.payload)
    }

    /// The payload of the timer `key` names, to change in place; `None` if `key` is stale.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let key = wheel.arm(Duration::from_secs(1), 1);
    /// *wheel.get_mut(key).unwrap() += 1;
    /// assert_eq!(wheel.cancel(key), Some(2));
    /// ```
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        let (wheel_key, _) = self.find(key)?;
        self.wheel.get_mut(wheel_key).map(|e| &mut e.payload)
    }

    /// Timers pending: armed here or applied from remote arms, and neither fired nor
    /// cancelled. A remote cancel is counted out when the owner next polls or drains.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// wheel.arm(Duration::from_secs(1), ());
    /// assert_eq!(wheel.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// Whether no timer is pending (see [`len`](LocalWheel::len)).
    ///
    /// ```
    /// assert!(shardwheel::LocalWheel::<()>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.wheel.len() == 0
    }

    /// Advances the wheel's now to `now` (never backwards: an earlier instant is ignored)
    /// and hands out one due timer, earliest deadline first and in arming order within a
    /// tick; `None` once nothing is due. First applies the commands remote threads sent.
    /// The caller's loop is the budget, and may arm inside it: a timer armed due by `now`
    /// comes out in the same loop.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let start = wheel.now();
    /// wheel.arm_from_last_poll(Duration::from_millis(2), "b");
    /// wheel.arm_from_last_poll(Duration::from_millis(1), "a");
    /// let mut fired = Vec::new();
    /// while let Some((_, p)) = wheel.poll_expired(start + Duration::from_millis(5)) {
    ///     fired.push(p);
    /// }
    /// assert_eq!(fired, ["a", "b"]);
    /// ```
    #[inline]
    pub fn poll_expired(&mut self, now: Instant) -> Option<(TimerKey, T)> {
        self.poll_entry(now).map(|(key, entry)| (key, entry.payload))
    }

    /// As [`poll_expired`](LocalWheel::poll_expired), with the deadline the timer fired for
    /// (rounded up to its tick boundary, as [`deadline`](LocalWheel::deadline) gave it), for
    /// a loop that measures how late it is or schedules the next run from the deadline.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let start = wheel.now();
    /// let key = wheel.arm_at(start + Duration::from_millis(3), "retry");
    /// let due = wheel.deadline(key).unwrap();
    /// let fired = wheel.poll_expired_with_deadline(start + Duration::from_millis(10)).unwrap();
    /// assert_eq!((fired.key, fired.payload, fired.deadline), (key, "retry", due));
    /// assert_eq!(fired.deadline, start + Duration::from_millis(3));
    /// ```
    pub fn poll_expired_with_deadline(&mut self, now: Instant) -> Option<ExpiredTimer<T>> {
        self.poll_entry(now).map(|(key, entry)| ExpiredTimer {
            key,
            deadline: self.clock.instant_of(entry.deadline()),
            payload: entry.payload,
        })
    }

    /// One due timer with its entry: see [`poll_expired`](LocalWheel::poll_expired).
    #[inline]
    fn poll_entry(&mut self, now: Instant) -> Option<(TimerKey, Entry<T>)> {
        // A loop calls this once per fired timer, and most calls find time unchanged and no
        // remote handle: what those two call for is out of line, so each call stays small.
        if self.remote_made.get() || now > self.now {
            self.prepare_poll(now);
        }
        let wheel_key = self.wheel.pop_due(self.now_tick)?;
        if self.remote_made.get() {
            return self.expire_shared(wheel_key);
        }
        let index = wheel_key.into_raw() - FIRST_KEY;
        // No remote can exist, so the word is PENDING: every filed timer's word is, and
        // only a remote makes it anything else.
        let generation = self.slots.word(index).fire_exclusive();
        let entry = self.wheel.take(wheel_key);
        self.retire_if_round(wheel_key, generation);
        Some((TimerKey { index, generation }, entry))
    }

    /// Before a poll: applies remote commands if a remote exists, and moves the wheel's now
    /// to `now` if it is later.
    #[inline(never)]
    fn prepare_poll(&mut self, now: Instant) {
        if self.remote_made.get() {
            self.wake_up();
            // One plain load per call while no mail waits: see `Shared::has_mail`.
            if self.must_drain || self.shared.has_mail() {
                self.drain_budget(DRAIN_BUDGET);
            }
        }
        if now > self.now {
            self.now = now;
            self.now_nanos = self.clock.nanos_at(now);
            self.now_tick = self.clock.tick_at(now);
        }
    }

    /// `poll_expired`'s expiry once a remote exists: one CAS on the slot word decides
    /// between the expiry and a remote cancel or reset; the losers are dealt with and the
    /// next due timer tried.
    #[inline(never)]
    fn expire_shared(&mut self, first: Key) -> Option<(TimerKey, Entry<T>)> {
        let tick = self.now_tick;
        let mut wheel_key = first;
        loop {
            let index = wheel_key.into_raw() - FIRST_KEY;
            let word = self.slots.word(index);
            let generation = word.generation();
            let in_effect = self.reset_in_effect(TimerKey { index, generation });
            match word.try_expire(generation, in_effect) {
                // The usual case: it fires.
                SlotExpiry::Fired => {
                    self.forget_resets(index);
                    let entry = self.wheel.take(wheel_key);
                    self.retire_if_round(wheel_key, generation);
                    return Some((TimerKey { index, generation }, entry));
                }
                // A remote cancel won before its notice came: drop it now (the notice will
                // find the slot moved on).
                // The bookkeeping is finished before the payload's `Drop` runs: if it panics,
                // the slot is already vacant at the next generation, so no stale key can
                // name the slot's next timer.
                SlotExpiry::Cancelled => {
                    word.clear(generation);
                    self.forget_resets(index);
                    let entry = self.wheel.take(wheel_key);
                    self.retire_if_round(wheel_key, generation);
                    drop(entry);
                }
                // A remote reset newer than the one in effect returned true and its message
                // is not here yet: the timer must not fire at the old deadline. Look again
                // next tick.
                SlotExpiry::ResetInFlight => self.reset_tick(wheel_key, tick.saturating_add(1)),
                SlotExpiry::Stale => unreachable!("a filed timer's slot word is pending or cancelled"),
            }
            wheel_key = self.wheel.pop_due(tick)?;
        }
    }

    /// Applies every command remote threads have sent (arms, cancels, resets) without
    /// waiting for `poll_expired`; returns how many. A loop that polls only at its
    /// deadlines can call it to return the memory of remote cancels sooner.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let remote = wheel.remote();
    /// remote.arm(Duration::from_secs(9), 'r').unwrap();
    /// assert_eq!(wheel.drain_remote(), 1);
    /// assert_eq!(wheel.len(), 1);
    /// ```
    pub fn drain_remote(&mut self) -> usize {
        self.drain_budget(usize::MAX)
    }

    /// Back from a sleep `prepare_park` announced: remotes need not notify.
    fn wake_up(&mut self) {
        if self.announced {
            self.announced = false;
            self.shared.woke();
        }
    }

    fn drain_budget(&mut self, budget: usize) -> usize {
        #[cfg(test)]
        {
            self.drains += 1;
        }
        self.wake_up();
        // Until the queue is seen empty, the next poll drains again: out of budget, or a
        // payload's `Drop` panicked here with mail left behind it.
        self.must_drain = true;
        // Before the pops: see `Shared::has_mail`.
        self.shared.take_mail();
        let mut applied = 0;
        while applied < budget {
            let Some(cmd) = self.shared.pop() else {
                self.must_drain = false;
                break;
            };
            applied += 1;
            match cmd {
                Command::Arm { deadline, payload } => {
                    // Never a panic on the owner's drain path: an arm past the wheel's 2²⁸
                    // slots is dropped and counted (`dropped_remote_arms`).
                    if let Err(payload) = self.try_arm_tick(deadline, payload) {
                        self.remote_arms_dropped += 1;
                        drop(payload);
                    }
                }
                Command::Unlink(key) => self.unlink_cancelled(key),
                // Applied only if no later reset (the owner's, or a remote's already applied)
                // superseded it; a timer cancelled or gone since ignores it.
                Command::Reset { key, deadline, ticket } => {
                    if let Some((wheel_key, _)) = self.find(key) {
                        if SlotWord::is_newer(ticket, self.reset_in_effect(key)) {
                            self.resets_in_effect.insert(key.index, (key.generation, ticket));
                            self.reset_tick(wheel_key, deadline);
                        }
                    }
                }
            }
        }
        applied
    }

    /// Remote arms dropped unfiled because the wheel already used all its 2²⁸ slots (remote
    /// arms are not held to [`max_pending`](LocalBuilder::max_pending): the owner cannot
    /// answer them, so past that limit they are dropped on the owner's thread and counted
    /// here, never a panic).
    ///
    /// ```
    /// let wheel = shardwheel::LocalWheel::<u64>::new();
    /// assert_eq!(wheel.dropped_remote_arms(), 0);
    /// ```
    pub fn dropped_remote_arms(&self) -> u64 {
        self.remote_arms_dropped
    }

    /// A remote cancel won the timer `key`: take it out, drop its payload, free the slot,
    /// unless that was done already (the expiry path found it first).
    fn unlink_cancelled(&mut self, key: TimerKey) {
        let Some(word) = self.slots.get(key.index) else { return };
        if !word.is_cancelled(key.generation) {
            return;
        }
        let Some(wheel_key) = Key::from_raw(key.index + FIRST_KEY) else { return };
        // Out of the wheel, word cleared, slot retired if due, and only then the payload
        // dropped: a panicking `Drop` must not leave the word CANCELLED on a free slot.
        let entry = self.wheel.remove(wheel_key);
        self.slots.word(key.index).clear(key.generation);
        self.forget_resets(key.index);
        self.retire_if_round(wheel_key, key.generation);
        drop(entry);
    }

    /// The earliest instant at which `poll_expired` may have a timer to hand out, counting
    /// the timers filed here: never later than the earliest pending deadline (it may be
    /// earlier: the start of a coarse slot whose timers are then moved to finer ones); at or
    /// before [`now`](LocalWheel::now) if something is due. `None` if nothing is pending but
    /// timers that never fire. Commands from remote threads count once applied (by
    /// `poll_expired` or [`drain_remote`](LocalWheel::drain_remote)).
    ///
    /// A getter: it changes nothing and tells remote threads nothing. To sleep, use
    /// [`park`](LocalWheel::park) (or [`prepare_park`](LocalWheel::prepare_park)): a sleep
    /// computed from this alone is not woken by a remote arm or reset earlier than it.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// assert_eq!(wheel.next_deadline(), None);
    /// wheel.arm_at(wheel.now() + Duration::from_millis(3), ());
    /// assert_eq!(wheel.next_deadline(), Some(wheel.now() + Duration::from_millis(3)));
    /// ```
    pub fn next_deadline(&self) -> Option<Instant> {
        self.wheel.next_deadline().map(|tick| self.clock.instant_of(tick))
    }

    /// Sleeps the owner through `sleep`, handing it how long to sleep: `None` to sleep until
    /// woken, `Some(Duration::ZERO)` if something is due or remote commands wait (don't
    /// sleep), else the time until the next deadline (reads the clock once). For that
    /// sleep, remote threads know what the owner sleeps until: a remote arm or reset earlier
    /// than it calls the wheel's notifier, which must end the sleep (an eventfd, a
    /// `mio::Waker`, `Thread::unpark`). The announcement is taken back when `sleep`
    /// returns, and `sleep` cannot touch the wheel, so the loop below cannot get the order
    /// wrong.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// wheel.arm(Duration::from_millis(2), "idle");
    /// loop {
    ///     // epoll_wait(timeout), io_uring_enter, park_timeout: whatever the loop sleeps in.
    ///     wheel.park(|timeout| std::thread::sleep(timeout.unwrap_or(Duration::MAX)));
    ///     if let Some((_, what)) = wheel.poll_expired(Instant::now()) {
    ///         assert_eq!(what, "idle");
    ///         break;
    ///     }
    /// }
    /// ```
    pub fn park<R>(&mut self, sleep: impl FnOnce(Option<Duration>) -> R) -> R {
        let timeout = self.prepare_park();
        let slept = sleep(timeout);
        self.wake_up();
        slept
    }

    /// The first half of [`park`](LocalWheel::park), for a loop whose sleep cannot run in a
    /// closure: announces the sleep to remote threads and returns how long to sleep (see
    /// `park`; reads the clock once). Call it last before sleeping, nothing on the wheel
    /// between: the announcement stands until the next `poll_expired` or
    /// [`drain_remote`](LocalWheel::drain_remote), which take it back, so a poll between
    /// this and the sleep would leave the sleep unannounced.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let remote = wheel.remote();
    /// wheel.arm(Duration::from_secs(5), 1);
    /// remote.arm(Duration::ZERO, 2).unwrap(); // sent while the owner runs
    /// assert_eq!(wheel.prepare_park(), Some(Duration::ZERO), "mail waits: don't sleep");
    /// assert_eq!(wheel.poll_expired(Instant::now()).map(|(_, p)| p), Some(2));
    /// let timeout = wheel.prepare_park().expect("a timer pending");
    /// assert!(timeout <= Duration::from_secs(5));
    /// // Sleep here for `timeout`; a remote arm earlier than it calls the notifier.
    /// ```
    pub fn prepare_park(&mut self) -> Option<Duration> {
        let next = self.wheel.next_deadline();
        if self.remote_made.get() {
            if self.must_drain || !self.shared.prepare_sleep(next.unwrap_or(ASLEEP_UNTIL_WOKEN)) {
                // Mail waits (`prepare_sleep` marked the owner awake): the next poll drains
                // it, whatever the mail flag says.
                self.must_drain = true;
                return Some(Duration::ZERO);
            }
            self.announced = true;
        }
        next.map(|tick| self.clock.instant_of(tick).saturating_duration_since(Instant::now()))
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
    /// cancels and expiries are one CAS each (see the module docs).
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
    pub(crate) fn slot_word_for_test(&self, key: TimerKey) -> &SlotWord {
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
