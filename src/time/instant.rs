//! [`Instant`]: `tokio::time::Instant`'s shape over `std::time::Instant`.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::time::Duration;

/// A measurement of a monotonically nondecreasing clock, as `tokio::time::Instant`: the
/// instants the ambient calls take and give ([`sleep_until`](super::sleep_until),
/// [`Sleep::deadline`](super::Sleep::deadline), [`Interval::tick`](super::Interval::tick)).
/// Convert with [`from_std`](Instant::from_std) and [`into_std`](Instant::into_std), or
/// `From` either way.
///
/// ```
/// use shardwheel::time::{Duration, Instant};
///
/// let start = Instant::now();
/// let later = start + Duration::from_millis(5);
/// assert_eq!(later - start, Duration::from_millis(5));
/// assert_eq!(start - later, Duration::ZERO, "saturates, as tokio's");
/// assert_eq!(Instant::from_std(later.into_std()), later);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    std: std::time::Instant,
}

impl Instant {
    /// Now: the real clock's, or, on a thread that [paused](super::pause) its clock, the
    /// paused clock's.
    ///
    /// ```
    /// use shardwheel::time::Instant;
    ///
    /// let a = Instant::now();
    /// assert!(Instant::now() >= a);
    /// ```
    #[inline]
    #[must_use]
    pub fn now() -> Instant {
        match super::paused::current() {
            None => Instant { std: std::time::Instant::now() },
            Some(scope) => Instant { std: scope.now() },
        }
    }

    /// The same instant as `std`'s.
    #[must_use]
    pub fn from_std(std: std::time::Instant) -> Instant {
        Instant { std }
    }

    /// The same instant as a `std::time::Instant`.
    #[must_use]
    pub fn into_std(self) -> std::time::Instant {
        self.std
    }

    /// How long after `earlier` this is, or zero if it is not after it.
    #[must_use]
    pub fn duration_since(&self, earlier: Instant) -> Duration {
        self.std.saturating_duration_since(earlier.std)
    }

    /// How long after `earlier` this is, or `None` if it is not after it.
    #[must_use]
    pub fn checked_duration_since(&self, earlier: Instant) -> Option<Duration> {
        self.std.checked_duration_since(earlier.std)
    }

    /// How long after `earlier` this is, or zero if it is not after it.
    #[must_use]
    pub fn saturating_duration_since(&self, earlier: Instant) -> Duration {
        self.std.saturating_duration_since(earlier.std)
    }

    /// How long ago this was (zero if it is ahead).
    ///
    /// ```
    /// use shardwheel::time::{Duration, Instant};
    ///
    /// let start = Instant::now();
    /// std::thread::sleep(Duration::from_millis(2));
    /// assert!(start.elapsed() >= Duration::from_millis(2));
    /// ```
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(*self)
    }

    /// `self + duration`, or `None` where the platform's instants end.
    #[must_use]
    pub fn checked_add(&self, duration: Duration) -> Option<Instant> {
        self.std.checked_add(duration).map(Instant::from_std)
    }

    /// `self - duration`, or `None` where the platform's instants begin.
    #[must_use]
    pub fn checked_sub(&self, duration: Duration) -> Option<Instant> {
        self.std.checked_sub(duration).map(Instant::from_std)
    }
}

impl From<std::time::Instant> for Instant {
    fn from(std: std::time::Instant) -> Instant {
        Instant { std }
    }
}

impl From<Instant> for std::time::Instant {
    fn from(instant: Instant) -> std::time::Instant {
        instant.std
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// # Panics
    ///
    /// Past the platform's last instant, as `std::time::Instant`'s.
    fn add(self, rhs: Duration) -> Instant {
        Instant { std: self.std + rhs }
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;

    /// # Panics
    ///
    /// Before the platform's first instant, as `std::time::Instant`'s.
    fn sub(self, rhs: Duration) -> Instant {
        Instant { std: self.std - rhs }
    }
}

impl SubAssign<Duration> for Instant {
    fn sub_assign(&mut self, rhs: Duration) {
        *self = *self - rhs;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;

    /// Saturating, as tokio's: an earlier minus a later instant is zero.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.std.fmt(f)
    }
}
