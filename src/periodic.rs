//! Repeating timers: [`TimerService::schedule_repeating`].
//!
//! A timeout's state word ends once (CANCELLED and EXPIRED are final, `state.rs`), and that
//! is what makes one CAS decide every race. So a series is not one cell re-armed again and
//! again (that would need EXPIRED → PENDING, and a `cancel()` that lost to an expiry could
//! no longer say the series is over). It is two kinds of cell and one word:
//!
//! ```text
//!  handle (the Timeout returned) ──▶ control cell: PENDING at NEVER while the series lives,
//!                                    never filed; task: ControlTask ─┐
//!                                                                    ▼
//!                         Control { state: RUNNING | WAITING | ENDED, waiting: the run armed }
//!                                                                    │
//!  run k: a one-shot timeout on the same shard (task: Run, holding ◀─┘ the one run waiting
//!  the closure) fires ──▶ start (WAITING → RUNNING)? run the closure ──▶ arm run k+1
//!  (the closure moves into its cell) ──▶ publish it (RUNNING → WAITING), unless ENDED
//! ```
//!
//! Who touches what:
//! - The handle's state word says whether `cancel()` won: PENDING while the series lives,
//!   CANCELLED once it ended (a `cancel()`, a run that panicked, the service gone). Its
//!   deadline is `NEVER` and it is never filed, so the shard never fires it (unless the user
//!   [`reset`](crate::Timeout::reset) it: then its expiry ends the series).
//! - `Control::state`, one atomic word, says where the series stands, and decides every race
//!   between the canceller and the runs. `Control::waiting`, a plain cell, holds the waiting
//!   run's handle; whoever the word names owns it: the run under way while it is `RUNNING`
//!   (also `schedule_repeating`, which is "run 0"), whoever moves it out of `WAITING` next.
//!
//! ```text
//!   RUNNING ──publish (the run under way, after arming the next)──▶ WAITING
//!      ▲                                                               │
//!      └──────────start (the waiting run, once it fired)───────────────┘
//!   any ──end (whoever ended the handle: cancel's winner, a panic, ...)──▶ ENDED (final)
//! ```
//!
//! - **cancel.** Lock-free: the handle's CAS decides what `cancel()` returns, and its winner
//!   runs `ControlTask::cancelled`, which swaps the word to ENDED (`Control::end`), before
//!   `cancel()` returns. Nothing on either side waits. If the swap found WAITING, the
//!   canceller owns the waiting run and cancels it (or, if it already fired, its start will
//!   fail). If it found RUNNING, the run under way owns the cell and will cancel its own
//!   successor.
//! - **cancel ∥ run (start).** A run that fired calls the closure only if its CAS
//!   WAITING → RUNNING wins. After `end` no start wins: a run waiting in the wheel, one in the
//!   shard's batch, one queued on the pool: none calls the closure. A start that came before
//!   `end` (at most one: runs never overlap) is under way; it may call the closure after
//!   `cancel()` returned (that is what `true` cannot rule out without waiting for user code).
//! - **cancel ∥ re-arm (publish).** The run writes its successor into the cell, then CASes
//!   RUNNING → WAITING. If `end` came first the CAS fails and the run cancels the successor
//!   itself; if the CAS came first, `end` finds WAITING and cancels it. Exactly once, never
//!   left behind.
//! - **A successor never fires before it is published**, so there is never more than one run
//!   between start and publish, and no run can find the word RUNNING at its start. On the
//!   shard's own thread this holds by itself (the shard fires nothing while the run under
//!   way holds its thread); from any other thread (the pool with offload, the thread that
//!   calls `schedule_repeating`) the run is armed at `NEVER` and moved to its due time by a
//!   reset after it is published (`arm`): one more notice to the shard.
//! - **A run that panics** ends the series (its handle is cancelled), and the panic goes on
//!   to the shard, which catches it and counts it in [`Stats::panicked`](crate::Stats).
//! - **`stop()`** hands back the waiting run, once: its task is the series (the word stays
//!   WAITING). Running it runs the closure once more (its successor is refused, which ends
//!   the series); dropping it ends the series. Until then the handle stays pending. A run
//!   under way on the shard as `stop()` closes it files its successor straight into the
//!   wheel (the shard's own thread, before its final drain: `driver::drives`), and the drain
//!   hands that one back. A handle that was [`reset`](crate::Timeout::reset) is filed, but
//!   the drain leaves it pending rather than handing it back: one per series either way. The
//!   exception is offload: a run under way on the pool when the shard closes has its
//!   successor refused, and `stop()` (which does not wait for the pool) hands back nothing
//!   for that series; it ends.
//! - A run dropped without running (cancelled, handed back and dropped, or dropped by a
//!   service that is gone) ends the series: its drop cancels the handle.
//!
//! No lock: the shard side takes none, and `cancel()` never waits for the shard or a run.
//!
//! Counting: the handle counts as one pending timeout while the series lives, and each run
//! as one more (so a live series is 2 in [`pending`](TimerService::pending)); each run that
//! fires is one `expired`.

