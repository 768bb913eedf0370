//! A paused clock for the ambient calls, scoped to the thread that paused it, as tokio's
//! `pause`, `advance` and `resume` are scoped to a current-thread runtime: tests run in
//! parallel in one process, and each sees its own clock.
//!
//! `pause()` gives the calling thread a service of its own on a paused clock (one shard, not
//! pinned, built with `Builder::build_paused`): from then on the thread's ambient calls
//! (`sleep`, `timeout`, `interval`, `Instant::now`) use it, and other threads are not
//! affected. The scope lives until the thread exits (its service is then stopped);
//! `resume()` lets its clock run with real time from where it stands, as tokio's does.
//!
//! ```text
//!  test thread                          scope's shard            auto-advance thread
//!  sleep(..).poll ── relay waker ──────▶ cell (paused tick)
//!  advance(d).await:                     fires due cells:        every ms: no ambient
//!    advancing = true                    relay.wake():             call since, timers
//!    clock.advance(d) (waits for ──────▶   advancing? queue it     pending: advance to
//!      the shard to fire what is due)      else wake now           the earliest, then
//!    advancing = false; wake the queue                             wake the queue
//!    yield once: the woken tasks run first
//! ```
//!
//! - **Woken before `advance` returns.** The shard fires on its own thread; a wake from there
//!   reaches a current-thread runtime through its remote queue, which it reads after the
//!   tasks it has at hand, so a task woken by an advance might run only after the advancing
//!   task went on. A sleep polled in the scope registers a relay waker instead: a wake that
//!   an advance caused is queued, and the advancing thread wakes the real wakers itself,
//!   inside its task, which puts them on the runtime's local queue; then it yields once, and
//!   they run before it continues. Relays are kept per task waker, so a task's sleep sees the
//!   same waker on every poll and registers once.
//! - **Auto-advance** (on by default, as tokio's; [`auto_advance`](super::auto_advance)
//!   switches it): when the scope's thread has made no ambient call and has been blocked (in
//!   the kernel, as a parked runtime or `block_on` is) at two looks a millisecond apart, not in
//!   an `advance` of its own, and some sleep of the scope is still registered, a thread of the
//!   scope moves the clock to the earliest such deadline. tokio advances when its runtime has no work,
//!   which only the runtime knows; this reads the thread's state instead. A task that
//!   computes is running, and holds the clock; but one that blocks its thread (a
//!   `std::thread::sleep`, a blocking lock or read, waiting on a `spawn_blocking` task, which
//!   tokio counts as work) looks idle, and the clock may jump to the next deadline: never
//!   past it (nothing fires early, and no registered deadline is skipped), but sooner than
//!   tokio would. `auto_advance(false)` holds the clock for such tests.
//!
//! Nothing here is on the path of an unpaused thread but the one thread-local load that
//! finds no scope.

use crate::future;
use crate::service::TimerService;
use crate::sync::plain::{Arc, AtomicBool, AtomicU64, Mutex, Ordering, thread};
use crate::test_clock::TestClock;
use crate::timeout::{Timeout, TimeoutState};
use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// How long the scope's thread must make no ambient call before the clock auto-advances.
const QUIET: Duration = Duration::from_millis(1);

/// One thread's paused clock and the service on it.
pub(crate) struct Scope {
    service: TimerService,
    clock: TestClock,
    /// Set while the scope's thread moves the clock (`advance`): a wake the move causes is
    /// queued in `woken` for that thread to deliver. SeqCst: the store is ordered before the
    /// clock's move, which the shard sees before it fires and the relay reads this.
    advancing: AtomicBool,
    woken: Mutex<Vec<Waker>>,
    /// A relay waker per task waker (by identity) that polled a sleep of the scope.
    relays: Mutex<HashMap<(usize, usize), Waker>>,
    /// Held while the clock moves: the scope's thread, waiting in its `advance` for the shard,
    /// looks blocked and quiet, and auto-advance must not take that for idleness.
    moving: Mutex<()>,
    /// The scope's registered sleeps, for auto-advance to find the earliest.
    registered: Mutex<Vec<Timeout>>,
    /// Ambient calls on the scope's thread, counted: unchanged for `QUIET`, the thread waits.
    /// Relaxed: a count that only tells "something happened"; it publishes nothing.
    activity: AtomicU64,
    /// Auto-advance on. Relaxed (here and at its reads): a setting that publishes nothing;
    /// the auto-advance thread acts on it at its next look.
    auto: AtomicBool,
    /// Resumed (`time::resume`): the auto-advance thread moves the clock with real time, from
    /// where it stood, so that `Instant::now()` never goes back and every sleep of the scope
    /// comes due as on the real clock (as tokio's `resume`).
    resumed: AtomicBool,
    /// The real instant the clock last moved with real time from (or was resumed at): a
    /// resumed clock moves by the real time since, never by time that passed while paused.
    since: Mutex<Instant>,
    /// The scope's thread has exited: the auto-advance thread ends, the service stops.
    /// Relaxed: it only ends the auto-advance thread's loop, which then touches nothing.
    ended: AtomicBool,
}

