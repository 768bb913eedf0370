//! `shardwheel-sim`: a connection simulator for the shardwheel timer service.
//!
//! A million connections (by default), each with an idle timeout that activity pushes out
//! with `Timeout::reset` and that fires when the connection goes quiet, and a request
//! timeout per activity event that the response almost always cancels. It reports rates,
//! expiry lateness, memory and the service's stats, and checks that every timeout ended
//! exactly once. `--help` lists the knobs.
//!
//! - `args.rs`: the command line;
//! - `scenario.rs`: connections, producers, tasks and their tallies, and the run itself;
//! - `histogram.rs`: the lock-free lateness histogram;
//! - `report.rs`: progress lines, the report and the self-check.
//!
//! Exit status: 0 when the self-check passes, 1 when it fails, 2 for a bad command line
//! (or settings the service refuses).

mod args;
mod histogram;
mod report;
mod scenario;

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let began = Instant::now();
    let config = match args::parse(std::env::args().skip(1)) {
        Ok(args::Parsed::Run(config)) => config,
        Ok(args::Parsed::Help) => {
            print!("{}", args::help());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("hint: run with --help to see every option and its default");
            return ExitCode::from(2);
        }
    };
    let warnings = config.warnings();
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    let outcome = match scenario::run(&config, began) {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("error: the timer service refused the settings: {e}");
            eprintln!("hint: run with --help to see every option and its default");
            return ExitCode::from(2);
        }
    };
    let (text, passed) = report::render(&config, &warnings, &outcome);
    print!("{text}");
    if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
