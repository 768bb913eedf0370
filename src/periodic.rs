//! Repeating timers: [`TimerService::schedule_repeating`].
//!
//! A timeout's state word ends once (CANCELLED and EXPIRED are final, `state.rs`), and that
//! is what makes one CAS decide every race. So a series is not one cell re-armed again and
//! again (that would need EXPIRED → PENDING, and a `cancel()` that lost to an expiry could
//! no longer say the series is over). It is two kinds of cell:
//!
//! ```text
//!  handle (the Timeout returned) ──▶ control cell: PENDING at NEVER while the series lives,
//!                                    never filed in a wheel; task: ControlTask ─┐
//!                                                                               ▼
//!                                         Control { current: Mutex<Option<Timeout>> }
//!                                                                               │ the one run
//!  run k: a one-shot timeout on the same shard (task: Run, holding the closure) ◀┘ waiting
//!    fires ──▶ control still pending? run the closure ──▶ schedule run k+1 (the closure moves
//!              into its cell) ──▶ make it `current`, unless the series ended meanwhile
//! ```
//!
//! - The handle's state word says whether the series lives: PENDING while it does,
//!   CANCELLED once it ended (a `cancel()`, a run that panicked, the service gone). Its
//!   deadline is `NEVER`, and it is never filed, so the shard never fires it.
//! - `cancel()` on the handle is the ordinary CAS; the control task's `cancelled()`, run by
//!   the winner, takes the waiting run out of `current` and cancels it. A run that fires
//!   first checks the handle (still pending?) before it calls the closure.
//! - **cancel ∥ re-arm.** The run schedules its successor, then, under `current`'s lock,
//!   stores it if the handle is still pending, or cancels it if not. The canceller takes the
//!   lock only after its CAS. So either the run saw PENDING and stored the successor before
//!   the canceller took the lock (the canceller takes and cancels it), or the run saw the
//!   CAS (the run cancels it itself): the successor is cancelled exactly once, and never
//!   left behind. The lock is held for a load and a store, never around user code. Runs are
//!   numbered: a run can fire (and store its own successor) before the run that scheduled
//!   it has stored it, so `current` only ever moves to a higher number.
//! - **A run that panics** ends the series (its handle is cancelled), and the panic goes on
//!   to the shard, which catches it and counts it in [`Stats::panicked`](crate::Stats).
//! - **`stop()`** hands back the waiting run, once: its task is the series. Running it runs
//!   the closure once more (its successor is refused, which ends the series); dropping it
//!   ends the series. Until then the handle stays pending. A run under way on the shard as
//!   `stop()` closes it files its successor straight into the wheel (the shard's own thread,
//!   before its final drain: `driver::drives`), and the drain hands that one back. A handle
//!   that was [`reset`](crate::Timeout::reset) is filed, but the drain leaves it pending
//!   rather than handing it back: one per series either way. The exception is offload: a
//!   run under way on the pool when the shard closes has its successor refused, and
//!   `stop()` (which does not wait for the pool) hands back nothing for that series; it
//!   ends.
//! - A run dropped without running (cancelled, handed back and dropped, or dropped by a
//!   service that is gone) ends the series: its drop cancels the handle.
//!
//! Counting: the handle counts as one pending timeout while the series lives, and each run
//! as one more (so a live series is 2 in [`pending`](TimerService::pending)); each run that
//! fires is one `expired`.

use crate::entry::EntryRef;
use crate::error::ScheduleError;
use crate::missed::{Missed, saturating_add};
use crate::service::{TimerService, WeakTimerService};
use crate::shard::ShardHandle;
use crate::state::NEVER;
use crate::sync::{Arc, Mutex};
use crate::task::TimerTask;
use crate::task::sealed::Token;
use crate::timeout::Timeout;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::{Duration, Instant};

/// What a series' handle and its runs share: the run waiting now, and its number in the
/// series.
struct Control {
    current: Mutex<(u64, Option<Timeout>)>,
}

impl Control {
    /// The series ended: cancel the run waiting, if any.
    fn end(&self) {
        let waiting = self.current.lock().unwrap_or_else(|e| e.into_inner()).1.take();
        if let Some(run) = waiting {
            run.cancel();
        }
    }

