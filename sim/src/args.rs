//! The command line (clap): the scenario's knobs, checked, and what to output.
//!
//! Every usage error (an unknown option, a value that does not parse, a fraction outside
//! 0..=1, settings that contradict each other) is a clap error: a clear message on stderr,
//! the usage line, and exit status 2.

use clap::error::ErrorKind;
use clap::{ArgAction, CommandFactory, Parser};
use shardwheel::Builder;
use std::path::PathBuf;
use std::time::Duration;

/// The scenario's settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub connections: usize,
    pub idle_timeout: Duration,
    pub idle_fraction: f64,
    pub request_timeout: Duration,
    pub lost_fraction: f64,
    pub in_flight: usize,
    pub producers: usize,
    pub shards: usize,
    pub tick: Duration,
    pub pin_threads: bool,
    pub rate: u64,
    pub duration: Duration,
    pub seed: u64,
}

/// What to print besides running the scenario.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// A JSON report on stdout instead of the text report.
    pub json: bool,
    /// Where to write the lateness histogram (SVG).
    pub plot: Option<PathBuf>,
    /// Run the same scenario on the peers and print a ratio table.
    pub compare: bool,
}

/// The cores available to the process: the default for producers and shards.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for Config {
    fn default() -> Self {
        Config {
            connections: 1_000_000,
            // 1,000,000 connections at 300,000 events/s: each active connection is touched
            // every ~3.3 s (at most, with every connection active), so an idle timeout of 5 s
            // leaves a comfortable margin, and quiet connections still time out within the
            // 10 s run.
            idle_timeout: Duration::from_millis(5_000),
            idle_fraction: 0.1,
            request_timeout: Duration::from_millis(1_000),
            lost_fraction: 0.001,
            in_flight: 1_024,
            producers: cores(),
            shards: cores(),
            tick: Duration::from_micros(1_000),
            pin_threads: true,
            rate: 300_000,
            duration: Duration::from_secs(10),
            seed: 0x5EED,
        }
    }
}

const ABOUT: &str = "A connection simulator for the shardwheel timer service";

const LONG_ABOUT: &str = "\
A connection simulator for the shardwheel timer service.

Simulates many connections, each with an idle timeout that activity pushes out
(Timeout::reset) and that fires when the connection goes quiet, plus one request timeout per
activity event that the response almost always cancels. Reports rates, expiry lateness and
memory, and checks that every timeout ended exactly once.

With --compare it runs literally the same workload (same connections, rates, durations and
seed) on the peers a user would pick instead, and prints a ratio table.";

const AFTER_HELP: &str = "\
Numbers may contain '_' separators (1_000_000).
Exit status: 0 when every self-check passes, 1 when one fails, 2 for a bad command line.

Examples:
  shardwheel-sim                                    the default scenario (1,000,000 connections)
  shardwheel-sim --connections 100_000 --json       a smaller run, machine-readable
  shardwheel-sim --plot lateness.svg                also draw the lateness histogram
  cargo run --release --features compare -- --compare   ratio table, tokio included";

/// The command line as clap sees it; [`Cli::resolve`] checks it and turns it into a
/// [`Config`] and an [`Output`].
#[derive(Debug, Parser)]
#[command(
    name = "shardwheel-sim",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = AFTER_HELP,
    max_term_width = 110
)]
pub struct Cli {
    /// Simulated connections
    ///
    /// Each has an idle timeout, armed at start.
    #[arg(long, value_name = "N", default_value = "1_000_000", value_parser = whole::<usize>)]
    connections: usize,

    /// Idle timeout of a connection, in ms
    ///
    /// Activity pushes it out with Timeout::reset; it fires when the connection goes quiet.
    #[arg(long = "idle-timeout-ms", value_name = "MS", default_value = "5_000", value_parser = whole::<u64>)]
    idle_timeout_ms: u64,

    /// Fraction of connections that go quiet (0..=1)
    ///
    /// They go quiet at a random time, early enough that their idle timeouts fire within the
    /// run. 0.1 means 10 %.
    #[arg(long, value_name = "F", default_value = "0.1", value_parser = fraction)]
    idle_fraction: f64,

    /// Request timeout, in ms
    ///
    /// Every activity event sends a request and arms its timeout; the response cancels it.
    #[arg(long = "request-timeout-ms", value_name = "MS", default_value = "1_000", value_parser = whole::<u64>)]
    request_timeout_ms: u64,

    /// Fraction of requests never answered (0..=1)
    ///
    /// Their request timeouts fire. 0.001 means 0.1 %.
    #[arg(long, value_name = "F", default_value = "0.001", value_parser = fraction)]
    lost_fraction: f64,

