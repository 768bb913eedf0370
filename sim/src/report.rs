//! Formatting: the progress lines (stderr), the text report with its self-check, and the
//! `--compare` ratio table (stdout). The figures and checks themselves are computed once,
//! here, for the text and the JSON report alike.

use crate::args::{Config, group};
use crate::histogram::Snapshot;
use crate::scenario::{Outcome, SIM_BYTES_PER_CONNECTION};
use std::fmt::Write as _;
use std::time::Duration;

/// Width of the label column.
const LABEL: usize = 34;

/// A rate, rounded, with thousands separators and a unit.
pub fn per_sec(rate: f64) -> String {
    format!("{}/s", group(rate.max(0.0).round() as u64))
}

/// Microseconds as milliseconds, to the microsecond.
pub fn ms_from_us(us: u64) -> String {
    format!("{}.{:03} ms", group(us / 1_000), us % 1_000)
}

fn ms(d: Duration) -> String {
    ms_from_us(d.as_micros() as u64)
}

/// A setting in milliseconds: whole ones without decimals.
fn ms_setting(d: Duration) -> String {
    let us = d.as_micros() as u64;
    if us % 1_000 == 0 { format!("{} ms", group(us / 1_000)) } else { ms_from_us(us) }
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn percent(f: f64) -> String {
    format!("{:.3} %", f * 100.0)
}

/// One second's figures, for the progress line or bar.
#[derive(Clone, Copy, Debug)]
pub struct Second {
    pub elapsed: Duration,
    /// Per second over the last one.
    pub arms: f64,
    pub resets: f64,
    pub cancels: f64,
    pub expiries: f64,
    /// The largest lateness of the second.
    pub max_late_us: u64,
    pub pending: Option<usize>,
}

impl Second {
    /// The line printed once a second when no bar is shown.
    pub fn line(&self) -> String {
        format!(
            "[{:>5.1} s]  arms {:>9}  resets {:>9}  cancels {:>9}  expiries {:>8} (max late {:>10})  pending {:>9}",
            self.elapsed.as_secs_f64(),
            per_sec(self.arms),
            per_sec(self.resets),
            per_sec(self.cancels),
            per_sec(self.expiries),
            ms_from_us(self.max_late_us),
            self.pending.map_or("n/a".to_owned(), |p| group(p as u64)),
        )
    }

    /// The bar's message: the figures that change most first, as the terminal may cut it.
    pub fn short(&self) -> String {
        format!(
            "expiries {} (max late {})  pending {}  arms {}  cancels {}",
            per_sec(self.expiries),
            ms_from_us(self.max_late_us),
            self.pending.map_or("n/a".to_owned(), |p| group(p as u64)),
            per_sec(self.arms),
            per_sec(self.cancels),
        )
    }
}

// ─── Figures and checks ─────────────────────────────────────────────────────────────────

/// One line of the self-check.
#[derive(Clone, Debug)]
pub struct Check {
    pub ok: bool,
    /// A stable identifier (JSON).
    pub key: &'static str,
    pub what: &'static str,
    pub detail: String,
}

/// The self-check of one run: every timeout ended exactly once, every task was dropped
/// exactly once, none fired early, and (where the timer keeps counters) the timer's
/// counters agree with the simulator's.
pub fn checks(o: &Outcome) -> Vec<Check> {
    let c = &o.counts;
    let fired = o.fired_idle + o.fired_request;
    let unfired = o.unfired.idle + o.unfired.request;
    let before = &o.unrun_before_stop;
    let listed = o.unfired_listed.map_or(String::new(), |n| format!("; stop() handed back {}", group(n)));
    let mut checks = vec![
        Check {
            ok: c.idle_armed == o.fired_idle + o.unfired.idle
                && c.request_armed == o.fired_request + c.cancels_ok + o.unfired.request
                && before.request == c.cancels_ok + c.request_failed
                && before.idle == c.reset_tasks() + c.idle_failed,
            key: "ended_exactly_once",
            what: "every timeout ended exactly once",
            detail: format!(
                "scheduled {} = fired {} + cancelled {} + unfired at stop {}\n\
                 idle {} = {} + 0 + {}; request {} = {} + {} + {}\n\
                 dropped unrun before the stop: request {} = cancelled {} + refused {}; \
                 idle {} = replaced by resets {} + refused {}",
                group(c.scheduled()),
                group(fired),
                group(c.cancels_ok),
                group(unfired),
                group(c.idle_armed),
                group(o.fired_idle),
                group(o.unfired.idle),
                group(c.request_armed),
                group(o.fired_request),
                group(c.cancels_ok),
                group(o.unfired.request),
                group(before.request),
                group(c.cancels_ok),
                group(c.request_failed),
                group(before.idle),
                group(c.reset_tasks()),
                group(c.idle_failed),
            ),
        },
        Check {
            ok: o.drops.idle == c.created_idle
                && o.drops.request == c.created_request
                && o.unfired_listed.is_none_or(|n| n == unfired),
            key: "dropped_exactly_once",
            what: "every task dropped exactly once",
            detail: format!(
                "created {} = dropped {}: idle {} = {}; request {} = {}\n\
                 dropped unrun after the stop {}{listed}",
                group(c.created_idle + c.created_request),
                group(o.drops.idle + o.drops.request),
                group(c.created_idle),
                group(o.drops.idle),
                group(c.created_request),
                group(o.drops.request),
                group(unfired),
            ),
        },
        Check {
            ok: o.early == 0,
            key: "never_early",
            what: "no task fired early",
            detail: if o.early == 0 {
                "0 early".to_owned()
            } else {
                format!(
                    "{} early, the earliest {} before its deadline",
                    group(o.early),
                    ms_from_us(o.worst_early_ns / 1_000)
                )
            },
        },
    ];
    if let Some(s) = &o.stats {
        checks.push(Check {
            ok: s.scheduled == c.scheduled()
                && s.expired == fired
                && s.cancelled == c.cancels_ok
                && Some(s.unfired) == o.unfired_listed
                && s.pending == 0
                && s.rejected == 0
                && s.panicked == 0,
            key: "stats_agree",
            what: "simulator agrees with the service's stats()",
            detail: format!(
                "(service / simulator) scheduled {} / {}, expired {} / {}, cancelled {} / {}\n\
                 unfired {} / {}, pending {} / 0, rejected {} / 0, panicked {} / 0",
                group(s.scheduled),
                group(c.scheduled()),
                group(s.expired),
                group(fired),
                group(s.cancelled),
                group(c.cancels_ok),
                group(s.unfired),
                group(unfired),
                group(s.pending),
                group(s.rejected),
                group(s.panicked),
            ),
        });
    }
    checks
}

/// Whether every check of a run passed.
pub fn passed(o: &Outcome) -> bool {
    checks(o).iter().all(|c| c.ok)
}

/// Live heap bytes per connection added by arming the idle timeouts (counting allocator):
/// the simulator's own 12 B, the handle slot, the task and whatever the timer allocates.
pub fn heap_per_connection(config: &Config, o: &Outcome) -> f64 {
    o.heap_after.saturating_sub(o.heap_before) as f64 / config.connections as f64
}

/// [`heap_per_connection`] less the simulator's own bytes: what one pending timeout costs
/// with this timer (handle slot, 32-byte task and the timer's own structures).
pub fn timer_bytes_per_timeout(config: &Config, o: &Outcome) -> f64 {
    (heap_per_connection(config, o) - SIM_BYTES_PER_CONNECTION as f64).max(0.0)
}

/// Live heap bytes per connection at the end of the steady state, over the heap before
/// arming: with the requests in flight, and whatever cancelled entries the timer still keeps.
pub fn heap_per_connection_at_end(config: &Config, o: &Outcome) -> f64 {
    o.heap_at_end.saturating_sub(o.heap_before) as f64 / config.connections as f64
}

/// Resident memory per connection added by arming (less meaningful for a run that reuses
/// memory an earlier run in the same process freed).
pub fn rss_per_connection(config: &Config, o: &Outcome) -> Option<f64> {
    Some(o.rss_after?.saturating_sub(o.rss_before?) as f64 / config.connections as f64)
}

/// Timer operations in the run: arms (idle and request), resets, cancels and expiries.
pub fn timer_ops(o: &Outcome) -> u64 {
    let c = &o.counts;
    c.scheduled() + c.resets_ok + c.resets_failed + c.cancels_ok + c.cancels_failed + o.fired_idle + o.fired_request
}

/// The design bar for expiry lateness: p99 ≤ one tick + 0.5 ms.
pub fn lateness_bar(o: &Outcome) -> Duration {
    o.tick + Duration::from_micros(500)
}

/// The worst p99 of the two kinds of expiry, if any fired.
pub fn worst_p99_us(o: &Outcome) -> Option<u64> {
    [&o.idle_lateness, &o.request_lateness].iter().filter_map(|s| s.quantile(0.99)).max()
}

// ─── The text report ────────────────────────────────────────────────────────────────────

/// Builds the report of one run; returns it with whether the self-check passed.
pub fn render(config: &Config, warnings: &[String], o: &Outcome) -> (String, bool) {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let w = &mut out;
    let row = |w: &mut String, label: &str, value: String| {
        let _ = writeln!(w, "  {label:<LABEL$}{value}");
    };
    let title = format!("shardwheel-sim — connection simulator ({})", o.timer);
    let _ = writeln!(w, "{title}\n{}\n", "═".repeat(title.chars().count()));

    // ── Configuration ──
    let _ = writeln!(w, "Configuration");
    let c = &o.counts;
    row(w, "timer", o.describe.clone());
    row(w, "connections", group(config.connections as u64));
    row(
        w,
        "producers",
        format!(
            "{} threads, {} connections and {} events each",
            config.producers,
            group(config.connections_of(0) as u64),
            per_sec(config.rate_per_producer())
        ),
    );
    row(w, "tick", ms_setting(o.tick));
    row(w, "idle timeout", ms_setting(config.idle_timeout));
    row(w, "idle fraction", format!("{} ({} connections go quiet)", percent(config.idle_fraction), group(c.quiet)));
    row(w, "request timeout", ms_setting(config.request_timeout));
    row(w, "lost fraction", percent(config.lost_fraction));
    row(
        w,
        "requests in flight",
        format!("{} per producer (response after ~{})", group(config.in_flight as u64), ms(config.response_delay())),
    );
    row(
        w,
        "activity rate",
        format!(
            "{} (each active connection at least every {})",
            per_sec(config.rate as f64),
            secs(config.round_robin_period())
        ),
    );
    row(w, "duration", format!("{} steady state", secs(config.duration)));
    row(w, "seed", config.seed.to_string());
    for warning in warnings {
        let _ = writeln!(w, "  WARNING: {warning}");
    }

    // ── Setup ──
    let _ = writeln!(w, "\nSetup");
    row(
        w,
        "idle timeouts armed",
        format!(
            "{} in {} ({}, unpaced)",
            group(c.idle_armed),
            secs(o.setup),
            per_sec(c.idle_armed as f64 / o.setup.as_secs_f64().max(1e-9))
        ),
    );
    if o.settle >= Duration::from_millis(1) {
        row(w, "arms filed", format!("{} after the last arm returned (memory measured then)", ms(o.settle)));
    }
    row(
        w,
        "heap per connection",
        format!(
            "{:.0} B (simulator {} B + handle slot {} B + task 32 B + the timer's own; counting allocator)",
            heap_per_connection(config, o),
            SIM_BYTES_PER_CONNECTION,
            o.handle_bytes,
        ),
    );
    row(
        w,
        "timer memory per pending timeout",
        format!(
            "{:.0} B (heap per connection less the simulator's {} B, the {} B handle included; design bar ≤ 96 B)",
            timer_bytes_per_timeout(config, o),
            SIM_BYTES_PER_CONNECTION,
            o.handle_bytes,
        ),
    );
    match (o.rss_before, o.rss_after) {
        (Some(before), Some(after)) => {
            row(
                w,
                "resident memory (VmRSS)",
                format!(
                    "{} before arming, {} after: {:.0} B per connection",
                    mib(before),
                    mib(after),
                    rss_per_connection(config, o).unwrap_or(0.0)
                ),
            );
        }
        _ => row(w, "resident memory", "n/a (no /proc/self/status)".into()),
    }

    // ── Activity ──
    let steady = o.steady.as_secs_f64().max(1e-9);
    let rate = |n: u64| per_sec(n as f64 / steady);
    let _ = writeln!(w, "\nSteady state ({})", secs(o.steady));
    let _ = writeln!(w, "  {:<LABEL$}{:>13}   {:>13}", "", "total", "per second");
    let line = |w: &mut String, label: &str, total: u64, per: String, note: String| {
        let text = format!("  {label:<LABEL$}{:>13}   {per:>13}   {note}", group(total));
        let _ = writeln!(w, "{}", text.trim_end());
    };
    line(w, "activity events", c.events, rate(c.events), format!("target {}", per_sec(config.rate as f64)));
    line(w, "arms, idle timeouts", c.idle_armed, "—".into(), "all at setup (see above)".into());
    line(w, "arms, request timeouts", c.request_armed, rate(c.request_armed), String::new());
    line(w, "resets (reset() = true)", c.resets_ok, rate(c.resets_ok), String::new());
    line(
        w,
        "cancels (cancel() = true)",
        c.cancels_ok,
        rate(c.cancels_ok),
        format!("{} cancel() = false", group(c.cancels_failed)),
    );
    line(
        w,
        "expiries, idle timeouts",
        o.fired_idle,
        rate(o.fired_idle),
        format!("{} connections went quiet", group(c.quiet)),
    );
    line(
        w,
        "expiries, request timeouts",
        o.fired_request,
        rate(o.fired_request),
        format!("{} requests lost", group(c.lost)),
    );
    line(
        w,
        "idle expiries of active conns",
        c.resets_failed,
        rate(c.resets_failed),
        "reset() = false on an active connection (expected 0)".into(),
    );
    if c.schedule_failed() > 0 {
        line(w, "refused arms", c.schedule_failed(), rate(c.schedule_failed()), "(expected 0)".into());
    }
    row(
        w,
        "heap at the end",
        format!(
            "{} live once activity stopped: {:.0} B per connection (requests in flight, and any cancelled \
             entries the timer keeps)",
            mib(o.heap_at_end),
            heap_per_connection_at_end(config, o)
        ),
    );
    if let Some(cpu) = o.cpu {
        row(
            w,
            "CPU time (whole process)",
            format!(
                "{} user + {} system = {} over {} of wall time ({:.0} ns per timer operation)",
                secs(cpu.user),
                secs(cpu.system),
                secs(cpu.total()),
                secs(o.total),
                cpu.total().as_nanos() as f64 / timer_ops(o).max(1) as f64
            ),
        );
    }

    // ── Lateness ──
    let _ = writeln!(w, "\nExpiry lateness (task ran − requested deadline; resolution 1 µs, buckets ≤ 3 % wide)");
    let _ = writeln!(
        w,
        "  A timeout fires at the first tick at or after its deadline: expect up to one tick ({}) plus the\n  \
         wake-up delay of the timer thread.",
        ms_setting(o.tick)
    );
    let _ =
        writeln!(w, "  {:<10}{:>11}{:>14}{:>14}{:>14}{:>14}{:>14}", "", "fired", "p50", "p99", "p99.9", "max", "mean");
    let lat_row = |w: &mut String, label: &str, s: &Snapshot| {
        let q = |q: f64| s.quantile(q).map_or("—".to_owned(), ms_from_us);
        let _ = writeln!(
            w,
            "  {label:<10}{:>11}{:>14}{:>14}{:>14}{:>14}{:>14}",
            group(s.count()),
            q(0.5),
            q(0.99),
            q(0.999),
            s.max().map_or("—".to_owned(), ms_from_us),
            s.mean().map_or("—".to_owned(), |m| ms_from_us(m.round() as u64)),
        );
    };
    lat_row(w, "idle", &o.idle_lateness);
    lat_row(w, "request", &o.request_lateness);
    let _ = writeln!(w, "  {:<10}{:>11}", "baseline", "samples");
    lat_row(w, "sleep", &o.sleep_lateness);
    let _ = writeln!(
        w,
        "  (baseline: how late a plain thread::sleep({}) woke up meanwhile, on an unpinned thread, counting the\n  \
         wake-ups a stall made it miss as a timer thread would: the machine's own scheduling noise)",
        ms_setting(o.tick)
    );
    if let Some(worst) = worst_p99_us(o) {
        let bar = lateness_bar(o);
        row(
            w,
            "design bar p99 ≤ 1 tick + 0.5 ms",
            format!(
                "{} (bar {}; worst p99 {}; baseline p99 {})",
                if Duration::from_micros(worst) <= bar { "met" } else { "NOT met" },
                ms(bar),
                ms_from_us(worst),
                o.sleep_lateness.quantile(0.99).map_or("—".to_owned(), ms_from_us),
            ),
        );
    }
    row(
        w,
        "early firings",
        if o.early == 0 {
            "0 (must be 0)".to_owned()
        } else {
            format!(
                "{} (must be 0; earliest {} before its deadline)",
                group(o.early),
                ms_from_us(o.worst_early_ns / 1_000)
            )
        },
    );

    // ── End ──
    let _ = writeln!(w, "\nEnd of run");
    row(w, "pending at end (pending())", o.pending_at_end.map_or("n/a".to_owned(), |p| group(p as u64)));
    row(w, "stop() took", secs(o.stop_time));
    row(
        w,
        "unfired at stop",
        format!(
            "{} (idle {} + request {}), {}",
            group(o.unfired.idle + o.unfired.request),
            group(o.unfired.idle),
            group(o.unfired.request),
            if o.unfired_listed.is_some() {
                "handed back by stop()"
            } else {
                "dropped by the timer or with the handles"
            }
        ),
    );

    // ── Service stats ──
    if let Some(s) = &o.stats {
        let _ = writeln!(w, "\nService stats (service.stats() after stop)");
        row(w, "scheduled", group(s.scheduled));
        row(w, "expired", group(s.expired));
        row(w, "cancelled", group(s.cancelled));
        row(w, "unfired (returned by stop)", group(s.unfired));
        row(w, "pending", group(s.pending));
        row(w, "rejected", group(s.rejected));
        row(w, "panicked", group(s.panicked));
        let run = o.setup + o.steady + o.stop_time;
        row(
            w,
            "wakeups",
            format!(
                "{} ({} over {} of setup, steady state and stop, {} shards)",
                group(s.wakeups),
                per_sec(s.wakeups as f64 / run.as_secs_f64().max(1e-9)),
                secs(run),
                o.lanes
            ),
        );
    }

    // ── Self-check ──
    let checks = checks(o);
    let _ = writeln!(w, "\nSelf-check");
    write_checks(w, &checks, true);
    let passed = checks.iter().all(|c| c.ok);
    let _ = writeln!(
        w,
        "\n{}  (total run time {}, including setup and teardown)",
        if passed { "PASS" } else { "FAIL" },
        secs(o.total)
    );
    (out, passed)
}

fn write_checks(w: &mut String, checks: &[Check], details: bool) {
    for check in checks {
        let _ = writeln!(w, "  [{}] {}", if check.ok { "PASS" } else { "FAIL" }, check.what);
        if details || !check.ok {
            for line in check.detail.lines() {
                let _ = writeln!(w, "         {line}");
            }
        }
    }
}

// ─── The comparison ─────────────────────────────────────────────────────────────────────

/// One row of the ratio table.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// A stable identifier (JSON).
    pub key: &'static str,
    pub label: &'static str,
    pub unit: &'static str,
    /// Throughput (true) or cost (false): which way the ratio is taken.
    pub higher_is_better: bool,
    pub value: fn(&Config, &Outcome) -> Option<f64>,
}

