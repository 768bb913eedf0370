//! What a run asks for (`Options`, the flags' values), its checks, and one process's share of
//! it (`Share`) with the schedule every process keeps (`Schedule`).
//!
//! Every process of a run gets 1/P of each class, of the rate (in proportion to its active
//! connections, so that every connection sends at the same interval) and of the source
//! addresses; and every process keeps the same schedule, counted from one instant the parent
//! chose (`epoch`, `CLOCK_MONOTONIC`), so that the warm-up, the measured window and the quiet
//! point are one for all.

use crate::client::Plan;
use crate::connect;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// The most connections one process may hold: the descriptor limit here is 20 000 per
/// process and cannot be raised; a few hundred stay for stdio, epoll and the pipes.
pub const MAX_CONNS_PER_PROCESS: usize = 19_500;
/// Time given after the last connect call of the ramp for the handshakes to end, before the
/// warm-up starts.
const RAMP_MARGIN: Duration = Duration::from_millis(100);

/// A whole run, as the flags give it.
#[derive(Debug, Clone)]
pub struct Options {
    pub addr: SocketAddr,
    /// Keep-alive connections sending requests.
    pub active: usize,
    /// Requests per second over all the active connections.
    pub rate: f64,
    /// The requests' target.
    pub path: String,
    pub warmup: Duration,
    /// The measured window.
    pub secs: Duration,
    /// The whole run's hard bound.
    pub max: Duration,
    /// From the window's start: the active connections stop sending and go idle.
    pub quiet_at: Option<Duration>,
    /// Source addresses (0: the kernel's choice, 127.0.0.1).
    pub sources: usize,
    pub silent: usize,
    pub idle: usize,
    pub slowloris: usize,
    pub unread: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub send_timeout: Duration,
    pub trickle: Duration,
    /// Connections opened per millisecond, over all processes.
    pub open_per_ms: usize,
    pub processes: usize,
}

