//! `--json`: the report as one JSON object on stdout.
//!
//! Shape (every duration in seconds unless the key says `_ms`, `_us` or `_ns`; every
//! lateness in microseconds; a figure that could not be measured is `null`):
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
//! `runs[0]` is shardwheel's; the peers follow with `--compare`. `advantage` is as in the
//! text table: > 1 means shardwheel does better (`null` where undefined or infinite).

use crate::args::Config;
use crate::histogram::Snapshot;
use crate::report::{self, METRICS};
use crate::scenario::{Outcome, SIM_BYTES_PER_CONNECTION};
use serde::Serialize;
use std::collections::BTreeMap;

/// The whole report.
#[derive(Debug, Serialize)]
pub struct JsonReport {
    pub tool: &'static str,
    pub version: &'static str,
    pub config: ConfigJson,
    pub warnings: Vec<String>,
    pub runs: Vec<RunJson>,
    pub compare: Option<CompareJson>,
    pub notes: Vec<String>,
    /// Every run's self-check passed.
    pub passed: bool,
}

#[derive(Debug, Serialize)]
pub struct ConfigJson {
    pub connections: usize,
    pub producers: usize,
    pub shards: usize,
    pub tick_us: u64,
    pub pin_threads: bool,
    pub idle_timeout_ms: u64,
    pub idle_fraction: f64,
    pub request_timeout_ms: u64,
    pub lost_fraction: f64,
    pub in_flight: usize,
    pub rate_per_sec: u64,
    pub duration_secs: f64,
    pub seed: u64,
}

