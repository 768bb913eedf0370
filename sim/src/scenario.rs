//! The scenario: connections with idle timeouts, requests with request timeouts, producer
//! threads that pace activity over them, and the tallies every thread writes.
//!
//! The scenario is generic over [`SimTimer`]: shardwheel and every peer of `--compare` run
//! this same code, with the same tasks, rates and random choices.
//!
//! Threads and what they write:
//! - each producer owns a slice of the connections, arms their idle timeouts, then drives
//!   activity over them at its share of the rate; it counts in plain locals and publishes
//!   them into its own cache-line-sized [`ProducerTally`] once per batch;
//! - the timer's threads run the tasks, which record lateness and count firings in
//!   [`FiredTally`] and the histograms;
//! - every task carries a [`TaskGuard`] whose `Drop` counts the task's drop, on whichever
//!   thread drops it (the producer on a winning cancel, the timer thread after running it,
//!   the main thread for the tasks `stop()` hands back or the handles still hold);
//! - the main thread shows progress, stops the producers and the timer, and reads it all.

use crate::args::{Config, group};
use crate::histogram::{Histogram, Snapshot};
use crate::measure::{self, Usage};
use crate::progress::Progress;
use crate::report;
use crate::timer::SimTimer;
use shardwheel::Stats;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
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
    /// Arms the timer refused (the task was dropped): idle ones at setup, request ones.
    pub idle_failed: u64,
    pub request_failed: u64,
    /// Tasks built (idle, request); each carries a drop guard. Beyond one per idle arm,
    /// idle tasks are built for timers that reset by arming again.
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
        self.idle_failed += o.idle_failed;
        self.request_failed += o.request_failed;
        self.created_idle += o.created_idle;
        self.created_request += o.created_request;
        self.quiet += o.quiet;
    }

    pub fn scheduled(&self) -> u64 {
        self.idle_armed + self.request_armed
    }

    /// Arms the timer refused.
    pub fn schedule_failed(&self) -> u64 {
        self.idle_failed + self.request_failed
    }

    /// Idle tasks built for resets that arm again (each either replaced a pending idle
    /// timeout, whose task was dropped, or was dropped unused when the reset lost).
    pub fn reset_tasks(&self) -> u64 {
        self.created_idle - self.idle_armed - self.idle_failed
    }
}

/// A producer's published counts (written by that producer only, read by the main thread)
/// and the drop counts of its tasks (written by whoever drops them; mostly the producer
/// itself, which drops the tasks its cancels win). Aligned so no two producers share a
/// cache line. All `Relaxed`: the main thread reads exact values only after joining.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct ProducerTally {
    published: [AtomicU64; 13],
    dropped_idle: AtomicU64,
    dropped_request: AtomicU64,
    /// Of those, the tasks dropped without having run (cancelled, or unfired at the end).
    unrun_idle: AtomicU64,
    unrun_request: AtomicU64,
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
            c.idle_failed,
            c.request_failed,
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
            idle_failed: v[8],
            request_failed: v[9],
            created_idle: v[10],
            created_request: v[11],
            quiet: v[12],
        }
    }
}

/// Tasks dropped, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    pub idle: u64,
    pub request: u64,
}

/// What the tasks saw when they ran. Written by the timer's threads.
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

    /// Tasks dropped without having run.
    fn unrun(&self) -> Drops {
        let mut d = Drops::default();
        for p in self.producers.iter() {
            d.idle += p.unrun_idle.load(Ordering::Relaxed);
            d.request += p.unrun_request.load(Ordering::Relaxed);
        }
        d
    }

    fn expired(&self) -> (u64, u64) {
        (self.fired.idle.load(Ordering::Relaxed), self.fired.request.load(Ordering::Relaxed))
    }

    /// Nanoseconds from the time origin to `at`.
    fn nanos(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_nanos() as u64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
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
    /// Set when the task runs, just before the guard drops.
    ran: bool,
}

