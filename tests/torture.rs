//! Many threads arm, reset and cancel at random while the shards fire; at the end every
//! timeout has ended exactly once (fired, cancelled by a winning `cancel()`, or returned by
//! `stop()`), and the counts add up, in the test's books and in `stats()`.

mod common;

use common::{PATIENCE, XorShift, wait_until};
use shardwheel::{Timeout, TimeoutState, TimerService, TimerTask};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PRODUCERS: usize = 4;
const OPS_PER_PRODUCER: usize = 50_000;
/// A timeout that must not fire during the test: it comes back from `stop()`.
const FAR: Duration = Duration::from_secs(3600);

/// What every task shares: one slot per timeout id, bumped when it runs and when it is told
/// it was cancelled (so a slot above 1 means it ended twice), and totals of each.
struct Books {
    slots: Box<[AtomicU8]>,
    ran: AtomicUsize,
    cancelled: AtomicUsize,
}

struct Tortured {
    id: usize,
    books: Arc<Books>,
}

impl TimerTask for Tortured {
    fn run(self: Box<Self>) {
        self.books.slots[self.id].fetch_add(1, Ordering::SeqCst);
        self.books.ran.fetch_add(1, Ordering::SeqCst);
    }
    fn cancelled(self: Box<Self>) {
        self.books.slots[self.id].fetch_add(1, Ordering::SeqCst);
        self.books.cancelled.fetch_add(1, Ordering::SeqCst);
    }
}

/// A random delay: mostly short (0..20 ms, so it fires during the test), sometimes far.
fn delay(rng: &mut XorShift) -> Duration {
    if rng.below(10) == 0 { FAR } else { Duration::from_micros(rng.below(20_000)) }
}

/// The timeout a reset or cancel acts on: one from the shared pool (`None` if it is empty), or
/// mostly one of this producer's recent timeouts, many still pending.
fn pick(
    rng: &mut XorShift,
    from_shared: bool,
    shared: &Mutex<Vec<Timeout>>,
    armed: &[(usize, Timeout)],
) -> Option<Timeout> {
    if from_shared {
        let pool = shared.lock().unwrap();
        return (!pool.is_empty()).then(|| pool[rng.below(pool.len() as u64) as usize].clone());
    }
    let recent = armed.len() - 1 - rng.below(armed.len().min(256) as u64) as usize;
    Some(armed[recent].1.clone())
}

struct Outcome {
    armed: Vec<(usize, Timeout)>,
    cancel_wins: usize,
}

