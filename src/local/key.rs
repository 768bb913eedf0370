//! [`TimerKey`]: a slot index and a generation.

/// Names one timer of a [`LocalWheel`](crate::LocalWheel): 8 bytes, `Copy`, `Send + Sync`.
///
/// A key is the timer's slot in the wheel and the slot's *generation*, which moves on every
/// time a timer leaves the slot (fired, cancelled). A key whose timer is gone is *stale*:
/// every method given one answers `None` or `false` and touches nothing, even after the slot
/// was reused, because the new timer has another generation. Generations are 32 bits and
/// wrap; a slot whose generation comes all the way round to where it started is retired,
/// never reused, so a stale key is never taken for a live timer however long it is kept.
/// Each wheel starts its slots at a generation of its own, so a key used on the wrong wheel
/// is almost always stale there too (never unsafe: at worst it names that wheel's timer).
///
/// [`into_raw`](TimerKey::into_raw) and [`from_raw`](TimerKey::from_raw) turn it into a
/// `u64` and back, for an io_uring `user_data` or a token.
///
/// ```
/// use shardwheel::{LocalWheel, TimerKey};
/// use std::time::Duration;
///
/// let mut wheel = LocalWheel::new();
/// let key: TimerKey = wheel.arm(Duration::from_secs(5), "request 1");
/// assert_eq!(std::mem::size_of::<TimerKey>(), 8);
/// assert_eq!(wheel.cancel(key), Some("request 1"));
/// assert_eq!(wheel.cancel(key), None, "stale");
/// let again = wheel.arm(Duration::from_secs(5), "request 2");
/// assert_ne!(key, again);
/// assert_eq!(wheel.get(key), None, "a stale key never names the slot's next timer");
/// assert_eq!(TimerKey::from_raw(again.into_raw()), again);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TimerKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl TimerKey {
    /// The key as a `u64`: the generation in the high half, the slot in the low half.
    ///
    /// ```
    /// # use shardwheel::LocalWheel;
    /// # use std::time::Duration;
    /// let mut wheel = LocalWheel::new();
    /// let key = wheel.arm(Duration::from_secs(1), ());
    /// let token: u64 = key.into_raw();
    /// assert_eq!(shardwheel::TimerKey::from_raw(token), key);
    /// ```
    pub fn into_raw(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The key [`into_raw`](TimerKey::into_raw) gave. Any `u64` makes a key: one that names
    /// no timer is simply stale.
    ///
    /// ```
    /// # use shardwheel::{LocalWheel, TimerKey};
    /// let mut wheel = LocalWheel::<()>::new();
    /// assert_eq!(wheel.cancel(TimerKey::from_raw(u64::MAX)), None);
    /// ```
    pub fn from_raw(raw: u64) -> TimerKey {
        TimerKey { index: raw as u32, generation: (raw >> 32) as u32 }
    }
}