use crate::entry::EntryRef;
use crate::error::ScheduleError;
use crate::missed::{Missed, saturating_add};
use crate::service::{TimerService, WeakTimerService};
use crate::shard::ShardHandle;
use crate::shard::driver;
use crate::state::NEVER;
use crate::sync::{Arc, AtomicU32, Ordering, UnsafeCell};
use crate::task::TimerTask;
use crate::task::sealed::Token;
use crate::timeout::Timeout;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::{Duration, Instant};

/// `Control::state`: a run (or `schedule_repeating`) is under way and owns `waiting`.
const RUNNING: u32 = 0;
/// `Control::state`: `waiting` holds the run armed next; no run is under way.
const WAITING: u32 = 1;
/// `Control::state`: the series is over (final).
const ENDED: u32 = 2;

/// What a series' handle and its runs share: where the series stands, and the run waiting.
struct Control {
    state: AtomicU32,
    /// Owned by whoever `state` names (module docs): never touched by two threads at once.
    waiting: UnsafeCell<Option<Timeout>>,
}

// SAFETY: `waiting` is the only field that is not `Sync`; it is only ever reached by the one
// thread that `state` hands it to (the run under way while RUNNING, the thread whose CAS or
// swap moved the word out of WAITING), with that hand-over ordered by the word's
// Release/Acquire pairs (see `publish`, `start`, `end`). `Timeout` itself is `Send`.
unsafe impl Sync for Control {}

impl Control {
    /// A series being made: RUNNING, its maker ("run 0") owns the cell until it publishes
    /// the first run.
    fn new() -> Control {
        Control { state: AtomicU32::new(RUNNING), waiting: UnsafeCell::new(None) }
    }

    /// Moves `cell`'s content out, for its owner.
    fn take(&self) -> Option<Timeout> {
        // SAFETY: every caller owns the cell by the word's rules (module docs): no other
        // thread reads or writes it until the caller's next transition of `state`.
        self.waiting.with_mut(|cell| unsafe { (*cell).take() })
    }

    /// For the run under way (RUNNING): makes `next`, which it just armed and which cannot
    /// fire before this call, the waiting run. If the series ended meanwhile, cancels
    /// `next` instead. Returns whether `next` is now the waiting run.
    fn publish(&self, next: Timeout) -> bool {
        // SAFETY: RUNNING, and the caller is the run under way: it owns the cell (`end`
        // does not touch it while RUNNING, and no other run can start).
        self.waiting.with_mut(|cell| unsafe { *cell = Some(next) });
        // Release on success: pairs with the Acquire of `start`'s CAS and of `end`'s swap,
        // whichever takes the cell next, so that they read the handle written above.
        // Relaxed on failure: the only value it can meet is ENDED, and then the cell is
        // still ours, last written by this thread.
        match self.state.compare_exchange(RUNNING, WAITING, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => true,
            Err(actual) => {
                debug_assert_eq!(actual, ENDED, "only `end` moves the word while a run is under way");
                // `end` found RUNNING and left the cell (and so the successor) to us.
                if let Some(next) = self.take() {
                    next.cancel();
                }
                false
            }
        }
    }

