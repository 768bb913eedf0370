//! The service: its shards, their threads, and the calls that route work to them.

use crate::clock::Clock;
use crate::entry::EntryRef;
use crate::error::{BuildError, ScheduleError, StopError};
use crate::mailbox::{Command, OPEN, Sent};
use crate::routing;
use crate::shard::driver::{self, TakenBack};
use crate::shard::{Shard, ShardHandle, gate};
use crate::staging::{self, Staging};
use crate::stats::Stats;
use crate::sync::plain::{Arc as PlainArc, Weak};
use crate::sync::plain::{AtomicU64, AtomicUsize};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, Mutex, Ordering, spawn_named};
use crate::task::TimerTask;
use crate::timeout::{Timeout, Unfired};
use std::fmt;
use std::time::{Duration, Instant};

mod settings;
pub(crate) use settings::Settings;

/// Distinguishes services, so a shard thread knows whose shard it drives. Relaxed: it only
/// hands out distinct numbers.
static NEXT_SERVICE: AtomicU64 = AtomicU64::new(1);
/// Where the next pinned shard goes, counted over every service of the process, so that
/// services started one after another take different cores instead of all starting at
/// core 0. Relaxed: it only spreads shards out.
static NEXT_CORE: AtomicUsize = AtomicUsize::new(0);

/// A sharded timer service: one wheel per shard thread; clones share the same shards.
///
/// ```
/// use shardwheel::TimerService;
/// use std::sync::mpsc;
/// use std::time::Duration;
///
/// let timers = TimerService::new()?;
/// let (tx, rx) = mpsc::channel();
/// timers.schedule(Duration::from_millis(5), move || tx.send("fired").unwrap())?;
/// assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok("fired"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Stopping
///
/// Dropping the last clone stops the shards without waiting for them: it closes their
/// mailboxes and returns at once, and each shard thread then drops its pending timeouts
/// unrun (catching and counting their panics) and exits on its own, after the task it may
/// be running. So the last drop never blocks, not on an async worker and not inside a task
/// on a shard thread, and runs no task's `Drop` on the caller's thread. Call
/// [`stop`](TimerService::stop) to wait for the shards and get the pending timeouts back
/// instead: only `stop` guarantees that every task is dropped (or handed back) before it
/// returns, so a program that exits right after its last drop may exit before its shards
/// have dropped theirs.
///
/// # Tasks that schedule more
///
/// A task that captures a `TimerService` keeps the service, and its threads, alive while
/// the task waits: a clone held by a pending timeout is a clone like any other. A task
/// that only needs to schedule the next timeout should capture a [`WeakTimerService`]
/// ([`downgrade`](TimerService::downgrade)) instead, so that dropping the user's last
/// clone still stops the service:
///
/// ```
/// use shardwheel::{TimerService, WeakTimerService};
/// use std::time::Duration;
///
/// fn heartbeat(timers: WeakTimerService) {
///     // Once every strong clone is gone, the chain ends here.
///     if let Some(strong) = timers.upgrade() {
///         let _ = strong.schedule(Duration::from_millis(100), move || heartbeat(timers));
///     }
/// }
///
/// let timers = TimerService::new()?;
/// timers.schedule(Duration::from_millis(100), {
///     let weak = timers.downgrade();
///     move || heartbeat(weak)
/// })?;
/// drop(timers); // the shards stop; the pending heartbeat is dropped unrun
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct TimerService {
    /// A plain `Arc`, not loom's: see `sync::plain`.
    inner: PlainArc<Inner>,
}

struct Inner {
    id: u64,
    clock: Clock,
    shards: Box<[Arc<Shard>]>,
    /// The shard threads, until `stop` joins them. The lock also makes a second, concurrent
    /// `stop` wait for the first, then return an empty list.
    threads: Mutex<Vec<JoinHandle<Vec<TakenBack>>>>,
}

