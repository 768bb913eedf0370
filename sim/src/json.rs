//! `--json`: the report as one JSON object on stdout.
//!
//! Shape (durations in seconds unless the key says `_ms`, `_us` or `_ns`; lateness in
//! microseconds; a figure that could not be measured is `null`):
//!
//! ```text
//! { "tool", "version", "config": {…}, "warnings": […],
//!   "runs": [ { "timer", "description", "lanes", "setup", "steady", "cpu", "lateness",
//!               "memory", "end", "stats", "self_check", "total_seconds" }, … ],
//!   "compare": null | { "baseline": "shardwheel", "metrics": [ { "key", "label", "unit",
//!               "higher_is_better", "values": { timer: x }, "advantage": { peer: r } } ] },
//!   "notes": […], "passed" }
//! ```
//!
//! `runs[0]` is shardwheel's; the peers follow with `--compare`. `advantage` is as in the text
//! table: > 1 means shardwheel does better (`null` where undefined or infinite).

use crate::args::Config;
use crate::figures::{self, METRICS, SIM_BYTES_PER_CONNECTION};
use crate::histogram::Snapshot;
use crate::scenario::Outcome;
use serde_json::{Map, Value, json};

fn percentiles(s: &Snapshot) -> Value {
    json!({
        "count": s.count(), "p50_us": s.quantile(0.5), "p99_us": s.quantile(0.99),
        "p999_us": s.quantile(0.999), "max_us": s.max(), "mean_us": s.mean(),
    })
}

fn config_json(c: &Config) -> Value {
    json!({
        "connections": c.connections, "producers": c.producers, "shards": c.shards,
        "tick_us": c.tick.as_micros() as u64, "pin_threads": c.pin_threads,
        "idle_timeout_ms": c.idle_timeout.as_millis() as u64, "idle_fraction": c.idle_fraction,
        "request_timeout_ms": c.request_timeout.as_millis() as u64, "lost_fraction": c.lost_fraction,
        "in_flight": c.in_flight, "rate_per_sec": c.rate, "duration_secs": c.duration.as_secs_f64(), "seed": c.seed,
    })
}

fn run_json(config: &Config, o: &Outcome) -> Value {
    let (c, rate) = (&o.counts, |n: u64| figures::steady_rate(o, n));
    let checks = figures::checks(o);
    let checks_json: Vec<Value> =
        checks.iter().map(|c| json!({"key": c.key, "what": c.what, "ok": c.ok, "detail": c.detail})).collect();
    json!({
        "timer": o.timer, "description": o.describe, "lanes": o.lanes,
        "setup": {
            "idle_armed": c.idle_armed, "seconds": o.setup.as_secs_f64(), "arms_per_sec": figures::setup_rate(o),
            "settle_seconds": o.settle.as_secs_f64(),
        },
        "steady": {
            "seconds": o.steady.as_secs_f64(), "events": c.events, "request_arms": c.request_armed,
            "resets_ok": c.resets_ok, "resets_failed": c.resets_failed, "cancels_ok": c.cancels_ok,
            "cancels_failed": c.cancels_failed, "lost_requests": c.lost, "quiet_connections": c.quiet,
            "schedule_failed": c.schedule_failed(), "reset_tasks": c.reset_tasks(),
            "fired_idle": o.fired_idle, "fired_request": o.fired_request,
            "events_per_sec": rate(c.events), "request_arms_per_sec": rate(c.request_armed),
            "resets_per_sec": rate(c.resets_ok), "cancels_per_sec": rate(c.cancels_ok),
            "expiries_per_sec": rate(o.fired_idle + o.fired_request),
        },
        "cpu": o.cpu.map(|u| json!({
            "user_seconds": u.user.as_secs_f64(), "system_seconds": u.system.as_secs_f64(),
            "total_seconds": u.total().as_secs_f64(), "ns_per_timer_op": figures::cpu_ns_per_op(o),
        })),
        "lateness": {
            "idle": percentiles(&o.idle_lateness), "request": percentiles(&o.request_lateness),
            "all": percentiles(&o.all_lateness()), "sleep_baseline": percentiles(&o.sleep_lateness),
            "early": o.early, "worst_early_ns": o.worst_early_ns,
            "bar_us": figures::lateness_bar(o).as_micros() as u64, "bar_met": figures::bar_met(o),
        },
        "memory": {
            "heap_bytes_before": o.heap_before, "heap_bytes_after": o.heap_after,
            "heap_bytes_per_connection": figures::heap_per_connection(config, o),
            "heap_bytes_at_end": o.heap_at_end,
            "heap_bytes_per_connection_at_end": figures::heap_per_connection_at_end(config, o),
            "simulator_bytes_per_connection": SIM_BYTES_PER_CONNECTION, "handle_slot_bytes": o.handle_bytes,
            "timer_bytes_per_timeout": figures::timer_bytes_per_timeout(config, o),
            "rss_bytes_before": o.rss_before, "rss_bytes_after": o.rss_after,
            "rss_bytes_per_connection": figures::rss_per_connection(config, o),
        },
        "end": {
            "pending_at_end": o.pending_at_end, "unfired": o.unfired.idle + o.unfired.request,
            "unfired_handed_back": o.unfired_listed, "unfired_idle": o.unfired.idle,
            "unfired_request": o.unfired.request, "stop_seconds": o.stop_time.as_secs_f64(),
        },
        "stats": o.stats.map(|s| json!({
            "scheduled": s.scheduled, "expired": s.expired, "cancelled": s.cancelled, "unfired": s.unfired,
            "pending": s.pending, "rejected": s.rejected, "panicked": s.panicked, "wakeups": s.wakeups,
            "queued": s.queued,
        })),
        "self_check": { "passed": checks.iter().all(|c| c.ok), "checks": checks_json },
        "total_seconds": o.total.as_secs_f64(),
    })
}

