//! The handle to one scheduled timeout, and what `stop()` hands back.

use crate::entry::{EntryRef, OwnedTask};
use crate::mailbox::Command;
use crate::shard::ShardRef;
use crate::state::{Cancelled, Reset, State};
use crate::task::TimerTask;
use std::fmt;
use std::time::{Duration, Instant};

/// Where a timeout stands. `Cancelled` and `Expired` are final.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeoutState {
    /// Waiting for its deadline.
    Pending,
    /// Cancelled by [`Timeout::cancel`], or handed back by [`TimerService::stop`](crate::TimerService::stop).
    Cancelled,
    /// Fired: the shard committed to run its task.
    Expired,
}

/// A handle to one scheduled timeout: cancel it, push its deadline, ask where it stands.
///
/// Cloning is cheap and every clone speaks for the same timeout. Dropping every handle does
/// not cancel the timeout.
///
/// ```
/// use shardwheel::TimerService;
/// use std::time::Duration;
///
/// let timers = TimerService::new()?;
/// let timeout = timers.schedule(Duration::from_secs(30), || println!("request timed out"))?;
/// assert!(timeout.is_pending());
/// assert!(timeout.cancel(), "the first cancel wins");
/// assert!(!timeout.cancel(), "and only the first");
/// assert!(timeout.is_cancelled());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Timeout {
    pub(crate) entry: EntryRef,
    /// Counted per (thread, shard), not per shard: see `shard/handle.rs`.
    pub(crate) shard: ShardRef,
}

impl Timeout {
    /// Cancels the timeout if it is still pending. Returns `true` iff this call moved it
    /// from pending to cancelled; then the task will never run, its
    /// [`cancelled`](TimerTask::cancelled) has run on this thread, and the task has been
    /// dropped, all before `cancel` returns.
    ///
    /// For the handle of a series ([`schedule_repeating`](crate::TimerService::schedule_repeating)),
    /// `true` means the series is over: no run that had not started calls the closure
    /// again, but one run already under way (at most one) may still be calling it when
    /// `cancel` returns; it finishes, and none follows. `cancel` does not wait for it.
    ///
    /// A panic in the task's `cancelled()` or in its `Drop` does not escape: it is caught,
    /// counted in [`Stats::panicked`](crate::Stats::panicked) as a panic in `run` is on a
    /// shard, and the cancel still stands (`cancel` returns `true`).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timers = shardwheel::TimerService::new()?;
    /// let request = timers.schedule(Duration::from_secs(5), || unreachable!("answered in time"))?;
    /// assert!(request.cancel(), "the response came first: the task never runs");
    /// assert!(!request.cancel(), "already cancelled");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(&self) -> bool {
        let Some((task, linked)) = self.entry.cancel_borrowed() else {
            return false;
        };
        self.shard.release();
        if !self.shard.count_cancel_as_owner() {
            crate::staging::count_cancelled(self.shard.shard());
        }
        // The notice only gives back the wheel's node and the entry's memory; the cancel is
        // already decided. An entry the shard had not filed yet needs none: whoever gets to
        // the arm next (the shard, or the sweep of the stage it waits on) sees the cancel and
        // drops it. A closed mailbox means the shard is gone with its wheel.
        if linked == Cancelled::Linked {
            let _ = self.shard.mailbox.send(Command::Unlink(self.entry.clone()), None);
        }
        // The cancel is decided and counted: a panic from the task's own code must not undo
        // it or escape into the caller's bookkeeping half done.
        // (`task::catch_panics` spelled out, in the shape this path had before it: the
        // payload's drop, out of line, is the only difference.)
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.cancelled())) {
            self.shard.counters.panicked(crate::task::drop_payload(payload));
        }
        true
    }

    /// Moves a pending timeout's deadline to `delay` from now. Returns `false`, changing
    /// nothing, unless the timeout is pending.
    ///
    /// A later deadline is a single compare-and-swap: the shard finds out when the old
    /// deadline comes and files the timeout again. An earlier one also tells the shard.
    /// A reset that races with the timeout firing either wins (the timeout now waits for
    /// the new deadline) or loses (it fired, and `reset` returns `false`).
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = shardwheel::TimerService::new()?;
    /// let (tx, rx) = mpsc::channel();
    /// let idle = timers.schedule(Duration::from_secs(60), move || tx.send(Instant::now()).unwrap())?;
    /// let reset = Instant::now();
    /// assert!(idle.reset(Duration::from_millis(20)), "the peer went quiet: earlier");
    /// assert!(rx.recv()? >= reset + Duration::from_millis(20));
    /// assert!(!idle.reset(Duration::from_secs(1)), "it fired: nothing to reset");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&self, delay: Duration) -> bool {
        self.reset_to(self.shard.clock.deadline_after(delay))
    }

    /// Like [`reset`](Timeout::reset), to an instant. Reads no clock: a server that resets
    /// many idle timeouts to the same instant (one clock read per event-loop turn) pays for
    /// the compare-and-swap alone.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = shardwheel::TimerService::new()?;
    /// let idle = timers.schedule(Duration::from_secs(30), || ())?;
    /// let turn = Instant::now(); // read once per event-loop turn
    /// assert!(idle.reset_at(turn + Duration::from_secs(60)));
    /// assert!(idle.deadline() >= turn + Duration::from_secs(60));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset_at(&self, deadline: Instant) -> bool {
        self.reset_to(self.shard.clock.deadline_at_for_reset(deadline))
    }

    fn reset_to(&self, tick: u64) -> bool {
        match self.entry.state().try_reset(tick) {
            Reset::NotPending => false,
            Reset::Later => true,
            Reset::Earlier => {
                let _ = self.shard.mailbox.send(Command::Refile(self.entry.clone()), Some(tick));
                true
            }
        }
    }

    /// Where the timeout stands now.
    ///
    /// ```
    /// use shardwheel::{TimeoutState, TimerService};
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let (tx, rx) = mpsc::channel();
    /// let timeout = timers.schedule(Duration::from_millis(1), move || tx.send(()).unwrap())?;
    /// rx.recv()?;
    /// assert_eq!(timeout.state(), TimeoutState::Expired);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn state(&self) -> TimeoutState {
        match self.entry.state().load() {
            State::Pending { .. } => TimeoutState::Pending,
            State::Cancelled { .. } => TimeoutState::Cancelled,
            State::Expired { .. } => TimeoutState::Expired,
        }
    }

    /// `state() == Pending`.
    ///
    /// ```
    /// let timers = shardwheel::TimerService::new()?;
    /// let timeout = timers.schedule(std::time::Duration::from_secs(60), || ())?;
    /// assert!(timeout.is_pending());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_pending(&self) -> bool {
        self.state() == TimeoutState::Pending
    }

    /// `state() == Cancelled`: cancelled, or handed back by `stop()`.
    ///
    /// ```
    /// let timers = shardwheel::TimerService::new()?;
    /// let timeout = timers.schedule(std::time::Duration::from_secs(60), || ())?;
    /// timers.stop()?;
    /// assert!(timeout.is_cancelled());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.state() == TimeoutState::Cancelled
    }

    /// `state() == Expired`: true from the moment the shard commits to run the task (before
    /// it has run).
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let timers = shardwheel::TimerService::new()?;
    /// let (tx, rx) = mpsc::channel();
    /// let timeout = timers.schedule(Duration::ZERO, move || tx.send(()).unwrap())?;
    /// rx.recv()?;
    /// assert!(timeout.is_expired() && !timeout.cancel());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_expired(&self) -> bool {
        self.state() == TimeoutState::Expired
    }

    /// The deadline as the wheel holds it: the requested deadline rounded up to the
    /// service's tick, the boundary at which the timeout fires (or fired, or would have).
    /// A delay of zero is held as the tick under way when it was set (the timeout fires on
    /// its shard's next turn), so this may be slightly earlier than asked; an instant
    /// already past is held as the tick at or after it.
    /// For a timeout that never fires (`Duration::MAX`) it is the farthest instant the
    /// platform represents.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = shardwheel::TimerService::new()?;
    /// let asked = Instant::now() + Duration::from_secs(10);
    /// let timeout = timers.schedule_at(asked, || ())?;
    /// assert!(timeout.deadline() >= asked && timeout.deadline() < asked + timers.tick());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deadline(&self) -> Instant {
        self.shard.clock.instant_of(self.entry.state().load().deadline())
    }

    /// The index of the shard that owns the timeout.
    ///
    /// ```
    /// let timers = shardwheel::TimerService::builder().shards(2).build()?;
    /// let timeout = timers.schedule_on(1, std::time::Duration::from_secs(60), || ())?;
    /// assert_eq!(timeout.shard(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shard(&self) -> usize {
        self.shard.index
    }

    /// True if both handles speak for the same timeout.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timers = shardwheel::TimerService::new()?;
    /// let a = timers.schedule(Duration::from_secs(60), || ())?;
    /// let b = timers.schedule(Duration::from_secs(60), || ())?;
    /// assert!(a.ptr_eq(&a.clone()) && !a.ptr_eq(&b));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ptr_eq(&self, other: &Timeout) -> bool {
        self.entry.ptr_eq(&other.entry)
    }
}