    /// Requests in flight per producer
    ///
    /// A request's response arrives (its timeout is cancelled) after N more requests.
    #[arg(long, value_name = "N", default_value = "1_024", value_parser = whole::<usize>)]
    in_flight: usize,

    /// Producer threads [default: the cores available]
    ///
    /// Each owns a disjoint slice of the connections and paces activity over it at its share
    /// of the rate.
    #[arg(long, value_name = "N", value_parser = whole::<usize>)]
    producers: Option<usize>,

    /// Timer shards, one thread each [default: the cores available]
    ///
    /// With --compare, tokio's runtime gets as many worker threads; the other peers have one
    /// thread.
    #[arg(long, value_name = "N", value_parser = whole::<usize>)]
    shards: Option<usize>,

    /// Timer wheel tick, in µs
    ///
    /// A timeout fires at the first tick at or after its deadline. The Netty-style peer ticks
    /// at the same rate.
    #[arg(long = "tick-us", value_name = "US", default_value = "1_000", value_parser = whole::<u64>)]
    tick_us: u64,

    /// Pin shard i to core i
    ///
    /// true: shard i runs on core i; false: the OS places the shard threads.
    #[arg(
        long,
        value_name = "BOOL",
        default_value = "true",
        num_args = 0..=1,
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = boolean
    )]
    pin_threads: bool,

    /// Activity events per second
    ///
    /// Over all producers. Each event resets a connection's idle timeout, arms a request
    /// timeout and cancels an older one.
    #[arg(long, value_name = "N", default_value = "300_000", value_parser = whole::<u64>)]
    rate: u64,

    /// Length of the steady state, in seconds
    ///
    /// Fractions allowed (2.5). Arming before and stopping after come on top.
    #[arg(long = "duration-secs", value_name = "S", default_value = "10", value_parser = seconds)]
    duration_secs: f64,

    /// Seed of the random choices
    ///
    /// Which connections go quiet and when, which requests are lost: the same for every timer.
    #[arg(long, value_name = "N", default_value = "24301", value_parser = whole::<u64>)]
    seed: u64,

    /// Print the report as JSON
    ///
    /// On stdout, instead of the text report: configuration, rates, lateness percentiles,
    /// memory, CPU, stats, self-check, and the ratio rows with --compare.
    #[arg(long)]
    json: bool,

    /// Draw the lateness histogram (SVG)
    ///
    /// Idle and request expiries on a log lateness axis, the tick marked; with --compare, a
    /// second panel with every timer.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,

    /// Run the same scenario on the peers too; print a ratio table
    ///
    /// The peers: a Netty-architecture hashed wheel, a Mutex<BinaryHeap> timer, and tokio's
    /// timers when built with --features compare.
    #[arg(long)]
    compare: bool,
}

/// A value that parses: the message clap prints after "invalid value '…' for '--…'".
type Parsed<T> = Result<T, String>;

fn strip(value: &str) -> String {
    value.trim().chars().filter(|&c| c != '_').collect()
}

fn whole<T: std::str::FromStr>(value: &str) -> Parsed<T> {
    strip(value).parse().map_err(|_| "expected a whole number (0 or more, within range)".to_owned())
}

fn number(value: &str) -> Parsed<f64> {
    match strip(value).parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err("expected a number".to_owned()),
    }
}

fn fraction(value: &str) -> Parsed<f64> {
    let f = number(value)?;
    if (0.0..=1.0).contains(&f) { Ok(f) } else { Err("must be between 0 and 1 (0.1 means 10 %)".to_owned()) }
}

fn seconds(value: &str) -> Parsed<f64> {
    let secs = number(value)?;
    if secs > 0.0 && secs <= 86_400.0 {
        Ok(secs)
    } else {
        Err("must be more than 0 and at most 86,400 (one day)".to_owned())
    }
}

fn boolean(value: &str) -> Parsed<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err("expected true or false".to_owned()),
    }
}

impl Cli {
    /// Checks the settings against each other and against the library's limits.
    pub fn resolve(self) -> Result<(Config, Output), clap::Error> {
        let c = Config {
            connections: self.connections,
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            idle_fraction: self.idle_fraction,
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            lost_fraction: self.lost_fraction,
            in_flight: self.in_flight,
            producers: self.producers.unwrap_or_else(cores),
            shards: self.shards.unwrap_or_else(cores),
            tick: Duration::from_micros(self.tick_us),
            pin_threads: self.pin_threads,
            rate: self.rate,
            duration: Duration::from_secs_f64(self.duration_secs),
            seed: self.seed,
        };
        validate(&c)?;
        if let Some(path) = &self.plot
            && path.as_os_str().is_empty()
        {
            return Err(invalid("plot", "needs a file name, such as lateness.svg".into()));
        }
        Ok((c, Output { json: self.json, plot: self.plot, compare: self.compare }))
    }
}

