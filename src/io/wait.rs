//! The timers of a [`TimeoutStream`](super::TimeoutStream): a wait per direction, and the
//! idle deadline that both share.

use crate::time::{self, Duration, Instant, Sleep};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A stream's timeouts and where its waits stand. Kept small (a connection holds one): the
/// timeouts in nanoseconds (0: off), and the write direction boxed, made only when a write
/// timeout is set or a write first waits under an idle timeout (a socket's writes seldom
/// wait): 88 bytes with the read direction's sleep (24 bytes) inline.
pub(super) struct Timers {
    read: Direction,
    write: Option<Box<Direction>>,
    /// The idle timeout in nanoseconds (0: off).
    idle: u64,
    /// When a read or write last made progress, or the idle timeout was set: the idle
    /// deadline is this plus `idle`. Read only with an idle timeout.
    active_at: Instant,
}

/// One direction (reads, or writes with flushes and shutdowns): its timeout and its wait.
struct Direction {
    /// Its own timeout in nanoseconds (0: off).
    timeout: u64,
    /// When the wait under way began (its first `Pending`): set only with a timeout of its
    /// own, whose deadline counts from it.
    since: Option<Instant>,
    /// Whether `sleep` is set to the deadline of the wait under way.
    armed: bool,
    /// Made on the first wait, then kept and reset: a later deadline on a registered sleep is
    /// one compare-and-swap.
    sleep: Option<Sleep>,
}

#[derive(Clone, Copy)]
pub(super) enum Name {
    Read,
    Write,
}

/// Which timeout a deadline is.
#[derive(Clone, Copy)]
enum Which {
    Own(Name),
    Idle,
}

impl Timers {
    pub(super) fn new() -> Timers {
        Timers { read: Direction::new(), write: None, idle: 0, active_at: Instant::now() }
    }

    /// `direction`'s own timeout.
    pub(super) fn timeout(&self, direction: Name) -> Option<Duration> {
        let nanos = match direction {
            Name::Read => self.read.timeout,
            Name::Write => self.write.as_ref().map_or(0, |w| w.timeout),
        };
        duration(nanos)
    }

    /// The idle timeout.
    pub(super) fn idle(&self) -> Option<Duration> {
        duration(self.idle)
    }

    /// The inner stream completed an operation in `direction`: its wait (if any) is over, and
    /// with `progressed` (bytes moved) the idle deadline moves out: one clock read.
    #[inline]
    pub(super) fn done(&mut self, direction: Name, progressed: bool) {
        match direction {
            Name::Read => self.read.done(),
            Name::Write => {
                if let Some(write) = &mut self.write {
                    write.done();
                }
            }
        }
        if progressed && self.idle != 0 {
            self.active_at = Instant::now();
        }
    }

    /// The inner stream said `Pending` in `direction`: `Ready` with the error if the wait has
    /// run past a deadline, else `Pending`, with `cx`'s waker registered for the deadline.
    #[inline]
    pub(super) fn poll_wait(&mut self, direction: Name, cx: &mut Context<'_>) -> Poll<io::Error> {
        let idle_at = (self.idle != 0).then(|| self.active_at + Duration::from_nanos(self.idle));
        let dir = match direction {
            Name::Read => &mut self.read,
            Name::Write => match &mut self.write {
                Some(write) => write,
                None if idle_at.is_none() => return Poll::Pending,
                // The first write that waits under an idle timeout.
                None => self.write.insert(Box::new(Direction::new())),
            },
        };
        if dir.timeout == 0 && idle_at.is_none() {
            return Poll::Pending;
        }
        dir.poll_wait(direction, idle_at, cx)
    }

    /// Sets `direction`'s own timeout (`None` or zero: off); a wait under way starts afresh.
    pub(super) fn set_timeout(&mut self, direction: Name, timeout: Option<Duration>) {
        let nanos = nanos(timeout);
        let dir = match direction {
            Name::Read => &mut self.read,
            Name::Write => match &mut self.write {
                Some(write) => write,
                None if nanos == 0 => return,
                None => self.write.insert(Box::new(Direction::new())),
            },
        };
        dir.timeout = nanos;
        dir.done();
    }

    /// Sets the idle timeout, counted from now; both directions' waits look at it anew.
    pub(super) fn set_idle(&mut self, idle: Option<Duration>) {
        self.idle = nanos(idle);
        self.active_at = Instant::now();
        self.read.armed = false;
        if let Some(write) = &mut self.write {
            write.armed = false;
        }
    }
}