impl fmt::Debug for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Timeout");
        out.field("state", &self.state()).field("shard", &self.shard.index);
        if self.entry.state().load().deadline() >= crate::state::NEVER {
            out.field("deadline", &format_args!("never"));
        } else {
            // From now, so that the output reads without a reference instant: positive
            // ahead, negative behind.
            let deadline = self.deadline();
            // The service's clock (a paused one's, for a `TestClock`).
            let now = self.shard.clock.now();
            let from_now = match deadline.checked_duration_since(now) {
                Some(ahead) => format!("in {ahead:.3?}"),
                None => format!("{:.3?} ago", now.duration_since(deadline)),
            };
            out.field("deadline", &format_args!("{from_now}"));
        }
        out.finish()
    }
}

/// A timeout that `stop()` took back before it fired. It is now
/// [`Cancelled`](TimeoutState::Cancelled); its task's `cancelled()` has *not* been called.
pub struct Unfired {
    timeout: Timeout,
    task: OwnedTask,
}

impl Unfired {
    pub(crate) fn new(timeout: Timeout, task: OwnedTask) -> Unfired {
        Unfired { timeout, task }
    }

    /// The handle of the timeout that did not fire.
    ///
    /// ```
    /// let timers = shardwheel::TimerService::new()?;
    /// let timeout = timers.schedule(std::time::Duration::from_secs(60), || ())?;
    /// let unfired = timers.stop()?;
    /// assert!(unfired[0].timeout().ptr_eq(&timeout));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn timeout(&self) -> &Timeout {
        &self.timeout
    }

    /// The task, to run, drop, or tell it was cancelled.
    ///
    /// ```
    /// use std::sync::mpsc;
    ///
    /// let timers = shardwheel::TimerService::new()?;
    /// let (tx, rx) = mpsc::channel();
    /// timers.schedule(std::time::Duration::from_secs(60), move || tx.send("flushed").unwrap())?;
    /// for unfired in timers.stop()? {
    ///     unfired.into_task().run(); // run what was left, now, on this thread
    /// }
    /// assert_eq!(rx.recv()?, "flushed");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_task(self) -> Box<dyn TimerTask> {
        self.task.boxed()
    }
}

impl fmt::Debug for Unfired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unfired").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}
