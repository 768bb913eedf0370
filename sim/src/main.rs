//! `shardwheel-sim`: a connection simulator for the shardwheel timer service, and the tool
//! that compares it with what users would pick instead.
//!
//! A million connections (by default), each with an idle timeout that activity pushes out
//! with `Timeout::reset` and that fires when the connection goes quiet, and a request
//! timeout per activity event that the response almost always cancels. It reports rates,
//! expiry lateness, memory and the service's stats, and checks that every timeout ended
//! exactly once. `--compare` runs the same scenario on the peers and prints a ratio table;
//! `--json` and `--plot` give the report to machines and to eyes. `--help` lists the knobs.
//!
//! - `args.rs`: the command line (clap);
//! - `timer.rs`: the small timer interface the scenario drives, and shardwheel behind it;
//! - `peers.rs`: the peers behind the same interface (`--compare`);
//! - `scenario.rs`: connections, producers, tasks and their tallies, and the run itself;
//! - `histogram.rs`: the lock-free lateness histogram;
//! - `measure.rs`: CPU time, live heap (a counting allocator) and resident memory;
//! - `progress.rs`: the progress bar, or lines when stderr is not a terminal;
//! - `report.rs`, `json.rs`, `plot.rs`: the text report and ratio table, the JSON report,
//!   the lateness plot.
//!
//! Exit status: 0 when every self-check passes, 1 when one fails, 2 for a bad command line
//! (or settings the service refuses); the plot failing to be written is reported, exit 1.

mod args;
mod histogram;
mod json;
mod measure;
mod peers;
mod plot;
mod progress;
mod report;
mod scenario;
mod timer;

use args::{Config, Output};
use progress::Progress;
use scenario::Outcome;
use std::process::ExitCode;
use timer::{Shardwheel, SimTimer};

/// Counts live heap bytes, for the memory figures; otherwise the system allocator.
#[global_allocator]
static ALLOC: measure::CountingAlloc = measure::CountingAlloc;

fn main() -> ExitCode {
    let (config, output) = match args::parse(std::env::args_os()) {
        Ok(parsed) => parsed,
        // Help and version exit 0; usage errors print clap's message and exit 2.
        Err(e) => e.exit(),
    };
    let warnings = config.warnings();
    for warning in &warnings {
        progress::note(&format!("warning: {warning}"));
    }
    let shardwheel = match Shardwheel::new(config.shards, config.tick, config.pin_threads) {
        Ok(timer) => timer,
        Err(e) => {
            eprintln!("error: the timer service refused the settings: {e}");
            eprintln!("hint: run with --help to see every option and its default");
            return ExitCode::from(2);
        }
    };
    let label = if output.compare { "shardwheel" } else { "" };
    let mut runs = vec![run_one(&config, shardwheel, label)];
    let mut notes = Vec::new();
    if output.compare {
        peers::run_all(&config, &mut runs, &mut notes);
    }

    let passed = runs.iter().all(report::passed);
    print_report(&config, &output, &warnings, &runs, &notes);
    let mut plotted = true;
    if let Some(path) = &output.plot {
        match plot::write(path, &config, &runs) {
            Ok(()) => progress::note(&format!("lateness histogram written to {}", path.display())),
            Err(e) => {
                eprintln!("error: could not write the plot to {}: {e}", path.display());
                plotted = false;
            }
        }
    }
    if passed && plotted { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Runs the scenario on one timer (then drops the timer); progress lines carry `label`.
pub fn run_one<T: SimTimer>(config: &Config, mut timer: T, label: &str) -> Outcome {
    let mut ui = Progress::new(label);
    let outcome = scenario::run(config, &mut timer, &mut ui);
    drop(timer);
    outcome
}

fn print_report(config: &Config, output: &Output, warnings: &[String], runs: &[Outcome], notes: &[String]) {
    if output.json {
        println!("{}", json::render(config, warnings, runs, output.compare, notes));
        return;
    }
    let (text, _) = report::render(config, warnings, &runs[0]);
    print!("{text}");
    if output.compare {
        print!("{}", report::render_compare(config, runs, notes));
    }
}