/// The ratio rows: every metric's value per timer, and shardwheel's advantage per peer.
fn compare_json(config: &Config, runs: &[Outcome]) -> Value {
    let finite = |x: Option<f64>| x.filter(|v| v.is_finite());
    let metrics: Vec<Value> = METRICS
        .iter()
        .map(|m| {
            let ours = (m.value)(config, &runs[0]);
            let values: Map<String, Value> =
                runs.iter().map(|o| (o.timer.to_owned(), json!(finite((m.value)(config, o))))).collect();
            let advantage: Map<String, Value> = runs[1..]
                .iter()
                .map(|o| (o.timer.to_owned(), json!(finite(figures::advantage(m, ours, (m.value)(config, o))))))
                .collect();
            json!({
                "key": m.key, "label": m.label, "unit": m.unit, "higher_is_better": m.higher_is_better,
                "values": values, "advantage": advantage,
            })
        })
        .collect();
    json!({ "baseline": runs[0].timer, "metrics": metrics })
}

/// The report of `runs` (`runs[0]` shardwheel's), pretty-printed; `compare` adds the ratio rows.
pub fn render(config: &Config, warnings: &[String], runs: &[Outcome], compare: bool) -> String {
    let report = json!({
        "tool": "shardwheel-sim",
        "version": env!("CARGO_PKG_VERSION"),
        "config": config_json(config),
        "warnings": warnings,
        "runs": runs.iter().map(|o| run_json(config, o)).collect::<Vec<_>>(),
        "compare": compare.then(|| compare_json(config, runs)),
        "notes": Vec::<String>::new(),
        "passed": runs.iter().all(figures::passed),
    });
    serde_json::to_string_pretty(&report).expect("a JSON value serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{config, outcome};

    fn parsed(runs: &[Outcome], compare: bool) -> Value {
        serde_json::from_str(&render(&config(), &["careful".to_owned()], runs, compare)).expect("valid JSON")
    }

    fn keys(v: &Value) -> Vec<&str> {
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn shape() {
        let v = parsed(&[outcome("shardwheel", 1)], false);
        assert_eq!(keys(&v), ["compare", "config", "notes", "passed", "runs", "tool", "version", "warnings"]);
        assert_eq!(
            (&v["tool"], &v["passed"], &v["warnings"][0]),
            (&json!("shardwheel-sim"), &json!(true), &json!("careful"))
        );
        assert!(v["compare"].is_null());
        assert_eq!((&v["config"]["connections"], &v["config"]["tick_us"]), (&json!(1_000), &json!(1_000)));
        let run = &v["runs"][0];
        let expected = ["cpu", "description", "end", "lanes", "lateness", "memory", "self_check", "setup", "stats"];
        assert_eq!(keys(run), [&expected[..], &["steady", "timer", "total_seconds"]].concat());
        assert_eq!(run["steady"]["events"], 30_000);
        for kind in ["idle", "request", "all", "sleep_baseline"] {
            assert_eq!(keys(&run["lateness"][kind]), ["count", "max_us", "mean_us", "p50_us", "p999_us", "p99_us"]);
        }
        assert_eq!((&run["lateness"]["all"]["count"], &run["lateness"]["bar_us"]), (&json!(110), &json!(1_500)));
        assert_eq!(run["memory"]["timer_bytes_per_timeout"], 68.0);
        assert!(run["stats"].is_null() && run["lateness"]["sleep_baseline"]["p99_us"].is_null());
        assert_eq!(run["self_check"]["checks"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn compare_shape_and_a_failed_check() {
        let mut bad = outcome("binary-heap", 2);
        bad.early = 2;
        let v = parsed(&[outcome("shardwheel", 1), bad], true);
        assert_eq!(v["compare"]["baseline"], "shardwheel");
        let metrics = v["compare"]["metrics"].as_array().unwrap();
        assert_eq!(metrics.len(), METRICS.len());
        let cpu = metrics.iter().find(|m| m["key"] == "cpu_seconds").unwrap();
        assert_eq!(cpu["higher_is_better"], false);
        assert!((cpu["values"]["binary-heap"].as_f64().unwrap() - 0.7).abs() < 1e-9);
        assert!((cpu["advantage"]["binary-heap"].as_f64().unwrap() - 2.0).abs() < 1e-9);
        assert!(cpu["advantage"].get("shardwheel").is_none());
        assert_eq!((&v["passed"], &v["runs"][1]["self_check"]["checks"][2]["ok"]), (&json!(false), &json!(false)));
    }
}