fn steady_rate(o: &Outcome, n: u64) -> f64 {
    n as f64 / o.steady.as_secs_f64().max(1e-9)
}

fn lateness_us(s: Snapshot, q: f64) -> Option<f64> {
    s.quantile(q).map(|v| v as f64)
}

/// The rows of the ratio table, in order.
pub const METRICS: &[Metric] = &[
    Metric {
        key: "setup_arms_per_sec",
        label: "arms/s at setup (unpaced)",
        unit: "/s",
        higher_is_better: true,
        value: |_, o| Some(o.counts.idle_armed as f64 / o.setup.as_secs_f64().max(1e-9)),
    },
    Metric {
        key: "events_per_sec",
        label: "activity events/s achieved",
        unit: "/s",
        higher_is_better: true,
        value: |_, o| Some(steady_rate(o, o.counts.events)),
    },
    Metric {
        key: "request_arms_per_sec",
        label: "request arms/s",
        unit: "/s",
        higher_is_better: true,
        value: |_, o| Some(steady_rate(o, o.counts.request_armed)),
    },
    Metric {
        key: "resets_per_sec",
        label: "resets/s",
        unit: "/s",
        higher_is_better: true,
        value: |_, o| Some(steady_rate(o, o.counts.resets_ok)),
    },
    Metric {
        key: "cancels_per_sec",
        label: "cancels/s",
        unit: "/s",
        higher_is_better: true,
        value: |_, o| Some(steady_rate(o, o.counts.cancels_ok)),
    },
    Metric {
        key: "cpu_seconds",
        label: "CPU time, whole run (user+sys)",
        unit: "s",
        higher_is_better: false,
        value: |_, o| o.cpu.map(|c| c.total().as_secs_f64()),
    },
    Metric {
        key: "cpu_ns_per_op",
        label: "CPU per timer operation",
        unit: "ns",
        higher_is_better: false,
        value: |_, o| o.cpu.map(|c| c.total().as_nanos() as f64 / timer_ops(o).max(1) as f64),
    },
    Metric {
        key: "lateness_p50_us",
        label: "expiry lateness p50",
        unit: "µs",
        higher_is_better: false,
        value: |_, o| lateness_us(o.all_lateness(), 0.5),
    },
    Metric {
        key: "lateness_p99_us",
        label: "expiry lateness p99",
        unit: "µs",
        higher_is_better: false,
        value: |_, o| lateness_us(o.all_lateness(), 0.99),
    },
    Metric {
        key: "lateness_max_us",
        label: "expiry lateness max",
        unit: "µs",
        higher_is_better: false,
        value: |_, o| o.all_lateness().max().map(|v| v as f64),
    },
    Metric {
        key: "heap_bytes_per_connection",
        label: "heap per connection",
        unit: "B",
        higher_is_better: false,
        value: |c, o| Some(heap_per_connection(c, o)),
    },
    Metric {
        key: "timer_bytes_per_timeout",
        label: "timer bytes per pending timeout",
        unit: "B",
        higher_is_better: false,
        value: |c, o| Some(timer_bytes_per_timeout(c, o)),
    },
    Metric {
        key: "heap_bytes_per_connection_at_end",
        label: "heap per connection at the end",
        unit: "B",
        higher_is_better: false,
        value: |c, o| Some(heap_per_connection_at_end(c, o)),
    },
];

