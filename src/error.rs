//! Error types. Every error that concerns a task hands the task back.

use std::fmt;
use std::time::Duration;

/// Why a schedule was refused; each variant hands the task back.
///
/// `Debug`, `Display` and `Error` are implemented for every `T`, as for
/// `std::sync::mpsc::SendError`, so `?` works whatever the task type.
#[non_exhaustive]
pub enum ScheduleError<T> {
    /// The shard already holds `max_pending_per_shard` pending timeouts.
    Rejected(T),
    /// The service was stopped.
    Shutdown(T),
    /// `schedule_on` named a shard index at or beyond `shard_count()`.
    NoSuchShard(T),
    /// The shard's thread panicked (a bug in shardwheel, never a task's panic, which is
    /// caught and counted): it takes no more timeouts, and fires none. `stop()` still hands
    /// back what it held; [`Stats::failed_shards`](crate::Stats::failed_shards) counts such
    /// shards.
    ShardFailed(T),
}

impl<T> ScheduleError<T> {
    /// The task that was not scheduled.
    pub fn into_task(self) -> T {
        match self {
            ScheduleError::Rejected(t)
            | ScheduleError::Shutdown(t)
            | ScheduleError::NoSuchShard(t)
            | ScheduleError::ShardFailed(t) => t,
        }
    }

    /// A reference to the task that was not scheduled.
    pub fn task(&self) -> &T {
        match self {
            ScheduleError::Rejected(t)
            | ScheduleError::Shutdown(t)
            | ScheduleError::NoSuchShard(t)
            | ScheduleError::ShardFailed(t) => t,
        }
    }

    /// The same error without its task (dropped here): a `ScheduleError<()>`, which is
    /// `Send + Sync + 'static` whatever the task was, so `?` can turn it into a
    /// `Box<dyn Error + Send + Sync>` or an `anyhow::Error`. Those need the error to be
    /// `Send + Sync`, and a `ScheduleError<T>` is only when `T` is: a closure that holds a
    /// `Cell` (or anything else `Send` but not `Sync`) needs this step first. Take the
    /// task out with [`into_task`](ScheduleError::into_task) before, if it must not be lost.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::cell::Cell;
    /// use std::time::Duration;
    ///
    /// fn arm(timers: &TimerService) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    ///     let not_sync = Cell::new(0); // a `Send` but not `Sync` task
    ///     timers
    ///         .schedule(Duration::from_secs(1), move || not_sync.set(1))
    ///         .map_err(|e| e.without_task())?;
    ///     Ok(())
    /// }
    ///
    /// let timers = TimerService::new()?;
    /// timers.stop()?;
    /// let err = arm(&timers).unwrap_err();
    /// assert_eq!(err.to_string(), "timeout not scheduled: the timer service is stopped");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn without_task(self) -> ScheduleError<()> {
        self.map(drop)
    }

    /// The same error, with the task mapped.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> ScheduleError<U> {
        match self {
            ScheduleError::Rejected(t) => ScheduleError::Rejected(f(t)),
            ScheduleError::Shutdown(t) => ScheduleError::Shutdown(f(t)),
            ScheduleError::NoSuchShard(t) => ScheduleError::NoSuchShard(f(t)),
            ScheduleError::ShardFailed(t) => ScheduleError::ShardFailed(f(t)),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ScheduleError::Rejected(_) => "Rejected",
            ScheduleError::Shutdown(_) => "Shutdown",
            ScheduleError::NoSuchShard(_) => "NoSuchShard",
            ScheduleError::ShardFailed(_) => "ShardFailed",
        }
    }
}

impl<T> fmt::Debug for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(..)", self.kind())
    }
}

impl<T> fmt::Display for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleError::Rejected(_) => "timeout rejected: the shard holds max_pending_per_shard pending timeouts",
            ScheduleError::Shutdown(_) => "timeout not scheduled: the timer service is stopped",
            ScheduleError::NoSuchShard(_) => "timeout not scheduled: no shard with that index",
            ScheduleError::ShardFailed(_) => {
                "timeout not scheduled: the shard's thread panicked (a bug in shardwheel) and takes no more timeouts"
            }
        })
    }
}

impl<T> std::error::Error for ScheduleError<T> {}

/// An invalid [`Builder`](crate::Builder) setting; each variant names the setting.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// `shards(0)`: a service needs at least one shard.
    ZeroShards,
    /// `shards(n)` with `n` above [`Builder::MAX_SHARDS`](crate::Builder::MAX_SHARDS).
    TooManyShards {
        /// The shard count asked for.
        requested: usize,
        /// The largest allowed.
        max: usize,
    },
    /// `tick(Duration::ZERO)`.
    ZeroTick,
    /// `tick` below [`Builder::MIN_TICK`](crate::Builder::MIN_TICK).
    TickTooSmall {
        /// The tick asked for.
        tick: Duration,
        /// The smallest allowed.
        min: Duration,
    },
    /// `tick` above [`Builder::MAX_TICK`](crate::Builder::MAX_TICK).
    TickTooLarge {
        /// The tick asked for.
        tick: Duration,
        /// The largest allowed.
        max: Duration,
    },
    /// `max_pending_per_shard(0)`: every schedule would be rejected.
    ZeroMaxPending,
    /// `thread_name` contains a NUL byte, which a thread name cannot hold.
    ThreadNameHasNul,
    /// The operating system refused to start a shard thread.
    Spawn(std::io::Error),
    /// [`LocalBuilder::start`](crate::LocalBuilder::start) later than the instant `build`
    /// ran: instants before the start would all round to tick 0 and the wheel's now could
    /// not move until the start came, so a timer armed for an instant before it would fire
    /// early.
    StartInFuture {
        /// How far ahead of the build the start was.
        by: Duration,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::ZeroShards => f.write_str("invalid `shards`: a timer service needs at least one shard"),
            BuildError::TooManyShards { requested, max } => {
                write!(f, "invalid `shards`: {requested} requested, at most {max} allowed")
            }
            BuildError::ZeroTick => f.write_str("invalid `tick`: the tick must be longer than zero"),
            BuildError::TickTooSmall { tick, min } => {
                write!(f, "invalid `tick`: {tick:?} is shorter than the smallest tick, {min:?}")
            }
            BuildError::TickTooLarge { tick, max } => {
                write!(f, "invalid `tick`: {tick:?} is longer than the largest tick, {max:?}")
            }
            BuildError::ZeroMaxPending => {
                f.write_str("invalid `max_pending_per_shard`: a limit of 0 would reject every timeout")
            }
            BuildError::ThreadNameHasNul => f.write_str("invalid `thread_name`: it contains a NUL byte"),
            BuildError::Spawn(e) => write!(f, "could not start a shard thread: {e}"),
            BuildError::StartInFuture { by } => {
                write!(f, "invalid `start`: {by:?} in the future; a wheel's time starts at or before now")
            }
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

/// Why [`TimerService::stop`](crate::TimerService::stop) could not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopError {
    /// Called from one of this service's own shard threads (from a task), where waiting for
    /// the shards to finish would wait for itself.
    OnTimerThread,
}

