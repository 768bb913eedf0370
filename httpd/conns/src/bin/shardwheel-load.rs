//! `shardwheel-load`: the load generator for many connections. `--active N` keep-alive
//! connections send `GET --path` open loop at `--rate` req/s in all (each request's latency
//! from its scheduled instant, so a stalled server's queue shows), beside `--silent`,
//! `--idle`, `--slowloris` and `--unread` connections whose closes are timed against the
//! server's timeouts, from `--sources` loopback addresses, in `--processes` processes; it
//! reports the latency (HdrHistogram), the achieved rate, the errors, the closes' lateness,
//! the server's CPU per request and RSS per connection (`--server-pid`, `--server-tree`), and
//! the machine's load. The parts are the package's library (`src/load/`).

use clap::{CommandFactory, Parser};
use shardwheel_conns::load::plan::Options;
use shardwheel_conns::load::server::Watch;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// A bound on times given in seconds (a day), so a `Duration` never overflows.
const MAX_SECS: f64 = 86_400.0;

/// Open-loop keep-alive requests beside silent, idle and slowloris connections, against a
/// server on loopback.
#[derive(Debug, Parser)]
#[command(name = "shardwheel-load", version)]
struct Flags {
    /// The server (loopback only).
    #[arg(long)]
    addr: SocketAddr,
    /// Keep-alive connections sending requests.
    #[arg(long, default_value_t = 100)]
    active: usize,
    /// Requests per second over all the active connections, each connection on its own
    /// schedule.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// The requests' target.
    #[arg(long, default_value = "/")]
    path: String,
    /// Seconds of requests before the measured window, left out of the figures.
    #[arg(long, default_value_t = 2.0, value_parser = secs)]
    warmup_secs: f64,
    /// The measured window, in seconds.
    #[arg(long, default_value_t = 10.0, value_parser = positive_secs)]
    secs: f64,
    /// The run's hard bound, from the first connect: whatever is open then is reported open.
    #[arg(long, default_value_t = 60.0, value_parser = positive_secs)]
    max_secs: f64,
    /// Seconds into the window at which every active connection stops sending and goes idle;
    /// each close is timed against `--idle-timeout-ms` from its last response ("quiet").
    #[arg(long, value_parser = secs)]
    quiet_at: Option<f64>,
    /// Source addresses, 127.0.0.2 on (x.y.z.0 and .255 skipped), each with its own
    /// ephemeral ports; 0: the kernel's choice.
    #[arg(long, default_value_t = 0)]
    sources: usize,
    /// Connections that connect and send nothing.
    #[arg(long, default_value_t = 0)]
    silent: usize,
    /// Connections that send one `GET /`, read the response, then go idle.
    #[arg(long, default_value_t = 0)]
    idle: usize,
    /// Connections that trickle one header byte every `--trickle-ms`.
    #[arg(long, default_value_t = 0)]
    slowloris: usize,
    /// Connections that write pipelined `GET /`s and never read.
    #[arg(long, default_value_t = 0)]
    unread: usize,
    /// The server's header timeout (silent and slowloris: from the connect).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    header_timeout_ms: u64,
    /// The server's idle keep-alive timeout (idle and quiet: from the response).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    idle_timeout_ms: u64,
    /// The server's send timeout (unread: from the last write that went through).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    send_timeout_ms: u64,
    /// A slowloris connection's pause between bytes.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    trickle_ms: u64,
    /// Connections opened per millisecond, over all processes, before the warm-up.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    open_per_ms: u64,
    /// Processes, each holding 1/P of every class, of the rate and of the sources.
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// A server process whose CPU (over the window) and RSS are reported; repeatable.
    #[arg(long)]
    server_pid: Vec<u32>,
    /// A server process counted with all its descendants; repeatable.
    #[arg(long)]
    server_tree: Vec<u32>,
    /// The report as one JSON object on stdout, instead of the table.
    #[arg(long)]
    json: bool,
    /// Internal: run as child INDEX of `--processes`, printing its result as one JSON line.
    #[arg(long, hide = true, requires = "epoch_ns")]
    child: Option<usize>,
    /// Internal: the children's shared epoch, `CLOCK_MONOTONIC` nanoseconds.
    #[arg(long, hide = true)]
    epoch_ns: Option<i128>,
}

/// Seconds, 0 or more.
fn secs(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|_| format!("{text:?}: not a number of seconds"))?;
    if !(0.0..=MAX_SECS).contains(&value) {
        return Err(format!("{value}: from 0 to {MAX_SECS} seconds"));
    }
    Ok(value)
}

/// Seconds, more than 0.
fn positive_secs(text: &str) -> Result<f64, String> {
    let value = secs(text)?;
    if value == 0.0 {
        return Err("more than 0 seconds".to_string());
    }
    Ok(value)
}

impl Flags {
    fn options(&self) -> Options {
        Options {
            addr: self.addr,
            active: self.active,
            rate: self.rate,
            path: self.path.clone(),
            warmup: Duration::from_secs_f64(self.warmup_secs),
            secs: Duration::from_secs_f64(self.secs),
            max: Duration::from_secs_f64(self.max_secs),
            quiet_at: self.quiet_at.map(Duration::from_secs_f64),
            sources: self.sources,
            silent: self.silent,
            idle: self.idle,
            slowloris: self.slowloris,
            unread: self.unread,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            send_timeout: Duration::from_millis(self.send_timeout_ms),
            trickle: Duration::from_millis(self.trickle_ms),
            open_per_ms: usize::try_from(self.open_per_ms).unwrap_or(usize::MAX),
            processes: self.processes,
        }
    }
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let options = flags.options();
    if let Err(e) = options.check() {
        Flags::command().error(clap::error::ErrorKind::InvalidValue, e).exit();
    }
    if let (Some(index), Some(epoch_ns)) = (flags.child, flags.epoch_ns) {
        return match shardwheel_conns::load::child(&options, index, epoch_ns) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("shardwheel-load: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let watch = Watch { pids: flags.server_pid.clone(), trees: flags.server_tree.clone() };
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    match shardwheel_conns::load::run(&options, &watch, &args) {
        Ok(report) if flags.json => println!("{}", report.to_json()),
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("shardwheel-load: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
