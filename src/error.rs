//! Error types. Every error that concerns a task hands the task back.

use std::fmt;
use std::time::Duration;

/// Why a schedule was refused; each variant hands the task back.
///
/// `Debug`, `Display` and `Error` are implemented for every `T`, as for
/// `std::sync::mpsc::SendError`. [`kind`](ScheduleError::kind) says which refusal it was
/// without the task; [`into_task`](ScheduleError::into_task) takes the task back.
///
/// # With `?`
///
/// A function that returns `Box<dyn Error + Send + Sync>` (or an `anyhow::Error`) should
/// pass the error on with `.map_err(ScheduleError::without_task)?`, which drops the task and
/// keeps the refusal: a [`ScheduleError`] (that is, `ScheduleError<()>`) is
/// `Send + Sync + 'static` whatever the task was, and its caller can downcast to it and tell
/// [`Shutdown`](ScheduleError::Shutdown) from [`Rejected`](ScheduleError::Rejected) with
/// [`kind`](ScheduleError::kind). Without that step:
///
/// - a task that is `Send` but not `Sync` (a closure holding a `Cell`, an `mpsc::Receiver`)
///   makes `?` fail to compile (E0277: "cannot be shared between threads safely", since a
///   boxed error must be `Sync`, and this one holds the task);
/// - a `Sync` task's error goes into the box as a `ScheduleError<{closure}>`, a type the
///   caller cannot name, so it cannot be downcast.
///
/// Take the task out with [`into_task`](ScheduleError::into_task) first if it must not be
/// lost (to run it elsewhere, say).
///
/// ```
/// use shardwheel::{ScheduleError, ScheduleErrorKind, TimerService};
/// use std::cell::Cell;
/// use std::error::Error;
/// use std::time::Duration;
///
/// fn arm(timers: &TimerService) -> Result<(), Box<dyn Error + Send + Sync>> {
///     let not_sync = Cell::new(0); // a `Send` but not `Sync` task: plain `?` won't compile
///     timers
///         .schedule(Duration::from_secs(1), move || not_sync.set(1))
///         .map_err(ScheduleError::without_task)?;
///     Ok(())
/// }
///
/// let timers = TimerService::new()?;
/// timers.stop()?;
/// let err = arm(&timers).unwrap_err();
/// // The caller tells the refusals apart by downcasting:
/// let refused = err.downcast_ref::<ScheduleError>().expect("a ScheduleError");
/// assert_eq!(refused.kind(), ScheduleErrorKind::Shutdown);
/// assert!(matches!(refused, ScheduleError::Shutdown(())));
/// assert_eq!(err.to_string(), "timeout not scheduled: the timer service is stopped");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[non_exhaustive]
pub enum ScheduleError<T = ()> {
    /// The shard is full: it already holds `max_pending_per_shard` pending timeouts, or its
    /// wheel is near its limit (2³² − 388 timeouts, ~128 GB; refused from a sixteenth below
    /// it, with room again once cancels and expiries bring it a further sixteenth down).
    /// Try again later, or on another shard.
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

/// Which refusal a [`ScheduleError`] is, without its task: what
/// [`ScheduleError::kind`] returns, to compare or match on.
///
/// ```
/// use shardwheel::{ScheduleErrorKind, TimerService};
/// use std::time::Duration;
///
/// let timers = TimerService::builder().shards(1).build()?;
/// let err = timers.schedule_on(5, Duration::from_secs(1), || ()).unwrap_err();
/// assert_eq!(err.kind(), ScheduleErrorKind::NoSuchShard);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScheduleErrorKind {
    /// [`ScheduleError::Rejected`]: the shard was full (`max_pending_per_shard`, or its
    /// wheel's limit).
    Rejected,
    /// [`ScheduleError::Shutdown`]: the service was stopped.
    Shutdown,
    /// [`ScheduleError::NoSuchShard`]: no shard with that index.
    NoSuchShard,
    /// [`ScheduleError::ShardFailed`]: the shard's thread panicked.
    ShardFailed,
}

