//! A paused clock for the ambient calls, scoped to the thread that paused it, as tokio's
//! `pause`, `advance` and `resume` are scoped to a current-thread runtime: tests run in
//! parallel in one process, and each sees its own clock.
//!
//! `pause()` gives the calling thread a service of its own on a paused clock (one shard, not
//! pinned, built with `Builder::build_paused`): from then on the thread's ambient calls
//! (`sleep`, `timeout`, `interval`, `Instant::now`) use it, and other threads are not
//! affected. The scope lives until the thread exits (its service is then stopped) or
//! `resume()`.
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
//!   which only the runtime knows; this reads the quiet of the timers instead, so a task
//!   that computes for over a millisecond without a timer call may see time jump to the next
//!   deadline (never past it: nothing fires early, and nothing between is skipped).
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
    auto: AtomicBool,
    /// The scope's thread has left it (resumed or exited): the auto-advance thread ends.
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

/// Pauses the calling thread's ambient clock (see the module docs); already paused: nothing.
pub(crate) fn pause() {
    if current().is_some() {
        return;
    }
    let (service, clock) = TimerService::builder()
        .shards(1)
        .pin_threads(false)
        .thread_name("shardwheel-paused")
        .build_paused()
        .unwrap_or_else(|e| panic!("shardwheel::time::pause: its paused service could not start: {e}"));
    // Leaked: the scope's futures hold its service as `&'static` (as the default's); a
    // test's scope is a few hundred bytes, and its threads end with it.
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
        ended: AtomicBool::new(false),
    }));
    let waiter = Waiting::of_this_thread();
    thread::Builder::new()
        .name("shardwheel-auto-advance".into())
        .spawn(move || scope.auto_advance(waiter))
        .unwrap_or_else(|e| panic!("shardwheel::time::pause: its auto-advance thread could not start: {e}"));
    SCOPE.with(|s| s.0.set(Some(scope)));
}

/// The calling thread leaves its paused scope, if it has one; its ambient calls use the
/// default service, on the real clock, again.
pub(crate) fn resume() -> bool {
    match SCOPE.with(|s| s.0.take()) {
        Some(scope) => {
            scope.end();
            true
        }
        None => false,
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

    fn end(&self) {
        self.ended.store(true, Ordering::Relaxed);
        // Its timers can never fire now that no thread moves its clock.
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
        if let Some(timeout) = sleep.registration() {
            let mut registered = self.registered.lock().unwrap_or_else(|e| e.into_inner());
            if !registered.iter().any(|t| t.ptr_eq(timeout)) {
                registered.push(timeout.clone());
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

    /// Moves the clock `by`; wakes, on this thread, the tasks the move woke.
    pub(crate) fn advance(&self, by: Duration) {
        self.touch();
        let _moving = self.moving.lock().unwrap_or_else(|e| e.into_inner());
        self.move_clock(by);
        self.touch();
    }

    /// [`Scope::advance`]'s move, with `moving` held.
    fn move_clock(&self, by: Duration) {
        self.advancing.store(true, Ordering::SeqCst);
        self.clock.advance(by);
        self.advancing.store(false, Ordering::SeqCst);
        let woken = std::mem::take(&mut *self.woken.lock().unwrap_or_else(|e| e.into_inner()));
        for waker in woken {
            waker.wake();
        }
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
            let now = self.activity.load(Ordering::Relaxed);
            idle = if now == seen && waiter.is_blocked() { idle + 1 } else { 0 };
            seen = now;
            if idle < 2 || !self.auto.load(Ordering::Relaxed) {
                continue;
            }
            // Not while the scope's thread moves the clock itself; and still quiet once the
            // move is ours (its `advance` counts activity before it waits for `moving`).
            let Ok(_moving) = self.moving.try_lock() else { continue };
            if self.activity.load(Ordering::Relaxed) != seen {
                continue;
            }
            if let Some(deadline) = self.earliest() {
                self.move_clock(deadline.saturating_duration_since(self.clock.now()));
                idle = 0;
            }
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
        if self.scope.advancing.load(Ordering::SeqCst) {
            self.scope.woken.lock().unwrap_or_else(|e| e.into_inner()).push(self.task.clone());
        } else {
            self.task.wake_by_ref();
        }
    }
}