impl TimerService {
    /// How many handles of the service there are (its reference count): for the tests that
    /// show a future holds none.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn handles(&self) -> usize {
        PlainArc::strong_count(&self.inner)
    }

    /// A handle that does not keep the service alive: for tasks that schedule on their own
    /// service (see [Tasks that schedule more](TimerService#tasks-that-schedule-more)).
    ///
    /// ```
    /// let timers = shardwheel::TimerService::new()?;
    /// let weak = timers.downgrade();
    /// assert!(weak.upgrade().is_some());
    /// drop(timers); // the last strong clone: the shards stop
    /// assert!(weak.upgrade().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn downgrade(&self) -> WeakTimerService {
        WeakTimerService { inner: PlainArc::downgrade(&self.inner) }
    }

    /// Starts the shards, on `clock` (real, or paused for a `TestClock`).
    pub(crate) fn start(settings: Settings, clock: Clock) -> Result<TimerService, BuildError> {
        let n = settings.shards;
        let id = NEXT_SERVICE.fetch_add(1, Ordering::Relaxed);
        #[cfg(loom)]
        let settings = Settings { pin_threads: false, ..settings };
        let shards: Box<[Arc<Shard>]> = (0..n).map(|i| Arc::new(settings.shard(i, id, clock.clone()))).collect();
        let cores = if settings.pin_threads { pick_cores(n) } else { Vec::new() };
        let inner = Inner { id, clock, shards, threads: Mutex::new(Vec::with_capacity(n)) };
        for (i, shard) in inner.shards.iter().enumerate() {
            let driven = shard.clone();
            let offload = settings.offload.clone();
            let core = cores.get(i).copied().flatten();
            let spawned = spawn_named(format!("{}-{i}", settings.thread_name), move || {
                if let Some(core) = core {
                    // Best effort: a refused pin leaves the thread where the OS put it.
                    core_affinity::set_for_current(core);
                }
                driver::run(driven, offload)
            });
            match spawned {
                Ok(handle) => {
                    shard.mailbox.register_driver(handle.thread().clone());
                    inner.threads.lock().unwrap_or_else(|e| e.into_inner()).push(handle);
                }
                // Dropping `inner` closes the shards already started (they stop on their own).
                Err(e) => return Err(BuildError::Spawn(e)),
            }
        }
        Ok(TimerService { inner: PlainArc::new(inner) })
    }

    /// Runs `task` once `delay` has passed, on a shard thread: the calling thread's own
    /// shard if it is one of this service's, else its home shard.
    ///
    /// A refusal ([`ScheduleError`]: stopped, shard full, shard failed) hands `task` back. To
    /// pass it on with `?` into a `Box<dyn Error + Send + Sync>`, call
    /// [`without_task`](ScheduleError::without_task) first: see [`ScheduleError`].
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = shardwheel::TimerService::new()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let start = Instant::now();
    /// timers.schedule(Duration::from_millis(20), move || tx.send(Instant::now()).unwrap())?;
    /// assert!(rx.recv()? >= start + Duration::from_millis(20), "never early");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn schedule<T: TimerTask>(&self, delay: Duration, task: T) -> Result<Timeout, ScheduleError<T>> {
        self.schedule_routed(self.route_or_home(), |clock| clock.deadline_after(delay), task)
    }

    /// Runs `task` at `deadline`. Reads no clock: the deadline becomes the first tick at or
    /// after it, so one already past fires by the next tick boundary. Errors as
    /// [`schedule`](Self::schedule).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = shardwheel::TimerService::new()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let deadline = Instant::now() + Duration::from_millis(20);
    /// timers.schedule_at(deadline, move || tx.send(Instant::now()).unwrap())?;
    /// assert!(rx.recv()? >= deadline);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn schedule_at<T: TimerTask>(&self, deadline: Instant, task: T) -> Result<Timeout, ScheduleError<T>> {
        self.schedule_routed(self.route_or_home(), |clock| clock.deadline_at(deadline), task)
    }

    /// Like [`schedule`](Self::schedule), on shard `shard` (`0..shard_count()`); an index
    /// beyond is refused with [`ScheduleError::NoSuchShard`].
    ///
    /// ```
    /// use shardwheel::{ScheduleError, TimerService};
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::builder().shards(2).thread_name("timers").build()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// timers.schedule_on(1, Duration::from_millis(1), move || {
    ///     tx.send(std::thread::current().name().map(str::to_owned)).unwrap();
    /// })?;
    /// assert_eq!(rx.recv()?.as_deref(), Some("timers-1"), "ran on shard 1's thread");
    /// let err = timers.schedule_on(2, Duration::from_millis(1), || ()).unwrap_err();
    /// assert!(matches!(err, ScheduleError::NoSuchShard(_)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn schedule_on<T: TimerTask>(
        &self,
        shard: usize,
        delay: Duration,
        task: T,
    ) -> Result<Timeout, ScheduleError<T>> {
        if shard >= self.inner.shards.len() {
            return Err(ScheduleError::NoSuchShard(task));
        }
        self.schedule_with(shard, |clock| clock.deadline_after(delay), task)
    }

    /// The number of shards (and shard threads).
    ///
    /// ```
    /// let timers = shardwheel::TimerService::builder().shards(3).build()?;
    /// assert_eq!(timers.shard_count(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// The service's tick.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let timers = shardwheel::TimerService::builder().tick(Duration::from_millis(10)).build()?;
    /// assert_eq!(timers.tick(), Duration::from_millis(10));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tick(&self) -> Duration {
        self.inner.clock.tick()
    }

    /// Timeouts pending now, over all shards. Exact whenever no call is in flight.
    ///
    /// ```
    /// let timers = shardwheel::TimerService::new()?;
    /// let timeout = timers.schedule(std::time::Duration::from_secs(60), || ())?;
    /// assert_eq!(timers.pending(), 1);
    /// timeout.cancel();
    /// assert_eq!(timers.pending(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pending(&self) -> usize {
        self.inner.shards.iter().map(|s| s.pending()).sum()
    }

    /// The counters, summed over all shards.
    ///
    /// ```
    /// let timers = shardwheel::TimerService::new()?;
    /// timers.schedule(std::time::Duration::from_secs(60), || ())?.cancel();
    /// let stats = timers.stats();
    /// assert_eq!((stats.scheduled, stats.cancelled, stats.pending), (1, 1, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for shard in self.inner.shards.iter() {
            stats.add(&shard_stats(shard));
        }
        stats
    }

    /// The counters of each shard, in shard order: where [`stats`](TimerService::stats)'s
    /// sums come from, for telling a hot or slow shard from the rest. Each adds up as the sum
    /// does (`scheduled == expired + cancelled + unfired + pending`, exact at rest); a timeout
    /// counts on the shard it was armed on.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timers = shardwheel::TimerService::builder().shards(2).build()?;
    /// timers.schedule_on(1, Duration::from_secs(60), || ())?;
    /// let shards = timers.shard_stats();
    /// assert_eq!(shards.iter().map(|s| s.pending).collect::<Vec<_>>(), [0, 1]);
    /// assert_eq!(shards.iter().map(|s| s.scheduled).sum::<u64>(), timers.stats().scheduled);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shard_stats(&self) -> Vec<Stats> {
        self.inner.shards.iter().map(|shard| shard_stats(shard)).collect()
    }

    /// Stops every shard and hands back every timeout that had not fired (pending, or still
    /// on its way to its shard), each now [`Cancelled`](crate::TimeoutState::Cancelled),
    /// without calling their tasks' `cancelled()`. Waits for the tasks running on the shard
    /// threads to finish; with `Builder::offload` (the `offload` feature), not for those
    /// already handed to the pool, which may still be running (or not yet started) when
    /// `stop` returns.
    ///
    /// A schedule racing with `stop` either lands in the returned list, fires (if it was due
    /// by the shard's last turn), or fails with [`ScheduleError::Shutdown`]: nothing is lost.
    /// A task running on a shard thread in its last turn that schedules on its own shard
    /// lands in the returned list. Later schedules fail with `Shutdown`; a second `stop`
    /// returns an empty list. From a task on one of this service's shard threads, `stop`
    /// would wait for itself, and returns [`StopError::OnTimerThread`].
    ///
    /// ```
    /// use shardwheel::{ScheduleError, TimerService};
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let timeout = timers.schedule(Duration::from_secs(60), || ())?;
    /// let unfired = timers.stop()?;
    /// assert!(unfired.len() == 1 && unfired[0].timeout().ptr_eq(&timeout) && timeout.is_cancelled());
    /// assert!(matches!(timers.schedule(Duration::ZERO, || ()), Err(ScheduleError::Shutdown(_))));
    /// assert!(timers.stop()?.is_empty(), "a second stop hands back nothing");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop(&self) -> Result<Vec<Unfired>, StopError> {
        if routing::driving(self.inner.id).is_some() {
            return Err(StopError::OnTimerThread);
        }
        Ok(self.inner.stop())
    }

    /// Stops gracefully: refuses new timeouts at once, lets every pending one fire or be
    /// cancelled until `grace` has passed, then stops as [`stop`](TimerService::stop) does,
    /// handing back what is still pending (empty if everything ended in time). For a
    /// server's shutdown: its connections' timers go on keeping time while it drains them,
    /// and what it never reached comes back rather than being lost.
    ///
    /// From the call on:
    ///
    /// - `schedule*` fails with [`ScheduleError::Shutdown`], the task handed back (a
    ///   repeating series ends at its next run, whose re-arm is refused);
    /// - a timeout already pending fires at its deadline, or is cancelled, as before; a
    ///   schedule racing the call either is refused or is pending (and then fires, is
    ///   cancelled, or comes back in the list);
    /// - a future ([`Sleep`](crate::Sleep), a `timeout`, an `Interval`, hyper's sleeps)
    ///   already registered completes on its shard at its deadline; one that must register
    ///   (first polled, reset, or moved to another task) waits on the overflow timer
    ///   instead, and completes at its deadline just the same: never early, never a panic
    ///   (see [`Sleep`](crate::Sleep)'s "Full, stopping, stopped"). So does a future still
    ///   waiting at the end, once its task polls it again (ending the handed-back timeout
    ///   wakes it).
    ///
    /// Blocks the calling thread for up to `grace` (checking every millisecond, real time
    /// even on a paused clock): from async code, call it where blocking is allowed
    /// (`tokio::task::spawn_blocking`). "Pending" counts every timeout not yet ended, far ones
    /// too: with `grace` = `Duration::MAX`, one an hour off (or a `sleep(Duration::MAX)`)
    /// holds the stop for as long, and a connection that pushes its timeout out (`reset` to a
    /// later deadline is one CAS, not a new timeout, so the drain does not refuse it) keeps it
    /// pending. From a task on one of this service's shard threads it would wait for itself,
    /// and returns [`StopError::OnTimerThread`].
    ///
    /// ```
    /// use shardwheel::{ScheduleError, TimerService};
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// timers.schedule(Duration::from_millis(20), move || tx.send("fired").unwrap())?;
    /// let far = timers.schedule(Duration::from_secs(3600), || ())?;
    /// let started = Instant::now();
    /// let unfired = timers.stop_gracefully(Duration::from_millis(200))?;
    /// assert_eq!(rx.try_recv(), Ok("fired"), "what was due within the grace fired");
    /// assert!(unfired.len() == 1 && unfired[0].timeout().ptr_eq(&far), "the rest came back");
    /// assert!(started.elapsed() >= Duration::from_millis(200));
    /// assert!(matches!(timers.schedule(Duration::ZERO, || ()), Err(ScheduleError::Shutdown(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop_gracefully(&self, grace: Duration) -> Result<Vec<Unfired>, StopError> {
        if routing::driving(self.inner.id).is_some() {
            return Err(StopError::OnTimerThread);
        }
        for shard in self.inner.shards.iter() {
            shard.mailbox.drain();
        }
        let give_up = Instant::now().checked_add(grace);
        while self.pending() > 0 && give_up.is_none_or(|at| Instant::now() < at) {
            let left = give_up.map_or(Duration::from_millis(1), |at| at.saturating_duration_since(Instant::now()));
            // std's: the facade's thread is loom's under loom, where this is never called.
            std::thread::sleep(left.min(Duration::from_millis(1)));
        }
        Ok(self.inner.stop())
    }

    /// Whether `stop` has been called (or the service is being dropped).
    ///
    /// ```
    /// let timers = shardwheel::TimerService::new()?;
    /// assert!(!timers.is_stopped());
    /// timers.stop()?;
    /// assert!(timers.is_stopped());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_stopped(&self) -> bool {
        self.inner.shards.iter().all(|s| s.mailbox.is_closed())
    }

    /// After a paused clock moved (`TestClock::advance`): asks every shard to catch up and
    /// waits until each has fired what is due by the clock's now and run those tasks (those
    /// handed to an offload pool may still be running), or has stopped. Rounds repeat while
    /// a round fired anything: a task that ran may have armed a timeout due now, on its own
    /// shard or another that had already caught up.
    pub(crate) fn settle_paused(&self) {
        loop {
            let fired = self.stats().expired;
            let requests: Vec<u64> = self.inner.shards.iter().map(|shard| shard.request_settle()).collect();
            for shard in self.inner.shards.iter() {
                shard.mailbox.wake();
            }
            for (shard, request) in self.inner.shards.iter().zip(requests) {
                // Bounded by the shard's own progress: a task that blocks its shard forever
                // blocks this too, as it would block every timeout of that shard.
                while shard.settled() < request && !shard.mailbox.is_closed() {
                    // std's, not the facade's: a paused clock is never used under loom.
                    std::thread::sleep(std::time::Duration::from_micros(20));
                }
            }
            if self.stats().expired == fired {
                return;
            }
        }
    }

    /// The shard for a call without an explicit one: `Ok` with the shard this thread drives
    /// (a task on one of this service's shard threads), else `Err` with its home shard.
    pub(crate) fn route_or_home(&self) -> Result<usize, usize> {
        routing::driving(self.inner.id).ok_or_else(|| routing::home_shard(self.inner.shards.len()))
    }

    /// The shard for a call without an explicit one.
    pub(crate) fn route(&self) -> usize {
        self.route_or_home().unwrap_or_else(|home| home)
    }

    /// Schedules on shard `index`, with the deadline `deadline` computes from the clock.
    #[inline]
    pub(crate) fn schedule_with<T: TimerTask>(
        &self,
        index: usize,
        deadline: impl FnOnce(&Clock) -> u64,
        task: T,
    ) -> Result<Timeout, ScheduleError<T>> {
        let route = if routing::driving(self.inner.id) == Some(index) { Ok(index) } else { Err(index) };
        self.schedule_routed(route, deadline, task)
    }

    /// [`schedule_with`](Self::schedule_with) on the shard `route` names, as
    /// [`route_or_home`](Self::route_or_home) gives it: `Ok` if this thread drives that shard
    /// (then it may file straight into its wheel), `Err` if it does not.
    ///
    /// `#[inline]`: every arm passes through it, and as a call of its own it pushed and popped
    /// registers and returned its `Result` (24 bytes for a `Sleep`'s task, more for a bigger
    /// task) through memory. The public `schedule*` that call it are `#[inline]` too: with
    /// this one inlined into them they grew past what the compiler inlines unasked (an arm
    /// and cancel then took 601 instructions, not 577). Inlined into the caller (the task
    /// type's own code, in the user's crate), with `sleep` and `Sleep::try_poll`, a `Sleep`
    /// made, polled and dropped went from 696 instructions to 610 (callgrind over
    /// `examples/sleep_loop.rs`), 56–58 ns to 49 in `benches/sleep.rs`; an arm and cancel
    /// from 577 to 554 (`examples/arm_cancel_loop.rs`). `pool::alloc` took the next step.
    #[inline]
    pub(crate) fn schedule_routed<T: TimerTask>(
        &self,
        route: Result<usize, usize>,
        deadline: impl FnOnce(&Clock) -> u64,
        task: T,
    ) -> Result<Timeout, ScheduleError<T>> {
        self.schedule_routed_then(route, deadline, task, |timeout| timeout)
    }

    /// [`schedule_routed`](Self::schedule_routed), handing the `Timeout` to `ok` where it is
    /// made, on each path: the `Sleep` stores it there, in two word moves, where a `Result`
    /// merged from the paths went through memory and was read back as one 16-byte load of
    /// two 8-byte stores (a store-forwarding stall: `examples/sleep_loop.rs` 8 % slower).
    #[inline]
    pub(crate) fn schedule_routed_then<T: TimerTask, R>(
        &self,
        route: Result<usize, usize>,
        deadline: impl FnOnce(&Clock) -> u64,
        task: T,
        ok: impl FnOnce(Timeout) -> R,
    ) -> Result<R, ScheduleError<T>> {
        // Whether this thread is the shard's driver, from the routing's plain thread-local:
        // the driver's own state (`driver::LOCAL`) is set only while that is, so a thread
        // this says is not the driver skips both looks at it (most threads, every arm).
        let (index, maybe_driver) = match route {
            Ok(index) => (index, true),
            Err(index) => (index, false),
        };
        let shard = &self.inner.shards[index];
        // One look at the mailbox's flags, closed or full; the rest is cold (`shard/gate.rs`).
        let gate = shard.mailbox.gate();
        if gate != OPEN {
            if let Some(refusal) = gate::refusal(shard, gate, maybe_driver) {
                return Err(refusal.with(shard, task));
            }
        }
        if !shard.try_reserve() {
            shard.counters.rejected();
            return Err(ScheduleError::Rejected(task));
        }
        let deadline = deadline(&self.inner.clock);
        let (entry, handle) = EntryRef::new_pair(deadline, task);
        let entry = if maybe_driver {
            match driver::schedule_local(shard, entry) {
                Ok(own) => {
                    shard.counters.armed();
                    return Ok(ok(Timeout { entry: handle, shard: own }));
                }
                Err(entry) => entry,
            }
        } else {
            entry
        };
        let entry = match staging::arm(shard, entry, deadline) {
            Staging::Staged(own) => return Ok(ok(Timeout { entry: handle, shard: own })),
            Staging::Closed(entry) => {
                drop(entry);
                return self.take_back(Timeout { entry: handle, shard: ShardHandle::unowned(shard.clone()) }).map(ok);
            }
            Staging::Unavailable(entry) => entry,
        };
        // Rare paths (a thread being torn down, a stopping shard): a handle of their own.
        let timeout = Timeout { entry: handle, shard: ShardHandle::unowned(shard.clone()) };
        match shard.mailbox.send(Command::Arm(entry), Some(deadline)) {
            Sent::Delivered => {
                shard.counters.armed();
                Ok(ok(timeout))
            }
            Sent::Closed => self.take_back(timeout).map(ok),
        }
    }

    /// The service's clock, for the futures and series that work in ticks.
    pub(crate) fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Shard `index` (`0..shard_count()`).
    pub(crate) fn shard_at(&self, index: usize) -> &Arc<Shard> {
        &self.inner.shards[index]
    }

    /// A schedule that met a closing mailbox: the shard either took the timeout (its final
    /// drain put it in `stop`'s list, or its last turn fired it: the schedule succeeded) or
    /// never will (take the task back).
    fn take_back<T: TimerTask>(&self, timeout: Timeout) -> Result<Timeout, ScheduleError<T>> {
        let Some((task, _)) = timeout.entry.cancel() else {
            // The shard took it: in `stop`'s list (counted unfired) or fired (counted expired).
            timeout.shard.counters.armed();
            return Ok(timeout);
        };
        timeout.shard.release();
        Err(timeout.shard.closed_error(task.downcast::<T>()))
    }
}

