//! The driver's unit tests: its turns, a failed driver, the kept wake-up promise.

use super::keep_promise;
use crate::error::ScheduleError;
use crate::mailbox::{Command, Sent};
use crate::{TimeoutState, TimerService};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long these tests wait for what should happen soon: long, for valgrind's pace (CI
/// runs these tests there). A passing test never waits this long. (The injected panic is
/// sent with deadline 0, so that it wakes a sleeping shard: sent with none, it waited for
/// whatever woke the shard next.)
const PATIENCE: Duration = Duration::from_secs(60);

/// A shard's driver state on the test's thread, no driver thread: its turns are the test's to
/// take. The clock started a second ago, ticks of a millisecond.
fn driver_alone() -> (crate::sync::Arc<crate::shard::Shard>, super::Local) {
    let clock = crate::clock::Clock::new(Instant::now() - Duration::from_secs(1), Duration::from_millis(1));
    let shard = crate::sync::Arc::new(crate::shard::Shard::new(0, u64::MAX, clock, None));
    let local = super::Local::new(shard.clone(), crate::wheel::Wheel::new());
    (shard, local)
}

/// Every source gets a share of every turn: with more stages due than a turn takes, the
/// mail (here an earlier reset's refile notice) is still read in the same turn. The
/// turn used to skip the mail while any stage was still due, so threads whose stages
/// were always due could hold cancel and reset notices back without bound.
#[test]
fn a_turn_reads_its_mail_even_with_more_stages_due_than_it_takes() {
    use crate::entry::EntryRef;
    use crate::stage::Stage;
    use crate::state::Reset;
    use crate::sync::Arc;

    let (shard, mut local) = driver_alone();
    // A timeout in the wheel an hour out, then moved earlier: a refile notice in the mail.
    let now = shard.clock.now_tick();
    let (entry, handle) = EntryRef::new_pair(now + 3_600_000, || {});
    local.arm(entry);
    assert_eq!(handle.state().try_reset(now), Reset::Earlier);
    shard.mailbox.send(Command::Refile(handle.clone()), Some(now));
    // An arm through the mail waits while stages are due (they may hold its thread's
    // older arms), and is filed after them.
    let (armed, armed_handle) = EntryRef::new_pair(now, || {});
    shard.mailbox.send(Command::Arm(armed), Some(now));
    // Twice as many due stages as a turn takes, each holding one due timeout.
    let stages: Vec<_> = (0..2 * super::STAGE_BUDGET)
        .map(|_| {
            let stage = Arc::new(Stage::new());
            let (entry, _handle) = EntryRef::new_pair(0, || {});
            assert!(matches!(stage.push(entry, 0), crate::stage::Push::Staged(_)));
            local.stages.file(&stage);
            stage
        })
        .collect();
    let mut batch = Vec::new();
    assert!(matches!(local.turn(&mut batch), super::Turn::Busy), "stages are left for the next turn");
    assert_eq!(shard.mailbox.len(), 0, "the mail was read in the same turn");
    assert!(!batch.is_empty());
    assert_eq!(local.deferred.len(), 1, "the arm waits for the due stages");
    // The refiled timeout is due now: the next turns fire it.
    for _ in 0..4 {
        local.turn(&mut batch);
    }
    assert_eq!(handle.state().load(), crate::state::State::Expired { deadline: now });
    assert!(local.deferred.is_empty());
    assert_eq!(armed_handle.state().load(), crate::state::State::Expired { deadline: now });
    drop(batch);
    for stage in &stages {
        assert!(stage.is_empty());
    }
    drop(local.shut_down());
}

