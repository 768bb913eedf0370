//! The text report (stdout): one screen by default, every table with `--verbose`; and the
//! `--compare` ratio table.

use crate::args::Config;
use crate::figures::{self, Check, METRICS, Metric, SIM_BYTES_PER_CONNECTION};
use crate::histogram::Snapshot;
use crate::scenario::Outcome;
use crate::units::{count, group, mib, ms, ms_from_us, ms_setting, per_sec, percent, secs};
use std::fmt::{Display, Write as _};

/// Width of the label column.
const LABEL: usize = 34;

/// The report being written; `verbose` adds the full tables.
struct Text {
    out: String,
    verbose: bool,
}

impl Text {
    fn line(&mut self, line: impl Display) {
        // Writing to a String cannot fail.
        let _ = writeln!(self.out, "{line}");
    }

    fn row(&mut self, label: &str, value: impl Display) {
        self.line(format_args!("  {label:<LABEL$}{value}"));
    }

    fn title(&mut self, title: impl Display) {
        self.line(format_args!("\n{title}"));
    }

    fn checks(&mut self, checks: &[Check]) {
        for check in checks {
            self.line(format_args!("  [{}] {}", if check.ok { "PASS" } else { "FAIL" }, check.what));
            if self.verbose || !check.ok {
                check.detail.lines().for_each(|line| self.line(format_args!("         {line}")));
            }
        }
    }
}

/// The report of one run.
pub fn render(config: &Config, warnings: &[String], o: &Outcome, verbose: bool) -> String {
    let mut w = Text { out: String::new(), verbose };
    w.line(format_args!("shardwheel-sim — connection simulator ({})", o.timer));
    if verbose {
        configuration(&mut w, config, o);
    } else {
        w.line(format_args!("  {}", o.describe));
        w.line(format_args!(
            "  {} connections, {} producers, {} activity; idle {} ({} quiet), request {} ({} lost); {}",
            group(config.connections as u64),
            config.producers,
            per_sec(config.rate as f64),
            ms_setting(config.idle_timeout),
            percent(config.idle_fraction),
            ms_setting(config.request_timeout),
            percent(config.lost_fraction),
            secs(config.duration),
        ));
    }
    warnings.iter().for_each(|warning| w.line(format_args!("  WARNING: {warning}")));
    setup(&mut w, config, o);
    steady(&mut w, config, o);
    lateness(&mut w, o);
    end(&mut w, o);
    let verdict = if figures::passed(o) { "PASS" } else { "FAIL" };
    let more = if verbose { "" } else { "; --verbose for every table" };
    w.title(format_args!(
        "Self-check: {verdict}  (total run time {}, setup and teardown included{more})",
        secs(o.total)
    ));
    w.checks(&figures::checks(o));
    w.out
}

fn configuration(w: &mut Text, config: &Config, o: &Outcome) {
    w.title("Configuration");
    w.row("timer", &o.describe);
    w.row("connections", group(config.connections as u64));
    let each = group(config.connections_of(0) as u64);
    let rate = per_sec(config.rate_per_producer());
    w.row("producers", format_args!("{} threads, {each} connections and {rate} events each", config.producers));
    w.row("tick", ms_setting(o.tick));
    w.row("idle timeout", ms_setting(config.idle_timeout));
    w.row("idle fraction", format_args!("{} ({} go quiet)", percent(config.idle_fraction), group(o.counts.quiet)));
    w.row("request timeout", ms_setting(config.request_timeout));
    w.row("lost fraction", percent(config.lost_fraction));
    let response = ms(config.response_delay());
    let in_flight = group(config.in_flight as u64);
    w.row("requests in flight", format_args!("{in_flight} per producer (response after ~{response})"));
    let period = secs(config.round_robin_period());
    w.row("activity rate", format_args!("{} (each active connection every {period})", per_sec(config.rate as f64)));
    w.row("duration", format_args!("{} steady state", secs(config.duration)));
    w.row("seed", config.seed);
}

