//! Formatting: the progress lines (stderr), the final report and the self-check (stdout).

use crate::args::{Config, group};
use crate::histogram::Snapshot;
use crate::scenario::Outcome;
use std::fmt::Write as _;
use std::time::Duration;

/// Width of the label column.
const LABEL: usize = 34;

/// The process's resident set size, from `/proc/self/status` (Linux only).
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A rate, rounded, with thousands separators and a unit.
fn per_sec(rate: f64) -> String {
    format!("{}/s", group(rate.max(0.0).round() as u64))
}

/// Microseconds as milliseconds, to the microsecond.
fn ms_from_us(us: u64) -> String {
    format!("{}.{:03} ms", group(us / 1_000), us % 1_000)
}

fn ms(d: Duration) -> String {
    ms_from_us(d.as_micros() as u64)
}

/// A setting in milliseconds: whole ones without decimals.
fn ms_setting(d: Duration) -> String {
    let us = d.as_micros() as u64;
    if us % 1_000 == 0 {
        format!("{} ms", group(us / 1_000))
    } else {
        ms_from_us(us)
    }
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

/// The progress line printed once a second.
pub fn progress_line(
    elapsed: Duration,
    arms: f64,
    resets: f64,
    cancels: f64,
    expiries: f64,
    max_late_us: u64,
    pending: usize,
) -> String {
    format!(
        "[{:>5.1} s]  arms {:>9}  resets {:>9}  cancels {:>9}  expiries {:>8} (max late {:>10})  pending {:>9}",
        elapsed.as_secs_f64(),
        per_sec(arms),
        per_sec(resets),
        per_sec(cancels),
        per_sec(expiries),
        ms_from_us(max_late_us),
        group(pending as u64),
    )
}

/// One line of the self-check.
struct Check {
    ok: bool,
    what: &'static str,
    detail: String,
}

/// Builds the report; returns it with whether the self-check passed.
pub fn render(config: &Config, warnings: &[String], o: &Outcome) -> (String, bool) {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let w = &mut out;
    let row = |w: &mut String, label: &str, value: String| {
        let _ = writeln!(w, "  {label:<LABEL$}{value}");
    };
    let title = "shardwheel-sim — connection simulator";
    let _ = writeln!(w, "{title}\n{}\n", "═".repeat(title.chars().count()));

    // ── Configuration ──
    let _ = writeln!(w, "Configuration");
    let c = &o.counts;
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
    row(
        w,
        "shards",
        format!(
            "{} ({} thread each)",
            o.shard_count,
            if config.pin_threads {
                "one pinned"
            } else {
                "one unpinned"
            }
        ),
    );
    row(w, "tick", ms_setting(o.tick));
    row(w, "idle timeout", ms_setting(config.idle_timeout));
    row(
        w,
        "idle fraction",
        format!(
            "{} ({} connections go quiet)",
            percent(config.idle_fraction),
            group(c.quiet)
        ),
    );
    row(w, "request timeout", ms_setting(config.request_timeout));
    row(w, "lost fraction", percent(config.lost_fraction));
    row(
        w,
        "requests in flight",
        format!(
            "{} per producer (response after ~{})",
            group(config.in_flight as u64),
            ms(config.response_delay())
        ),
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
            "{} in {} ({})",
            group(c.idle_armed),
            secs(o.setup),
            per_sec(c.idle_armed as f64 / o.setup.as_secs_f64().max(1e-9))
        ),
    );
    match (o.rss_before, o.rss_after) {
        (Some(before), Some(after)) => {
            row(w, "memory before arming (VmRSS)", mib(before));
            row(w, "memory after arming (VmRSS)", mib(after));
            let per_conn = after.saturating_sub(before) as f64 / config.connections as f64;
            row(
                w,
                "memory per connection",
                format!(
                    "{per_conn:.0} B (connection 32 B + quiet time 4 B + idle task + timer entry + wheel + mailbox)"
                ),
            );
        }
        _ => row(w, "memory", "n/a (no /proc/self/status)".into()),
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
    line(
        w,
        "activity events",
        c.events,
        rate(c.events),
        format!("target {}", per_sec(config.rate as f64)),
    );
    line(
        w,
        "arms, idle timeouts",
        c.idle_armed,
        "—".into(),
        "all at setup (see above)".into(),
    );
    line(
        w,
        "arms, request timeouts",
        c.request_armed,
        rate(c.request_armed),
        String::new(),
    );
    line(
        w,
        "resets (reset() = true)",
        c.resets_ok,
        rate(c.resets_ok),
        String::new(),
    );
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
    if c.schedule_failed > 0 {
        line(
            w,
            "schedule errors",
            c.schedule_failed,
            rate(c.schedule_failed),
            "(expected 0)".into(),
        );
    }

    // ── Lateness ──
    let _ = writeln!(
        w,
        "\nExpiry lateness (task ran − requested deadline; resolution 1 µs, buckets ≤ 3 % wide)"
    );
    let _ = writeln!(
        w,
        "  A timeout fires at the first tick at or after its deadline: expect up to one tick ({}) plus the\n  \
         wake-up delay of the shard thread.",
        ms_setting(o.tick)
    );
    let _ = writeln!(
        w,
        "  {:<10}{:>11}{:>14}{:>14}{:>14}{:>14}{:>14}",
        "", "fired", "p50", "p99", "p99.9", "max", "mean"
    );
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
    let bar = o.tick + Duration::from_micros(500);
    let p99s: Vec<u64> = [&o.idle_lateness, &o.request_lateness]
        .iter()
        .filter_map(|s| s.quantile(0.99))
        .collect();
    if !p99s.is_empty() {
        let worst = p99s.iter().copied().max().unwrap_or(0);
        row(
            w,
            "design bar p99 ≤ 1 tick + 0.5 ms",
            format!(
                "{} (bar {}; worst p99 {}; baseline p99 {})",
                if Duration::from_micros(worst) <= bar {
                    "met"
                } else {
                    "NOT met"
                },
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
    row(w, "pending at end (pending())", group(o.pending_at_end as u64));
    row(w, "stop() took", secs(o.stop_time));
    row(
        w,
        "returned by stop()",
        format!(
            "{} (idle {} + request {})",
            group(o.unfired_len as u64),
            group(o.unfired.idle),
            group(o.unfired.request)
        ),
    );

    // ── Service stats ──
    let s = &o.stats;
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
            o.shard_count
        ),
    );

    // ── Self-check ──
    let fired = o.fired_idle + o.fired_request;
    let checks = [
        Check {
            ok: c.scheduled() == fired + c.cancels_ok + o.unfired_len as u64
                && c.idle_armed == o.fired_idle + o.unfired.idle
                && c.request_armed == o.fired_request + c.cancels_ok + o.unfired.request,
            what: "every timeout ended exactly once",
            detail: format!(
                "scheduled {} = fired {} + cancelled {} + returned by stop {}\n\
                 idle {} = {} + 0 + {}; request {} = {} + {} + {}",
                group(c.scheduled()),
                group(fired),
                group(c.cancels_ok),
                group(o.unfired_len as u64),
                group(c.idle_armed),
                group(o.fired_idle),
                group(o.unfired.idle),
                group(c.request_armed),
                group(o.fired_request),
                group(c.cancels_ok),
                group(o.unfired.request),
            ),
        },
        Check {
            ok: o.drops.idle == c.created_idle
                && o.drops.request == c.created_request
                && o.unfired.idle + o.unfired.request == o.unfired_len as u64,
            what: "every task dropped exactly once",
            detail: format!(
                "created {} = dropped {}: idle {} = {}; request {} = {}\n\
                 tasks returned by stop() {} = {} dropped",
                group(c.created_idle + c.created_request),
                group(o.drops.idle + o.drops.request),
                group(c.created_idle),
                group(o.drops.idle),
                group(c.created_request),
                group(o.drops.request),
                group(o.unfired_len as u64),
                group(o.unfired.idle + o.unfired.request),
            ),
        },
        Check {
            ok: o.early == 0,
            what: "no task fired early",
            detail: format!("{} early", group(o.early)),
        },
        Check {
            ok: s.scheduled == c.scheduled()
                && s.expired == fired
                && s.cancelled == c.cancels_ok
                && s.unfired == o.unfired_len as u64
                && s.pending == 0
                && s.rejected == 0
                && s.panicked == 0,
            what: "simulator agrees with service.stats()",
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
                group(o.unfired_len as u64),
                group(s.pending),
                group(s.rejected),
                group(s.panicked),
            ),
        },
    ];
    let _ = writeln!(w, "\nSelf-check");
    for check in &checks {
        let _ = writeln!(w, "  [{}] {}", if check.ok { "PASS" } else { "FAIL" }, check.what);
        for line in check.detail.lines() {
            let _ = writeln!(w, "         {line}");
        }
    }
    let passed = checks.iter().all(|c| c.ok);
    let _ = writeln!(
        w,
        "\n{}  (total run time {}, including setup and teardown)",
        if passed { "PASS" } else { "FAIL" },
        secs(o.total)
    );
    (out, passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_units() {
        assert_eq!(ms_from_us(1_234_567), "1,234.567 ms");
        assert_eq!(ms_from_us(7), "0.007 ms");
        assert_eq!(per_sec(299_999.6), "300,000/s");
        assert_eq!(percent(0.001), "0.100 %");
    }

    #[test]
    fn reads_rss_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(rss_bytes().unwrap() > 0);
        }
    }
}
