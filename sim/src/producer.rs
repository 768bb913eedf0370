//! A producer thread: a slice of the connections, their idle timeouts, and the requests it
//! sends, paced at its share of the activity rate.

use crate::args::Config;
use crate::tally::{Counts, DeadlineTable, Shared, Task, What};
use crate::timer::SimTimer;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Most events a producer does between two looks at the clock and the stop flag when it is
/// behind its schedule; it paces itself in batches of `BATCH`'s worth, sleeping between.
const MAX_BURST: u64 = 4_096;
const BATCH: Duration = Duration::from_millis(1);

/// `quiet_at_ms` of a connection that never goes quiet, and of one that is closed (its idle
/// timeout fired while it was active, or could not be armed).
const NEVER_QUIET: u32 = u32::MAX;
const CLOSED: u32 = 0;

/// The lanes producer `p` arms on: its own when there are as many lanes as producers (an
/// event loop with a home shard), spread so every lane serves some producer otherwise.
pub fn lanes_of(p: usize, producers: usize, lanes: usize) -> Vec<usize> {
    if lanes >= producers { (p..lanes).step_by(producers).collect() } else { vec![p % lanes] }
}

/// Sleeps until `deadline` unless the stop comes first; true if `deadline` was reached.
/// `park_timeout`, not `thread::sleep`: the steady state's `Stop` unparks the thread. A
/// wake-up before either (spurious, or a stale unpark) parks again for the rest.
pub fn sleep_until(deadline: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        match deadline.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()) {
            Some(left) => std::thread::park_timeout(left),
            None => return true,
        }
    }
}

/// One producer's connections and requests. Handed back to the main thread at the end, so
/// that its handles live until the timer has stopped.
pub struct Producer<T: SimTimer> {
    index: usize,
    shared: &'static Shared,
    /// The idle timeouts' handles, by connection; `None` where the timer refused to arm.
    idle: Vec<Option<T::Handle>>,
    table: Arc<DeadlineTable>,
    /// Lanes the connections are spread over (connection j: `lanes[j % len]`).
    lanes: Vec<usize>,
    /// When each connection goes quiet, in ms since the steady state began.
    quiet_at_ms: Vec<u32>,
    cursor: usize,
    /// Requests waiting for their response, oldest first.
    in_flight: VecDeque<T::Handle>,
    rng: fastrand::Rng,
    config: &'static Config,
    pub counts: Counts,
}

impl<T: SimTimer> Producer<T> {
    pub fn new(index: usize, shared: &'static Shared, timer: &T) -> Producer<T> {
        let config = &shared.config;
        let (n, mut rng, mut counts) =
            (config.connections_of(index), fastrand::Rng::with_seed(config.seed ^ index as u64), Counts::default());
        // Quiet connections go quiet at a random time early enough that their idle timeout
        // fires within the run (or at once, if the run is too short for that); 1 + …: 0 is CLOSED.
        let window = config.duration.saturating_sub(config.idle_timeout).saturating_sub(Duration::from_millis(50));
        let window_ms = window.as_millis().min(u128::from(NEVER_QUIET - 1)) as u64;
        let quiet_at_ms = (0..n)
            .map(|_| {
                if rng.f64() >= config.idle_fraction {
                    return NEVER_QUIET;
                }
                counts.quiet += 1;
                1 + if window_ms > 0 { rng.u64(0..window_ms) as u32 } else { 0 }
            })
            .collect();
        Producer {
            index,
            shared,
            idle: Vec::with_capacity(n),
            table: Arc::new(DeadlineTable((0..n).map(|_| AtomicU64::new(0)).collect())),
            lanes: lanes_of(index, config.producers, timer.lanes()),
            quiet_at_ms,
            cursor: 0,
            in_flight: VecDeque::with_capacity(config.in_flight),
            rng,
            config,
            counts,
        }
    }

    fn publish(&self) {
        *self.shared.producers[self.index].published.lock().unwrap_or_else(|e| e.into_inner()) = self.counts;
    }

    fn lane(&self, j: usize) -> usize {
        self.lanes[j % self.lanes.len()]
    }

    fn idle_task(shared: &'static Shared, index: usize, table: &Arc<DeadlineTable>, j: usize) -> Task {
        Task::new(shared, index, What::Idle { table: table.clone(), at: j as u32 })
    }

