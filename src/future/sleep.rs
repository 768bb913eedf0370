//! [`Sleep`]: a future that completes at a deadline, on any executor.
//!
//! A `Sleep` is a timeout like any other: one cell (state word, reference count, task
//! inline) whose task is a [`Waker`]. It is made without touching the service, and
//! registered on its first poll: the poll clones the waker into a new cell and arms it on the
//! polling thread's shard (its stage, as every `schedule` does). When the deadline comes, the
//! shard commits the cell (PENDING → EXPIRED) and wakes the waker from its batch of tasks.
//!
//! ```text
//!  Sleep (24 B) ─────────────────▶ cell (40 B): header │ Option<Waker> [│ at: the ambient sleep's, 48 B]
//!  │ service │ slot: word │ aux │     Idle(tick) ──first poll──▶ Armed(Timeout) ──fired──▶ Ready
//!                                     Armed ──poll with another waker──▶ cancel, arm a new cell
//!                                     Armed ──drop──▶ cancel (one CAS)
//! ```
//!
//! The slot (`sleep/slot.rs`) packs the phase, the cell and the shard's reference into two
//! words, and an ambient sleep's deadline as asked (`at`) moves into its cell while it is
//! registered: 24 bytes in all, the room a tokio task keeps for its future.
//!
//! # The waker slot: a hand-over, never a shared slot
//!
//! The waker the shard will wake lives in the cell's task, which only the winner of the
//! terminal CAS moves out. The `Sleep` reads its bytes there (the identity it compares)
//! and never writes them after arming (an ambient sleep stores only to its deadline's
//! atomic beside it, which the move-out does not read): a poll that brings a
//! waker that does not `will_wake` the stored one *cancels* the cell (one CAS) and arms a
//! new one with the new waker. So there is no slot that two threads write, no lock, and no
//! `AtomicWaker` state machine; the state word's single CAS decides every race:
//!
//! - **Poll with a new waker ∥ expiry.** Either the cancel wins (the shard's expiry CAS then
//!   fails, the old waker is dropped unwoken, and the new cell holds the new waker: the
//!   shard will wake it), or the expiry wins (the cancel fails, and the poll returns
//!   `Ready`: the deadline has passed). No wake-up is lost: whichever waker is woken, the
//!   latest poll either sees the expiry or stored its waker in a cell that is pending.
//! - **Poll with the same waker ∥ expiry.** The poll compares the waker's identity *first*
//!   and reads the state word *second*. The identity is the stored waker's own bytes, read
//!   in the cell (never written once the cell is shared: the shard's move-out only reads
//!   them, and the cell outlives the sleep's reference). If the state is still PENDING, the
//!   cell still holds its waker (the shard drops it only after its CAS), so the identity
//!   compared with a live waker, and the shard's wake reaches the polling task. If the expiry landed first, the
//!   poll sees EXPIRED and returns `Ready`. (Read the other way round, a waker freed after
//!   the expiry could have its address reused by a new task's waker and look the same.)
//! - **Drop ∥ expiry.** The drop cancels: exactly one of the two CASes wins, and its winner
//!   alone moves the waker out (woken by the shard, or dropped unwoken by the canceller).
//!   The cell is freed by whoever lets go of it last. Loom: `loom-tests/sleep.rs`.
//!
//! The cost of a new waker is a cancel and an arm (a second cell): executors hand a task the
//! same waker on every poll, so this happens when a `Sleep` moves to another task, not in
//! steady state. Each such move counts one cancel and one more scheduled timeout in
//! [`stats`](crate::TimerService::stats).
//!
//! # Who calls `wake`, and what it costs
//!
//! The shard thread that owns the cell calls [`Waker::wake`] from its batch of due tasks,
//! after its wheel is released, like any task's `run`; with
//! [`Builder::offload`](crate::Builder::offload) too (only user tasks go to the pool, so a
//! busy pool delays no sleep). The cost is the executor's: for tokio, a
//! push onto the runtime's injection queue and, if every worker sleeps, one unpark (a futex
//! wake-up); for `futures::executor::block_on`, an unpark of the blocked thread. A cancelled
//! `Sleep` never wakes anything.
//!
//! # Full, stopping, stopped: the overflow timer
//!
//! Never early holds whatever the service does, and a poll as a `Future` never panics for
//! it (a server's tasks must not, and a future has no error to return). A sleep that must
//! register and that no shard takes waits on the overflow timer (`overflow.rs`: one
//! process-wide thread, a map under a lock) and completes at its deadline, never before:
//!
//! - **every shard full** (at [`max_pending_per_shard`](crate::Builder::max_pending_per_shard),
//!   or its wheel near its limit of 2³² timeouts): the polling thread's shard refuses it, so
//!   does each other shard in turn, round from there;
//! - **stopping** ([`stop_gracefully`](TimerService::stop_gracefully)): registered sleeps fire
//!   on their shards as usual; one that must register now is refused, and overflows;
//! - **stopped**: `stop()` (or the end of a graceful stop) hands a pending sleep's cell back
//!   (CANCELLED); ending that task (dropping, running, or calling `cancelled()` on the
//!   [`Unfired`](crate::Unfired)) wakes the sleep, whose next poll overflows; a sleep first
//!   polled after the stop overflows at once.
//!
//! [`Sleep::try_poll`] is the way to hear of a stop instead: it returns `Err(Stopped)` where
//! the poll would overflow for a stop (not for a full shard), and for a sleep that had
//! overflowed before the stop. A sleep whose deadline has passed completes as usual, stopped
//! or not: completing then is on time. An overflowed sleep stays on the overflow timer until
//! its deadline, even once a shard has room again, and a poll with a new waker swaps the
//! waker there (under the timer's lock) rather than register anew; only a `reset` sends it
//! back to a shard. On a paused clock (`TestClock`, `time::pause`) the overflow timer keeps
//! that clock's time: every move of a paused clock wakes its overflowed sleeps, and each
//! completes once its own clock has reached its deadline.
//! [`Stats::overflowed`](crate::Stats::overflowed) counts the sleeps that overflowed.
//!
//! # On a shard thread
//!
//! Only the shard thread can wake a `Sleep` armed on its wheel, so a task running on that
//! thread that waits for one (`block_on`) would wait for itself, forever. Such a
//! registration panics (as tokio's `block_on` does inside its runtime); with
//! [`Builder::offload`](crate::Builder::offload), user tasks run on the pool, where waiting
//! is fine.

