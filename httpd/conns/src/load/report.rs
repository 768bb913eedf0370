//! The run's one report: the ramp, the requests' latency and rate, every class's closes, the
//! server's cost and the machine's state, as a text table or one JSON object.

use super::plan::Options;
use super::result::ProcessResult;
use super::server::{Machine, ServerCost};
use crate::report::ClassReport;
use serde_json::{Value, json};
use std::fmt;
use std::time::Duration;

/// The quantiles reported, with their names.
const QUANTILES: [(&str, f64); 5] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0)];

/// Everything a run found.
#[derive(Debug)]
pub struct Report {
    pub options: Options,
    pub result: ProcessResult,
    /// `None` without `--server-pid`/`--server-tree`.
    pub server: Option<ServerCost>,
    pub machine_start: Machine,
    pub machine_end: Machine,
}

impl Report {
    /// The requests were sent for this long in the window (to the quiet point, if any).
    fn sending(&self) -> Duration {
        self.options.quiet_at.unwrap_or(self.options.secs)
    }

    /// Responses per second seen while sending.
    fn achieved_rps(&self) -> f64 {
        self.result.counts.answered_in_window as f64 / self.sending().as_secs_f64()
    }

    fn latency_ms(&self, q: f64) -> Option<f64> {
        self.result.counts.latency_at(q).map(|d| d.as_secs_f64() * 1000.0)
    }

    /// The classes of closes: the held ones asked for, and the quiet one.
    fn closes(&self) -> impl Iterator<Item = &ClassReport> {
        self.result.held.iter().filter(|c| c.count > 0).chain(&self.result.quiet)
    }