    /// For a run that fired: WAITING → RUNNING. `true` iff the run may call the closure;
    /// `false` once the series ended (the run then drops the closure unrun).
    fn start(&self) -> bool {
        // Acquire (success): pairs with `publish`'s Release, to read the cell it wrote.
        // Acquire (failure): nothing is read after it, but a run that finds the series over
        // also sees what the thread that ended it did before (as `Timeout::state` does).
        match self.state.compare_exchange(WAITING, RUNNING, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                // The run's own handle: it fired, there is nothing left to cancel.
                drop(self.take());
                true
            }
            Err(actual) => {
                debug_assert_eq!(actual, ENDED, "a run fires only after it was published");
                false
            }
        }
    }

    /// The series ended (the handle left PENDING): no run starts from now on; the run
    /// waiting, if any, is cancelled here. Never waits.
    fn end(&self) {
        // Acquire: pairs with `publish`'s Release, to read the cell if the word was WAITING.
        // No Release needed: no thread reads the cell after seeing ENDED except the run
        // under way, which owns it and wrote it last itself.
        if self.state.swap(ENDED, Ordering::Acquire) == WAITING {
            #[cfg(loom)]
            loom_ends::record(false);
            if let Some(waiting) = self.take() {
                // `false` if it already fired (its start will fail) or `stop()` took it.
                waiting.cancel();
            }
        } else {
            #[cfg(loom)]
            loom_ends::record(true);
        }
    }
}

impl fmt::Debug for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Relaxed: a snapshot for a human; it decides nothing.
        let state = match self.state.load(Ordering::Relaxed) {
            RUNNING => "running",
            WAITING => "waiting",
            _ => "ended",
        };
        f.debug_struct("Control").field("state", &format_args!("{state}")).finish_non_exhaustive()
    }
}

/// Under loom: how many series ended while a run (or the series' maker) was under way, so a
/// model can tell a run that started before the cancel (allowed to call the closure after
/// `cancel()` returned) from one that did not. A plain thread-local: loom runs a model's
/// threads on one OS thread.
#[cfg(loom)]
pub(crate) mod loom_ends {
    use std::cell::Cell;

    std::thread_local! {
        static UNDER_WAY: Cell<usize> = const { Cell::new(0) };
    }

    pub(crate) fn record(under_way: bool) {
        UNDER_WAY.with(|n| n.set(n.get() + usize::from(under_way)));
    }

    pub(crate) fn under_way() -> usize {
        UNDER_WAY.with(Cell::get)
    }

    pub(crate) fn reset() {
        UNDER_WAY.with(|n| n.set(0));
    }
}

/// The task of a series' handle: it never runs on its own (its cell is never filed); a
/// winning `cancel()` (or, for a handle the user reset, its expiry) ends the series.
#[derive(Debug)]
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

/// One run of a series: a one-shot timeout that calls the closure and arms the next.
struct Run<F: FnMut() + Send + 'static> {
    /// `None` once it moved on to the next run (or back to the caller).
    task: Option<F>,
    handle: Timeout,
    control: Arc<Control>,
    service: WeakTimerService,
    shard: usize,
    /// When this run was due (not when it fired).
    due: Instant,
    period: Duration,
    missed: Missed,
}

impl<F: FnMut() + Send + 'static> fmt::Debug for Run<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("control", &self.control)
            .field("shard", &self.shard)
            .field("due", &self.due)
            .field("period", &self.period)
            .field("missed", &self.missed)
            .finish_non_exhaustive()
    }
}

impl<F: FnMut() + Send + 'static> Run<F> {
    fn fire(&mut self) {
        let Some(mut task) = self.task.take() else { return };
        if !self.control.start() {
            // The series ended before this run started: the closure is dropped unrun.
            return;
        }
        if let Err(panic) = catch_unwind(AssertUnwindSafe(&mut task)) {
            self.handle.cancel();
            // On to the shard's own catch, which counts it.
            resume_unwind(panic);
        }
        let Some(service) = self.service.upgrade() else {
            // Every strong handle of the service is gone: so is the series.
            self.handle.cancel();
            return;
        };
        // The service's clock: the real one, or a paused one (`TestClock`).
        let next_due = self.missed.next_run(self.due, self.period, service.clock().now());
        let next = self.successor(task, next_due);
        // Refused (the service stopped, or the shard is full): dropping the run ends the
        // series.
        let _ = arm(&service, self.shard, next_due, next, &self.control);
    }

    /// The next run: `task`, due at `due`.
    fn successor(&self, task: F, due: Instant) -> Run<F> {
        Run {
            task: Some(task),
            handle: self.handle.clone(),
            control: self.control.clone(),
            service: self.service.clone(),
            shard: self.shard,
            due,
            period: self.period,
            missed: self.missed,
        }
    }
}