    /// Makes `next`, run number `seq`, the run waiting, unless the series ended meanwhile
    /// (see "cancel ∥ re-arm" in the module docs). A run can fire, and store its own
    /// successor, before the run that scheduled it gets here: the numbers keep the newest.
    fn follow(&self, seq: u64, next: Timeout, handle: &Timeout) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if handle.is_pending() {
            if seq > current.0 {
                *current = (seq, Some(next));
            }
            return;
        }
        drop(current);
        next.cancel();
    }
}

/// The task of a series' handle: it never runs on its own (its cell is never filed); a
/// winning `cancel()` (or, for a handle the user reset, its expiry) ends the series.
struct ControlTask(Arc<Control>);

impl TimerTask for ControlTask {
    fn run(self: Box<Self>) {
        self.0.end();
    }

    fn cancelled(self: Box<Self>) {
        self.0.end();
    }

    fn run_unboxed(self, _: Token) {
        self.0.end();
    }

    fn cancelled_unboxed(self, _: Token) {
        self.0.end();
    }

    /// Ending a series is the crate's own short work: it stays on the shard with offload.
    fn runs_on_shard(_: Token) -> bool {
        true
    }

    /// A handle the user reset is filed; `stop()` leaves it pending and hands the series
    /// back as its waiting run alone (once).
    fn left_pending_by_stop(_: Token) -> bool {
        true
    }
}

/// One run of a series: a one-shot timeout that calls the closure and schedules the next.
struct Run<F: FnMut() + Send + 'static> {
    /// `None` once it moved on to the next run (or back to the caller).
    task: Option<F>,
    handle: Timeout,
    control: Arc<Control>,
    service: WeakTimerService,
    shard: usize,
    /// This run's number in the series, from 1.
    seq: u64,
    /// When this run was due (not when it fired).
    due: Instant,
    period: Duration,
    missed: Missed,
}

impl<F: FnMut() + Send + 'static> Run<F> {
    fn fire(&mut self) {
        let Some(mut task) = self.task.take() else { return };
        if !self.handle.is_pending() {
            return;
        }
        if let Err(panic) = catch_unwind(AssertUnwindSafe(&mut task)) {
            self.handle.cancel();
            // On to the shard's own catch, which counts it.
            resume_unwind(panic);
        }
        let next_due = self.missed.next_run(self.due, self.period, Instant::now());
        let Some(service) = self.service.upgrade() else {
            // Every strong handle of the service is gone: so is the series.
            self.handle.cancel();
            return;
        };
        let next = self.successor(task, next_due);
        match service.schedule_with(self.shard, |clock| clock.deadline_at(next_due), next) {
            Ok(timeout) => self.control.follow(self.seq + 1, timeout, &self.handle),
            // Refused (the service stopped, or the shard is full): dropping the run ends the
            // series.
            Err(refused) => drop(refused),
        }
    }

    /// The next run: `task`, due at `due`.
    fn successor(&self, task: F, due: Instant) -> Run<F> {
        Run {
            task: Some(task),
            handle: self.handle.clone(),
            control: self.control.clone(),
            service: self.service.clone(),
            shard: self.shard,
            seq: self.seq + 1,
            due,
            period: self.period,
            missed: self.missed,
        }
    }
}

impl<F: FnMut() + Send + 'static> TimerTask for Run<F> {
    fn run(mut self: Box<Self>) {
        self.fire();
    }

    fn run_unboxed(mut self, _: Token) {
        self.fire();
    }

    fn cancelled_unboxed(self, _: Token) {}
}

impl<F: FnMut() + Send + 'static> Drop for Run<F> {
    /// A run dropped with its closure never ran: the series ends here.
    fn drop(&mut self) {
        if self.task.is_some() {
            self.handle.cancel();
        }
    }
}