    /// Arms the idle timeout of every connection of this producer; hands the producer back.
    pub fn arm_idle(mut self, timer: &T) -> Self {
        let idle_ns = self.config.idle_timeout.as_nanos() as u64;
        for j in 0..self.table.0.len() {
            // The requested deadline is taken *before* the arm, so it is never later than the
            // timer's: lateness against it can only be overstated, never turn into "early".
            self.table.0[j].store(self.shared.nanos(Instant::now()) + idle_ns, Ordering::Relaxed);
            self.counts.created_idle += 1;
            let task = Self::idle_task(self.shared, self.index, &self.table, j);
            let handle = timer.arm_on(self.lane(j), self.config.idle_timeout, task);
            if handle.is_some() {
                self.counts.idle_armed += 1;
            } else {
                (self.counts.idle_failed, self.quiet_at_ms[j]) = (self.counts.idle_failed + 1, CLOSED);
            }
            self.idle.push(handle);
            if j % 65_536 == 0 {
                self.publish();
            }
        }
        self.publish();
        self
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
    /// timeout), and let the oldest request's response arrive (cancel it). False if no
    /// connection is active any more.
    fn activity(&mut self, timer: &T, steady_start: Instant) -> bool {
        let now = Instant::now();
        let now_ms = now.saturating_duration_since(steady_start).as_millis().min(u128::from(u32::MAX)) as u32;
        let Some(j) = self.next_active(now_ms) else { return false };
        self.counts.events += 1;
        let now_ns = self.shared.nanos(now);
        if !self.reset_idle(timer, j, now_ns) {
            // Its idle timeout fired although it was active (or was never armed): a real
            // server has closed it by now, so it gets no more activity.
            self.quiet_at_ms[j] = CLOSED;
            return true;
        }
        let deadline_ns = now_ns + self.config.request_timeout.as_nanos() as u64;
        self.counts.created_request += 1;
        let task = Task::new(self.shared, self.index, What::Request { deadline_ns });
        let Some(timeout) = timer.arm_on(self.lane(j), self.config.request_timeout, task) else {
            self.counts.request_failed += 1;
            return true;
        };
        self.counts.request_armed += 1;
        if self.rng.f64() < self.config.lost_fraction {
            // No response will ever come: give up the handle (that does not cancel).
            self.counts.lost += 1;
            return true;
        }
        if self.in_flight.len() == self.config.in_flight {
            let oldest = self.in_flight.pop_front().expect("in_flight ≥ 1");
            let won = timer.cancel(oldest);
            *if won { &mut self.counts.cancels_ok } else { &mut self.counts.cancels_failed } += 1;
        }
        self.in_flight.push_back(timeout);
        true
    }

    /// Pushes out connection `j`'s idle timeout; false if it had fired (or was never armed).
    fn reset_idle(&mut self, timer: &T, j: usize, now_ns: u64) -> bool {
        let Some(idle) = self.idle[j].as_mut() else { return false };
        let (shared, index, table, mut built) = (self.shared, self.index, &self.table, false);
        let ok = timer.reset_with(idle, self.config.idle_timeout, || {
            built = true;
            Self::idle_task(shared, index, table, j)
        });
        self.counts.created_idle += u64::from(built);
        if !ok {
            self.counts.resets_failed += 1;
            return false;
        }
        // The new requested deadline, from `now` read before the reset: never later than
        // the timer's. It is stored only after the reset succeeded, so a task that fires may
        // read an older deadline, never a newer one (a reset after the firing returns false
        // and stores nothing); deadlines only grow, so an older one can only make lateness
        // look larger, never a firing look early. Hence Relaxed suffices too.
        self.table.0[j].store(now_ns + self.config.idle_timeout.as_nanos() as u64, Ordering::Relaxed);
        self.counts.resets_ok += 1;
        true
    }

    /// Paces activity at this producer's share of the rate until told to stop: sleeps between
    /// batches, catches up in bursts of at most `MAX_BURST` when behind; hands the producer back.
    pub fn steady(mut self, timer: &T, start: Instant, stop: &AtomicBool) -> Self {
        let rate = self.config.rate_per_producer();
        let (batch, mut done) = (((rate * BATCH.as_secs_f64()).ceil() as u64).max(1), 0);
        while !stop.load(Ordering::Relaxed) {
            let due = (start.elapsed().as_secs_f64() * rate) as u64;
            if due <= done {
                // Ahead of schedule: sleep until the next batch is due, or the stop (at a low
                // rate the next batch may be due long after the end of the run).
                sleep_until(start + Duration::from_secs_f64((done + batch) as f64 / rate), stop);
                continue;
            }
            let n = (due - done).min(MAX_BURST);
            if !(0..n).all(|_| self.activity(timer, start)) {
                break; // Every connection went quiet or closed: nothing left to do.
            }
            done += n;
            self.publish();
        }
        self.publish();
        self
    }
}
