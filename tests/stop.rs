//! `TimerService::stop` and dropping the last clone: every unfired timeout comes back,
//! nothing is lost, nothing twice.

mod common;

use common::{ChanTask, DropCounter, Kind, PATIENCE, next_event, wait_until};
use shardwheel::{ScheduleError, StopError, TimerService, TimerTask};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const FAR: Duration = Duration::from_secs(3600);

/// A task with an id that records, per id, how often it ran and how often it was told it
/// was cancelled.
struct Counted {
    id: usize,
    ran: Arc<[AtomicU8]>,
    cancelled: Arc<AtomicUsize>,
}

impl TimerTask for Counted {
    fn run(self: Box<Self>) {
        self.ran[self.id].fetch_add(1, Ordering::SeqCst);
    }
    fn cancelled(self: Box<Self>) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
    }
}

fn slots(n: usize) -> Arc<[AtomicU8]> {
    (0..n).map(|_| AtomicU8::new(0)).collect()
}

#[test]
fn stop_returns_every_pending_timeout_including_those_still_in_a_mailbox() {
    const N: usize = 3000;
    let timers = TimerService::builder().shards(2).build().unwrap();
    let ran = slots(N);
    let cancelled = Arc::new(AtomicUsize::new(0));
    // A burst from another thread, through the mailboxes, and stop at once.
    let timeouts = std::thread::scope(|s| {
        s.spawn(|| {
            (0..N)
                .map(|id| {
                    let task = Counted { id, ran: ran.clone(), cancelled: cancelled.clone() };
                    timers.schedule_on(id % 2, FAR, task).unwrap()
                })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap()
    });
    let unfired = timers.stop().expect("stop from a user thread");
    assert_eq!(unfired.len(), N, "stop() must return every pending timeout");
    assert!(timeouts.iter().all(|t| t.is_cancelled()), "every handle must now read Cancelled");
    for u in unfired {
        assert!(u.timeout().is_cancelled());
        assert!(timeouts.iter().any(|t| t.ptr_eq(u.timeout())), "stop() returned a timeout nobody scheduled");
        u.into_task().run();
    }
    // Running each returned task once marked each id once: each was the right task, once.
    for (id, slot) in ran.iter().enumerate() {
        assert_eq!(slot.load(Ordering::SeqCst), 1, "task {id} came back {} times", slot.load(Ordering::SeqCst));
    }
    assert_eq!(cancelled.load(Ordering::SeqCst), 0, "stop() must not call cancelled()");
    let stats = timers.stats();
    assert_eq!((stats.scheduled, stats.unfired, stats.pending, stats.cancelled), (N as u64, N as u64, 0, 0));
    assert_eq!(timers.pending(), 0);
}

/// Deterministically in the mailbox: while the shard thread is held inside a task, nothing
/// it is sent can reach its wheel. `stop()` must return those timeouts too, even ones that
/// were already due, and must wait for the running task.
#[test]
fn stop_returns_timeouts_still_in_the_mailbox_of_a_busy_shard() {
    const N: usize = 500;
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (held_tx, held_rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    timers
        .schedule(Duration::ZERO, move || {
            held_tx.send(()).unwrap();
            let _ = gate_rx.recv();
        })
        .unwrap();
    held_rx.recv_timeout(PATIENCE).expect("the holding task runs");
    let ran = slots(N);
    let cancelled = Arc::new(AtomicUsize::new(0));
    let timeouts: Vec<_> = (0..N)
        .map(|id| {
            // Half of them due at once: they still cannot fire, the shard is busy.
            let delay = if id % 2 == 0 { Duration::ZERO } else { FAR };
            timers.schedule(delay, Counted { id, ran: ran.clone(), cancelled: cancelled.clone() }).unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        let stopper = s.spawn(|| timers.stop().unwrap());
        assert!(wait_until(|| timers.is_stopped(), PATIENCE));
        assert!(!stopper.is_finished(), "stop() must wait for the running task");
        gate_tx.send(()).unwrap();
        let unfired = stopper.join().unwrap();
        assert_eq!(unfired.len(), N);
        assert!(timeouts.iter().all(|t| t.is_cancelled()));
        for u in unfired {
            u.into_task().run();
        }
    });
    assert!(ran.iter().all(|s| s.load(Ordering::SeqCst) == 1), "each task comes back exactly once");
    assert_eq!(cancelled.load(Ordering::SeqCst), 0);
    let stats = timers.stats();
    assert_eq!((stats.expired, stats.unfired, stats.pending), (1, N as u64, 0));
}

#[test]
fn stop_does_not_return_fired_or_cancelled_timeouts() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let (tx, rx) = mpsc::channel();
    timers.schedule(Duration::ZERO, ChanTask::new(0, &tx)).unwrap();
    let cancelled = timers.schedule(FAR, ChanTask::new(1, &tx)).unwrap();
    let kept = timers.schedule(FAR, ChanTask::new(2, &tx)).unwrap();
    let event = next_event(&rx);
    assert_eq!((event.id, event.kind), (0, Kind::Ran));
    assert!(cancelled.cancel());
    let unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 1);
    assert!(unfired[0].timeout().ptr_eq(&kept));
    assert!(kept.is_cancelled());
    // The handle can no longer cancel it: stop() already did, without calling cancelled().
    assert!(!kept.cancel());
    let event = next_event(&rx);
    assert_eq!((event.id, event.kind), (1, Kind::Cancelled), "only the real cancel reports");
    assert!(rx.try_recv().is_err());
}

#[test]
fn a_second_stop_returns_an_empty_list() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    let clone = timers.clone();
    timers.schedule(FAR, || ()).unwrap();
    assert_eq!(timers.stop().unwrap().len(), 1);
    assert!(timers.stop().unwrap().is_empty());
    assert!(clone.stop().unwrap().is_empty(), "clones share the shards, and their stop");
}

