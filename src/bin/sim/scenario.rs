//! The scenario: connections with idle timeouts, requests with request timeouts, producer
//! threads that pace activity over them, and the tallies every thread writes.
//!
//! Threads and what they write:
//! - each producer owns a slice of the connections, arms their idle timeouts, then drives
//!   activity over them at its share of the rate; it counts in plain locals and publishes
//!   them into its own cache-line-sized [`ProducerTally`] once per batch;
//! - the shard threads run the tasks, which record lateness and count firings in
//!   [`FiredTally`] and the histograms;
//! - every task carries a [`TaskGuard`] whose `Drop` counts the task's drop, on whichever
//!   thread drops it (the producer on a winning cancel, the shard after running it, the
//!   main thread for the tasks `stop()` hands back);
//! - the main thread prints progress, stops the producers and the service, and reads it all.

use crate::args::Config;
use crate::histogram::{Histogram, Snapshot};
use crate::report;
use shardwheel::{BuildError, Stats, Timeout, TimerService};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// Most events a producer does between two looks at the clock and the stop flag, when it is
/// behind its schedule.
const MAX_BURST: u64 = 4_096;
/// A producer paces itself in batches of this much time's worth of events, sleeping between.
const BATCH: Duration = Duration::from_millis(1);

// ─── Tallies ────────────────────────────────────────────────────────────────────────────

/// What one producer did. Plain numbers: the producer counts into a local copy.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Activity events (each: one reset, one request), excluding events that found no
    /// active connection.
    pub events: u64,
    /// Idle timeouts scheduled (at setup).
    pub idle_armed: u64,
    /// Request timeouts scheduled.
    pub request_armed: u64,
    /// `reset()` calls that returned true.
    pub resets_ok: u64,
    /// `reset()` calls on an active connection that returned false: its idle timeout had
    /// already fired, so the connection is closed. Expected 0 when the rate is adequate.
    pub resets_failed: u64,
    /// Request `cancel()` calls that returned true (the response arrived in time).
    pub cancels_ok: u64,
    /// Request `cancel()` calls that returned false (the timeout had fired first).
    pub cancels_failed: u64,
    /// Requests that never get a response (their handles are dropped, so they fire).
    pub lost: u64,
    /// `schedule_on` calls that returned an error (the task came back and was dropped).
    pub schedule_failed: u64,
    /// Tasks built (idle, request); each carries a drop guard.
    pub created_idle: u64,
    pub created_request: u64,
    /// Connections chosen to go quiet.
    pub quiet: u64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.events += o.events;
        self.idle_armed += o.idle_armed;
        self.request_armed += o.request_armed;
        self.resets_ok += o.resets_ok;
        self.resets_failed += o.resets_failed;
        self.cancels_ok += o.cancels_ok;
        self.cancels_failed += o.cancels_failed;
        self.lost += o.lost;
        self.schedule_failed += o.schedule_failed;
        self.created_idle += o.created_idle;
        self.created_request += o.created_request;
        self.quiet += o.quiet;
    }

    pub fn scheduled(&self) -> u64 {
        self.idle_armed + self.request_armed
    }
}

/// A producer's published counts (written by that producer only, read by the main thread)
/// and the drop counts of its tasks (written by whoever drops them; mostly the producer
/// itself, which drops the tasks its cancels win). Aligned so no two producers share a
/// cache line. All `Relaxed`: the main thread reads exact values only after joining.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct ProducerTally {
    published: [AtomicU64; 12],
    dropped_idle: AtomicU64,
    dropped_request: AtomicU64,
}

impl ProducerTally {
    fn publish(&self, c: &Counts) {
        let values = [
            c.events,
            c.idle_armed,
            c.request_armed,
            c.resets_ok,
            c.resets_failed,
            c.cancels_ok,
            c.cancels_failed,
            c.lost,
            c.schedule_failed,
            c.created_idle,
            c.created_request,
            c.quiet,
        ];
        for (slot, v) in self.published.iter().zip(values) {
            // A single writer: a plain store, no read-modify-write needed.
            slot.store(v, Ordering::Relaxed);
        }
    }

    fn load(&self) -> Counts {
        let v: Vec<u64> = self.published.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        Counts {
            events: v[0],
            idle_armed: v[1],
            request_armed: v[2],
            resets_ok: v[3],
            resets_failed: v[4],
            cancels_ok: v[5],
            cancels_failed: v[6],
            lost: v[7],
            schedule_failed: v[8],
            created_idle: v[9],
            created_request: v[10],
            quiet: v[11],
        }
    }
}