impl Options {
    /// Refuses what cannot be run: a server off loopback, a rate of nothing, a window past
    /// `--max-secs`, a split over the descriptor limit, more sources than 127/8 has.
    pub fn check(&self) -> Result<(), String> {
        if !self.addr.ip().is_loopback() {
            return Err(format!("--addr {}: only a loopback server is measured (127.0.0.0/8 or ::1)", self.addr));
        }
        if !self.addr.is_ipv4() && self.sources > 0 {
            return Err("--sources binds 127.x.y.z addresses: the server must be on IPv4 loopback".to_string());
        }
        if self.active > 0 && !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(format!("--rate {}: a positive number of requests per second", self.rate));
        }
        if self.processes == 0 {
            return Err("--processes 0: at least one".to_string());
        }
        if !self.path.starts_with('/') || self.path.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
            return Err(format!("--path {:?}: an origin-form target, `/` and no spaces", self.path));
        }
        connect::sources(self.sources)?;
        // Each process hands out its sources' ports from the same range (`connect.rs`): two
        // processes on one source would pick the same ports, and collide at `connect`.
        if self.sources > 0 && self.sources < self.processes {
            return Err(format!(
                "--sources {}: fewer than --processes {} (each process needs source addresses of its own); \
                 use --sources {} or more",
                self.sources, self.processes, self.processes
            ));
        }
        // (A process holds at most MAX_CONNS_PER_PROCESS, fewer than a source's ports,
        // `connect::PORTS`: no source wraps around its ports within a run.)
        let most = self.share(0).conns();
        if most > MAX_CONNS_PER_PROCESS {
            let needed = self.conns().div_ceil(MAX_CONNS_PER_PROCESS);
            return Err(format!(
                "--processes {}: one process would hold {most} connections, more than the {MAX_CONNS_PER_PROCESS} \
                 descriptors a process may use here (the limit is 20000 and cannot be raised); use --processes {needed} or more",
                self.processes
            ));
        }
        let needed = self.ramp() + self.warmup + self.secs;
        if self.max <= needed {
            return Err(format!(
                "--max-secs {}: the ramp, the warm-up and the window take {:.3} s; give more",
                self.max.as_secs_f64(),
                needed.as_secs_f64()
            ));
        }
        if self.quiet_at.is_some_and(|q| q > self.secs) {
            return Err("--quiet-at must be inside the measured window (at most --secs: its end)".to_string());
        }
        Ok(())
    }

    /// Every connection held, active ones included.
    pub fn conns(&self) -> usize {
        self.active + self.silent + self.idle + self.slowloris + self.unread
    }

    /// The ramp every process plans for: its largest share at its pace, and a margin.
    fn ramp(&self) -> Duration {
        let share = self.share(0);
        Duration::from_secs_f64(share.conns() as f64 / share.open_per_ms / 1000.0) + RAMP_MARGIN
    }

    /// Process `index`'s share, its schedule counted from `epoch`.
    pub fn share(&self, index: usize) -> Share {
        let part = |n: usize| n / self.processes + usize::from(index < n % self.processes);
        let active = part(self.active);
        let all = connect::sources(self.sources).unwrap_or_default();
        // A contiguous slice of the sources (`check` refuses fewer sources than processes).
        let sources = if all.is_empty() {
            Vec::new()
        } else if all.len() < self.processes {
            vec![all[index % all.len()]]
        } else {
            let start: usize =
                (0..index).map(|i| all.len() / self.processes + usize::from(i < all.len() % self.processes)).sum();
            all[start..start + part(all.len())].to_vec()
        };
        Share {
            index,
            active,
            rate: if self.active == 0 { 0.0 } else { self.rate * active as f64 / self.active as f64 },
            silent: part(self.silent),
            idle: part(self.idle),
            slowloris: part(self.slowloris),
            unread: part(self.unread),
            sources,
            // The pace split exactly (a whole number a process would round 20 a ms over 56
            // processes up to 56 a ms).
            open_per_ms: self.open_per_ms as f64 / self.processes as f64,
        }
    }

    /// The schedule of a run whose ramp starts at `epoch`.
    pub fn schedule(&self, epoch: Instant) -> Schedule {
        let warmup_start = epoch + self.ramp();
        let window_start = warmup_start + self.warmup;
        let window_end = window_start + self.secs;
        let quiet = self.quiet_at.map(|q| window_start + q);
        Schedule {
            epoch,
            warmup_start,
            window_start,
            window_end,
            sending_end: quiet.unwrap_or(window_end),
            quiet: quiet.is_some(),
            end: epoch + self.max,
        }
    }

    /// The held connections' plan for a share.
    pub fn held_plan(&self, share: &Share) -> Plan {
        Plan {
            addr: self.addr,
            silent: share.silent,
            idle: share.idle,
            slowloris: share.slowloris,
            unread: share.unread,
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
            send_timeout: self.send_timeout,
            trickle: self.trickle,
            // Not used by the load run, which paces the opens itself (`run.rs`).
            open_per_ms: share.open_per_ms.ceil() as usize,
            max: self.max,
            trace: None,
            sources: share.sources.clone(),
        }
    }
}

/// One process's part of a run.
#[derive(Debug, Clone)]
pub struct Share {
    pub index: usize,
    pub active: usize,
    pub rate: f64,
    pub silent: usize,
    pub idle: usize,
    pub slowloris: usize,
    pub unread: usize,
    pub sources: Vec<Ipv4Addr>,
    /// Connections opened a millisecond (a fraction with many processes).
    pub open_per_ms: f64,
}

impl Share {
    /// The connections it holds.
    pub fn conns(&self) -> usize {
        self.active + self.silent + self.idle + self.slowloris + self.unread
    }
}

/// The instants of a run, the same in every process.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// The ramp's start: the first connect.
    pub epoch: Instant,
    /// The first request may be due.
    pub warmup_start: Instant,
    /// Requests due from here are measured.
    pub window_start: Instant,
    pub window_end: Instant,
    /// No request is due from here (`window_end`, or the quiet point).
    pub sending_end: Instant,
    /// The active connections go quiet at `sending_end` and their closes are timed.
    pub quiet: bool,
    /// The hard bound.
    pub end: Instant,
}

#[cfg(test)]
mod tests;