/// shardwheel's advantage over a peer on one metric: `peer / shardwheel` for costs,
/// `shardwheel / peer` for throughputs, so that > 1 always means shardwheel does better.
/// `None` when either value is missing or the ratio is undefined (0 / 0).
pub fn advantage(metric: &Metric, ours: Option<f64>, theirs: Option<f64>) -> Option<f64> {
    let (ours, theirs) = (ours?, theirs?);
    let (num, den) = if metric.higher_is_better { (ours, theirs) } else { (theirs, ours) };
    match (num, den) {
        (n, d) if d > 0.0 => Some(n / d),
        (n, _) if n > 0.0 => Some(f64::INFINITY),
        _ => None,
    }
}

fn format_value(metric: &Metric, v: Option<f64>) -> String {
    let Some(v) = v else {
        return "n/a".to_owned();
    };
    match metric.unit {
        "/s" => per_sec(v),
        "s" => format!("{v:.2} s"),
        "µs" => ms_from_us(v.round() as u64),
        "ns" => format!("{} ns", group(v.round() as u64)),
        "B" => format!("{} B", group(v.round() as u64)),
        unit => format!("{v:.1} {unit}"),
    }
}

/// `5.87×`, `∞`, `—`.
pub fn format_ratio(r: Option<f64>) -> String {
    match r {
        None => "—".to_owned(),
        Some(r) if r.is_infinite() => "∞".to_owned(),
        Some(r) if r >= 100.0 => format!("{r:.0}×"),
        Some(r) => format!("{r:.2}×"),
    }
}

