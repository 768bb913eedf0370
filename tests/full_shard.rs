//! A future on a full service neither panics nor hangs: each shard that refuses it passes it
//! to the next, and with every shard full it waits on the overflow timer, completing at its
//! deadline, never before. `try_poll` never panics. (Before: the first poll on a shard at
//! `max_pending_per_shard` panicked, `try_poll` too.)

use shardwheel::{Elapsed, ScheduleError, TimerService};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

mod common;

#[test]
fn a_sleep_on_a_full_shard_moves_to_another_then_overflows_and_completes_on_time() {
    let timers = TimerService::builder().shards(2).max_pending_per_shard(1).pin_threads(false).build().unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    // Two sleeps fill both shards: the second is refused by its home and moves on.
    let mut first = Box::pin(timers.sleep(Duration::from_secs(3600)));
    let mut second = pin!(timers.sleep(Duration::from_secs(3600)));
    assert!(first.as_mut().try_poll(&mut cx).is_pending());
    assert!(second.as_mut().try_poll(&mut cx).is_pending());
    assert_eq!(timers.pending(), 2, "one on each shard");
    assert_eq!(timers.stats().overflowed, 0);
    assert!(matches!(timers.schedule(Duration::from_secs(1), || ()), Err(ScheduleError::Rejected(_))));
    // A third: every shard is full. `try_poll` never panics; the sleep overflows.
    let deadline = Instant::now() + Duration::from_millis(30);
    let mut third = pin!(timers.sleep_until(deadline));
    assert_eq!(third.as_mut().try_poll(&mut cx), Poll::Pending);
    assert_eq!(timers.stats().overflowed, 1);
    assert!(!third.is_elapsed());
    futures_executor::block_on(third.as_mut());
    assert!(Instant::now() >= deadline, "never early");
    assert!(third.is_elapsed());
    // A timeout on the full service: the inner future still wins when it is ready, and an
    // `Elapsed` comes no earlier than its deadline.
    assert_eq!(futures_executor::block_on(timers.timeout(Duration::from_secs(3600), async { 5 })), Ok(5));
    let deadline = Instant::now() + Duration::from_millis(20);
    let outcome = futures_executor::block_on(timers.timeout_at(deadline, std::future::pending::<()>()));
    assert_eq!(outcome, Err(Elapsed::new()));
    assert!(Instant::now() >= deadline);
    // Room again: the next sleep registers on a shard, not on the overflow timer.
    drop(first);
    let overflowed = timers.stats().overflowed;
    let mut fourth = pin!(timers.sleep(Duration::from_secs(3600)));
    assert!(fourth.as_mut().poll(&mut cx).is_pending());
    assert_eq!(timers.stats().overflowed, overflowed);
    assert_eq!(timers.pending(), 2);
}

/// 2,000 tokio tasks, each awaiting a `timeout` of 20–60 ms, on a service of 2 shards that
/// hold 100 each: most overflow, none panics, none completes early, all complete.
#[test]
fn thousands_of_tasks_on_a_small_service_all_complete_on_time() {
    let timers = TimerService::builder().shards(2).max_pending_per_shard(100).pin_threads(false).build().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    let early = rt.block_on(async {
        let tasks: Vec<_> = (0..2000u64)
            .map(|i| {
                let timers = timers.clone();
                tokio::spawn(async move {
                    let deadline = Instant::now() + Duration::from_millis(20 + i % 41);
                    let outcome = timers.timeout_at(deadline, std::future::pending::<()>()).await;
                    assert_eq!(outcome, Err(Elapsed::new()));
                    Instant::now() < deadline
                })
            })
            .collect();
        let mut early = 0;
        for task in tasks {
            let joined = tokio::time::timeout(Duration::from_secs(30), task).await.expect("a task hung");
            early += usize::from(joined.expect("a task panicked"));
        }
        early
    });
    assert_eq!(early, 0, "a timeout completed before its deadline");
    let stats = timers.stats();
    assert!(stats.overflowed >= 1000, "most overflowed: {stats:?}");
    assert_eq!(stats.pending, 0);
}

/// `Sleep` is a `Future` whose poll never panics on a full service, whatever the executor.
#[test]
fn an_async_executor_sees_no_panic_either() {
    let timers = TimerService::builder().shards(1).max_pending_per_shard(1).pin_threads(false).build().unwrap();
    let _holder = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
    let ex = async_executor::Executor::new();
    let started = Instant::now();
    let task = ex.spawn(timers.sleep(Duration::from_millis(10)));
    futures_lite::future::block_on(ex.run(task));
    assert!(started.elapsed() >= Duration::from_millis(10));
}