use crate::error::{ScheduleError, Stopped};
use crate::future::holder::Holder;
use crate::future::overflow::{self, Key, Polled};
use crate::service::TimerService;
use crate::sync::AtomicU64;
use crate::task::TimerTask;
use crate::task::sealed::Token;
use crate::timeout::{Timeout, TimeoutState};
use slot::{Phase, Slot};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A future that completes at a deadline; made by [`TimerService::sleep`] and
/// [`TimerService::sleep_until`].
///
/// Registers on its first poll, not when it is made; cancelled (one compare-and-swap) when
/// dropped. It works under any executor: the service's shard thread wakes it (with offload
/// too). The waker is stored once, in the cell; a poll with a waker that would not wake the
/// same task cancels that cell and registers a new one, so the shard and a poll never share
/// a waker slot (the protocol, and the loom models that check it, are in the repository's
/// design notes, `docs/protocols.md`). A `Sleep` holds a clone of its service, so the shards
/// run for as long as a sleep lives.
///
/// ```
/// use shardwheel::TimerService;
/// use std::time::{Duration, Instant};
///
/// let timers = TimerService::new()?;
/// let start = Instant::now();
/// futures_executor::block_on(timers.sleep(Duration::from_millis(20)));
/// assert!(start.elapsed() >= Duration::from_millis(20), "never early");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Full, stopping, stopped
///
/// A poll never panics for a full or a stopped service, nor completes early: a sleep that
/// no shard will take waits on the process's overflow timer (one thread, a map under a lock)
/// and completes at its deadline. That is the case when it must register and every shard is
/// full (a service built with [`max_pending_per_shard`](crate::Builder::max_pending_per_shard)
/// at that many each, or each shard's wheel near its limit of 2³² timeouts, where `schedule`
/// returns [`ScheduleError::Rejected`]; tokio's `Sleep` panics there), and when the service is
/// [stopping](TimerService::stop_gracefully) or [stopped](TimerService::stop) before the
/// deadline. [`Stats::overflowed`](crate::Stats::overflowed) counts them;
/// [`try_poll`](Sleep::try_poll) returns `Err(`[`Stopped`]`)` for a stop instead. The
/// repository's README has a graceful-shutdown recipe.
///
/// # Panics
///
/// Only for a bug in the caller: a poll that must register from a task running on one of
/// its own service's shard threads (without `Builder::offload`, the `offload` feature), where
/// only that thread could wake it, and the wait could never end.
#[must_use = "futures do nothing unless polled"]
pub struct Sleep<H: Holder = TimerService> {
    /// The service, held as `H` holds it: a clone of the handle (`TimerService::sleep`), or
    /// a reference to a service that lives as long as the process (the ambient calls of
    /// [`time`](crate::time): making, completing and dropping such a sleep before it
    /// registers moves no reference count).
    service: H,
    /// Where it stands, its cell and its deadline as asked, in two words (`sleep/slot.rs`).
    slot: Slot,
}