/// Parses the arguments (with the program name first) and checks them.
pub fn parse<I, T>(args: I) -> Result<(Config, Output), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args)?.resolve()
}

/// A usage error about one option, formatted (and exiting with status 2) as clap's own.
fn invalid(name: &str, why: String) -> clap::Error {
    Cli::command().error(ErrorKind::ValueValidation, format!("invalid --{name}: {why}"))
}

fn validate(c: &Config) -> Result<(), clap::Error> {
    let err = |name: &str, why: String| Err(invalid(name, why));
    if c.connections == 0 {
        return err("connections", "at least one connection is needed".into());
    }
    if c.connections > u32::MAX as usize {
        return err("connections", format!("at most {} connections", group(u32::MAX.into())));
    }
    if c.producers == 0 {
        return err("producers", "at least one producer thread is needed".into());
    }
    if c.producers > 1024 {
        return err("producers", "at most 1,024 producer threads".into());
    }
    if c.producers > c.connections {
        return err(
            "producers",
            format!("{} producers for {} connections: each producer needs a connection", c.producers, c.connections),
        );
    }
    if c.shards == 0 {
        return err("shards", "at least one shard is needed".into());
    }
    if c.shards > Builder::MAX_SHARDS {
        return err("shards", format!("at most {} shards", group(Builder::MAX_SHARDS as u64)));
    }
    if c.tick < Builder::MIN_TICK || c.tick > Builder::MAX_TICK {
        return err(
            "tick-us",
            format!(
                "the tick must be between {} and {} µs",
                group(Builder::MIN_TICK.as_micros() as u64),
                group(Builder::MAX_TICK.as_micros() as u64)
            ),
        );
    }
    if c.idle_timeout.is_zero() {
        return err("idle-timeout-ms", "must be at least 1 ms".into());
    }
    if c.request_timeout.is_zero() {
        return err("request-timeout-ms", "must be at least 1 ms".into());
    }
    if c.in_flight == 0 {
        return err("in-flight", "at least one request must be able to be in flight".into());
    }
    if c.in_flight > 1 << 24 {
        return err("in-flight", format!("at most {} per producer", group(1 << 24)));
    }
    if c.rate == 0 {
        return err("rate", "at least one event per second".into());
    }
    if c.rate > 1_000_000_000 {
        return err("rate", "at most 1,000,000,000 events per second".into());
    }
    Ok(())
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

    /// The longest time between two activity events on one active connection: the largest
    /// producer's slice, visited round-robin at its share of the rate (while every
    /// connection is still active; quiet ones drop out of the round).
    pub fn round_robin_period(&self) -> Duration {
        Duration::from_secs_f64(self.connections_of(0) as f64 / self.rate_per_producer())
    }

    /// How long a request waits for its response: the time for `in_flight` more requests.
    pub fn response_delay(&self) -> Duration {
        Duration::from_secs_f64(self.in_flight as f64 / self.rate_per_producer())
    }

    /// Settings that make the scenario miss its point, though it can run.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        let period = self.round_robin_period();
        if period.as_secs_f64() > 0.75 * self.idle_timeout.as_secs_f64() {
            let needed = (self.connections as f64 / (0.75 * self.idle_timeout.as_secs_f64())).ceil();
            w.push(format!(
                "--rate {} is too low for --idle-timeout-ms {}: each active connection gets activity only every \
                 {:.2} s, so active connections may time out; use --rate {} or more (or a longer idle timeout)",
                group(self.rate),
                group(self.idle_timeout.as_millis() as u64),
                period.as_secs_f64(),
                group(needed as u64),
            ));
        }
        if self.response_delay().as_secs_f64() > 0.5 * self.request_timeout.as_secs_f64() {
            w.push(format!(
                "responses arrive after ~{:.1} ms ({} requests in flight per producer), too close to the request \
                 timeout of {} ms: requests that are not lost may time out; lower --in-flight or raise --rate",
                self.response_delay().as_secs_f64() * 1e3,
                group(self.in_flight as u64),
                group(self.request_timeout.as_millis() as u64),
            ));
        }
        if self.idle_fraction > 0.0 && self.duration <= self.idle_timeout {
            w.push(format!(
                "--duration-secs {} is not longer than the idle timeout ({} ms): quiet connections will not time \
                 out within the run (stop() hands their timeouts back instead)",
                self.duration.as_secs_f64(),
                group(self.idle_timeout.as_millis() as u64),
            ));
        }
        if self.lost_fraction > 0.0 && self.duration <= self.request_timeout {
            w.push(format!(
                "--duration-secs {} is not longer than the request timeout ({} ms): lost requests will not time \
                 out within the run",
                self.duration.as_secs_f64(),
                group(self.request_timeout.as_millis() as u64),
            ));
        }
        w
    }
}