/// A retired stage is forgotten only once it is empty: one that still holds entries stays
/// filed, so that a turn takes them (or the final drain hands them back), and once a take
/// has emptied it, it is forgotten. A stage not retired stays filed though empty. Twice.
#[test]
fn a_retired_stage_is_forgotten_only_once_nothing_is_left_on_it() {
    use crate::entry::EntryRef;
    use crate::stage::{Push, Stage};
    use crate::sync::Arc;

    let (shard, mut local) = driver_alone();
    let now = shard.clock.now_tick();
    for round in 0..2 {
        let stage = Arc::new(Stage::new());
        let (entry, handle) = EntryRef::new_pair(now + 50, || {});
        assert!(matches!(stage.push(entry, now + 50), Push::Staged(true)));
        assert!(stage.retire(&mut Vec::new()));
        // Retired, its entry unclaimed: filed (due now), not forgotten.
        local.file_or_forget(&stage);
        assert!(stage.key().is_some(), "round {round}: a retired stage holding an entry was forgotten");
        assert_eq!(Arc::strong_count(&stage), 2, "round {round}: the stage wheel holds it");
        // The take empties it: now it is forgotten, and its entry is in the wheel.
        assert_eq!(local.take_stage(&stage), 1);
        assert!(stage.key().is_none(), "round {round}: retired and empty, still filed");
        assert_eq!(Arc::strong_count(&stage), 1, "round {round}: the stage wheel let it go");
        assert_eq!(local.wheel.len(), round + 1);
        // Empty and not retired: filed at what it promises (nothing), kept for the drain.
        let open = Arc::new(Stage::new());
        local.file_or_forget(&open);
        assert!(open.key().is_some(), "round {round}: a stage not retired is forgotten");
        local.stages.forget(&open);
        drop(handle);
    }
    let unfired = local.shut_down();
    assert_eq!(unfired.len(), 2, "both entries were filed and handed back at the stop");
}

/// An arm read from the mail is filed in the drain that reads it when arms may file and no
/// announcement waits; it waits in `deferred`, in the order it came, while arms may not file
/// (a stage is due), and while an announcement waits (a stage that may hold its thread's
/// older arms), and the held ones are filed first once they may. Each condition on its
/// own, then cleared.
#[test]
fn an_arm_from_the_mail_is_filed_at_once_unless_something_must_go_first() {
    use crate::entry::EntryRef;
    use crate::stage::Stage;
    use crate::sync::Arc;

    let (shard, mut local) = driver_alone();
    let now = shard.clock.now_tick();
    let mut handles = Vec::new();
    let mut arm = |deadline: u64| {
        let (entry, handle) = EntryRef::new_pair(deadline, || {});
        shard.mailbox.send(Command::Arm(entry), Some(deadline));
        handles.push(handle);
    };
    // Arms may file, nothing waits: filed in this drain.
    arm(now + 100);
    assert!(!local.drain_mailbox(16, true), "nothing left");
    assert_eq!((local.wheel.len(), local.deferred.len()), (1, 0), "filed at once");
    // Arms may not file: held back, both of them.
    arm(now + 200);
    arm(now + 300);
    assert!(!local.drain_mailbox(16, false));
    assert_eq!((local.wheel.len(), local.deferred.len()), (1, 2), "held while a stage is due");
    // Still may not, with arms held: the held ones stay held, the new one joins them.
    arm(now + 350);
    assert!(!local.drain_mailbox(16, false));
    assert_eq!((local.wheel.len(), local.deferred.len()), (1, 3), "the held ones held still");
    // They may again: the held ones first, then the one from the mail, all in this drain.
    arm(now + 400);
    assert!(!local.drain_mailbox(16, true));
    assert_eq!((local.wheel.len(), local.deferred.len()), (5, 0), "the held ones and the new one filed");
    // An announcement waits: the arm is held back and the drain ends, saying more waits.
    shard.mailbox.announce(Arc::new(Stage::new()), now + 1_000);
    arm(now + 500);
    arm(now + 600);
    assert!(local.drain_mailbox(16, true), "the announcement goes first");
    assert_eq!((local.wheel.len(), local.deferred.len()), (5, 1), "held behind the announcement");
    assert!(shard.mailbox.pop_stage().is_some());
    // The announcement read: the held arm first, then the mail's.
    assert!(!local.drain_mailbox(16, true));
    assert_eq!((local.wheel.len(), local.deferred.len()), (7, 0));
    let unfired = local.shut_down();
    assert_eq!(unfired.len(), 7, "every arm was filed and handed back at the stop");
    drop(handles);
}

