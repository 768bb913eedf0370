//! [`LocalBuilder`]: the settings of a [`LocalWheel`].

use super::remote::Notify;
use super::{LocalWheel, slots};
use crate::Builder;
use crate::error::BuildError;
use std::fmt;
use std::time::{Duration, Instant};

/// Settings for a [`LocalWheel`]: its tick, a capacity hint, a limit on pending timers, the
/// instant its time starts at, and the notifier remote arms wake it through.
///
/// ```
/// use shardwheel::LocalWheel;
/// use std::time::Duration;
///
/// let wheel = LocalWheel::builder()
///     .tick(Duration::from_micros(100))
///     .capacity(10_000)
///     .max_pending(1_000_000)
///     .build::<u64>()?;
/// assert!(wheel.is_empty());
/// # Ok::<(), shardwheel::BuildError>(())
/// ```
pub struct LocalBuilder {
    tick: Duration,
    capacity: usize,
    max_pending: usize,
    start: Option<Instant>,
    notifier: Option<Box<dyn Notify>>,
    /// The generation every slot starts at; tests set it to reach a wrap quickly.
    pub(crate) seed: Option<u32>,
}

impl fmt::Debug for LocalBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalBuilder")
            .field("tick", &self.tick)
            .field("capacity", &self.capacity)
            .field("max_pending", &self.max_pending)
            .field("start", &self.start)
            .field("notifier", &self.notifier.is_some())
            .finish()
    }
}

impl Default for LocalBuilder {
    fn default() -> Self {
        LocalBuilder {
            tick: Duration::from_millis(1),
            capacity: 0,
            max_pending: slots::MAX_SLOTS,
            start: None,
            notifier: None,
            seed: None,
        }
    }
}

impl LocalBuilder {
    /// The default settings: a 1 ms tick, no capacity reserved, no limit but the wheel's
    /// own (2²⁸ timers), time starting when `build` runs, no notifier.
    ///
    /// ```
    /// let wheel = shardwheel::LocalBuilder::new().build::<()>()?;
    /// # Ok::<(), shardwheel::BuildError>(())
    /// ```
    pub fn new() -> LocalBuilder {
        LocalBuilder::default()
    }

    /// The wheel's resolution: a timer fires at the first tick at or after its deadline.
    /// Default 1 ms; between [`Builder::MIN_TICK`] and [`Builder::MAX_TICK`], else `build`
    /// fails naming it.
    ///
    /// ```
    /// # use shardwheel::{BuildError, LocalWheel};
    /// # use std::time::Duration;
    /// let err = LocalWheel::builder().tick(Duration::ZERO).build::<()>().unwrap_err();
    /// assert!(matches!(err, BuildError::ZeroTick));
    /// ```
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// Room for this many timers reserved up front, so arming up to it never allocates.
    ///
    /// ```
    /// let wheel = shardwheel::LocalWheel::builder().capacity(4096).build::<u32>()?;
    /// # Ok::<(), shardwheel::BuildError>(())
    /// ```
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// At most this many pending timers: [`LocalWheel::try_arm_at`] hands the payload back
    /// beyond it. (`arm` and `arm_at` cannot fail and do not check it; remote arms are
    /// filed whatever the count, up to the wheel's 2²⁸ slots, past which the owner drops
    /// them and counts them in [`LocalWheel::dropped_remote_arms`].) Zero is refused by
    /// `build`.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::builder().max_pending(1).build::<u8>()?;
    /// assert!(wheel.try_arm_at(Instant::now(), 1).is_ok());
    /// assert!(wheel.try_arm_at(Instant::now(), 2).is_err());
    /// # Ok::<(), shardwheel::BuildError>(())
    /// ```
    pub fn max_pending(mut self, max: usize) -> Self {
        self.max_pending = max;
        self
    }

    /// The instant tick 0 begins, and the wheel's first [`now`](LocalWheel::now). Default:
    /// when `build` runs. An event loop passes the timestamp it already has. It must not be
    /// later than the moment `build` runs: `build` refuses a start in the future
    /// ([`BuildError::StartInFuture`]).
    ///
    /// ```
    /// # use std::time::Instant;
    /// let start = Instant::now();
    /// let wheel = shardwheel::LocalWheel::builder().start(start).build::<()>()?;
    /// assert_eq!(wheel.now(), start);
    /// # Ok::<(), shardwheel::BuildError>(())
    /// ```
    pub fn start(mut self, start: Instant) -> Self {
        self.start = Some(start);
        self
    }

    /// Called by a [`RemoteWheel`](crate::RemoteWheel) arm (or reset) whose deadline is
    /// earlier than the one the owner last said it would sleep until
    /// ([`LocalWheel::park`], [`LocalWheel::prepare_park`]), and only then: an eventfd write, a `mio::Waker`,
    /// an io_uring message, `Thread::unpark`. It runs on the remote thread; it must not
    /// block. A closure or any [`Notify`].
    ///
    /// ```
    /// let me = std::thread::current();
    /// let wheel = shardwheel::LocalWheel::builder().notifier(move || me.unpark()).build::<u64>()?;
    /// # Ok::<(), shardwheel::BuildError>(())
    /// ```
    pub fn notifier(mut self, notifier: impl Notify) -> Self {
        self.notifier = Some(Box::new(notifier));
        self
    }

    /// Builds the wheel, or names the setting that is invalid.
    ///
    /// ```
    /// let wheel = shardwheel::LocalWheel::builder().build::<String>()?;
    /// # Ok::<(), shardwheel::BuildError>(())
    /// ```
    pub fn build<T>(self) -> Result<LocalWheel<T>, BuildError> {
        Builder::check_tick(self.tick)?;
        if self.max_pending == 0 {
            return Err(BuildError::ZeroMaxPending);
        }
        let start = start_at(self.start, Instant::now())?;
        let capacity = self.capacity.min(self.max_pending).min(slots::MAX_SLOTS);
        Ok(LocalWheel::from_parts(start, self.tick, capacity, self.max_pending, self.notifier, self.seed))
    }
}

/// The wheel's start: `start` if it has come by `now` (`now` itself included), else the
/// error. Instants before the start all round to tick 0 and a `now` earlier than it is
/// ignored, so a timer armed for between now and the start would fire at once. Apart from
/// `build` so that the boundary can be tested (`build` reads the clock itself).
fn start_at(start: Option<Instant>, now: Instant) -> Result<Instant, BuildError> {
    match start {
        Some(start) if start > now => Err(BuildError::StartInFuture { by: start - now }),
        Some(start) => Ok(start),
        None => Ok(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At, one nanosecond before and one after `now`: only a start after it is refused.
    #[test]
    fn a_start_is_refused_only_after_now() {
        let now = Instant::now();
        let nano = Duration::from_nanos(1);
        assert!(matches!(start_at(None, now), Ok(t) if t == now));
        assert!(matches!(start_at(Some(now), now), Ok(t) if t == now), "a start at now has come");
        assert!(matches!(start_at(Some(now - nano), now), Ok(t) if t == now - nano));
        assert!(matches!(start_at(Some(now + nano), now), Err(BuildError::StartInFuture { by }) if by == nano));
    }
}
