//! The reports of the runs (`runs[0]` shardwheel's, the peers after it with `--compare`):
//! the one-screen text report, and every figure of [`figures::of`], which `--json` prints as
//! is and `--verbose` renders as text, so that the two cannot disagree. The ratio table
//! (`--compare`) reads its rows from the same figures.
//!
//! JSON shape (durations in seconds unless the key says `_ms`, `_us` or `_ns`; lateness in
//! µs; a figure that could not be measured is `null`):
//!
//! ```text
//! { "tool", "version", "config": {…}, "warnings": […],
//!   "runs": [ { "timer", "description", "lanes", "setup", "steady", "cpu", "lateness",
//!               "memory", "end", "stats", "self_check", "total_seconds" }, … ],
//!   "compare": null | { "baseline": "shardwheel", "metrics": [ { "key", "label", "unit",
//!               "higher_is_better", "values": { timer: x }, "advantage": { peer: r } } ] },
//!   "passed" }
//! ```

use crate::args::Config;
use crate::figures::Outcome;
use crate::figures::{self, Check, METRICS, Metric, QUANTILES};
use crate::tally::TASK_BYTES;
use crate::units::{group, ms_from_us, ms_setting, per_sec, percent, secs};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

/// Width of the label column.
const LABEL: usize = 34;

/// What the self-check's PASS or FAIL is, and what the design bar's "met" or "NOT met" is
/// not: a reader must not take a bar missed on a loaded machine for a failed run.
const VERDICT: &str = "— the run's pass/fail verdict (correctness; the exit status follows it)";
const PERFORMANCE: &str =
    "(a performance figure: it depends on the machine and its load; not part of the verdict below)";

/// Writes one line to a [`Text`] (a `String`: writing cannot fail).
macro_rules! ln {
    ($w:expr, $($fmt:tt)*) => {
        let _ = writeln!($w.out, $($fmt)*);
    };
}

/// The text being written; `verbose` adds every figure and the checks' sums.
struct Text {
    out: String,
    verbose: bool,
}

impl Text {
    fn row(&mut self, label: &str, value: impl std::fmt::Display) {
        ln!(self, "  {label:<LABEL$}{value}");
    }

    fn checks(&mut self, checks: &[Check]) {
        for check in checks {
            ln!(self, "  [{}] {}", if check.ok { "PASS" } else { "FAIL" }, check.what);
            if self.verbose || !check.ok {
                check.detail.lines().for_each(|line| _ = writeln!(self.out, "         {line}"));
            }
        }
    }
}

/// The text report of one run.
pub fn text(c: &Config, warnings: &[String], o: &Outcome, verbose: bool) -> String {
    let w = &mut Text { out: String::new(), verbose };
    let (idle, request) = (ms_setting(c.idle_timeout), ms_setting(c.request_timeout));
    let (quiet, lost, rate) = (percent(c.idle_fraction), percent(c.lost_fraction), per_sec(c.rate as f64));
    let (n, p, run) = (group(o.connections), c.producers, secs(c.duration));
    let timeouts = format!("idle {idle} ({quiet} quiet), request {request} ({lost} lost)");
    ln!(w, "shardwheel-sim — connection simulator ({})\n  {}", o.timer, o.describe);
    ln!(w, "  {n} connections, {p} producers, {rate} activity; {timeouts}; {run}");
    warnings.iter().for_each(|warning| _ = writeln!(w.out, "  WARNING: {warning}"));
    setup_and_steady(w, c, o);
    lateness(w, o);
    if verbose {
        ln!(w, "\nEvery figure (as --json gives them; seconds unless the key says otherwise)");
        figure(w, "config", &config_json(c), 2);
        let run = figures::of(o);
        for key in ["setup", "steady", "cpu", "lateness", "memory", "end", "stats"] {
            figure(w, key, &run[key], 2);
        }
    }
    let (verdict, total) = (if figures::passed(o) { "PASS" } else { "FAIL" }, secs(o.total));
    let more = if verbose { "" } else { "; --verbose for every table" };
    ln!(w, "\nSelf-check: {verdict}  {VERDICT}");
    w.checks(&figures::checks(o));
    ln!(w, "  (total run time {total}, setup and teardown included{more})");
    std::mem::take(&mut w.out)
}