/// Tasks dropped, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    pub idle: u64,
    pub request: u64,
}

/// What the tasks saw when they ran. Written by the shard threads.
#[derive(Debug, Default)]
pub struct FiredTally {
    pub idle: AtomicU64,
    pub request: AtomicU64,
    /// Tasks that ran before their requested deadline.
    pub early: AtomicU64,
    /// The earliest of those, in ns before the deadline.
    pub worst_early_ns: AtomicU64,
    /// The largest lateness (µs) since the progress line last took it.
    pub interval_max_us: AtomicU64,
}

/// Everything the threads share: leaked once at start so tasks can hold a `&'static` to it
/// (no reference count to bump per task).
#[derive(Debug)]
pub struct Shared {
    /// The simulation's time origin; deadlines are stored as nanoseconds since it.
    pub start: Instant,
    pub producers: Box<[ProducerTally]>,
    pub fired: FiredTally,
    pub idle_lateness: Histogram,
    pub request_lateness: Histogram,
    /// How late a plain `thread::sleep(tick)` wakes up on this machine meanwhile, corrected
    /// for coordinated omission (see `Histogram::record_corrected`): the operating system's
    /// share of any lateness, weighted by time as the timeouts' lateness is.
    pub sleep_lateness: Histogram,
}

impl Shared {
    fn counts(&self) -> Counts {
        let mut total = Counts::default();
        for p in self.producers.iter() {
            total.add(&p.load());
        }
        total
    }

    fn drops(&self) -> Drops {
        let mut d = Drops::default();
        for p in self.producers.iter() {
            d.idle += p.dropped_idle.load(Ordering::Relaxed);
            d.request += p.dropped_request.load(Ordering::Relaxed);
        }
        d
    }

    fn expired(&self) -> (u64, u64) {
        (
            self.fired.idle.load(Ordering::Relaxed),
            self.fired.request.load(Ordering::Relaxed),
        )
    }

    /// Nanoseconds from the time origin to `at`.
    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_nanos() as u64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Idle,
    Request,
}

/// Rides inside every task: counts the task's drop (exactly once, wherever it happens) and,
/// when the task runs, records its lateness.
#[derive(Debug)]
struct TaskGuard {
    shared: &'static Shared,
    producer: u32,
    kind: Kind,
}