/// The calling thread's scope, if it paused.
struct Slot(Cell<Option<&'static Scope>>);

impl Drop for Slot {
    /// The thread exits: its scope ends, its service stops (its shard thread exits).
    fn drop(&mut self) {
        if let Some(scope) = self.0.take() {
            scope.end();
        }
    }
}

thread_local! {
    static SCOPE: Slot = const { Slot(Cell::new(None)) };
}

/// The calling thread's scope, if it has paused.
#[inline]
pub(crate) fn current() -> Option<&'static Scope> {
    SCOPE.try_with(|s| s.0.get()).ok().flatten()
}

/// Pauses the calling thread's ambient clock (see the module docs); already paused: nothing;
/// resumed: stands still again, where it is.
pub(crate) fn pause() {
    if let Some(scope) = current() {
        let _moving = scope.moving.lock().unwrap_or_else(|e| e.into_inner());
        scope.resumed.store(false, Ordering::SeqCst);
        return;
    }
    let (service, clock) = TimerService::builder()
        .shards(1)
        .pin_threads(false)
        .thread_name("shardwheel-paused")
        .build_paused()
        .unwrap_or_else(|e| panic!("shardwheel::time::pause: its paused service could not start: {e}"));
    // Leaked: the scope's futures hold its service as `&'static` (as the default's). What
    // stays once the thread has exited is the scope's own record (a few hundred bytes): its
    // threads end, and its lists are emptied (`end`).
    let scope: &'static Scope = Box::leak(Box::new(Scope {
        service,
        clock,
        advancing: AtomicBool::new(false),
        woken: Mutex::new(Vec::new()),
        moving: Mutex::new(()),
        relays: Mutex::new(HashMap::new()),
        registered: Mutex::new(Vec::new()),
        activity: AtomicU64::new(0),
        auto: AtomicBool::new(true),
        resumed: AtomicBool::new(false),
        since: Mutex::new(Instant::now()),
        ended: AtomicBool::new(false),
    }));
    let waiter = Waiting::of_this_thread();
    thread::Builder::new()
        .name("shardwheel-auto-advance".into())
        .spawn(move || scope.auto_advance(waiter))
        .unwrap_or_else(|e| panic!("shardwheel::time::pause: its auto-advance thread could not start: {e}"));
    SCOPE.with(|s| s.0.set(Some(scope)));
}

/// The calling thread's clock runs again with real time, from where it stands (see
/// `Scope::resumed`); not paused: nothing.
pub(crate) fn resume() {
    if let Some(scope) = current() {
        let _moving = scope.moving.lock().unwrap_or_else(|e| e.into_inner());
        *scope.since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        scope.resumed.store(true, Ordering::SeqCst);
    }
}