/// What a poll does when the service refuses the sleep for being stopped (or stopping)
/// before its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnStop {
    /// Says so: `Ready(Err(Stopped))` (`try_poll`).
    Report,
    /// Waits on the overflow timer, and completes at the deadline (`Future::poll`).
    Overflow,
}

/// A waker's identity, as [`Waker::will_wake`] compares it: its data pointer and vtable, as
/// integers. A poll takes the identity of its context's waker and of the clone stored in the
/// cell (read there: the sleep keeps no copy), as `will_wake` would compare the two.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct WakerId {
    data: usize,
    vtable: usize,
}

impl WakerId {
    const NONE: WakerId = WakerId { data: 0, vtable: 0 };

    fn of(waker: &Waker) -> WakerId {
        WakerId { data: waker.data() as usize, vtable: std::ptr::from_ref(waker.vtable()) as usize }
    }
}

/// The task in a sleep's cell: the waker to wake, and `K`, what the sleep keeps beside it:
/// nothing for the explicit sleep (`()`: 16 B), its deadline as asked for the ambient one
/// ([`WakeTaskAt`]: 24 B; `sleep/slot.rs`).
///
/// Running it wakes the waker (by dropping the task: see `Drop`). The sleep's own cancels (a
/// drop, a poll with a new waker) drop it unwoken, through `cancelled_unboxed`, which only
/// the crate reaches (the cell's vtable; the type is private, so no user holds it unboxed).
/// Ended any other way, it wakes, so that the sleeping task polls again and completes:
/// handed back by `stop()` and dropped, run, or told `cancelled()` by the user.
pub(crate) struct WakeTask<K: Kept = ()> {
    waker: Option<Waker>,
    /// The sleep's, not the task's: only the sleep reads or writes it, and the winner of
    /// the terminal CAS leaves it alone (`move_out`), so a reset may store to it while the
    /// shard takes the waker.
    kept: K,
}

/// The ambient sleep's wake-up: the deadline as asked kept beside the waker, in
/// nanoseconds from the clock's start (an `i64`'s bits). 24 B, where the explicit sleep's is
/// 16: a 16-byte task moves into its cell from two registers, a 24-byte one through memory
/// (measured: the explicit sleep's arm 7 % slower with the deadline in it), and the explicit
/// sleep's deadline is its tick anyway.
pub(crate) type WakeTaskAt = WakeTask<AtomicU64>;

/// What a sleep keeps in its cell beside the waker: `()` or the deadline as asked.
pub(crate) trait Kept: Send + 'static {
    /// Kept for a sleep whose deadline as asked is `at`.
    fn new(at: i64) -> Self;
    /// What a moved-out task holds in its place (the move-out does not read the cell's).
    fn fresh() -> Self;
}

impl Kept for () {
    #[inline]
    fn new(_: i64) {}

    #[inline]
    fn fresh() {}
}

impl Kept for AtomicU64 {
    #[inline]
    fn new(at: i64) -> AtomicU64 {
        AtomicU64::new(at as u64)
    }

    #[inline]
    fn fresh() -> AtomicU64 {
        AtomicU64::new(0)
    }
}

impl<K: Kept> WakeTask<K> {
    /// A wake-up holding a clone of `waker`, keeping what `K` keeps of `at`.
    #[inline]
    fn make(waker: &Waker, at: i64) -> WakeTask<K> {
        WakeTask { waker: Some(waker.clone()), kept: K::new(at) }
    }

    /// Drops the waker without waking it.
    fn silence(mut self) {
        self.waker = None;
    }

    /// The identity of the waker stored (`NONE` only for one moved out and silenced, never
    /// in a cell).
    #[inline]
    fn waker_id(&self) -> WakerId {
        self.waker.as_ref().map_or(WakerId::NONE, WakerId::of)
    }
}

impl WakeTaskAt {
    /// The deadline as asked, kept here by the ambient sleep.
    #[inline]
    fn at(&self) -> &AtomicU64 {
        &self.kept
    }
}

impl<K: Kept> TimerTask for WakeTask<K> {
    fn run(self: Box<Self>) {
        drop(self);
    }

    /// Only a user calls this (on a task `stop()` handed back, through
    /// `Unfired::into_task`): the sleep is still waiting, so wake it (the drop does), and its
    /// next poll completes.
    fn cancelled(self: Box<Self>) {
        drop(self);
    }

    /// Runs in place, unboxed: the drop wakes.
    fn run_unboxed(self, _: Token) {
        drop(self);
    }

    /// The sleep's own cancel (a `Sleep` dropped, moved to another waker, or disarmed):
    /// nothing to wake.
    fn cancelled_unboxed(self, _: Token) {
        self.silence();
    }

