//! The embedded mode: `LocalWheel<u64>` against `tokio_util::time::DelayQueue<u64>` and
//! `nexus_timer::Wheel<u64>`, each used by one thread as its owner uses it, with 1 M timers
//! pending at random deadlines 1–60 s out.
//!
//! - `arm+cancel`: arm a timer at a random deadline 1–60 s out and cancel it (the request
//!   timeout whose response came), with 1 M others pending. Deadlines are precomputed
//!   instants for every peer (an event loop has its timestamp already); one more
//!   `LocalWheel` row arms by delay from the wheel's own now (`arm_from_last_poll`).
//! - `arm`: arming alone, into the 1 M (each arm's bucket tail is a random node: a cache
//!   miss); the timers armed are cancelled outside the timing.
//! - `cancel old`: cancelling random timers among the 1 M (a miss on the node and its two
//!   neighbours); they are armed again outside the timing.
//! - `mass expiry, one deadline`: 1 M timers due at the same instant (a million connections
//!   timing out together), taken out by one poll loop at that instant.
//! - `mass expiry`: 1 M timers at random deadlines 1–60 s out, all taken out by one poll
//!   loop at 61 s (every timer cascades through the levels first: a cache miss per move); an iteration is the whole loop, so the time per fired timer is its time
//!   over 1 M (criterion's rate). (`DelayQueue` takes its expiries through
//!   tokio's clock and a task context; it is left out of this row.)
//!
//! - `(remote handle out)`: the same `LocalWheel` rows with a `RemoteWheel` made and
//!   never used: the owner's cancel and expiry are then one CAS each, and `poll_expired`
//!   checks the remote mail flag.
//!
//! `cargo bench --bench local` (add `-- --quick` for a short run). Bytes per pending timer
//! are measured by `benches/local_memory.rs`.

use criterion::{Criterion, criterion_group, criterion_main};
use nexus_timer::TimerHandle;
use shardwheel::{LocalWheel, TimerKey};
use std::hint::black_box;
use std::time::{Duration, Instant};
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

const PENDING: usize = 1_000_000;
/// Random deadlines precomputed, reused round-robin by the measured loops.
const RING: usize = 1 << 16;

/// xorshift64*: the deadlines' randomness, the same for every peer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A delay 1–60 s, to the microsecond.
    fn delay(&mut self) -> Duration {
        Duration::from_micros(1_000_000 + self.next() % 59_000_000)
    }
}

fn deadlines(start: Instant, n: usize, seed: u64) -> Vec<Instant> {
    let mut rng = Rng(seed);
    (0..n).map(|_| start + rng.delay()).collect()
}

/// What every peer offers the rows.
trait Subject {
    type Key;
    fn arm(&mut self, at: Instant, v: u64) -> Self::Key;
    fn cancel(&mut self, key: Self::Key) -> Option<u64>;
}

struct Local(LocalWheel<u64>);

impl Subject for Local {
    type Key = TimerKey;
    fn arm(&mut self, at: Instant, v: u64) -> TimerKey {
        self.0.arm_at(at, v)
    }
    fn cancel(&mut self, key: TimerKey) -> Option<u64> {
        self.0.cancel(key)
    }
}

struct Nexus(nexus_timer::Wheel<u64>);

impl Subject for Nexus {
    type Key = TimerHandle<u64>;
    fn arm(&mut self, at: Instant, v: u64) -> TimerHandle<u64> {
        self.0.schedule(at, v)
    }
    fn cancel(&mut self, key: TimerHandle<u64>) -> Option<u64> {
        self.0.cancel(key)
    }
}

/// `DelayQueue` with the tokio runtime it needs entered for the whole run.
struct Tokio {
    queue: DelayQueue<u64>,
    _guard: tokio::runtime::EnterGuard<'static>,
}

