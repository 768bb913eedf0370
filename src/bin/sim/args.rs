//! Command-line options, parsed by hand: `--name value` or `--name=value`.

use shardwheel::Builder;
use std::fmt;
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

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    Run(Config),
    Help,
}

/// A bad command line; the message names the option and what is wrong with it.
#[derive(Debug)]
pub struct ArgError(String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
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

/// One option: its name, the placeholder of its value, and what it does.
struct Opt {
    name: &'static str,
    value: &'static str,
    help: &'static str,
}

const OPTS: &[Opt] = &[
    Opt {
        name: "connections",
        value: "N",
        help: "simulated connections, each with an idle timeout armed at start",
    },
    Opt {
        name: "idle-timeout-ms",
        value: "MS",
        help: "idle timeout; activity pushes it out with Timeout::reset, it fires when a connection goes quiet",
    },
    Opt {
        name: "idle-fraction",
        value: "F",
        help: "fraction of connections (0..=1) that go quiet at a random time, so their idle timeouts fire",
    },
    Opt {
        name: "request-timeout-ms",
        value: "MS",
        help: "per-request timeout, armed by every activity event and cancelled when the response arrives",
    },
    Opt {
        name: "lost-fraction",
        value: "F",
        help: "fraction of requests (0..=1) that never get a response, so their timeouts fire",
    },
    Opt {
        name: "in-flight",
        value: "N",
        help: "requests in flight per producer: a response arrives (its timeout is cancelled) after N more requests",
    },
    Opt {
        name: "producers",
        value: "N",
        help: "producer threads; each owns a disjoint slice of the connections",
    },
    Opt {
        name: "shards",
        value: "N",
        help: "timer service shards (one thread each)",
    },
    Opt {
        name: "tick-us",
        value: "US",
        help: "timer wheel tick in microseconds",
    },
    Opt {
        name: "pin-threads",
        value: "BOOL",
        help: "pin shard i to core i (true) or let the OS place the shard threads (false)",
    },
    Opt {
        name: "rate",
        value: "N",
        help: "activity events per second, over all producers (each: one reset + one request)",
    },
    Opt {
        name: "duration-secs",
        value: "S",
        help: "length of the steady state in seconds (fractions allowed)",
    },
    Opt {
        name: "seed",
        value: "N",
        help: "seed of the random choices (which connections go quiet and when, which requests are lost)",
    },
];

/// The text of `--help`.
pub fn help() -> String {
    let d = Config::default();
    let default_of = |name: &str| -> String {
        match name {
            "connections" => group(d.connections as u64),
            "idle-timeout-ms" => group(d.idle_timeout.as_millis() as u64),
            "idle-fraction" => d.idle_fraction.to_string(),
            "request-timeout-ms" => group(d.request_timeout.as_millis() as u64),
            "lost-fraction" => d.lost_fraction.to_string(),
            "in-flight" => group(d.in_flight as u64),
            "producers" => format!("{} (cores available)", d.producers),
            "shards" => format!("{} (cores available)", d.shards),
            "tick-us" => group(d.tick.as_micros() as u64),
            "pin-threads" => d.pin_threads.to_string(),
            "rate" => group(d.rate),
            "duration-secs" => d.duration.as_secs_f64().to_string(),
            "seed" => d.seed.to_string(),
            _ => unreachable!("every option has a default"),
        }
    };
    let mut out = String::from(
        "shardwheel-sim: a connection simulator for the shardwheel timer service\n\
         \n\
         Simulates many connections, each with an idle timeout that activity pushes out\n\
         (Timeout::reset) and that fires when the connection goes quiet, plus one request\n\
         timeout per activity event that the response almost always cancels. Reports rates,\n\
         expiry lateness and memory, and checks that every timeout ended exactly once.\n\
         \n\
         USAGE:\n    shardwheel-sim [--option value]...   (or --option=value)\n\
         \n\
         OPTIONS:\n",
    );
    for opt in OPTS {
        let flag = format!("--{} <{}>", opt.name, opt.value);
        out.push_str(&format!("    {flag:<28}{}\n", opt.help));
        out.push_str(&format!("    {:<28}[default: {}]\n", "", default_of(opt.name)));
    }
    out.push_str(&format!("    {:<28}print this help and exit\n", "-h, --help"));
    out.push_str(
        "\nNumbers may contain '_' separators (1_000_000).\n\
         Exit status: 0 when the self-check passes, 1 when it fails, 2 for a bad command line.\n",
    );
    out
}

/// Parses the arguments (without the program name).
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Parsed, ArgError> {
    let mut config = Config::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Parsed::Help);
        }
        let Some(body) = arg.strip_prefix("--") else {
            return Err(ArgError(format!(
                "unexpected argument '{arg}': options look like --name value"
            )));
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (body, None),
        };
        if !OPTS.iter().any(|o| o.name == name) {
            return Err(ArgError(format!("unknown option '--{name}'")));
        }
        let value = match inline {
            Some(v) => v,
            None => args
                .next()
                .ok_or_else(|| ArgError(format!("option '--{name}' needs a value")))?,
        };
        set(&mut config, name, &value)?;
    }
    validate(&config)?;
    Ok(Parsed::Run(config))
}

