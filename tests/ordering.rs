//! On one shard, from one producer: timeouts fire in deadline order, and timeouts with the
//! same deadline fire in the order they were armed.

mod common;

use common::{ChanTask, XorShift, events};
use shardwheel::TimerService;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn one_shard() -> TimerService {
    TimerService::builder().shards(1).tick(Duration::from_millis(1)).build().unwrap()
}

#[test]
fn distinct_deadlines_fire_in_deadline_order() {
    const N: usize = 150;
    let timers = one_shard();
    let (tx, rx) = mpsc::channel();
    // Deadlines 1 ms apart (distinct ticks), armed in a shuffled order, crossing the
    // wheel's first level boundary (64 ticks).
    let mut order: Vec<usize> = (0..N).collect();
    let mut rng = XorShift::new(0x0dd5_eed5);
    for i in (1..N).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let base = Instant::now() + Duration::from_millis(30);
    let mut deadlines = vec![None; N];
    for &rank in &order {
        let timeout = timers.schedule_at(base + Duration::from_millis(rank as u64), ChanTask::new(rank, &tx)).unwrap();
        deadlines[rank] = Some(timeout.deadline());
    }
    assert!(deadlines.windows(2).all(|w| w[0] < w[1]), "the test needs distinct, increasing deadlines");
    let fired: Vec<usize> = events(&rx, N).into_iter().map(|e| e.id).collect();
    assert_eq!(fired, (0..N).collect::<Vec<_>>(), "fired out of deadline order");
}

#[test]
fn distinct_delays_from_schedule_on_fire_in_deadline_order() {
    let timers = TimerService::builder().shards(3).build().unwrap();
    let (tx, rx) = mpsc::channel();
    let delays_ms = [40u64, 5, 25, 80, 10, 60, 15, 70, 30, 50];
    let mut by_deadline: Vec<(Instant, usize)> = delays_ms
        .iter()
        .enumerate()
        .map(|(id, &ms)| {
            (timers.schedule_on(2, Duration::from_millis(ms), ChanTask::new(id, &tx)).unwrap().deadline(), id)
        })
        .collect();
    by_deadline.sort();
    let fired: Vec<usize> = events(&rx, delays_ms.len()).into_iter().map(|e| e.id).collect();
    assert_eq!(fired, by_deadline.iter().map(|&(_, id)| id).collect::<Vec<_>>());
}

/// Same deadline, one producer: first armed, first fired. More timeouts than the shard
/// fires in one slice, so the order must survive slicing.
#[test]
fn the_same_deadline_fires_in_arming_order() {
    const N: usize = 3000;
    let timers = one_shard();
    let (tx, rx) = mpsc::channel();
    let at = Instant::now() + Duration::from_millis(100);
    for id in 0..N {
        timers.schedule_at(at, ChanTask::new(id, &tx)).unwrap();
    }
    let fired: Vec<usize> = events(&rx, N).into_iter().map(|e| e.id).collect();
    assert_eq!(fired, (0..N).collect::<Vec<_>>(), "same-deadline timeouts fired out of arming order");
}

#[test]
fn the_same_deadline_in_the_past_fires_in_arming_order() {
    const N: usize = 2000;
    let timers = one_shard();
    let (tx, rx) = mpsc::channel();
    let past = Instant::now();
    std::thread::sleep(Duration::from_millis(2));
    for id in 0..N {
        timers.schedule_at(past, ChanTask::new(id, &tx)).unwrap();
    }
    let fired: Vec<usize> = events(&rx, N).into_iter().map(|e| e.id).collect();
    assert_eq!(fired, (0..N).collect::<Vec<_>>());
}

#[test]
fn mixed_deadlines_fire_by_deadline_then_arming_order() {
    const N: usize = 1500;
    let timers = one_shard();
    let (tx, rx) = mpsc::channel();
    let base = Instant::now() + Duration::from_millis(40);
    let mut rng = XorShift::new(0xfeed);
    let mut keys = Vec::with_capacity(N);
    for id in 0..N {
        // Ten distinct deadlines, many timeouts on each, armed interleaved.
        let at = base + Duration::from_millis(7 * rng.below(10));
        let timeout = timers.schedule_at(at, ChanTask::new(id, &tx)).unwrap();
        keys.push((timeout.deadline(), id));
    }
    keys.sort();
    let fired: Vec<usize> = events(&rx, N).into_iter().map(|e| e.id).collect();
    assert_eq!(fired, keys.iter().map(|&(_, id)| id).collect::<Vec<_>>());
}

/// One thread's arms for the same tick keep their order across the mailbox: X on the
/// thread's own queue, then, as the thread exits (after its queue was retired and announced),
/// Y from a later thread-local's destructor, through the mailbox. While a flood of notices
/// keeps the shard's mail busy, a turn could read Y's arm before the announcement of the
/// queue holding X, and file Y first.
#[test]
fn an_arm_from_a_late_destructor_fires_after_its_threads_earlier_arms() {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    struct OnExit(Option<Box<dyn FnOnce()>>);
    impl Drop for OnExit {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    thread_local! { static ON_EXIT: RefCell<OnExit> = const { RefCell::new(OnExit(None)) }; }

    const ROUNDS: usize = 300;
    let timers = one_shard();
    // The flood: earlier resets of 2000 timeouts, each a refile notice, bounded in time.
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (timers, stop) = (timers.clone(), stop.clone());
        std::thread::spawn(move || {
            let far: Vec<_> = (0..2000).map(|_| timers.schedule(Duration::from_secs(7200), || {}).unwrap()).collect();
            let end = Instant::now() + Duration::from_secs(30);
            let mut secs = 7000;
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                for t in &far {
                    t.reset(Duration::from_secs(secs));
                }
                secs = (secs - 1).max(1000);
            }
        })
    };
    let fired: Arc<Mutex<Vec<(usize, char)>>> = Arc::default();
    let at = Instant::now() + Duration::from_millis(1500);
    let mut threads = Vec::new();
    for i in 0..ROUNDS {
        let (timers, fired) = (timers.clone(), fired.clone());
        threads.push(std::thread::spawn(move || {
            let (t, f) = (timers.clone(), fired.clone());
            ON_EXIT.with(|e| {
                e.borrow_mut().0 = Some(Box::new(move || {
                    t.schedule_at(at, move || f.lock().unwrap().push((i, 'Y'))).unwrap();
                }))
            });
            timers.schedule_at(at, move || fired.lock().unwrap().push((i, 'X'))).unwrap();
        }));
        if i % 8 == 0 {
            for t in threads.drain(..) {
                t.join().unwrap();
            }
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    let all_fired = || fired.lock().unwrap().len() == 2 * ROUNDS;
    assert!(common::wait_until(all_fired, at.saturating_duration_since(Instant::now()) + common::PATIENCE));
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    let fired = fired.lock().unwrap();
    let out_of_order: Vec<_> = (0..ROUNDS)
        .filter(|&i| fired.iter().filter(|(j, _)| *j == i).map(|(_, c)| *c).collect::<Vec<_>>() != ['X', 'Y'])
        .collect();
    assert!(out_of_order.is_empty(), "threads whose Y fired before X: {out_of_order:?}");
}
