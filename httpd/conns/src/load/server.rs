//! What the server costs and what the machine was doing, from /proc.
//!
//! CPU: `utime + stime` (fields 14 and 15 of `/proc/PID/stat`, after the command's closing
//! parenthesis, which may itself hold spaces or parentheses) in clock ticks
//! (`sysconf(_SC_CLK_TCK)`), read at the window's start and end: only the measured window's.
//! RSS: `VmRSS` of `/proc/PID/status`. A `--server-tree` PID counts it and every descendant
//! alive at each reading (found by their parent PIDs, so no kernel option is needed); a
//! process that ends inside the window takes its CPU time with it.
//! The machine: `/proc/loadavg`'s three loads, `/proc/meminfo`'s `Committed_AS` and
//! `MemAvailable`.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::fs;
use std::time::{Duration, Instant};

/// How often RSS is read for its peak.
const RSS_EVERY: Duration = Duration::from_millis(100);

/// The server's processes to read.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    /// Processes counted alone (`--server-pid`).
    pub pids: Vec<u32>,
    /// Processes counted with their descendants (`--server-tree`).
    pub trees: Vec<u32>,
}

/// One reading of the watched processes.
#[derive(Debug, Clone, Copy, Default)]
struct Reading {
    /// utime + stime, clock ticks.
    cpu_ticks: u64,
    rss_kib: u64,
    processes: usize,
}

/// The server over the window.
#[derive(Debug, Clone, Default)]
pub struct ServerCost {
    /// CPU seconds over the window.
    pub cpu_secs: f64,
    pub rss_start_kib: u64,
    pub rss_end_kib: u64,
    /// The highest reading, every `RSS_EVERY`, from the start to the window's end.
    pub rss_peak_kib: u64,
    /// Processes counted at the window's end.
    pub processes: usize,
}

impl Watch {
    /// Whether there is nothing to read.
    pub fn is_empty(&self) -> bool {
        self.pids.is_empty() && self.trees.is_empty()
    }

    /// Checks each PID exists now.
    pub fn check(&self) -> Result<(), String> {
        for pid in self.pids.iter().chain(&self.trees) {
            if stat_fields(*pid).is_none() {
                return Err(format!("--server-pid/--server-tree {pid}: no such process in /proc"));
            }
        }
        Ok(())
    }

    /// Reads the server from now to `window_end`: RSS now and every `RSS_EVERY`, CPU at
    /// `window_start` and `window_end`. Sleeps in between; bounded by `window_end`.
    pub fn measure(&self, window_start: Instant, window_end: Instant) -> ServerCost {
        let first = self.read();
        let mut peak = first.rss_kib;
        let mut at_start = None;
        loop {
            let now = Instant::now();
            if at_start.is_none() && now >= window_start {
                at_start = Some(self.read());
            }
            if now >= window_end {
                break;
            }
            let next = if at_start.is_none() { window_start } else { window_end };
            std::thread::sleep(next.saturating_duration_since(now).min(RSS_EVERY));
            peak = peak.max(self.read().rss_kib);
        }
        let end = self.read();
        let start = at_start.unwrap_or(first);
        let tick = clock_ticks_per_sec();
        ServerCost {
            cpu_secs: end.cpu_ticks.saturating_sub(start.cpu_ticks) as f64 / tick,
            rss_start_kib: first.rss_kib,
            rss_end_kib: end.rss_kib,
            rss_peak_kib: peak.max(end.rss_kib),
            processes: end.processes,
        }
    }

    /// Every watched process now, summed.
    fn read(&self) -> Reading {
        let mut pids: BTreeSet<u32> = self.pids.iter().copied().collect();
        if !self.trees.is_empty() {
            pids.extend(descendants(&self.trees));
        }
        let mut reading = Reading::default();
        for pid in pids {
            let Some(fields) = stat_fields(pid) else { continue };
            let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
            // After the command: field 3 (state) is [0]; utime (14) is [11], stime (15) [12].
            reading.cpu_ticks += field(11) + field(12);
            reading.rss_kib += status_kib(pid, "VmRSS:").unwrap_or(0);
            reading.processes += 1;
        }
        reading
    }
}

/// The fields of `/proc/PID/stat` after the command's closing parenthesis.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// `roots` and every process descending from them, by each process's parent PID.
fn descendants(roots: &[u32]) -> BTreeSet<u32> {
    let mut parents = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            // Field 4 (ppid) is [1] after the command.
            if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1).and_then(|p| p.parse::<u32>().ok())) {
                parents.push((pid, ppid));
            }
        }
    }
    let mut found: BTreeSet<u32> = roots.iter().copied().collect();
    // Each pass adds one generation; the tree is as deep as the passes that add something.
    loop {
        let before = found.len();
        for &(pid, ppid) in &parents {
            if found.contains(&ppid) {
                found.insert(pid);
            }
        }
        if found.len() == before {
            return found;
        }
    }
}

/// A `kB` line of `/proc/PID/status`.
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    kib_line(&fs::read_to_string(format!("/proc/{pid}/status")).ok()?, key)
}

/// The number on the line starting with `key` (`VmRSS:   1234 kB`).
fn kib_line(text: &str, key: &str) -> Option<u64> {
    text.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()
}

/// Clock ticks per second, for /proc's CPU times (100 on Linux when it cannot be read).
fn clock_ticks_per_sec() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(ticks)) if ticks > 0 => ticks as f64,
        _ => 100.0,
    }
}

/// What the machine was doing at one instant.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// 1, 5 and 15 minutes.
    pub load: [f64; 3],
    pub committed_kib: u64,
    pub available_kib: u64,
}

impl Machine {
    /// Reads it now (zeros for what cannot be read).
    pub fn now() -> Machine {
        let mut machine = Machine::default();
        if let Ok(text) = fs::read_to_string("/proc/loadavg") {
            for (slot, field) in machine.load.iter_mut().zip(text.split_whitespace()) {
                *slot = field.parse().unwrap_or(0.0);
            }
        }
        if let Ok(text) = fs::read_to_string("/proc/meminfo") {
            machine.committed_kib = kib_line(&text, "Committed_AS:").unwrap_or(0);
            machine.available_kib = kib_line(&text, "MemAvailable:").unwrap_or(0);
        }
        machine
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({ "load": self.load, "committed_kib": self.committed_kib, "available_kib": self.available_kib })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_process_reads_some_rss_and_is_its_own_tree() {
        let me = std::process::id();
        let watch = Watch { pids: vec![], trees: vec![me] };
        assert!(watch.read().rss_kib > 0);
        assert!(descendants(&[me]).contains(&me));
        assert!(watch.check().is_ok());
        assert!(Watch { pids: vec![u32::MAX], trees: vec![] }.check().is_err());
    }

    #[test]
    fn a_kib_line_is_read_by_its_key() {
        assert_eq!(kib_line("VmPeak:  10 kB\nVmRSS:\t  1234 kB\n", "VmRSS:"), Some(1234));
        assert!(Machine::now().available_kib > 0);
    }
}
