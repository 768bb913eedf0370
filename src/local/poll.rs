//! The event loop's side of a [`LocalWheel`]: handing out due timers, applying the commands
//! of [`RemoteWheel`](super::RemoteWheel)s, and sleeping until the next deadline.

use super::remote::{ASLEEP_UNTIL_WOKEN, Command};
use super::{Entry, ExpiredTimer, LocalWheel, TimerKey};
use crate::state::{SlotExpiry, SlotWord};
use crate::wheel::{FIRST_KEY, Key, Timed};
use std::time::{Duration, Instant};

/// Remote commands applied per `poll_expired` call at most, so a flood from other threads
/// cannot hold up the owner's expiries; the rest wait for the next call (and
/// `prepare_park` says "don't sleep" while any wait).
pub(super) const DRAIN_BUDGET: usize = 1024;

impl<T> LocalWheel<T> {
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
    /// arms are not held to [`max_pending`](super::LocalBuilder::max_pending): the owner cannot
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
    /// `mio::Waker`, `Thread::unpark`). A wheel with a [`remote`](LocalWheel::remote) handle
    /// and no notifier ([`LocalBuilder::notifier`](crate::LocalBuilder::notifier)) sleeps
    /// one tick at most, so that it sees a remote command within a tick of its sending. The announcement is taken back when `sleep`
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
            if !self.shared.has_notifier() {
                // Nothing can end the sleep for a remote arm or reset earlier than it: sleep a
                // tick at most, so the owner sees such a command within a tick of its
                // sending, not at its own next deadline (give the wheel a notifier to sleep
                // until that deadline, woken only when a remote command needs it).
                let tick = self.clock.tick();
                return Some(next.map_or(tick, |t| self.until(t).min(tick)));
            }
        }
        next.map(|tick| self.until(tick))
    }

    /// How long from now (read here) until tick `tick` begins.
    fn until(&self, tick: u64) -> Duration {
        self.clock.instant_of(tick).saturating_duration_since(Instant::now())
    }
}