/// A timeout in nanoseconds, 0 for none (or zero); saturating at 584 years.
fn nanos(timeout: Option<Duration>) -> u64 {
    timeout.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn duration(nanos: u64) -> Option<Duration> {
    (nanos != 0).then(|| Duration::from_nanos(nanos))
}

impl Direction {
    fn new() -> Direction {
        Direction { timeout: 0, since: None, armed: false, sleep: None }
    }

    /// The wait is over: the next `Pending` starts a new one. The sleep stays as it is, so
    /// that the next wait moves it later (one CAS) rather than cancel and arm a new cell: if
    /// it fires first, it wakes the task once for nothing.
    #[inline]
    fn done(&mut self) {
        self.since = None;
        self.armed = false;
    }

    /// The wait's deadline: the earlier of its own (from `since`) and `idle_at`.
    fn deadline(&self, name: Name, idle_at: Option<Instant>) -> (Instant, Which) {
        let own = duration(self.timeout).zip(self.since).map(|(timeout, since)| since + timeout);
        match (own, idle_at) {
            (Some(own), Some(idle)) if idle < own => (idle, Which::Idle),
            (Some(own), _) => (own, Which::Own(name)),
            (None, Some(idle)) => (idle, Which::Idle),
            // `poll_wait` is not called without a timeout.
            (None, None) => unreachable!("a wait with no timeout"),
        }
    }

    fn poll_wait(&mut self, name: Name, idle_at: Option<Instant>, cx: &mut Context<'_>) -> Poll<io::Error> {
        if !self.armed {
            // The wait's first `Pending`: with a timeout of its own, it counts from now (the
            // one clock read of a wait). The idle deadline needs no clock read here.
            let mut now = None;
            if self.timeout != 0 && self.since.is_none() {
                let at = Instant::now();
                self.since = Some(at);
                now = Some(at);
            }
            let (deadline, which) = self.deadline(name, idle_at);
            if now.is_some_and(|now| deadline <= now) {
                self.done();
                return Poll::Ready(timed_out(which));
            }
            self.arm(deadline);
        }
        loop {
            let Some(sleep) = self.sleep.as_mut() else { unreachable!("an armed wait has its sleep") };
            if Pin::new(sleep).poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The deadline the sleep was set to has come; the idle one may have moved since
            // (progress in the other direction does not touch this sleep): look again.
            let now = Instant::now();
            let (deadline, which) = self.deadline(name, idle_at);
            if deadline <= now {
                self.done();
                return Poll::Ready(timed_out(which));
            }
            // Later than the sleep's, which has come: the loop's next poll registers it and
            // is pending (a paused clock's sleep completes at once only once due).
            self.arm(deadline);
        }
    }

    /// Sets the sleep to `deadline`: never earlier than the one it was set to before (the
    /// instants a deadline counts from only move on) unless a timeout was set shorter, so a
    /// registered sleep's reset is one compare-and-swap.
    fn arm(&mut self, deadline: Instant) {
        match &mut self.sleep {
            Some(sleep) => Pin::new(sleep).reset(deadline),
            None => self.sleep = Some(time::sleep_until(deadline)),
        }
        self.armed = true;
    }
}

/// The error of a timeout: `TimedOut`, saying which.
#[cold]
fn timed_out(which: Which) -> io::Error {
    let what = match which {
        Which::Own(Name::Read) => "read timed out",
        Which::Own(Name::Write) => "write timed out",
        Which::Idle => "idle timeout: no bytes read or written for too long",
    };
    io::Error::new(io::ErrorKind::TimedOut, what)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Name, Timers};
    use std::time::Duration;

    /// The write direction is boxed and made only when a write timeout is set (not `None`,
    /// not zero: both are off) or a write first waits under an idle timeout: a connection
    /// whose writes never wait keeps the small `Timers`.
    #[test]
    fn the_write_direction_is_made_only_for_a_timeout_that_is_on() {
        let mut timers = Timers::new();
        assert!(timers.write.is_none());
        timers.set_timeout(Name::Write, None);
        assert!(timers.write.is_none(), "none: off, nothing made");
        timers.set_timeout(Name::Write, Some(Duration::ZERO));
        assert!(timers.write.is_none(), "zero: off, nothing made");
        assert_eq!(timers.timeout(Name::Write), None);
        timers.set_timeout(Name::Write, Some(Duration::from_secs(2)));
        assert!(timers.write.is_some());
        assert_eq!(timers.timeout(Name::Write), Some(Duration::from_secs(2)));
        timers.set_timeout(Name::Write, Some(Duration::ZERO));
        assert_eq!(timers.timeout(Name::Write), None, "made, then turned off");
        // Without an idle timeout a write that waits makes nothing either.
        let mut timers = Timers::new();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(timers.poll_wait(Name::Write, &mut cx).is_pending());
        assert!(timers.write.is_none());
    }
}