/// A turn that leaves work in any one source says `Busy`, so the driver goes round again at
/// once: mail past its budget alone, then timeouts due past the expiry budget alone; and
/// `Idle` once nothing is left.
#[test]
fn a_turn_that_leaves_work_in_any_source_is_busy() {
    use crate::entry::EntryRef;

    let (shard, mut local) = driver_alone();
    let now = shard.clock.now_tick();
    let mut handles = Vec::new();
    // Mail alone: more arms than a turn reads, none of them due.
    for _ in 0..super::MAILBOX_BUDGET + 1 {
        let (entry, handle) = EntryRef::new_pair(now + 3_600_000, || {});
        shard.mailbox.send(Command::Arm(entry), None);
        handles.push(handle);
    }
    let mut batch = Vec::new();
    assert!(matches!(local.turn(&mut batch), super::Turn::Busy), "mail left");
    assert!(matches!(local.turn(&mut batch), super::Turn::Idle(Some(_))), "all read, none due");
    // Due timeouts alone: more than a turn fires.
    for _ in 0..super::EXPIRY_BUDGET + 1 {
        let (entry, handle) = EntryRef::new_pair(now, || {});
        local.arm(entry);
        handles.push(handle);
    }
    assert!(matches!(local.turn(&mut batch), super::Turn::Busy), "due timeouts left");
    assert_eq!(shard.mailbox.len(), 0);
    assert!(matches!(local.turn(&mut batch), super::Turn::Idle(Some(_))), "all fired");
    assert_eq!(batch.len(), super::EXPIRY_BUDGET + 1);
    drop(batch);
    drop(local.shut_down());
    drop(handles);
}

/// Each announcement counts one against a turn's budget, and each entry a due stage hands
/// over one more: announcements of stages not yet due (which hand over nothing) still run out
/// the budget, and the rest wait for the next turn, as do the due stages past it.
#[test]
fn every_announcement_counts_against_the_budget_and_every_entry_it_hands_over() {
    use crate::entry::EntryRef;
    use crate::stage::{Push, Stage};
    use crate::sync::Arc;

    let (shard, mut local) = driver_alone();
    let now = shard.clock.now_tick();
    // A stage holding `n` timeouts at `deadline`, announced.
    let staged = |n: usize, deadline: u64| {
        let stage = Arc::new(Stage::new());
        for _ in 0..n {
            let (entry, _handle) = EntryRef::new_pair(deadline, || {});
            assert!(matches!(stage.push(entry, deadline), Push::Staged(_)));
        }
        shard.mailbox.announce(stage.clone(), stage.due());
        stage
    };
    let later = now + 3_600_000;
    let not_due: Vec<_> = (0..10).map(|_| staged(1, later)).collect();
    assert!(local.drain_announcements(4, now), "more wait");
    assert_eq!(shard.mailbox.len(), 6, "four read, one each");
    assert!(!local.drain_announcements(100, now), "none left");
    assert_eq!(shard.mailbox.len(), 0);
    // Due stages of three entries: four each against the budget.
    let due: Vec<_> = (0..3).map(|_| staged(3, now)).collect();
    assert!(local.drain_announcements(4, now));
    assert_eq!(shard.mailbox.len(), 2, "one stage of three entries spends four");
    assert!(local.drain_announcements(5, now), "two stages spend eight, past five");
    assert_eq!(shard.mailbox.len(), 0);
    assert_eq!(local.wheel.len(), 9, "every due entry taken");
    drop(local.shut_down());
    drop((not_due, due));
}