impl Inner {
    /// Closes every mailbox, then joins every shard thread but the caller's own.
    fn stop(&self) -> Vec<Unfired> {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        for shard in self.shards.iter() {
            shard.mailbox.close();
        }
        let me = thread::current().id();
        let mut unfired = Vec::new();
        // The threads were pushed in shard order.
        for (shard, handle) in self.shards.iter().zip(threads.drain(..)) {
            if handle.thread().id() == me {
                // Never: `TimerService::stop` refuses on a shard thread of its own service.
                continue;
            }
            match handle.join() {
                Ok(list) => {
                    let handle = ShardHandle::unowned(shard.clone());
                    unfired.extend(
                        list.into_iter().map(|TakenBack { entry, task }| {
                            Unfired::new(Timeout { entry, shard: handle.clone() }, task)
                        }),
                    );
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        unfired
    }
}

/// One shard's counters, summed with its threads' slots.
fn shard_stats(shard: &Shard) -> Stats {
    let mut stats = Stats::default();
    shard.counters.add_to(&mut stats);
    stats.cancelled = shard.cancelled();
    stats.pending = shard.pending() as u64;
    stats.queued = shard.mailbox.len() as u64;
    stats.failed_shards = u64::from(shard.has_failed());
    // The arms themselves, not `expired + cancelled + unfired + pending` from reads taken at
    // different moments: those add up at rest, but while calls are in flight their sum can
    // read lower than a moment before, and a counter must never go back (`record_metrics`).
    stats.scheduled = shard.armed();
    stats
}

/// The cores for `n` shards: consecutive cores from where the previous service stopped,
/// wrapping around; `None` (not pinned) for shards beyond the core count, so that no two
/// shards of one service share a core. Empty if the cores cannot be listed.
///
/// The cores are those the calling thread may run on (`core_affinity` reads the thread's
/// affinity mask): a service built from a thread pinned to one core pins all its shards
/// to that core, and so does one built inside a task on another service's shard.
fn pick_cores(n: usize) -> Vec<Option<core_affinity::CoreId>> {
    let all = core_affinity::get_core_ids().unwrap_or_default();
    let pinned = n.min(all.len());
    let first = NEXT_CORE.fetch_add(pinned, Ordering::Relaxed);
    cores_from(&all, first, n)
}

/// `n` shards' cores out of `all`, starting at `all[first % len]`.
fn cores_from<C: Copy>(all: &[C], first: usize, n: usize) -> Vec<Option<C>> {
    if all.is_empty() {
        return Vec::new();
    }
    let first = first % all.len();
    (0..n).map(|i| (i < all.len()).then(|| all[(first + i) % all.len()])).collect()
}

impl Drop for Inner {
    /// The last clone is gone: close every mailbox and return without joining, so that the
    /// caller never blocks (it may be an async worker, or a task on a shard thread). Each
    /// shard thread sees its mailbox closed at its next turn, drops what it still holds, and
    /// exits; its `JoinHandle` is dropped here, which detaches it.
    fn drop(&mut self) {
        for shard in self.shards.iter() {
            // SeqCst, before the close: a shard that sees its mailbox closed sees this too.
            shard.abandoned.store(true, Ordering::SeqCst);
            shard.mailbox.close();
        }
    }
}

/// A handle to a [`TimerService`] that does not keep it alive; made by
/// [`TimerService::downgrade`]. [`upgrade`](WeakTimerService::upgrade) gives a service
/// back while any strong clone lives.
#[derive(Clone)]
pub struct WeakTimerService {
    inner: Weak<Inner>,
}

impl WeakTimerService {
    /// The service, if a strong clone still lives. A service that was stopped but not
    /// dropped still upgrades (and refuses schedules with
    /// [`ScheduleError::Shutdown`]).
    ///
    /// ```
    /// let timers = shardwheel::TimerService::new()?;
    /// let weak = timers.downgrade();
    /// timers.stop()?;
    /// assert!(weak.upgrade().expect("stopped, not dropped").is_stopped());
    /// drop(timers);
    /// assert!(weak.upgrade().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn upgrade(&self) -> Option<TimerService> {
        self.inner.upgrade().map(|inner| TimerService { inner })
    }
}

impl fmt::Debug for WeakTimerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakTimerService").field("alive", &(self.inner.strong_count() > 0)).finish()
    }
}

impl fmt::Debug for TimerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerService")
            .field("shards", &self.inner.shards.len())
            .field("tick", &self.inner.clock.tick())
            .field("pending", &self.pending())
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