impl TaskGuard {
    /// The task runs: measure how late it is against `deadline_ns` (ns since the time
    /// origin), then drop the guard.
    fn fire(self, deadline_ns: u64) {
        let now = self.shared.nanos(Instant::now());
        let (counter, histogram) = match self.kind {
            Kind::Idle => (&self.shared.fired.idle, &self.shared.idle_lateness),
            Kind::Request => (&self.shared.fired.request, &self.shared.request_lateness),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if now < deadline_ns {
            self.shared.fired.early.fetch_add(1, Ordering::Relaxed);
            self.shared
                .fired
                .worst_early_ns
                .fetch_max(deadline_ns - now, Ordering::Relaxed);
        } else {
            let late_us = (now - deadline_ns) / 1_000;
            histogram.record(late_us);
            self.shared.fired.interval_max_us.fetch_max(late_us, Ordering::Relaxed);
        }
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let tally = &self.shared.producers[self.producer as usize];
        match self.kind {
            Kind::Idle => tally.dropped_idle.fetch_add(1, Ordering::Relaxed),
            Kind::Request => tally.dropped_request.fetch_add(1, Ordering::Relaxed),
        };
    }
}

// ─── Connections ────────────────────────────────────────────────────────────────────────

/// One connection: 32 bytes.
#[derive(Debug, Default)]
struct Conn {
    /// The idle timeout's handle, set once when it is armed.
    idle: OnceLock<Timeout>,
    /// The idle timeout's current requested deadline, in ns since the time origin, which
    /// the idle task measures its lateness against. See `Producer::activity` for why a
    /// stale read can only overstate lateness.
    deadline_ns: AtomicU64,
}

/// A producer's connections, shared with their idle tasks (one `Arc` per producer, so the
/// reference count is only bumped by that producer and by the tasks that end).
#[derive(Debug)]
struct ConnTable {
    conns: Box<[Conn]>,
}

/// SplitMix64: small, fast, and good enough to pick which connections go quiet.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        let mut r = Rng(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next();
        r
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        p >= 1.0 || (p > 0.0 && (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p)
    }

    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// `quiet_at_ms` of a connection that never goes quiet.
const NEVER_QUIET: u32 = u32::MAX;
/// `quiet_at_ms` of a connection that is closed (its idle timeout fired while it was
/// active, or could not be armed).
const CLOSED: u32 = 0;

// ─── Producers ──────────────────────────────────────────────────────────────────────────

/// Phases the main thread and the producers step through together.
#[derive(Debug)]
struct Phase {
    /// Every producer has armed its idle timeouts (and the main thread has measured memory).
    armed: Barrier,
    /// Start of the steady state, set by the main thread before it passes `go`.
    steady_start: OnceLock<Instant>,
    go: Barrier,
    stop: AtomicBool,
}

struct Producer {
    index: usize,
    shared: &'static Shared,
    service: TimerService,
    table: Arc<ConnTable>,
    /// Shards this producer's connections are spread over (connection j: `shards[j % len]`).
    shards: Vec<usize>,
    /// When each connection goes quiet, in ms since the steady state began.
    quiet_at_ms: Vec<u32>,
    cursor: usize,
    /// Requests waiting for their response, oldest first.
    in_flight: VecDeque<Timeout>,
    ring: usize,
    rng: Rng,
    config: Config,
    counts: Counts,
}

/// The shards producer `p` of `producers` schedules on: its own when there are as many
/// shards as producers (an event loop with a home shard), spread so every shard serves
/// some producer when the counts differ.
fn shards_of(p: usize, producers: usize, shards: usize) -> Vec<usize> {
    if shards >= producers {
        (p..shards).step_by(producers).collect()
    } else {
        vec![p % shards]
    }
}

impl Producer {
    fn new(index: usize, shared: &'static Shared, service: TimerService, config: &Config) -> Producer {
        let n = config.connections_of(index);
        let table = Arc::new(ConnTable {
            conns: (0..n).map(|_| Conn::default()).collect(),
        });
        let mut rng = Rng::new(config.seed, index as u64);
        // Quiet connections go quiet at a uniformly random time early enough that their idle
        // timeout fires within the run (or at once, if the run is too short for that).
        let window_ms = config
            .duration
            .saturating_sub(config.idle_timeout)
            .saturating_sub(Duration::from_millis(50))
            .as_millis()
            .min(u128::from(NEVER_QUIET - 1)) as u64;
        let mut quiet = 0;
        let quiet_at_ms = (0..n)
            .map(|_| {
                if rng.chance(config.idle_fraction) {
                    quiet += 1;
                    // 1 + …: 0 is CLOSED; quiet at 1 ms is quiet from the start.
                    1 + if window_ms > 0 { rng.below(window_ms) as u32 } else { 0 }
                } else {
                    NEVER_QUIET
                }
            })
            .collect();
        Producer {
            index,
            shared,
            shards: shards_of(index, config.producers, service.shard_count()),
            service,
            table,
            quiet_at_ms,
            cursor: 0,
            in_flight: VecDeque::with_capacity(config.in_flight),
            ring: config.in_flight,
            rng,
            config: config.clone(),
            counts: Counts {
                quiet,
                ..Counts::default()
            },
        }
    }

    fn tally(&self) -> &'static ProducerTally {
        &self.shared.producers[self.index]
    }

    fn guard(&mut self, kind: Kind) -> TaskGuard {
        match kind {
            Kind::Idle => self.counts.created_idle += 1,
            Kind::Request => self.counts.created_request += 1,
        }
        TaskGuard {
            shared: self.shared,
            producer: self.index as u32,
            kind,
        }
    }