/// A `Sleep` on a shard whose driver fails is woken, registers again on a shard that
/// runs, and completes on time: a failed shard does not stop the service, so it must
/// neither hang the sleep until `stop()` nor report the service stopped.
#[test]
fn a_sleep_on_a_failed_shard_moves_to_a_shard_that_runs() {
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    let timers = TimerService::builder().shards(2).pin_threads(false).build().unwrap();
    let flag = Arc::new(crate::test_wakers::WakeCount::default());
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let start = Instant::now();
    let mut sleep = Box::pin(timers.sleep(Duration::from_millis(300)));
    assert!(sleep.as_mut().try_poll(&mut cx).is_pending());
    // The sleep registered on this thread's home shard: make that one fail.
    let home = crate::routing::home_shard(2);
    assert_eq!(timers.shard_at(home).mailbox.send(Command::Panic, Some(0)), Sent::Delivered);
    let deadline = Instant::now() + PATIENCE;
    while flag.woken() == 0 {
        assert!(Instant::now() < deadline, "the failed shard wakes the sleep");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!timers.is_stopped());
    // Registered again, on the shard that runs: pending until its deadline, then done.
    assert!(sleep.as_mut().try_poll(&mut cx).is_pending(), "not early, not stopped");
    while sleep.as_mut().try_poll(&mut cx).is_pending() {
        assert!(Instant::now() < deadline, "the sleep completes on the other shard");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(start.elapsed() >= Duration::from_millis(300), "never early");
    // A new sleep from this thread goes past the failed home shard too.
    let mut again = Box::pin(timers.sleep(Duration::from_millis(1)));
    while again.as_mut().try_poll(&mut cx) != Poll::Ready(Ok(())) {
        assert!(Instant::now() < deadline, "a new sleep completes");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(timers.stop().unwrap());
}

/// A driver that panics (a bug, injected here) closes its shard: later schedules there
/// fail with `ShardFailed` and hand the task back, the other shards go on, and `stop()`
/// still hands back what the failed shard held (it used to re-raise the panic, and
/// schedules went on into a mailbox nobody read).
#[test]
fn a_driver_that_panics_closes_its_shard_and_stop_hands_back_what_it_held() {
    let timers = TimerService::builder().shards(2).pin_threads(false).build().unwrap();
    let held = timers.schedule_on(0, Duration::from_secs(3600), || {}).unwrap();
    assert_eq!(timers.shard_at(0).mailbox.send(Command::Panic, Some(0)), Sent::Delivered);
    let deadline = Instant::now() + PATIENCE;
    while timers.stats().failed_shards == 0 {
        assert!(Instant::now() < deadline, "the shard is marked failed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(timers.stats().failed_shards, 1);
    assert!(!timers.is_stopped(), "one shard failed; the service is not stopped");
    match timers.schedule_on(0, Duration::from_millis(1), || assert_eq!(7, 7)) {
        Err(ScheduleError::ShardFailed(task)) => task(),
        other => panic!("expected ShardFailed, got {other:?}"),
    }
    let (tx, rx) = mpsc::channel();
    timers.schedule_on(1, Duration::from_millis(1), move || tx.send(()).unwrap()).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(()), "the other shard still fires");
    let unfired = timers.stop().expect("stop does not re-raise the shard's panic");
    assert!(unfired.iter().any(|u| u.timeout().ptr_eq(&held)), "the failed shard's timeout is handed back");
    assert_eq!(held.state(), TimeoutState::Cancelled);
}

#[test]
fn a_promised_wake_up_is_kept_until_it_passes() {
    assert_eq!(keep_promise(Some(50), None, 10), Some(50));
    assert_eq!(keep_promise(Some(90), Some(50), 10), Some(50), "the earlier promise stands");
    assert_eq!(keep_promise(None, Some(50), 10), Some(50), "even with the wheel emptied");
    assert_eq!(keep_promise(Some(30), Some(50), 10), Some(30), "an earlier deadline wins");
    assert_eq!(keep_promise(Some(90), Some(50), 50), Some(90), "a promise kept is over");
    assert_eq!(keep_promise(None, Some(50), 60), None, "nothing to do: sleep without a timeout");
    assert_eq!(keep_promise(None, None, 60), None);
}

/// At its wheel's limit (2³² entries, shrunk to 64 here) a shard refuses timeouts and never
/// fails: each entry past the limit is cancelled (its timeout reads `Cancelled`), its task
/// dropped, counted as rejected and as cancelled (so the stats still add up); once the wheel
/// has room, the next entry is filed. The slab's `expect` used to fail the shard there.
#[test]
fn a_wheel_at_its_limit_refuses_timeouts_and_the_shard_goes_on() {
    use crate::clock::Clock;
    use crate::entry::EntryRef;
    use crate::shard::Shard;
    use crate::state::State;
    use crate::stats::Stats;
    use crate::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const LIMIT: usize = 64;
    let clock = Clock::new(Instant::now() - Duration::from_secs(1), Duration::from_millis(1));
    let shard = Arc::new(Shard::new(0, u64::MAX, clock, None));
    let mut local = super::Local::new(shard.clone(), crate::wheel::Wheel::with_limit(LIMIT));
    let dropped = std::sync::Arc::new(AtomicUsize::new(0));
    struct Counted(std::sync::Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let far = shard.clock.now_tick() + 3_600_000;
    let arm = |local: &mut super::Local| {
        let counted = Counted(dropped.clone());
        let (entry, handle) = EntryRef::new_pair(far, move || drop(counted));
        local.arm(entry);
        handle
    };
    // Ten more than the wheel holds, in flight before the shard looks.
    let handles: Vec<_> = (0..LIMIT + 10).map(|_| arm(&mut local)).collect();
    let pending = |h: &EntryRef| matches!(h.state().load(), State::Pending { .. });
    assert_eq!(local.wheel.len(), LIMIT);
    assert!(handles[..LIMIT].iter().all(pending));
    assert!(
        handles[LIMIT..].iter().all(|h| matches!(h.state().load(), State::Cancelled { .. })),
        "the ten past the limit are refused"
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 10, "their tasks dropped on the shard");
    assert!(shard.mailbox.is_full(), "marked FULL from 60 of 64 (`gate.rs`): schedules are refused");
    let mut stats = Stats::default();
    shard.counters.add_to(&mut stats);
    assert_eq!(stats.rejected, 10);
    assert_eq!(shard.cancelled(), 10, "counted as cancelled: the stats still add up");
    // One cancelled and unlinked: room for the next.
    let (task, _) = handles[0].cancel().expect("pending");
    drop(task);
    local.unlink(handles[0].clone());
    let next = arm(&mut local);
    assert!(pending(&next), "room again: filed");
    let mut batch = Vec::new();
    local.turn(&mut batch);
    assert!(!shard.has_failed());
    drop((handles, next));
    drop(local.shut_down());
}

/// A task whose drop panics with a payload that panics as it is dropped (three panics in
/// all: the task's, and each payload's).
struct DropPanicsThrice;

impl crate::TimerTask for DropPanicsThrice {
    fn run(self: Box<Self>) {}
}

impl Drop for DropPanicsThrice {
    fn drop(&mut self) {
        crate::test_panics::panic_with_payload_that_panics(2);
    }
}

/// The panics a shard's counters hold.
fn panicked(shard: &crate::shard::Shard) -> u64 {
    let mut stats = crate::Stats::default();
    shard.counters.add_to(&mut stats);
    stats.panicked
}

/// `drop_task`, the one way the driver drops a task it took back (the backstop's refusal,
/// a failed shard's wake-ups, an abandoned shard's tasks): every panic caught, the
/// payloads' own too, each counted, and nothing unwinds into the driver. A plain
/// `catch_unwind(..).is_err()` drops the payload outside the catch, and the payload's
/// panic would fail the shard. Twice, so a drop that only catches the first is seen.
#[test]
fn drop_task_catches_a_payload_that_panics_on_drop() {
    use crate::clock::Clock;
    use crate::entry::EntryRef;
    use crate::shard::Shard;
    use crate::sync::Arc;

    let clock = Clock::new(Instant::now(), Duration::from_millis(1));
    let shard = Arc::new(Shard::new(0, u64::MAX, clock, None));
    for round in 1..=2 {
        let (entry, _handle) = EntryRef::new_pair(u64::MAX, DropPanicsThrice);
        let (task, _) = entry.cancel().expect("pending: the cancel takes the task");
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| super::drop_task(&shard, task)));
        if let Err(payload) = dropped {
            // Not dropped: it would panic again while this test unwinds, and abort.
            std::mem::forget(payload);
            panic!("round {round}: a panic unwound out of drop_task");
        }
        assert_eq!(panicked(&shard), 3 * round, "each panic counted, the payloads' own included");
    }
}

/// A failed shard's path to `drop_task`: the wake-ups of the sleeps it held are dropped
/// (each wakes its task) before the rest is handed back. A waker that panics with a payload
/// that panics on drop: both panics are caught and counted, and `stop()` still joins the
/// shard's thread and hands back the timeout it held (a panic out of the thread would
/// re-raise in `stop()` and lose it).
#[test]
fn a_failed_shard_catches_a_wakers_panic_and_its_payloads() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake, Waker};

    struct PanickingWaker(AtomicUsize);
    impl Wake for PanickingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
            crate::test_panics::panic_with_payload_that_panics(1);
        }
    }
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let held = timers.schedule(Duration::from_secs(3600), || {}).unwrap();
    let woken = Arc::new(PanickingWaker(AtomicUsize::new(0)));
    let waker = Waker::from(woken.clone());
    let mut sleeps: Vec<_> = (0..2).map(|_| Box::pin(timers.sleep(Duration::from_secs(3600)))).collect();
    for sleep in &mut sleeps {
        assert!(sleep.as_mut().try_poll(&mut Context::from_waker(&waker)).is_pending());
    }
    assert_eq!(timers.shard_at(0).mailbox.send(Command::Panic, Some(0)), Sent::Delivered);
    let deadline = Instant::now() + PATIENCE;
    while timers.stats().failed_shards == 0 || woken.0.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the shard fails and wakes both sleeps");
        std::thread::sleep(Duration::from_millis(1));
    }
    let unfired = timers.stop().expect("stop does not re-raise a panic");
    assert_eq!(unfired.len(), 1);
    assert!(unfired[0].timeout().ptr_eq(&held), "the failed shard's timeout is handed back");
    assert_eq!(timers.stats().panicked, 2 * 2, "each waker's panic and its payload's, caught and counted");
}

