//! The gate's tests: its marks, and the wheel's limit through the public service (a service
//! whose wheel holds 64, `Builder::wheel_limit`: FULL from 60, room again at 56).

use super::{Gate, marks};
use crate::mailbox::Mailbox;
use crate::test_wakers::WakeCount;
use crate::{Missed, ScheduleError, ScheduleErrorKind, Timeout, TimeoutState, TimerService, TimerTask};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How long these tests wait for what should happen soon (long, for valgrind's pace).
const PATIENCE: Duration = Duration::from_secs(60);
const LIMIT: usize = 64;
const FAR: Duration = Duration::from_secs(3600);

#[test]
fn the_marks_leave_headroom_and_hysteresis() {
    assert_eq!(marks(64), (60, 56));
    assert_eq!(marks(3), (2, 1), "at least one of each");
    let limit = u32::MAX as usize - 388;
    let (high, low) = marks(limit);
    assert_eq!(limit - high, limit / 16);
    assert_eq!(high - low, limit / 16);
}

/// FULL is set at the high-water mark, kept between the marks, cleared at the low one,
/// and set again at the high one; CLOSED is never touched by either.
#[test]
fn full_is_set_at_high_and_cleared_at_low_only() {
    let mailbox = Mailbox::new();
    let mut gate = Gate::new(64);
    gate.filed(59, &mailbox);
    assert!(!mailbox.is_full());
    gate.filed(60, &mailbox);
    assert!(mailbox.is_full());
    gate.turned(57, &mailbox);
    assert!(mailbox.is_full(), "between the marks: still full");
    mailbox.close();
    gate.turned(56, &mailbox);
    assert!(!mailbox.is_full());
    assert!(mailbox.is_closed(), "clearing FULL never clears CLOSED");
    gate.turned(0, &mailbox);
    gate.filed(59, &mailbox);
    assert!(!mailbox.is_full());
    gate.filed(60, &mailbox);
    assert!(mailbox.is_full() && mailbox.is_closed());
}

/// A one-shard service whose wheel holds `LIMIT` timeouts.
fn service() -> TimerService {
    let mut builder = TimerService::builder().shards(1).pin_threads(false);
    builder.wheel_limit = Some(LIMIT);
    builder.build().unwrap()
}

/// A task that holds a value and counts its drops (exactly once each, whatever its fate).
struct Holding(u64, Arc<AtomicUsize>);

impl TimerTask for Holding {
    fn run(self: Box<Self>) {}
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

/// Puts exactly `n` far timeouts in the shard's wheel, enough to bring it to the mark (60,
/// with what it holds already): armed on a thread of their own, whose exit retires its stage
/// and announces it as due now, which wakes the shard to file them all. Returns once the
/// shard is FULL (with every one filed: the mark is met by the last). No arm here can be
/// refused: each meets the gate with fewer than the mark filed. (It was a signal timeout
/// armed after them, which the shard, had it taken the stage first, refused at the mark: a
/// flaky test under load.)
fn fill(timers: &TimerService, n: usize, drops: &Arc<AtomicUsize>) -> Vec<Timeout> {
    fill_due(timers, n, FAR, drops)
}

/// [`fill`], with the `n` timeouts due in `delay`.
fn fill_due(timers: &TimerService, n: usize, delay: Duration, drops: &Arc<AtomicUsize>) -> Vec<Timeout> {
    let filed = std::thread::scope(|s| {
        s.spawn(|| (0..n as u64).map(|i| timers.schedule(delay, Holding(i, drops.clone())).expect("room")).collect())
            .join()
            .expect("the arming thread")
    });
    let deadline = Instant::now() + PATIENCE;
    while !timers.shard_at(0).mailbox.is_full() {
        assert!(Instant::now() < deadline, "the shard took the exited thread's stage and reached the mark");
        std::thread::sleep(Duration::from_millis(1));
    }
    filed
}

/// Schedules until the gate lets one through (each refusal wakes the shard to read the
/// cancels since); returns how many were refused, each with its task handed back.
fn schedule_until_room(timers: &TimerService, drops: &Arc<AtomicUsize>) -> (Timeout, u64) {
    let deadline = Instant::now() + PATIENCE;
    let mut refused = 0;
    loop {
        match timers.schedule(FAR, Holding(7, drops.clone())) {
            Ok(t) => return (t, refused),
            Err(ScheduleError::Rejected(task)) => assert_eq!(task.0, 7, "the very task"),
            Err(e) => panic!("expected Rejected, got {e}"),
        }
        refused += 1;
        assert!(Instant::now() < deadline, "room never came back");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// (1) Past the high-water mark, `schedule` refuses with `Rejected(task)`, the very task
/// back, counted in `stats().rejected`; between the marks it still refuses; at the low mark
/// (cancels the shard has read) room comes back. Before the gate, such a schedule returned
/// `Ok` and the shard later dropped its task.
#[test]
fn schedule_past_the_mark_is_rejected_with_its_task_and_room_comes_back() {
    let timers = service();
    let drops = Arc::new(AtomicUsize::new(0));
    let mut filed = fill(&timers, 60, &drops);
    match timers.schedule(FAR, Holding(42, drops.clone())) {
        Err(ScheduleError::Rejected(task)) => assert_eq!(task.0, 42),
        other => panic!("expected Rejected at the mark, got {other:?}"),
    }
    let stats = timers.stats();
    assert_eq!((stats.rejected, stats.pending, stats.cancelled), (1, 60, 0));
    // Down to 57, between the marks: read by the shard (the refusal wakes it), still full.
    for t in filed.drain(..3) {
        assert!(t.cancel());
    }
    assert!(matches!(timers.schedule(FAR, || {}), Err(ScheduleError::Rejected(_))));
    let deadline = Instant::now() + PATIENCE;
    while timers.stats().queued > 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(matches!(timers.schedule(FAR, || {}), Err(ScheduleError::Rejected(_))), "between the marks: full");
    // Down to 56, the low mark: room again.
    assert!(filed.pop().unwrap().cancel());
    let (next, refused) = schedule_until_room(&timers, &drops);
    assert_eq!(timers.stats().rejected, 3 + refused);
    assert_eq!(next.state(), TimeoutState::Pending);
    let unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 57);
    drop((unfired, filed, next));
    assert_eq!(drops.load(Ordering::SeqCst), 60 + 1 + refused as usize + 1, "each task dropped once");
}

/// FULL clears when the wheel empties by expiry, not only by cancels: the shard checks the
/// low mark after it fires (a wheel full of timeouts that all fire, none cancelled, would
/// otherwise refuse every schedule for good).
/// On a paused clock, so that the check at the mark comes before the expiry however slow
/// the machine (valgrind, a mutation run), and the test takes no real time for it.
#[test]
fn full_clears_once_the_timeouts_at_the_mark_have_fired() {
    let mut builder = TimerService::builder().shards(1).pin_threads(false);
    builder.wheel_limit = Some(LIMIT);
    let (timers, clock) = builder.build_paused().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let filed = fill_due(&timers, 60, Duration::from_secs(3), &drops);
    assert!(matches!(timers.schedule(FAR, || {}), Err(ScheduleError::Rejected(_))), "at the mark: full");
    assert!(filed.iter().all(|t| t.state() == TimeoutState::Pending), "none fired before the clock moved");
    clock.advance(Duration::from_secs(3));
    let (next, _) = schedule_until_room(&timers, &drops);
    assert!(filed.iter().all(|t| t.state() == TimeoutState::Expired), "the room came from their expiry");
    assert_eq!(next.state(), TimeoutState::Pending);
    assert_eq!(timers.stats().expired, 60, "the sixty");
}

/// (3) A series at the mark: `schedule_repeating` refuses with its closure back; a running
/// series whose re-arm (on the shard's own thread) meets the mark ends, its handle
/// cancelled, counted as rejected; nothing of it is left pending.
#[test]
fn a_series_at_the_mark_is_refused_and_a_running_one_ends() {
    let timers = service();
    let drops = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let series = timers
        .schedule_repeating(Duration::ZERO, Duration::from_millis(20), Missed::Skip, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while runs.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    // 59 and the series' waiting run: 60, the mark.
    let filed = fill(&timers, 59, &drops);
    let flag = Arc::new(AtomicUsize::new(0));
    let mine = flag.clone();
    match timers.schedule_repeating(FAR, FAR, Missed::Skip, move || {
        mine.fetch_add(1, Ordering::SeqCst);
    }) {
        Err(ScheduleError::Rejected(mut task)) => task(),
        other => panic!("expected Rejected, got {other:?}"),
    }
    assert_eq!(flag.load(Ordering::SeqCst), 1, "the very closure came back");
    while !series.is_cancelled() {
        assert!(Instant::now() < deadline, "the running series ends at its next re-arm");
        std::thread::sleep(Duration::from_millis(1));
    }
    let ran = runs.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(runs.load(Ordering::SeqCst), ran, "no run after the series ended");
    assert_eq!(timers.stats().rejected, 2);
    assert_eq!(timers.pending(), 59);
    drop(filed);
    assert_eq!(timers.stop().unwrap().len(), 59);
}

/// (2) A `Sleep` at the limit: one in flight (on its thread's stage) when the wheel filled
/// is refused by the shard's backstop, which wakes it; polled again it registers again, is
/// refused at the mark, and waits on the overflow timer (as at `max_pending_per_shard`),
/// never a panic, a wait that cannot end, nor a "stopped" service; it completes at its
/// deadline, never early. A new sleep at the mark overflows the same way. Before the gate,
/// the woken sleep ended as on a stopped service (`Err(Stopped)`) with the service running;
/// before the overflow timer, it panicked. On a paused clock, so that the sleep's stage
/// never comes due on its own, however slow the machine (and with a deadline an hour off,
/// so that the overflow timer, which keeps real time, never reaches it during the test).
#[test]
fn a_sleep_at_the_limit_overflows_and_completes_at_its_deadline() {
    let mut builder = TimerService::builder().shards(1).pin_threads(false);
    builder.wheel_limit = Some(LIMIT);
    let (timers, clock) = builder.build_paused().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let flag = Arc::new(WakeCount::default());
    let waker = Waker::from(flag.clone());
    let delay = Duration::from_secs(3600);
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    let (polled_tx, polled_rx) = mpsc::channel::<()>();
    let (timers2, waker2) = (timers.clone(), waker.clone());
    let holder = std::thread::spawn(move || {
        let mut sleep = Box::pin(timers2.sleep(delay));
        assert!(sleep.as_mut().try_poll(&mut Context::from_waker(&waker2)).is_pending());
        polled_tx.send(()).unwrap();
        exit_rx.recv().unwrap();
        // Its exit hands its stage, the sleep's cell in it, to the shard.
        sleep
    });
    polled_rx.recv().unwrap();
    // The shard has read the stage's announcement (and filed it at the sleep's deadline):
    // read only after the thread's exit, it would find the stage retired, due now, and take
    // the sleep before the 64 below.
    let deadline = Instant::now() + PATIENCE;
    while timers.stats().queued > 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    // 64 in the wheel, its very limit: this thread's ring, retired by a 65th arm.
    let mut filed: Vec<Timeout> = (0..65).map(|i| timers.schedule(FAR, Holding(i, drops.clone())).unwrap()).collect();
    exit_tx.send(()).unwrap();
    let mut sleep = holder.join().unwrap();
    while flag.woken() == 0 {
        assert!(Instant::now() < deadline, "the backstop wakes the sleep it refused");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(timers.stats().rejected, 1, "the backstop's refusal");
    assert!(!sleep.is_elapsed());
    let mut cx = Context::from_waker(&waker);
    assert!(sleep.as_mut().try_poll(&mut cx).is_pending(), "refused at the mark: it overflows, no panic");
    assert_eq!((timers.stats().rejected, timers.stats().overflowed), (2, 1));
    let mut another = Box::pin(timers.sleep(Duration::from_millis(1)));
    assert!(another.as_mut().try_poll(&mut cx).is_pending(), "a new sleep at the mark overflows too");
    assert_eq!((timers.stats().rejected, timers.stats().overflowed), (3, 2));
    drop(another);
    for t in filed.drain(..) {
        t.cancel();
    }
    assert!(sleep.as_mut().try_poll(&mut cx).is_pending(), "still waiting");
    clock.advance(delay - Duration::from_millis(1));
    assert!(sleep.as_mut().try_poll(&mut cx).is_pending(), "never early");
    clock.advance(Duration::from_millis(1));
    assert_eq!(sleep.as_mut().try_poll(&mut cx), Poll::Ready(Ok(())), "completes at its deadline");
    assert!(timers.stop().unwrap().is_empty());
}

/// `threads` threads each arm `each` far timeouts (task `task(n)` for the `n`th of all) and
/// exit together, so that every arm read the gate open (the wheel empty) and they reach the
/// shard at once; returns their timeouts once the shard's backstop has refused all past the
/// limit.
fn past_the_limit_at_once<T: TimerTask>(
    timers: &TimerService,
    threads: usize,
    each: usize,
    task: impl Fn(usize) -> T + Send + Sync + 'static,
) -> Vec<Timeout> {
    let task = Arc::new(task);
    // Every arm before any thread exits: then every one read the gate open.
    let armed = Arc::new(std::sync::Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (timers, armed, task) = (timers.clone(), armed.clone(), task.clone());
            std::thread::spawn(move || {
                let mine: Vec<_> = (0..each).map(|i| timers.schedule(FAR, task(t * each + i)).ok().unwrap()).collect();
                armed.wait();
                mine
            })
        })
        .collect();
    let all: Vec<Timeout> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let refused = threads * each - LIMIT;
    let deadline = Instant::now() + PATIENCE;
    while all.iter().filter(|t| t.is_cancelled()).count() < refused {
        assert!(Instant::now() < deadline, "the backstop refuses what is past the limit");
        std::thread::sleep(Duration::from_millis(1));
    }
    all
}

/// (4) The backstop with many in flight: threads whose arms all read the gate open (the
/// wheel empty) and reach the shard together as they exit. The first 64 are filed (the
/// wheel's limit); each one past it is cancelled by the shard and its task dropped exactly
/// once, never run, counted as rejected and cancelled; the shard goes on and refuses the
/// next schedule at the gate.
#[test]
fn the_backstop_refuses_what_was_in_flight_past_the_limit_and_the_shard_goes_on() {
    const THREADS: usize = 4;
    const EACH: usize = 60;
    let timers = service();
    let drops = Arc::new(AtomicUsize::new(0));
    let task_drops = drops.clone();
    let all = past_the_limit_at_once(&timers, THREADS, EACH, move |i| Holding(i as u64, task_drops.clone()));
    let refused = THREADS * EACH - LIMIT;
    assert_eq!(all.iter().filter(|t| t.state() == TimeoutState::Pending).count(), LIMIT);
    assert_eq!(drops.load(Ordering::SeqCst), refused, "each refused task dropped once");
    let stats = timers.stats();
    assert_eq!(
        (stats.rejected, stats.cancelled, stats.pending, stats.expired),
        (refused as u64, refused as u64, 64, 0)
    );
    assert!(matches!(timers.schedule(FAR, || {}), Err(ScheduleError::Rejected(_))), "the gate is shut");
    assert_eq!(timers.stats().failed_shards, 0);
    let unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), LIMIT);
    drop((unfired, all));
    assert_eq!(drops.load(Ordering::SeqCst), THREADS * EACH);
}

/// CLOSED outranks FULL wherever both can be set: the refusal's cold path reads CLOSED
/// first, so a stopped or failed shard says so (`Shutdown`, `ShardFailed`, a sleep's
/// `Err(Stopped)`), never "full, try again" (`Rejected`), which would send a caller into a
/// retry loop against a service that will never take another timeout. The bare check, then
/// each way a shard gets closed while full, on every schedule path (plain, series, sleep).
#[test]
fn the_cold_path_reads_closed_before_full() {
    use super::{Refusal, refusal};
    use crate::mailbox::{CLOSED, FULL};
    let timers = service();
    let shard = timers.shard_at(0);
    assert_eq!(refusal(shard, CLOSED | FULL, false), Some(Refusal::Closed));
    assert_eq!(refusal(shard, CLOSED, false), Some(Refusal::Closed));
    assert_eq!(refusal(shard, FULL, false), Some(Refusal::Full));
    assert_eq!(refusal(shard, 0, false), None);
    // Routed as the shard's driver, but not free to file into its wheel (this thread is
    // not the driver; on the driver's, a turn under way, as in a task's destructor): closed
    // to it as to any other thread. Only the driver, free, files in its last turn (below).
    assert_eq!(refusal(shard, CLOSED, true), Some(Refusal::Closed));
    assert_eq!(timers.stats().rejected, 1, "only the refusal that answered Full is counted");
    drop(timers.stop());
}

/// DRAINING (a graceful stop under way) outranks FULL as CLOSED does, and, unlike CLOSED,
/// refuses the shard's own thread too: the drain refuses every new timeout.
#[test]
fn the_cold_path_reads_draining_before_full_and_for_the_driver_too() {
    use super::{Refusal, refusal};
    use crate::mailbox::{CLOSED, DRAINING, FULL};
    let timers = service();
    let shard = timers.shard_at(0);
    assert_eq!(refusal(shard, DRAINING | FULL, false), Some(Refusal::Closed));
    assert_eq!(refusal(shard, DRAINING, false), Some(Refusal::Closed));
    assert_eq!(refusal(shard, DRAINING | CLOSED, false), Some(Refusal::Closed));
    assert_eq!(timers.stats().rejected, 0, "a draining shard's refusals are not rejections");
    let (tx, rx) = mpsc::channel();
    let t = timers.clone();
    timers
        .schedule(Duration::ZERO, move || {
            let shard = t.shard_at(0);
            let on_its_thread = |gate| refusal(shard, gate, true);
            tx.send((on_its_thread(DRAINING), on_its_thread(CLOSED), on_its_thread(DRAINING | FULL))).unwrap();
        })
        .unwrap();
    let (draining, closed, draining_full) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(draining, Some(Refusal::Closed), "the driver is refused while draining");
    assert_eq!(closed, None, "but files into its wheel in its last turn");
    assert_eq!(draining_full, Some(Refusal::Closed));
    drop(timers.stop());
}

/// The service stopped with its shard at the mark: FULL stays set in the closed mailbox,
/// and every schedule still says `Shutdown`, its task handed back, none counted rejected.
#[test]
fn a_shard_stopped_while_full_answers_shutdown() {
    let timers = service();
    let drops = Arc::new(AtomicUsize::new(0));
    let filed = fill(&timers, 60, &drops);
    assert!(matches!(timers.schedule(FAR, || {}), Err(ScheduleError::Rejected(_))), "full before the stop");
    assert!(timers.shard_at(0).mailbox.is_full());
    assert_eq!(timers.stop().unwrap().len(), 60);
    assert!(timers.shard_at(0).mailbox.is_full(), "the stop leaves FULL set: the order of the checks decides");
    let rejected = timers.stats().rejected;
    assert_closed_everywhere(&timers, ScheduleErrorKind::Shutdown);
    assert_eq!(timers.stats().rejected, rejected, "a closed shard's refusals are not rejections");
    drop(filed);
}

/// A shard whose driver failed with its wheel at the mark: `ShardFailed`, not `Rejected`.
#[test]
fn a_shard_failed_while_full_answers_shard_failed() {
    use crate::mailbox::{Command, Sent};
    let timers = service();
    let drops = Arc::new(AtomicUsize::new(0));
    let filed = fill(&timers, 60, &drops);
    assert_eq!(timers.shard_at(0).mailbox.send(Command::Panic, Some(0)), Sent::Delivered);
    let deadline = Instant::now() + PATIENCE;
    while timers.stats().failed_shards == 0 {
        assert!(Instant::now() < deadline, "the shard is marked failed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(timers.shard_at(0).mailbox.is_full());
    let rejected = timers.stats().rejected;
    assert_closed_everywhere(&timers, ScheduleErrorKind::ShardFailed);
    assert_eq!(timers.stats().rejected, rejected);
    assert_eq!(timers.stop().unwrap().len(), 60, "the failed shard hands back what it held");
    drop(filed);
}

/// Every schedule path on a closed (and full) one-shard service: `schedule` and
/// `schedule_repeating` refuse with `expected`, their task handed back; a sleep ends as on a
/// stopped service (`Err(Stopped)`, no panic), or, with its one shard failed and no other to
/// move to, waits on the overflow timer (no panic).
fn assert_closed_everywhere(timers: &TimerService, expected: ScheduleErrorKind) {
    for _ in 0..2 {
        match timers.schedule(FAR, Holding(5, Arc::new(AtomicUsize::new(0)))) {
            Err(e) => {
                assert_eq!(e.kind(), expected, "{e}");
                assert_eq!(e.into_task().0, 5, "the very task");
            }
            Ok(_) => panic!("expected {expected:?}, got Ok"),
        }
        match timers.schedule_repeating(FAR, FAR, Missed::Skip, || {}) {
            Err(e) => assert_eq!(e.kind(), expected, "a series: {e}"),
            Ok(_) => panic!("a series: expected {expected:?}, got Ok"),
        }
        let flag = Arc::new(WakeCount::default());
        let waker = Waker::from(flag);
        let mut sleep = Box::pin(timers.sleep(Duration::from_millis(1)));
        let mut cx = Context::from_waker(&waker);
        let overflowed = timers.stats().overflowed;
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sleep.as_mut().try_poll(&mut cx)));
        if expected == ScheduleErrorKind::Shutdown {
            assert!(matches!(polled, Ok(Poll::Ready(Err(_)))), "a sleep: ends as stopped, no panic: {polled:?}");
            assert_eq!(timers.stats().overflowed, overflowed);
        } else {
            // Every shard failed (a bug in shardwheel): the sleep waits on the overflow timer.
            assert!(matches!(polled, Ok(Poll::Pending)), "a sleep: overflows, no panic: {polled:?}");
            assert_eq!(timers.stats().overflowed, overflowed + 1);
        }
    }
}

/// A task whose drop panics (with a payload that panics as it is dropped) while `armed`.
struct DropPanics(Arc<std::sync::atomic::AtomicBool>);

impl TimerTask for DropPanics {
    fn run(self: Box<Self>) {}
}

impl Drop for DropPanics {
    fn drop(&mut self) {
        if self.0.load(Ordering::SeqCst) {
            crate::test_panics::panic_with_payload_that_panics(1);
        }
    }
}

/// The backstop's refusal drops each refused task on the shard (`drop_task`): a task whose
/// drop panics, with a payload that panics too, is caught whole, twice per refused task,
/// and the shard neither fails nor stops refusing at the gate. (With the payload dropped
/// outside the catch the first refusal failed the shard.)
#[test]
fn the_backstop_catches_a_refused_tasks_panics_and_their_payloads() {
    const THREADS: usize = 2;
    const EACH: usize = 40;
    let timers = service();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let task_armed = armed.clone();
    let _all = past_the_limit_at_once(&timers, THREADS, EACH, move |_| DropPanics(task_armed.clone()));
    let refused = THREADS * EACH - LIMIT;
    // From here the tasks drop quietly: the 64 filed come back from `stop()`, and a failed
    // assertion unwinds without a second panic (which would abort the whole test binary).
    armed.store(false, Ordering::SeqCst);
    let stats = timers.stats();
    assert_eq!(stats.failed_shards, 0, "a refused task's panic never fails the shard");
    assert_eq!((stats.rejected, stats.panicked), (refused as u64, 2 * refused as u64));
    assert!(matches!(timers.schedule(FAR, || {}), Err(ScheduleError::Rejected(_))), "the gate is shut");
    assert_eq!(timers.stop().unwrap().len(), LIMIT);
}
