//! Each thread's counters and its histograms of timeout-close lateness, one per timeout.
//!
//! One [`ThreadStats`] per event loop, written by that loop only (a load and a store, no
//! read-modify-write: nothing contends), read by any loop answering `GET /stats` and by the
//! main thread's summary. Cache-padded, so one loop's writes never touch a line another
//! loop writes.
//!
//! The hyper stack's tasks move between tokio's workers, so its writers are not alone: it
//! writes with the `_shared` read-modify-writes instead, to the slot of the worker it runs on
//! (so the lines are still mostly one thread's).

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two of the lateness histogram: at most 1/16 (6 %) error.
const SUB_BUCKETS: usize = 16;
/// Buckets: microseconds up to 2⁴⁴ (half a year), more than any lateness.
const BUCKETS: usize = SUB_BUCKETS * 41;

/// What one thread counts. Every field is written by its thread only.
///
/// Every connection accepted is counted once in `connections` or `rejected`, and once it has
/// closed, in exactly one of the close reasons: `rejected` (closed at once), and for the
/// ones served, the header, idle and send timeouts, the peer, a `Connection: close` answer,
/// a bad request's answer, or the stop.
#[derive(Debug, Default)]
pub struct Counters {
    /// Connections accepted and served.
    pub connections: AtomicU64,
    /// Connections accepted and closed at once: past `--max-conns` (or, rarely, a
    /// connection the loop could not register with its poll).
    pub rejected: AtomicU64,
    /// Requests whose head was complete (answered, or to be answered by a timer).
    pub requests: AtomicU64,
    /// Requests answered with a 4xx status.
    pub bad_requests: AtomicU64,
    /// Connections closed by their header-read timeout.
    pub header_timeouts: AtomicU64,
    /// Connections closed by their idle keep-alive timeout.
    pub idle_timeouts: AtomicU64,
    /// Connections closed by their send timeout (a response the peer did not take).
    pub send_timeouts: AtomicU64,
    /// Connections the peer closed or reset (after its requests were answered, if it only
    /// shut down its sending side), or an I/O error.
    pub peer_closes: AtomicU64,
    /// Connections closed after a response with `Connection: close`, as the request asked.
    pub answered_closes: AtomicU64,
    /// Connections closed after the `400`, `413` or `431` answer to a bad request.
    pub bad_request_closes: AtomicU64,
    /// Connections closed by the graceful stop.
    pub shutdown_closes: AtomicU64,
    /// Stalls: a write that would block (the peer is not taking the bytes), the first since
    /// bytes last went through on its connection. A stall ends when bytes go through again
    /// or the connection closes; the ones not ended are the responses waiting for the peer
    /// now. (The hyper stack may end a stall on another worker than began it: only the sums
    /// of the two counts over the workers mean anything.)
    pub send_stalls: AtomicU64,
    /// Stalls that ended.
    pub send_stalls_ended: AtomicU64,
    /// Timers armed, cancelled, pushed out (`reset_at`) and fired on this thread's wheel.
    pub timers_armed: AtomicU64,
    pub timers_cancelled: AtomicU64,
    pub timers_reset: AtomicU64,
    pub timers_fired: AtomicU64,
    /// The longest event-loop turn (from `epoll_wait`'s return to the next call), in
    /// microseconds, and the turns longer than [`LONG_TURN_MICROS`].
    pub longest_turn_micros: AtomicU64,
    pub long_turns: AtomicU64,
    /// The same of each turn's own CPU time (`--turn-cpu`: the thread's CPU clock, which
    /// does not count the time the thread was off its core).
    pub longest_turn_cpu_micros: AtomicU64,
    pub long_cpu_turns: AtomicU64,
    /// Turns timed on the CPU clock (none without `--turn-cpu`).
    pub cpu_timed_turns: AtomicU64,
    /// Turns that stopped firing at their budget, leaving due timers to the next turn.
    pub fire_breaks: AtomicU64,
    /// Turns that stopped handling socket events at their budget, giving the rest back to
    /// the kernel for the next turn.
    pub event_breaks: AtomicU64,
}

/// A turn longer than this (5 ms) is counted: a turn stops handling socket events once it
/// has spent 2 ms of its thread's CPU and firing due timers once it has spent 4 ms, so that
/// a mass expiry is served in slices between the sockets' events, as a shard serves one.
pub const LONG_TURN_MICROS: u64 = 5_000;

