//! `shardwheel-conns`: the connection patterns wrk cannot make. It holds thousands of
//! silent connections (connect, send nothing), keep-alive connections that send one
//! `GET /`, read the response and go idle, and slowloris connections that trickle one header
//! byte at a time, all on one epoll loop; and for each, it measures when the server closed
//! it against when the server's timeout was due: count, closed, early (must be 0), lateness
//! p50 / p99 / max per class, as text or `--json`.
//!
//! Its loop and figures are the package's library (`src/lib.rs`), which the package's second
//! binary shares: `shardwheel-load` (`src/bin/shardwheel-load.rs`), the load generator that
//! sends open-loop keep-alive requests beside these connections, from many source addresses
//! and processes, and reports their latency and the server's CPU and RSS.

use clap::{CommandFactory, Parser};
use serde_json::json;
use shardwheel_conns::client::{self, Plan};
use shardwheel_conns::limits::raise_nofile;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use shardwheel_conns::limits::SPARE_FDS;

/// Silent, idle keep-alive and slowloris connections against a server on loopback; when
/// it closed each, against its header and idle timeouts.
#[derive(Debug, Parser)]
#[command(name = "shardwheel-conns", version)]
struct Flags {
    /// The server (loopback only).
    #[arg(long)]
    addr: SocketAddr,
    /// Connections that connect and send nothing.
    #[arg(long, default_value_t = 10_000)]
    silent: usize,
    /// Connections that send one `GET /`, read the response, then go idle.
    #[arg(long, default_value_t = 1_000)]
    idle: usize,
    /// Connections that trickle one header byte every `--trickle-ms`.
    #[arg(long, default_value_t = 200)]
    slowloris: usize,
    /// Connections that write pipelined `GET /`s and never read a response (closed at the
    /// server's send timeout).
    #[arg(long, default_value_t = 0)]
    unread: usize,
    /// The server's header timeout (silent and slowloris: from the connect).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    header_timeout_ms: u64,
    /// The server's idle keep-alive timeout (idle: from the response).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    idle_timeout_ms: u64,
    /// The server's send timeout (unread: from the last write that went through).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    send_timeout_ms: u64,
    /// A slowloris connection's pause between bytes.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    trickle_ms: u64,
    /// Connections opened per millisecond (a pace the server's accept queue keeps up with).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    open_per_ms: u64,
    /// The run's bound: connections still open then are reported open.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    max_secs: u64,
    /// The report as one JSON object on stdout, instead of the table.
    #[arg(long)]
    json: bool,
    /// A diagnostic: write to FILE, at the end, a line per connection (its local port, its
    /// class, when `connect` was called, when the response was read, when the close was
    /// seen; `CLOCK_MONOTONIC` ns), for `httpd/trace_join.py` to join with the server's
    /// `--trace`.
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    if !flags.addr.ip().is_loopback() {
        Flags::command().error(clap::error::ErrorKind::InvalidValue, "--addr must be a loopback address").exit();
    }
    let total = flags.silent + flags.idle + flags.slowloris + flags.unread;
    if let Err(e) = raise_nofile(total as u64 + SPARE_FDS) {
        eprintln!("shardwheel-conns: {e}");
    }
    let plan = Plan {
        addr: flags.addr,
        silent: flags.silent,
        idle: flags.idle,
        slowloris: flags.slowloris,
        unread: flags.unread,
        header_timeout: Duration::from_millis(flags.header_timeout_ms),
        idle_timeout: Duration::from_millis(flags.idle_timeout_ms),
        send_timeout: Duration::from_millis(flags.send_timeout_ms),
        trickle: Duration::from_millis(flags.trickle_ms),
        open_per_ms: usize::try_from(flags.open_per_ms).unwrap_or(usize::MAX),
        max: Duration::from_secs(flags.max_secs),
        trace: flags.trace.clone(),
        sources: Vec::new(),
    };
    let report = match client::run(&plan) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("shardwheel-conns: {e}");
            return ExitCode::FAILURE;
        }
    };
    if flags.json {
        let config = json!({
            "addr": flags.addr.to_string(),
            "header_timeout_ms": flags.header_timeout_ms,
            "idle_timeout_ms": flags.idle_timeout_ms,
            "send_timeout_ms": flags.send_timeout_ms,
            "trickle_ms": flags.trickle_ms,
            "open_per_ms": flags.open_per_ms,
            "max_secs": flags.max_secs,
        });
        println!("{}", report.to_json(config));
    } else {
        println!(
            "shardwheel-conns: {} (header timeout {} ms, idle timeout {} ms, send timeout {} ms, trickle {} ms)",
            flags.addr, flags.header_timeout_ms, flags.idle_timeout_ms, flags.send_timeout_ms, flags.trickle_ms
        );
        println!("{report}");
    }
    ExitCode::SUCCESS
}
