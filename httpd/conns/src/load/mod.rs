//! `shardwheel-load`: open-loop keep-alive requests at a fixed rate beside held silent, idle,
//! slowloris and unread connections, from many source addresses and processes; each
//! request's latency from its scheduled instant (HdrHistogram), each close's lateness against
//! its timeout, and the server's CPU and memory over the measured window.
//!
//! - `plan.rs`: the options, their checks, a process's share and the shared schedule;
//! - `active.rs`: the active connections, their schedule, writes and responses;
//! - `counts.rs`: the requests' figures and histogram, and their merge;
//! - `run.rs`: one process's loop over its active and held connections;
//! - `result.rs`: one process's result, its line to the parent, and the merge;
//! - `processes.rs`: `--processes`, the children and their lines;
//! - `server.rs`: the server's CPU and RSS, the machine's load and memory, from /proc;
//! - `report.rs`: the one report, as text or JSON.

mod active;
mod counts;
pub mod plan;
mod processes;
pub mod report;
mod result;
mod run;
pub mod server;

use crate::limits::{SPARE_FDS, raise_nofile};
use plan::Options;
use report::Report;
use server::{Machine, Watch};
use std::ffi::OsString;
use std::time::Instant;

/// Runs a whole run in this process (one process) or in `options.processes` children
/// started with `args` (the flags as given), the server read by `watch` meanwhile.
pub fn run(options: &Options, watch: &Watch, args: &[OsString]) -> Result<Report, String> {
    options.check()?;
    watch.check()?;
    let machine_start = Machine::now();
    let epoch = Instant::now() + if options.processes > 1 { processes::START_MARGIN } else { Default::default() };
    let schedule = options.schedule(epoch);
    let watcher = (!watch.is_empty()).then(|| {
        let watch = watch.clone();
        std::thread::spawn(move || watch.measure(schedule.window_start, schedule.window_end))
    });
    let result = if options.processes > 1 {
        processes::parent(options, args, epoch)
    } else {
        let share = options.share(0);
        if let Err(e) = raise_nofile(share.conns() as u64 + SPARE_FDS) {
            eprintln!("shardwheel-load: {e}");
        }
        run::run(options, &share, &schedule).map_err(|e| e.to_string())
    };
    // The watcher ends by the window's end, which every run reaches before its own end.
    let server = watcher.map(|w| w.join().map_err(|_| "the /proc reader panicked".to_string())).transpose()?;
    Ok(Report { options: options.clone(), result: result?, server, machine_start, machine_end: Machine::now() })
}

/// The child's side of `--processes`: runs share `index` from `epoch_ns` and prints its line.
pub fn child(options: &Options, index: usize, epoch_ns: i128) -> Result<(), String> {
    processes::child(options, index, epoch_ns)
}