fn setup(w: &mut Text, config: &Config, o: &Outcome) {
    w.title("Setup");
    let armed = group(o.counts.idle_armed);
    w.row(
        "idle timeouts armed",
        format_args!("{armed} in {} ({}, unpaced)", secs(o.setup), per_sec(figures::setup_rate(o))),
    );
    let timer_bytes = figures::timer_bytes_per_timeout(config, o);
    w.row(
        "timer memory per pending timeout",
        format_args!("{timer_bytes:.0} B (heap, the {} B handle included)", o.handle_bytes),
    );
    if !w.verbose {
        return;
    }
    if o.settle.as_millis() >= 1 {
        w.row("arms filed", format_args!("{} after the last arm returned (memory measured then)", ms(o.settle)));
    }
    let heap = figures::heap_per_connection(config, o);
    w.row(
        "heap per connection",
        format_args!(
            "{heap:.0} B (simulator {SIM_BYTES_PER_CONNECTION} B + handle slot {} B + task 32 B + the timer's own; \
             counting allocator)",
            o.handle_bytes
        ),
    );
    match (o.rss_before, o.rss_after, figures::rss_per_connection(config, o)) {
        (Some(before), Some(after), Some(per)) => w.row(
            "resident memory (VmRSS)",
            format_args!("{} before arming, {} after: {per:.0} B per connection", mib(before), mib(after)),
        ),
        _ => w.row("resident memory", "n/a (no /proc/self/status)"),
    }
}

fn steady(w: &mut Text, config: &Config, o: &Outcome) {
    let (c, verbose) = (&o.counts, w.verbose);
    let title = format!("Steady state ({})", secs(o.steady));
    w.title(format_args!("{title:<width$}{:>13}   {:>13}", "total", "per second", width = LABEL + 2));
    let mut line = |label: &str, total: u64, note: String| {
        let per = per_sec(figures::steady_rate(o, total));
        let text = format!("  {label:<LABEL$}{:>13}   {per:>13}   {note}", group(total));
        w.line(text.trim_end());
    };
    line("activity events", c.events, format!("target {}", per_sec(config.rate as f64)));
    line("arms, request timeouts", c.request_armed, String::new());
    line("resets (reset() = true)", c.resets_ok, String::new());
    line("cancels (cancel() = true)", c.cancels_ok, format!("{} cancel() = false", group(c.cancels_failed)));
    line("expiries, idle timeouts", o.fired_idle, format!("{} connections went quiet", group(c.quiet)));
    line("expiries, request timeouts", o.fired_request, format!("{} requests lost", group(c.lost)));
    if verbose || c.resets_failed > 0 {
        line("idle expiries of active conns", c.resets_failed, "reset() = false on an active conn (expected 0)".into());
    }
    if c.schedule_failed() > 0 {
        line("refused arms", c.schedule_failed(), "(expected 0)".into());
    }
    if let Some(cpu) = o.cpu {
        let per_op = figures::cpu_ns_per_op(o).unwrap_or(0.0);
        let (user, system, total) = (secs(cpu.user), secs(cpu.system), secs(cpu.total()));
        w.row(
            "CPU time (whole process)",
            format_args!("{user} user + {system} system = {total} ({per_op:.0} ns per timer op)"),
        );
    }
    if w.verbose {
        let per = figures::heap_per_connection_at_end(config, o);
        let at_end = format!(
            "{} live: {per:.0} B per connection (in-flight requests, cancelled entries kept)",
            mib(o.heap_at_end)
        );
        w.row("heap when activity stopped", at_end);
    }
}

fn lateness(w: &mut Text, o: &Outcome) {
    if w.verbose {
        let tick = ms_setting(o.tick);
        w.title("Expiry lateness (task ran − requested deadline; resolution 1 µs, buckets ≤ 3 % wide)");
        w.line(format_args!(
            "  A timeout fires at the first tick at or after its deadline: expect up to one tick ({tick}) plus"
        ));
        w.line("  the wake-up delay of the timer thread.");
    }
    let title = if w.verbose { "" } else { "Lateness" };
    w.line(format_args!(
        "{}{title:<12}{:>11}{:>14}{:>14}{:>14}{:>14}{:>14}",
        if w.verbose { "" } else { "\n" },
        "fired",
        "p50",
        "p99",
        "p99.9",
        "max",
        "mean"
    ));
    let mut row = |label: &str, s: &Snapshot| {
        let q = |q: f64| ms_from_us(s.quantile(q));
        let mean = ms_from_us(s.mean().map(|m| m.round() as u64));
        let (n, max) = (group(s.count()), ms_from_us(s.max()));
        w.line(format_args!("  {label:<10}{n:>11}{:>14}{:>14}{:>14}{max:>14}{mean:>14}", q(0.5), q(0.99), q(0.999)));
    };
    row("idle", &o.idle_lateness);
    row("request", &o.request_lateness);
    row("sleep", &o.sleep_lateness);
    if w.verbose {
        let tick = ms_setting(o.tick);
        w.line(format_args!(
            "  (sleep: how late a plain thread::sleep({tick}) woke up meanwhile, on an unpinned thread, counting"
        ));
        w.line("  the wake-ups a stall made it miss as a timer thread would: the machine's own scheduling noise)");
    }
    if let Some(met) = figures::bar_met(o) {
        let (bar, worst) = (ms(figures::lateness_bar(o)), ms_from_us(figures::worst_p99_us(o)));
        let sleep = ms_from_us(o.sleep_lateness.quantile(0.99));
        let verdict = if met { "met" } else { "NOT met" };
        w.row(
            "design bar p99 ≤ 1 tick + 0.5 ms",
            format_args!("{verdict} (bar {bar}; worst p99 {worst}; sleep p99 {sleep})"),
        );
    }
    if w.verbose {
        let earliest = ms_from_us(o.worst_early_ns / 1_000);
        let early = if o.early == 0 { String::new() } else { format!("; the earliest {earliest} before its deadline") };
        w.row("early firings", format_args!("{} (must be 0{early})", group(o.early)));
    }
}

