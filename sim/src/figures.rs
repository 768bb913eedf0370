//! The figures and checks computed from a run, once, for the text and the JSON report alike:
//! the self-check, the derived memory, CPU and lateness figures, and the ratio table's metrics.

use crate::histogram::Snapshot;
use crate::scenario::Outcome;
use crate::units::{fill, group, ms_from_us};
use std::time::Duration;

/// The simulator's own bytes per connection, whatever the timer: the requested deadline (8 B)
/// and the time it goes quiet (4 B). The handle is counted as the timer's.
pub const SIM_BYTES_PER_CONNECTION: u64 = 12;

/// One line of the self-check: whether it passed, a stable key (JSON), what is checked, and
/// the sums behind it.
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

impl Outcome {
    pub fn all_lateness(&self) -> Snapshot {
        self.lateness[0].merged(&self.lateness[1])
    }

    /// Live heap per connection added since before arming, read at `heap` (`heap_after`: the
    /// simulator's own 12 B, the handle slot, the task and whatever the timer allocates;
    /// `heap_at_end`: with requests in flight and cancelled entries kept).
    pub fn heap_per_connection(&self, heap: u64) -> f64 {
        heap.saturating_sub(self.heap_before) as f64 / self.connections as f64
    }

    /// Less the simulator's own bytes: what a pending timeout costs with this timer.
    pub fn timer_bytes(&self) -> f64 {
        (self.heap_per_connection(self.heap_after) - SIM_BYTES_PER_CONNECTION as f64).max(0.0)
    }

    /// Resident memory per connection added by arming.
    pub fn rss_per_connection(&self) -> Option<f64> {
        Some(self.rss_after?.saturating_sub(self.rss_before?) as f64 / self.connections as f64)
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

    /// The worse p99 of the two kinds of expiry, if any fired, and whether it met the bar.
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

/// One row of the ratio table: a stable key (JSON), its label and unit; whether it is shown
/// without `--verbose`. Units per second are throughputs (higher is better), others costs.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    pub key: Text,
    pub label: Text,
    pub unit: Text,
    pub headline: bool,
    pub value: fn(&Outcome) -> Option<f64>,
}

impl Metric {
    pub fn higher_is_better(&self) -> bool {
        self.unit == "/s"
    }
}

type Text = &'static str;

const fn metric(key: Text, label: Text, unit: Text, headline: bool, value: fn(&Outcome) -> Option<f64>) -> Metric {
    Metric { key, label, unit, headline, value }
}

fn q(o: &Outcome, q: f64) -> Option<f64> {
    o.all_lateness().quantile(q).map(|v| v as f64)
}

/// The rows of the ratio table.
pub const METRICS: &[Metric] = &[
    metric("setup_arms_per_sec", "arms/s at setup (unpaced)", "/s", true, |o| Some(o.setup_rate())),
    metric("events_per_sec", "activity events/s achieved", "/s", false, |o| Some(o.steady_rate(o.counts.events))),
    metric("cancels_per_sec", "cancels/s", "/s", false, |o| Some(o.steady_rate(o.counts.cancels_ok))),
    metric("cpu_seconds", "CPU time, whole run (user+sys)", "s", true, |o| o.cpu.map(|c| c.total().as_secs_f64())),
    metric("cpu_ns_per_op", "CPU per timer operation", "ns", true, Outcome::cpu_ns_per_op),
    metric("lateness_p50_us", "expiry lateness p50", "µs", false, |o| q(o, 0.5)),
    metric("lateness_p99_us", "expiry lateness p99", "µs", true, |o| q(o, 0.99)),
    metric("lateness_max_us", "expiry lateness max", "µs", false, |o| o.all_lateness().max().map(|v| v as f64)),
    metric("timer_bytes_per_timeout", "timer bytes per pending timeout", "B", true, |o| Some(o.timer_bytes())),
    metric("heap_bytes_per_connection_at_end", "heap per connection at the end", "B", false, |o| {
        Some(o.heap_per_connection(o.heap_at_end))
    }),
];

/// shardwheel's advantage over a peer on one metric: `peer / shardwheel` for costs,
/// `shardwheel / peer` for throughputs, so that > 1 always means shardwheel does better;
/// `None` when a value is missing or the ratio undefined (0 / 0).
pub fn advantage(metric: &Metric, ours: Option<f64>, theirs: Option<f64>) -> Option<f64> {
    let (ours, theirs) = (ours?, theirs?);
    let (num, den) = if metric.higher_is_better() { (ours, theirs) } else { (theirs, ours) };
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
    fn advantage_is_above_one_when_shardwheel_does_better() {
        let [rate, cost] = ["setup_arms_per_sec", "cpu_seconds"].map(|k| METRICS.iter().find(|m| m.key == k).unwrap());
        assert!(rate.higher_is_better() && !cost.higher_is_better());
        let ratios = [(cost, 1.0, 3.0), (rate, 3.0, 1.0), (cost, 0.0, 2.0), (cost, 0.0, 0.0)];
        let ratios = ratios.map(|(m, ours, theirs)| advantage(m, Some(ours), Some(theirs)));
        assert_eq!(ratios, [Some(3.0), Some(3.0), Some(f64::INFINITY), None]);
        assert_eq!(advantage(cost, None, Some(1.0)), None);
    }
}
