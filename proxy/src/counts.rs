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

/// How late the shardwheel timer fired, summed over processes: its [`shardwheel::Lateness`]
/// buckets (powers of two of microseconds), printed on exit as `timer_late_buckets=a,b,..`
/// for `--timer shardwheel`. Beside the client's lateness of the same closes it says where
/// a close's lateness went: in the timer (its wake-up at the tick), or after it (the wake of
/// the connection's task, and the close).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TimerLateness(pub Vec<u64>);

impl TimerLateness {
    const KEY: &'static str = "timer_late_buckets=";

    pub fn of(lateness: &shardwheel::Lateness) -> TimerLateness {
        TimerLateness(lateness.buckets().map(|(_, n)| n).collect())
    }

    pub fn parse(line: &str) -> Option<TimerLateness> {
        let word = line.split_whitespace().find_map(|w| w.strip_prefix(Self::KEY))?;
        word.split(',').map(|n| n.parse().ok()).collect::<Option<Vec<u64>>>().map(TimerLateness)
    }

    pub fn add(&mut self, other: &TimerLateness) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a += b;
        }
    }

    /// The upper bound, in microseconds, of the bucket that holds the `q` quantile (at most
    /// twice the true value, never below it); `None` if nothing fired.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        let total: u64 = self.0.iter().sum();
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total.max(1));
        let mut seen = 0;
        for (i, &n) in self.0.iter().enumerate() {
            seen += n;
            if total > 0 && seen >= rank {
                return Some(1u64.checked_shl(i as u32).unwrap_or(u64::MAX));
            }
        }
        None
    }

    /// `timer_fired=N timer_late_p50_us<=A p99<=B max<=C`, the bounds as [`Self::quantile_us`].
    pub fn summary(&self) -> String {
        let q = |q| self.quantile_us(q).map_or("-".to_string(), |us| us.to_string());
        format!(
            "timer_fired={} timer_late_us: p50<={} p99<={} p99.9<={} max<={}",
            self.0.iter().sum::<u64>(),
            q(0.5),
            q(0.99),
            q(0.999),
            q(1.0)
        )
    }
}

impl fmt::Display for TimerLateness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::KEY)?;
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{n}")?;
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

    #[test]
    fn a_timer_line_reads_back_sums_and_bounds_its_quantiles() {
        // Bucket i holds lateness under 2^i µs: 90 under 1 µs, 9 in [2, 4), 1 in [64, 128).
        let mut one = TimerLateness(vec![0; 32]);
        one.0[0] = 90;
        one.0[2] = 9;
        one.0[7] = 1;
        let line = format!("shardwheel-proxy: timer process=3 {one}");
        let read = TimerLateness::parse(&line).unwrap();
        assert_eq!(read, one);
        let mut sum = TimerLateness::default();
        sum.add(&read);
        sum.add(&one);
        assert_eq!(sum.0[0], 180);
        assert_eq!(sum.quantile_us(0.5), Some(1));
        assert_eq!(sum.quantile_us(0.9), Some(1), "the 180th of 200 is under 1 µs");
        assert_eq!(sum.quantile_us(0.91), Some(4));
        assert_eq!(sum.quantile_us(0.99), Some(4));
        assert_eq!(sum.quantile_us(0.995), Some(128));
        assert_eq!(sum.quantile_us(1.0), Some(128));
        assert_eq!(sum.summary(), "timer_fired=200 timer_late_us: p50<=1 p99<=4 p99.9<=128 max<=128");
        assert_eq!(TimerLateness::default().quantile_us(0.5), None);
        assert_eq!(TimerLateness::parse("shardwheel-proxy: exit process=1 requests=3"), None);
        assert_eq!(TimerLateness::parse("timer_late_buckets=1,x"), None);
    }
}
