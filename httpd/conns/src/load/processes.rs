//! `--processes P`: the parent starts P copies of its own binary (the same flags, and the
//! hidden `--child INDEX --epoch-ns NS`), each running its share on the schedule counted from
//! the one epoch; each prints its result as one JSON line; the parent merges them. A child
//! dies with its parent (`PR_SET_PDEATHSIG`), however the parent ends.

use super::plan::Options;
use super::result::ProcessResult;
use crate::limits::{SPARE_FDS, raise_nofile};
use crate::mono::mono_ns;
use serde_json::Value;
use std::ffi::OsString;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Time the children get to start before the epoch (exec, and a loaded machine).
pub const START_MARGIN: Duration = Duration::from_millis(500);

/// The child's side: dies with the parent, runs share `index` from `epoch_ns`, prints its
/// line.
pub fn child(options: &Options, index: usize, epoch_ns: i128) -> Result<(), String> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).map_err(|e| format!("prctl: {e}"))?;
    let share = options.share(index);
    if let Err(e) = raise_nofile(share.conns() as u64 + SPARE_FDS) {
        eprintln!("shardwheel-load: child {index}: {e}");
    }
    let schedule = options.schedule(instant_at(epoch_ns));
    let result = super::run::run(options, &share, &schedule).map_err(|e| format!("child {index}: {e}"))?;
    println!("{}", result.to_json()?);
    Ok(())
}

/// The parent's side: starts the children with `args` (its own flags), waits for each and
/// merges their lines.
pub fn parent(options: &Options, args: &[OsString], epoch: Instant) -> Result<ProcessResult, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the binary's path: {e}"))?;
    let epoch_ns = mono_ns(epoch).to_string();
    let mut children: Vec<Child> = Vec::new();
    for index in 0..options.processes {
        let spawned = Command::new(&exe)
            .args(args)
            .args(["--child", &index.to_string(), "--epoch-ns", &epoch_ns])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn();
        match spawned {
            Ok(child) => children.push(child),
            Err(e) => {
                for mut child in children {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                return Err(format!("starting child {index}: {e}"));
            }
        }
    }
    let mut merged: Option<ProcessResult> = None;
    let mut failure = None;
    for (index, child) in children.into_iter().enumerate() {
        // Each child ends by its own `--max-secs`; its stdout is read to its end.
        let result = child.wait_with_output().map_err(|e| format!("child {index}: {e}")).and_then(|output| {
            if !output.status.success() {
                return Err(format!("child {index} failed: {}", output.status));
            }
            let line = String::from_utf8_lossy(&output.stdout);
            let value: Value = serde_json::from_str(line.trim()).map_err(|e| format!("child {index}'s line: {e}"))?;
            ProcessResult::from_json(&value)
        });
        match (result, merged.as_mut()) {
            (Ok(result), Some(all)) => all.merge(result)?,
            (Ok(result), None) => merged = Some(result),
            (Err(e), _) => failure = failure.or(Some(e)),
        }
    }
    match (failure, merged) {
        (Some(e), _) => Err(e),
        (None, Some(all)) => Ok(all),
        (None, None) => Err("no child process".to_string()),
    }
}

/// The `Instant` at `CLOCK_MONOTONIC` nanoseconds `ns` (the parent's `mono_ns`).
fn instant_at(ns: i128) -> Instant {
    let now = Instant::now();
    let ahead = ns - mono_ns(now);
    let magnitude = Duration::from_nanos(u64::try_from(ahead.unsigned_abs()).unwrap_or(u64::MAX));
    if ahead >= 0 { now + magnitude } else { now.checked_sub(magnitude).unwrap_or(now) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_survives_the_trip_through_monotonic_nanoseconds() {
        let later = Instant::now() + Duration::from_millis(300);
        let back = instant_at(mono_ns(later));
        let gap = if back > later { back - later } else { later - back };
        assert!(gap < Duration::from_micros(10), "{gap:?}");
    }
}
