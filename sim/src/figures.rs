//! The figures and checks computed from a run, once, for the text and the JSON report alike:
//! the self-check, the derived memory and CPU figures, and the metrics of the ratio table.

use crate::args::Config;
use crate::scenario::Outcome;
use crate::units::{fill, group, ms_from_us};
use std::time::Duration;

/// The simulator's own bytes per connection, whatever the timer: the requested deadline (8 B)
/// and the time it goes quiet (4 B). The handle is counted as the timer's.
pub const SIM_BYTES_PER_CONNECTION: u64 = 12;

/// One line of the self-check.
#[derive(Clone, Debug)]
pub struct Check {
    pub ok: bool,
    /// A stable identifier (JSON), and what is checked.
    pub key: &'static str,
    pub what: &'static str,
    pub detail: String,
}

/// The self-check of one run: every timeout ended exactly once, every task was dropped
/// exactly once, none fired early, and the timer's own counters (if it keeps them) agree.
pub fn checks(o: &Outcome) -> Vec<Check> {
    let (c, before, unfired) = (&o.counts, &o.unrun_before_stop, &o.unfired);
    let (fired, unfired_all) = (o.fired_idle + o.fired_request, unfired.idle + unfired.request);
    let ended = [
        fill(
            "scheduled {} = fired {} + cancelled {} + unfired at stop {}\n",
            &[c.scheduled(), fired, c.cancels_ok, unfired_all],
        ),
        fill("idle {} = {} + 0 + {}", &[c.idle_armed, o.fired_idle, unfired.idle]),
        fill("; request {} = {} + {} + {}\n", &[c.request_armed, o.fired_request, c.cancels_ok, unfired.request]),
        fill(
            "dropped unrun before the stop: request {} = cancelled {} + refused {}",
            &[before.request, c.cancels_ok, c.request_failed],
        ),
        fill("; idle {} = replaced by resets {} + refused {}", &[before.idle, c.reset_tasks(), c.idle_failed]),
    ];
    let created = [c.created_idle + c.created_request, o.drops.idle + o.drops.request];
    let dropped = [
        fill("created {} = dropped {}: ", &created),
        fill("idle {} = {}; request {} = {}\n", &[c.created_idle, o.drops.idle, c.created_request, o.drops.request]),
        fill("dropped unrun after the stop {}", &[unfired_all]),
        o.unfired_listed.map_or(String::new(), |n| fill("; stop() handed back {}", &[n])),
    ];
    let early = match o.early {
        0 => "0 early".to_owned(),
        n => format!("{} early, the earliest {} before its deadline", group(n), ms_from_us(o.worst_early_ns / 1_000)),
    };
    let mut checks = vec![
        Check {
            ok: c.idle_armed == o.fired_idle + unfired.idle
                && c.request_armed == o.fired_request + c.cancels_ok + unfired.request
                && before.request == c.cancels_ok + c.request_failed
                && before.idle == c.reset_tasks() + c.idle_failed,
            key: "ended_exactly_once",
            what: "every timeout ended exactly once",
            detail: ended.concat(),
        },
        Check {
            ok: o.drops.idle == c.created_idle
                && o.drops.request == c.created_request
                && o.unfired_listed.is_none_or(|n| n == unfired_all),
            key: "dropped_exactly_once",
            what: "every task dropped exactly once",
            detail: dropped.concat(),
        },
        Check { ok: o.early == 0, key: "never_early", what: "no task fired early", detail: early },
    ];
    if let Some(s) = &o.stats {
        let agree = [s.scheduled, c.scheduled(), s.expired, fired, s.cancelled, c.cancels_ok];
        let rest = [s.unfired, unfired_all, s.pending, s.rejected, s.panicked];
        checks.push(Check {
            ok: (s.scheduled, s.expired, s.cancelled) == (c.scheduled(), fired, c.cancels_ok)
                && Some(s.unfired) == o.unfired_listed
                && (s.pending, s.rejected, s.panicked) == (0, 0, 0),
            key: "stats_agree",
            what: "simulator agrees with the service's stats()",
            detail: fill("(service / simulator) scheduled {} / {}, expired {} / {}, cancelled {} / {}\n", &agree)
                + &fill("unfired {} / {}, pending {} / 0, rejected {} / 0, panicked {} / 0", &rest),
        });
    }
    checks
}