/// On its driver's thread (its `Local` installed, as `run` does), an arm files straight into
/// the wheel, and `drives` says so; an arm for another shard comes back to its caller (to go
/// through that shard's stage or mail), and so does one made while the driver is borrowed
/// (inside a turn), or on a thread with no driver.
#[test]
fn schedule_local_files_only_its_own_shards_arms_and_only_when_free() {
    use crate::entry::EntryRef;

    let (shard, local) = driver_alone();
    let (other, _other_local) = driver_alone();
    let now = shard.clock.now_tick();
    let mut handles = Vec::new();
    let mut entry = |deadline: u64| {
        let (entry, handle) = EntryRef::new_pair(deadline, || {});
        handles.push(handle);
        entry
    };
    assert!(super::schedule_local(&shard, entry(now + 100)).is_err(), "no driver on this thread");
    assert!(!super::drives(&shard));
    super::LOCAL.with(|l| *l.borrow_mut() = Some(local));
    assert!(super::drives(&shard) && !super::drives(&other));
    assert!(super::schedule_local(&shard, entry(now + 100)).is_ok(), "its own shard: filed");
    assert!(super::schedule_local(&other, entry(now + 200)).is_err(), "another shard's arm comes back");
    let refused_mid_turn = super::LOCAL.with(|l| {
        let _turn = l.borrow_mut();
        super::schedule_local(&shard, entry(now + 300)).is_err()
    });
    assert!(refused_mid_turn, "inside a turn: back to the caller");
    let mut local = super::LOCAL.with(|l| l.borrow_mut().take()).expect("installed above");
    assert_eq!(local.wheel.len(), 1, "only the one arm filed");
    assert_eq!(local.shut_down().len(), 1);
    drop(handles);
}

