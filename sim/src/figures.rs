//! Every figure of a run, computed once: the self-check, and the run's JSON object ([`of`]),
//! which `--json` prints, `--verbose` renders as text, and the ratio table reads its rows from.

use crate::histogram::Snapshot;
use crate::tally::{Counts, PerKind, TASK_BYTES, Usage};
use crate::units::{fill, group, ms_from_us};
use serde_json::{Value, json};
use shardwheel::Stats;
use std::time::Duration;

/// The simulator's own bytes per connection, whatever the timer: the requested deadline (8 B)
/// and the time it goes quiet (4 B). The handle is counted as the timer's.
pub const SIM_BYTES_PER_CONNECTION: u64 = 12;

/// Everything the reports need about one timer's run. Per-kind figures are `[idle, request]`.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The timer's name, its setup, and the threads that fire timeouts.
    pub timer: &'static str,
    pub describe: String,
    pub lanes: usize,
    pub tick: Duration,
    pub connections: u64,
    /// Time to arm every idle timeout (unpaced), then for the timer to file every arm.
    pub setup: Duration,
    pub settle: Duration,
    /// Resident and live heap bytes before and after arming, and live heap once activity
    /// stopped; `size_of` the slot a producer keeps per connection for the idle handle.
    pub rss_before: Option<u64>,
    pub rss_after: Option<u64>,
    pub heap_before: u64,
    pub heap_after: u64,
    pub heap_at_end: u64,
    pub handle_bytes: u64,
    /// The steady state's actual length, and what the producers did.
    pub steady: Duration,
    pub counts: Counts,
    /// Tasks that ran; those that ran early, and the earliest, in ns before its deadline.
    pub fired: PerKind<u64>,
    pub early: u64,
    pub worst_early_ns: u64,
    pub lateness: PerKind<Snapshot>,
    pub sleep_lateness: Snapshot,
    /// Timeouts pending once activity stopped; tasks dropped unrun from the stop on (the
    /// timeouts that never ended); how many `stop()` handed back, if it does; tasks dropped
    /// unrun before the stop (cancelled, replaced by resets, refused); all task drops.
    pub pending_at_end: usize,
    pub unfired: PerKind<u64>,
    pub unfired_listed: Option<u64>,
    pub unrun_before_stop: PerKind<u64>,
    pub stop_time: Duration,
    pub drops: PerKind<u64>,
    /// The service's counters after stop (shardwheel only).
    pub stats: Option<Stats>,
    /// CPU time of the process from arming to the last drop; wall time of the whole run.
    pub cpu: Option<Usage>,
    pub total: Duration,
}

/// One line of the self-check: whether it passed, its key (JSON), what it checks, its sums.
#[derive(Clone, Debug)]
pub struct Check {
    pub ok: bool,
    pub key: &'static str,
    pub what: &'static str,
    pub detail: String,
}

/// The self-check of one run: every timeout ended exactly once, every task was dropped
/// exactly once, none fired early, and the timer's own counters (if it keeps them) agree.
pub fn checks(o: &Outcome) -> Vec<Check> {
    let c = &o.counts;
    // Per kind: armed = fired + cancelled + unfired at the stop; dropped unrun before the
    // stop = cancelled (requests) or replaced by resets (idle) + refused; created = dropped.
    let (armed, refused, created) =
        ([c.idle_armed, c.request_armed], [c.idle_failed, c.request_failed], [c.created_idle, c.created_request]);
    let (cancelled, ended_before, before) = ([0, c.cancels_ok], [c.reset_tasks(), c.cancels_ok], o.unrun_before_stop);
    let [fired, unfired, dropped] = [o.fired, o.unfired, o.drops].map(|k| k[0] + k[1]);
    let ended_ok = (0..2)
        .all(|k| armed[k] == o.fired[k] + cancelled[k] + o.unfired[k] && before[k] == ended_before[k] + refused[k]);
    let by_kind = (0..2).flat_map(|k| [armed[k], o.fired[k], cancelled[k], o.unfired[k]]);
    let sums = [c.scheduled(), fired, c.cancels_ok, unfired].into_iter().chain(by_kind);
    let sums: Vec<_> =
        sums.chain([before[1], c.cancels_ok, refused[1], before[0], ended_before[0], refused[0]]).collect();
    let ended = fill(
        "scheduled {} = fired {} + cancelled {} + unfired at stop {}\nidle {} = {} + {} + {}; request {} = {} + {} + {}\n\
         dropped unrun before the stop: request {} = cancelled {} + refused {}; idle {} = replaced by resets {} + \
         refused {}",
        &sums,
    );
    let dropped = fill(
        "created {} = dropped {}: idle {} = {}; request {} = {}\ndropped unrun after the stop {}",
        &[created[0] + created[1], dropped, created[0], o.drops[0], created[1], o.drops[1], unfired],
    ) + &o.unfired_listed.map_or(String::new(), |n| fill("; stop() handed back {}", &[n]));
    let early = match o.early {
        0 => "0 early".to_owned(),
        n => format!("{} early, the earliest {} before its deadline", group(n), ms_from_us(o.worst_early_ns / 1_000)),
    };
    let check = |ok, key, what, detail| Check { ok, key, what, detail };
    let dropped_ok = o.drops == created && o.unfired_listed.is_none_or(|n| n == unfired);
    let mut checks = vec![
        check(ended_ok, "ended_exactly_once", "every timeout ended exactly once", ended),
        check(dropped_ok, "dropped_exactly_once", "every task dropped exactly once", dropped),
        check(o.early == 0, "never_early", "no task fired early", early),
    ];
    if let Some(s) = &o.stats {
        let agree = [s.scheduled, c.scheduled(), s.expired, fired, s.cancelled, c.cancels_ok, s.unfired, unfired];
        let detail = fill(
            "(service / simulator) scheduled {} / {}, expired {} / {}, cancelled {} / {}\n\
             unfired {} / {}, pending {} / 0, rejected {} / 0, panicked {} / 0",
            &[&agree[..], &[s.pending, s.rejected, s.panicked]].concat(),
        );
        let ok = (s.scheduled, s.expired, s.cancelled) == (c.scheduled(), fired, c.cancels_ok)
            && Some(s.unfired) == o.unfired_listed
            && (s.pending, s.rejected, s.panicked) == (0, 0, 0);
        checks.push(check(ok, "stats_agree", "simulator agrees with the service's stats()", detail));
    }
    checks
}

