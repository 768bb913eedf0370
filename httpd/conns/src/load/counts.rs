//! One process's figures for the active connections, and their merge across processes.
//!
//! The latencies go into an HdrHistogram in microseconds (1 µs to an hour at 3 significant
//! digits: 0.1 % of the value); a child sends its histogram in the standard V2 serialization,
//! base64 in its JSON line, and the parent adds them, which is exact (same buckets).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, Instant};

/// The histogram's highest value: an hour, in microseconds.
const HIGHEST_US: u64 = 3_600_000_000;
/// Significant digits kept.
const SIGNIFICANT: u8 = 3;

/// What the active connections did.
#[derive(Debug, Clone)]
pub struct Counts {
    /// Latency in µs of every request due in the window and answered.
    pub histogram: Histogram<u64>,
    /// Requests written (warm-up and window).
    pub sent: u64,
    /// Responses read (warm-up, window and after).
    pub answered: u64,
    /// Responses whose last byte came between the window's start and the sending's end (the
    /// achieved rate's).
    pub answered_in_window: u64,
    /// Requests due in the window while their connection had one in flight (pipelined).
    pub queued: u64,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Failed connects by reason (`ECONNREFUSED`, …), the held connections' too.
    pub connect_failures: BTreeMap<String, u64>,
    /// When the last connect ended, as seen; `None`: none did.
    pub last_connected: Option<Instant>,
}

impl Default for Counts {
    fn default() -> Counts {
        Counts::new()
    }
}

impl Counts {
    /// Nothing counted.
    pub fn new() -> Counts {
        Counts {
            histogram: new_histogram(),
            sent: 0,
            answered: 0,
            answered_in_window: 0,
            queued: 0,
            errors: BTreeMap::new(),
            connect_failures: BTreeMap::new(),
            last_connected: None,
        }
    }

    /// One error of `kind`.
    pub fn error(&mut self, kind: &str) {
        *self.errors.entry(kind.to_string()).or_default() += 1;
    }

    /// A connect that failed with `error`.
    pub fn connect_failed(&mut self, error: &io::Error) {
        *self.connect_failures.entry(crate::connect::reason(error)).or_default() += 1;
        self.connected(Instant::now());
    }

    /// A connect that ended (either way) at `at`.
    pub fn connected(&mut self, at: Instant) {
        self.last_connected = Some(self.last_connected.map_or(at, |last| last.max(at)));
    }

    /// A response seen at `now` to a request due at `scheduled` (in the window if
    /// `measured`).
    pub fn answered(&mut self, scheduled: Instant, measured: bool, now: Instant, start: Instant, end: Instant) {
        self.answered += 1;
        if now >= start && now < end {
            self.answered_in_window += 1;
        }
        if measured {
            let us = u64::try_from(now.saturating_duration_since(scheduled).as_micros()).unwrap_or(u64::MAX);
            self.histogram.saturating_record(us.max(1));
        }
    }

    /// Adds `other`'s figures to these (another process's).
    pub fn merge(&mut self, other: &Counts) -> Result<(), String> {
        self.histogram.add(&other.histogram).map_err(|e| format!("merging histograms: {e:?}"))?;
        self.sent += other.sent;
        self.answered += other.answered;
        self.answered_in_window += other.answered_in_window;
        self.queued += other.queued;
        for (kind, n) in &other.errors {
            *self.errors.entry(kind.clone()).or_default() += n;
        }
        for (kind, n) in &other.connect_failures {
            *self.connect_failures.entry(kind.clone()).or_default() += n;
        }
        Ok(())
    }

    /// The latency at quantile `q`, or `None` with no sample.
    pub fn latency_at(&self, q: f64) -> Option<Duration> {
        (!self.histogram.is_empty()).then(|| Duration::from_micros(self.histogram.value_at_quantile(q)))
    }

    /// The figures for a child's line: the histogram serialized.
    pub fn to_json(&self) -> Result<Value, String> {
        let mut bytes = Vec::new();
        V2Serializer::new().serialize(&self.histogram, &mut bytes).map_err(|e| format!("serializing: {e:?}"))?;
        Ok(json!({
            "histogram": BASE64.encode(bytes),
            "sent": self.sent,
            "answered": self.answered,
            "answered_in_window": self.answered_in_window,
            "queued": self.queued,
            "errors": self.errors,
            "connect_failures": self.connect_failures,
        }))
    }

    /// A child's figures, as `to_json` wrote them (its `last_connected` is not carried).
    pub fn from_json(value: &Value) -> Result<Counts, String> {
        let bad = |what: &str| format!("a child's report has no {what}");
        let bytes =
            BASE64.decode(value["histogram"].as_str().ok_or_else(|| bad("histogram"))?).map_err(|e| e.to_string())?;
        let histogram: Histogram<u64> =
            Deserializer::new().deserialize(&mut bytes.as_slice()).map_err(|e| format!("deserializing: {e:?}"))?;
        let number = |key: &str| value[key].as_u64().ok_or_else(|| bad(key));
        let map = |key: &str| -> Result<BTreeMap<String, u64>, String> {
            let object = value[key].as_object().ok_or_else(|| bad(key))?;
            object.iter().map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)).ok_or_else(|| bad(key))).collect()
        };
        Ok(Counts {
            histogram,
            sent: number("sent")?,
            answered: number("answered")?,
            answered_in_window: number("answered_in_window")?,
            queued: number("queued")?,
            errors: map("errors")?,
            connect_failures: map("connect_failures")?,
            last_connected: None,
        })
    }
}

/// An empty histogram of the run's bounds.
fn new_histogram() -> Histogram<u64> {
    // The bounds are constants within what the crate accepts (low ≥ 1, high ≥ 2 low,
    // 0..=5 digits): it cannot fail.
    Histogram::new_with_bounds(1, HIGHEST_US, SIGNIFICANT).expect("valid histogram bounds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_survives_the_trip_and_merges_exactly() {
        let t0 = Instant::now();
        let (mut a, mut b) = (Counts::new(), Counts::new());
        let end = t0 + Duration::from_secs(10);
        for ms in 1..=100 {
            a.answered(t0, true, t0 + Duration::from_millis(ms), t0, end);
        }
        b.answered(t0, true, t0 + Duration::from_millis(300), t0, end);
        b.answered(t0, false, t0 + Duration::from_millis(900), t0, end);
        b.error("status 500");
        b.queued = 2;
        let b = Counts::from_json(&b.to_json().unwrap()).unwrap();
        a.merge(&b).unwrap();
        assert_eq!((a.histogram.len(), a.answered, a.queued), (101, 102, 2));
        assert_eq!(a.errors["status 500"], 1);
        assert_eq!(a.latency_at(0.5), Some(Duration::from_micros(a.histogram.value_at_quantile(0.5))));
        let max = a.latency_at(1.0).unwrap();
        assert!(max >= Duration::from_millis(300) && max < Duration::from_millis(301), "{max:?}");
    }
}