/// A thread's counters and lateness histograms.
#[derive(Debug)]
pub struct ThreadStats {
    pub counters: CachePadded<Counters>,
    /// One histogram per timeout, indexed by [`TimedOut`]: a figure that mixed them would
    /// hide which one is late (the header timeouts of a mass connect beside the idle ones of
    /// a mass expiry).
    lateness: CachePadded<[Lateness; TimedOut::ALL.len()]>,
}

/// Which timeout closed a connection, for its lateness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimedOut {
    /// The header-read timeout: the request's head was not whole in time.
    Header,
    /// The idle keep-alive timeout.
    Idle,
    /// The send timeout: a response waited for the peer too long.
    Send,
}

impl TimedOut {
    /// Every timeout, in its index's order.
    pub const ALL: [TimedOut; 3] = [TimedOut::Header, TimedOut::Idle, TimedOut::Send];

    /// Its name in `/stats` and the summary.
    pub fn name(self) -> &'static str {
        match self {
            TimedOut::Header => "header",
            TimedOut::Idle => "idle",
            TimedOut::Send => "send",
        }
    }
}

/// How late one timeout's closes were, as the loop saw them: log-linear buckets of
/// microseconds.
#[derive(Debug)]
struct Lateness {
    buckets: Box<[AtomicU64]>,
    max_micros: AtomicU64,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(), max_micros: AtomicU64::new(0) }
    }
}

impl Default for ThreadStats {
    fn default() -> Self {
        ThreadStats { counters: CachePadded::new(Counters::default()), lateness: CachePadded::new(Default::default()) }
    }
}

/// Adds one to a counter only its own thread writes.
pub fn bump(counter: &AtomicU64) {
    add(counter, 1);
}

/// Adds `n` to a counter only its own thread writes: a load and a store.
pub fn add(counter: &AtomicU64, n: u64) {
    // Relaxed: the readers (`/stats`, the summary) want a recent value, not an ordering.
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// Adds one to a counter any thread may write: a `fetch_add`.
pub fn bump_shared(counter: &AtomicU64) {
    // Relaxed: as in `add`; the read-modify-write loses no count to a concurrent writer.
    counter.fetch_add(1, Ordering::Relaxed);
}

impl ThreadStats {
    /// As [`ThreadStats::record_lateness`], for a histogram any thread may write.
    pub fn record_lateness_shared(&self, timeout: TimedOut, late: Duration) {
        let micros = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        let lateness = &self.lateness[timeout as usize];
        // Relaxed: counts, read for a recent value only.
        lateness.buckets[bucket_of(micros)].fetch_add(1, Ordering::Relaxed);
        lateness.max_micros.fetch_max(micros, Ordering::Relaxed);
    }

    /// Records that a close by `timeout` came `late` after its deadline.
    pub fn record_lateness(&self, timeout: TimedOut, late: Duration) {
        let micros = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        let lateness = &self.lateness[timeout as usize];
        bump(&lateness.buckets[bucket_of(micros)]);
        // Relaxed: as `add`'s (this thread's alone, read for a recent value).
        lateness.max_micros.store(micros.max(lateness.max_micros.load(Ordering::Relaxed)), Ordering::Relaxed);
    }
}

/// The bucket of `micros`: exact below 16, then 16 per power of two.
fn bucket_of(micros: u64) -> usize {
    if micros < SUB_BUCKETS as u64 {
        return micros as usize;
    }
    let power = 63 - micros.leading_zeros() as usize; // ≥ 4
    let sub = (micros >> (power - 4)) as usize & (SUB_BUCKETS - 1);
    ((power - 3) * SUB_BUCKETS + sub).min(BUCKETS - 1)
}

/// The largest value bucket `index` holds.
fn bucket_top(index: usize) -> u64 {
    if index < SUB_BUCKETS {
        return index as u64;
    }
    let (power, sub) = (index / SUB_BUCKETS + 3, (index % SUB_BUCKETS) as u64);
    ((SUB_BUCKETS as u64 + sub + 1) << (power - 4)) - 1
}

/// Every thread's figures added up.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Totals {
    pub connections: u64,
    pub rejected: u64,
    pub requests: u64,
    pub bad_requests: u64,
    pub header_timeouts: u64,
    pub idle_timeouts: u64,
    pub send_timeouts: u64,
    pub peer_closes: u64,
    pub answered_closes: u64,
    pub bad_request_closes: u64,
    pub shutdown_closes: u64,
    pub send_stalls: u64,
    pub send_stalls_ended: u64,
    pub timers_armed: u64,
    pub timers_cancelled: u64,
    pub timers_reset: u64,
    pub timers_fired: u64,
    pub longest_turn_micros: u64,
    pub long_turns: u64,
    pub longest_turn_cpu_micros: u64,
    pub long_cpu_turns: u64,
    pub cpu_timed_turns: u64,
    pub fire_breaks: u64,
    pub event_breaks: u64,
    /// Every timeout close's lateness, whichever timeout.
    pub late: Late,
    /// Each timeout's, indexed by [`TimedOut`].
    pub late_by: [Late; TimedOut::ALL.len()],
}