/// Whether every check of a run passed.
pub fn passed(o: &Outcome) -> bool {
    checks(o).iter().all(|c| c.ok)
}

/// Whether the whole run succeeded (exit status 0): every timer passed its self-check, and
/// the plot, if one was asked for, was written.
pub fn succeeded(runs: &[Outcome], plotted: bool) -> bool {
    runs.iter().all(passed) && plotted
}

impl Outcome {
    pub fn all_lateness(&self) -> Snapshot {
        self.lateness[0].merged(&self.lateness[1])
    }

    /// Live heap per connection added since before arming, read at `heap` (`heap_after`: the
    /// simulator's own 12 B, the handle slot, the task and whatever the timer allocates;
    /// `heap_at_end`: with requests in flight and cancelled entries kept).
    fn heap_per_connection(&self, heap: u64) -> f64 {
        heap.saturating_sub(self.heap_before) as f64 / self.connections as f64
    }

    /// Less the simulator's own bytes: what a pending timeout costs with this timer.
    pub fn timer_bytes(&self) -> f64 {
        (self.heap_per_connection(self.heap_after) - SIM_BYTES_PER_CONNECTION as f64).max(0.0)
    }

    /// CPU time per timer operation (arm, reset, cancel, expiry), in ns.
    pub fn cpu_ns_per_op(&self) -> Option<f64> {
        let c = &self.counts;
        let ops = c.scheduled() + c.resets_ok + c.resets_failed + c.cancels_ok + c.cancels_failed;
        self.cpu.map(|cpu| cpu.total().as_nanos() as f64 / (ops + self.fired[0] + self.fired[1]).max(1) as f64)
    }

    /// The design bar for expiry lateness: p99 ≤ one tick + 0.5 ms.
    pub fn lateness_bar(&self) -> Duration {
        self.tick + Duration::from_micros(500)
    }

    /// The worse p99 of the two kinds of expiry, if any fired.
    pub fn worst_p99_us(&self) -> Option<u64> {
        self.lateness.iter().filter_map(|s| s.quantile(0.99)).max()
    }

    pub fn bar_met(&self) -> Option<bool> {
        self.worst_p99_us().map(|p| Duration::from_micros(p) <= self.lateness_bar())
    }

    pub fn steady_rate(&self, n: u64) -> f64 {
        n as f64 / self.steady.as_secs_f64().max(1e-9)
    }

    pub fn setup_rate(&self) -> f64 {
        self.counts.idle_armed as f64 / self.setup.as_secs_f64().max(1e-9)
    }
}

/// Lateness quantiles: JSON key, column, quantile.
pub const QUANTILES: [(&str, &str, f64); 3] =
    [("p50_us", "p50", 0.5), ("p99_us", "p99", 0.99), ("p999_us", "p99.9", 0.999)];

fn percentiles(s: &Snapshot) -> Value {
    let mut v = json!({ "count": s.count(), "max_us": s.max(), "mean_us": s.mean() });
    QUANTILES.iter().for_each(|&(key, _, q)| v[key] = json!(s.quantile(q)));
    v
}