impl Subject for Tokio {
    type Key = Key;
    fn arm(&mut self, at: Instant, v: u64) -> Key {
        self.queue.insert_at(v, at.into())
    }
    fn cancel(&mut self, key: Key) -> Option<u64> {
        Some(self.queue.remove(&key).into_inner())
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime"))
}

fn local(start: Instant) -> Local {
    Local(LocalWheel::builder().start(start).build().expect("valid settings"))
}

/// nexus-timer sized as a user holding a million timers sizes it: its slab's chunks hold
/// 2²⁰ entries (`Wheel::unbounded(chunk_capacity, now)`), so the 1 M pending (plus the rows'
/// extra arms) fit in one or two chunks. The slab finds a freed entry's chunk by scanning
/// the chunks in turn (`nexus-slab`'s `free_ptr`), so with 4096-entry chunks every cancel of
/// the 1 M walked some 245 chunks: that measured the sizing, not the wheel.
const NEXUS_CHUNK: usize = 1 << 20;

fn nexus_wheel(start: Instant) -> nexus_timer::Wheel<u64> {
    nexus_timer::Wheel::unbounded(NEXUS_CHUNK, start)
}

fn nexus(start: Instant) -> Nexus {
    Nexus(nexus_wheel(start))
}

fn tokio_queue() -> Tokio {
    let guard = runtime().enter();
    Tokio { queue: DelayQueue::new(), _guard: guard }
}

/// A subject with `PENDING` timers armed, and their keys.
fn loaded<S: Subject>(mut s: S, start: Instant) -> (S, Vec<S::Key>) {
    let keys = deadlines(start, PENDING, 7).into_iter().enumerate().map(|(i, at)| s.arm(at, i as u64)).collect();
    (s, keys)
}

/// `arm+cancel`, `arm` and `cancel old` for one subject.
fn rows<S: Subject>(
    c: &mut Criterion,
    name: &str,
    make: impl FnOnce(Instant) -> S,
    teardown: impl FnOnce(S, Vec<S::Key>),
) {
    let start = Instant::now();
    let (mut s, mut keys) = loaded(make(start), start);
    let ring = deadlines(start, RING, 11);
    let mut g = c.benchmark_group("local");
    g.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));

    let mut i = 0usize;
    g.bench_function(format!("arm+cancel 1M pending/{name}"), |b| {
        b.iter(|| {
            i = (i + 1) & (RING - 1);
            let key = s.arm(ring[i], i as u64);
            black_box(s.cancel(key))
        })
    });

    let mut armed = Vec::with_capacity(1 << 20);
    g.bench_function(format!("arm 1M pending/{name}"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters as usize;
            while left > 0 {
                let batch = left.min(1 << 16);
                let t = Instant::now();
                for _ in 0..batch {
                    i = (i + 1) & (RING - 1);
                    armed.push(s.arm(ring[i], i as u64));
                }
                total += t.elapsed();
                for key in armed.drain(..) {
                    black_box(s.cancel(key));
                }
                left -= batch;
            }
            total
        })
    });

    // Random old timers: a walk through the 1 M in a random order, re-armed untimed.
    let mut order: Vec<usize> = (0..PENDING).collect();
    let mut rng = Rng(13);
    for k in (1..order.len()).rev() {
        order.swap(k, rng.next() as usize % (k + 1));
    }
    let mut at = 0usize;
    g.bench_function(format!("cancel old 1M pending/{name}"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters as usize;
            let mut batch_keys = Vec::new();
            while left > 0 {
                let batch = left.min(1 << 16);
                let picked: Vec<usize> = (0..batch).map(|k| order[(at + k) % PENDING]).collect();
                at = (at + batch) % PENDING;
                batch_keys.extend(picked.iter().map(|&j| {
                    // Take the key out, leaving a fresh one to fill back.
                    std::mem::replace(&mut keys[j], s.arm(ring[j & (RING - 1)], j as u64))
                }));
                let t = Instant::now();
                for key in batch_keys.drain(..) {
                    black_box(s.cancel(key));
                }
                total += t.elapsed();
                left -= batch;
            }
            total
        })
    });
    g.finish();
    teardown(s, keys);
}

fn arm_cancel(c: &mut Criterion) {
    rows(c, "LocalWheel", local, |_, _| {});
    // LocalWheel arming by delay from its own now (its last poll), as an event loop would:
    // `arm_from_last_poll`, no clock read (`arm(delay)` reads the clock).
    {
        let start = Instant::now();
        let (mut s, _keys) = loaded(local(start), start);
        let mut rng = Rng(11);
        let delays: Vec<Duration> = (0..RING).map(|_| rng.delay()).collect();
        let mut i = 0usize;
        let mut g = c.benchmark_group("local");
        g.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
        g.bench_function("arm+cancel 1M pending/LocalWheel (arm by delay)", |b| {
            b.iter(|| {
                i = (i + 1) & (RING - 1);
                let key = s.0.arm_from_last_poll(delays[i], i as u64);
                black_box(s.0.cancel(key))
            })
        });
        g.finish();
    }
    // LocalWheel with a `RemoteWheel` out (never used): the owner's cancel is then a CAS
    // on the slot word. Same precomputed instants as the equal-input row.
    {
        let start = Instant::now();
        let (mut s, _keys) = loaded(local(start), start);
        let _remote = s.0.remote();
        let ring = deadlines(start, RING, 11);
        let mut i = 0usize;
        let mut g = c.benchmark_group("local");
        g.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
        g.bench_function("arm+cancel 1M pending/LocalWheel (remote handle out)", |b| {
            b.iter(|| {
                i = (i + 1) & (RING - 1);
                let key = s.arm(ring[i], i as u64);
                black_box(s.cancel(key))
            })
        });
        g.finish();
    }
    // The peers armed by delay as their users arm them: `DelayQueue::insert` with a
    // `Duration` (it reads tokio's clock), nexus-timer with the loop's cached now plus the
    // delay.
    {
        let start = Instant::now();
        let mut rng = Rng(11);
        let delays: Vec<Duration> = (0..RING).map(|_| rng.delay()).collect();
        let mut g = c.benchmark_group("local");
        g.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
        let (mut s, keys) = loaded(nexus(start), start);
        let mut i = 0usize;
        g.bench_function("arm+cancel 1M pending/nexus-timer (arm by now + delay)", |b| {
            b.iter(|| {
                i = (i + 1) & (RING - 1);
                let key = s.0.schedule(start + delays[i], i as u64);
                black_box(s.0.cancel(key))
            })
        });
        for key in keys {
            s.0.cancel(key);
        }
        let (mut s, _keys) = loaded(tokio_queue(), start);
        g.bench_function("arm+cancel 1M pending/DelayQueue (insert by delay)", |b| {
            b.iter(|| {
                i = (i + 1) & (RING - 1);
                let key = s.queue.insert(i as u64, delays[i]);
                black_box(s.queue.remove(&key))
            })
        });
        g.finish();
    }
    rows(c, "nexus-timer", nexus, |mut s, keys| {
        for key in keys {
            s.0.cancel(key);
        }
    });
    rows(c, "DelayQueue", |_| tokio_queue(), |_, _| {});
}

