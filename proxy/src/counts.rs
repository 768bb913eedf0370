//! What the proxy counts, printed on exit as `name=value` pairs (and summed over processes).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The proxy's counters, shared by every connection of a process.
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Requests received (each one's head read whole).
    pub requests: AtomicU64,
    /// `504 Gateway Timeout`: the upstream's response head did not come within the timeout.
    pub gateway_timeouts: AtomicU64,
    /// `502 Bad Gateway`: the upstream request failed (refused, reset, bad response).
    pub upstream_errors: AtomicU64,
    /// Connections closed by the idle timeout.
    pub idle_closes: AtomicU64,
    /// Connections closed by the header timeout.
    pub header_timeouts: AtomicU64,
    /// Connections closed by the send timeout (a write that made no progress).
    pub send_timeouts: AtomicU64,
    /// Connections that ended on another error (a reset, a bad request, …).
    pub conn_errors: AtomicU64,
}

/// The counters' names, in the order [`Counts::values`] gives them.
pub const NAMES: [&str; 8] = [
    "requests",
    "gateway_timeouts",
    "upstream_errors",
    "idle_closes",
    "header_timeouts",
    "send_timeouts",
    "connections",
    "conn_errors",
];

/// The counters' values, by [`NAMES`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Values(pub [u64; NAMES.len()]);

impl Counts {
    /// A snapshot.
    pub fn values(&self) -> Values {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Values([
            c(&self.requests),
            c(&self.gateway_timeouts),
            c(&self.upstream_errors),
            c(&self.idle_closes),
            c(&self.header_timeouts),
            c(&self.send_timeouts),
            c(&self.connections),
            c(&self.conn_errors),
        ])
    }
}

impl Values {
    /// The values in a line of `name=value` pairs (as [`Values`]' `Display` writes them);
    /// other words are skipped, a missing name is zero.
    pub fn parse(line: &str) -> Option<Values> {
        let mut values = Values::default();
        let mut found = false;
        for word in line.split_whitespace() {
            let Some((name, value)) = word.split_once('=') else { continue };
            if let Some(i) = NAMES.iter().position(|&n| n == name) {
                values.0[i] = value.parse().ok()?;
                found = true;
            }
        }
        found.then_some(values)
    }

    /// The sum of two processes' counts.
    pub fn add(&mut self, other: Values) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }
}

impl fmt::Display for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, value)) in NAMES.iter().zip(self.0).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back() {
        let counts = Counts::default();
        counts.requests.fetch_add(3, Ordering::Relaxed);
        counts.idle_closes.fetch_add(1, Ordering::Relaxed);
        let line = format!("shardwheel-proxy: exit process=1 {}", counts.values());
        let mut sum = Values::parse(&line).unwrap();
        sum.add(counts.values());
        assert_eq!(sum.0[0], 6);
        assert_eq!(sum.0[3], 2);
        assert_eq!(Values::parse("no counts here"), None);
    }
}