/// Whether every check of a run passed.
pub fn passed(o: &Outcome) -> bool {
    checks(o).iter().all(|c| c.ok)
}

/// Live heap bytes per connection added by arming the idle timeouts: the simulator's own
/// 12 B, the handle slot, the task and whatever the timer allocates.
pub fn heap_per_connection(config: &Config, o: &Outcome) -> f64 {
    o.heap_after.saturating_sub(o.heap_before) as f64 / config.connections as f64
}

/// [`heap_per_connection`] less the simulator's own bytes: what a pending timeout costs with
/// this timer (handle slot, 32-byte task and the timer's own structures).
pub fn timer_bytes_per_timeout(config: &Config, o: &Outcome) -> f64 {
    (heap_per_connection(config, o) - SIM_BYTES_PER_CONNECTION as f64).max(0.0)
}

/// Live heap per connection once activity stopped (requests in flight, cancelled entries kept).
pub fn heap_per_connection_at_end(config: &Config, o: &Outcome) -> f64 {
    o.heap_at_end.saturating_sub(o.heap_before) as f64 / config.connections as f64
}

/// Resident memory per connection added by arming.
pub fn rss_per_connection(config: &Config, o: &Outcome) -> Option<f64> {
    Some(o.rss_after?.saturating_sub(o.rss_before?) as f64 / config.connections as f64)
}

/// Timer operations in the run: arms, resets, cancels and expiries.
pub fn timer_ops(o: &Outcome) -> u64 {
    let c = &o.counts;
    c.scheduled() + c.resets_ok + c.resets_failed + c.cancels_ok + c.cancels_failed + o.fired_idle + o.fired_request
}

/// CPU time per timer operation, in ns.
pub fn cpu_ns_per_op(o: &Outcome) -> Option<f64> {
    o.cpu.map(|c| c.total().as_nanos() as f64 / timer_ops(o).max(1) as f64)
}

/// The design bar for expiry lateness: p99 ≤ one tick + 0.5 ms.
pub fn lateness_bar(o: &Outcome) -> Duration {
    o.tick + Duration::from_micros(500)
}

/// The worse p99 of the two kinds of expiry, if any fired.
pub fn worst_p99_us(o: &Outcome) -> Option<u64> {
    [&o.idle_lateness, &o.request_lateness].iter().filter_map(|s| s.quantile(0.99)).max()
}

/// Whether that p99 met the bar (`None`: nothing fired).
pub fn bar_met(o: &Outcome) -> Option<bool> {
    worst_p99_us(o).map(|p| Duration::from_micros(p) <= lateness_bar(o))
}

/// Events per second of the steady state.
pub fn steady_rate(o: &Outcome, n: u64) -> f64 {
    n as f64 / o.steady.as_secs_f64().max(1e-9)
}

/// Idle timeouts armed per second at setup.
pub fn setup_rate(o: &Outcome) -> f64 {
    o.counts.idle_armed as f64 / o.setup.as_secs_f64().max(1e-9)
}

/// One row of the ratio table.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// A stable identifier (JSON), the row's label and the value's unit.
    pub key: &'static str,
    pub label: &'static str,
    pub unit: &'static str,
    /// Throughput (true) or cost (false): which way the ratio is taken.
    pub higher_is_better: bool,
    /// Shown without `--verbose`.
    pub headline: bool,
    pub value: fn(&Config, &Outcome) -> Option<f64>,
}

const fn metric(
    key: &'static str,
    label: &'static str,
    unit: &'static str,
    headline: bool,
    value: fn(&Config, &Outcome) -> Option<f64>,
) -> Metric {
    Metric { key, label, unit, higher_is_better: matches!(unit.as_bytes(), b"/s"), headline, value }
}