/// The settings, with the two figures that follow from them.
fn config_json(c: &Config) -> Value {
    json!({
        "connections": c.connections, "producers": c.producers, "shards": c.shards,
        "tick_us": c.tick.as_micros() as u64, "pin_threads": c.pin_threads,
        "idle_timeout_ms": c.idle_timeout.as_millis() as u64, "idle_fraction": c.idle_fraction,
        "request_timeout_ms": c.request_timeout.as_millis() as u64, "lost_fraction": c.lost_fraction,
        "in_flight": c.in_flight, "rate_per_sec": c.rate, "duration_secs": c.duration.as_secs_f64(), "seed": c.seed,
        "response_delay_ms": c.response_delay().as_secs_f64() * 1e3,
        "round_robin_period_secs": c.round_robin_period().as_secs_f64(),
    })
}

/// `--verbose`: a figure, or a section of them; a section of numbers only on one line.
fn figure(w: &mut Text, key: &str, v: &Value, indent: usize) {
    let width = LABEL + 4 - indent;
    match v.as_object() {
        Some(map) if indent > 2 && map.values().all(|v| !v.is_object()) => {
            let all: Vec<_> = map.iter().map(|(k, v)| format!("{k} {}", scalar(v))).collect();
            ln!(w, "{:indent$}{key:<width$}{}", "", all.join(", "));
        }
        Some(map) => {
            ln!(w, "{:indent$}{key}", "");
            map.iter().for_each(|(k, v)| figure(w, k, v, indent + 2));
        }
        None => {
            ln!(w, "{:indent$}{key:<width$}{}", "", scalar(v));
        }
    }
}

fn scalar(v: &Value) -> String {
    match (v, v.as_u64(), v.as_f64()) {
        (Value::Null, ..) => "n/a".to_owned(),
        (_, Some(n), _) => group(n),
        (_, _, Some(f)) if f.abs() >= 1_000.0 => group(f.round() as u64),
        (_, _, Some(f)) => format!("{f:.3}"),
        (v, ..) => v.as_str().map_or_else(|| v.to_string(), str::to_owned),
    }
}

fn setup_and_steady(w: &mut Text, config: &Config, o: &Outcome) {
    let (c, armed, took, rate) = (&o.counts, group(o.counts.idle_armed), secs(o.setup), per_sec(o.setup_rate()));
    let (bytes, handle, task) = (o.timer_bytes(), o.handle_bytes, TASK_BYTES);
    let own = bytes - (handle + task) as f64;
    let heap = format!("{bytes:.0} B = {handle} B handle + {task} B task + {own:.0} B the timer's own");
    ln!(w, "\nSetup");
    w.row("idle timeouts armed", format_args!("{armed} in {took} ({rate}, unpaced)"));
    w.row("heap per pending timeout", heap);
    ln!(w, "  (the README's ~50 B: `cargo bench --bench memory`, an 8 B closure, no handle; see docs/performance.md)");
    let title = format!("Steady state ({})", secs(o.steady));
    ln!(w, "\n{title:<width$}{:>13}   {:>13}", "total", "per second", width = LABEL + 2);
    let mut line = |label: &str, total: u64, note: String| {
        let (total, per) = (group(total), per_sec(o.steady_rate(total)));
        ln!(w, "{}", format!("  {label:<LABEL$}{total:>13}   {per:>13}   {note}").trim_end());
    };
    line("activity events", c.events, format!("target {}", per_sec(config.rate as f64)));
    line("arms, request timeouts", c.request_armed, String::new());
    line("resets (reset() = true)", c.resets_ok, String::new());
    line("cancels (cancel() = true)", c.cancels_ok, format!("{} cancel() = false", group(c.cancels_failed)));
    line("expiries, idle timeouts", o.fired[0], format!("{} connections went quiet", group(c.quiet)));
    line("expiries, request timeouts", o.fired[1], format!("{} requests lost", group(c.lost)));
    if c.resets_failed > 0 {
        line("idle expiries of active conns", c.resets_failed, "reset() = false on an active conn (expected 0)".into());
    }
    if c.schedule_failed() > 0 {
        line("refused arms", c.schedule_failed(), "(expected 0)".into());
    }
    if let (Some(cpu), Some(per_op)) = (o.cpu, o.cpu_ns_per_op()) {
        let (user, system, total) = (secs(cpu.user), secs(cpu.system), secs(cpu.total()));
        let cpu = format!("{user} user + {system} system = {total} ({per_op:.0} ns per timer op)");
        w.row("CPU time (whole process)", cpu);
    }
}

