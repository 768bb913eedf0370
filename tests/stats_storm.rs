//! `Stats` against the test's own books, after each of several storms: four threads arm,
//! cancel and reset at random on a service small enough to refuse some (`max_pending`), a
//! few futures overflow, then everything settles. The service's counts must equal what the
//! threads saw happen (accepted, refused, run, cancelled, handed back, overflowed), each
//! shard's counts must add up on their own and sum to the service's, and the lateness
//! histogram must count every expiry once.

use shardwheel::{ScheduleError, Stats, Timeout, TimerService};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the test saw happen.
#[derive(Default)]
struct Books {
    accepted: AtomicU64,
    refused: AtomicU64,
    ran: AtomicU64,
    cancelled: AtomicU64,
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// One thread's share of a storm: `ops` random arms (1–20 ms, or an hour), cancels and resets.
fn storm(timers: &TimerService, books: &Arc<Books>, seed: u64, ops: usize) {
    let mut rng = seed | 1;
    let mut held: Vec<Timeout> = Vec::new();
    for _ in 0..ops {
        match xorshift(&mut rng) % 4 {
            0 | 1 => {
                let delay = match xorshift(&mut rng) % 3 {
                    0 => Duration::from_secs(3600),
                    _ => Duration::from_millis(1 + xorshift(&mut rng) % 20),
                };
                let b = books.clone();
                match timers.schedule(delay, move || {
                    b.ran.fetch_add(1, Ordering::SeqCst);
                }) {
                    Ok(t) => {
                        books.accepted.fetch_add(1, Ordering::SeqCst);
                        held.push(t);
                    }
                    Err(ScheduleError::Rejected(_)) => {
                        books.refused.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => panic!("refused with {e}"),
                }
            }
            2 if !held.is_empty() => {
                let t = held.swap_remove(xorshift(&mut rng) as usize % held.len());
                if t.cancel() {
                    books.cancelled.fetch_add(1, Ordering::SeqCst);
                }
            }
            _ if !held.is_empty() => {
                let i = xorshift(&mut rng) as usize % held.len();
                held[i].reset(Duration::from_millis(1 + xorshift(&mut rng) % 30));
            }
            _ => {}
        }
    }
}

/// Waits until `f` holds (every 1 ms, up to 20 s).
fn eventually(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "the service never came to rest");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn assert_adds_up(stats: &Stats, what: &str) {
    assert_eq!(stats.scheduled, stats.expired + stats.cancelled + stats.unfired + stats.pending, "{what}: {stats:?}");
    assert_eq!(stats.lateness.count(), stats.expired, "{what}: every expiry in the histogram once");
}

#[test]
fn stats_match_the_books_after_every_storm() {
    let timers = TimerService::builder().shards(2).max_pending_per_shard(400).pin_threads(false).build().unwrap();
    let books = Arc::new(Books::default());
    for round in 0..3u64 {
        let threads: Vec<_> = (0..4u64)
            .map(|k| {
                let (timers, books) = (timers.clone(), books.clone());
                std::thread::spawn(move || storm(&timers, &books, round * 97 + k * 31 + 7, 3_000))
            })
            .collect();
        // A reader beside the storm: each shard's totals never read lower than a moment
        // before (they are published as counters; `scheduled` once summed reads taken at
        // different moments, and went back by up to 100,000 under a mass expiry).
        let reader = {
            let timers = timers.clone();
            std::thread::spawn(move || {
                let mut last = vec![Stats::default(); 2];
                let mut reads = 0;
                while reads < 2_000 {
                    for (i, s) in timers.shard_stats().into_iter().enumerate() {
                        let l = &last[i];
                        assert!(
                            s.scheduled >= l.scheduled
                                && s.expired >= l.expired
                                && s.cancelled >= l.cancelled
                                && s.rejected >= l.rejected
                                && s.lateness.count() >= l.lateness.count(),
                            "shard {i} went back: {l:?} then {s:?}"
                        );
                        last[i] = s;
                    }
                    reads += 1;
                }
            })
        };
        for t in threads {
            t.join().unwrap();
        }
        reader.join().unwrap();
        // At rest: every short deadline (≤ 30 ms) has passed, and every expiry's task ran.
        std::thread::sleep(Duration::from_millis(60));
        eventually(|| timers.stats().expired == books.ran.load(Ordering::SeqCst));
        let stats = timers.stats();
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        let (accepted, refused, ran, cancelled) =
            (get(&books.accepted), get(&books.refused), get(&books.ran), get(&books.cancelled));
        assert!(refused > 0, "round {round}: the storm never filled a shard; the test proves less than it says");
        assert_eq!(
            (stats.scheduled, stats.rejected, stats.expired, stats.cancelled, stats.pending),
            (accepted, refused, ran, cancelled, accepted - ran - cancelled),
            "round {round}: the service's counts against the books"
        );
        assert_adds_up(&stats, &format!("round {round}"));
        let shards = timers.shard_stats();
        assert_eq!(shards.len(), 2);
        let mut sum = Stats::default();
        for (i, s) in shards.iter().enumerate() {
            assert_adds_up(s, &format!("round {round}, shard {i}"));
            sum.scheduled += s.scheduled;
            sum.expired += s.expired;
            sum.cancelled += s.cancelled;
            sum.pending += s.pending;
            sum.rejected += s.rejected;
        }
        assert_eq!(
            (sum.scheduled, sum.expired, sum.cancelled, sum.pending, sum.rejected),
            (stats.scheduled, stats.expired, stats.cancelled, stats.pending, stats.rejected),
            "round {round}: the shards sum to the service"
        );
        assert_eq!(shards[0].lateness.count() + shards[1].lateness.count(), stats.lateness.count());
    }
    // Fill both shards to the brim: 20 sleeps then overflow, each refused by both shards.
    let before = timers.stats();
    let mut filler = Vec::new();
    for shard in 0..2 {
        while let Ok(t) = timers.schedule_on(shard, Duration::from_secs(3600), || ()) {
            filler.push(t);
        }
    }
    let after_fill = timers.stats();
    assert_eq!(after_fill.rejected, before.rejected + 2, "one refusal per shard ended the fill");
    assert_eq!(after_fill.pending, 800);
    let started = Instant::now();
    futures_executor::block_on(async {
        for _ in 0..20 {
            timers.sleep(Duration::from_millis(1)).await;
        }
    });
    assert!(started.elapsed() >= Duration::from_millis(20), "never early");
    let stats = timers.stats();
    assert_eq!(stats.overflowed, 20, "{stats:?}");
    assert_eq!(stats.rejected, after_fill.rejected + 40, "each sleep refused by its home and the other shard");
    assert_eq!((stats.scheduled, stats.expired), (after_fill.scheduled, after_fill.expired), "no shard held them");
    let unfired = timers.stop().unwrap().len() as u64;
    let stats = timers.stats();
    assert_adds_up(&stats, "after stop");
    assert_eq!((stats.unfired, stats.pending), (unfired, 0));
    assert_eq!(unfired, after_fill.pending);
}