/// `1234567` → `"1,234,567"`.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<(Config, Output), clap::Error> {
        parse(std::iter::once("shardwheel-sim").chain(s.split_whitespace()))
    }

    fn run(s: &str) -> (Config, Output) {
        parse_str(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_match_config_default() {
        let (c, out) = run("");
        let d = Config::default();
        assert_eq!(c.connections, d.connections);
        assert_eq!(c.idle_timeout, d.idle_timeout);
        assert_eq!(c.idle_fraction, d.idle_fraction);
        assert_eq!(c.request_timeout, d.request_timeout);
        assert_eq!(c.lost_fraction, d.lost_fraction);
        assert_eq!(c.in_flight, d.in_flight);
        assert_eq!(c.producers, d.producers);
        assert_eq!(c.shards, d.shards);
        assert_eq!(c.tick, d.tick);
        assert_eq!(c.pin_threads, d.pin_threads);
        assert_eq!(c.rate, d.rate);
        assert_eq!(c.duration, d.duration);
        assert_eq!(c.seed, d.seed);
        assert!(!out.json && !out.compare && out.plot.is_none());
    }

    #[test]
    fn overrides() {
        let (c, out) =
            run("--connections 10_000 --duration-secs=2 --idle-fraction 0.5 --tick-us 100 --pin-threads false \
             --producers 3 --shards 5 --seed 7 --json --plot x.svg --compare");
        assert_eq!(c.connections, 10_000);
        assert_eq!(c.duration, Duration::from_secs(2));
        assert_eq!(c.idle_fraction, 0.5);
        assert_eq!(c.tick, Duration::from_micros(100));
        assert!(!c.pin_threads);
        assert_eq!((c.producers, c.shards, c.seed), (3, 5, 7));
        assert!(out.json && out.compare);
        assert_eq!(out.plot, Some(PathBuf::from("x.svg")));
        // A bare --pin-threads means true.
        assert!(run("--pin-threads").0.pin_threads);
        assert!(!run("--pin-threads=off").0.pin_threads);
    }

    #[test]
    fn help_and_version_exit_zero() {
        for flag in ["--help", "-h", "--version"] {
            let e = parse_str(flag).unwrap_err();
            assert_eq!(e.exit_code(), 0, "{flag}");
        }
        let help = Cli::command().render_long_help().to_string();
        for option in ["--idle-timeout-ms", "--compare", "--json", "--plot", "[default: 1_000_000]"] {
            assert!(help.contains(option), "--help lacks {option}:\n{help}");
        }
    }

    #[test]
    fn bad_arguments_are_usage_errors_with_status_2() {
        for (bad, says) in [
            ("--connections", "a value is required"),
            ("--connections abc", "expected a whole number"),
            ("--connections -5", "unexpected argument"),
            ("--connections 0", "at least one connection"),
            ("--nope 1", "unexpected argument '--nope'"),
            ("stray", "unexpected argument 'stray'"),
            ("--idle-fraction 1.5", "between 0 and 1"),
            ("--lost-fraction nan", "expected a number"),
            ("--lost-fraction -0.1", "unexpected argument"),
            ("--tick-us 1", "the tick must be between"),
            ("--duration-secs 0", "more than 0"),
            ("--producers 0", "at least one producer"),
            ("--connections 2 --producers 3", "each producer needs a connection"),
            ("--rate 0", "at least one event"),
            ("--pin-threads maybe", "expected true or false"),
            ("--in-flight 0", "in flight"),
            ("--shards 100000", "at most 4,096 shards"),
        ] {
            let e = match parse_str(bad) {
                Ok(_) => panic!("{bad} should be rejected"),
                Err(e) => e,
            };
            assert_eq!(e.exit_code(), 2, "{bad}");
            let text = e.to_string();
            assert!(text.contains(says), "{bad}: {text}");
        }
    }

    #[test]
    fn groups_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1_000), "1,000");
        assert_eq!(group(1_234_567), "1,234,567");
        assert_eq!(group(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn slices_cover_every_connection() {
        let (c, _) = run("--connections 10 --producers 3");
        assert_eq!((0..3).map(|p| c.connections_of(p)).sum::<usize>(), 10);
        assert_eq!(c.connections_of(0), 4);
    }

    #[test]
    fn default_rate_keeps_active_connections_alive() {
        let c = Config { producers: 2, shards: 2, ..Config::default() };
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    }

    #[test]
    fn warnings_name_the_knob_to_turn() {
        let (c, _) = run("--connections 1_000_000 --rate 1_000 --duration-secs 1");
        let w = c.warnings().join("\n");
        assert!(w.contains("--rate 1,000 is too low"), "{w}");
        assert!(w.contains("not longer than the idle timeout"), "{w}");
    }
}
