//! Configuring and starting a service.

use crate::clock::Clock;
use crate::error::BuildError;
use crate::service::{Settings, TimerService};
use crate::sync::plain::Arc as PlainArc;
use crate::test_clock::TestClock;
use std::time::{Duration, Instant};

/// Settings for a [`TimerService`]; [`build`](Builder::build) checks them and starts it.
///
/// ```
/// use shardwheel::TimerService;
/// use std::time::Duration;
///
/// let timers = TimerService::builder()
///     .shards(2)
///     .tick(Duration::from_millis(1))
///     .max_pending_per_shard(1_000_000)
///     .thread_name("conn-timers")
///     .build()?;
/// assert_eq!(timers.shard_count(), 2);
/// # Ok::<(), shardwheel::BuildError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a Builder does nothing until `build` is called"]
pub struct Builder {
    pub(crate) shards: Option<usize>,
    pub(crate) tick: Duration,
    pub(crate) max_pending_per_shard: Option<usize>,
    pub(crate) pin_threads: bool,
    pub(crate) thread_name: String,
    /// Where expired tasks run, if not on the shard thread.
    pub(crate) offload: Option<PlainArc<crate::shard::driver::Pool>>,
    /// Tests and loom models only: each shard's wheel holds at most this many timeouts, so
    /// that what happens at the limit (2³² − 388 otherwise) can be reached (`shard/gate.rs`).
    #[cfg(any(test, loom))]
    pub(crate) wheel_limit: Option<usize>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            shards: None,
            tick: Duration::from_millis(1),
            max_pending_per_shard: None,
            pin_threads: true,
            thread_name: "shardwheel".to_owned(),
            offload: None,
            #[cfg(any(test, loom))]
            wheel_limit: None,
        }
    }
}

impl Builder {
    /// The smallest tick: below it, the operating system's sleep granularity (tens of
    /// microseconds) makes a finer tick meaningless.
    pub const MIN_TICK: Duration = Duration::from_micros(10);
    /// The largest tick: one hour. A timeout may fire up to a tick late; beyond an hour that
    /// promise is worth nothing.
    pub const MAX_TICK: Duration = Duration::from_secs(3600);
    /// The most shards a service may have; each is a thread.
    pub const MAX_SHARDS: usize = 4096;

    /// The default settings (the same as [`TimerService::builder`]).
    ///
    /// ```
    /// use shardwheel::Builder;
    ///
    /// let timers = Builder::new().build()?;
    /// assert!(timers.shard_count() >= 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Number of shards, each a thread with a wheel of its own. Default: the number of
    /// cores available to the process. More shards than cores is allowed; the threads
    /// beyond the core count are not pinned.
    ///
    /// ```
    /// use shardwheel::{BuildError, TimerService};
    ///
    /// assert_eq!(TimerService::builder().shards(2).build()?.shard_count(), 2);
    /// assert!(matches!(TimerService::builder().shards(0).build(), Err(BuildError::ZeroShards)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }

    /// The wheel's resolution; a timeout fires at the first tick at or after its deadline.
    /// Default 1 ms; between [`MIN_TICK`](Self::MIN_TICK) and [`MAX_TICK`](Self::MAX_TICK).
    ///
    /// ```
    /// use shardwheel::{BuildError, TimerService};
    /// use std::time::Duration;
    ///
    /// let coarse = TimerService::builder().tick(Duration::from_millis(10)).build()?;
    /// assert_eq!(coarse.tick(), Duration::from_millis(10));
    /// let too_fine = TimerService::builder().tick(Duration::from_micros(1)).build();
    /// assert!(matches!(too_fine, Err(BuildError::TickTooSmall { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// The most timeouts one shard may hold pending; one more is refused with
    /// [`ScheduleError::Rejected`](crate::ScheduleError::Rejected). Default: unbounded, up to
    /// the shard's wheel's own limit (2³² − 388 timeouts, refused with `Rejected` from a
    /// sixteenth below it).
    ///
    /// ```
    /// use shardwheel::{ScheduleError, TimerService};
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::builder().shards(1).max_pending_per_shard(2).build()?;
    /// let first = timers.schedule(Duration::from_secs(60), || ())?;
    /// timers.schedule(Duration::from_secs(60), || ())?;
    /// let third = timers.schedule(Duration::from_secs(60), || ());
    /// assert!(matches!(third, Err(ScheduleError::Rejected(_))));
    /// first.cancel(); // room comes back at once
    /// timers.schedule(Duration::from_secs(60), || ())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_pending_per_shard(mut self, n: usize) -> Self {
        self.max_pending_per_shard = Some(n);
        self
    }

    /// Whether to pin each shard thread to a core of its own. Default true.
    ///
    /// Cores are handed out in turn over every service of the process: a service takes the
    /// cores after those the previous one took, wrapping around, so two services (or two
    /// one-shard services) do not both land on core 0. Shards beyond the core count are not
    /// pinned.
    ///
    /// ```
    /// // Shards that share the cores with other threads (an async runtime's workers, say).
    /// let timers = shardwheel::TimerService::builder().shards(2).pin_threads(false).build()?;
    /// assert_eq!(timers.shard_count(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pin_threads(mut self, pin: bool) -> Self {
        self.pin_threads = pin;
        self
    }

    /// Shard threads are named `{prefix}-{index}`. Default prefix `shardwheel`. A prefix
    /// holding a NUL byte is refused with [`BuildError::ThreadNameHasNul`].
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::builder().shards(1).thread_name("conn-timers").build()?;
    /// let (tx, rx) = mpsc::channel();
    /// timers.schedule(Duration::ZERO, move || tx.send(std::thread::current().name().map(str::to_owned)).unwrap())?;
    /// assert_eq!(rx.recv()?.as_deref(), Some("conn-timers-0"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.thread_name = prefix.into();
        self
    }

    /// Runs expired tasks on `pool` instead of on the shard threads, so that a task that
    /// blocks delays no other timeout of its shard. Default: on the shard thread, the
    /// cheapest for short tasks (no hand-over to another thread). With the `offload` cargo
    /// feature (`shardwheel = { version = "0.1", features = ["offload"] }`), which brings in
    /// `rayon`.
    ///
    /// The shard still decides what is due and commits it (the EXPIRED compare-and-swap)
    /// on its own thread; it then hands each task to the pool (`ThreadPool::spawn`, one
    /// allocation per task) and goes on. A task that panics on the pool is caught there and
    /// counted in [`Stats::panicked`](crate::Stats::panicked); every task that fired counts
    /// in `expired` as it commits. [`stop`](crate::TimerService::stop) waits for the shard
    /// threads, not for tasks still running on the pool. Tasks of one shard may run in
    /// parallel on the pool, and in any order once handed over.
    ///
    /// Only user tasks (closures and [`TimerTask`](crate::TimerTask)s, a repeating timer's
    /// runs included) go to the pool. A [`Sleep`](crate::Sleep)'s wake-up stays on the shard
    /// thread, as without offload: a pool busy with user tasks delays no sleep, and a task
    /// on the pool may block on a sleep (`block_on(timers.sleep(..))`) even on a one-thread
    /// pool.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let pool = rayon::ThreadPoolBuilder::new().num_threads(2).thread_name(|i| format!("offload-{i}")).build()?;
    /// let timers = TimerService::builder().shards(1).offload(pool).build()?;
    /// let (tx, rx) = mpsc::channel();
    /// timers.schedule(Duration::from_millis(1), move || {
    ///     tx.send(std::thread::current().name().map(str::to_owned)).unwrap();
    /// })?;
    /// let ran_on = rx.recv()?.expect("pool threads are named");
    /// assert!(ran_on.starts_with("offload-"), "ran on {ran_on}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "offload")]
    #[cfg_attr(docsrs, doc(cfg(feature = "offload")))]
    pub fn offload(mut self, pool: rayon::ThreadPool) -> Self {
        self.offload = Some(PlainArc::new(pool));
        self
    }

    /// Checks the settings and starts the shards: an invalid setting is a [`BuildError`]
    /// that names it, never a panic.
    ///
    /// ```
    /// use shardwheel::{BuildError, TimerService};
    ///
    /// let timers = TimerService::builder().shards(1).build()?;
    /// assert_eq!(timers.shard_count(), 1);
    /// let err = TimerService::builder().max_pending_per_shard(0).build().unwrap_err();
    /// assert!(matches!(err, BuildError::ZeroMaxPending));
    /// assert!(err.to_string().starts_with("invalid `max_pending_per_shard`"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(self) -> Result<TimerService, BuildError> {
        let clock = Clock::new(Instant::now(), self.tick);
        let settings = self.settings()?;
        TimerService::start(settings, clock)
    }

    /// Checks the settings and starts the shards on a paused clock, for tests: time stands
    /// still until the returned [`TestClock`] moves it, so that a test of timeouts runs in
    /// no time and always the same way (as `tokio::time::pause` and `advance`).
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let (timers, clock) = TimerService::builder().shards(1).build_paused()?;
    /// let (tx, rx) = mpsc::channel();
    /// timers.schedule(Duration::from_secs(30), move || tx.send("idle").unwrap())?;
    /// clock.advance(Duration::from_secs(29));
    /// assert!(rx.try_recv().is_err(), "29 s: not yet");
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(rx.try_recv(), Ok("idle"), "30 s: fired, before advance returned");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build_paused(self) -> Result<(TimerService, TestClock), BuildError> {
        let (clock, time) = Clock::paused(Instant::now(), self.tick);
        let settings = self.settings()?;
        let timers = TimerService::start(settings, clock.clone())?;
        Ok((timers.clone(), TestClock::new(clock, time, &timers)))
    }

    /// The checked settings.
    fn settings(self) -> Result<Settings, BuildError> {
        let shards = self.validate()?;
        Ok(Settings {
            shards,
            max_pending_per_shard: self.max_pending_per_shard,
            pin_threads: self.pin_threads,
            thread_name: self.thread_name,
            offload: self.offload,
            #[cfg(any(test, loom))]
            wheel_limit: self.wheel_limit,
        })
    }

    /// A tick within [`MIN_TICK`](Self::MIN_TICK)..=[`MAX_TICK`](Self::MAX_TICK), both
    /// included: the service's and [`LocalBuilder`](crate::LocalBuilder)'s one rule.
    pub(crate) fn check_tick(tick: Duration) -> Result<(), BuildError> {
        match tick {
            Duration::ZERO => Err(BuildError::ZeroTick),
            t if t < Self::MIN_TICK => Err(BuildError::TickTooSmall { tick: t, min: Self::MIN_TICK }),
            t if t > Self::MAX_TICK => Err(BuildError::TickTooLarge { tick: t, max: Self::MAX_TICK }),
            _ => Ok(()),
        }
    }

    /// Checks every setting; returns the shard count.
    fn validate(&self) -> Result<usize, BuildError> {
        let shards = match self.shards {
            Some(0) => return Err(BuildError::ZeroShards),
            Some(n) if n > Self::MAX_SHARDS => {
                return Err(BuildError::TooManyShards { requested: n, max: Self::MAX_SHARDS });
            }
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()).min(Self::MAX_SHARDS),
        };
        Self::check_tick(self.tick)?;
        if self.max_pending_per_shard == Some(0) {
            return Err(BuildError::ZeroMaxPending);
        }
        if self.thread_name.contains('\0') {
            return Err(BuildError::ThreadNameHasNul);
        }
        Ok(shards)
    }
}

// The ways in: here rather than in `service.rs`, so that the service does not depend on
// its builder (the builder starts the service, not the other way round).
impl TimerService {
    /// A service with the default settings (see [`Builder`]).
    ///
    /// ```
    /// let timers = shardwheel::TimerService::new()?;
    /// assert!(timers.shard_count() >= 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new() -> Result<TimerService, BuildError> {
        Builder::new().build()
    }

    /// A [`Builder`] to configure a service.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timers = shardwheel::TimerService::builder().shards(1).tick(Duration::from_millis(5)).build()?;
    /// assert_eq!((timers.shard_count(), timers.tick()), (1, Duration::from_millis(5)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