/// The ratio table: every run's values, then shardwheel's advantage over each peer.
/// `runs[0]` is shardwheel's. `notes` are printed under the table.
pub fn render_compare(config: &Config, runs: &[Outcome], notes: &[String]) -> String {
    let mut out = String::new();
    let w = &mut out;
    let title = "Comparison: the same scenario on every timer";
    let _ = writeln!(w, "\n{title}\n{}", "═".repeat(title.chars().count()));
    let _ = writeln!(
        w,
        "{} connections, {} activity events/s ({} producers), idle {} / request {}, tick {}, {} steady state, seed {}",
        group(config.connections as u64),
        group(config.rate),
        config.producers,
        ms_setting(config.idle_timeout),
        ms_setting(config.request_timeout),
        ms_setting(config.tick),
        secs(config.duration),
        config.seed
    );
    let name = runs.iter().map(|o| o.timer.chars().count() + 2).max().unwrap_or(0);
    for o in runs {
        let _ = writeln!(w, "  {:<name$}{}", o.timer, o.describe);
    }
    // Wide enough for "vs <the longest name>" and two spaces.
    let col = runs.iter().map(|o| o.timer.chars().count() + 5).max().unwrap_or(0).max(17);
    let header = |w: &mut String, first: &str, names: &[&str]| {
        let _ = write!(w, "\n  {first:<LABEL$}");
        for name in names {
            let _ = write!(w, "{name:>col$}");
        }
        let _ = writeln!(w);
    };
    let names: Vec<&str> = runs.iter().map(|o| o.timer).collect();
    header(w, "values", &names);
    for m in METRICS {
        let _ = write!(w, "  {:<LABEL$}", m.label);
        for o in runs {
            let _ = write!(w, "{:>col$}", format_value(m, (m.value)(config, o)));
        }
        let _ = writeln!(w);
    }
    let _ = write!(w, "  {:<LABEL$}", "self-check");
    for o in runs {
        let _ = write!(w, "{:>col$}", if passed(o) { "PASS" } else { "FAIL" });
    }
    let _ = writeln!(w);

    if runs.len() > 1 {
        let peers: Vec<String> = runs[1..].iter().map(|o| format!("vs {}", o.timer)).collect();
        let peer_names: Vec<&str> = peers.iter().map(String::as_str).collect();
        header(w, "shardwheel's advantage", &peer_names);
        for m in METRICS {
            let ours = (m.value)(config, &runs[0]);
            let _ = write!(w, "  {:<LABEL$}", m.label);
            for o in &runs[1..] {
                let _ = write!(w, "{:>col$}", format_ratio(advantage(m, ours, (m.value)(config, o))));
            }
            let _ = writeln!(w);
        }
        let _ = writeln!(
            w,
            "  (peer ÷ shardwheel for costs, shardwheel ÷ peer for throughputs: > 1× means shardwheel does better.\n   \
             Activity is paced at the same target rate for every timer, so the rates show whether a timer kept\n   \
             up; the work each one did for it shows in CPU time. CPU time is the whole process's (getrusage):\n   \
             the simulator's own share is the same in every run.)"
        );
    }
    for o in &runs[1..] {
        let checks = checks(o);
        if checks.iter().any(|c| !c.ok) {
            let _ = writeln!(w, "\n  Self-check of {}:", o.timer);
            write_checks(w, &checks, false);
        }
    }
    for note in notes {
        let _ = writeln!(w, "\n  Note: {note}");
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::histogram::Histogram;
    use crate::measure::Usage;
    use crate::scenario::{Counts, Drops};

    /// A consistent outcome: 1,000 connections, 100 quiet; made up, but the numbers add up.
    pub(crate) fn outcome(timer: &'static str, scale: u64) -> Outcome {
        let idle = Histogram::new();
        let request = Histogram::new();
        for v in 0..100 {
            idle.record(v * 10 * scale);
        }
        for v in 0..10 {
            request.record(v * 50 * scale);
        }
        let counts = Counts {
            events: 30_000,
            idle_armed: 1_000,
            request_armed: 30_000,
            resets_ok: 30_000,
            cancels_ok: 29_950,
            lost: 30,
            created_idle: 1_000,
            created_request: 30_000,
            quiet: 100,
            ..Counts::default()
        };
        Outcome {
            timer,
            describe: format!("{timer}, made up"),
            lanes: 2,
            tick: Duration::from_millis(1),
            setup: Duration::from_millis(10 * scale),
            settle: Duration::ZERO,
            rss_before: Some(1 << 20),
            rss_after: Some((1 << 20) + 100_000 * scale),
            heap_before: 1_000,
            heap_after: 1_000 + 80_000 * scale,
            heap_at_end: 1_000 + 90_000 * scale,
            handle_bytes: 16,
            steady: Duration::from_secs(1),
            counts,
            fired_idle: 100,
            fired_request: 10,
            early: 0,
            worst_early_ns: 0,
            idle_lateness: idle.snapshot(),
            request_lateness: request.snapshot(),
            sleep_lateness: Histogram::new().snapshot(),
            pending_at_end: Some(940),
            unfired: Drops { idle: 900, request: 40 },
            unfired_listed: Some(940),
            unrun_before_stop: Drops { idle: 0, request: 29_950 },
            stop_time: Duration::from_millis(3),
            drops: Drops { idle: 1_000, request: 30_000 },
            stats: None,
            cpu: Some(Usage { user: Duration::from_millis(300 * scale), system: Duration::from_millis(50 * scale) }),
            total: Duration::from_millis(1_020),
        }
    }

    pub(crate) fn config() -> Config {
        Config { connections: 1_000, producers: 2, shards: 2, ..Config::default() }
    }

    #[test]
    fn formats_units() {
        assert_eq!(ms_from_us(1_234_567), "1,234.567 ms");
        assert_eq!(ms_from_us(7), "0.007 ms");
        assert_eq!(per_sec(299_999.6), "300,000/s");
        assert_eq!(percent(0.001), "0.100 %");
        assert_eq!(format_ratio(Some(5.871)), "5.87×");
        assert_eq!(format_ratio(Some(f64::INFINITY)), "∞");
        assert_eq!(format_ratio(None), "—");
    }

    #[test]
    fn a_consistent_outcome_passes_and_a_lost_timeout_fails() {
        let o = outcome("shardwheel", 1);
        assert!(checks(&o).iter().all(|c| c.ok), "{:?}", checks(&o));
        let (text, ok) = render(&config(), &[], &o);
        assert!(ok);
        assert!(text.contains("[PASS] every timeout ended exactly once"), "{text}");
        let mut lost = outcome("shardwheel", 1);
        lost.unfired_listed = Some(939);
        assert!(!passed(&lost));
        let mut early = outcome("shardwheel", 1);
        early.early = 1;
        assert!(!render(&config(), &[], &early).1);
    }

    #[test]
    fn advantage_is_above_one_when_shardwheel_does_better() {
        let cost = METRICS.iter().find(|m| m.key == "cpu_seconds").unwrap();
        let rate = METRICS.iter().find(|m| m.key == "setup_arms_per_sec").unwrap();
        assert_eq!(advantage(cost, Some(1.0), Some(3.0)), Some(3.0));
        assert_eq!(advantage(rate, Some(3.0), Some(1.0)), Some(3.0));
        assert_eq!(advantage(cost, Some(0.0), Some(2.0)), Some(f64::INFINITY));
        assert_eq!(advantage(cost, Some(0.0), Some(0.0)), None);
        assert_eq!(advantage(cost, None, Some(1.0)), None);
    }

    #[test]
    fn compare_table_has_every_metric_and_peer() {
        let runs = [outcome("shardwheel", 1), outcome("netty-wheel", 3)];
        let text = render_compare(&config(), &runs, &["a note".to_owned()]);
        for m in METRICS {
            assert!(text.contains(m.label), "{}: {text}", m.label);
        }
        assert!(text.contains("vs netty-wheel"), "{text}");
        assert!(text.contains("3.00×"), "{text}");
        assert!(text.contains("Note: a note"), "{text}");
    }
}