/// A full service on a paused clock (`TestClock`): an overflowed sleep keeps the paused
/// clock's time, not real time. It completed early once real time passed the tick's instant
/// (the overflow timer's thread fired it), and it hung when the test moved the clock past
/// its deadline (nothing woke it): now each move wakes it and it completes exactly then.
#[test]
fn an_overflowed_sleep_on_a_paused_clock_keeps_that_clocks_time() {
    use std::sync::Arc;
    let (timers, clock) =
        TimerService::builder().shards(1).max_pending_per_shard(1).pin_threads(false).build_paused().unwrap();
    let _holder = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
    let count = Arc::new(common::WakeCount::default());
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    std::thread::sleep(Duration::from_millis(30)); // real time passes the 10 ms tick's instant
    let mut sleep = pin!(timers.sleep(Duration::from_millis(10)));
    assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Pending);
    assert_eq!(timers.stats().overflowed, 1);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Pending, "real time is not the paused clock's");
    clock.advance(Duration::from_millis(9));
    assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Pending, "never early by the paused clock");
    let woken = count.woken();
    clock.advance(Duration::from_millis(1));
    assert!(count.woken() > woken, "the move woke it");
    assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Ready(()));

    // A task blocked on such a sleep completes when the clock is moved past its deadline.
    let t = timers.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let blocked = std::thread::spawn(move || {
        futures_executor::block_on(t.sleep(Duration::from_secs(1)));
        tx.send(()).unwrap();
    });
    let give_up = Instant::now() + Duration::from_secs(10);
    while timers.stats().overflowed < 2 {
        assert!(Instant::now() < give_up, "the blocked sleep never polled");
        std::thread::sleep(Duration::from_millis(1));
    }
    clock.advance(Duration::from_millis(999));
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "never early");
    clock.advance(Duration::from_millis(1));
    rx.recv_timeout(Duration::from_secs(10)).expect("the move past its deadline completes it: no hang");
    blocked.join().unwrap();
}

/// An overflowed sleep polled again before its deadline, by its task or by another, keeps
/// its one entry on the overflow timer: no second entry is registered (nor counted in
/// `Stats::overflowed`), and the one there holds the last waker only. On the real clock and
/// on a paused one, three polls each.
#[test]
fn an_overflowed_sleep_polled_again_before_its_deadline_keeps_its_one_entry() {
    use std::sync::Arc;
    use std::task::Wake;
    struct Nothing;
    impl Wake for Nothing {
        fn wake(self: Arc<Self>) {}
    }
    let real = TimerService::builder().shards(1).max_pending_per_shard(1).pin_threads(false).build().unwrap();
    let (paused, _clock) =
        TimerService::builder().shards(1).max_pending_per_shard(1).pin_threads(false).build_paused().unwrap();
    for (name, timers) in [("real", &real), ("paused", &paused)] {
        let _holder = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
        let (first, second) = (Arc::new(Nothing), Arc::new(Nothing));
        let wakers = [Waker::from(first.clone()), Waker::from(second.clone())];
        let mut sleep = Box::pin(timers.sleep(Duration::from_secs(3600)));
        for poll in 0..3 {
            let waker = &wakers[poll % 2];
            assert_eq!(sleep.as_mut().poll(&mut Context::from_waker(waker)), Poll::Pending, "{name}, poll {poll}");
            assert_eq!(timers.stats().overflowed, 1, "{name}, poll {poll}: one entry registered");
            let (now, other) = if poll % 2 == 0 { (&first, &second) } else { (&second, &first) };
            assert_eq!(Arc::strong_count(now), 3, "{name}, poll {poll}: the entry holds this poll's waker");
            assert_eq!(Arc::strong_count(other), 2, "{name}, poll {poll}: an entry holds the other waker still");
        }
        drop(sleep);
        assert_eq!((Arc::strong_count(&first), Arc::strong_count(&second)), (2, 2), "{name}: an entry was left behind");
    }
}