/// How late timeout closes were: p50, p99 and max, in microseconds (p50 and p99 to 6 %).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Late {
    /// How many closes.
    pub count: u64,
    pub p50_micros: u64,
    pub p99_micros: u64,
    pub max_micros: u64,
}

impl Late {
    /// The figures of the histogram `buckets` whose largest value is `max_micros`.
    fn of(buckets: &[u64], max_micros: u64) -> Late {
        Late {
            count: buckets.iter().sum(),
            p50_micros: percentile(buckets, 0.50).min(max_micros),
            p99_micros: percentile(buckets, 0.99).min(max_micros),
            max_micros,
        }
    }

    /// As JSON: `{"closes", "p50", "p99", "max"}`.
    fn to_json(self) -> serde_json::Value {
        serde_json::json!({ "closes": self.count, "p50": self.p50_micros, "p99": self.p99_micros, "max": self.max_micros })
    }
}

impl Totals {
    /// Adds up `threads`.
    pub fn of(threads: &[ThreadStats]) -> Totals {
        let mut t = Totals::default();
        let mut buckets = [(); TimedOut::ALL.len()].map(|()| (vec![0u64; BUCKETS], 0u64));
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        // The stalls' ends before their beginnings: a stall counted as ended was counted as
        // begun first, so that `waiting_for_peer` does not read low while stalls come and go.
        t.send_stalls_ended = threads.iter().map(|s| load(&s.counters.send_stalls_ended)).sum();
        for s in threads {
            let c = &s.counters;
            t.connections += load(&c.connections);
            t.rejected += load(&c.rejected);
            t.requests += load(&c.requests);
            t.bad_requests += load(&c.bad_requests);
            t.header_timeouts += load(&c.header_timeouts);
            t.idle_timeouts += load(&c.idle_timeouts);
            t.send_timeouts += load(&c.send_timeouts);
            t.peer_closes += load(&c.peer_closes);
            t.answered_closes += load(&c.answered_closes);
            t.bad_request_closes += load(&c.bad_request_closes);
            t.shutdown_closes += load(&c.shutdown_closes);
            t.send_stalls += load(&c.send_stalls);
            t.timers_armed += load(&c.timers_armed);
            t.timers_cancelled += load(&c.timers_cancelled);
            t.timers_reset += load(&c.timers_reset);
            t.timers_fired += load(&c.timers_fired);
            t.longest_turn_micros = t.longest_turn_micros.max(load(&c.longest_turn_micros));
            t.long_turns += load(&c.long_turns);
            t.longest_turn_cpu_micros = t.longest_turn_cpu_micros.max(load(&c.longest_turn_cpu_micros));
            t.long_cpu_turns += load(&c.long_cpu_turns);
            t.cpu_timed_turns += load(&c.cpu_timed_turns);
            t.fire_breaks += load(&c.fire_breaks);
            t.event_breaks += load(&c.event_breaks);
            for ((sums, max), lateness) in buckets.iter_mut().zip(s.lateness.iter()) {
                *max = (*max).max(load(&lateness.max_micros));
                for (sum, b) in sums.iter_mut().zip(lateness.buckets.iter()) {
                    *sum += load(b);
                }
            }
        }
        let mut all = vec![0u64; BUCKETS];
        for (i, (sums, max)) in buckets.iter().enumerate() {
            t.late_by[i] = Late::of(sums, *max);
            for (a, b) in all.iter_mut().zip(sums) {
                *a += b;
            }
        }
        t.late = Late::of(&all, buckets.iter().map(|(_, max)| *max).max().unwrap_or(0));
        t
    }

    /// Connections accepted: served, or closed at once.
    pub fn accepted(&self) -> u64 {
        self.connections + self.rejected
    }

    /// Responses waiting for the peer now: stalls not ended.
    pub fn waiting_for_peer(&self) -> u64 {
        self.send_stalls.saturating_sub(self.send_stalls_ended)
    }