/// Arms `run` on shard `shard`, due at `due`, and publishes it as the series' waiting run
/// (`Control::publish`), so that it cannot fire before it is published: on the shard's own
/// thread it is filed at `due` (the shard fires nothing while this thread runs a task);
/// from any other thread it is filed at `NEVER`, and moved to `due` once published.
fn arm<F: FnMut() + Send + 'static>(
    service: &TimerService,
    shard: usize,
    due: Instant,
    run: Run<F>,
    control: &Control,
) -> Result<(), ScheduleError<Run<F>>> {
    let on_shard = driver::drives(service.shard_at(shard));
    let timeout = service.schedule_with(shard, |clock| if on_shard { clock.deadline_at(due) } else { NEVER }, run)?;
    if control.publish(timeout.clone()) && !on_shard {
        // `false` if the series ended since, or `stop()` took it back: either is final.
        timeout.reset_at(due);
    }
    Ok(())
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
    ///   [`cancel`](Timeout::cancel) stops it, lock-free: `true` iff this call ended it. Then
    ///   no run that had not started calls the closure again: a run waiting, or already due
    ///   (in the shard's batch, on the pool's queue), drops it unrun. A run that had started
    ///   (at most one) may still be calling the closure, or about to, when `cancel` returns;
    ///   it finishes, and none follows. `cancel` never waits for it, so the closure may
    ///   cancel its own series. [`reset`](Timeout::reset) on the handle sets
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
    ///   handle and the waiting run. The design (two kinds of cell and one atomic word that
    ///   decides cancel ∥ a run starting ∥ a run re-arming) is in the repository's design
    ///   notes, `docs/protocols.md`.
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
        if shard.mailbox.is_refusing() {
            return Err(shard.closed_error(task));
        }
        // The handle's place under `max_pending_per_shard`; given back by its cancel.
        if !shard.try_reserve() {
            shard.counters.rejected();
            return Err(ScheduleError::Rejected(task));
        }
        let control = Arc::new(Control::new());
        // The handle's cell: never handed to the shard, so its second reference goes now.
        let (entry, _never_filed) = EntryRef::new_pair(NEVER, ControlTask(control.clone()));
        let handle = Timeout { entry, shard: ShardHandle::unowned(shard.clone()) };
        // Now never behind `Instant::now()` (the TSC estimate, where there is one).
        let due = saturating_add(self.clock().now_for_deadline(), first_delay);
        let first = Run {
            task: Some(task),
            handle: handle.clone(),
            control: control.clone(),
            service: self.downgrade(),
            shard: index,
            due,
            period: period.max(self.tick()),
            missed,
        };
        match arm(self, index, due, first, &control) {
            Ok(()) => {
                // Counted only now: a handle that never was is not counted at all.
                shard.counters.armed();
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A run prints its series' state (running, waiting, ended: the control word as its
    /// transitions leave it), its shard, when it was due, its period and what a late run
    /// does; the closure is left out.
    #[test]
    fn a_run_prints_its_schedule_and_its_series_state() {
        let timers = TimerService::builder().shards(1).build().unwrap();
        let handle = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
        let successor = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
        let control = Arc::new(Control::new());
        let due = Instant::now();
        let run = Run {
            task: Some(|| ()),
            handle: handle.clone(),
            control: control.clone(),
            service: timers.downgrade(),
            shard: 0,
            due,
            period: Duration::from_secs(1),
            missed: Missed::Skip,
        };
        let shown = |state: &str| {
            format!(
                "Run {{ control: Control {{ state: {state}, .. }}, shard: 0, due: {due:?}, period: 1s, missed: Skip, .. }}"
            )
        };
        assert_eq!(format!("{run:?}"), shown("running"));
        assert!(control.publish(successor.clone()), "the series lives");
        assert_eq!(format!("{run:?}"), shown("waiting"));
        control.end();
        assert_eq!(format!("{run:?}"), shown("ended"));
        assert!(successor.is_cancelled(), "the end cancelled the waiting run");
        drop(run);
        assert!(handle.is_cancelled(), "a run dropped unrun ends its series' handle");
    }
}