/// An overflowed sleep's entry goes when the sleep does: dropped, reset, or completed, the
/// overflow timer lets go of its waker (the `Arc`'s count comes back), on the real clock and
/// on a paused one; and two overflowed sleeps on a paused clock, one of them moved to another
/// task, are each woken and each complete (a review of this code's mutants: entries left
/// behind, a number handed out twice, a new task's waker never stored).
#[test]
fn an_overflowed_sleeps_entry_goes_with_it_and_each_is_woken_once_due() {
    use std::sync::Arc;
    let counted = || {
        let count = Arc::new(common::WakeCount::default());
        (count.clone(), Waker::from(count))
    };
    // The real clock: each way out lets go of the waker.
    let timers = TimerService::builder().shards(1).max_pending_per_shard(1).pin_threads(false).build().unwrap();
    let _holder = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
    for way in ["drop", "reset", "complete"] {
        let (count, waker) = counted();
        let mut sleep = Box::pin(timers.sleep(Duration::from_millis(if way == "complete" { 5 } else { 3_600_000 })));
        assert_eq!(sleep.as_mut().poll(&mut Context::from_waker(&waker)), Poll::Pending);
        assert_eq!(Arc::strong_count(&count), 3, "{way}: the overflow timer holds a clone");
        match way {
            "drop" => drop(sleep),
            "reset" => {
                sleep.as_mut().reset(Instant::now() + Duration::from_secs(7200));
                assert_eq!(Arc::strong_count(&count), 2, "reset: the entry went");
            }
            _ => {
                futures_executor::block_on(sleep.as_mut());
                assert_eq!(Arc::strong_count(&count), 2, "complete: the entry went");
            }
        }
        drop(waker);
        assert_eq!(Arc::strong_count(&count), 1, "{way}: a clone of the waker was left behind");
    }
    // A paused clock: two sleeps, the first moved to another task; each woken, each done.
    let (timers, clock) =
        TimerService::builder().shards(1).max_pending_per_shard(1).pin_threads(false).build_paused().unwrap();
    let _holder = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
    let (a, wa) = counted();
    let (b, wb) = counted();
    let (c, wc) = counted();
    let mut first = Box::pin(timers.sleep(Duration::from_millis(10)));
    let mut second = Box::pin(timers.sleep(Duration::from_millis(20)));
    assert_eq!(first.as_mut().poll(&mut Context::from_waker(&wa)), Poll::Pending);
    assert_eq!(second.as_mut().poll(&mut Context::from_waker(&wb)), Poll::Pending);
    assert_eq!(first.as_mut().poll(&mut Context::from_waker(&wc)), Poll::Pending, "moved to task c");
    clock.advance(Duration::from_millis(10));
    assert!(c.woken() >= 1, "the task the first sleep moved to is woken");
    assert!(b.woken() >= 1, "the second sleep's task is woken too");
    assert_eq!(first.as_mut().poll(&mut Context::from_waker(&wc)), Poll::Ready(()));
    assert_eq!(second.as_mut().poll(&mut Context::from_waker(&wb)), Poll::Pending, "never early");
    clock.advance(Duration::from_millis(10));
    assert_eq!(second.as_mut().poll(&mut Context::from_waker(&wb)), Poll::Ready(()));
    drop((first, second, wa, wb, wc));
    for (name, count) in [("a", &a), ("b", &b), ("c", &c)] {
        assert_eq!(Arc::strong_count(count), 1, "{name}: a clone of the waker was left behind");
    }
}

/// A sleep refused by its full home shard goes round the others in order from its home,
/// wrapping past the last shard: from every home of three, with one shard full (it lands on
/// the next) and with two (on the one after), it registers on that shard, never past the
/// last one nor on the overflow timer.
#[test]
fn a_refused_sleep_goes_round_from_every_home_and_wraps() {
    const SHARDS: usize = 3;
    let probe = TimerService::builder().shards(SHARDS).pin_threads(false).build().unwrap();
    let mut homes_seen = [false; SHARDS];
    // Threads get their homes round-robin as they first arm; other tests' threads take
    // places too, so fresh threads are tried until each home has had one (bounded).
    for _ in 0..200 {
        if homes_seen.iter().all(|&seen| seen) {
            break;
        }
        let probe = probe.clone();
        let home = std::thread::spawn(move || {
            let timeout = probe.schedule(Duration::from_secs(3600), || ()).unwrap();
            assert!(timeout.cancel());
            let home = timeout.shard();
            for full in 1..SHARDS {
                let timers =
                    TimerService::builder().shards(SHARDS).max_pending_per_shard(1).pin_threads(false).build().unwrap();
                let held: Vec<_> = (0..full)
                    .map(|k| timers.schedule_on((home + k) % SHARDS, Duration::from_secs(3600), || ()).unwrap())
                    .collect();
                let mut sleep = pin!(timers.sleep(Duration::from_secs(3600)));
                assert!(sleep.as_mut().try_poll(&mut Context::from_waker(Waker::noop())).is_pending());
                let pending: Vec<u64> = timers.shard_stats().iter().map(|s| s.pending).collect();
                let mut expected = vec![0; SHARDS];
                for k in 0..=full {
                    expected[(home + k) % SHARDS] = 1;
                }
                assert_eq!(
                    pending,
                    expected,
                    "home {home}, {full} full: the sleep on shard {}",
                    (home + full) % SHARDS
                );
                assert_eq!(timers.stats().overflowed, 0, "home {home}, {full} full");
                drop(held);
            }
            home
        })
        .join()
        .expect("a sleep's round panicked");
        homes_seen[home] = true;
    }
    assert!(homes_seen.iter().all(|&seen| seen), "a thread of each home: {homes_seen:?}");
    drop(probe.stop().unwrap());
}
