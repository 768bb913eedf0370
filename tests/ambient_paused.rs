//! `time::pause`, `advance`, `resume` and auto-advance for the ambient calls: scoped to the
//! thread that paused (tests in parallel each see their own clock), `advance` returning once
//! the tasks it woke have been polled, no `settle()` needed.

use shardwheel::time::{self, Duration, Instant};
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_paused_clock_moves_only_by_advance_and_never_fires_early() {
    futures_executor::block_on(async {
        time::pause();
        time::auto_advance(false);
        let start = Instant::now();
        std::thread::sleep(ms(5));
        assert_eq!(Instant::now(), start, "real time does not move it");
        let mut sleep = pin!(time::sleep(ms(100)));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        time::advance(ms(99)).await;
        assert!(sleep.as_mut().poll(&mut cx).is_pending(), "never early");
        time::advance(ms(1)).await;
        assert!(sleep.is_elapsed(), "fired by the time advance returned");
        assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Ready(()));
        assert_eq!(start.elapsed(), ms(100));
        time::resume();
    });
}

/// Under a current-thread runtime: tasks woken by an advance have run when it returns.
#[test]
fn advance_returns_after_the_tasks_it_woke_have_run() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        time::pause();
        time::auto_advance(false);
        let done = Arc::new(AtomicUsize::new(0));
        for i in 1..=10u64 {
            let done = done.clone();
            tokio::spawn(async move {
                time::sleep(ms(10 * i)).await;
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        tokio::task::yield_now().await; // they register
        for i in 1..=10 {
            time::advance(ms(10)).await;
            assert_eq!(done.load(Ordering::SeqCst), i, "after {} ms", 10 * i);
        }
        time::resume();
    });
}

/// Auto-advance: a task that awaits a long sleep on a paused clock finishes at once, the
/// clock exactly at its deadline.
#[test]
fn auto_advance_jumps_to_the_earliest_deadline() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let real = std::time::Instant::now();
    rt.block_on(async {
        time::pause();
        let start = Instant::now();
        time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3600));
        let limited = time::timeout(Duration::from_secs(60), std::future::pending::<()>()).await;
        assert!(limited.is_err());
        assert_eq!(start.elapsed(), Duration::from_secs(3660));
        let mut every = time::interval(Duration::from_secs(10));
        for k in 0..5 {
            assert_eq!(every.tick().await, start + Duration::from_secs(3660 + 10 * k));
        }
        time::resume();
    });
    assert!(real.elapsed() < Duration::from_secs(30), "in real time, at once: {:?}", real.elapsed());
}

/// Auto-advance moves the clock only once the thread is blocked and has made no ambient
/// call for two looks in a row: a thread that computes (running, no ambient call) for fifty
/// looks' worth of time, with a sleep registered, never sees its clock move.
#[test]
fn auto_advance_never_moves_the_clock_under_a_running_thread() {
    futures_executor::block_on(async {
        time::pause();
        let start = Instant::now();
        let mut sleep = pin!(time::sleep(Duration::from_secs(3600)));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(sleep.as_mut().poll(&mut cx).is_pending(), "registered");
        let spin = std::time::Instant::now();
        while spin.elapsed() < ms(50) {
            std::hint::spin_loop();
        }
        assert_eq!(Instant::now(), start, "the clock moved while its thread ran");
        time::resume();
    });
}

/// An ambient call counts as activity even from a thread that is blocked between calls:
/// a thread that sleeps 100 µs of real time at a stretch (blocked at most of auto-advance's
/// looks) and reads the clock after each, for a hundred looks' worth of time with a sleep
/// registered, never sees its clock move; once the calls stop, it jumps.
#[test]
fn auto_advance_never_moves_the_clock_between_ambient_calls() {
    futures_executor::block_on(async {
        time::pause();
        let start = Instant::now();
        let mut sleep = pin!(time::sleep(Duration::from_secs(3600)));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(sleep.as_mut().poll(&mut cx).is_pending(), "registered");
        let real = std::time::Instant::now();
        while real.elapsed() < ms(100) {
            std::thread::sleep(Duration::from_micros(100));
            assert_eq!(Instant::now(), start, "the clock moved between ambient calls");
        }
        sleep.await;
        assert_eq!(Instant::now(), start + Duration::from_secs(3600), "jumped once the calls stopped");
        time::resume();
    });
}

/// `auto_advance(false)` holds the clock while its thread waits on something else, a sleep
/// registered; `auto_advance(true)` lets it jump again; each turn is the calling thread's:
/// off, on, and off again, with a long wait each time it is off.
#[test]
fn auto_advance_turned_off_holds_the_clock_and_turned_on_moves_it_again() {
    futures_executor::block_on(async {
        time::pause();
        let start = Instant::now();
        for round in 1..=2u32 {
            time::auto_advance(false);
            let held = Instant::now();
            let mut sleep = pin!(time::sleep(Duration::from_secs(3600)));
            // Blocked for 200 ms of real time (two hundred of auto-advance's looks), the
            // sleep registered: the other side of the race wins, the clock stays.
            let slept = first_of(sleep.as_mut(), RealDelay::new(ms(200))).await;
            assert!(!slept, "round {round}: the sleep ended with auto-advance off");
            assert_eq!(Instant::now(), held, "round {round}: the clock moved with auto-advance off");
            time::auto_advance(true);
            sleep.await;
            assert_eq!(Instant::now(), held + Duration::from_secs(3600), "round {round}: jumped to the deadline");
        }
        assert_eq!(start.elapsed(), Duration::from_secs(7200));
        time::resume();
    });
}

