#![cfg(loom)]
//! The wheel's limit as a refusal (`src/shard/gate.rs`): the driver marks its shard FULL in
//! the mailbox's flag word as its wheel reaches the high-water mark, every schedule reads
//! that word, and the driver refuses what was in flight past the very limit (the backstop).
//! A wheel of 3 here: FULL from 2, cleared at 1.

#[path = "harness.rs"]
mod harness;

use harness::{Counts, Probe, TICK, drop_unfired, model, wait_for_run};
use shardwheel::loom_support::{arm_through_mailbox, freeze_clock, service_with_wheel_limit};
use shardwheel::{ScheduleError, Timeout, TimerService};
use std::time::Duration;

const FAR: Duration = Duration::from_secs(10);

/// What became of one schedule.
enum Fate {
    Scheduled(Timeout),
    /// `Rejected(task)`: the task came back, and was dropped here.
    Refused,
}

fn schedule(timers: &TimerService, delay: Duration, task: Probe) -> Fate {
    match timers.schedule(delay, task) {
        Ok(t) => Fate::Scheduled(t),
        Err(ScheduleError::Rejected(task)) => {
            drop(task);
            Fate::Refused
        }
        Err(e) => panic!("unexpected {e}"),
    }
}

/// Schedules `FAR` until the gate lets one through; each refusal wakes the shard, which must
/// then read the cancels sent since and clear FULL (else this spins until loom gives up).
fn schedule_until_room(timers: &TimerService) -> Timeout {
    loop {
        let (task, _counts) = Probe::new();
        if let Fate::Scheduled(t) = schedule(timers, FAR, task) {
            return t;
        }
        loom::thread::yield_now();
    }
}

/// Every task ended exactly once: dropped once, never run unless `ran`, `cancelled()` never
/// (no model here cancels a task's way but `cancel()`, counted by `cancels`).
fn ended_once(counts: &Counts, ran: bool) {
    assert_eq!(counts.drops(), 1, "dropped exactly once");
    assert_eq!(counts.runs(), usize::from(ran));
}

/// schedule ∥ the shard crossing its high-water mark: two far timeouts fill the wheel to the
/// mark, then a due-now one (`s`) and a far one (`x`) race the shard filing them. Each task is
/// handed back in `Rejected`, or filed (it runs, or is cancelled, or `stop()` hands it back),
/// or refused by the backstop (its timeout reads `Cancelled`, its task dropped unrun): never
/// lost, never two of these. A schedule made after the due-now one ran (so after the shard
/// filed the first two and marked FULL) is refused: the gate is not only the backstop. Once
/// cancels bring the wheel to the low mark, a schedule gets through (the refusal wakes the
/// shard to read them: with one cancel, no backlog wakes it). Time is frozen: the far
/// timeouts never fire.
#[test]
fn schedule_races_the_shard_crossing_its_mark() {
    model("schedule ∥ the shard crossing its high-water mark", || {
        freeze_clock();
        let timers = service_with_wheel_limit(TICK, 3);
        arm_through_mailbox();
        let (p1, c1) = Probe::new();
        let (p2, c2) = Probe::new();
        let (ps, cs) = Probe::new();
        let (px, cx) = Probe::new();
        let (py, cy) = Probe::new();
        let Fate::Scheduled(t1) = schedule(&timers, FAR, p1) else { panic!("below the mark") };
        let Fate::Scheduled(t2) = schedule(&timers, FAR, p2) else { panic!("below the mark") };
        let s = schedule(&timers, Duration::ZERO, ps);
        let x = schedule(&timers, FAR, px);
        let mut refused = 0;
        if let Fate::Scheduled(_) = &s {
            wait_for_run(&cs);
        } else {
            refused += 1;
        }
        // After `s` ran (or was refused): FULL is set, and nothing can clear it yet.
        assert!(matches!(schedule(&timers, FAR, py), Fate::Refused), "past the mark, the gate refuses");
        refused += 1;
        // `x`: refused, filed (then cancelled here), or refused by the backstop.
        let backstopped = match &x {
            Fate::Refused => {
                refused += 1;
                false
            }
            Fate::Scheduled(t) => !t.cancel(),
        };
        if backstopped {
            assert!(matches!(&x, Fate::Scheduled(t) if t.is_cancelled()));
        }
        assert!(t1.cancel());
        let w = schedule_until_room(&timers);
        let unfired = drop_unfired(timers.stop().unwrap());
        assert_eq!(unfired, 2, "t2 and w");
        ended_once(&c1, false);
        ended_once(&c2, false);
        ended_once(&cs, matches!(s, Fate::Scheduled(_)));
        ended_once(&cx, false);
        ended_once(&cy, false);
        assert_eq!(cx.cancels() + c1.cancels(), 1 + usize::from(matches!(x, Fate::Scheduled(_)) && !backstopped));
        let stats = timers.stats();
        assert!(stats.rejected >= refused + u64::from(backstopped));
        assert_eq!(stats.pending, 0);
        drop((t2, w));
    });
}

/// stop ∥ the shard clearing FULL: the wheel is past its mark; one cancel brings it to the
/// low mark, and a refused schedule wakes the shard to clear FULL while another thread
/// stops the service. Clearing FULL must never clear CLOSED (the bits move by `fetch_or`
/// and `fetch_and` of their own): a lost close leaves the shard running and `stop()`
/// waiting for it forever.
#[test]
fn stop_races_the_shard_clearing_full() {
    model("stop ∥ the shard clearing FULL", || {
        freeze_clock();
        let timers = service_with_wheel_limit(TICK, 3);
        arm_through_mailbox();
        let (p1, c1) = Probe::new();
        let (p2, c2) = Probe::new();
        let (ps, cs) = Probe::new();
        let (py, cy) = Probe::new();
        let Fate::Scheduled(t1) = schedule(&timers, FAR, p1) else { panic!("below the mark") };
        let Fate::Scheduled(t2) = schedule(&timers, FAR, p2) else { panic!("below the mark") };
        if let Fate::Scheduled(_) = schedule(&timers, Duration::ZERO, ps) {
            wait_for_run(&cs);
        }
        assert!(t1.cancel());
        let stopper = {
            let timers = timers.clone();
            loom::thread::spawn(move || drop_unfired(timers.stop().unwrap()))
        };
        let y = match timers.schedule(FAR, py) {
            Ok(t) => Some(t),
            Err(ScheduleError::Rejected(_) | ScheduleError::Shutdown(_)) => None,
            Err(e) => panic!("unexpected {e}"),
        };
        let unfired = stopper.join().unwrap();
        assert_eq!(unfired, 1 + usize::from(y.is_some()), "t2, and y if it got through");
        ended_once(&c1, false);
        ended_once(&c2, false);
        ended_once(&cy, false);
        assert!(timers.is_stopped());
        drop((t2, y));
    });
}