impl<T> ScheduleError<T> {
    /// The task that was not scheduled.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// timers.stop()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let err = timers.schedule(Duration::from_secs(1), move || tx.send("ran").unwrap()).unwrap_err();
    /// let task = err.into_task();
    /// task(); // run it here instead
    /// assert_eq!(rx.recv()?, "ran");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_task(self) -> T {
        match self {
            ScheduleError::Rejected(t)
            | ScheduleError::Shutdown(t)
            | ScheduleError::NoSuchShard(t)
            | ScheduleError::ShardFailed(t) => t,
        }
    }

    /// A reference to the task that was not scheduled.
    ///
    /// ```
    /// use shardwheel::{ScheduleError, TimerService, TimerTask};
    /// use std::time::Duration;
    ///
    /// struct Expire(u64); // a connection id
    /// impl TimerTask for Expire {
    ///     fn run(self: Box<Self>) {}
    /// }
    ///
    /// let timers = TimerService::new()?;
    /// timers.stop()?;
    /// let err = timers.schedule(Duration::from_secs(1), Expire(42)).unwrap_err();
    /// assert_eq!(err.task().0, 42);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn task(&self) -> &T {
        match self {
            ScheduleError::Rejected(t)
            | ScheduleError::Shutdown(t)
            | ScheduleError::NoSuchShard(t)
            | ScheduleError::ShardFailed(t) => t,
        }
    }

    /// Which refusal this is, without the task.
    ///
    /// ```
    /// use shardwheel::{ScheduleErrorKind, TimerService};
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::builder().shards(1).max_pending_per_shard(1).build()?;
    /// let _held = timers.schedule(Duration::from_secs(60), || ())?;
    /// let err = timers.schedule(Duration::from_secs(60), || ()).unwrap_err();
    /// assert_eq!(err.kind(), ScheduleErrorKind::Rejected);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(&self) -> ScheduleErrorKind {
        match self {
            ScheduleError::Rejected(_) => ScheduleErrorKind::Rejected,
            ScheduleError::Shutdown(_) => ScheduleErrorKind::Shutdown,
            ScheduleError::NoSuchShard(_) => ScheduleErrorKind::NoSuchShard,
            ScheduleError::ShardFailed(_) => ScheduleErrorKind::ShardFailed,
        }
    }

    /// The same error without its task (dropped here): a [`ScheduleError`] (that is,
    /// `ScheduleError<()>`), which is `Send + Sync + 'static` whatever the task was, so
    /// that `?` can turn it into a `Box<dyn Error + Send + Sync>` or an `anyhow::Error`,
    /// and the caller can downcast it back (see "With `?`" in [`ScheduleError`]). Take the
    /// task out with [`into_task`](ScheduleError::into_task) before, if it must not be lost.
    ///
    /// ```
    /// use shardwheel::{ScheduleError, ScheduleErrorKind, TimerService};
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// timers.stop()?;
    /// let err: ScheduleError = timers.schedule(Duration::from_secs(1), || ()).unwrap_err().without_task();
    /// assert_eq!(err.kind(), ScheduleErrorKind::Shutdown);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn without_task(self) -> ScheduleError {
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

    fn name(&self) -> &'static str {
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
        write!(f, "{}(..)", self.name())
    }
}

impl<T> fmt::Display for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleError::Rejected(_) => {
                "timeout rejected: the shard is full (at max_pending_per_shard, or its wheel near its limit of 2^32 timeouts)"
            }
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
///
/// ```
/// use shardwheel::{BuildError, TimerService};
///
/// let err = TimerService::builder().shards(100_000).build().unwrap_err();
/// assert!(matches!(err, BuildError::TooManyShards { requested: 100_000, .. }));
/// assert!(err.to_string().starts_with("invalid `shards`: 100000 requested"));
/// ```
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
///
/// ```
/// use shardwheel::{StopError, TimerService};
/// use std::time::Duration;
///
/// let timers = TimerService::new()?;
/// let (tx, rx) = std::sync::mpsc::channel();
/// let same = timers.clone();
/// // From a task on one of the service's own shard threads:
/// timers.schedule(Duration::ZERO, move || tx.send(same.stop().map(drop)).unwrap())?;
/// assert_eq!(rx.recv()?, Err(StopError::OnTimerThread));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    ///
    /// ```
    /// let err = shardwheel::Elapsed::new();
    /// assert_eq!(err.to_string(), "deadline has elapsed");
    /// ```
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

/// An `io::Error` of kind [`TimedOut`](std::io::ErrorKind::TimedOut), as tokio's `Elapsed`
/// converts: so `timeout(d, io).await??` works in a function that returns `io::Result`.
///
/// ```
/// use shardwheel::time::{self, Duration};
///
/// async fn read_within(d: Duration) -> std::io::Result<u8> {
///     let byte = time::timeout(d, std::future::pending::<std::io::Result<u8>>()).await??;
///     Ok(byte)
/// }
/// let err = futures_executor::block_on(read_within(Duration::from_millis(1))).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
/// ```
impl From<Elapsed> for std::io::Error {
    fn from(elapsed: Elapsed) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::TimedOut, elapsed)
    }
}

/// The service a [`Sleep`](crate::Sleep), [`Interval`](crate::Interval) or
/// [`WithTimeout`](crate::WithTimeout) waits on was stopped before its deadline: no timer is
/// left to end the wait, and completing now would be early.
///
/// Awaited as futures, they do not see it: they wait on the overflow timer and complete at
/// their deadline (see [`Sleep`](crate::Sleep)'s "Full, stopping, stopped"), so that
/// neither "timed out" nor "the tick came" is ever said early, no task panics, and none
/// waits forever. The fallible forms return it, for a loop that should end with the service:
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
    ///
    /// ```
    /// let err = shardwheel::Stopped::new();
    /// assert!(err.to_string().starts_with("the timer service was stopped"));
    /// ```
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
