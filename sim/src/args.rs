//! The command line (clap): the scenario's knobs, each checked by its value parser, and what
//! to output. Every usage error is a clap error: a message, the usage line, exit status 2.

use crate::units::group;
use clap::builder::{BoolishValueParser, TypedValueParser};
use clap::error::ErrorKind;
use clap::{ArgAction, Args, CommandFactory, Parser};
use shardwheel::Builder;
use std::ffi::OsString;
use std::ops::{Bound, RangeBounds};
use std::path::PathBuf;
use std::time::Duration;

/// The command line: the scenario's settings and what to output.
#[derive(Debug, Parser)]
#[command(name = "shardwheel-sim", version, about = ABOUT)]
#[command(after_help = AFTER_HELP, max_term_width = 110)]
struct Cli {
    #[command(flatten)]
    config: Config,
    #[command(flatten)]
    output: Output,
}

/// The scenario's settings.
#[derive(Clone, Debug, Args)]
pub struct Config {
    /// Simulated connections, each with an idle timeout armed at start (at most 100 M: the
    /// simulator's own state alone is 16 B each)
    #[arg(long, value_name = "N", default_value = "1_000_000", value_parser = whole::<usize>(1, 100_000_000))]
    pub connections: usize,

    /// Idle timeout of a connection, in ms: activity pushes it out (Timeout::reset)
    #[arg(long = "idle-timeout-ms", value_name = "MS", default_value = "5_000", value_parser = whole(1, u64::MAX).map(Duration::from_millis))]
    pub idle_timeout: Duration,

    /// Fraction of connections that go quiet, early enough to time out within the run (0..=1)
    #[arg(long, value_name = "F", default_value = "0.1", value_parser = real(0.0..=1.0, FRACTION))]
    pub idle_fraction: f64,

    /// Request timeout, in ms: every activity event arms one; its response cancels it
    #[arg(long = "request-timeout-ms", value_name = "MS", default_value = "1_000", value_parser = whole(1, u64::MAX).map(Duration::from_millis))]
    pub request_timeout: Duration,

    /// Fraction of requests never answered, whose timeouts fire (0..=1)
    #[arg(long, value_name = "F", default_value = "0.001", value_parser = real(0.0..=1.0, FRACTION))]
    pub lost_fraction: f64,

    /// Requests in flight per producer: a response arrives N requests later
    #[arg(long, value_name = "N", default_value = "1_024", value_parser = whole::<usize>(1, 1 << 24))]
    pub in_flight: usize,

    /// Producer threads, each with a slice of the connections [default: the cores available]
    #[arg(long, value_name = "N", default_value_t = cores(), hide_default_value = true, value_parser = whole::<usize>(1, 1_024))]
    pub producers: usize,

    /// Timer shards, one thread each (tokio's workers with --compare) [default: the cores]
    #[arg(long, value_name = "N", default_value_t = cores(), hide_default_value = true,
          value_parser = whole::<usize>(1, Builder::MAX_SHARDS as u64))]
    pub shards: usize,

    /// Timer wheel tick, in µs (the Netty-style peer ticks at the same rate)
    #[arg(long = "tick-us", value_name = "US", default_value = "1_000",
          value_parser = whole(Builder::MIN_TICK.as_micros() as u64, Builder::MAX_TICK.as_micros() as u64).map(Duration::from_micros))]
    pub tick: Duration,

    /// Pin shard i to core i (false: the OS places the shard threads)
    #[arg(long, value_name = "BOOL", default_value = "true", num_args = 0..=1, default_missing_value = "true",
          action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub pin_threads: bool,

    /// Activity events per second, over all producers: a reset, a request, a cancel each
    #[arg(long, value_name = "N", default_value = "300_000", value_parser = whole::<u64>(1, 1_000_000_000))]
    pub rate: u64,

    /// Length of the steady state, in seconds (2.5 allowed); setup and stop come on top
    #[arg(long = "duration-secs", value_name = "S", default_value = "10", value_parser = real((Bound::Excluded(0.0), Bound::Included(86_400.0)), "more than 0 and at most 86,400 (one day)").map(Duration::from_secs_f64))]
    pub duration: Duration,

    /// Seed of the random choices (which connections go quiet and when, which requests are lost)
    #[arg(long, value_name = "N", default_value = "24301", value_parser = whole::<u64>(0, u64::MAX))]
    pub seed: u64,
}