#[test]
fn concurrent_stops_return_each_timeout_once_between_them() {
    const N: usize = 200;
    let timers = TimerService::builder().shards(2).build().unwrap();
    for _ in 0..N {
        timers.schedule(FAR, || ()).unwrap();
    }
    let start = Barrier::new(3);
    let lens: Vec<usize> = std::thread::scope(|s| {
        let stoppers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    timers.stop().unwrap().len()
                })
            })
            .collect();
        stoppers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(lens.iter().sum::<usize>(), N, "{lens:?}");
    assert_eq!(lens.iter().filter(|&&n| n > 0).count(), 1, "one stop gets them all: {lens:?}");
}

#[test]
fn schedule_after_stop_fails_with_shutdown_and_hands_the_task_back() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    let (tx, rx) = mpsc::channel();
    timers.stop().unwrap();
    let back = match timers.schedule(Duration::ZERO, ChanTask::new(7, &tx)) {
        Err(ScheduleError::Shutdown(task)) => task,
        other => panic!("expected Shutdown, got {other:?}"),
    };
    assert_eq!(back.id, 7);
    let err = timers.schedule_at(std::time::Instant::now(), ChanTask::new(8, &tx)).unwrap_err();
    assert!(matches!(err, ScheduleError::Shutdown(_)));
    assert_eq!(err.into_task().id, 8);
    let err = timers.schedule_on(1, Duration::ZERO, ChanTask::new(9, &tx)).unwrap_err();
    assert!(matches!(err, ScheduleError::Shutdown(_)));
    // The task handed back is the caller's, and works.
    Box::new(err.into_task()).run();
    assert_eq!(next_event(&rx).id, 9);
    let stats = timers.stats();
    assert_eq!((stats.scheduled, stats.pending), (0, 0), "a refused schedule is not counted");
}

#[test]
fn stop_from_a_timer_thread_is_an_error_not_a_deadlock() {
    let timers = TimerService::builder().shards(2).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let inside = timers.clone();
    timers
        .schedule_on(1, Duration::ZERO, move || {
            tx.send(inside.stop().map(|list| list.len())).unwrap();
        })
        .unwrap();
    let result = rx.recv_timeout(PATIENCE).expect("the task ran and did not deadlock");
    assert_eq!(result, Err(StopError::OnTimerThread));
    // The failed stop stopped nothing.
    let (tx, rx) = mpsc::channel();
    timers.schedule_on(1, Duration::ZERO, ChanTask::new(0, &tx)).unwrap();
    assert_eq!(next_event(&rx).kind, Kind::Ran);
    assert!(timers.stop().is_ok());
}

/// Sends a message from a thread-local destructor: received once the thread has exited.
struct OnThreadExit(mpsc::Sender<String>);

impl Drop for OnThreadExit {
    fn drop(&mut self) {
        let _ = self.0.send(std::thread::current().name().unwrap_or("?").to_owned());
    }
}