impl Scope {
    pub(crate) fn service(&'static self) -> &'static TimerService {
        &self.service
    }

    /// The paused clock's now.
    pub(crate) fn now(&self) -> Instant {
        self.touch();
        self.clock.now()
    }

    /// An ambient call on the scope's thread.
    #[inline]
    pub(crate) fn touch(&self) {
        self.activity.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_auto(&self, on: bool) {
        self.auto.store(on, Ordering::Relaxed);
    }

    /// The scope's thread exited: nothing will poll its futures again.
    fn end(&self) {
        self.ended.store(true, Ordering::Relaxed);
        // The tasks' wakers and the cells they pin go now, not with the process.
        self.relays.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.registered.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.woken.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let _ = self.service.stop();
    }

    /// Polls `sleep`, a sleep of this scope, on its thread: through the task's relay, and
    /// keeps its registration for auto-advance.
    pub(crate) fn poll(
        &'static self,
        sleep: &mut future::Sleep<&'static TimerService>,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        self.touch();
        let relay = self.relay(cx.waker());
        let polled = Pin::new(&mut *sleep).poll(&mut Context::from_waker(&relay));
        let mut registered = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        // The ended ones go at every poll, so the list holds what waits, not what waited.
        registered.retain(|t| t.state() == TimeoutState::Pending);
        if let Some(timeout) = sleep.registration() {
            if !registered.iter().any(|t| t.ptr_eq(&timeout)) {
                registered.push(timeout);
            }
        }
        polled
    }

    /// The relay waker for `waker`'s task (made on its first poll in the scope).
    fn relay(&'static self, waker: &Waker) -> Waker {
        let id = (waker.data() as usize, std::ptr::from_ref(waker.vtable()) as usize);
        let mut relays = self.relays.lock().unwrap_or_else(|e| e.into_inner());
        relays.entry(id).or_insert_with(|| Waker::from(Arc::new(Relay { scope: self, task: waker.clone() }))).clone()
    }

    /// Moves the clock `by`; wakes, on this thread, the tasks the move woke (after letting go
    /// of `moving`: a waker that polls in place may advance again).
    pub(crate) fn advance(&self, by: Duration) {
        self.touch();
        let woken = {
            let _moving = self.moving.lock().unwrap_or_else(|e| e.into_inner());
            self.move_clock(by)
        };
        for waker in woken {
            waker.wake();
        }
        self.touch();
    }

    /// Moves the clock `by`, with `moving` held; returns the wakers the move queued.
    fn move_clock(&self, by: Duration) -> Vec<Waker> {
        self.advancing.store(true, Ordering::SeqCst);
        self.clock.advance(by);
        // Under `woken`'s lock, as a relay's look at the flag and its push: a relay either
        // pushed before this takes the queue, or finds the flag down and wakes at once.
        let mut woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        self.advancing.store(false, Ordering::SeqCst);
        std::mem::take(&mut *woken)
    }

    /// The earliest deadline of a sleep still registered (the others forgotten).
    fn earliest(&self) -> Option<Instant> {
        let mut registered = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        registered.retain(|t| t.state() == TimeoutState::Pending);
        registered.iter().map(Timeout::deadline).min()
    }

    /// The auto-advance thread's loop (see the module docs), until the scope ends: moves the
    /// clock to the earliest registered deadline once the scope's thread has made no ambient
    /// call for `QUIET` and is blocked (`waiter`).
    fn auto_advance(&self, waiter: Waiting) {
        // The activity count at the last look, and how many looks in a row found the thread
        // quiet and blocked: two (`QUIET` twice) before the clock moves.
        let (mut seen, mut idle) = (u64::MAX, 0);
        while !self.ended.load(Ordering::Relaxed) {
            thread::sleep(QUIET);
            if self.resumed.load(Ordering::SeqCst) {
                // Resumed: the clock runs with real time.
                self.advance_with_real_time();
                continue;
            }
            let now = self.activity.load(Ordering::Relaxed);
            idle = if now == seen && waiter.is_blocked() { idle + 1 } else { 0 };
            seen = now;
            if idle < 2 || !self.auto.load(Ordering::Relaxed) {
                continue;
            }
            let Some(deadline) = self.earliest() else { continue };
            // Not while the scope's thread moves the clock itself; and still quiet once the
            // move is ours (its `advance` counts activity before it waits for `moving`), so
            // that no sleep registered since the look is jumped over.
            let Ok(moving) = self.moving.try_lock() else { continue };
            if self.activity.load(Ordering::Relaxed) != seen {
                continue;
            }
            let woken = self.move_clock(deadline.saturating_duration_since(self.clock.now()));
            drop(moving);
            for waker in woken {
                waker.wake();
            }
            idle = 0;
        }
    }

    /// The auto-advance thread's move of a resumed clock: by the real time since the last
    /// such move, or since the resume.
    fn advance_with_real_time(&self) {
        let woken = {
            let _moving = self.moving.lock().unwrap_or_else(|e| e.into_inner());
            if !self.resumed.load(Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            let by = now - std::mem::replace(&mut *self.since.lock().unwrap_or_else(|e| e.into_inner()), now);
            self.move_clock(by)
        };
        for waker in woken {
            waker.wake();
        }
    }
}

/// Whether a thread waits (blocked, not runnable): on Linux, its state in
/// `/proc/self/task/<tid>/stat` (`S` or `D`: asleep in the kernel, as a parked runtime or
/// `block_on` is; `R`: running, or runnable but descheduled, as on a loaded machine). Where
/// there is no such file, only the quiet of the timers counts.
struct Waiting {
    stat: Option<String>,
}

impl Waiting {
    fn of_this_thread() -> Waiting {
        #[cfg(target_os = "linux")]
        // SAFETY: `gettid` takes nothing and touches no memory.
        let stat = Some(format!("/proc/self/task/{}/stat", unsafe { libc::gettid() }));
        #[cfg(not(target_os = "linux"))]
        let stat = None;
        Waiting { stat }
    }

    fn is_blocked(&self) -> bool {
        let Some(path) = &self.stat else { return true };
        match std::fs::read_to_string(path) {
            // The state follows the command name, which is in parentheses and may hold any.
            Ok(stat) => {
                matches!(stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()), Some('S' | 'D'))
            }
            // The thread has exited: nothing waits on the scope.
            Err(_) => false,
        }
    }
}

/// A task's waker, as a sleep of the scope registers it: a wake the clock's move causes is
/// queued for the advancing thread; any other is passed on at once.
struct Relay {
    scope: &'static Scope,
    task: Waker,
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // The flag read and the push under `woken`'s lock, as the advancer's clear and take.
        let mut woken = self.scope.woken.lock().unwrap_or_else(|e| e.into_inner());
        if self.scope.advancing.load(Ordering::SeqCst) {
            woken.push(self.task.clone());
            return;
        }
        drop(woken);
        self.task.wake_by_ref();
    }
}