/// A driver thread is its shard's driver while the shard runs there and no longer: a
/// thread-local's destructor on that thread runs after the driver has returned, and routes
/// as any other thread does (its home shard), not as the driver of the shard it drove (an
/// arm without a shard then goes there, and `stop()` is refused as on a timer thread).
#[test]
fn a_driver_thread_stops_being_the_driver_once_its_shard_returns() {
    use std::cell::RefCell;

    type Seen = (&'static str, Result<usize, usize>);
    struct AtExit {
        timers: TimerService,
        tx: mpsc::Sender<Seen>,
    }
    impl Drop for AtExit {
        fn drop(&mut self) {
            let _ = self.tx.send(("at exit", self.timers.route_or_home()));
        }
    }
    thread_local! {
        static AT_EXIT: RefCell<Option<AtExit>> = const { RefCell::new(None) };
    }

    let timers = TimerService::builder().shards(2).pin_threads(false).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let on_driver = timers.clone();
    timers
        .schedule_on(1, Duration::ZERO, move || {
            tx.send(("in a task", on_driver.route_or_home())).unwrap();
            AT_EXIT.with(|at_exit| *at_exit.borrow_mut() = Some(AtExit { timers: on_driver, tx }));
        })
        .unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(("in a task", Ok(1))), "a task runs on its shard's driver");
    assert!(timers.stop().unwrap().is_empty());
    match rx.recv_timeout(PATIENCE) {
        Ok(("at exit", Err(_home))) => {}
        other => panic!("the thread's exit routes as a plain thread's, got {other:?}"),
    }
}