#[derive(Debug, Serialize)]
pub struct RunJson {
    pub timer: &'static str,
    pub description: String,
    /// Threads that fire timeouts.
    pub lanes: usize,
    pub setup: SetupJson,
    pub steady: SteadyJson,
    pub cpu: Option<CpuJson>,
    pub lateness: LatenessJson,
    pub memory: MemoryJson,
    pub end: EndJson,
    /// The service's own counters after stop (shardwheel only).
    pub stats: Option<StatsJson>,
    pub self_check: SelfCheckJson,
    pub total_seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct SetupJson {
    pub idle_armed: u64,
    pub seconds: f64,
    pub arms_per_sec: f64,
    /// Until the timer had filed every arm, after the last returned; memory is measured then.
    pub settle_seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct SteadyJson {
    pub seconds: f64,
    pub events: u64,
    pub request_arms: u64,
    pub resets_ok: u64,
    /// `reset()` = false on an active connection (expected 0).
    pub resets_failed: u64,
    pub cancels_ok: u64,
    pub cancels_failed: u64,
    pub lost_requests: u64,
    pub quiet_connections: u64,
    /// Arms the timer refused.
    pub schedule_failed: u64,
    /// Idle tasks built for resets that arm again (timers without a reset of their own).
    pub reset_tasks: u64,
    pub fired_idle: u64,
    pub fired_request: u64,
    pub events_per_sec: f64,
    pub request_arms_per_sec: f64,
    pub resets_per_sec: f64,
    pub cancels_per_sec: f64,
    pub expiries_per_sec: f64,
}

#[derive(Debug, Serialize)]
pub struct CpuJson {
    pub user_seconds: f64,
    pub system_seconds: f64,
    pub total_seconds: f64,
    /// CPU time over arms, resets, cancels and expiries.
    pub ns_per_timer_op: f64,
}

#[derive(Debug, Serialize)]
pub struct LatenessJson {
    pub idle: PercentilesJson,
    pub request: PercentilesJson,
    pub all: PercentilesJson,
    /// How late a plain `thread::sleep(tick)` woke meanwhile: the machine's noise.
    pub sleep_baseline: PercentilesJson,
    pub early: u64,
    pub worst_early_ns: u64,
    /// The design bar: p99 ≤ one tick + 0.5 ms.
    pub bar_us: u64,
    /// Whether the worse p99 of idle and request met it (`null`: nothing fired).
    pub bar_met: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct PercentilesJson {
    pub count: u64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub p999_us: Option<u64>,
    pub max_us: Option<u64>,
    pub mean_us: Option<f64>,
}

impl From<&Snapshot> for PercentilesJson {
    fn from(s: &Snapshot) -> Self {
        PercentilesJson {
            count: s.count(),
            p50_us: s.quantile(0.5),
            p99_us: s.quantile(0.99),
            p999_us: s.quantile(0.999),
            max_us: s.max(),
            mean_us: s.mean(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct MemoryJson {
    pub heap_bytes_before: u64,
    pub heap_bytes_after: u64,
    pub heap_bytes_per_connection: f64,
    /// Once activity stopped (requests in flight, cancelled entries the timer keeps).
    pub heap_bytes_at_end: u64,
    pub heap_bytes_per_connection_at_end: f64,
    pub simulator_bytes_per_connection: u64,
    pub handle_slot_bytes: u64,
    /// Heap per connection less the simulator's own bytes.
    pub timer_bytes_per_timeout: f64,
    pub rss_bytes_before: Option<u64>,
    pub rss_bytes_after: Option<u64>,
    pub rss_bytes_per_connection: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct EndJson {
    pub pending_at_end: Option<usize>,
    pub unfired: u64,
    /// How many `stop()` handed back (`null`: the timer drops them instead).
    pub unfired_handed_back: Option<u64>,
    pub unfired_idle: u64,
    pub unfired_request: u64,
    pub stop_seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct StatsJson {
    pub scheduled: u64,
    pub expired: u64,
    pub cancelled: u64,
    pub unfired: u64,
    pub pending: u64,
    pub rejected: u64,
    pub panicked: u64,
    pub wakeups: u64,
    pub queued: u64,
}

#[derive(Debug, Serialize)]
pub struct SelfCheckJson {
    pub passed: bool,
    pub checks: Vec<CheckJson>,
}

#[derive(Debug, Serialize)]
pub struct CheckJson {
    pub key: &'static str,
    pub what: &'static str,
    pub ok: bool,
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct CompareJson {
    pub baseline: &'static str,
    pub metrics: Vec<MetricJson>,
}

#[derive(Debug, Serialize)]
pub struct MetricJson {
    pub key: &'static str,
    pub label: &'static str,
    pub unit: &'static str,
    pub higher_is_better: bool,
    /// By timer.
    pub values: BTreeMap<&'static str, Option<f64>>,
    /// shardwheel's advantage over each peer (> 1: shardwheel does better).
    pub advantage: BTreeMap<&'static str, Option<f64>>,
}

fn finite(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite())
}

fn run_json(config: &Config, o: &Outcome) -> RunJson {
    let c = &o.counts;
    let steady = o.steady.as_secs_f64().max(1e-9);
    let checks = report::checks(o);
    RunJson {
        timer: o.timer,
        description: o.describe.clone(),
        lanes: o.lanes,
        setup: SetupJson {
            idle_armed: c.idle_armed,
            seconds: o.setup.as_secs_f64(),
            arms_per_sec: c.idle_armed as f64 / o.setup.as_secs_f64().max(1e-9),
            settle_seconds: o.settle.as_secs_f64(),
        },
        steady: SteadyJson {
            seconds: o.steady.as_secs_f64(),
            events: c.events,
            request_arms: c.request_armed,
            resets_ok: c.resets_ok,
            resets_failed: c.resets_failed,
            cancels_ok: c.cancels_ok,
            cancels_failed: c.cancels_failed,
            lost_requests: c.lost,
            quiet_connections: c.quiet,
            schedule_failed: c.schedule_failed(),
            reset_tasks: c.reset_tasks(),
            fired_idle: o.fired_idle,
            fired_request: o.fired_request,
            events_per_sec: c.events as f64 / steady,
            request_arms_per_sec: c.request_armed as f64 / steady,
            resets_per_sec: c.resets_ok as f64 / steady,
            cancels_per_sec: c.cancels_ok as f64 / steady,
            expiries_per_sec: (o.fired_idle + o.fired_request) as f64 / steady,
        },
        cpu: o.cpu.map(|u| CpuJson {
            user_seconds: u.user.as_secs_f64(),
            system_seconds: u.system.as_secs_f64(),
            total_seconds: u.total().as_secs_f64(),
            ns_per_timer_op: u.total().as_nanos() as f64 / report::timer_ops(o).max(1) as f64,
        }),
        lateness: LatenessJson {
            idle: (&o.idle_lateness).into(),
            request: (&o.request_lateness).into(),
            all: (&o.all_lateness()).into(),
            sleep_baseline: (&o.sleep_lateness).into(),
            early: o.early,
            worst_early_ns: o.worst_early_ns,
            bar_us: report::lateness_bar(o).as_micros() as u64,
            bar_met: report::worst_p99_us(o).map(|p| u128::from(p) <= report::lateness_bar(o).as_micros()),
        },
        memory: MemoryJson {
            heap_bytes_before: o.heap_before,
            heap_bytes_after: o.heap_after,
            heap_bytes_per_connection: report::heap_per_connection(config, o),
            heap_bytes_at_end: o.heap_at_end,
            heap_bytes_per_connection_at_end: report::heap_per_connection_at_end(config, o),
            simulator_bytes_per_connection: SIM_BYTES_PER_CONNECTION,
            handle_slot_bytes: o.handle_bytes,
            timer_bytes_per_timeout: report::timer_bytes_per_timeout(config, o),
            rss_bytes_before: o.rss_before,
            rss_bytes_after: o.rss_after,
            rss_bytes_per_connection: report::rss_per_connection(config, o),
        },
        end: EndJson {
            pending_at_end: o.pending_at_end,
            unfired: o.unfired.idle + o.unfired.request,
            unfired_handed_back: o.unfired_listed,
            unfired_idle: o.unfired.idle,
            unfired_request: o.unfired.request,
            stop_seconds: o.stop_time.as_secs_f64(),
        },
        stats: o.stats.map(|s| StatsJson {
            scheduled: s.scheduled,
            expired: s.expired,
            cancelled: s.cancelled,
            unfired: s.unfired,
            pending: s.pending,
            rejected: s.rejected,
            panicked: s.panicked,
            wakeups: s.wakeups,
            queued: s.queued,
        }),
        self_check: SelfCheckJson {
            passed: checks.iter().all(|c| c.ok),
            checks: checks
                .into_iter()
                .map(|c| CheckJson { key: c.key, what: c.what, ok: c.ok, detail: c.detail })
                .collect(),
        },
        total_seconds: o.total.as_secs_f64(),
    }
}

/// The report of `runs` (`runs[0]` shardwheel's); `compare` adds the ratio rows.
pub fn report(config: &Config, warnings: &[String], runs: &[Outcome], compare: bool, notes: &[String]) -> JsonReport {
    let compare = compare.then(|| CompareJson {
        baseline: runs[0].timer,
        metrics: METRICS
            .iter()
            .map(|m| {
                let ours = (m.value)(config, &runs[0]);
                MetricJson {
                    key: m.key,
                    label: m.label,
                    unit: m.unit,
                    higher_is_better: m.higher_is_better,
                    values: runs.iter().map(|o| (o.timer, finite((m.value)(config, o)))).collect(),
                    advantage: runs[1..]
                        .iter()
                        .map(|o| (o.timer, finite(report::advantage(m, ours, (m.value)(config, o)))))
                        .collect(),
                }
            })
            .collect(),
    });
    JsonReport {
        tool: "shardwheel-sim",
        version: env!("CARGO_PKG_VERSION"),
        config: ConfigJson {
            connections: config.connections,
            producers: config.producers,
            shards: config.shards,
            tick_us: config.tick.as_micros() as u64,
            pin_threads: config.pin_threads,
            idle_timeout_ms: config.idle_timeout.as_millis() as u64,
            idle_fraction: config.idle_fraction,
            request_timeout_ms: config.request_timeout.as_millis() as u64,
            lost_fraction: config.lost_fraction,
            in_flight: config.in_flight,
            rate_per_sec: config.rate,
            duration_secs: config.duration.as_secs_f64(),
            seed: config.seed,
        },
        warnings: warnings.to_vec(),
        runs: runs.iter().map(|o| run_json(config, o)).collect(),
        compare,
        notes: notes.to_vec(),
        passed: runs.iter().all(report::passed),
    }
}

/// The report, pretty-printed.
pub fn render(config: &Config, warnings: &[String], runs: &[Outcome], compare: bool, notes: &[String]) -> String {
    let report = report(config, warnings, runs, compare, notes);
    serde_json::to_string_pretty(&report).expect("the report serializes (no maps with non-string keys)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{config, outcome};
    use serde_json::Value;

    fn parsed(runs: &[Outcome], compare: bool) -> Value {
        let text = render(&config(), &["careful".to_owned()], runs, compare, &[]);
        serde_json::from_str(&text).expect("valid JSON")
    }

    #[test]
    fn top_level_shape() {
        let v = parsed(&[outcome("shardwheel", 1)], false);
        let obj = v.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["compare", "config", "notes", "passed", "runs", "tool", "version", "warnings"]);
        assert_eq!(v["tool"], "shardwheel-sim");
        assert_eq!(v["passed"], true);
        assert!(v["compare"].is_null());
        assert_eq!(v["warnings"][0], "careful");
        assert_eq!(v["config"]["connections"], 1_000);
        assert_eq!(v["config"]["tick_us"], 1_000);
        assert_eq!(v["config"]["seed"], 24_301);
        assert_eq!(v["runs"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn run_shape() {
        let v = parsed(&[outcome("shardwheel", 1)], false);
        let run = &v["runs"][0];
        for key in [
            "timer",
            "description",
            "lanes",
            "setup",
            "steady",
            "cpu",
            "lateness",
            "memory",
            "end",
            "stats",
            "self_check",
            "total_seconds",
        ] {
            assert!(run.get(key).is_some(), "runs[0] lacks {key}: {run}");
        }
        assert_eq!(run["timer"], "shardwheel");
        assert_eq!(run["steady"]["events"], 30_000);
        assert!(run["steady"]["events_per_sec"].as_f64().unwrap() > 29_000.0);
        assert!(run["cpu"]["total_seconds"].as_f64().unwrap() > 0.3);
        for kind in ["idle", "request", "all", "sleep_baseline"] {
            let p = &run["lateness"][kind];
            for key in ["count", "p50_us", "p99_us", "p999_us", "max_us", "mean_us"] {
                assert!(p.get(key).is_some(), "lateness.{kind} lacks {key}");
            }
        }
        assert_eq!(run["lateness"]["idle"]["count"], 100);
        assert_eq!(run["lateness"]["all"]["count"], 110);
        assert!(run["lateness"]["sleep_baseline"]["p99_us"].is_null());
        assert_eq!(run["lateness"]["bar_us"], 1_500);
        assert_eq!(run["memory"]["heap_bytes_per_connection"], 80.0);
        assert_eq!(run["memory"]["timer_bytes_per_timeout"], 68.0);
        assert!(run["stats"].is_null());
        assert_eq!(run["self_check"]["passed"], true);
        let checks = run["self_check"]["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 3);
        assert!(checks.iter().all(|c| c["ok"] == true && c["key"].is_string()));
    }

    #[test]
    fn compare_shape() {
        let v = parsed(&[outcome("shardwheel", 1), outcome("binary-heap", 2)], true);
        let cmp = &v["compare"];
        assert_eq!(cmp["baseline"], "shardwheel");
        let metrics = cmp["metrics"].as_array().unwrap();
        assert_eq!(metrics.len(), METRICS.len());
        let cpu = metrics.iter().find(|m| m["key"] == "cpu_seconds").unwrap();
        assert_eq!(cpu["higher_is_better"], false);
        assert!((cpu["values"]["binary-heap"].as_f64().unwrap() - 0.7).abs() < 1e-9);
        assert!((cpu["advantage"]["binary-heap"].as_f64().unwrap() - 2.0).abs() < 1e-9);
        assert!(cpu["advantage"].get("shardwheel").is_none());
        assert_eq!(v["runs"].as_array().unwrap().len(), 2);
        assert_eq!(v["runs"][1]["timer"], "binary-heap");
    }

    #[test]
    fn a_failed_check_shows() {
        let mut bad = outcome("shardwheel", 1);
        bad.early = 2;
        let v = parsed(&[bad], false);
        assert_eq!(v["passed"], false);
        let early = v["runs"][0]["self_check"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["key"] == "never_early")
            .unwrap()
            .clone();
        assert_eq!(early["ok"], false);
    }
}
