//! The shard's driver: the one thread that touches the shard's wheel.
//!
//! Each turn it drains (a bounded number of) mailbox commands into the wheel, polls the
//! wheel for what is due (a bounded number of steps), commits each due timeout with the
//! EXPIRED CAS, and then, holding nothing, runs the batch of tasks (or, with
//! `Builder::offload`, hands each user task to the pool and goes on; the crate's own tasks,
//! a `Sleep`'s wake-up and a series' control, still run here). With nothing left to do
//! it sleeps until the wheel's next deadline, or until a producer wakes it (`mailbox.rs`).
//! A shard with nothing to do sleeps without a timeout: an idle service makes no wake-ups at
//! all. A wake-up promised to producers is kept even if its timeouts are cancelled
//! (`keep_promise`), so that arms later than it never cost a syscall.
//!
//! Every task it runs or drops goes through `task::catch_panics`: no task's panic, nor its
//! payload's, reaches the driver ("`ShardFailed` is never a task's panic").
//!
//! The wheel sits in a thread-local, borrowed only for the short spells of a turn that do
//! not run user code, so a task that schedules on its own shard files its timeout straight
//! into the wheel (`schedule_local`) instead of going through the mailbox.

use crate::entry::{EntryRef, OwnedTask};
use crate::mailbox::{ASLEEP_UNTIL_WOKEN, Command};
use crate::routing;
use crate::shard::gate::Gate;
use crate::shard::stages::StageWheel;
use crate::shard::{OwnerHandle, Shard, ShardRef};
use crate::stage::{self, Stage};
use crate::state::State;
use crate::sync::plain::Arc as PlainArc;
use crate::sync::{Arc, Ordering, const_thread_local};
use crate::task::catch_panics;
use crate::wheel::Wheel;
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Commands handled per turn, and announcements read per turn (each counted as one plus
/// the entries its stage hands over), so a flood of mail cannot delay expiries without bound.
const MAILBOX_BUDGET: usize = 4096;
/// Wheel steps (firings and cascade moves) per turn, so a mass expiry cannot starve the
/// mailbox: between slices the driver reads its mail.
const EXPIRY_BUDGET: usize = 1024;
/// Stage-wheel steps per turn: each due stage hands over at most `stage::CAPACITY` entries.
const STAGE_BUDGET: usize = 64;

/// The driver's own state.
struct Local {
    shard: Arc<Shard>,
    /// What the timeouts this thread schedules on its own shard hold.
    handle: OwnerHandle,
    wheel: Wheel<EntryRef>,
    /// Scratch for the wheel's output, kept to avoid allocating per turn.
    due: Vec<EntryRef>,
    /// Every stage announced to this shard and not yet forgotten (`stages.rs`).
    stages: StageWheel,
    /// Scratch for the stages due in a turn.
    due_stages: Vec<Arc<Stage>>,
    /// Scratch for a stage's entries as it is taken.
    taken: Vec<EntryRef>,
    /// Arms read from the mail while a stage was still due, to file once none is (`turn`).
    deferred: Vec<EntryRef>,
    /// Where `wheel` stands against its marks (`gate.rs`).
    gate: Gate,
}

const_thread_local! {
    static LOCAL: RefCell<Option<Local>> = RefCell::new(None);
}

/// A timeout the shard took back as it stopped: now cancelled, its task the caller's.
#[derive(Debug)]
pub(crate) struct TakenBack {
    pub(crate) entry: EntryRef,
    pub(crate) task: OwnedTask,
}

/// Runs shard `shard` on the calling thread until its mailbox is closed; returns the
/// timeouts that were still pending then, each now cancelled. Expired tasks run on this
/// thread, or on `offload` if it is set (`Builder::offload`).
pub(crate) fn run(shard: Arc<Shard>, offload: Option<PlainArc<Pool>>) -> Vec<TakenBack> {
    let _driving = routing::enter_driver(shard.service, shard.index);
    LOCAL.with(|l| *l.borrow_mut() = Some(Local::new(shard.clone(), shard.new_wheel())));
    // Tasks' panics are caught where they run; one that reaches here is the driver's own (a
    // bug). A shard that died with its mailbox open would take arms that never fire: close
    // it, so that later schedules fail (`ScheduleError::ShardFailed`), and hand back what
    // can still be taken.
    if catch_unwind(AssertUnwindSafe(|| drive(&shard, offload.as_ref()))).is_err() {
        shard.fail();
    }
    let mut local = LOCAL.with(|l| l.borrow_mut().take()).expect("the driver's state is set above");
    // After a failure the wheel may be mid-change: a second panic hands back nothing more
    // rather than unwind out of the thread (the panic message is printed either way).
    let mut taken_back = catch_unwind(AssertUnwindSafe(|| local.shut_down())).unwrap_or_default();
    if shard.has_failed() {
        // The service goes on: wake the sleeps this shard held (dropping a `Sleep`'s wake-up
        // wakes it) rather than keep them for a `stop()` that may be far off. Each finds its
        // cell taken back by a failed shard and registers again on one that runs.
        // Dropped inside a catch: a wake-up calls the executor's waker.
        let (wake_ups, rest) = taken_back.into_iter().partition(|TakenBack { task, .. }| task.is_wake_up());
        taken_back = rest;
        for TakenBack { entry, task } in wake_ups {
            drop_task(&shard, task);
            drop(entry);
        }
    }
    // SeqCst, as the mailbox's `closed` it was stored before: this thread saw `closed`, so
    // it sees the flag if the service's last drop set it.
    if shard.abandoned.load(Ordering::SeqCst) {
        // Nobody joins this thread: drop the tasks here, where the docs say they are
        // dropped, rather than in whichever thread drops the thread's result, and catch
        // their panics (a detached thread's result that panics on drop aborts the process).
        for TakenBack { entry, task } in taken_back {
            drop_task(&shard, task);
            drop(entry);
        }
        return Vec::new();
    }
    taken_back
}

/// The driver's loop: turns until the mailbox is closed.
fn drive(shard: &Arc<Shard>, offload: Option<&PlainArc<Pool>>) {
    let mut batch: Vec<OwnedTask> = Vec::with_capacity(EXPIRY_BUDGET);
    // The wake-up tick last announced to producers (see `keep_promise`).
    let mut promised = None;
    let paused = shard.clock.is_paused();
    while !shard.mailbox.is_closed() {
        // On a paused clock: the request to catch up that this turn answers if it goes idle
        // (read before the turn reads the clock and the mail).
        let request = if paused { shard.settle_requested() } else { 0 };
        let mut turn = with_local(|local| local.turn(&mut batch));
        if !batch.is_empty() {
            match offload {
                None => run_tasks(shard, &mut batch),
                Some(pool) => offload_tasks(shard, &mut batch, pool),
            }
            // The tasks may have filed timeouts straight into the wheel: decide again.
            if let Turn::Idle(_) = turn {
                turn = with_local(|local| local.idle());
            }
        }
        if let Turn::Idle(next) = turn {
            if paused {
                // Everything due by the turn's now has fired and run: `TestClock::advance`
                // may return.
                shard.settle(request);
            }
            promised = keep_promise(next, promised, shard.clock.now_tick());
            sleep(shard, promised);
        }
    }
}

/// Files a timeout armed on this shard's own thread straight into the wheel. Hands the
/// entry back if this thread is not free to do so (not this shard's driver, or inside a
/// turn, as from a task's destructor): the caller then sends it through the mailbox. On
/// success, the driver's handle for the timeout to hold.
///
/// `try_with`, never `with`: a user's thread-local destroyed after this one may schedule
/// from its destructor, and `with` would panic there, which aborts the process. A thread
/// whose `LOCAL` is gone is no driver (a driver's is set until `run` returns).
pub(crate) fn schedule_local(shard: &Shard, entry: EntryRef) -> Result<ShardRef, EntryRef> {
    let mut entry = Some(entry);
    let filed = LOCAL.try_with(|l| match l.try_borrow_mut() {
        Ok(mut guard) => match guard.as_mut() {
            Some(local) if std::ptr::eq(Arc::as_ptr(&local.shard), shard) => {
                local.arm(entry.take().expect("taken once"));
                Some(local.handle.make_ref())
            }
            _ => None,
        },
        Err(_) => None,
    });
    match filed {
        Ok(Some(handle)) => Ok(handle),
        _ => Err(entry.expect("not filed, so not taken")),
    }
}

/// Whether the calling thread is `shard`'s driver and free to file into its wheel (in a
/// task's run, not inside a turn, not after the final drain began).
/// `try_with`, as in `schedule_local`: from a thread-local's destructor, `false`.
pub(crate) fn drives(shard: &Shard) -> bool {
    LOCAL
        .try_with(|l| match l.try_borrow() {
            Ok(guard) => guard.as_ref().is_some_and(|local| std::ptr::eq(Arc::as_ptr(&local.shard), shard)),
            Err(_) => false,
        })
        .unwrap_or(false)
}

fn with_local<R>(f: impl FnOnce(&mut Local) -> R) -> R {
    LOCAL.with(|l| f(l.borrow_mut().as_mut().expect("called on a driver thread")))
}

/// What a turn found.
enum Turn {
    /// More is due or more mail waits: go round again at once.
    Busy,
    /// Nothing to do until this tick (`None`: until woken).
    Idle(Option<u64>),
}

impl Local {
    fn new(shard: Arc<Shard>, wheel: Wheel<EntryRef>) -> Local {
        Local {
            handle: OwnerHandle::new(shard.clone(), None),
            shard,
            gate: Gate::new(wheel.limit()),
            wheel,
            due: Vec::with_capacity(EXPIRY_BUDGET),
            stages: StageWheel::new(),
            due_stages: Vec::with_capacity(STAGE_BUDGET),
            taken: Vec::with_capacity(stage::CAPACITY),
            deferred: Vec::new(),
        }
    }

    /// One turn: the due stages first (they hold the oldest arms of their threads), then
    /// the mail, then the wheel, each within its budget.
    ///
    /// Every source gets its share of every turn, so none can starve another: many threads
    /// whose stages are always due must not hold up cancel and earlier-reset notices (the
    /// mail), and a flood of mail must not hold up the stages. One order is kept: an arm
    /// sent through the mail (the rare arm that cannot go on a stage) waits while a stage is
    /// still due, since that stage may hold older arms of the same thread, which must be
    /// filed first (`deferred`). Notices need no such wait: an unlink or refile of an entry
    /// not yet filed is settled by the entry's state word when it is (`refile`, `arm`).
    fn turn(&mut self, batch: &mut Vec<OwnedTask>) -> Turn {
        // One clock read for the turn: its tick, and its time for the lateness histogram.
        let at = self.shard.clock.now();
        let now = self.shard.clock.tick_at(at);
        let now_nanos = self.shard.clock.nanos_at(at);
        let more_stages = self.take_due_stages(now);
        let more_announced = self.drain_announcements(MAILBOX_BUDGET, now);
        let arms_may_file = !more_stages && !more_announced;
        let more_mail = self.drain_mailbox(MAILBOX_BUDGET, arms_may_file);
        let more_due = self.expire(now, now_nanos, batch);
        self.gate.turned(self.wheel.len(), &self.shard.mailbox);
        if more_stages || more_announced || more_mail || more_due || !self.deferred.is_empty() {
            return Turn::Busy;
        }
        self.idle()
    }

    /// With no mail and nothing due as of the last poll: when either wheel next has work.
    fn idle(&self) -> Turn {
        let next = match (self.wheel.next_deadline(), self.stages.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match next {
            Some(t) if t <= self.shard.clock.now_tick() => Turn::Busy,
            next => Turn::Idle(next),
        }
    }

    /// Takes the stages due by `now`, up to the budget; `true` if more are due.
    fn take_due_stages(&mut self, now: u64) -> bool {
        let mut due = std::mem::take(&mut self.due_stages);
        let more = self.stages.poll(now, STAGE_BUDGET, &mut due);
        for stage in due.drain(..) {
            self.take_stage(&stage);
        }
        self.due_stages = due;
        more
    }

    /// A stage announced itself: take it now if it is due, else file it at its due.
    /// Returns the number of entries taken.
    fn announced(&mut self, stage: Arc<Stage>, now: u64) -> usize {
        if stage.due() <= now {
            return self.take_stage(&stage);
        }
        // An earlier announcement of a retired stage may have found it due already and
        // taken it all: then there is nothing left to file.
        self.file_or_forget(&stage);
        0
    }

    /// Files `stage` at what it promises now, or forgets it if it is retired (its owner
    /// will publish nothing more) and empty.
    fn file_or_forget(&mut self, stage: &Arc<Stage>) {
        if stage.is_retired() && stage.is_empty() {
            self.stages.forget(stage);
        } else {
            self.stages.file(stage);
        }
    }

    /// Files every entry of `stage` in the wheel, in the order they were armed; then files
    /// the stage again at what it promises now, or forgets it if it is retired and empty.
    /// Returns the number of entries taken.
    fn take_stage(&mut self, stage: &Arc<Stage>) -> usize {
        let mut taken = std::mem::take(&mut self.taken);
        stage.take(&mut taken);
        let n = taken.len();
        for entry in taken.drain(..) {
            self.arm(entry);
        }
        self.taken = taken;
        self.file_or_forget(stage);
        n
    }

    /// Reads announced stages up to `budget` (an announcement, and each entry a due stage
    /// hands over, count one); `true` if more may wait.
    fn drain_announcements(&mut self, budget: usize, now: u64) -> bool {
        let mut spent = 0;
        while spent < budget {
            let Some(stage) = self.shard.mailbox.pop_stage() else {
                return false;
            };
            spent += 1 + self.announced(stage, now);
        }
        true
    }

    /// Applies up to `budget` commands; `true` if mail may remain. Arms are filed only if
    /// `arms_may_file` (no stage is still due); until then they wait in `deferred`, in the
    /// order they came, and are filed first when they may.
    fn drain_mailbox(&mut self, budget: usize, arms_may_file: bool) -> bool {
        if arms_may_file && !self.deferred.is_empty() {
            let mut deferred = std::mem::take(&mut self.deferred);
            for entry in deferred.drain(..) {
                self.arm(entry);
            }
            // Keep the buffer's capacity.
            self.deferred = deferred;
        }
        for _ in 0..budget {
            match self.shard.mailbox.pop() {
                Some(Command::Arm(entry)) if !arms_may_file || !self.deferred.is_empty() => {
                    self.deferred.push(entry);
                }
                // An announcement that came in after this turn read them may be of a stage
                // holding older arms of this arm's thread (a thread that retired its stage as
                // it exited, then armed from a later thread-local's destructor): read it
                // first, next turn.
                Some(Command::Arm(entry)) if self.shard.mailbox.has_announcements() => {
                    self.deferred.push(entry);
                    return true;
                }
                Some(Command::Arm(entry)) => self.arm(entry),
                Some(Command::Unlink(entry)) => self.unlink(entry),
                Some(Command::Refile(entry)) => self.refile(entry),
                #[cfg(test)]
                Some(Command::Panic) => panic!("a panic injected into the shard's driver (a test)"),
                None => return false,
            }
        }
        true
    }

    /// Files a new entry at the deadline its state word holds now, and marks it LINKED; one
    /// cancelled before that is dropped (its canceller sent no unlink notice).
    fn arm(&mut self, entry: EntryRef) {
        if entry.state().try_link() {
            self.file(entry);
        } else {
            drop(entry);
        }
    }

    /// Files a linked entry at the deadline its state word holds now; a cancelled one is
    /// dropped (its unlink notice will find no key).
    fn file(&mut self, entry: EntryRef) {
        match entry.state().load() {
            State::Pending { .. } => self.insert(entry),
            _ => drop(entry),
        }
    }

    /// Puts a linked entry in the wheel, at its deadline, and records where; marks the shard
    /// FULL at the high-water mark (`gate.rs`); refuses the entry if the wheel is at its limit.
    fn insert(&mut self, entry: EntryRef) {
        match self.wheel.try_insert(entry) {
            Ok(key) => {
                self.wheel.get(key).expect("just inserted").set_key(Some(key));
                self.gate.filed(self.wheel.len(), &self.shard.mailbox);
            }
            Err(entry) => self.refuse(entry),
        }
    }

    /// The backstop (`gate.rs`): an entry that came in with the wheel at its very limit
    /// (2³² − 1 less its lists: the slab's keys are `u32`, ~128 GB of timeouts), past the
    /// FULL mark and its headroom, so more than a sixteenth of the limit was in flight. Its
    /// schedule has returned `Ok`, so its task cannot be handed back: the timeout is
    /// cancelled here (it reads `Cancelled`, counted as cancelled and as rejected) and its
    /// task dropped, inside a catch, as a cancel would (a `Sleep`'s wake-up wakes it, and it
    /// registers again). The shard goes on: the limit never fails it.
    #[cold]
    #[inline(never)]
    fn refuse(&mut self, entry: EntryRef) {
        if let Some((task, _)) = entry.cancel() {
            self.shard.release();
            self.shard.counters.cancelled();
            self.shard.counters.rejected();
            drop_task(&self.shard, task);
        }
    }

    /// Takes a cancelled entry out of the wheel, if it is in.
    fn unlink(&mut self, entry: EntryRef) {
        if let Some(key) = entry.key() {
            debug_assert!(self.wheel.get(key).is_some_and(|e| e.ptr_eq(&entry)));
            entry.set_key(None);
            drop(self.wheel.remove(key));
        }
        drop(entry);
    }

    /// Files an entry again at its (earlier) deadline, if it is in the wheel. One that was
    /// never filed may wait on a stage due too late for its new deadline: it is filed now
    /// (the stage's copy is then dropped, as already linked). Otherwise it is either still in
    /// the mailbox (its Arm reads the new deadline) or already gone.
    fn refile(&mut self, entry: EntryRef) {
        if let Some(key) = entry.key() {
            entry.set_key(None);
            let filed = self.wheel.remove(key);
            self.file(filed);
        } else if entry.state().try_link() {
            self.file(entry);
            return;
        }
        drop(entry);
    }

    /// Polls the wheel up to `now` (tick; `now_nanos` since the clock's start) and commits
    /// what is due, recording each one's lateness; `true` if more is due.
    fn expire(&mut self, now: u64, now_nanos: u64, batch: &mut Vec<OwnedTask>) -> bool {
        let more = self.wheel.poll(now, EXPIRY_BUDGET, &mut self.due);
        let mut expired = 0;
        // The histogram's run: consecutive expiries of one deadline (a mass expiry's tick)
        // have one lateness, counted once at the run's end.
        let mut run = LatenessRun::default();
        let mut due = std::mem::take(&mut self.due);
        for entry in due.drain(..) {
            entry.set_key(None);
            loop {
                match entry.state().load() {
                    // Cancelled after the wheel filed it: the unlink notice will find no key.
                    State::Cancelled { .. } => {
                        drop(entry);
                        break;
                    }
                    // Reset to later: file it again (the lazy re-arm).
                    State::Pending { deadline } if deadline > now => {
                        self.insert(entry);
                        break;
                    }
                    State::Pending { deadline } => {
                        // A failed CAS means a cancel or reset landed first: read again.
                        if let Some(task) = entry.expire(deadline) {
                            self.shard.release();
                            expired += 1;
                            run.add(deadline, now_nanos, &self.shard);
                            batch.push(task);
                            drop(entry);
                            break;
                        }
                    }
                    State::Expired { .. } => unreachable!("only the owning shard expires a timeout"),
                }
            }
        }
        run.flush(&self.shard);
        // Keep the scratch buffer's capacity for the next turn.
        self.due = due;
        self.shard.counters.expired(expired);
        more
    }

    /// After the mailbox closed: takes back every timeout still pending, in the wheel or in
    /// the mailbox. Producers that push after the final drain see `closed` and take their
    /// own timeouts back; the CAS decides any race.
    fn shut_down(&mut self) -> Vec<TakenBack> {
        self.shard.mailbox.begin_final_drain();
        let mut unfired = Vec::new();
        // Every stage the shard knows of, then the mail (with the stages announced in it):
        // a stage's first publication announces it, so these are all there are
        // (`stage.rs`, "Shutdown").
        let mut staged = Vec::new();
        self.stages.close_all(&mut staged);
        while let Some(stage) = self.shard.mailbox.pop_stage() {
            stage.close(&mut staged);
        }
        // The arms held back from the mail came before whatever is still in it.
        staged.append(&mut self.deferred);
        while let Some(cmd) = self.shard.mailbox.pop() {
            if let Command::Arm(entry) = cmd {
                staged.push(entry);
            }
        }
        for entry in staged {
            self.take_back(entry, &mut unfired);
        }
        let entries: Vec<_> = self.wheel.drain().collect();
        for entry in entries {
            entry.set_key(None);
            self.take_back(entry, &mut unfired);
        }
        self.shard.counters.unfired(unfired.len() as u64);
        unfired
    }

    fn take_back(&self, entry: EntryRef, unfired: &mut Vec<TakenBack>) {
        // A series' handle is filed only if the user reset it (to end the series then); the
        // series is handed back as its waiting run, once, and the handle stays pending until
        // that run is dealt with, as an unreset handle does (`periodic.rs`).
        if entry.left_pending_by_stop() {
            return;
        }
        if let Some((task, _)) = entry.cancel() {
            self.shard.release();
            unfired.push(TakenBack { entry, task });
        }
    }
}

/// Runs the committed tasks with nothing borrowed, catching panics.
fn run_tasks(shard: &Shard, batch: &mut Vec<OwnedTask>) {
    for task in batch.drain(..) {
        shard.counters.panicked(catch_panics(|| task.run_on_shard()));
    }
}

/// Drops a task the shard holds the right to (it took it back), catching panics: its
/// `Drop` is user code (a `Sleep`'s wake-up wakes the executor's waker).
fn drop_task(shard: &Shard, task: OwnedTask) {
    shard.counters.panicked(catch_panics(|| drop(task)));
}

/// The pool expired tasks may run on (`Builder::offload`, with the `offload` feature).
#[cfg(feature = "offload")]
pub(crate) type Pool = rayon::ThreadPool;

/// Without the `offload` feature: a pool with no values, and a hand-over that can never
/// run (a file of its own, which `.cargo/mutants.toml` leaves out: the mutation runs build
/// with the feature, so its stub is never compiled there).
#[cfg(not(feature = "offload"))]
mod no_offload;
#[cfg(not(feature = "offload"))]
pub(crate) use no_offload::Pool;
#[cfg(not(feature = "offload"))]
use no_offload::offload_tasks;

/// Hands the committed user tasks to `pool`, each with the shard to count its panic on (a
/// cell freed on the pool goes back to its page like any foreign free), and goes on at once.
/// The crate's own tasks (a `Sleep`'s wake-up, a series' control: `TimerTask::runs_on_shard`)
/// run here, on the shard, as without offload: a pool busy with (or blocked by) user tasks
/// must delay no sleep, and a task on the pool that waits for a sleep must not wait for a
/// thread of the pool to wake it.
#[cfg(feature = "offload")]
fn offload_tasks(shard: &Arc<Shard>, batch: &mut Vec<OwnedTask>, pool: &Pool) {
    for task in batch.drain(..) {
        if task.runs_on_shard() {
            shard.counters.panicked(catch_panics(|| task.run_on_shard()));
            continue;
        }
        let shard = shard.clone();
        // On the pool too: a payload dropped outside the catch would panic out of rayon's
        // job, which aborts the process.
        pool.spawn(move || shard.counters.panicked(catch_panics(|| task.run_on_shard())));
    }
}

/// The tick to sleep until: the wheel's next deadline `next`, or the wake-up promised
/// before, `promised`, if that is earlier and still ahead.
///
/// Why keep a promise: producers wake a sleeping shard only for a deadline earlier than the
/// one it sleeps until. In the request-timeout pattern (arm 30 s, cancel, arm 30 s, ...) the
/// cancels empty the earliest slot, and a shard that then re-planned its sleep for a later
/// one would be woken, one syscall each, by every new arm. Kept, the earlier wake-up lets the
/// new arms pass without waking it; it costs at most one wake-up with nothing due, at that
/// tick. A shard that was never given anything to do still sleeps without a timeout.
fn keep_promise(next: Option<u64>, promised: Option<u64>, now: u64) -> Option<u64> {
    match promised.filter(|&p| p > now) {
        Some(p) => Some(next.map_or(p, |n| n.min(p))),
        None => next,
    }
}

/// Sleeps until tick `next` (or until woken), unless mail arrived meanwhile.
fn sleep(shard: &Shard, next: Option<u64>) {
    if !shard.mailbox.prepare_sleep(next.unwrap_or(ASLEEP_UNTIL_WOKEN)) {
        return;
    }
    shard.clock.sleep_until(next);
    shard.mailbox.woke();
    shard.counters.woke();
}

/// Expiries of one deadline in a row, counted into the lateness histogram at once: the
/// lateness (a multiply, a division and a bucket's load and store) is worked out once per
/// deadline, not per expiry (callgrind, `examples/expiry_loop.rs`: 25 instructions an expiry
/// when each recorded its own, on a path of 279).
#[derive(Default)]
struct LatenessRun {
    deadline: u64,
    count: u64,
    now_nanos: u64,
}

impl LatenessRun {
    #[inline]
    fn add(&mut self, deadline: u64, now_nanos: u64, shard: &Shard) {
        if self.count > 0 && self.deadline != deadline {
            self.flush(shard);
        }
        self.deadline = deadline;
        self.now_nanos = now_nanos;
        self.count += 1;
    }

    fn flush(&mut self, shard: &Shard) {
        if self.count > 0 {
            let late = self.now_nanos.saturating_sub(shard.clock.nanos_of_tick(self.deadline));
            shard.counters.lateness.record_many(late, self.count);
            self.count = 0;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