    /// CPU µs per request answered in the window, RSS KiB per connection held at its end.
    fn per_unit(&self, server: &ServerCost) -> (Option<f64>, Option<f64>) {
        let count = self.result.counts.histogram.len();
        let held = self.options.conns();
        (
            (count > 0).then(|| server.cpu_secs * 1e6 / count as f64),
            (held > 0).then(|| server.rss_end_kib as f64 / held as f64),
        )
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> Value {
        let o = &self.options;
        let c = &self.result.counts;
        let mut latency: serde_json::Map<String, Value> =
            QUANTILES.iter().map(|&(name, q)| (name.to_string(), json!(self.latency_ms(q)))).collect();
        // The lowest bucket's low end: at most 0.1 % under the fastest response.
        let min = (!c.histogram.is_empty()).then(|| c.histogram.min() as f64 / 1000.0);
        latency.insert("min".to_string(), json!(min));
        let closes: serde_json::Map<String, Value> =
            self.closes().map(|c| (c.class.name().to_string(), c.to_json())).collect();
        let server = self.server.as_ref().map(|s| {
            let (cpu_us, rss_kib) = self.per_unit(s);
            json!({
                "cpu_secs": s.cpu_secs, "cpu_us_per_request": cpu_us,
                "rss_start_kib": s.rss_start_kib, "rss_end_kib": s.rss_end_kib, "rss_peak_kib": s.rss_peak_kib,
                "rss_kib_per_conn": rss_kib, "held": o.conns(), "processes": s.processes,
            })
        });
        json!({
            "config": {
                "addr": o.addr.to_string(), "active": o.active, "rate": o.rate, "path": o.path,
                "warmup_secs": o.warmup.as_secs_f64(), "secs": o.secs.as_secs_f64(), "max_secs": o.max.as_secs_f64(),
                "quiet_at": o.quiet_at.map(|q| q.as_secs_f64()), "sources": o.sources, "processes": o.processes,
                "silent": o.silent, "idle": o.idle, "slowloris": o.slowloris, "unread": o.unread,
                "header_timeout_ms": o.header_timeout.as_millis() as u64, "idle_timeout_ms": o.idle_timeout.as_millis() as u64,
                "send_timeout_ms": o.send_timeout.as_millis() as u64, "trickle_ms": o.trickle.as_millis() as u64,
                "open_per_ms": o.open_per_ms,
            },
            "ramp": { "secs": self.result.ramp.as_secs_f64(), "connect_failures": c.connect_failures },
            "requests": {
                "count": c.histogram.len(), "sent": c.sent, "answered": c.answered, "queued": c.queued,
                "errors": c.errors, "error_count": c.errors.values().sum::<u64>(),
                "achieved_rps": self.achieved_rps(), "sending_secs": self.sending().as_secs_f64(),
                "latency_ms": latency,
            },
            "closes": closes,
            "server": server,
            "machine": { "start": self.machine_start.to_json(), "end": self.machine_end.to_json() },
            "ran_secs": self.result.ran.as_secs_f64(),
            "notes": self.result.notes,
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        let c = &self.result.counts;
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        writeln!(
            f,
            "shardwheel-load: {} {} active at {} req/s, {} s (warm-up {} s), sources {}, processes {}",
            o.addr,
            o.active,
            o.rate,
            o.secs.as_secs_f64(),
            o.warmup.as_secs_f64(),
            o.sources,
            o.processes
        )?;
        write!(f, "ramp: {} connections in {:.3} s", o.conns(), self.result.ramp.as_secs_f64())?;
        for (reason, n) in &c.connect_failures {
            write!(f, ", {n} failed {reason}")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "requests: {} measured, {} sent, {} queued behind one in flight, {:.1} req/s achieved, {} errors",
            c.histogram.len(),
            c.sent,
            c.queued,
            self.achieved_rps(),
            c.errors.values().sum::<u64>()
        )?;
        for (kind, n) in &c.errors {
            writeln!(f, "  error: {n} {kind}")?;
        }
        let names: Vec<String> = QUANTILES.iter().map(|(name, _)| format!("{name:>9}")).collect();
        let values: Vec<String> = QUANTILES.iter().map(|&(_, q)| format!("{:>9}", ms(self.latency_ms(q)))).collect();
        writeln!(f, "latency ms {}\n           {}", names.join(" "), values.join(" "))?;
        writeln!(
            f,
            "{:<10} {:>7} {:>7} {:>6} {:>6} {:>6} {:>11} {:>11} {:>11}",
            "closes", "count", "closed", "early", "open", "failed", "late p50 ms", "late p99 ms", "late max ms"
        )?;
        for class in self.closes() {
            let late = |q: f64| ms(class.late_at(q).map(|us| us as f64 / 1000.0));
            writeln!(
                f,
                "{:<10} {:>7} {:>7} {:>6} {:>6} {:>6} {:>11} {:>11} {:>11}",
                class.class.name(),
                class.count,
                class.closed,
                class.early,
                class.open,
                class.failed,
                late(0.5),
                late(0.99),
                late(1.0)
            )?;
        }
        if let Some(s) = &self.server {
            let (cpu_us, rss_kib) = self.per_unit(s);
            writeln!(
                f,
                "server ({} processes): CPU {:.3} s in the window, {} µs/request; RSS {} KiB at the start, {} KiB at the window's end ({} KiB per held connection), peak {} KiB",
                s.processes,
                s.cpu_secs,
                ms(cpu_us),
                s.rss_start_kib,
                s.rss_end_kib,
                ms(rss_kib),
                s.rss_peak_kib
            )?;
        }
        let machine = |m: &Machine| {
            format!(
                "load {:.2} {:.2} {:.2}, committed {} MiB, available {} MiB",
                m.load[0],
                m.load[1],
                m.load[2],
                m.committed_kib / 1024,
                m.available_kib / 1024
            )
        };
        writeln!(f, "machine at the start: {}", machine(&self.machine_start))?;
        write!(f, "machine at the end:   {}; ran {:.3} s", machine(&self.machine_end), self.result.ran.as_secs_f64())?;
        for note in &self.result.notes {
            write!(f, "\nnote: {note}")?;
        }
        Ok(())
    }
}
