//! This crate, as a user calls it: `TimerService::schedule`, `Timeout::cancel`, `Timeout::reset`,
//! `Timeout::reset_at`.

use super::Peer;
use shardwheel::{Timeout, TimerService};
use std::time::{Duration, Instant};

/// A `TimerService` with `shards` shards and the default settings otherwise (1 ms tick,
/// threads pinned). `SHARDWHEEL_BENCH_PIN=0` in the environment builds it with
/// `pin_threads(false)`, to see what pinning does on a machine shared with other work.
#[derive(Debug)]
pub struct ShardwheelPeer {
    service: TimerService,
}

/// Stops the service and waits for its shards: a bare drop returns at once and leaves the
/// shards tearing their timeouts down in the background, which would overlap the next
/// measurement.
impl Drop for ShardwheelPeer {
    fn drop(&mut self) {
        let _ = self.service.stop();
    }
}

impl ShardwheelPeer {
    pub fn new(shards: usize) -> ShardwheelPeer {
        ShardwheelPeer { service: TimerService::builder().shards(shards).build().expect("a valid service") }
    }

    /// A peer over a service built elsewhere (the simulator's, from its command line).
    pub fn from_service(service: TimerService) -> ShardwheelPeer {
        ShardwheelPeer { service }
    }

    /// `Timeout::reset_at` to `deadline`, an instant the caller computed (no clock read here).
    pub fn reset_at(&self, handle: &Timeout, deadline: Instant) -> bool {
        handle.reset_at(deadline)
    }

    /// The service, for its stats.
    pub fn service(&self) -> &TimerService {
        &self.service
    }
}

impl Peer for ShardwheelPeer {
    type Handle = Timeout;

    fn name(&self) -> &'static str {
        "shardwheel"
    }

    fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Timeout {
        self.service.schedule(delay, task).expect("the service is running")
    }

    fn arm_at<F: FnOnce() + Send + 'static>(&self, deadline: Instant, task: F) -> Timeout {
        self.service.schedule_at(deadline, task).expect("the service is running")
    }

    /// Pending timeouts already there come from many threads in a server: spread them
    /// over the shards instead of piling them on the home shard of the setup thread.
    fn prearm<F: FnOnce() + Send + 'static>(&self, i: usize, delay: Duration, task: F) -> Timeout {
        self.service.schedule_on(i % self.service.shard_count(), delay, task).expect("the service is running")
    }

    fn cancel(&self, handle: Timeout) -> bool {
        handle.cancel()
    }

    fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Timeout, delay: Duration, _fresh: F) -> bool {
        handle.reset(delay)
    }

    fn reset_kind(&self) -> &'static str {
        "Timeout::reset / reset_at (one CAS when later)"
    }

    fn diagnostics(&self) -> String {
        let s = self.service.stats();
        format!(
            "shard wake-ups {}, pending {}, queued {}, scheduled {}, cancelled {}",
            s.wakeups, s.pending, s.queued, s.scheduled, s.cancelled
        )
    }

    /// Until the shards have read their mailboxes, as far as they will: a shard asleep until
    /// a deadline is woken only by an earlier deadline or by 1024 waiting commands, so fewer
    /// than that (arms of later deadlines) may wait in a mailbox until the shard next wakes.
    fn settle(&self) {
        const HIGH_WATER: u64 = 1024;
        let t = Instant::now();
        let limit = HIGH_WATER * self.service.shard_count() as u64;
        while self.service.stats().queued >= limit && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