/// The rows of the ratio table, in order.
pub const METRICS: &[Metric] = &[
    metric("setup_arms_per_sec", "arms/s at setup (unpaced)", "/s", true, |_, o| Some(setup_rate(o))),
    metric("events_per_sec", "activity events/s achieved", "/s", false, |_, o| Some(steady_rate(o, o.counts.events))),
    metric("request_arms_per_sec", "request arms/s", "/s", false, |_, o| Some(steady_rate(o, o.counts.request_armed))),
    metric("resets_per_sec", "resets/s", "/s", false, |_, o| Some(steady_rate(o, o.counts.resets_ok))),
    metric("cancels_per_sec", "cancels/s", "/s", false, |_, o| Some(steady_rate(o, o.counts.cancels_ok))),
    metric("cpu_seconds", "CPU time, whole run (user+sys)", "s", true, |_, o| o.cpu.map(|c| c.total().as_secs_f64())),
    metric("cpu_ns_per_op", "CPU per timer operation", "ns", true, |_, o| cpu_ns_per_op(o)),
    metric("lateness_p50_us", "expiry lateness p50", "µs", false, |_, o| {
        o.all_lateness().quantile(0.5).map(|v| v as f64)
    }),
    metric("lateness_p99_us", "expiry lateness p99", "µs", true, |_, o| {
        o.all_lateness().quantile(0.99).map(|v| v as f64)
    }),
    metric("lateness_max_us", "expiry lateness max", "µs", false, |_, o| o.all_lateness().max().map(|v| v as f64)),
    metric("heap_bytes_per_connection", "heap per connection", "B", false, |c, o| Some(heap_per_connection(c, o))),
    metric("timer_bytes_per_timeout", "timer bytes per pending timeout", "B", true, |c, o| {
        Some(timer_bytes_per_timeout(c, o))
    }),
    metric("heap_bytes_per_connection_at_end", "heap per connection at the end", "B", false, |c, o| {
        Some(heap_per_connection_at_end(c, o))
    }),
];

/// shardwheel's advantage over a peer on one metric: `peer / shardwheel` for costs,
/// `shardwheel / peer` for throughputs, so that > 1 always means shardwheel does better;
/// `None` when a value is missing or the ratio undefined (0 / 0).
pub fn advantage(metric: &Metric, ours: Option<f64>, theirs: Option<f64>) -> Option<f64> {
    let (ours, theirs) = (ours?, theirs?);
    let (num, den) = if metric.higher_is_better { (ours, theirs) } else { (theirs, ours) };
    match (num, den) {
        (n, d) if d > 0.0 => Some(n / d),
        (n, _) if n > 0.0 => Some(f64::INFINITY),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::outcome;

    #[test]
    fn a_consistent_outcome_passes_and_a_lost_or_early_timeout_fails() {
        let o = outcome("shardwheel", 1);
        assert!(passed(&o), "{:?}", checks(&o));
        let mut lost = outcome("shardwheel", 1);
        lost.unfired_listed = Some(939);
        assert!(!passed(&lost));
        let mut early = outcome("shardwheel", 1);
        early.early = 1;
        assert!(!checks(&early)[2].ok);
    }

    #[test]
    fn advantage_is_above_one_when_shardwheel_does_better() {
        let cost = METRICS.iter().find(|m| m.key == "cpu_seconds").unwrap();
        let rate = METRICS.iter().find(|m| m.key == "setup_arms_per_sec").unwrap();
        assert!(rate.higher_is_better && !cost.higher_is_better);
        assert_eq!(advantage(cost, Some(1.0), Some(3.0)), Some(3.0));
        assert_eq!(advantage(rate, Some(3.0), Some(1.0)), Some(3.0));
        assert_eq!(advantage(cost, Some(0.0), Some(2.0)), Some(f64::INFINITY));
        assert_eq!(advantage(cost, Some(0.0), Some(0.0)), None);
        assert_eq!(advantage(cost, None, Some(1.0)), None);
    }
}
