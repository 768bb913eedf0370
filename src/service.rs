//! The service: its shards, their threads, and the calls that route work to them.

use crate::builder::Builder;
use crate::clock::Clock;
use crate::entry::EntryRef;
use crate::error::{BuildError, ScheduleError, StopError};
use crate::mailbox::{Command, Sent};
use crate::routing;
use crate::shard::{Shard, driver};
use crate::staging::{self, Staging};
use crate::stats::Stats;
use crate::sync::plain::AtomicU64;
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Arc, Mutex, Ordering, spawn_named};
use crate::task::TimerTask;
use crate::timeout::{Timeout, Unfired};
use std::fmt;
use std::time::{Duration, Instant};

/// Distinguishes services, so a shard thread knows whose shard it drives. Relaxed: it only
/// hands out distinct numbers.
static NEXT_SERVICE: AtomicU64 = AtomicU64::new(1);

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
/// Dropping the last clone stops the shards; timeouts still pending are dropped unrun.
/// Call [`stop`](TimerService::stop) to get them back instead.
#[derive(Clone)]
pub struct TimerService {
    inner: Arc<Inner>,
}

struct Inner {
    id: u64,
    clock: Clock,
    shards: Box<[Arc<Shard>]>,
    /// The shard threads, until `stop` joins them. The lock also makes a second, concurrent
    /// `stop` wait for the first, then return an empty list.
    threads: Mutex<Vec<JoinHandle<Vec<Unfired>>>>,
}

impl TimerService {
    /// A service with the default settings (see [`Builder`]).
    pub fn new() -> Result<TimerService, BuildError> {
        Builder::new().build()
    }

    /// A [`Builder`] to configure a service.
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// Starts `n` shards with checked settings.
    pub(crate) fn start(settings: Builder, n: usize) -> Result<TimerService, BuildError> {
        let id = NEXT_SERVICE.fetch_add(1, Ordering::Relaxed);
        let clock = Clock::new(Instant::now(), settings.tick);
        #[cfg(loom)]
        let settings = Builder { pin_threads: false, ..settings };
        let shards: Box<[Arc<Shard>]> =
            (0..n).map(|i| Arc::new(Shard::new(i, id, clock, settings.max_pending_per_shard))).collect();
        let cores = if settings.pin_threads { core_affinity::get_core_ids().unwrap_or_default() } else { Vec::new() };
        let inner = Inner { id, clock, shards, threads: Mutex::new(Vec::with_capacity(n)) };
        for (i, shard) in inner.shards.iter().enumerate() {
            let driven = shard.clone();
            let core = cores.get(i).copied();
            let spawned = spawn_named(format!("{}-{i}", settings.thread_name), move || {
                if let Some(core) = core {
                    // Best effort: a refused pin leaves the thread where the OS put it.
                    core_affinity::set_for_current(core);
                }
                driver::run(driven)
            });
            match spawned {
                Ok(handle) => {
                    shard.mailbox.register_driver(handle.thread().clone());
                    inner.threads.lock().unwrap_or_else(|e| e.into_inner()).push(handle);
                }
                // Dropping `inner` closes and joins the shards already started.
                Err(e) => return Err(BuildError::Spawn(e)),
            }
        }
        Ok(TimerService { inner: Arc::new(inner) })
    }

    /// Runs `task` once `delay` has passed, on a shard thread: the calling thread's own
    /// shard if it is one of this service's, else its home shard.
    pub fn schedule<T: TimerTask>(&self, delay: Duration, task: T) -> Result<Timeout, ScheduleError<T>> {
        let shard = self.route();
        self.schedule_with(shard, |clock| clock.deadline_after(delay), task)
    }

    /// Runs `task` at `deadline`. Reads no clock: the deadline becomes the first tick at or
    /// after it, so one already past fires by the next tick boundary.
    pub fn schedule_at<T: TimerTask>(&self, deadline: Instant, task: T) -> Result<Timeout, ScheduleError<T>> {
        let shard = self.route();
        self.schedule_with(shard, |clock| clock.deadline_at(deadline), task)
    }