    /// A wake-up is the crate's own short work: it runs on the shard even with offload, so
    /// a busy pool delays no sleep (and a task on the pool may block on one).
    fn runs_on_shard(_: Token) -> bool {
        true
    }

    /// Dropped, it wakes its sleep (see `Drop`).
    fn is_wake_up(_: Token) -> bool {
        true
    }

    /// The waker alone: what is kept beside it is the sleep's, which may be storing to it
    /// now (for `()`, the same as reading the whole task).
    #[inline]
    unsafe fn move_out(task: *const WakeTask<K>, _: Token) -> WakeTask<K> {
        // SAFETY: the caller may move the task out (`TimerTask::move_out`); the waker is read
        // through a raw place, and the field beside it is not touched.
        let waker = unsafe { std::ptr::addr_of!((*task).waker).read() };
        WakeTask { waker, kept: K::fresh() }
    }
}

impl<K: Kept> Drop for WakeTask<K> {
    fn drop(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

impl TimerService {
    /// A future that completes once `delay` has passed: at the first tick boundary at or
    /// after `now + delay`, never before. Reads the clock once, here; registers with a shard
    /// on its first poll.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let sleep = timers.sleep(Duration::from_millis(5));
    /// assert!(!sleep.is_elapsed());
    /// futures_executor::block_on(sleep);
    /// assert_eq!(timers.pending(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    // Inline, as `sleep_until`, `try_poll`, `poll` and the arm they lead to
    // (`TimerService::schedule_routed` says what that saves): a request's sleep is made,
    // polled once and dropped, and each of these calls was a function of its own.
    #[inline]
    pub fn sleep(&self, delay: Duration) -> Sleep {
        self.sleep_tick(self.clock().deadline_after(delay))
    }

    /// A future that completes at `deadline` (the first tick boundary at or after it). Reads
    /// no clock; a deadline already past completes by the next tick boundary.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let deadline = Instant::now() + Duration::from_millis(10);
    /// futures_executor::block_on(timers.sleep_until(deadline));
    /// assert!(Instant::now() >= deadline);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        self.sleep_tick(self.clock().deadline_at(deadline))
    }

    #[inline]
    fn sleep_tick(&self, tick: u64) -> Sleep {
        // The explicit sleep keeps no deadline as asked: its `deadline()` is the tick's.
        Sleep::on(self.clone(), tick, 0)
    }
}

impl<H: Holder> Sleep<H> {
    /// A sleep on `service`, due at tick `tick` of its clock, not registered yet; `at` is
    /// the deadline as asked, in nanoseconds from the clock's start (`Clock::offset_of`),
    /// for a sleep that keeps it (`Holder::KEEPS_AT`; the explicit sleep passes 0).
    #[inline]
    pub(crate) fn on(service: H, tick: u64, at: i64) -> Sleep<H> {
        Sleep { service, slot: Slot::idle(tick, at) }
    }

    /// The deadline as asked, in nanoseconds from the clock's start (0 for a sleep that does
    /// not keep it: `Holder::KEEPS_AT`).
    #[inline]
    pub(crate) fn at(&self) -> i64 {
        self.slot.at(H::KEEPS_AT)
    }

    /// The deadline, rounded up to the tick at which the sleep completes.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let asked = Instant::now() + Duration::from_secs(1);
    /// let sleep = timers.sleep_until(asked);
    /// assert!(sleep.deadline() >= asked && sleep.deadline() < asked + timers.tick() * 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deadline(&self) -> Instant {
        match self.slot.phase() {
            Phase::Idle(tick) | Phase::Stopped(tick) | Phase::Overflow { tick, .. } => {
                self.service.service().clock().instant_of(tick)
            }
            Phase::Armed(timeout) => timeout.deadline(),
        }
    }