fn end(w: &mut Text, o: &Outcome) {
    let how =
        if o.unfired_listed.is_some() { "handed back by stop()" } else { "dropped by the timer or with the handles" };
    let (unfired, idle, request) = (o.unfired.idle + o.unfired.request, o.unfired.idle, o.unfired.request);
    let (pending, stop) = (count(o.pending_at_end), secs(o.stop_time));
    let end = format!(
        "{pending} pending; stop() took {stop}: {} unfired (idle {} + request {}), {how}",
        group(unfired),
        group(idle),
        group(request)
    );
    w.title(format_args!("{:<width$}{end}", "End of run", width = LABEL + 2));
    let (Some(s), true) = (&o.stats, w.verbose) else { return };
    w.title("Service stats (service.stats() after stop)");
    let rows = [("scheduled", s.scheduled), ("expired", s.expired), ("cancelled", s.cancelled)];
    let more = [("unfired (returned by stop)", s.unfired), ("pending", s.pending), ("rejected", s.rejected)];
    rows.into_iter().chain(more).chain([("panicked", s.panicked)]).for_each(|(label, n)| w.row(label, group(n)));
    let run = o.setup + o.steady + o.stop_time;
    let rate = per_sec(s.wakeups as f64 / run.as_secs_f64().max(1e-9));
    let over = format!("over {} of setup, steady state and stop, {} shards", secs(run), o.lanes);
    w.row("wakeups", format_args!("{} ({rate} {over})", group(s.wakeups)));
}

/// A metric's value, in its unit.
fn value(metric: &Metric, v: Option<f64>) -> String {
    match (v, metric.unit) {
        (None, _) => "n/a".to_owned(),
        (Some(v), "/s") => per_sec(v),
        (Some(v), "s") => format!("{v:.2} s"),
        (Some(v), "µs") => ms_from_us(v.round() as u64),
        (Some(v), unit) => format!("{} {unit}", group(v.round() as u64)),
    }
}

/// `5.87×`, `∞`, `—`.
pub fn ratio(r: Option<f64>) -> String {
    match r {
        None => "—".to_owned(),
        Some(r) if r.is_infinite() => "∞".to_owned(),
        Some(r) if r >= 100.0 => format!("{r:.0}×"),
        Some(r) => format!("{r:.2}×"),
    }
}