    /// Like [`schedule`](Self::schedule), on shard `shard` (`0..shard_count()`).
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
    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// The service's tick.
    pub fn tick(&self) -> Duration {
        self.inner.clock.tick()
    }

    /// Timeouts pending now, over all shards. Exact whenever no call is in flight.
    pub fn pending(&self) -> usize {
        self.inner.shards.iter().map(|s| s.pending()).sum()
    }

    /// The counters, summed over all shards.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for shard in self.inner.shards.iter() {
            shard.counters.add_to(&mut stats);
            stats.cancelled += shard.cancelled();
            stats.pending += shard.pending() as u64;
            stats.queued += shard.mailbox.len() as u64;
        }
        stats.scheduled = stats.expired + stats.cancelled + stats.unfired + stats.pending;
        stats
    }

    /// Stops every shard and hands back every timeout that had not fired (pending, or still
    /// on its way to its shard), each now [`Cancelled`](crate::TimeoutState::Cancelled),
    /// without calling their tasks' `cancelled()`. Waits for running tasks to finish.
    ///
    /// A schedule racing with `stop` either lands in the returned list, fires (if it was due
    /// by the shard's last turn), or fails with [`ScheduleError::Shutdown`]: nothing is lost.
    /// Later schedules fail with `Shutdown`; a second `stop` returns an empty list. From a task on one of this service's shard
    /// threads, `stop` would wait for itself, and returns [`StopError::OnTimerThread`].
    pub fn stop(&self) -> Result<Vec<Unfired>, StopError> {
        if routing::driving(self.inner.id).is_some() {
            return Err(StopError::OnTimerThread);
        }
        Ok(self.inner.stop())
    }

    /// Whether `stop` has been called (or the service is being dropped).
    pub fn is_stopped(&self) -> bool {
        self.inner.shards.iter().all(|s| s.mailbox.is_closed())
    }

    /// The shard for a call without an explicit one.
    fn route(&self) -> usize {
        routing::driving(self.inner.id).unwrap_or_else(|| routing::home_shard(self.inner.shards.len()))
    }

    fn schedule_with<T: TimerTask>(
        &self,
        index: usize,
        deadline: impl FnOnce(&Clock) -> u64,
        task: T,
    ) -> Result<Timeout, ScheduleError<T>> {
        let shard = &self.inner.shards[index];
        if shard.mailbox.is_closed() {
            return Err(ScheduleError::Shutdown(task));
        }
        if !shard.try_reserve() {
            shard.counters.rejected();
            return Err(ScheduleError::Rejected(task));
        }
        let deadline = deadline(&self.inner.clock);
        // Free a cell the shard let go of, here, where this allocation can reuse it.
        shard.returned.free_one();
        let (entry, handle) = EntryRef::new_pair(deadline, task);
        let timeout = Timeout { entry: handle, shard: shard.clone() };
        let entry = match driver::schedule_local(shard, entry) {
            Ok(()) => {
                shard.counters.armed();
                return Ok(timeout);
            }
            Err(entry) => entry,
        };
        let entry = match staging::arm(shard, entry, deadline) {
            Staging::Staged => return Ok(timeout),
            Staging::Closed(entry) => {
                drop(entry);
                return self.take_back(timeout);
            }
            Staging::Unavailable(entry) => entry,
        };
        match shard.mailbox.send(Command::Arm(entry), Some(deadline)) {
            Sent::Delivered => {
                shard.counters.armed();
                Ok(timeout)
            }
            Sent::Closed => self.take_back(timeout),
        }
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
        Err(ScheduleError::Shutdown(task.downcast::<T>()))
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
        for handle in threads.drain(..) {
            if handle.thread().id() == me {
                // Dropped from a task on this very thread: it finishes after the task.
                continue;
            }
            match handle.join() {
                Ok(list) => unfired.extend(list),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        unfired
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(self.stop());
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