    /// Whether the deadline has come: the shard fired the sleep (even if it has not been
    /// polled since), or, on a stopped service, the deadline has passed. `false` before the
    /// first poll.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let mut sleep = timers.sleep(Duration::from_millis(1));
    /// futures_executor::block_on(&mut sleep);
    /// assert!(sleep.is_elapsed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_elapsed(&self) -> bool {
        match self.slot.phase() {
            Phase::Idle(_) => false,
            Phase::Armed(timeout) => match timeout.state() {
                TimeoutState::Pending => false,
                TimeoutState::Expired => true,
                // Taken back by `stop()`.
                TimeoutState::Cancelled => self.passed(timeout.entry.state().load().deadline()),
            },
            Phase::Stopped(tick) | Phase::Overflow { tick, .. } => self.passed(tick),
        }
    }

    /// The registration, if the sleep has one: the cell that holds its waker (a counted
    /// handle of its own).
    pub(crate) fn registration(&self) -> Option<Timeout> {
        match self.slot.phase() {
            Phase::Armed(timeout) => Some((*timeout).clone()),
            _ => None,
        }
    }

    /// The service this sleep waits on.
    pub(crate) fn service(&self) -> &TimerService {
        self.service.service()
    }

    /// Whether tick `tick` has begun: a deadline there has come.
    fn passed(&self, tick: u64) -> bool {
        self.service.service().clock().now_tick() >= tick
    }

    /// Polls the sleep, and says so if the service stops first: `Ready(Ok(()))` once the
    /// deadline has come, `Ready(Err(Stopped))` if the service was stopped (or is stopping
    /// and refuses the sleep) before it, else `Pending` with `cx`'s waker registered. A full
    /// service is no error: the sleep waits on the overflow timer, as a poll as a `Future`
    /// does. Never panics, but for a sleep polled on its own shard's thread (see [`Sleep`]).
    ///
    /// ```
    /// use shardwheel::{Stopped, TimerService};
    /// use std::future::poll_fn;
    /// use std::time::Duration;
    ///
    /// let timers = TimerService::new()?;
    /// let mut soon = Box::pin(timers.sleep(Duration::from_millis(1)));
    /// assert_eq!(futures_executor::block_on(poll_fn(|cx| soon.as_mut().try_poll(cx))), Ok(()));
    /// let mut late = Box::pin(timers.sleep(Duration::from_secs(60)));
    /// timers.stop()?;
    /// assert_eq!(futures_executor::block_on(poll_fn(|cx| late.as_mut().try_poll(cx))), Err(Stopped::new()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Stopped>> {
        self.poll_with(cx, OnStop::Report)
    }

    /// The poll behind [`try_poll`](Sleep::try_poll) (`OnStop::Report`) and
    /// `Future::poll` (`OnStop::Overflow`, which never returns `Err`).
    #[inline]
    pub(crate) fn poll_with(self: Pin<&mut Self>, cx: &mut Context<'_>, on_stop: OnStop) -> Poll<Result<(), Stopped>> {
        let this = Pin::into_inner(self);
        let timeout = match this.slot.phase() {
            Phase::Stopped(tick) => return this.stopped_at(tick, cx.waker(), on_stop),
            Phase::Idle(tick) if this.due_on_a_paused_clock(tick) => {
                this.slot.set_stopped(tick, H::KEEPS_AT);
                return Poll::Ready(Ok(()));
            }
            Phase::Idle(tick) => return this.arm(tick, cx.waker(), on_stop),
            Phase::Overflow { id, tick } => return this.poll_overflow(id, tick, cx.waker(), on_stop),
            Phase::Armed(timeout) => timeout,
        };
        // The identity first, the state second: see "The waker slot" in the module docs.
        // The identity is the bytes of the waker in the cell, which no one writes once it
        // is shared (a winner's move-out only reads them).
        let same_waker = WakerId::of(cx.waker()) == timeout.waker_id(H::KEEPS_AT);
        match timeout.state() {
            TimeoutState::Pending => {
                let tick = timeout.entry.state().load().deadline();
                if this.due_on_a_paused_clock(tick) {
                    // Due (a reset earlier, past the clock): done here, the cell taken back.
                    // A cancel that loses lost to the shard's expiry or to a cancel of its
                    // own (`stop()`, a failing shard, the backstop): the deadline has passed
                    // on this clock either way, so the sleep is done either way.
                    let _ = timeout.cancel();
                    this.slot.set_stopped(tick, H::KEEPS_AT);
                    return Poll::Ready(Ok(()));
                }
            }
            TimeoutState::Expired => return Poll::Ready(Ok(())),
            // Only `stop()`, a failing shard or the backstop of a wheel at its very limit
            // cancels a cell the sleep still holds.
            TimeoutState::Cancelled => {
                let tick = timeout.entry.state().load().deadline();
                return this.taken_back(tick, cx.waker(), on_stop);
            }
        }
        if same_waker {
            return Poll::Pending;
        }
        // Another waker (the sleep moved to another task): take the cell back, and arm a new
        // one for the same tick. A cancel that loses means the sleep just fired, or the
        // service just stopped: look again.
        let tick = timeout.entry.state().load().deadline();
        if !timeout.cancel() {
            return match timeout.state() {
                TimeoutState::Expired => Poll::Ready(Ok(())),
                _ => this.taken_back(tick, cx.waker(), on_stop),
            };
        }
        // The cell is gone: unregistered until the new one is armed (should that arm panic,
        // a later poll starts afresh rather than mistake the cancelled cell for a stop).
        this.slot.set_idle(tick, H::KEEPS_AT);
        this.arm(tick, cx.waker(), on_stop)
    }

    /// Whether the sleep, due at `tick`, is due now on a paused clock. A poll then completes
    /// at once, as tokio's does (its driver's time is at hand; the shard's is on another
    /// thread, and would fire it a turn later): one atomic load. Not on the real clock, where
    /// telling "passed" without ever being early takes an `Instant::now()` on every poll;
    /// there the shard fires it at its tick boundary.
    #[inline]
    fn due_on_a_paused_clock(&self, tick: u64) -> bool {
        let clock = self.service.service().clock();
        clock.is_paused() && clock.now_tick() >= tick
    }

    /// The sleep's cell was cancelled by its shard, not by the sleep: `stop()` took it back,
    /// its shard's thread failed (a bug in shardwheel) and took it back as it closed, or its
    /// shard's wheel was at its very limit and its backstop refused the cell, which was in
    /// flight past the FULL mark (`shard/gate.rs`). On a stopped service the wait goes on as
    /// `stopped_at` says (the overflow timer, or the error). Otherwise the sleep registers
    /// again, as on its first poll: on a shard that runs (a failed one refuses it), or,
    /// refused by every shard, on the overflow timer (`arm_refused`): never a wait that
    /// cannot end, never a loop of refusals. A shard closed without failing is a `stop()`
    /// under way, even while the service does not read as stopped yet (its other shards
    /// close a moment later): the sleep is stopped there too, so that it never registers on
    /// a shard not yet closed and comes back from `stop()` twice.
    fn taken_back(&mut self, tick: u64, waker: &Waker, on_stop: OnStop) -> Poll<Result<(), Stopped>> {
        let stopping =
            matches!(self.slot.phase(), Phase::Armed(t) if t.shard.mailbox.is_closed() && !t.shard.has_failed());
        if stopping || self.service.service().is_stopped() {
            return self.stopped_at(tick, waker, on_stop);
        }
        self.slot.set_idle(tick, H::KEEPS_AT);
        self.arm(tick, waker, on_stop)
    }

    /// The outcome for a sleep due at `tick` whose service is stopped (or stopping): complete
    /// if the deadline has come (on time); else, as `on_stop` says, the error (remembered, so
    /// later polls need no cell) or a wait on the overflow timer.
    fn stopped_at(&mut self, tick: u64, waker: &Waker, on_stop: OnStop) -> Poll<Result<(), Stopped>> {
        self.slot.set_stopped(tick, H::KEEPS_AT);
        if self.passed(tick) {
            return Poll::Ready(Ok(()));
        }
        match on_stop {
            OnStop::Report => Poll::Ready(Err(Stopped::new())),
            OnStop::Overflow => self.overflow(tick, waker),
        }
    }

    /// Waits on the overflow timer (`overflow.rs`) for tick `tick`: no shard took the
    /// sleep. On the real clock, the timer's thread fires it at the tick's instant; on a
    /// paused clock, whose time is not real time, every move of a paused clock wakes it and
    /// it completes once its own clock has reached the tick. Counted in `Stats::overflowed`.
    #[cold]
    #[inline(never)]
    fn overflow(&mut self, tick: u64, waker: &Waker) -> Poll<Result<(), Stopped>> {
        let service = self.service.service();
        let id = if service.clock().is_paused() {
            overflow::timer().register_paused(waker)
        } else {
            overflow::timer().register(service.clock().instant_of(tick), waker).id()
        };
        service.shard_at(service.route()).counters.overflowed();
        self.slot.set_overflow(id, tick, H::KEEPS_AT);
        Poll::Pending
    }

    /// A poll of a sleep on the overflow timer: done once the deadline has come by the
    /// sleep's own clock (the timer took its entry out on the real clock; a paused clock
    /// reached it); else its waker is the one the timer will wake. `try_poll` on a service
    /// stopped since says so, as for a sleep on a shard.
    #[cold]
    #[inline(never)]
    fn poll_overflow(&mut self, id: u64, tick: u64, waker: &Waker, on_stop: OnStop) -> Poll<Result<(), Stopped>> {
        let paused = self.service.service().clock().is_paused();
        if self.passed(tick) {
            // Never early: the deadline has come by the sleep's own clock (the thread's
            // firing, at the tick's instant, is only the wake-up).
            self.cancel_overflow(id, tick);
            self.slot.set_stopped(tick, H::KEEPS_AT);
            return Poll::Ready(Ok(()));
        }
        if on_stop == OnStop::Report && self.service.service().is_stopped() {
            self.cancel_overflow(id, tick);
            self.slot.set_stopped(tick, H::KEEPS_AT);
            return Poll::Ready(Err(Stopped::new()));
        }
        let waiting = if paused {
            overflow::timer().poll_paused(id, waker)
        } else {
            overflow::timer().poll(self.overflow_key(id, tick), waker) == Polled::Waiting
        };
        if waiting {
            return Poll::Pending;
        }
        // Taken out by the thread, which fires at the tick's instant by `Instant::now()`:
        // the clock read above came before that, so read it again.
        if self.passed(tick) {
            self.slot.set_stopped(tick, H::KEEPS_AT);
            return Poll::Ready(Ok(()));
        }
        // Taken out, and yet not due by this sleep's own clock (never on the real clock, whose
        // time the thread reads): wait again.
        self.overflow(tick, waker)
    }

    /// Takes the overflow timer's entry `id` (due at `tick`) out, if it is still there.
    fn cancel_overflow(&self, id: u64, tick: u64) {
        if self.service.service().clock().is_paused() {
            overflow::timer().cancel_paused(id);
        } else {
            overflow::timer().cancel(self.overflow_key(id, tick));
        }
    }

    /// The overflow timer's key of the entry numbered `id`, due at tick `tick`.
    fn overflow_key(&self, id: u64, tick: u64) -> Key {
        Key::new(self.service.service().clock().instant_of(tick), id)
    }

    /// Moves the deadline to `deadline`. A registered sleep that is still pending keeps its
    /// cell: a later deadline is one compare-and-swap ([`Timeout::reset_at`]: no message, no
    /// clock read), an earlier one also tells the shard. A sleep that has completed (or was
    /// never polled) waits again, and registers on its next poll.
    ///
    /// ```
    /// use shardwheel::TimerService;
    /// use std::time::{Duration, Instant};
    ///
    /// let timers = TimerService::new()?;
    /// let mut sleep = timers.sleep(Duration::from_millis(1));
    /// futures_executor::block_on(&mut sleep);
    /// let again = Instant::now() + Duration::from_millis(10);
    /// sleep.reset(again);
    /// assert!(!sleep.is_elapsed());
    /// futures_executor::block_on(&mut sleep);
    /// assert!(Instant::now() >= again);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&mut self, deadline: Instant) {
        // The deadline as asked, for a sleep that keeps it (the explicit one's is its tick).
        let at = if H::KEEPS_AT { self.service.service().clock().offset_of(deadline) } else { 0 };
        match self.slot.phase() {
            Phase::Armed(timeout) if timeout.reset_at(deadline) => {
                self.slot.set_at(at, H::KEEPS_AT);
                return;
            }
            Phase::Overflow { id, tick } => self.cancel_overflow(id, tick),
            _ => {}
        }
        // Not registered, or its cell is spent (fired, or taken by `stop`): a fresh start.
        let tick = self.service.service().clock().deadline_at_for_reset(deadline);
        self.slot.set_idle(tick, H::KEEPS_AT);
        self.slot.set_at(at, H::KEEPS_AT);
    }

    /// Lets go of the registration, if any: the cell is cancelled (one CAS; its waker dropped
    /// unwoken) and the sleep goes back to waiting for its deadline unregistered. For a
    /// `WithTimeout` whose future won: nothing stays pending, nothing wakes later.
    pub(crate) fn disarm(&mut self) {
        match self.slot.phase() {
            Phase::Armed(timeout) => {
                let tick = timeout.entry.state().load().deadline();
                timeout.cancel();
                self.slot.set_idle(tick, H::KEEPS_AT);
            }
            Phase::Overflow { id, tick } => {
                self.cancel_overflow(id, tick);
                self.slot.set_idle(tick, H::KEEPS_AT);
            }
            Phase::Idle(_) | Phase::Stopped(_) => {}
        }
    }

    /// Arms a cell for `tick` holding `waker`, on the polling thread's shard. The common
    /// case alone is inline (every sleep's first poll); a refusal goes to `arm_refused`.
    #[inline]
    fn arm(&mut self, tick: u64, waker: &Waker, on_stop: OnStop) -> Poll<Result<(), Stopped>> {
        // One look at the thread's routing: its own shard, if it drives one of this service's.
        let Err(home) = self.service.service().route_or_home() else {
            return self.arm_on_a_shard_thread(tick);
        };
        // `Err`: this thread drives none of the service's shards (checked above).
        if H::KEEPS_AT {
            self.arm_with::<AtomicU64>(tick, waker, home, on_stop)
        } else {
            self.arm_with::<()>(tick, waker, home, on_stop)
        }
    }

    /// Arms a cell of the wake-up that keeps `K` (the sleep's kind: `H::KEEPS_AT`) on shard
    /// `home`.
    #[inline]
    fn arm_with<K: Kept>(
        &mut self,
        tick: u64,
        waker: &Waker,
        home: usize,
        on_stop: OnStop,
    ) -> Poll<Result<(), Stopped>> {
        let task = WakeTask::<K>::make(waker, self.slot.at(H::KEEPS_AT));
        let slot = &mut self.slot;
        match self.service.service().schedule_routed_then(Err(home), |_| tick, task, |timeout| slot.armed(timeout)) {
            Ok(()) => Poll::Pending,
            Err(refused) => self.arm_refused(tick, waker, home, refused, on_stop),
        }
    }

    /// Registered: `timeout`'s cell holds a clone of the waker, and the deadline as asked.
    #[inline]
    fn registered(&mut self, timeout: Timeout) -> Poll<Result<(), Stopped>> {
        self.slot.armed(timeout);
        Poll::Pending
    }

    /// A sleep polled on one of its own service's shard threads.
    #[cold]
    #[inline(never)]
    fn arm_on_a_shard_thread(&mut self, tick: u64) -> Poll<Result<(), Stopped>> {
        // A sleep already due completes without waiting (a poll that does not block, such as
        // `now_or_never`, is fine here); only a wait could never end.
        if self.passed(tick) {
            self.slot.set_stopped(tick, H::KEEPS_AT);
            return Poll::Ready(Ok(()));
        }
        panic!(
            "a shardwheel Sleep was polled by a task running on one of its own service's shard \
             threads: only that thread can wake it, so waiting for it there would wait forever \
             (run such tasks with Builder::offload, or on another thread)"
        );
    }

    /// The polling thread's shard `home` refused the sleep. A stopped (or stopping) service
    /// ends it as `stopped_at` says; a full shard (`Rejected`: at `max_pending_per_shard`,
    /// or its wheel at its FULL mark) or a failed one passes it to the next shard round from
    /// `home`; refused by every shard, it waits on the overflow timer. Never a panic: a
    /// future has no error to return, and a service past what it was sized for is an
    /// ordinary day of a server's life (the overflow's module docs weigh the other choices).
    #[cold]
    #[inline(never)]
    fn arm_refused<K: Kept>(
        &mut self,
        tick: u64,
        waker: &Waker,
        home: usize,
        mut refused: ScheduleError<WakeTask<K>>,
        on_stop: OnStop,
    ) -> Poll<Result<(), Stopped>> {
        let shards = self.service.service().shard_count();
        for k in 1..=shards {
            match refused {
                ScheduleError::Shutdown(task) => {
                    task.silence();
                    return self.stopped_at(tick, waker, on_stop);
                }
                other => other.into_task().silence(),
            }
            if k == shards {
                break;
            }
            // The next shard round from `home` (`home < shards`, `k < shards`: no division).
            let shard = if home + k < shards { home + k } else { home + k - shards };
            match self.service.service().schedule_routed(
                Err(shard),
                |_| tick,
                WakeTask::<K>::make(waker, self.slot.at(H::KEEPS_AT)),
            ) {
                Ok(timeout) => return self.registered(timeout),
                Err(again) => refused = again,
            }
        }
        self.overflow(tick, waker)
    }
}