thread_local! {
    static EXIT_SIGNAL: std::cell::RefCell<Option<OnThreadExit>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn dropping_the_last_clone_stops_the_shards_and_drops_pending_tasks() {
    const N: usize = 100;
    let timers = TimerService::builder().shards(2).thread_name("drop-test").build().unwrap();
    let drops = DropCounter::new(N);
    let (exit_tx, exit_rx) = mpsc::channel();
    let (tx, rx) = mpsc::channel();
    // Plant an exit signal on each shard thread.
    for shard in 0..2 {
        let exit_tx = exit_tx.clone();
        let tx = tx.clone();
        timers
            .schedule_on(shard, Duration::ZERO, move || {
                EXIT_SIGNAL.with(|s| *s.borrow_mut() = Some(OnThreadExit(exit_tx)));
                tx.send(()).unwrap();
            })
            .unwrap();
    }
    rx.recv_timeout(PATIENCE).unwrap();
    rx.recv_timeout(PATIENCE).unwrap();
    drop(exit_tx);
    let (task_tx, task_rx) = mpsc::channel();
    let timeouts: Vec<_> = (0..N)
        .map(|id| timers.schedule_on(id % 2, FAR, ChanTask::with_token(id, &task_tx, drops.token(id))).unwrap())
        .collect();
    let clone = timers.clone();
    drop(timers);
    assert_eq!(drops.total(), 0, "a clone still lives: nothing may stop");
    assert!(timeouts.iter().all(|t| t.is_pending()));
    drop(clone);
    // The shards stop on their own: every pending task is dropped, unrun, exactly once.
    assert!(wait_until(|| drops.total() == N, PATIENCE), "pending tasks were not dropped");
    drops.assert_each_dropped_once();
    assert!(task_rx.try_recv().is_err(), "a dropped service must not run or cancel-notify its tasks");
    assert!(timeouts.iter().all(|t| t.is_cancelled() && !t.cancel()));
    let mut exited: Vec<String> =
        (0..2).map(|_| exit_rx.recv_timeout(PATIENCE).expect("a shard thread lives on")).collect();
    exited.sort();
    assert_eq!(exited, ["drop-test-0", "drop-test-1"]);
}

/// Producers schedule in a loop while another thread stops the service: each schedule
/// either succeeded (and its timeout fired, or came back from `stop`) or failed with
/// `Shutdown` and handed its task back. Nothing is lost, nothing counted twice.
#[test]
fn schedules_racing_stop_are_never_lost() {
    const PRODUCERS: usize = 3;
    /// Ids reserved per producer; a producer ends early once it has seen enough refusals.
    /// Far more than the stop needs to land mid-loop: a schedule takes some 50 ns, so a
    /// producer can get through 20 000 while the stopper waits for a core (a smaller
    /// reserve once let every producer finish before `stop()`).
    const PER_PRODUCER: usize = 200_000;
    const REFUSALS: usize = 200;
    const N: usize = PRODUCERS * PER_PRODUCER;
    for round in 0..3 {
        let timers = TimerService::builder().shards(2).build().unwrap();
        let ran = slots(N);
        let cancelled = Arc::new(AtomicUsize::new(0));
        let progress = AtomicUsize::new(0);
        let start = Barrier::new(PRODUCERS + 1);
        let (attempted, accepted, refused, unfired) = std::thread::scope(|s| {
            let producers: Vec<_> = (0..PRODUCERS)
                .map(|p| {
                    let (timers, ran, cancelled, start, progress) = (&timers, &ran, &cancelled, &start, &progress);
                    s.spawn(move || {
                        let (mut accepted, mut refused, mut attempted) = (Vec::new(), Vec::new(), Vec::new());
                        start.wait();
                        for i in 0..PER_PRODUCER {
                            if refused.len() == REFUSALS {
                                break;
                            }
                            let id = p * PER_PRODUCER + i;
                            attempted.push(id);
                            // Half fire at once, half would wait an hour.
                            let delay = if i % 2 == 0 { Duration::ZERO } else { FAR };
                            let task = Counted { id, ran: ran.clone(), cancelled: cancelled.clone() };
                            match timers.schedule(delay, task) {
                                Ok(timeout) => accepted.push(timeout),
                                Err(ScheduleError::Shutdown(task)) => refused.push(task),
                                Err(e) => panic!("unexpected {e}"),
                            }
                            progress.fetch_add(1, Ordering::Relaxed);
                        }
                        (attempted, accepted, refused)
                    })
                })
                .collect();
            let stopper = s.spawn(|| {
                start.wait();
                // Stop in the middle of the producers' loops: spin, not `wait_until`'s
                // millisecond sleeps, so the stop follows the target closely.
                let target = 1000 * (round + 1);
                let waited = Instant::now();
                while progress.load(Ordering::Relaxed) < target {
                    assert!(waited.elapsed() < PATIENCE, "the producers made no progress");
                    std::thread::yield_now();
                }
                timers.stop().unwrap()
            });
            let unfired = stopper.join().unwrap();
            let (mut attempted, mut accepted, mut refused) = (Vec::new(), Vec::new(), Vec::new());
            for p in producers {
                let (t, a, r) = p.join().unwrap();
                attempted.extend(t);
                accepted.extend(a);
                refused.extend(r);
            }
            (attempted, accepted, refused, unfired)
        });
        assert_eq!(accepted.len() + refused.len(), attempted.len());
        assert!(!refused.is_empty() && !accepted.is_empty(), "round {round}: stop() did not land mid-loop");
        // Every shard thread has been joined: what fired has fired.
        let fired: usize = ran.iter().map(|s| usize::from(s.load(Ordering::SeqCst))).sum();
        assert!(ran.iter().all(|s| s.load(Ordering::SeqCst) <= 1), "a task ran twice");
        let expired = accepted.iter().filter(|t| t.is_expired()).count();
        let came_back = accepted.iter().filter(|t| t.is_cancelled()).count();
        assert_eq!(expired + came_back, accepted.len(), "an accepted timeout is still pending after stop()");
        assert_eq!(fired, expired);
        assert_eq!(unfired.len(), came_back, "an accepted, unfired timeout is missing from stop()'s list");
        for u in unfired {
            assert!(u.timeout().is_cancelled());
            u.into_task().run();
        }
        for task in refused {
            assert_eq!(ran[task.id].load(Ordering::SeqCst), 0, "a refused task ran");
            Box::new(task).run();
        }
        // Fired, returned by stop, or handed back by the error: each attempt exactly once.
        for &id in &attempted {
            let n = ran[id].load(Ordering::SeqCst);
            assert_eq!(n, 1, "round {round}: task {id} ended {n} times");
        }
        let total: usize = ran.iter().map(|s| usize::from(s.load(Ordering::SeqCst))).sum();
        assert_eq!(total, attempted.len(), "a task that was never scheduled ran");
        assert_eq!(cancelled.load(Ordering::SeqCst), 0);
        let stats = timers.stats();
        assert_eq!(stats.scheduled, accepted.len() as u64);
        assert_eq!(stats.expired, expired as u64);
        assert_eq!(stats.unfired, came_back as u64);
        assert_eq!((stats.cancelled, stats.pending), (0, 0));
    }
}

#[test]
fn dropping_the_last_clone_from_a_task_stops_the_shards_too() {
    const N: usize = 20;
    let timers = TimerService::builder().shards(2).thread_name("drop-inside").build().unwrap();
    let drops = DropCounter::new(N);
    let (tx, rx) = mpsc::channel();
    let timeouts: Vec<_> = (0..N)
        .map(|id| timers.schedule_on(id % 2, FAR, ChanTask::with_token(id, &tx, drops.token(id))).unwrap())
        .collect();
    let (done_tx, done_rx) = mpsc::channel();
    let last = timers.clone();
    timers
        .schedule_on(0, Duration::from_millis(1), move || {
            drop(last);
            done_tx.send(()).unwrap();
        })
        .unwrap();
    drop(timers);
    // The task held the last clone; dropping it on a shard thread must neither deadlock
    // (waiting for its own thread) nor leave the shards running.
    done_rx.recv_timeout(PATIENCE).expect("dropping the last clone inside a task returned");
    assert!(wait_until(|| drops.total() == N, PATIENCE), "pending tasks were not dropped");
    drops.assert_each_dropped_once();
    assert!(timeouts.iter().all(|t| t.is_cancelled()));
    assert!(rx.try_recv().is_err());
}

/// A closure handed back by `stop()` runs when its task is run, once, and does nothing when
/// it is told it was cancelled or dropped (a closure has no `cancelled` of its own).
#[test]
fn a_closure_handed_back_runs_when_its_task_is_run() {
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for bit in [1, 2, 4] {
        let ran = ran.clone();
        timers
            .schedule(FAR, move || {
                ran.fetch_add(bit, Ordering::SeqCst);
            })
            .unwrap();
    }
    let mut unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 3);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "stop() runs nothing");
    let [a, b, c] = [unfired.pop().unwrap(), unfired.pop().unwrap(), unfired.pop().unwrap()];
    a.into_task().run();
    let after_run = ran.load(Ordering::SeqCst);
    assert!([1, 2, 4].contains(&after_run), "run once: {after_run}");
    b.into_task().cancelled();
    drop(c);
    assert_eq!(ran.load(Ordering::SeqCst), after_run, "cancelled or dropped, a closure does not run");
}

/// `ptr_eq` tells a timeout's handles from another timeout's: how a caller finds, in
/// `stop()`'s list, the timeout it kept (every other test of it compares a timeout with
/// itself).
#[test]
fn ptr_eq_is_the_same_timeout_and_only_it() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let a = timers.schedule(Duration::from_secs(60), || ()).unwrap();
    let b = timers.schedule(Duration::from_secs(60), || ()).unwrap();
    assert!(a.ptr_eq(&a.clone()) && b.ptr_eq(&b));
    assert!(!a.ptr_eq(&b) && !b.ptr_eq(&a), "two timeouts");
    let unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 2);
    assert_eq!(unfired.iter().filter(|u| u.timeout().ptr_eq(&a)).count(), 1, "stop() hands `a` back once");
}
