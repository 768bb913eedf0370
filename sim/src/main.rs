//! `shardwheel-sim`: a connection simulator for the shardwheel timer service, and the tool
//! that compares it with what users would pick instead.
//!
//! A million connections (by default), each with an idle timeout that activity pushes out
//! with `Timeout::reset` and that fires when the connection goes quiet, and a request
//! timeout per activity event that the response almost always cancels. It reports rates,
//! expiry lateness, memory and the service's stats, and checks that every timeout ended
//! exactly once. `--compare` runs the same scenario on the peers and prints a ratio table;
//! `--json` and `--plot` give the report to machines and to eyes; `--verbose` prints every
//! table. `--help` lists the knobs. The run: `scenario.rs` (`producer.rs`, `tally.rs`,
//! `timer.rs`); what it shows: `figures.rs`, `report.rs`, `plot.rs`.
//!
//! Exit status: 0 when every self-check passes, 1 when one fails (or the plot could not be
//! written), 2 for a bad command line or settings the service refuses.

mod args;
mod figures;
mod histogram;
mod plot;
mod producer;
mod progress;
mod report;
mod scenario;
mod tally;
mod timer;
mod units;

use std::process::ExitCode;

/// Counts live heap bytes, for the memory figures; otherwise the system allocator.
#[global_allocator]
static ALLOC: shardwheel_peers::counting::Counting = shardwheel_peers::counting::Counting;

fn main() -> ExitCode {
    // Help and version exit 0; usage errors print clap's message and exit 2.
    let (config, output) = args::parse(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let warnings = config.warnings();
    warnings.iter().for_each(|warning| progress::note(&format!("warning: {warning}")));
    let shardwheel = match timer::shardwheel(&config) {
        Ok(timer) => timer,
        Err(e) => {
            eprintln!("error: the timer service refused the settings: {e}");
            eprintln!("hint: run with --help to see every option and its default");
            return ExitCode::from(2);
        }
    };
    let runs = scenario::run_all(&config, shardwheel, output.compare);
    if output.json {
        println!("{}", report::json(&config, &warnings, &runs, output.compare));
    } else {
        print!("{}", report::text(&config, &warnings, &runs[0], output.verbose));
        if output.compare {
            print!("{}", report::compare_text(&runs, output.verbose));
        }
    }
    let plotted = output.plot.as_ref().is_none_or(|path| {
        let (written, at) = (plot::write(path, &config, &runs), path.display());
        match &written {
            Ok(()) => progress::note(&format!("lateness histogram written to {at}")),
            Err(e) => progress::note(&format!("error: could not write the plot to {at}: {e}")),
        }
        written.is_ok()
    });
    if figures::succeeded(&runs, plotted) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