impl<H: Holder> Future for Sleep<H> {
    type Output = ();

    /// Completes at the deadline, never before, on a full or stopped service too (see
    /// [`Sleep`]'s "Full, stopping, stopped").
    ///
    /// # Panics
    ///
    /// As listed on [`Sleep`]: only for a sleep awaited on its own shard's thread.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // `OnStop::Overflow` never reports the stop: `Ready` is the deadline, always.
        self.poll_with(cx, OnStop::Overflow).map(|_| ())
    }
}

impl<H: Holder> Drop for Sleep<H> {
    /// Cancels a registered sleep: one compare-and-swap, which drops the waker unwoken. If
    /// the shard had already filed the cell, it is told to take it out (as any
    /// [`Timeout::cancel`]); otherwise the shard never hears of it.
    #[inline]
    fn drop(&mut self) {
        match self.slot.phase() {
            Phase::Armed(_) => {
                // Moved out, cancelled and let go of in one step; the slot is left idle, so
                // its own drop has nothing to do.
                if let Some(timeout) = self.slot.take_registration() {
                    timeout.cancel();
                }
            }
            Phase::Overflow { id, tick } => self.cancel_overflow(id, tick),
            Phase::Idle(_) | Phase::Stopped(_) => {}
        }
    }
}

impl<H: Holder> fmt::Debug for Sleep<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match self.slot.phase() {
            Phase::Idle(_) => "idle",
            Phase::Armed(_) => "registered",
            Phase::Overflow { .. } => "overflow",
            Phase::Stopped(_) if self.service.service().is_stopped() => "stopped",
            Phase::Stopped(_) => "done",
        };
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline())
            .field("phase", &phase)
            .field("elapsed", &self.is_elapsed())
            .finish()
    }
}

mod slot;
#[cfg(all(test, not(loom)))]
mod tests;