/// Times a whole mass expiry, `iters` times over: `arm` arms `PENDING` timers on a fresh
/// wheel made at the given start (not timed) and says when they are all due; `fire` expires
/// them all and says how many fired (timed). The wheel is dropped after the clock stops.
fn timed_expiry<S>(
    iters: u64,
    mut arm: impl FnMut(Instant) -> (S, Instant),
    mut fire: impl FnMut(&mut S, Instant) -> usize,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let (mut wheel, due) = arm(Instant::now());
        let t = Instant::now();
        let n = fire(&mut wheel, due);
        total += t.elapsed();
        assert_eq!(n, PENDING);
        black_box(wheel);
    }
    total
}

/// `LocalWheel`'s side of a mass expiry: `poll_expired` until nothing is due.
fn drain_local(s: &mut Local, due: Instant) -> usize {
    let mut n = 0usize;
    while let Some(fired) = s.0.poll_expired(due) {
        black_box(fired);
        n += 1;
    }
    n
}

/// `PENDING` timers on one deadline, 30 s after `start`.
fn one_deadline(start: Instant) -> (Local, Instant) {
    let mut s = local(start);
    let at = start + Duration::from_secs(30);
    for i in 0..PENDING {
        s.0.arm_at(at, i as u64);
    }
    (s, at)
}

/// nexus-timer's side: `PENDING` timers at `at(start)`, and the buffer its `poll` fills
/// (allocated before the clock starts, as its users keep one).
fn nexus_loaded(start: Instant, deadlines: Vec<Instant>) -> ((nexus_timer::Wheel<u64>, Vec<u64>), Instant) {
    let mut wheel = nexus_wheel(start);
    let due = deadlines.iter().copied().max().unwrap_or(start);
    for (i, at) in deadlines.into_iter().enumerate() {
        wheel.schedule_forget(at, i as u64);
    }
    ((wheel, Vec::with_capacity(PENDING)), due)
}

fn mass_expiry(c: &mut Criterion) {
    // Each iteration is a whole mass expiry (the 1 M arms before it are not timed); the time
    // per fired timer is the iteration's time over 1 M (criterion prints the rate too).
    let mut g = c.benchmark_group("local");
    g.sample_size(10)
        .sampling_mode(criterion::SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(1))
        .throughput(criterion::Throughput::Elements(PENDING as u64));
    let random = |start| {
        let (s, keys) = loaded(local(start), start);
        drop(keys);
        (s, start + Duration::from_secs(61))
    };
    g.bench_function("mass expiry 1M/LocalWheel", |b| b.iter_custom(|iters| timed_expiry(iters, random, drain_local)));
    g.bench_function("mass expiry 1M, one deadline/LocalWheel", |b| {
        b.iter_custom(|iters| timed_expiry(iters, one_deadline, drain_local))
    });
    g.bench_function("mass expiry 1M, one deadline/LocalWheel (remote handle out)", |b| {
        b.iter_custom(|iters| {
            timed_expiry(
                iters,
                |start| {
                    let (s, at) = one_deadline(start);
                    let remote = s.0.remote();
                    ((s, remote), at)
                },
                |(s, _remote), due| drain_local(s, due),
            )
        })
    });
    let nexus_poll = |(wheel, buf): &mut (nexus_timer::Wheel<u64>, Vec<u64>), due| wheel.poll(due, buf);
    g.bench_function("mass expiry 1M, one deadline/nexus-timer", |b| {
        b.iter_custom(|iters| {
            timed_expiry(iters, |start| nexus_loaded(start, vec![start + Duration::from_secs(30); PENDING]), nexus_poll)
        })
    });
    g.bench_function("mass expiry 1M/nexus-timer", |b| {
        b.iter_custom(|iters| {
            timed_expiry(
                iters,
                |start| {
                    let (wheel, _) = nexus_loaded(start, deadlines(start, PENDING, 7));
                    (wheel, start + Duration::from_secs(61))
                },
                nexus_poll,
            )
        })
    });
    g.finish();
}

criterion_group!(benches, arm_cancel, mass_expiry);
criterion_main!(benches);