impl TaskGuard {
    /// The task runs: measure how late it is against `deadline_ns` (ns since the time
    /// origin), then drop the guard.
    fn fire(mut self, deadline_ns: u64) {
        let now = self.shared.nanos(Instant::now());
        let (counter, histogram) = match self.kind {
            Kind::Idle => (&self.shared.fired.idle, &self.shared.idle_lateness),
            Kind::Request => (&self.shared.fired.request, &self.shared.request_lateness),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if now < deadline_ns {
            self.shared.fired.early.fetch_add(1, Ordering::Relaxed);
            self.shared.fired.worst_early_ns.fetch_max(deadline_ns - now, Ordering::Relaxed);
        } else {
            let late_us = (now - deadline_ns) / 1_000;
            histogram.record(late_us);
            self.shared.fired.interval_max_us.fetch_max(late_us, Ordering::Relaxed);
        }
        self.ran = true;
    }
}

/// What every timer runs when a timeout fires: records the lateness and the firing, counts
/// its own drop. 32 bytes, the size of the closures a server would arm.
#[derive(Debug)]
pub struct Task {
    guard: TaskGuard,
    what: What,
}

#[derive(Debug)]
enum What {
    /// A connection's idle timeout: its current requested deadline is in the table, since
    /// resets move it.
    Idle { table: Arc<DeadlineTable>, at: u32 },
    /// A request timeout: its deadline never moves.
    Request { deadline_ns: u64 },
}

impl Task {
    /// The timeout fired: measure its lateness against its requested deadline, count it,
    /// drop the task.
    pub fn run(self) {
        let deadline = match &self.what {
            What::Idle { table, at } => table.deadline_ns[*at as usize].load(Ordering::Relaxed),
            What::Request { deadline_ns } => *deadline_ns,
        };
        self.guard.fire(deadline);
    }

    /// Idle or request.
    pub fn kind(&self) -> Kind {
        self.guard.kind
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let tally = &self.shared.producers[self.producer as usize];
        match self.kind {
            Kind::Idle => tally.dropped_idle.fetch_add(1, Ordering::Relaxed),
            Kind::Request => tally.dropped_request.fetch_add(1, Ordering::Relaxed),
        };
        if !self.ran {
            match self.kind {
                Kind::Idle => tally.unrun_idle.fetch_add(1, Ordering::Relaxed),
                Kind::Request => tally.unrun_request.fetch_add(1, Ordering::Relaxed),
            };
        }
    }
}

// ─── Connections ────────────────────────────────────────────────────────────────────────

/// The requested deadlines of a producer's connections' idle timeouts, in ns since the time
/// origin, shared with their idle tasks (one `Arc` per producer, so the reference count is
/// only bumped by that producer and by the tasks that end). See `Producer::activity` for
/// why a stale read can only overstate lateness.
#[derive(Debug)]
pub struct DeadlineTable {
    deadline_ns: Box<[AtomicU64]>,
}

/// The simulator's own bytes per connection, whatever the timer: the requested deadline
/// (8 B) and the time it goes quiet (4 B). The handle is counted as the timer's.
pub const SIM_BYTES_PER_CONNECTION: u64 = 12;

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
    /// Start of the steady state: set by the main thread once every producer has armed its
    /// idle timeouts and the memory is measured; the producers wait for it.
    steady_start: OnceLock<Instant>,
    /// Set when activity must stop (the end of the steady state, or the main thread giving up).
    stop: AtomicBool,
}