/// Every figure of a run (durations in seconds unless the key says otherwise).
pub fn of(o: &Outcome) -> Value {
    let rss_per_connection =
        o.rss_after.zip(o.rss_before).map(|(a, b)| a.saturating_sub(b) as f64 / o.connections as f64);
    let (c, rate, checks) = (&o.counts, |n: u64| o.steady_rate(n), checks(o));
    let ([fired_idle, fired_request], [unfired_idle, unfired_request]) = (o.fired, o.unfired);
    json!({
        "timer": o.timer, "description": o.describe, "lanes": o.lanes,
        "setup": {
            "idle_armed": c.idle_armed, "seconds": o.setup.as_secs_f64(), "arms_per_sec": o.setup_rate(),
            "settle_seconds": o.settle.as_secs_f64(),
        },
        "steady": {
            "seconds": o.steady.as_secs_f64(), "events": c.events, "request_arms": c.request_armed,
            "resets_ok": c.resets_ok, "resets_failed": c.resets_failed, "cancels_ok": c.cancels_ok,
            "cancels_failed": c.cancels_failed, "lost_requests": c.lost, "quiet_connections": c.quiet,
            "schedule_failed": c.schedule_failed(), "reset_tasks": c.reset_tasks(),
            "fired_idle": fired_idle, "fired_request": fired_request,
            "events_per_sec": rate(c.events), "request_arms_per_sec": rate(c.request_armed),
            "resets_per_sec": rate(c.resets_ok), "cancels_per_sec": rate(c.cancels_ok),
            "expiries_per_sec": rate(fired_idle + fired_request),
        },
        "cpu": o.cpu.map(|u| json!({
            "user_seconds": u.user.as_secs_f64(), "system_seconds": u.system.as_secs_f64(),
            "total_seconds": u.total().as_secs_f64(), "ns_per_timer_op": o.cpu_ns_per_op(),
        })),
        "lateness": {
            "idle": percentiles(&o.lateness[0]), "request": percentiles(&o.lateness[1]),
            "all": percentiles(&o.all_lateness()), "sleep_baseline": percentiles(&o.sleep_lateness),
            "early": o.early, "worst_early_ns": o.worst_early_ns,
            "bar_us": o.lateness_bar().as_micros() as u64, "bar_met": o.bar_met(),
        },
        "memory": {
            "heap_bytes_before": o.heap_before, "heap_bytes_after": o.heap_after,
            "heap_bytes_per_connection": o.heap_per_connection(o.heap_after), "heap_bytes_at_end": o.heap_at_end,
            "heap_bytes_per_connection_at_end": o.heap_per_connection(o.heap_at_end),
            "simulator_bytes_per_connection": SIM_BYTES_PER_CONNECTION, "handle_slot_bytes": o.handle_bytes,
            "task_bytes": TASK_BYTES,
            "timer_bytes_per_timeout": o.timer_bytes(),
            "rss_bytes_before": o.rss_before, "rss_bytes_after": o.rss_after,
            "rss_bytes_per_connection": rss_per_connection,
        },
        "end": {
            "pending_at_end": o.pending_at_end, "unfired": unfired_idle + unfired_request,
            "unfired_handed_back": o.unfired_listed, "unfired_idle": unfired_idle,
            "unfired_request": unfired_request, "stop_seconds": o.stop_time.as_secs_f64(),
        },
        "stats": o.stats.map(|s| json!({
            "scheduled": s.scheduled, "expired": s.expired, "cancelled": s.cancelled, "unfired": s.unfired,
            "pending": s.pending, "rejected": s.rejected, "panicked": s.panicked, "wakeups": s.wakeups, "queued": s.queued,
        })),
        "self_check": {
            "passed": checks.iter().all(|c| c.ok),
            "checks": checks.iter().map(|c| json!({"key": c.key, "what": c.what, "ok": c.ok, "detail": c.detail})).collect::<Vec<_>>(),
        },
        "total_seconds": o.total.as_secs_f64(),
    })
}

/// One row of the ratio table: its label; where the figure is in [`of`]'s object (its key in
/// the JSON, with `_` for `/`); its unit ("/s": a throughput, higher is better; others are
/// costs); whether it shows without `--verbose`.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    pub label: &'static str,
    pub at: &'static str,
    pub unit: &'static str,
    pub headline: bool,
}

const fn metric(label: &'static str, at: &'static str, unit: &'static str, headline: bool) -> Metric {
    Metric { label, at, unit, headline }
}

pub const METRICS: &[Metric] = &[
    metric("arms/s at setup (unpaced)", "/setup/arms_per_sec", "/s", true),
    metric("activity events/s achieved", "/steady/events_per_sec", "/s", false),
    metric("cancels/s", "/steady/cancels_per_sec", "/s", false),
    metric("CPU time, whole run (user+sys)", "/cpu/total_seconds", "s", true),
    metric("CPU per timer operation", "/cpu/ns_per_timer_op", "ns", true),
    metric("expiry lateness p50", "/lateness/all/p50_us", "µs", false),
    metric("expiry lateness p99", "/lateness/all/p99_us", "µs", true),
    metric("expiry lateness max", "/lateness/all/max_us", "µs", false),
    metric("heap per pending timeout", "/memory/timer_bytes_per_timeout", "B", true),
    metric("heap per connection at the end", "/memory/heap_bytes_per_connection_at_end", "B", false),
];