    /// Arms the idle timeout of every connection of this producer.
    fn arm_idle(&mut self) {
        let idle = self.config.idle_timeout;
        let idle_ns = idle.as_nanos() as u64;
        for j in 0..self.table.conns.len() {
            // The requested deadline is taken from an instant *before* the schedule call,
            // so it is never later than the one the service computes: lateness measured
            // against it can only be overstated, never turn into a false "early".
            let deadline = self.shared.nanos(Instant::now()) + idle_ns;
            self.table.conns[j].deadline_ns.store(deadline, Ordering::Relaxed);
            let guard = self.guard(Kind::Idle);
            let table = self.table.clone();
            let at = j as u32;
            let task = move || {
                let deadline = table.conns[at as usize].deadline_ns.load(Ordering::Relaxed);
                guard.fire(deadline);
            };
            let shard = self.shards[j % self.shards.len()];
            match self.service.schedule_on(shard, idle, task) {
                Ok(timeout) => {
                    self.counts.idle_armed += 1;
                    // A fresh OnceLock: the set cannot fail.
                    let _ = self.table.conns[j].idle.set(timeout);
                }
                Err(_task_back) => {
                    self.counts.schedule_failed += 1;
                    self.quiet_at_ms[j] = CLOSED;
                }
            }
            if j % 65_536 == 0 {
                self.tally().publish(&self.counts);
            }
        }
        self.tally().publish(&self.counts);
    }

    /// The next active connection in round-robin order, if any is left.
    fn next_active(&mut self, now_ms: u32) -> Option<usize> {
        let n = self.quiet_at_ms.len();
        for _ in 0..n {
            let j = self.cursor;
            self.cursor = if j + 1 == n { 0 } else { j + 1 };
            if now_ms < self.quiet_at_ms[j] {
                return Some(j);
            }
        }
        None
    }

    /// One activity event: push out a connection's idle timeout, send a request (arm its
    /// timeout), and let the oldest in-flight request's response arrive (cancel it).
    /// Returns false if no connection is active any more.
    fn activity(&mut self, steady_start: Instant) -> bool {
        let now = Instant::now();
        let now_ms = now
            .saturating_duration_since(steady_start)
            .as_millis()
            .min(u128::from(u32::MAX)) as u32;
        let Some(j) = self.next_active(now_ms) else {
            return false;
        };
        self.counts.events += 1;
        let now_ns = self.shared.nanos(now);
        let conn = &self.table.conns[j];
        let Some(idle) = conn.idle.get() else {
            self.quiet_at_ms[j] = CLOSED;
            return true;
        };
        if idle.reset(self.config.idle_timeout) {
            // Publish the new requested deadline for the idle task. `now` was read before
            // `reset`, so this is never later than the deadline the service now holds.
            //
            // Why a stale read in the task is harmless: the value is stored only *after* the
            // reset succeeded, so when the timeout fires the task may still read an older
            // deadline, never a newer one (a reset after the firing returns false and stores
            // nothing). Deadlines of one connection only grow, so an older value is an
            // earlier one: it can only make the lateness look larger, never make a firing
            // look early. Relaxed suffices for the same reason: any value the task can read
            // is at most the deadline the timeout actually fired for.
            conn.deadline_ns
                .store(now_ns + self.config.idle_timeout.as_nanos() as u64, Ordering::Relaxed);
            self.counts.resets_ok += 1;
        } else {
            // The idle timeout fired although the connection was active: a real server has
            // closed it by now, so this one stops getting activity too.
            self.counts.resets_failed += 1;
            self.quiet_at_ms[j] = CLOSED;
            return true;
        }

        // The request: its deadline is captured in the task.
        let deadline = now_ns + self.config.request_timeout.as_nanos() as u64;
        let guard = self.guard(Kind::Request);
        let task = move || guard.fire(deadline);
        let shard = self.shards[j % self.shards.len()];
        match self.service.schedule_on(shard, self.config.request_timeout, task) {
            Ok(timeout) => {
                self.counts.request_armed += 1;
                if self.rng.chance(self.config.lost_fraction) {
                    // No response will ever come: drop the handle (that does not cancel).
                    self.counts.lost += 1;
                } else {
                    if self.in_flight.len() == self.ring
                        && let Some(oldest) = self.in_flight.pop_front()
                    {
                        if oldest.cancel() {
                            self.counts.cancels_ok += 1;
                        } else {
                            self.counts.cancels_failed += 1;
                        }
                    }
                    self.in_flight.push_back(timeout);
                }
            }
            Err(_task_back) => self.counts.schedule_failed += 1,
        }
        true
    }