impl TimerService {
    /// Runs `task` after `first_delay`, then every `period`, until the returned handle is
    /// cancelled. Each run happens on a shard thread (or on the offload pool), never before
    /// it is due, and never while the previous run is still going.
    ///
    /// - `missed` says what happens after a late run (the shard was busy, or a run took
    ///   longer than the period): [`Missed::Burst`] and [`Missed::Skip`] keep a fixed rate
    ///   (catching up, or skipping to the grid), [`Missed::Delay`] a fixed delay between the
    ///   end of one run and the start of the next.
    /// - A `period` shorter than the service's [`tick`](TimerService::tick), zero included,
    ///   is clamped to one tick (never a busy loop).
    /// - The handle stays [`Pending`](crate::TimeoutState::Pending) while the series lives.
    ///   [`cancel`](Timeout::cancel) stops it: `true` iff this call ended it; a run already
    ///   under way finishes, and none follows. [`reset`](Timeout::reset) on the handle sets
    ///   when the series ends (it never does by default; [`deadline`](Timeout::deadline)
    ///   says when).
    /// - A run that panics ends the series (the handle is then cancelled); the panic is
    ///   caught and counted in [`Stats::panicked`](crate::Stats::panicked).
    /// - [`stop`](TimerService::stop) hands the series back once, as the waiting run (also
    ///   when a run is under way on the shard, and when the handle was reset): its task runs
    ///   the closure once, and dropping it ends the series. With
    ///   `Builder::offload` (the `offload` feature), a run under way on the pool during `stop()`
    ///   ends its series instead, and nothing is handed back for it.
    /// - While the series lives, [`pending`](TimerService::pending) counts it twice: the
    ///   handle and the waiting run. See `src/periodic.rs` for the design.
    ///
    /// Errors, each handing `task` back: [`ScheduleError::Shutdown`] after `stop()`,
    /// [`ScheduleError::Rejected`] if the shard cannot take the handle and the first run.
    ///
    /// ```
    /// use shardwheel::{Missed, TimerService};
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let runs = Arc::new(AtomicUsize::new(0));
    /// let counted = runs.clone();
    /// let heartbeat = timers.schedule_repeating(Duration::ZERO, Duration::from_millis(5), Missed::Skip, move || {
    ///     counted.fetch_add(1, Ordering::SeqCst);
    /// })?;
    /// while runs.load(Ordering::SeqCst) < 3 {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert!(heartbeat.cancel(), "the series ends here");
    /// assert!(heartbeat.is_cancelled());
    /// # std::thread::sleep(Duration::from_millis(5));
    /// # assert_eq!(timers.pending(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn schedule_repeating<F: FnMut() + Send + 'static>(
        &self,
        first_delay: Duration,
        period: Duration,
        missed: Missed,
        task: F,
    ) -> Result<Timeout, ScheduleError<F>> {
        let index = self.route();
        let shard = self.shard_at(index);
        if shard.mailbox.is_closed() {
            return Err(crate::service::closed_error(shard, task));
        }
        // The handle's place under `max_pending_per_shard`; given back by its cancel.
        if !shard.try_reserve() {
            shard.counters.rejected();
            return Err(ScheduleError::Rejected(task));
        }
        let control = Arc::new(Control { current: Mutex::new((0, None)) });
        // The handle's cell: never handed to the shard, so its second reference goes now.
        let (entry, _never_filed) = EntryRef::new_pair(NEVER, ControlTask(control.clone()));
        let handle = Timeout { entry, shard: ShardHandle::new(shard.clone()) };
        let due = saturating_add(Instant::now(), first_delay);
        let first = Run {
            task: Some(task),
            handle: handle.clone(),
            control: control.clone(),
            service: self.downgrade(),
            shard: index,
            seq: 1,
            due,
            period: period.max(self.tick()),
            missed,
        };
        match self.schedule_with(index, |clock| clock.deadline_at(due), first) {
            Ok(run) => {
                // Counted only now: a handle that never was is not counted at all.
                shard.counters.armed();
                control.follow(1, run, &handle);
                Ok(handle)
            }
            Err(refused) => {
                shard.release();
                // The handle's cell is dropped with its task still in place: nothing ran,
                // nothing is counted.
                Err(refused.map(|mut run| run.task.take().expect("a refused run still holds its task")))
            }
        }
    }
}

impl<T> ScheduleError<T> {
    /// The same error, with the task mapped (to hand back what the caller gave).
    fn map<U>(self, f: impl FnOnce(T) -> U) -> ScheduleError<U> {
        match self {
            ScheduleError::Rejected(t) => ScheduleError::Rejected(f(t)),
            ScheduleError::Shutdown(t) => ScheduleError::Shutdown(f(t)),
            ScheduleError::NoSuchShard(t) => ScheduleError::NoSuchShard(f(t)),
            ScheduleError::ShardFailed(t) => ScheduleError::ShardFailed(f(t)),
        }
    }
}
