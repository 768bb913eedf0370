//! The `metrics` feature: `TimerService::record_metrics` publishes each shard's counters,
//! gauges and lateness histogram, labelled by service and shard, with the values `stats`
//! gives, through whatever recorder is installed.

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use shardwheel::TimerService;
use std::collections::HashMap;
use std::time::Duration;

/// Every metric the recorder holds: (name, sorted labels) → value (counters and gauges as
/// `f64`).
fn read(snapshotter: &Snapshotter) -> HashMap<(String, Vec<(String, String)>), f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let mut labels: Vec<(String, String)> =
                key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
            labels.sort();
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(_) => panic!("no metrics histogram is recorded: buckets are counters"),
            };
            ((key.key().name().to_owned(), labels), value)
        })
        .collect()
}

fn labels(shard: usize, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut l = vec![("service".to_owned(), "api".to_owned()), ("shard".to_owned(), shard.to_string())];
    l.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    l.sort();
    l
}

#[test]
fn each_shards_counts_and_lateness_are_published_as_stats_gives_them() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let timers = TimerService::builder().shards(2).max_pending_per_shard(3).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..5 {
        let tx = tx.clone();
        timers.schedule_on(0, Duration::from_millis(2), move || tx.send(()).unwrap()).unwrap();
        rx.recv().unwrap();
    }
    let pending: Vec<_> = (0..3).map(|_| timers.schedule_on(1, Duration::from_secs(60), || ()).unwrap()).collect();
    assert!(timers.schedule_on(1, Duration::from_secs(60), || ()).is_err(), "shard 1 is full");
    assert!(pending[0].cancel());
    let shards = timers.shard_stats();
    metrics::with_local_recorder(&recorder, || timers.record_metrics("api"));
    let got = read(&snapshotter);
    let value = |name: &str, shard: usize, extra: &[(&str, &str)]| {
        *got.get(&(name.to_owned(), labels(shard, extra)))
            .unwrap_or_else(|| panic!("{name} {shard} {extra:?} missing: {got:?}"))
    };
    for (i, s) in shards.iter().enumerate() {
        assert_eq!(value("shardwheel_scheduled_total", i, &[]), s.scheduled as f64);
        assert_eq!(value("shardwheel_expired_total", i, &[]), s.expired as f64);
        assert_eq!(value("shardwheel_cancelled_total", i, &[]), s.cancelled as f64);
        assert_eq!(value("shardwheel_rejected_total", i, &[]), s.rejected as f64);
        assert_eq!(value("shardwheel_pending", i, &[]), s.pending as f64);
        assert_eq!(value("shardwheel_failed", i, &[]), 0.0);
        assert_eq!(value("shardwheel_lateness_seconds_count", i, &[]), s.lateness.count() as f64);
        assert_eq!(value("shardwheel_lateness_seconds_bucket", i, &[("le", "+Inf")]), s.lateness.count() as f64);
    }
    assert_eq!(value("shardwheel_expired_total", 0, &[]), 5.0);
    assert_eq!((value("shardwheel_pending", 1, &[]), value("shardwheel_rejected_total", 1, &[])), (2.0, 1.0));
    // The buckets are cumulative and end at the count; the first bound is 1 µs.
    let mut last = 0.0;
    for (bound, _) in shards[0].lateness.buckets() {
        let le = if bound == Duration::MAX { "+Inf".to_owned() } else { format!("{}", bound.as_secs_f64()) };
        let v = value("shardwheel_lateness_seconds_bucket", 0, &[("le", &le)]);
        assert!(v >= last, "cumulative: {le} has {v} < {last}");
        last = v;
    }
    assert_eq!(last, 5.0);
    assert!(got.contains_key(&("shardwheel_lateness_seconds_bucket".to_owned(), labels(0, &[("le", "0.000001")]))));
}

/// Each metric comes with its description to whichever recorder is installed when
/// `record_metrics` is called: a second recorder, installed after the first call, gets them
/// too (they were described once per process, so only the first recorder ever had them).
#[test]
fn every_recorder_gets_the_descriptions() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    for _ in 0..2 {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || timers.record_metrics("described"));
        let described: HashMap<String, String> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, _, help, _)| Some((key.key().name().to_owned(), help?.to_string())))
            .collect();
        assert_eq!(described.get("shardwheel_pending").map(String::as_str), Some("Timeouts pending now."));
        assert_eq!(
            described.get("shardwheel_lateness_seconds_count").map(String::as_str),
            Some("Expired timeouts in the lateness histogram.")
        );
    }
}