    /// Paces activity at this producer's share of the rate until told to stop: sleeps
    /// between batches of `BATCH` worth of events, and catches up (in bursts of at most
    /// `MAX_BURST`) when it fell behind.
    fn steady(&mut self, phase: &Phase) {
        let start = *phase.steady_start.get().expect("set before the go barrier");
        let rate = self.config.rate_per_producer();
        let batch = ((rate * BATCH.as_secs_f64()).ceil() as u64).max(1);
        let mut done: u64 = 0;
        while !phase.stop.load(Ordering::Relaxed) {
            let elapsed = start.elapsed().as_secs_f64();
            let due = (elapsed * rate) as u64;
            if due <= done {
                // Ahead of schedule: sleep until the next batch is due.
                let next = start + Duration::from_secs_f64((done + batch) as f64 / rate);
                thread::sleep(next.saturating_duration_since(Instant::now()));
                continue;
            }
            let n = (due - done).min(MAX_BURST);
            for _ in 0..n {
                if !self.activity(start) {
                    // Every connection went quiet or closed: nothing left to do.
                    self.tally().publish(&self.counts);
                    while !phase.stop.load(Ordering::Relaxed) {
                        thread::sleep(Duration::from_millis(10));
                    }
                    return;
                }
            }
            done += n;
            self.tally().publish(&self.counts);
        }
        self.tally().publish(&self.counts);
    }
}

// ─── The run ────────────────────────────────────────────────────────────────────────────

/// Everything the report needs.
#[derive(Debug)]
pub struct Outcome {
    pub shard_count: usize,
    pub tick: Duration,
    /// Time to arm every idle timeout (all producers in parallel).
    pub setup: Duration,
    pub rss_before: Option<u64>,
    pub rss_after: Option<u64>,
    /// The steady state's actual length.
    pub steady: Duration,
    pub counts: Counts,
    /// Tasks that ran (idle, request), as counted by the tasks themselves.
    pub fired_idle: u64,
    pub fired_request: u64,
    pub early: u64,
    pub worst_early_ns: u64,
    pub idle_lateness: Snapshot,
    pub request_lateness: Snapshot,
    pub sleep_lateness: Snapshot,
    /// `pending()` once activity stopped.
    pub pending_at_end: usize,
    /// Returned by `stop()`, by kind (counted by the drops of their tasks).
    pub unfired: Drops,
    pub unfired_len: usize,
    pub stop_time: Duration,
    /// All task drops, once everything was dropped.
    pub drops: Drops,
    pub stats: Stats,
    pub total: Duration,
}

