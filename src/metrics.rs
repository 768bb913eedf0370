//! The `metrics` feature: a service's counts published through the
//! [`metrics`](https://docs.rs/metrics) facade, so that whatever recorder the program
//! installed (Prometheus, StatsD, OpenTelemetry) exports them. A room on top of the service:
//! it reads [`TimerService::shard_stats`] and writes nothing the service reads.
//!
//! The `metrics` crate, not an exporter of our own: it is the facade the ecosystem's
//! recorders implement, so the program picks its exporter once for every library it uses.

use crate::lateness::Lateness;
use crate::service::TimerService;
use crate::stats::Stats;

/// The counters, each with its description: `(name, description, value)`.
fn counters(s: &Stats) -> [(&'static str, &'static str, u64); 8] {
    [
        ("shardwheel_scheduled_total", "Timeouts accepted by a shard, futures' registrations included.", s.scheduled),
        ("shardwheel_expired_total", "Timeouts the shard fired.", s.expired),
        ("shardwheel_cancelled_total", "Timeouts whose cancel won.", s.cancelled),
        ("shardwheel_rejected_total", "Schedules refused because the shard was full.", s.rejected),
        (
            "shardwheel_overflowed_total",
            "Futures no shard would take, which waited on the overflow timer.",
            s.overflowed,
        ),
        ("shardwheel_panicked_total", "Panics caught in tasks.", s.panicked),
        ("shardwheel_unfired_total", "Timeouts handed back by stop().", s.unfired),
        ("shardwheel_wakeups_total", "Times the shard's thread woke from sleep.", s.wakeups),
    ]
}

/// The gauges, each with its description.
fn gauges(s: &Stats) -> [(&'static str, &'static str, u64); 3] {
    [
        ("shardwheel_pending", "Timeouts pending now.", s.pending),
        ("shardwheel_queued", "Commands waiting in the shard's mailbox.", s.queued),
        ("shardwheel_failed", "1 if the shard's thread failed (a bug in shardwheel).", s.failed_shards),
    ]
}

const LATENESS: &str = "shardwheel_lateness_seconds";

/// Describes every metric to the recorder installed now. On every call, not once per
/// process: a recorder installed after the first call (or another thread's local one) gets
/// the descriptions too, and a recorder keeps the first it was given (a few map lookups per
/// call, every few seconds).
fn describe() {
    let none = Stats::default();
    for (name, help, _) in counters(&none) {
        metrics::describe_counter!(name, help);
    }
    for (name, help, _) in gauges(&none) {
        metrics::describe_gauge!(name, help);
    }
    metrics::describe_counter!(
        "shardwheel_lateness_seconds_bucket",
        metrics::Unit::Seconds,
        "Expired timeouts that fired less than `le` seconds after their tick began (cumulative)."
    );
    metrics::describe_counter!("shardwheel_lateness_seconds_count", "Expired timeouts in the lateness histogram.");
}

/// The `le` label of a bucket bound, in seconds as Prometheus writes them (`+Inf` for the
/// last).
fn le(bound: std::time::Duration) -> String {
    if bound == std::time::Duration::MAX { "+Inf".to_owned() } else { format!("{}", bound.as_secs_f64()) }
}

fn record_lateness(late: &Lateness, labels: &[(&'static str, String)]) {
    let mut cumulative = 0;
    for (bound, n) in late.buckets() {
        cumulative += n;
        let mut with_le = labels.to_vec();
        with_le.push(("le", le(bound)));
        metrics::counter!(format!("{LATENESS}_bucket"), &with_le).absolute(cumulative);
    }
    metrics::counter!(format!("{LATENESS}_count"), labels).absolute(late.count());
}

impl TimerService {
    /// Publishes the service's counts, shard by shard, through the `metrics` crate's
    /// installed recorder (the `metrics` feature). Each metric is labelled `service` (the
    /// name given) and `shard` (its index):
    ///
    /// - counters, set to the shard's totals (`absolute`): `shardwheel_scheduled_total`,
    ///   `_expired_total`, `_cancelled_total`, `_rejected_total`, `_overflowed_total`,
    ///   `_panicked_total`, `_unfired_total`, `_wakeups_total`;
    /// - gauges: `shardwheel_pending`, `shardwheel_queued`, `shardwheel_failed`;
    /// - the lateness histogram ([`Lateness`]) as Prometheus lays a histogram out: cumulative
    ///   counters `shardwheel_lateness_seconds_bucket` with an `le` label (1 µs, 2 µs, 4 µs,
    ///   …, `+Inf`) and `shardwheel_lateness_seconds_count`, so that
    ///   `histogram_quantile(0.99, rate(shardwheel_lateness_seconds_bucket[1m]))` works.
    ///
    /// The histogram goes out as counters, so an exporter shows two counter families
    /// (`…_bucket` and `…_count`), with no `_sum` (the shard keeps no sum of lateness). With
    /// `metrics-exporter-prometheus`, keep its default naming: its "recommended naming" adds
    /// `_total` to every counter, and `histogram_quantile` over `…_bucket` then finds
    /// nothing.
    ///
    /// Call it before each scrape, or every few seconds from a task: it reads the shards'
    /// counters (`Relaxed` loads, as [`stats`](TimerService::stats)) and touches nothing the
    /// arm path does. Each counter only grows from one call to the next (`scheduled` too: it
    /// counts the arms themselves). The repository's README has a Prometheus recipe.
    ///
    /// ```
    /// # use metrics_util::debugging::DebuggingRecorder;
    /// # let recorder = DebuggingRecorder::new();
    /// # let snapshotter = recorder.snapshotter();
    /// # metrics::with_local_recorder(&recorder, || -> Result<(), Box<dyn std::error::Error>> {
    /// let timers = shardwheel::TimerService::builder().shards(2).build()?;
    /// timers.schedule(std::time::Duration::from_secs(60), || ())?;
    /// timers.record_metrics("timers");
    /// # Ok(()) }).unwrap();
    /// # let pending: f64 = snapshotter.snapshot().into_vec().into_iter()
    /// #     .filter(|(key, ..)| key.key().name() == "shardwheel_pending")
    /// #     .map(|(.., value)| match value { metrics_util::debugging::DebugValue::Gauge(v) => v.into_inner(), _ => 0.0 })
    /// #     .sum();
    /// # assert_eq!(pending, 1.0);
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn record_metrics(&self, service: &str) {
        describe();
        for (index, s) in self.shard_stats().iter().enumerate() {
            let labels = [("service", service.to_owned()), ("shard", index.to_string())];
            for (name, _, value) in counters(s) {
                metrics::counter!(name, &labels).absolute(value);
            }
            for (name, _, value) in gauges(s) {
                metrics::gauge!(name, &labels).set(value as f64);
            }
            record_lateness(&s.lateness, &labels);
        }
    }
}
