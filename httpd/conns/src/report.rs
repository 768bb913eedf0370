//! What a run found, per class of connection: how many were opened, closed by the server,
//! closed early, still open, or failed; and how late each close came after its timeout was
//! due, as the client saw it (its own reading is part of that).
//!
//! Two instants per connection: `due`, when the timeout should have fired as the client
//! reckons it (connect + header timeout; the response read + idle timeout), from which the
//! lateness is counted; and `not_before`, an instant the server's own timer cannot precede
//! (the connect call was made before the server could accept; the request was written before
//! the server could answer it), so a close before `not_before` + the timeout is early beyond
//! doubt. For silent and slowloris connections the two are the same instant.

use serde_json::{Value, json};
use std::fmt;
use std::time::{Duration, Instant};

/// The kinds of connection the client holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Connects and sends nothing: closed at the header timeout.
    Silent,
    /// Sends one `GET /`, reads the response, then sends nothing: closed at the idle timeout.
    Idle,
    /// Trickles one header byte at a time, never a whole head: closed at the header timeout.
    Slowloris,
    /// Writes pipelined `GET /`s while the server takes them and never reads a response
    /// (a small receive buffer): closed at the send timeout, which runs from when a response
    /// waits for the client. The client cannot see that instant: `due` is its last write
    /// that went through plus the send timeout (the server's wait may start a little before
    /// or after it), `not_before` its first write.
    Unread,
    /// `shardwheel-load --quiet-at`: an active keep-alive connection that stopped sending
    /// with all the others at once: closed at the idle timeout, from its last response
    /// (`due`); `not_before` its last request's write.
    Quiet,
}

impl Class {
    /// Every class `shardwheel-conns` holds, in the order reported.
    pub const ALL: [Class; 4] = [Class::Silent, Class::Idle, Class::Slowloris, Class::Unread];

    /// Its name in the text and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Class::Silent => "silent",
            Class::Idle => "idle",
            Class::Slowloris => "slowloris",
            Class::Unread => "unread",
            Class::Quiet => "quiet",
        }
    }
}

/// How one connection ended, as the loop leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Never got to where its timeout runs: the connect failed, or (idle) no whole response.
    Failed,
    /// Still open when the run ended (`--max-secs`).
    Open,
    /// Closed by the server (a read saw 0 or an error).
    Closed {
        /// The close minus `due`, in microseconds (negative: before it).
        late_us: i64,
        /// Closed before the timeout could have fired from `not_before`.
        early: bool,
    },
}

impl Outcome {
    /// The outcome of a close seen at `closed`, the timeout due at `due` and not able to
    /// fire before `not_before + timeout`.
    pub fn closed(closed: Instant, due: Instant, not_before: Instant, timeout: Duration) -> Outcome {
        Outcome::Closed { late_us: signed_us(closed, due), early: closed < not_before + timeout }
    }
}

/// `a - b` in microseconds, negative where `a` is before `b`.
fn signed_us(a: Instant, b: Instant) -> i64 {
    let magnitude = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    if a >= b { magnitude(a - b) } else { -magnitude(b - a) }
}

/// One class's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassReport {
    pub class: Class,
    /// Asked for.
    pub count: usize,
    pub closed: usize,
    pub early: usize,
    pub open: usize,
    pub failed: usize,
    /// The closes' lateness in microseconds, sorted.
    pub late_us: Vec<i64>,
}

impl ClassReport {
    /// Sums the outcomes of one class.
    pub fn of(class: Class, outcomes: impl IntoIterator<Item = Outcome>) -> ClassReport {
        let mut report = ClassReport { class, count: 0, closed: 0, early: 0, open: 0, failed: 0, late_us: Vec::new() };
        for outcome in outcomes {
            report.count += 1;
            match outcome {
                Outcome::Failed => report.failed += 1,
                Outcome::Open => report.open += 1,
                Outcome::Closed { late_us, early } => {
                    report.closed += 1;
                    report.early += usize::from(early);
                    report.late_us.push(late_us);
                }
            }
        }
        report.late_us.sort_unstable();
        report
    }

    /// The lateness at quantile `q` (nearest rank), in microseconds; `None` with no close.
    pub fn late_at(&self, q: f64) -> Option<i64> {
        let n = self.late_us.len();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        Some(self.late_us[rank - 1])
    }

    /// The class as a JSON object; lateness in milliseconds.
    pub fn to_json(&self) -> Value {
        let ms = |q: f64| self.late_at(q).map(|us| us as f64 / 1000.0);
        json!({
            "count": self.count,
            "closed": self.closed,
            "early": self.early,
            "open": self.open,
            "failed": self.failed,
            "late_ms": { "min": ms(0.0), "p50": ms(0.5), "p99": ms(0.99), "max": ms(1.0) },
        })
    }
}

/// The whole run.
#[derive(Debug, Clone)]
pub struct Report {
    pub classes: Vec<ClassReport>,
    /// From the first connect to the last connection opened.
    pub opening: Duration,
    /// From the first connect to the end.
    pub ran: Duration,
    /// The first few distinct reasons a connection failed.
    pub errors: Vec<String>,
}

impl Report {
    /// The report as one JSON object, with the run's settings in `config`.
    pub fn to_json(&self, config: Value) -> Value {
        let classes: serde_json::Map<String, Value> =
            self.classes.iter().map(|c| (c.class.name().to_string(), c.to_json())).collect();
        json!({
            "config": config,
            "opening_secs": self.opening.as_secs_f64(),
            "ran_secs": self.ran.as_secs_f64(),
            "classes": classes,
            "errors": self.errors,
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |v: Option<i64>| v.map_or("-".to_string(), |us| format!("{:.3}", us as f64 / 1000.0));
        writeln!(
            f,
            "{:<10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>12} {:>12} {:>12}",
            "class", "count", "closed", "early", "open", "failed", "late p50 ms", "late p99 ms", "late max ms"
        )?;
        for c in &self.classes {
            writeln!(
                f,
                "{:<10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>12} {:>12} {:>12}",
                c.class.name(),
                c.count,
                c.closed,
                c.early,
                c.open,
                c.failed,
                ms(c.late_at(0.5)),
                ms(c.late_at(0.99)),
                ms(c.late_at(1.0))
            )?;
        }
        write!(f, "opened in {:.3} s, ran {:.3} s", self.opening.as_secs_f64(), self.ran.as_secs_f64())?;
        for error in &self.errors {
            write!(f, "\nerror: {error}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