/// What to print besides running the scenario.
#[derive(Clone, Debug, Default, Args)]
pub struct Output {
    /// Print the report as JSON on stdout, instead of the text report
    #[arg(long)]
    pub json: bool,

    /// Draw the lateness histogram (SVG); with --compare, a second panel with every timer
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    // Not a doc comment: rustdoc would read `<BinaryHeap>` as HTML.
    #[arg(long, help = "Also run the peers (a Netty-style wheel, a Mutex<BinaryHeap>, tokio); print a ratio table")]
    pub compare: bool,

    /// Print every table (configuration, memory, service stats, the checks' sums, every metric)
    #[arg(long, short)]
    pub verbose: bool,
}

/// The cores available to the process: the default for producers and shards.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

const ABOUT: &str = "A connection simulator for the shardwheel timer service: connections whose idle timeouts \
activity pushes out (Timeout::reset), and request timeouts their responses almost always cancel. Reports rates, \
expiry lateness and memory, and checks that every timeout ended exactly once; --compare runs the same workload on \
the peers a user would pick instead.";

const AFTER_HELP: &str = "\
Numbers may contain '_' separators (1_000_000).
Exit status: 0 when every self-check passes, 1 when one fails or the plot cannot be written, 2 for a bad command line.

Examples (from the repository's root):
  cargo run --release                               the default scenario (1,000,000 connections)
  cargo run --release -- --connections 100_000 --json   a smaller run, machine-readable
  cargo run --release -- --plot lateness.svg        also draw the lateness histogram
  cargo run --release -- --compare --verbose        the ratio table against every peer, in full";

/// A value parser's result: the message clap prints after "invalid value '…' for '--…'".
type Parsed<T> = Result<T, String>;

/// A whole number from `min` to `max`, with optional `_` separators.
fn whole<T: TryFrom<u64>>(min: u64, max: u64) -> impl Fn(&str) -> Parsed<T> + Clone + Send + Sync + 'static {
    move |value| match value.trim().replace('_', "").parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => T::try_from(n).map_err(|_| "out of range".to_owned()),
        _ if max == u64::MAX && min == 0 => Err("expected a whole number".to_owned()),
        _ if max == u64::MAX => Err(format!("expected a whole number, at least {min}")),
        _ => Err(format!("expected a whole number from {} to {}", group(min), group(max))),
    }
}

const FRACTION: &str = "between 0 and 1 (0.1 means 10 %)";

