//! Arming, cancelling, resetting and reading the timers of a [`LocalWheel`]: the owner's
//! calls by key.

use super::{Entry, LocalWheel, TimerKey, slots};
use crate::error::Full;
use crate::state::SlotWord;
use crate::wheel::{FIRST_KEY, Key, Timed};
use std::time::{Duration, Instant};

impl<T> LocalWheel<T> {
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
        // Never behind `Instant::now()` (the TSC estimate, `src/clock/tsc/`), so never early.
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
    /// wheel already holds [`max_pending`](super::LocalBuilder::max_pending) timers.
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
    pub(super) fn try_arm_tick(&mut self, deadline: u64, payload: T) -> Result<TimerKey, T> {
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
    pub(super) fn find(&self, key: TimerKey) -> Option<(Key, &SlotWord)> {
        let word = self.slots.get(key.index)?;
        if !word.is_pending(key.generation) {
            return None;
        }
        // No overflow: a slot with a word is below `MAX_SLOTS` (2²⁸).
        Some((Key::from_raw(key.index + FIRST_KEY)?, word))
    }

    /// Cancels the timer `key` names and hands its payload back. `None` if it fired, was
    /// cancelled (here or by a [`RemoteWheel`](super::RemoteWheel)), or `key` is stale.
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
    pub(super) fn retire_if_round(&mut self, wheel_key: Key, generation: u32) {
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
    pub(super) fn reset_in_effect(&self, key: TimerKey) -> u32 {
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
    pub(super) fn forget_resets(&mut self, index: u32) {
        if !self.resets_in_effect.is_empty() {
            self.resets_in_effect.remove(&index);
        }
    }

    pub(super) fn reset_tick(&mut self, wheel_key: Key, tick: u64) {
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
}