impl fmt::Display for StopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopError::OnTimerThread => {
                f.write_str("stop() called from a timer thread of the same service; it would wait for itself")
            }
        }
    }
}

impl std::error::Error for StopError {}

/// The error of a [`WithTimeout`](crate::WithTimeout) whose deadline came before its future
/// finished: [`TimerService::timeout`](crate::TimerService::timeout) dropped the future.
///
/// ```
/// use shardwheel::{Elapsed, TimerService};
/// use std::time::Duration;
///
/// let timers = TimerService::new()?;
/// let never = std::future::pending::<()>();
/// let outcome = futures_executor::block_on(timers.timeout(Duration::from_millis(5), never));
/// assert_eq!(outcome, Err(Elapsed::new()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Elapsed(());

impl Elapsed {
    /// The one value of the error.
    pub const fn new() -> Elapsed {
        Elapsed(())
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// The service a [`Sleep`](crate::Sleep), [`Interval`](crate::Interval) or
/// [`WithTimeout`](crate::WithTimeout) waits on was stopped before its deadline: no timer is
/// left to end the wait, and completing now would be early.
///
/// Awaited as futures, they panic with this error's message (as tokio's timers do once
/// their runtime is shut down), so that neither "timed out" nor "the tick came" is ever
/// said early, and no task waits forever in silence. The fallible forms return it instead:
/// [`Sleep::try_poll`](crate::Sleep::try_poll),
/// [`Interval::try_tick`](crate::Interval::try_tick),
/// [`WithTimeout::try_poll`](crate::WithTimeout::try_poll).
///
/// ```
/// use shardwheel::{Stopped, TimerService};
/// use std::time::Duration;
///
/// let timers = TimerService::new()?;
/// let mut sleep = Box::pin(timers.sleep(Duration::from_secs(60)));
/// timers.stop()?;
/// let outcome = futures_executor::block_on(std::future::poll_fn(|cx| sleep.as_mut().try_poll(cx)));
/// assert_eq!(outcome, Err(Stopped::new()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stopped(());

impl Stopped {
    /// The one value of the error.
    pub const fn new() -> Stopped {
        Stopped(())
    }
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the timer service was stopped before the deadline: the wait can never end on time")
    }
}

impl std::error::Error for Stopped {}

/// [`LocalWheel::try_arm_at`](crate::LocalWheel::try_arm_at) found the wheel holding its
/// `max_pending` timers; the payload comes back.
///
/// `Debug`, `Display` and `Error` are implemented for every `T`.
///
/// ```
/// use shardwheel::LocalWheel;
/// use std::time::{Duration, Instant};
///
/// let mut wheel = LocalWheel::builder().max_pending(1).build::<u64>()?;
/// let soon = Instant::now() + Duration::from_secs(1);
/// wheel.try_arm_at(soon, 1).unwrap();
/// let full = wheel.try_arm_at(soon, 2).unwrap_err();
/// assert_eq!(full.into_inner(), 2);
/// # Ok::<(), shardwheel::BuildError>(())
/// ```
pub struct Full<T>(pub T);

impl<T> Full<T> {
    /// The payload that was not armed.
    ///
    /// ```
    /// assert_eq!(shardwheel::Full(5).into_inner(), 5);
    /// ```
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("timer not armed: the wheel holds max_pending timers")
    }
}

impl<T> std::error::Error for Full<T> {}

/// A [`RemoteWheel`](crate::RemoteWheel) arm found its [`LocalWheel`](crate::LocalWheel)
/// dropped; the payload comes back.
///
/// `Debug`, `Display` and `Error` are implemented for every `T`.
///
/// ```
/// use shardwheel::LocalWheel;
/// use std::time::Duration;
///
/// let wheel = LocalWheel::<u64>::new();
/// let remote = wheel.remote();
/// drop(wheel);
/// let closed = remote.arm(Duration::from_secs(1), 7).unwrap_err();
/// assert_eq!(closed.into_inner(), 7);
/// ```
pub struct Closed<T>(pub T);

impl<T> Closed<T> {
    /// The payload that was not armed.
    ///
    /// ```
    /// assert_eq!(shardwheel::Closed("late").into_inner(), "late");
    /// ```
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Closed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Closed(..)")
    }
}

impl<T> fmt::Display for Closed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("timer not armed: its wheel was dropped")
    }
}

impl<T> std::error::Error for Closed<T> {}