/// The lateness table, the design bar, and how the run ended.
fn lateness(w: &mut Text, o: &Outcome) {
    let header: String = QUANTILES.iter().map(|(_, column, _)| format!("{column:>14}")).collect();
    ln!(w, "\nLateness    {:>11}{header}{:>14}{:>14}", "fired", "max", "mean");
    for (label, s) in [("idle", &o.lateness[0]), ("request", &o.lateness[1]), ("sleep", &o.sleep_lateness)] {
        let quantiles: String = QUANTILES.iter().map(|q| format!("{:>14}", ms_from_us(s.quantile(q.2)))).collect();
        let (n, max, mean) = (group(s.count()), ms_from_us(s.max()), ms_from_us(s.mean().map(|m| m.round() as u64)));
        ln!(w, "  {label:<10}{n:>11}{quantiles}{max:>14}{mean:>14}");
    }
    if w.verbose {
        let tick = ms_setting(o.tick);
        ln!(w, "  (task ran − requested deadline; expect up to a tick, {tick}, plus the timer thread's wake-up;");
        ln!(w, "  sleep: how late a plain sleep of {tick} woke up meanwhile: the machine's own noise)");
    }
    if let Some(met) = o.bar_met() {
        let (bar, worst) = (ms_setting(o.lateness_bar()), ms_from_us(o.worst_p99_us()));
        let (verdict, sleep) = (if met { "met" } else { "NOT met" }, ms_from_us(o.sleep_lateness.quantile(0.99)));
        let bar = format!("{verdict} (bar {bar}; worst p99 {worst}; sleep p99 {sleep})");
        w.row("design bar p99 ≤ 1 tick + 0.5 ms", bar);
        ln!(w, "  {PERFORMANCE}");
    }
    let how =
        if o.unfired_listed.is_some() { "handed back by stop()" } else { "dropped by the timer or with the handles" };
    let ([idle, request], pending, stop) = (o.unfired, group(o.pending_at_end as u64), secs(o.stop_time));
    let (unfired, idle, request) = (group(idle + request), group(idle), group(request));
    let end =
        format!("{pending} pending; stop() took {stop}: {unfired} unfired (idle {idle} + request {request}), {how}");
    ln!(w, "\n{:<width$}{end}", "End of run", width = LABEL + 2);
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
fn ratio(r: Option<f64>) -> String {
    match r {
        None => "—".to_owned(),
        Some(r) if r.is_infinite() => "∞".to_owned(),
        Some(r) if r >= 100.0 => format!("{r:.0}×"),
        Some(r) => format!("{r:.2}×"),
    }
}

/// The ratio table: every run's values, then shardwheel's advantage over each peer (the
/// headline metrics; all with `verbose`).
pub fn compare_text(runs: &[Outcome], verbose: bool) -> String {
    let (w, title) = (&mut Text { out: String::new(), verbose }, "Comparison: the same scenario on every timer");
    let figures: Vec<Value> = runs.iter().map(figures::of).collect();
    ln!(w, "\n{title}\n{}", "═".repeat(title.chars().count()));
    let name = runs.iter().map(|o| o.timer.chars().count() + 2).max().unwrap_or(0);
    runs.iter().for_each(|o| _ = writeln!(w.out, "  {:<name$}{}", o.timer, o.describe));
    // Wide enough for "vs <the longest name>" and two spaces.
    let col = runs.iter().map(|o| o.timer.chars().count() + 5).max().unwrap_or(0).max(17);
    let mut row = |first: &str, cells: &mut dyn Iterator<Item = String>| {
        let cells: String = cells.map(|c| format!("{c:>col$}")).collect();
        ln!(w, "{}", format!("  {first:<LABEL$}{cells}").trim_end());
    };
    let metrics = || METRICS.iter().filter(|m| verbose || m.headline);
    row("", &mut std::iter::empty());
    row("values", &mut runs.iter().map(|o| o.timer.to_owned()));
    metrics().for_each(|m| row(m.label, &mut figures.iter().map(|f| value(m, m.value(f)))));
    row("self-check", &mut runs.iter().map(|o| (if figures::passed(o) { "PASS" } else { "FAIL" }).to_owned()));
    if runs.len() > 1 {
        row("", &mut std::iter::empty());
        row("shardwheel's advantage", &mut runs[1..].iter().map(|o| format!("vs {}", o.timer)));
        for m in metrics() {
            row(m.label, &mut figures[1..].iter().map(|f| ratio(m.advantage(m.value(&figures[0]), m.value(f)))));
        }
        ln!(w, "  (> 1× means shardwheel does better: peer ÷ shardwheel for costs, shardwheel ÷ peer for rates.");
        ln!(w, "   Activity is paced at the same rate for every timer; the work each did for it shows in CPU time,");
        ln!(w, "   the whole process's (getrusage): the simulator's own share is the same in every run.)");
    }
    for o in runs.iter().skip(1).filter(|o| !figures::passed(o)) {
        ln!(w, "\n  Self-check of {}:", o.timer);
        w.checks(&figures::checks(o));
    }
    std::mem::take(&mut w.out)
}

/// The JSON report, pretty-printed; `compare` adds the ratio rows: every metric's value per
/// timer, and shardwheel's advantage per peer (`null` where undefined or infinite).
pub fn json(config: &Config, warnings: &[String], runs: &[Outcome], compare: bool) -> String {
    let figures: Vec<Value> = runs.iter().map(figures::of).collect();
    let by_timer = |fs: &[Value], x: &dyn Fn(&Value) -> Option<f64>| -> Map<_, _> {
        fs.iter()
            .map(|f| (f["timer"].as_str().unwrap_or_default().to_owned(), json!(x(f).filter(|v| v.is_finite()))))
            .collect()
    };
    let metric = |m: &Metric| {
        let ours = m.value(&figures[0]);
        json!({
            "key": m.key(), "label": m.label, "unit": m.unit, "higher_is_better": m.unit == "/s",
            "values": by_timer(&figures, &|f| m.value(f)),
            "advantage": by_timer(&figures[1..], &|f| m.advantage(ours, m.value(f))),
        })
    };
    let compare = compare
        .then(|| json!({ "baseline": runs[0].timer, "metrics": METRICS.iter().map(metric).collect::<Vec<_>>() }));
    let report = json!({
        "tool": "shardwheel-sim", "version": env!("CARGO_PKG_VERSION"), "config": config_json(config),
        "warnings": warnings, "runs": figures, "compare": compare,
        "passed": runs.iter().all(figures::passed),
    });
    serde_json::to_string_pretty(&report).expect("a JSON value serializes")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::figures::tests::outcome;

    pub(crate) fn config() -> Config {
        crate::args::tests::parse_str("--connections 1000 --producers 2 --shards 2").unwrap().0
    }

    #[test]
    fn text_reports_short_verbose_and_compared() {
        let o = outcome("shardwheel", 1);
        let (short, long) = (text(&config(), &[], &o, false), text(&config(), &[], &o, true));
        // One screen: 32 lines, of which 2 say what the verdict is and what the design bar is,
        // and 1 how the memory figure relates to the README's.
        assert!(short.lines().count() <= 32, "{} lines:\n{short}", short.lines().count());
        assert!(short.contains("[PASS] every timeout ended exactly once") && short.contains("Self-check: PASS"));
        // The heap figure in its parts, and how it relates to the README's (issue 24, item 9).
        let memory = "68 B = 16 B handle + 32 B task + 20 B the timer's own\n  (the README's ~50 B: `cargo bench";
        assert!(short.contains(memory), "{short}");
        let sections =
            ["Every figure", "rss_bytes_per_connection  ", "response_delay_ms", "scheduled 31,000 = fired 110"];
        for section in sections {
            assert!(long.contains(section) && !short.contains(section), "{section}:\n{long}");
        }
        let early = Outcome { early: 1, ..outcome("shardwheel", 1) };
        assert!(text(&config(), &[], &early, false).contains("[FAIL] no task fired early\n         1 early"));
        let runs = [outcome("shardwheel", 1), outcome("netty-wheel", 3)];
        let (short, long) = (compare_text(&runs, false), compare_text(&runs, true));
        for m in METRICS {
            assert!(long.contains(m.label) && short.contains(m.label) == m.headline, "{}: {long}", m.label);
        }
        assert!(short.contains("vs netty-wheel") && short.contains("3.00×"), "{short}");
        assert_eq!([ratio(Some(5.871)), ratio(Some(f64::INFINITY)), ratio(None)], ["5.87×", "∞", "—"]);
    }

    /// A design bar missed, with the self-check passed: the report says which line is the
    /// verdict, and that the bar is a performance figure that fails nothing.
    #[test]
    fn the_verdict_and_the_design_bar_are_told_apart() {
        let o = outcome("shardwheel", 10);
        assert_eq!((o.bar_met(), figures::passed(&o)), (Some(false), true));
        let short = text(&config(), &[], &o, false);
        let lines: Vec<_> = short.lines().collect();
        let bar = lines.iter().position(|l| l.contains("design bar") && l.contains("NOT met")).expect(&short);
        assert!(lines[bar + 1].contains("a performance figure: it depends on the machine"), "{short}");
        assert!(lines[bar + 1].contains("not part of the verdict"), "{short}");
        assert!(short.contains("Self-check: PASS  — the run's pass/fail verdict (correctness; the exit status"));
    }

    #[test]
    fn json_shape_compare_and_a_failed_check() {
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>().join(" ");
        let bad = Outcome { early: 2, ..outcome("binary-heap", 2) };
        let runs = [outcome("shardwheel", 1), bad];
        let v: Value = serde_json::from_str(&json(&config(), &["careful".to_owned()], &runs[..1], false)).unwrap();
        assert_eq!(keys(&v), "compare config passed runs tool version warnings");
        let top = (&v["tool"], &v["passed"], &v["warnings"][0]);
        assert_eq!(top, (&json!("shardwheel-sim"), &json!(true), &json!("careful")));
        assert!(v["compare"].is_null() && v["config"]["connections"] == 1_000 && v["config"]["tick_us"] == 1_000);
        let run = &v["runs"][0];
        let expected = "cpu description end lanes lateness memory self_check setup stats steady timer total_seconds";
        assert_eq!((keys(run).as_str(), &run["steady"]["events"]), (expected, &json!(30_000)));
        for kind in ["idle", "request", "all", "sleep_baseline"] {
            assert_eq!(keys(&run["lateness"][kind]), "count max_us mean_us p50_us p999_us p99_us");
        }
        assert_eq!((&run["lateness"]["all"]["count"], &run["lateness"]["bar_us"]), (&json!(110), &json!(1_500)));
        assert_eq!(run["memory"]["timer_bytes_per_timeout"], 68.0);
        assert!(run["stats"].is_null() && run["lateness"]["sleep_baseline"]["p99_us"].is_null());
        assert_eq!(run["self_check"]["checks"].as_array().unwrap().len(), 3);

        let v: Value = serde_json::from_str(&json(&config(), &[], &runs, true)).unwrap();
        let metrics = v["compare"]["metrics"].as_array().unwrap();
        assert_eq!((&v["compare"]["baseline"], metrics.len()), (&json!("shardwheel"), METRICS.len()));
        let cpu = metrics.iter().find(|m| m["key"] == "cpu_total_seconds").unwrap();
        assert_eq!(cpu["higher_is_better"], false);
        assert!((cpu["values"]["binary-heap"].as_f64().unwrap() - 0.7).abs() < 1e-9);
        assert!((cpu["advantage"]["binary-heap"].as_f64().unwrap() - 2.0).abs() < 1e-9);
        assert!(cpu["advantage"].get("shardwheel").is_none());
        assert_eq!((&v["passed"], &v["runs"][1]["self_check"]["checks"][2]["ok"]), (&json!(false), &json!(false)));
    }
}