/// Whichever of two futures is ready first: `true` for the first.
async fn first_of(mut a: impl Future<Output = ()> + Unpin, b: impl Future<Output = ()>) -> bool {
    let mut b = pin!(b);
    std::future::poll_fn(|cx| {
        if Pin::new(&mut a).poll(cx).is_ready() {
            Poll::Ready(true)
        } else if b.as_mut().poll(cx).is_ready() {
            Poll::Ready(false)
        } else {
            Poll::Pending
        }
    })
    .await
}

/// Ready after `wait` of real time, measured by a thread of its own (no ambient call, so
/// the paused clock has no part in it).
struct RealDelay {
    wait: Duration,
    done: Arc<std::sync::atomic::AtomicBool>,
    started: bool,
}

impl RealDelay {
    fn new(wait: Duration) -> RealDelay {
        RealDelay { wait, done: Arc::default(), started: false }
    }
}

impl Future for RealDelay {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.done.load(Ordering::SeqCst) {
            return Poll::Ready(());
        }
        if !self.started {
            self.started = true;
            let (wait, done, waker) = (self.wait, self.done.clone(), cx.waker().clone());
            std::thread::spawn(move || {
                std::thread::sleep(wait);
                done.store(true, Ordering::SeqCst);
                waker.wake();
            });
        }
        Poll::Pending
    }
}

/// Each thread's clock is its own: one paused, one not, side by side.
#[test]
fn a_paused_clock_is_the_pausing_threads_alone() {
    let paused = std::thread::spawn(|| {
        time::pause();
        time::auto_advance(false);
        let start = Instant::now();
        futures_executor::block_on(time::advance(Duration::from_secs(60)));
        start.elapsed()
    });
    let real = std::thread::spawn(|| {
        let start = Instant::now();
        futures_executor::block_on(time::sleep(ms(20)));
        start.elapsed()
    });
    assert_eq!(paused.join().unwrap(), Duration::from_secs(60));
    let took = real.join().unwrap();
    assert!(took >= ms(20) && took < Duration::from_secs(30), "the other thread's clock is real: {took:?}");
}

/// `resume` lets the clock run with real time from where it stands, as tokio's: `Instant`
/// never goes back, and a sleep made while paused completes, on the resumed clock, after its
/// real duration (it neither hangs nor panics).
#[test]
fn resume_runs_the_clock_on_from_where_it_stood() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        time::pause();
        time::auto_advance(false);
        time::advance(Duration::from_secs(3600)).await;
        let frozen = Instant::now();
        let pending = tokio::spawn(time::sleep(ms(20)));
        tokio::task::yield_now().await; // it registers
        let real = std::time::Instant::now();
        time::resume();
        pending.await.expect("the sleep completes after resume, no panic");
        assert!(real.elapsed() >= ms(20), "after its real duration");
        let now = Instant::now();
        assert!(now >= frozen + ms(20), "from where it stood: {:?}", now - frozen);
        assert!(now < frozen + Duration::from_secs(60), "not jumped back to the real clock's time or on");
        time::pause(); // stands still again
        let still = Instant::now();
        std::thread::sleep(ms(5));
        assert_eq!(Instant::now(), still);
    });
}

/// An interval made before the pause stays on the real clock: the pause does not make it
/// read the paused time (which an hour's advance puts far ahead, where `Delay` would move
/// its next tick).
#[test]
fn an_interval_made_before_the_pause_keeps_the_real_clock() {
    futures_executor::block_on(async {
        let mut every = time::interval(ms(10));
        every.set_missed_tick_behavior(time::MissedTickBehavior::Delay);
        every.tick().await;
        time::pause();
        time::auto_advance(false);
        time::advance(Duration::from_secs(3600)).await;
        // The next two ticks, each within seconds of real time (polled by hand: a timeout on
        // this thread's paused clock would never end).
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        for k in 1..=2 {
            let due = loop {
                if let Poll::Ready(due) = pin!(every.tick()).poll(&mut Context::from_waker(Waker::noop())) {
                    break due;
                }
                assert!(std::time::Instant::now() < give_up, "tick {k} never came on the real clock");
                std::thread::sleep(ms(1));
            };
            assert!(due.into_std() <= std::time::Instant::now(), "tick {k} due on the real clock, not the paused one");
        }
    });
}

/// A thread that paused its clock ends its scope as it exits: the tasks that polled the
/// scope's sleeps are let go (the scope kept a relay waker for each, holding the task's
/// waker), as its service stops (which this test does not see). Without that, every
/// thread that paused would keep its tasks' wakers, and its shard thread, for the life of
/// the process.
#[test]
fn a_paused_threads_exit_lets_go_of_its_tasks() {
    struct Task;
    impl std::task::Wake for Task {
        fn wake(self: Arc<Self>) {}
    }
    let task = Arc::new(Task);
    let (polled, told) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let (polled_tx, polled_rx) = polled;
    let (exit_tx, exit_rx) = told;
    let waker = Waker::from(task.clone());
    let thread = std::thread::spawn(move || {
        time::pause();
        time::auto_advance(false);
        let mut sleep = Box::pin(time::sleep(Duration::from_secs(3600)));
        assert!(sleep.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
        drop(sleep);
        drop(waker);
        polled_tx.send(()).unwrap();
        exit_rx.recv().unwrap();
    });
    polled_rx.recv().unwrap();
    // The premise: while the thread lives, its scope holds the task (through its relay).
    assert!(Arc::strong_count(&task) > 1, "the scope holds no waker of the task: the test proves nothing");
    exit_tx.send(()).unwrap();
    thread.join().unwrap();
    assert_eq!(Arc::strong_count(&task), 1, "the exited thread's scope still holds its task's waker");
}