fn set(c: &mut Config, name: &str, value: &str) -> Result<(), ArgError> {
    match name {
        "connections" => c.connections = int(name, value)?,
        "idle-timeout-ms" => c.idle_timeout = Duration::from_millis(int(name, value)?),
        "idle-fraction" => c.idle_fraction = fraction(name, value)?,
        "request-timeout-ms" => c.request_timeout = Duration::from_millis(int(name, value)?),
        "lost-fraction" => c.lost_fraction = fraction(name, value)?,
        "in-flight" => c.in_flight = int(name, value)?,
        "producers" => c.producers = int(name, value)?,
        "shards" => c.shards = int(name, value)?,
        "tick-us" => c.tick = Duration::from_micros(int(name, value)?),
        "pin-threads" => {
            c.pin_threads = match value.trim().to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => true,
                "false" | "no" | "off" | "0" => false,
                _ => return Err(bad(name, value, "expected true or false")),
            }
        }
        "rate" => c.rate = int(name, value)?,
        "duration-secs" => {
            let secs = float(name, value)?;
            if !(secs > 0.0 && secs <= 86_400.0) {
                return Err(bad(name, value, "must be more than 0 and at most 86,400 (one day)"));
            }
            c.duration = Duration::from_secs_f64(secs);
        }
        "seed" => c.seed = int(name, value)?,
        _ => unreachable!("names are checked against OPTS"),
    }
    Ok(())
}

fn bad(name: &str, value: &str, why: &str) -> ArgError {
    ArgError(format!("invalid value '{value}' for --{name}: {why}"))
}

fn int<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, ArgError> {
    let digits: String = value.trim().chars().filter(|&c| c != '_').collect();
    digits
        .parse()
        .map_err(|_| bad(name, value, "expected a whole number (0 or more, within range)"))
}

fn float(name: &str, value: &str) -> Result<f64, ArgError> {
    let digits: String = value.trim().chars().filter(|&c| c != '_').collect();
    match digits.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(bad(name, value, "expected a number")),
    }
}

fn fraction(name: &str, value: &str) -> Result<f64, ArgError> {
    let f = float(name, value)?;
    if (0.0..=1.0).contains(&f) {
        Ok(f)
    } else {
        Err(bad(name, value, "must be between 0 and 1 (0.1 means 10 %)"))
    }
}

/// Checks the settings against each other and against the library's limits.
fn validate(c: &Config) -> Result<(), ArgError> {
    let err = |name: &str, why: String| Err(ArgError(format!("invalid --{name}: {why}")));
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
            format!(
                "{} producers for {} connections: each producer needs a connection",
                c.producers, c.connections
            ),
        );
    }
    if c.shards == 0 {
        return err("shards", "at least one shard is needed".into());
    }
    if c.shards > Builder::MAX_SHARDS {
        return err(
            "shards",
            format!("at most {} shards", group(Builder::MAX_SHARDS as u64)),
        );
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

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    fn run(s: &str) -> Config {
        match parse(args(s)) {
            Ok(Parsed::Run(c)) => c,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn defaults_and_overrides() {
        let c = run("");
        assert_eq!(c.connections, 1_000_000);
        let c = run("--connections 10_000 --duration-secs=2 --idle-fraction 0.5 --tick-us 100");
        assert_eq!(c.connections, 10_000);
        assert_eq!(c.duration, Duration::from_secs(2));
        assert_eq!(c.idle_fraction, 0.5);
        assert_eq!(c.tick, Duration::from_micros(100));
    }

    #[test]
    fn help_wins() {
        assert!(matches!(parse(args("--connections 5 --help")), Ok(Parsed::Help)));
        assert!(matches!(parse(args("-h")), Ok(Parsed::Help)));
        assert!(help().contains("--idle-timeout-ms"));
    }

    #[test]
    fn bad_arguments_are_errors() {
        for bad in [
            "--connections",
            "--connections abc",
            "--connections -5",
            "--connections 0",
            "--nope 1",
            "stray",
            "--idle-fraction 1.5",
            "--lost-fraction nan",
            "--tick-us 1",
            "--duration-secs 0",
            "--producers 0",
            "--connections 2 --producers 3",
            "--rate 0",
            "--pin-threads maybe",
        ] {
            assert!(parse(args(bad)).is_err(), "{bad} should be rejected");
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
        let c = run("--connections 10 --producers 3");
        assert_eq!((0..3).map(|p| c.connections_of(p)).sum::<usize>(), 10);
        assert_eq!(c.connections_of(0), 4);
    }

    #[test]
    fn default_rate_keeps_active_connections_alive() {
        let c = Config {
            producers: 2,
            shards: 2,
            ..Config::default()
        };
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    }
}