    /// Connections closed, for every reason (closed at once included).
    pub fn closed(&self) -> u64 {
        self.rejected
            + self.header_timeouts
            + self.idle_timeouts
            + self.send_timeouts
            + self.peer_closes
            + self.answered_closes
            + self.bad_request_closes
            + self.shutdown_closes
    }

    /// The totals as a JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            // Which process answered (`--processes`: each answers for its own threads).
            "pid": std::process::id(),
            "accepted": self.accepted(),
            "connections": self.connections,
            "open": self.accepted().saturating_sub(self.closed()),
            "rejected_over_max_conns": self.rejected,
            "requests": self.requests,
            "bad_requests": self.bad_requests,
            "closed_by_header_timeout": self.header_timeouts,
            "closed_by_idle_timeout": self.idle_timeouts,
            "closed_by_send_timeout": self.send_timeouts,
            "closed_by_peer": self.peer_closes,
            "closed_after_connection_close": self.answered_closes,
            "closed_after_bad_request": self.bad_request_closes,
            "closed_by_shutdown": self.shutdown_closes,
            "send_stalls": self.send_stalls,
            "waiting_for_peer": self.waiting_for_peer(),
            "timers_armed": self.timers_armed,
            "timers_cancelled": self.timers_cancelled,
            "timers_reset": self.timers_reset,
            "timers_fired": self.timers_fired,
            "longest_turn_us": self.longest_turn_micros,
            "turns_over_5ms": self.long_turns,
            // Each turn's own CPU time (`--turn-cpu`; null without): the wall clock's
            // figures above include the time the thread was off its core.
            "turns_timed_on_cpu": self.cpu_timed_turns,
            "longest_turn_cpu_us": (self.cpu_timed_turns > 0).then_some(self.longest_turn_cpu_micros),
            "turns_over_5ms_cpu": (self.cpu_timed_turns > 0).then_some(self.long_cpu_turns),
            "fire_budget_breaks": self.fire_breaks,
            "event_budget_breaks": self.event_breaks,
            // Every timeout close's lateness, and each timeout's under its name.
            "timeout_close_late_us": self.late_json(),
        })
    }

    /// Every timeout close's lateness, with each timeout's under its name.
    fn late_json(&self) -> serde_json::Value {
        let mut late = self.late.to_json();
        for (timeout, by) in TimedOut::ALL.iter().zip(self.late_by) {
            late[timeout.name()] = by.to_json();
        }
        late
    }
}

