//! The summary printed at the stop: the counters of every thread, the lateness of timeout
//! closes, and what the process used (RSS, CPU seconds).

use crate::stats::{TimedOut, Totals};
use nix::sys::resource::{UsageWho, getrusage};
use std::fmt;
use std::time::Duration;

/// What the process used, read at the stop.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Resident set size in KiB (`VmRSS` of /proc/self/status), if readable.
    pub rss_kib: Option<u64>,
    /// CPU time in user and system mode.
    pub user: Duration,
    pub system: Duration,
}

impl Usage {
    /// This process's usage now.
    pub fn now() -> Usage {
        let (user, system) = match getrusage(UsageWho::RUSAGE_SELF) {
            Ok(u) => (timeval(u.user_time()), timeval(u.system_time())),
            Err(_) => (Duration::ZERO, Duration::ZERO),
        };
        Usage { rss_kib: rss_kib(), user, system }
    }
}

fn timeval(t: nix::sys::time::TimeVal) -> Duration {
    Duration::new(t.tv_sec().max(0) as u64, (t.tv_usec().max(0) as u32) * 1000)
}

/// `VmRSS` from /proc/self/status, in KiB.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Where the summary's timer counts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerCounts {
    /// The local stack's own wheels: every arm, cancel, reset and fire of its timers.
    Wheels,
    /// shardwheel's `TimerService` under hyper: the service's counts (hyper's timers and the
    /// server's), resets not counted apart.
    Service,
    /// tokio's timer, which keeps no counts.
    Uncounted,
}

/// The summary: totals, usage, and how long the server ran.
#[derive(Debug)]
pub struct Summary {
    pub totals: Totals,
    pub usage: Usage,
    pub ran: Duration,
    /// What stopped it: a signal's name, or `--for`.
    pub stopped_by: String,
    pub timers: TimerCounts,
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (t, u) = (&self.totals, &self.usage);
        writeln!(f, "shardwheel-httpd: stopped by {} after {:.1} s", self.stopped_by, self.ran.as_secs_f64())?;
        writeln!(
            f,
            "summary: connections {} (served {}, closed at once over --max-conns {}), requests {} (4xx: {})",
            t.accepted(),
            t.connections,
            t.rejected,
            t.requests,
            t.bad_requests
        )?;
        // Every connection in exactly one reason: at the stop they add up to the first line's.
        writeln!(
            f,
            "summary: closed by header timeout {}, by idle timeout {}, by send timeout {}, by peer {}, \
             after Connection: close {}, after a bad request {}, by the stop {}, at once {} ({} in all)",
            t.header_timeouts,
            t.idle_timeouts,
            t.send_timeouts,
            t.peer_closes,
            t.answered_closes,
            t.bad_request_closes,
            t.shutdown_closes,
            t.rejected,
            t.closed()
        )?;
        match self.timers {
            TimerCounts::Wheels => {
                writeln!(
                    f,
                    "summary: timers armed {}, cancelled {}, reset {}, fired {}",
                    t.timers_armed, t.timers_cancelled, t.timers_reset, t.timers_fired
                )?;
                writeln!(
                    f,
                    "summary: event-loop turns: longest {:.3} ms, {} over {} ms, {} left due timers to the next, {} gave socket events back",
                    ms(t.longest_turn_micros),
                    t.long_turns,
                    crate::stats::LONG_TURN_MICROS / 1000,
                    t.fire_breaks,
                    t.event_breaks
                )?;
                if t.cpu_timed_turns > 0 {
                    writeln!(
                        f,
                        "summary: event-loop turns on the CPU clock: {} timed, longest {:.3} ms, {} over {} ms",
                        t.cpu_timed_turns,
                        ms(t.longest_turn_cpu_micros),
                        t.long_cpu_turns,
                        crate::stats::LONG_TURN_MICROS / 1000,
                    )?;
                }
            }
            TimerCounts::Service => writeln!(
                f,
                "summary: timers (shardwheel's service, hyper's and the server's) armed {}, cancelled {}, fired {}",
                t.timers_armed, t.timers_cancelled, t.timers_fired
            )?,
            TimerCounts::Uncounted => writeln!(f, "summary: timers not counted (tokio's timer keeps no counts)")?,
        }
        writeln!(
            f,
            "summary: timeout closes late (as the server saw it) p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            ms(t.late.p50_micros),
            ms(t.late.p99_micros),
            ms(t.late.max_micros)
        )?;
        // Each timeout's own, where it closed any: one's tail is not hidden by another's count.
        for (timeout, late) in TimedOut::ALL.iter().zip(t.late_by).filter(|(_, late)| late.count > 0) {
            writeln!(
                f,
                "summary: {} timeout closes {}: late p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
                timeout.name(),
                late.count,
                ms(late.p50_micros),
                ms(late.p99_micros),
                ms(late.max_micros)
            )?;
        }
        let rss = u.rss_kib.map_or("unknown".to_string(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
        write!(
            f,
            "summary: RSS {rss}, CPU {:.2} s (user {:.2} s, system {:.2} s)",
            (u.user + u.system).as_secs_f64(),
            u.user.as_secs_f64(),
            u.system.as_secs_f64()
        )
    }
}