impl Metric {
    pub fn key(&self) -> String {
        self.at[1..].replace('/', "_")
    }

    pub fn value(&self, figures: &Value) -> Option<f64> {
        figures.pointer(self.at).and_then(Value::as_f64)
    }

    /// shardwheel's advantage over a peer: `peer / shardwheel` for costs, `shardwheel / peer`
    /// for throughputs, so that > 1 always means shardwheel does better; `None` when a value
    /// is missing or the ratio undefined (0 / 0).
    pub fn advantage(&self, ours: Option<f64>, theirs: Option<f64>) -> Option<f64> {
        let (ours, theirs) = (ours?, theirs?);
        let (num, den) = if self.unit == "/s" { (ours, theirs) } else { (theirs, ours) };
        match (num, den) {
            (n, d) if d > 0.0 => Some(n / d),
            (n, _) if n > 0.0 => Some(f64::INFINITY),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::histogram::Histogram;

    /// A consistent outcome: 1,000 connections, 100 quiet; made up, but the numbers add up.
    pub(crate) fn outcome(timer: &'static str, scale: u64) -> Outcome {
        let (idle, request, ms) = (Histogram::new(), Histogram::new(), Duration::from_millis);
        (0..100).for_each(|v| idle.record(v * 10 * scale));
        (0..10).for_each(|v| request.record(v * 50 * scale));
        let (describe, connections) = (format!("{timer}, made up"), 1_000);
        let mut o = Outcome { timer, describe, lanes: 2, connections, ..Outcome::default() };
        (o.tick, o.setup, o.steady, o.stop_time, o.total) = (ms(1), ms(10 * scale), ms(1_000), ms(3), ms(1_020));
        (o.rss_before, o.rss_after) = (Some(1 << 20), Some((1 << 20) + 100_000 * scale));
        (o.heap_before, o.heap_after, o.heap_at_end) = (1_000, 1_000 + 80_000 * scale, 1_000 + 90_000 * scale);
        (o.handle_bytes, o.fired, o.lateness) = (16, [100, 10], [idle.snapshot(), request.snapshot()]);
        (o.pending_at_end, o.unfired, o.unfired_listed) = (940, [900, 40], Some(940));
        (o.unrun_before_stop, o.drops) = ([0, 29_950], [1_000, 30_000]);
        o.cpu = Some(Usage { user: ms(300 * scale), system: ms(50 * scale) });
        let c = &mut o.counts;
        (c.events, c.idle_armed, c.request_armed, c.resets_ok, c.cancels_ok) = (30_000, 1_000, 30_000, 30_000, 29_950);
        (c.lost, c.created_idle, c.created_request, c.quiet) = (30, 1_000, 30_000, 100);
        o
    }

    #[test]
    fn a_consistent_outcome_passes_and_each_check_can_fail() {
        let oks = |change: fn(&mut Outcome)| {
            let mut o = outcome("shardwheel", 1);
            change(&mut o);
            checks(&o).iter().map(|c| c.ok).collect::<Vec<_>>()
        };
        assert_eq!(oks(|_| ()), [true; 3]);
        assert_eq!(oks(|o| o.fired[0] = 99), [false, true, true]);
        assert_eq!(oks(|o| o.unfired_listed = Some(939)), [true, false, true]);
        assert_eq!(oks(|o| o.early = 1), [true, true, false]);
        assert_eq!(oks(|o| o.stats = Some(shardwheel::Stats::default())), [true, true, true, false]);
    }

    #[test]
    fn metrics_are_found_and_advantage_is_above_one_when_shardwheel_does_better() {
        let figures = of(&outcome("shardwheel", 1));
        assert!(METRICS.iter().all(|m| m.value(&figures).is_some()), "{figures:#}");
        let [rate, cost] = [METRICS[0], METRICS[3]];
        assert_eq!((rate.key(), cost.key()), ("setup_arms_per_sec".to_owned(), "cpu_total_seconds".to_owned()));
        let ratios = [(cost, 1.0, 3.0), (rate, 3.0, 1.0), (cost, 0.0, 2.0), (cost, 0.0, 0.0)];
        let ratios = ratios.map(|(m, ours, theirs)| m.advantage(Some(ours), Some(theirs)));
        assert_eq!(ratios, [Some(3.0), Some(3.0), Some(f64::INFINITY), None]);
        assert_eq!(cost.advantage(None, Some(1.0)), None);
    }
}