/// Runs the scenario; progress goes to stderr.
pub fn run(config: &Config, began: Instant) -> Result<Outcome, BuildError> {
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        start: Instant::now(),
        producers: (0..config.producers).map(|_| ProducerTally::default()).collect(),
        fired: FiredTally::default(),
        idle_lateness: Histogram::new(),
        request_lateness: Histogram::new(),
        sleep_lateness: Histogram::new(),
    }));
    let service = TimerService::builder()
        .shards(config.shards)
        .tick(config.tick)
        .pin_threads(config.pin_threads)
        .thread_name("sim-timer")
        .build()?;
    let phase = Arc::new(Phase {
        armed: Barrier::new(config.producers + 1),
        steady_start: OnceLock::new(),
        go: Barrier::new(config.producers + 1),
        stop: AtomicBool::new(false),
    });

    let rss_before = report::rss_bytes();
    eprintln!(
        "arming {} idle timeouts on {} producer threads…",
        crate::args::group(config.connections as u64),
        config.producers
    );
    let arming = Instant::now();
    let producers: Vec<_> = (0..config.producers)
        .map(|p| {
            let service = service.clone();
            let phase = phase.clone();
            let config = config.clone();
            thread::Builder::new()
                .name(format!("sim-producer-{p}"))
                .spawn(move || {
                    let mut producer = Producer::new(p, shared, service, &config);
                    producer.arm_idle();
                    phase.armed.wait();
                    phase.go.wait();
                    producer.steady(&phase);
                    producer.counts
                })
                .expect("spawn a producer thread")
        })
        .collect();
    phase.armed.wait();
    let setup = arming.elapsed();
    let rss_after = report::rss_bytes();
    eprintln!(
        "armed in {:.3} s; steady state for {:.1} s",
        setup.as_secs_f64(),
        config.duration.as_secs_f64()
    );

    let steady_start = Instant::now();
    phase.steady_start.set(steady_start).expect("set once");
    phase.go.wait();
    let baseline = {
        let phase = phase.clone();
        let tick = config.tick;
        thread::Builder::new()
            .name("sim-baseline".into())
            .spawn(move || {
                while !phase.stop.load(Ordering::Relaxed) {
                    let slept = Instant::now();
                    thread::sleep(tick);
                    let over = slept.elapsed().saturating_sub(tick);
                    shared
                        .sleep_lateness
                        .record_corrected(over.as_micros() as u64, tick.as_micros() as u64);
                }
            })
            .expect("spawn the baseline thread")
    };
    progress(config, shared, &service, steady_start);
    phase.stop.store(true, Ordering::Relaxed);
    baseline.join().expect("the baseline thread does not panic");
    let mut counts = Counts::default();
    for handle in producers {
        match handle.join() {
            Ok(c) => counts.add(&c),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    let steady = steady_start.elapsed();

    // Activity has stopped: what is still pending?
    let pending_at_end = service.pending();
    eprintln!(
        "activity stopped; {} timeouts pending; stopping the service…",
        crate::args::group(pending_at_end as u64)
    );
    let stopping = Instant::now();
    let unfired_list = service.stop().expect("stop() from the main thread");
    let stop_time = stopping.elapsed();
    // The shard threads are joined: every task that ran or was cancelled has been dropped.
    // What the unfired tasks' drops add now is exactly what stop() handed back, by kind.
    let before = shared.drops();
    let unfired_len = unfired_list.len();
    for unfired in unfired_list {
        drop(unfired.into_task());
    }
    let after = shared.drops();
    let unfired = Drops {
        idle: after.idle - before.idle,
        request: after.request - before.request,
    };
    let stats = service.stats();
    drop(service);

    let (fired_idle, fired_request) = shared.expired();
    Ok(Outcome {
        shard_count: config.shards,
        tick: config.tick,
        setup,
        rss_before,
        rss_after,
        steady,
        counts,
        fired_idle,
        fired_request,
        early: shared.fired.early.load(Ordering::Relaxed),
        worst_early_ns: shared.fired.worst_early_ns.load(Ordering::Relaxed),
        idle_lateness: shared.idle_lateness.snapshot(),
        request_lateness: shared.request_lateness.snapshot(),
        sleep_lateness: shared.sleep_lateness.snapshot(),
        pending_at_end,
        unfired,
        unfired_len,
        stop_time,
        drops: shared.drops(),
        stats,
        total: began.elapsed(),
    })
}

/// One line per second to stderr until the steady state is over.
fn progress(config: &Config, shared: &Shared, service: &TimerService, start: Instant) {
    let end = start + config.duration;
    let mut prev = (start, shared.counts(), shared.expired());
    let mut second = 1u32;
    loop {
        let target = (start + Duration::from_secs(u64::from(second))).min(end);
        thread::sleep(target.saturating_duration_since(Instant::now()));
        let now = Instant::now();
        let counts = shared.counts();
        let expired = shared.expired();
        let secs = now.duration_since(prev.0).as_secs_f64().max(1e-9);
        let per_sec = |a: u64, b: u64| (a - b) as f64 / secs;
        eprintln!(
            "{}",
            report::progress_line(
                now.duration_since(start),
                per_sec(counts.scheduled(), prev.1.scheduled()),
                per_sec(counts.resets_ok, prev.1.resets_ok),
                per_sec(counts.cancels_ok, prev.1.cancels_ok),
                per_sec(expired.0 + expired.1, prev.2.0 + prev.2.1),
                shared.fired.interval_max_us.swap(0, Ordering::Relaxed),
                service.pending(),
            )
        );
        prev = (now, counts, expired);
        if target >= end {
            break;
        }
        second += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_spread_over_producers() {
        assert_eq!(shards_of(0, 2, 2), vec![0]);
        assert_eq!(shards_of(1, 2, 2), vec![1]);
        assert_eq!(shards_of(0, 2, 5), vec![0, 2, 4]);
        assert_eq!(shards_of(1, 2, 5), vec![1, 3]);
        assert_eq!(shards_of(3, 4, 2), vec![1]);
    }

    #[test]
    fn rng_chance_and_below() {
        let mut r = Rng::new(1, 0);
        let hits = (0..100_000).filter(|_| r.chance(0.1)).count();
        assert!((9_000..11_000).contains(&hits), "{hits}");
        assert!((0..1_000).all(|_| r.below(7) < 7));
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
    }

    #[test]
    fn conn_is_small() {
        assert_eq!(std::mem::size_of::<Conn>(), 32);
    }
}