/// The top of the bucket where the `q` quantile falls; 0 with no samples.
fn percentile(buckets: &[u64], q: f64) -> u64 {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = ((total as f64 * q).ceil() as u64).max(1);
    let mut seen = 0;
    for (i, &n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return bucket_top(i);
        }
    }
    bucket_top(buckets.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_values_within_a_sixteenth() {
        for micros in (0..100_000u64).chain([1 << 30, 1 << 40]) {
            let i = bucket_of(micros);
            assert!(bucket_top(i) >= micros, "{micros}");
            if i > 0 {
                assert!(bucket_top(i - 1) < micros, "{micros}");
            }
            assert!(bucket_top(i) - micros <= micros / 16, "{micros}");
        }
    }

    /// Every count is the sum over the threads and every longest turn the longest of any,
    /// each under its `/stats` key; the CPU clock's turn figures are null until a turn was
    /// timed on it.
    #[test]
    fn each_count_is_summed_and_each_longest_is_the_max_over_the_threads() {
        type Field = fn(&Counters) -> &AtomicU64;
        let summed: [(Field, &str); 21] = [
            (|c| &c.connections, "connections"),
            (|c| &c.rejected, "rejected_over_max_conns"),
            (|c| &c.requests, "requests"),
            (|c| &c.bad_requests, "bad_requests"),
            (|c| &c.header_timeouts, "closed_by_header_timeout"),
            (|c| &c.idle_timeouts, "closed_by_idle_timeout"),
            (|c| &c.send_timeouts, "closed_by_send_timeout"),
            (|c| &c.peer_closes, "closed_by_peer"),
            (|c| &c.answered_closes, "closed_after_connection_close"),
            (|c| &c.bad_request_closes, "closed_after_bad_request"),
            (|c| &c.shutdown_closes, "closed_by_shutdown"),
            (|c| &c.send_stalls, "send_stalls"),
            (|c| &c.timers_armed, "timers_armed"),
            (|c| &c.timers_cancelled, "timers_cancelled"),
            (|c| &c.timers_reset, "timers_reset"),
            (|c| &c.timers_fired, "timers_fired"),
            (|c| &c.long_turns, "turns_over_5ms"),
            (|c| &c.cpu_timed_turns, "turns_timed_on_cpu"),
            (|c| &c.long_cpu_turns, "turns_over_5ms_cpu"),
            (|c| &c.fire_breaks, "fire_budget_breaks"),
            (|c| &c.event_breaks, "event_budget_breaks"),
        ];
        let longest: [(Field, &str); 2] =
            [(|c| &c.longest_turn_micros, "longest_turn_us"), (|c| &c.longest_turn_cpu_micros, "longest_turn_cpu_us")];
        let threads = [ThreadStats::default(), ThreadStats::default(), ThreadStats::default()];
        let json = Totals::of(&threads).to_json();
        assert!(json["longest_turn_cpu_us"].is_null() && json["turns_over_5ms_cpu"].is_null(), "{json}");
        // Each field its own values, the largest on a different thread each time.
        for (k, (field, _)) in summed.iter().chain(&longest).enumerate() {
            for (i, thread) in threads.iter().enumerate() {
                let value = 10 * (k as u64 + 1) + ((i + k) % 3) as u64 * 3 + 1;
                field(&thread.counters).store(value, Ordering::Relaxed);
            }
        }
        let json = Totals::of(&threads).to_json();
        let values = |field: Field| threads.iter().map(move |t| field(&t.counters).load(Ordering::Relaxed));
        for (field, key) in summed {
            assert_eq!(json[key], values(field).sum::<u64>(), "{key}: {json}");
        }
        for (field, key) in longest {
            assert_eq!(json[key], values(field).max().unwrap(), "{key}: {json}");
        }
    }

    #[test]
    fn percentiles() {
        let threads = [ThreadStats::default(), ThreadStats::default()];
        for ms in 1..=100 {
            threads[ms % 2].record_lateness(TimedOut::Idle, Duration::from_millis(ms as u64));
        }
        let t = Totals::of(&threads);
        assert_eq!(t.late.max_micros, 100_000);
        assert!((50_000..=53_125).contains(&t.late.p50_micros), "{}", t.late.p50_micros);
        assert!((99_000..=100_000).contains(&t.late.p99_micros), "{}", t.late.p99_micros);
        assert_eq!(t.late_by[TimedOut::Idle as usize], t.late);
    }

    /// Each timeout's closes are in its own figures, on whichever thread, written plain or
    /// shared, and all of them in the whole's; a timeout with no close reads zeros.
    #[test]
    fn each_timeout_has_its_own_lateness_and_the_whole_adds_them() {
        let threads = [ThreadStats::default(), ThreadStats::default()];
        // Header closes 1 ms late, idle ones 100 ms, none of send.
        for i in 0..10 {
            threads[i % 2].record_lateness(TimedOut::Header, Duration::from_millis(1));
            threads[(i + 1) % 2].record_lateness_shared(TimedOut::Idle, Duration::from_millis(100));
        }
        threads[0].record_lateness(TimedOut::Idle, Duration::from_millis(300));
        let t = Totals::of(&threads);
        let [header, idle, send] = t.late_by;
        assert_eq!((header.count, header.max_micros), (10, 1_000), "{header:?}");
        assert!((1_000..=1_062).contains(&header.p99_micros), "{header:?}");
        assert_eq!((idle.count, idle.max_micros), (11, 300_000), "{idle:?}");
        assert!((100_000..=106_250).contains(&idle.p50_micros), "{idle:?}");
        assert_eq!(send, Late::default());
        assert_eq!((t.late.count, t.late.max_micros), (21, 300_000), "{:?}", t.late);
        // 10 of 21 at 1 ms: the median is an idle close's.
        assert!((100_000..=106_250).contains(&t.late.p50_micros), "{:?}", t.late);
        let json = t.to_json();
        let late = &json["timeout_close_late_us"];
        assert_eq!(late["closes"], 21, "{json}");
        assert_eq!(late["max"], 300_000, "{json}");
        assert_eq!(late["header"]["closes"], 10, "{json}");
        assert_eq!(late["header"]["max"], 1_000, "{json}");
        assert_eq!(late["idle"]["max"], 300_000, "{json}");
        assert_eq!(late["idle"]["p50"], idle.p50_micros, "{json}");
        assert_eq!(late["send"], serde_json::json!({"closes": 0, "p50": 0, "p99": 0, "max": 0}), "{json}");
    }
}