/// The ratio table: every run's values, then shardwheel's advantage over each peer (`runs[0]`
/// is shardwheel's); the headline metrics only unless `verbose`.
pub fn render_compare(config: &Config, runs: &[Outcome], verbose: bool) -> String {
    let mut w = Text { out: String::new(), verbose };
    let title = "Comparison: the same scenario on every timer";
    w.line(format_args!("\n{title}\n{}", "═".repeat(title.chars().count())));
    let name = runs.iter().map(|o| o.timer.chars().count() + 2).max().unwrap_or(0);
    runs.iter().for_each(|o| w.line(format_args!("  {:<name$}{}", o.timer, o.describe)));
    // Wide enough for "vs <the longest name>" and two spaces.
    let col = runs.iter().map(|o| o.timer.chars().count() + 5).max().unwrap_or(0).max(17);
    let metrics: Vec<&Metric> = METRICS.iter().filter(|m| verbose || m.headline).collect();
    let table = |w: &mut Text, first: &str, names: &[String], cell: &dyn Fn(&Metric, usize) -> String| {
        let header: String = names.iter().map(|n| format!("{n:>col$}")).collect();
        w.line(format_args!("\n  {first:<LABEL$}{header}"));
        for m in &metrics {
            let cells: String = (0..names.len()).map(|i| format!("{:>col$}", cell(m, i))).collect();
            w.line(format_args!("  {:<LABEL$}{cells}", m.label));
        }
    };
    let names: Vec<String> = runs.iter().map(|o| o.timer.to_owned()).collect();
    table(&mut w, "values", &names, &|m, i| value(m, (m.value)(config, &runs[i])));
    let verdicts: String =
        runs.iter().map(|o| format!("{:>col$}", if figures::passed(o) { "PASS" } else { "FAIL" })).collect();
    w.line(format_args!("  {:<LABEL$}{verdicts}", "self-check"));
    if runs.len() > 1 {
        let peers: Vec<String> = runs[1..].iter().map(|o| format!("vs {}", o.timer)).collect();
        table(&mut w, "shardwheel's advantage", &peers, &|m, i| {
            ratio(figures::advantage(m, (m.value)(config, &runs[0]), (m.value)(config, &runs[i + 1])))
        });
        w.line("  (> 1× means shardwheel does better: peer ÷ shardwheel for costs, shardwheel ÷ peer for rates.");
        w.line("   Activity is paced at the same rate for every timer; the work each did for it shows in CPU time,");
        w.line("   the whole process's (getrusage): the simulator's own share is the same in every run.)");
    }
    for o in runs.iter().skip(1).filter(|o| !figures::passed(o)) {
        w.line(format_args!("\n  Self-check of {}:", o.timer));
        w.checks(&figures::checks(o));
    }
    w.out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::histogram::Histogram;
    use crate::measure::Usage;
    use crate::tally::{Counts, Drops};
    use std::time::Duration;

    /// A consistent outcome: 1,000 connections, 100 quiet; made up, but the numbers add up.
    pub(crate) fn outcome(timer: &'static str, scale: u64) -> Outcome {
        let (idle, request) = (Histogram::new(), Histogram::new());
        (0..100).for_each(|v| idle.record(v * 10 * scale));
        (0..10).for_each(|v| request.record(v * 50 * scale));
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
            idle_lateness: idle.snapshot(),
            request_lateness: request.snapshot(),
            pending_at_end: Some(940),
            unfired: Drops { idle: 900, request: 40 },
            unfired_listed: Some(940),
            unrun_before_stop: Drops { idle: 0, request: 29_950 },
            stop_time: Duration::from_millis(3),
            drops: Drops { idle: 1_000, request: 30_000 },
            cpu: Some(Usage { user: Duration::from_millis(300 * scale), system: Duration::from_millis(50 * scale) }),
            total: Duration::from_millis(1_020),
            ..Outcome::default()
        }
    }

    pub(crate) fn config() -> Config {
        Config { connections: 1_000, producers: 2, shards: 2, ..Config::default() }
    }

    #[test]
    fn the_default_report_fits_a_screen_and_verbose_has_every_table() {
        let o = outcome("shardwheel", 1);
        let short = render(&config(), &[], &o, false);
        assert!(short.lines().count() <= 30, "{} lines:\n{short}", short.lines().count());
        assert!(
            short.contains("[PASS] every timeout ended exactly once") && short.contains("Self-check: PASS"),
            "{short}"
        );
        let long = render(&config(), &[], &o, true);
        for section in ["Configuration", "resident memory", "scheduled 31,000 = fired 110"] {
            assert!(long.contains(section) && !short.contains(section), "{section}:\n{long}");
        }
        let mut early = outcome("shardwheel", 1);
        early.early = 1;
        assert!(render(&config(), &[], &early, false).contains("[FAIL] no task fired early\n         1 early"));
    }

    #[test]
    fn compare_table_has_the_metrics_and_peers() {
        let runs = [outcome("shardwheel", 1), outcome("netty-wheel", 3)];
        let short = render_compare(&config(), &runs, false);
        let long = render_compare(&config(), &runs, true);
        for m in METRICS {
            assert!(long.contains(m.label), "{}: {long}", m.label);
            assert_eq!(short.contains(m.label), m.headline, "{}", m.label);
        }
        assert!(short.contains("vs netty-wheel") && short.contains("3.00×"), "{short}");
        assert_eq!(ratio(Some(5.871)), "5.87×");
        assert_eq!(ratio(Some(f64::INFINITY)), "∞");
        assert_eq!(ratio(None), "—");
    }
}