/// One producer's random walk. `shared` is a pool of handles all producers arm into and
/// cancel or reset from, so timeouts are also ended from threads other than their armer's.
fn produce(timers: &TimerService, books: &Arc<Books>, shared: &Mutex<Vec<Timeout>>, seed: u64, p: usize) -> Outcome {
    let mut rng = XorShift::new(seed ^ (p as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut armed: Vec<(usize, Timeout)> = Vec::new();
    let mut cancel_wins = 0;
    for op in 0..OPS_PER_PRODUCER {
        if op % 512 == 511 {
            // Spread the ops out a little, so that expiries interleave with them.
            std::thread::sleep(Duration::from_micros(200));
        }
        let pick_shared = rng.below(8) == 0;
        match rng.below(4) {
            0 | 1 => {
                let id = p * OPS_PER_PRODUCER + op;
                let task = Tortured { id, books: books.clone() };
                let d = delay(&mut rng);
                let timeout = if rng.below(4) == 0 {
                    let shard = rng.below(timers.shard_count() as u64) as usize;
                    timers.schedule_on(shard, d, task)
                } else {
                    timers.schedule(d, task)
                };
                let timeout = timeout.unwrap_or_else(|e| panic!("schedule failed: {e}"));
                if pick_shared {
                    let mut pool = shared.lock().unwrap();
                    if pool.len() == 512 {
                        pool.swap_remove(0);
                    }
                    pool.push(timeout.clone());
                }
                armed.push((id, timeout));
            }
            2 if !armed.is_empty() => {
                let d = delay(&mut rng);
                let Some(timeout) = pick(&mut rng, pick_shared, shared, &armed) else {
                    continue;
                };
                let was_pending = timeout.is_pending();
                if timeout.reset(d) {
                    assert!(was_pending, "reset() succeeded on an ended timeout");
                }
            }
            3 if !armed.is_empty() => {
                let Some(timeout) = pick(&mut rng, pick_shared, shared, &armed) else {
                    continue;
                };
                if timeout.cancel() {
                    cancel_wins += 1;
                    assert!(timeout.is_cancelled());
                }
            }
            _ => {}
        }
    }
    Outcome { armed, cancel_wins }
}

#[test]
fn every_timeout_ends_exactly_once_and_the_counts_add_up() {
    for seed in [0x7041_7e57, 0x0bad_5eed, 0x1234_5678_9abc, 0xdead_beef] {
        torture(seed);
    }
}

fn torture(seed: u64) {
    let started = Instant::now();
    let timers = TimerService::builder().shards(2).tick(Duration::from_millis(1)).build().unwrap();
    let books = Arc::new(Books {
        slots: (0..PRODUCERS * OPS_PER_PRODUCER).map(|_| AtomicU8::new(0)).collect(),
        ran: AtomicUsize::new(0),
        cancelled: AtomicUsize::new(0),
    });
    let shared = Mutex::new(Vec::new());
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (timers, books, shared) = (&timers, &books, &shared);
                s.spawn(move || produce(timers, books, shared, seed, p))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let armed: Vec<&(usize, Timeout)> = outcomes.iter().flat_map(|o| &o.armed).collect();
    let cancel_wins: usize = outcomes.iter().map(|o| o.cancel_wins).sum();

    // Wait for every timeout that is due to fire: what stays pending is far off.
    let horizon = Instant::now() + FAR / 2;
    assert!(
        wait_until(|| armed.iter().all(|(_, t)| !t.is_pending() || t.deadline() > horizon), PATIENCE),
        "timeouts that were due did not fire"
    );
    let unfired = timers.stop().unwrap();

    // Before handing back the unfired tasks: nothing ended twice.
    for (id, _) in &armed {
        assert!(books.slots[*id].load(Ordering::SeqCst) <= 1, "timeout {id} ended twice");
    }
    let ran = books.ran.load(Ordering::SeqCst);
    let cancelled_calls = books.cancelled.load(Ordering::SeqCst);
    assert_eq!(cancelled_calls, cancel_wins, "cancelled() must run once per winning cancel(), and only then");
    for u in unfired.iter() {
        assert!(u.timeout().is_cancelled());
        assert!(u.timeout().deadline() > horizon, "stop() returned a timeout that was due");
    }
    let unfired_count = unfired.len();
    for u in unfired {
        u.into_task().run();
    }
    // Now each armed id has ended exactly once, one way or another.
    for (id, _) in &armed {
        let n = books.slots[*id].load(Ordering::SeqCst);
        assert_eq!(n, 1, "timeout {id} ended {n} times");
    }
    let total: usize = books.slots.iter().map(|s| usize::from(s.load(Ordering::SeqCst))).sum();
    assert_eq!(total, armed.len(), "a slot of an id never armed was touched");

    // The handles agree.
    let expired = armed.iter().filter(|(_, t)| t.state() == TimeoutState::Expired).count();
    let cancelled = armed.iter().filter(|(_, t)| t.state() == TimeoutState::Cancelled).count();
    assert_eq!(expired + cancelled, armed.len(), "a timeout is still pending after stop()");
    assert_eq!(expired, ran);
    assert_eq!(cancelled, cancel_wins + unfired_count);
    assert_eq!(ran + cancel_wins + unfired_count, armed.len());

    // And so does the service.
    let stats = timers.stats();
    assert_eq!(stats.scheduled, armed.len() as u64);
    assert_eq!(stats.expired, ran as u64);
    assert_eq!(stats.cancelled, cancel_wins as u64);
    assert_eq!(stats.unfired, unfired_count as u64);
    assert_eq!((stats.pending, stats.rejected, stats.panicked), (0, 0, 0));
    assert!(ran > 0 && cancel_wins > 0 && unfired_count > 0, "the mix did not exercise every ending");
    eprintln!(
        "torture (seed {seed:#x}): {} armed, {ran} fired, {cancel_wins} cancelled, {unfired_count} unfired, in {:?}",
        armed.len(),
        started.elapsed()
    );
}
