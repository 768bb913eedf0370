//! The peers of `--compare`, behind the scenario's [`SimTimer`] interface, so that every one
//! runs literally the same workload as shardwheel.
//!
//! - `netty-wheel`: the Netty-architecture `HashedWheelTimer` of `benches/baselines/netty.rs`;
//! - `Mutex<BinaryHeap>`: the locked heap with one worker of `benches/baselines/heap.rs`;
//! - `tokio`: tokio's timers on a multi-thread runtime ([`tokio`], with `--features compare`).
//!
//! The first two are the benchmarks' own files, included as they are (see [`bench_peer`] for
//! why their trait is mirrored) and adapted by [`bench::Bench`].

mod bench;
mod tokio;

use shardwheel_peers::{heap, netty};

use crate::args::Config;
use crate::run_one;
use crate::scenario::Outcome;
#[cfg(doc)]
use crate::timer::SimTimer;
use bench::Bench;

/// Buckets of the Netty-style wheel: Netty's default `ticksPerWheel`.
const NETTY_BUCKETS: usize = 512;

/// Runs the scenario on every peer, after shardwheel's run (`runs[0]`).
pub fn run_all(config: &Config, runs: &mut Vec<Outcome>, notes: &mut Vec<String>) {
    let netty = Bench::new(
        netty::NettyPeer::with(config.tick, NETTY_BUCKETS),
        &format!(
            "Netty-architecture HashedWheelTimer (benches/baselines/netty.rs): one wheel of {NETTY_BUCKETS} \
             buckets with rounds, tick {} µs, one worker, MPSC queues for arms and cancels",
            config.tick.as_micros()
        ),
        |p| Some(p.pending().max(0) as usize),
    );
    runs.push(run_one(config, netty, "netty-wheel"));
    let heap = Bench::new(
        heap::HeapPeer::new(),
        "Mutex<BinaryHeap> + Condvar, one worker, as ScheduledThreadPoolExecutor (benches/baselines/heap.rs); \
         cancel marks, the entry leaves the heap at its deadline",
        |p| Some(p.entries()),
    );
    runs.push(run_one(config, heap, "Mutex<BinaryHeap>"));
    match tokio::TokioTimer::new(config.shards) {
        Ok(timer) => runs.push(run_one(config, timer, "tokio")),
        Err(e) => notes.push(format!("tokio's runtime could not be built: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report;
    use crate::timer::Shardwheel;
    use std::time::Duration;

    /// Every timer runs a short scenario with expiries of both kinds, cancels and resets, and
    /// passes the self-check: the adapters keep the exactly-once contract.
    #[test]
    fn every_timer_passes_a_short_run() {
        let config = Config {
            connections: 2_000,
            producers: 2,
            shards: 2,
            idle_timeout: Duration::from_millis(200),
            idle_fraction: 0.5,
            request_timeout: Duration::from_millis(50),
            lost_fraction: 0.05,
            in_flight: 16,
            pin_threads: false,
            rate: 40_000,
            duration: Duration::from_millis(500),
            ..Config::default()
        };
        assert!(config.warnings().is_empty(), "{:?}", config.warnings());
        let shardwheel = Shardwheel::new(config.shards, config.tick, config.pin_threads).unwrap();
        let mut runs = vec![run_one(&config, shardwheel, "shardwheel")];
        let mut notes = Vec::new();
        run_all(&config, &mut runs, &mut notes);
        assert_eq!(runs.len(), 4);
        assert!(notes.is_empty(), "{notes:?}");
        for o in &runs {
            assert!(report::passed(o), "{}: {:#?}", o.timer, report::checks(o));
            let c = &o.counts;
            assert!(o.fired_idle > 0 && o.fired_request > 0, "{}: nothing fired", o.timer);
            assert!(c.cancels_ok > 0 && c.resets_ok > 0, "{}: {c:?}", o.timer);
            assert_eq!(c.resets_failed, 0, "{}: active connections timed out", o.timer);
            assert!(o.unfired.idle + o.unfired.request > 0, "{}: nothing was pending at the stop", o.timer);
        }
    }
}