impl Phase {
    /// Waits for the steady state to start; `None` if told to stop first.
    fn wait_for_start(&self) -> Option<Instant> {
        loop {
            if let Some(&start) = self.steady_start.get() {
                return Some(start);
            }
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Sets the stop flag when dropped: if the main thread unwinds out of the run, the producers
/// and the baseline thread still finish, so that the scope can join them.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One producer thread's connections and requests. Returned to the main thread at the end,
/// so that its handles live until the timer has stopped.
struct Producer<T: SimTimer> {
    index: usize,
    shared: &'static Shared,
    /// The idle timeouts' handles, by connection; `None` where the timer refused to arm.
    idle: Vec<Option<T::Handle>>,
    table: Arc<DeadlineTable>,
    /// Lanes (shards) this producer's connections are spread over (connection j:
    /// `lanes[j % len]`).
    lanes: Vec<usize>,
    /// When each connection goes quiet, in ms since the steady state began.
    quiet_at_ms: Vec<u32>,
    cursor: usize,
    /// Requests waiting for their response, oldest first.
    in_flight: VecDeque<T::Handle>,
    ring: usize,
    rng: Rng,
    config: Config,
    counts: Counts,
}

/// The lanes producer `p` of `producers` arms on: its own when there are as many lanes as
/// producers (an event loop with a home shard), spread so every lane serves some producer
/// when the counts differ.
fn lanes_of(p: usize, producers: usize, lanes: usize) -> Vec<usize> {
    if lanes >= producers { (p..lanes).step_by(producers).collect() } else { vec![p % lanes] }
}

/// Builds a task and counts it (`counts` and `shared` are split from the producer's other
/// fields so that a reset can build one while the producer holds the handle).
fn new_task(shared: &'static Shared, producer: usize, counts: &mut Counts, what: What) -> Task {
    let kind = match what {
        What::Idle { .. } => {
            counts.created_idle += 1;
            Kind::Idle
        }
        What::Request { .. } => {
            counts.created_request += 1;
            Kind::Request
        }
    };
    Task { guard: TaskGuard { shared, producer: producer as u32, kind, ran: false }, what }
}

impl<T: SimTimer> Producer<T> {
    fn new(index: usize, shared: &'static Shared, timer: &T, config: &Config) -> Producer<T> {
        let n = config.connections_of(index);
        let table = Arc::new(DeadlineTable { deadline_ns: (0..n).map(|_| AtomicU64::new(0)).collect() });
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
            idle: Vec::with_capacity(n),
            table,
            lanes: lanes_of(index, config.producers, timer.lanes()),
            quiet_at_ms,
            cursor: 0,
            in_flight: VecDeque::with_capacity(config.in_flight),
            ring: config.in_flight,
            rng,
            config: config.clone(),
            counts: Counts { quiet, ..Counts::default() },
        }
    }

    fn tally(&self) -> &'static ProducerTally {
        &self.shared.producers[self.index]
    }

    fn task(&mut self, what: What) -> Task {
        new_task(self.shared, self.index, &mut self.counts, what)
    }

    /// Arms the idle timeout of every connection of this producer.
    fn arm_idle(&mut self, timer: &T) {
        let idle = self.config.idle_timeout;
        let idle_ns = idle.as_nanos() as u64;
        for j in 0..self.table.deadline_ns.len() {
            // The requested deadline is taken from an instant *before* the arm call, so it is
            // never later than the one the timer computes: lateness measured against it can
            // only be overstated, never turn into a false "early".
            let deadline = self.shared.nanos(Instant::now()) + idle_ns;
            self.table.deadline_ns[j].store(deadline, Ordering::Relaxed);
            let task = self.task(What::Idle { table: self.table.clone(), at: j as u32 });
            let lane = self.lanes[j % self.lanes.len()];
            let handle = timer.arm(lane, idle, task);
            if handle.is_some() {
                self.counts.idle_armed += 1;
            } else {
                self.counts.idle_failed += 1;
                self.quiet_at_ms[j] = CLOSED;
            }
            self.idle.push(handle);
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
    fn activity(&mut self, timer: &T, steady_start: Instant) -> bool {
        let now = Instant::now();
        let now_ms = now.saturating_duration_since(steady_start).as_millis().min(u128::from(u32::MAX)) as u32;
        let Some(j) = self.next_active(now_ms) else {
            return false;
        };
        self.counts.events += 1;
        let now_ns = self.shared.nanos(now);
        let Some(idle) = self.idle[j].as_mut() else {
            self.quiet_at_ms[j] = CLOSED;
            return true;
        };
        // A timer that resets by arming again gets a fresh idle task.
        let (shared, index, counts, table) = (self.shared, self.index, &mut self.counts, &self.table);
        let fresh = || new_task(shared, index, counts, What::Idle { table: table.clone(), at: j as u32 });
        if timer.reset(idle, self.config.idle_timeout, fresh) {
            // Publish the new requested deadline for the idle task. `now` was read before
            // `reset`, so this is never later than the deadline the timer now holds.
            //
            // Why a stale read in the task is harmless: the value is stored only *after* the
            // reset succeeded, so when the timeout fires the task may still read an older
            // deadline, never a newer one (a reset after the firing returns false and stores
            // nothing). Deadlines of one connection only grow, so an older value is an
            // earlier one: it can only make the lateness look larger, never make a firing
            // look early. Relaxed suffices for the same reason: any value the task can read
            // is at most the deadline the timeout actually fired for.
            self.table.deadline_ns[j].store(now_ns + self.config.idle_timeout.as_nanos() as u64, Ordering::Relaxed);
            self.counts.resets_ok += 1;
        } else {
            // The idle timeout fired although the connection was active: a real server has
            // closed it by now, so this one stops getting activity too.
            self.counts.resets_failed += 1;
            self.quiet_at_ms[j] = CLOSED;
            return true;
        }

        // The request: its deadline is captured in the task.
        let task = self.task(What::Request { deadline_ns: now_ns + self.config.request_timeout.as_nanos() as u64 });
        let lane = self.lanes[j % self.lanes.len()];
        match timer.arm(lane, self.config.request_timeout, task) {
            Some(timeout) => {
                self.counts.request_armed += 1;
                if self.rng.chance(self.config.lost_fraction) {
                    // No response will ever come: give up the handle (that does not cancel).
                    self.counts.lost += 1;
                    timer.detach(timeout);
                } else {
                    if self.in_flight.len() == self.ring
                        && let Some(oldest) = self.in_flight.pop_front()
                    {
                        if timer.cancel(oldest) {
                            self.counts.cancels_ok += 1;
                        } else {
                            self.counts.cancels_failed += 1;
                        }
                    }
                    self.in_flight.push_back(timeout);
                }
            }
            None => self.counts.request_failed += 1,
        }
        true
    }

    /// Paces activity at this producer's share of the rate until told to stop: sleeps
    /// between batches of `BATCH` worth of events, and catches up (in bursts of at most
    /// `MAX_BURST`) when it fell behind.
    fn steady(&mut self, timer: &T, phase: &Phase) {
        let start = *phase.steady_start.get().expect("set before the producers start");
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
                if !self.activity(timer, start) {
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

/// Everything the report needs about one timer's run.
#[derive(Debug)]
pub struct Outcome {
    /// The timer's name and setup.
    pub timer: &'static str,
    pub describe: String,
    /// Threads that fire timeouts.
    pub lanes: usize,
    pub tick: Duration,
    /// Time to arm every idle timeout (all producers in parallel, unpaced).
    pub setup: Duration,
    pub rss_before: Option<u64>,
    pub rss_after: Option<u64>,
    /// How long the timer took, after the last arm returned, to file every arm (see
    /// `SimTimer::settle`); the memory is measured then.
    pub settle: Duration,
    /// Live heap bytes (counting allocator) before and after arming the idle timeouts.
    pub heap_before: u64,
    pub heap_after: u64,
    /// Live heap bytes once activity stopped (the cancelled entries a timer keeps count).
    pub heap_at_end: u64,
    /// `size_of` the slot a producer keeps per connection for the idle timeout's handle.
    pub handle_bytes: u64,
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
    /// `pending()` once activity stopped, if the timer can tell.
    pub pending_at_end: Option<usize>,
    /// Tasks dropped without having run from the stop on (by the timer while stopping, from
    /// its list, or with the handles), by kind: the timeouts that ended unfired.
    pub unfired: Drops,
    /// Unfired timeouts by the timer's own count: the length of `stop()`'s list, for timers
    /// that hand them back.
    pub unfired_listed: Option<u64>,
    /// Tasks dropped without having run before the stop, by kind: cancelled requests, idle
    /// tasks replaced by resets that arm again, and tasks of refused arms.
    pub unrun_before_stop: Drops,
    pub stop_time: Duration,
    /// All task drops, once everything was dropped.
    pub drops: Drops,
    /// The service's counters after stop (shardwheel only).
    pub stats: Option<Stats>,
    /// CPU time the process used from arming to the last drop.
    pub cpu: Option<Usage>,
    /// Wall time of the whole run (setup, steady state, stop).
    pub total: Duration,
}

impl Outcome {
    /// Idle and request lateness together.
    pub fn all_lateness(&self) -> Snapshot {
        self.idle_lateness.merged(&self.request_lateness)
    }
}

/// Runs the scenario on `timer`; progress goes to `ui` (stderr).
pub fn run<T: SimTimer>(config: &Config, timer: &mut T, ui: &mut Progress) -> Outcome {
    let began = Instant::now();
    let name = timer.name();
    let describe = timer.describe();
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        start: Instant::now(),
        producers: (0..config.producers).map(|_| ProducerTally::default()).collect(),
        fired: FiredTally::default(),
        idle_lateness: Histogram::new(),
        request_lateness: Histogram::new(),
        sleep_lateness: Histogram::new(),
    }));
    let phase = Phase { steady_start: OnceLock::new(), stop: AtomicBool::new(false) };
    let cpu_before = measure::cpu_time();
    let rss_before = measure::rss_bytes();
    let heap_before = measure::heap_live();
    ui.line(&format!(
        "arming {} idle timeouts on {} producer threads ({})…",
        group(config.connections as u64),
        config.producers,
        describe
    ));

    let mut setup = Duration::ZERO;
    let mut settle = Duration::ZERO;
    let mut rss_after = None;
    let mut heap_after = 0;
    let mut steady = Duration::ZERO;
    // The producers share the timer while they run; the handles they return do not borrow it.
    let shared_timer: &T = timer;
    let producers: Vec<Producer<T>> = thread::scope(|s| {
        let timer = shared_timer;
        let _stop_on_unwind = StopOnDrop(&phase.stop);
        let (armed_tx, armed_rx) = mpsc::channel::<()>();
        let arming = Instant::now();
        ui.arming(config.connections as u64);
        let phase = &phase;
        let producers: Vec<_> = (0..config.producers)
            .map(|p| {
                let armed = armed_tx.clone();
                thread::Builder::new()
                    .name(format!("sim-producer-{p}"))
                    .spawn_scoped(s, move || {
                        timer.producer_context(|| {
                            let mut producer = Producer::new(p, shared, timer, config);
                            producer.arm_idle(timer);
                            let _ = armed.send(());
                            if phase.wait_for_start().is_some() {
                                producer.steady(timer, phase);
                            }
                            producer
                        })
                    })
                    .expect("spawn a producer thread")
            })
            .collect();
        drop(armed_tx);
        let mut armed = 0;
        while armed < config.producers {
            match armed_rx.recv_timeout(Duration::from_millis(50)) {
                Ok(()) => armed += 1,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                // Every sender is gone: a producer panicked (handled below).
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            let c = shared.counts();
            ui.armed(c.idle_armed + c.idle_failed);
        }
        if armed < config.producers {
            // A producer panicked: stop the others, and pass its panic on.
            phase.stop.store(true, Ordering::Relaxed);
            for h in producers {
                if let Err(panic) = h.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            unreachable!("a producer stopped arming without panicking");
        }
        setup = arming.elapsed();
        // Memory once the timer has filed every arm (some file them through a queue).
        let settling = Instant::now();
        timer.settle();
        settle = settling.elapsed();
        rss_after = measure::rss_bytes();
        heap_after = measure::heap_live();
        ui.finish();
        ui.line(&format!(
            "armed in {:.3} s; steady state for {:.1} s",
            setup.as_secs_f64(),
            config.duration.as_secs_f64()
        ));

        let steady_start = Instant::now();
        phase.steady_start.set(steady_start).expect("set once");
        let tick = config.tick;
        let baseline = thread::Builder::new()
            .name("sim-baseline".into())
            .spawn_scoped(s, move || {
                while !phase.stop.load(Ordering::Relaxed) {
                    let slept = Instant::now();
                    thread::sleep(tick);
                    let over = slept.elapsed().saturating_sub(tick);
                    shared.sleep_lateness.record_corrected(over.as_micros() as u64, tick.as_micros() as u64);
                }
            })
            .expect("spawn the baseline thread");
        progress(config, shared, timer, steady_start, ui);
        phase.stop.store(true, Ordering::Relaxed);
        baseline.join().expect("the baseline thread does not panic");
        let producers =
            producers.into_iter().map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect();
        steady = steady_start.elapsed();
        producers
    });
    let mut counts = Counts::default();
    for p in &producers {
        counts.add(&p.counts);
    }

    // Activity has stopped: what is still pending, and what does it hold?
    let pending_at_end = timer.pending();
    let heap_at_end = measure::heap_live();
    ui.line(&format!(
        "activity stopped; {} timeouts pending; stopping the timer…",
        pending_at_end.map_or("?".to_owned(), |p| group(p as u64))
    ));
    // The producers are joined: every cancel and reset has returned, and every task it
    // replaced is dropped. From here on, a task dropped without having run is one that never
    // ended before the stop: whether the timer drops it while stopping, hands it back in its
    // list, or a handle still holds it. Counting those by kind, up to the last drop, gives
    // the unfired.
    let before = shared.unrun();
    let stopping = Instant::now();
    let unfired_list = timer.stop();
    let stop_time = stopping.elapsed();
    let unfired_listed = timer.hands_back_unfired().then_some(unfired_list.len() as u64);
    drop(unfired_list);
    drop(producers);
    let after = shared.unrun();
    let unfired = Drops { idle: after.idle - before.idle, request: after.request - before.request };
    let stats = timer.stats();
    let cpu = measure::cpu_since(cpu_before);

    let (fired_idle, fired_request) = shared.expired();
    Outcome {
        timer: name,
        describe,
        lanes: timer.lanes(),
        tick: config.tick,
        setup,
        settle,
        rss_before,
        rss_after,
        heap_before,
        heap_after,
        heap_at_end,
        handle_bytes: std::mem::size_of::<Option<T::Handle>>() as u64,
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
        unfired_listed,
        unrun_before_stop: before,
        stop_time,
        drops: shared.drops(),
        stats,
        cpu,
        total: began.elapsed(),
    }
}

/// Progress until the steady state is over: the bar moves ten times a second; the rates
/// are taken once a second.
fn progress<T: SimTimer>(config: &Config, shared: &Shared, timer: &T, start: Instant, ui: &mut Progress) {
    ui.steady(config.duration);
    let end = start + config.duration;
    let mut prev = (start, shared.counts(), shared.expired());
    let mut second = 1u32;
    loop {
        let target = (start + Duration::from_secs(u64::from(second))).min(end);
        loop {
            let now = Instant::now();
            if now >= target {
                break;
            }
            thread::sleep((target - now).min(Duration::from_millis(100)));
            ui.at(start.elapsed());
        }
        let now = Instant::now();
        let counts = shared.counts();
        let expired = shared.expired();
        let secs = now.duration_since(prev.0).as_secs_f64().max(1e-9);
        let per_sec = |a: u64, b: u64| (a - b) as f64 / secs;
        ui.second(&report::Second {
            elapsed: now.duration_since(start),
            arms: per_sec(counts.scheduled(), prev.1.scheduled()),
            resets: per_sec(counts.resets_ok, prev.1.resets_ok),
            cancels: per_sec(counts.cancels_ok, prev.1.cancels_ok),
            expiries: per_sec(expired.0 + expired.1, prev.2.0 + prev.2.1),
            max_late_us: shared.fired.interval_max_us.swap(0, Ordering::Relaxed),
            pending: timer.pending(),
        });
        prev = (now, counts, expired);
        if target >= end {
            break;
        }
        second += 1;
    }
    ui.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_spread_over_producers() {
        assert_eq!(lanes_of(0, 2, 2), vec![0]);
        assert_eq!(lanes_of(1, 2, 2), vec![1]);
        assert_eq!(lanes_of(0, 2, 5), vec![0, 2, 4]);
        assert_eq!(lanes_of(1, 2, 5), vec![1, 3]);
        assert_eq!(lanes_of(3, 4, 2), vec![1]);
        assert_eq!(lanes_of(1, 2, 1), vec![0]);
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
    fn task_is_small() {
        assert_eq!(std::mem::size_of::<Task>(), 32);
    }
}