/// A number in `range`, with optional `_` separators; `range` says what it must be.
fn real<R>(range: R, says: &'static str) -> impl Fn(&str) -> Parsed<f64> + Clone + Send + Sync + 'static
where
    R: RangeBounds<f64> + Clone + Send + Sync + 'static,
{
    move |value| match value.trim().replace('_', "").parse::<f64>() {
        Ok(v) if range.contains(&v) => Ok(v),
        Ok(v) if v.is_finite() => Err(format!("must be {says}")),
        _ => Err("expected a number".to_owned()),
    }
}

/// Parses the arguments (with the program name first); checks what one value cannot.
pub fn parse(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> Result<(Config, Output), clap::Error> {
    let Cli { config, output } = Cli::try_parse_from(args)?;
    if let Some(plot) = output.plot.as_ref().filter(|p| !p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"))) {
        let why = format!("'{}': the plot is an SVG; give a path ending in .svg", plot.display());
        return Err(Cli::command().error(ErrorKind::ValueValidation, format!("invalid --plot {why}")));
    }
    if config.producers > config.connections {
        let why = format!("{} producers for {} connections: each needs one", config.producers, config.connections);
        return Err(Cli::command().error(ErrorKind::ValueValidation, format!("invalid --producers: {why}")));
    }
    Ok((config, output))
}

impl Config {
    /// Connections of producer `p` (the first ones get one more when they do not divide).
    pub fn connections_of(&self, p: usize) -> usize {
        self.connections / self.producers + usize::from(p < self.connections % self.producers)
    }

    /// Activity events per second of one producer.
    pub fn rate_per_producer(&self) -> f64 {
        self.rate as f64 / self.producers as f64
    }

    /// The longest time between two events on one active connection: the largest producer's
    /// slice, visited round-robin at its share of the rate.
    pub fn round_robin_period(&self) -> Duration {
        Duration::from_secs_f64(self.connections_of(0) as f64 / self.rate_per_producer())
    }

    /// How long a request waits for its response: the time for `in_flight` more requests.
    pub fn response_delay(&self) -> Duration {
        Duration::from_secs_f64(self.in_flight as f64 / self.rate_per_producer())
    }

    /// Settings that make the scenario miss its point, though it can run.
    pub fn warnings(&self) -> Vec<String> {
        let (idle_s, duration_s) = (self.idle_timeout.as_secs_f64(), self.duration.as_secs_f64());
        let [idle_ms, request_ms] = [self.idle_timeout, self.request_timeout].map(|d| group(d.as_millis() as u64));
        let (period, response) = (self.round_robin_period().as_secs_f64(), self.response_delay().as_secs_f64() * 1e3);
        let (rate, in_flight) = (group(self.rate), group(self.in_flight as u64));
        let needed = group((self.connections as f64 / (0.75 * idle_s)).ceil() as u64);
        let mut warnings = Vec::new();
        if period > 0.75 * idle_s {
            warnings.push(format!(
                "--rate {rate} is too low for --idle-timeout-ms {idle_ms}: each active connection gets activity \
                 only every {period:.2} s, so active connections may time out; use --rate {needed} or more (or a \
                 longer idle timeout)"
            ));
        }
        if response > 500.0 * self.request_timeout.as_secs_f64() {
            warnings.push(format!(
                "responses arrive after ~{response:.1} ms ({in_flight} requests in flight per producer), too close \
                 to the request timeout of {request_ms} ms: requests that are not lost may time out; lower \
                 --in-flight or raise --rate"
            ));
        }
        let end = "not longer than the";
        if self.idle_fraction > 0.0 && self.duration <= self.idle_timeout {
            warnings.push(format!(
                "--duration-secs {duration_s} is {end} idle timeout ({idle_ms} ms): quiet connections will not time \
                 out within the run (stop() hands their timeouts back instead)"
            ));
        }
        if self.lost_fraction > 0.0 && self.duration <= self.request_timeout {
            warnings.push(format!(
                "--duration-secs {duration_s} is {end} request timeout ({request_ms} ms): lost requests will not \
                 time out within the run"
            ));
        }
        warnings
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn parse_str(s: &str) -> Result<(Config, Output), clap::Error> {
        parse(std::iter::once("shardwheel-sim").chain(s.split_whitespace()))
    }

    #[test]
    fn defaults_overrides_slices_and_warnings() {
        Cli::command().debug_assert();
        let (c, out) = parse_str("").unwrap();
        let defaults = (c.connections, c.idle_timeout, c.seed, c.producers);
        assert_eq!(defaults, (1_000_000, Duration::from_secs(5), 24301, cores()));
        assert!(!out.json && !out.compare && !out.verbose && out.plot.is_none());
        let args = "--connections 10_000 --duration-secs=2 --idle-fraction 0.5 --tick-us 100 \
             --pin-threads false --producers 3 --shards 5 --seed 7 --json --plot x.svg --compare -v";
        let (c, out) = parse_str(args).unwrap();
        let set = (c.connections, c.duration, c.idle_fraction, c.tick, c.pin_threads, c.producers, c.shards, c.seed);
        assert_eq!(set, (10_000, Duration::from_secs(2), 0.5, Duration::from_micros(100), false, 3, 5, 7));
        assert!(out.json && out.compare && out.verbose && out.plot == Some(PathBuf::from("x.svg")));
        let pinned = |args| parse_str(args).unwrap().0.pin_threads;
        assert!(pinned("--pin-threads") && !pinned("--pin-threads=off"));
        assert!(["--help", "-h", "--version"].iter().all(|flag| parse_str(flag).unwrap_err().exit_code() == 0));
        let help = Cli::command().render_long_help().to_string();
        let options =
            ["--idle-timeout-ms", "--compare", "--json", "--plot", "--verbose", "[default: 1_000_000]", "cores]"];
        let missing: Vec<_> = options.into_iter().filter(|option| !help.contains(option)).collect();
        assert!(missing.is_empty(), "--help lacks {missing:?}:\n{help}");
        let c = parse_str("--connections 10 --producers 3").unwrap().0;
        assert_eq!(((0..3).map(|p| c.connections_of(p)).sum::<usize>(), c.connections_of(0)), (10, 4));
        let c = parse_str("--producers 2 --shards 2").unwrap().0;
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let w = parse_str("--connections 1_000_000 --rate 1_000 --duration-secs 1").unwrap().0.warnings().join("\n");
        assert!(w.contains("--rate 1,000 is too low") && w.contains("not longer than the idle timeout"), "{w}");
    }

    /// The simulator runs that CI (`.ci/run`, two at least) and the README give, as written,
    /// raise no warning: a run CI relies on must not be one the simulator says misses its point.
    #[test]
    fn the_ci_and_readme_runs_raise_no_warning() {
        let (ci, readme) = (include_str!("../../.ci/run"), include_str!("../../README.md"));
        let runs: Vec<_> = [ci, readme]
            .iter()
            .flat_map(|text| text.split("cargo run --release -- ").skip(1))
            .map(|rest| rest.split(['`', '#', '|', '\n']).next().unwrap_or_default())
            .filter(|args| !args.contains("--help"))
            .collect();
        assert!(runs.iter().filter(|args| args.contains("--duration-secs 2")).count() >= 2, "{runs:?}");
        for args in runs {
            let config = parse_str(args).unwrap_or_else(|e| panic!("{args}: {e}")).0;
            assert!(config.warnings().is_empty(), "{args}: {:?}", config.warnings());
        }
    }

    #[test]
    fn bad_arguments_are_usage_errors_with_status_2() {
        for (bad, says) in [
            ("--connections", "a value is required"),
            ("--connections abc", "expected a whole number from 1 to 100,000,000"),
            ("--connections 4294967295", "expected a whole number from 1 to 100,000,000"),
            ("--connections -5", "unexpected argument"),
            ("--nope 1", "unexpected argument '--nope'"),
            ("stray", "unexpected argument 'stray'"),
            ("--idle-fraction 1.5", "between 0 and 1"),
            ("--lost-fraction nan", "expected a number"),
            ("--tick-us 1", "from 10 to 3,600,000,000"),
            ("--idle-timeout-ms 0", "at least 1"),
            ("--duration-secs 0", "more than 0"),
            ("--connections 2 --producers 3", "each needs one"),
            ("--pin-threads maybe", "invalid value 'maybe'"),
            ("--shards 100000", "from 1 to 4,096"),
            ("--plot=", "a value is required for '--plot"),
            ("--plot lateness.png", "the plot is an SVG"),
        ] {
            let e = parse_str(bad).err().unwrap_or_else(|| panic!("{bad} should be rejected"));
            assert!(e.exit_code() == 2 && e.to_string().contains(says), "{bad}: {e}");
        }
    }
}
