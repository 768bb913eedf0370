//! The accept path: a connection's header timer counts from the `accept` that returned it
//! (no earlier, so never early; no later, so a connection that waited in a busy turn is not
//! closed late by that wait), and the descriptor table is grown once at the start, so that
//! no `accept` waits for it to grow (in a process with threads each growth waits for an
//! RCU grace period: 8–15 ms measured on the project's machine).

mod common;

use common::Server;
use nix::sys::signal::Signal;
use std::time::Duration;

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock of `--trace`.
fn mono_now() -> i128 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec())
}

#[test]
fn the_header_timer_counts_from_the_accept_and_fires_no_earlier() {
    let header = Duration::from_millis(200);
    let trace = std::env::temp_dir().join(format!("shardwheel-httpd-accept-{}", std::process::id()));
    let server = Server::start(&[
        "--threads",
        "1",
        "--header-timeout-ms",
        "200",
        "--idle-timeout-ms",
        "300",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    let connect_called = mono_now();
    let mut client = server.connect();
    let port = client.stream.local_addr().unwrap().port();
    client.closed_at();
    let close_seen = mono_now();
    let (status, _) = server.stop_with(Signal::SIGTERM);
    assert!(status.success(), "{status}");

    let file = format!("{}.0", trace.display());
    let lines = std::fs::read_to_string(&file).expect("the trace");
    std::fs::remove_file(&file).unwrap();
    let line = lines
        .lines()
        .find(|l| l.split_whitespace().next() == Some(port.to_string().as_str()))
        .unwrap_or_else(|| panic!("no line for port {port} in {lines:?}"));
    // port woke called accepted why deadline fired closed
    let f: Vec<&str> = line.split_whitespace().collect();
    let ns = |i: usize| f[i].parse::<i128>().unwrap_or_else(|_| panic!("field {i} of {line:?}"));
    let (woke, called, accepted, deadline, fired, closed) = (ns(1), ns(2), ns(3), ns(5), ns(6), ns(7));
    assert_eq!(f[4], "HeaderTimeout", "{line}");
    assert!(connect_called <= accepted, "accepted before the connect call: {line}");
    assert!(woke <= called && called <= accepted, "{line}");
    // Counted from the accept's return, to the nanosecond: not from the turn's wake-up
    // (earlier than the kernel may have had the connection) nor from a later instant.
    assert_eq!(deadline - accepted, header.as_nanos() as i128, "{line}");
    assert!(fired >= deadline && closed >= deadline, "closed before its deadline: {line}");
    // The server stamps its close after the call returns; the client may see it first.
    assert!(closed < close_seen + 50_000_000, "{line}");
}

#[cfg(target_os = "linux")]
#[test]
fn the_descriptor_table_is_grown_for_max_conns_at_the_start() {
    let server = Server::start(&["--threads", "2", "--max-conns", "5000"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let size: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("FDSize:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("FDSize in /proc/PID/status");
    // As many as --max-conns and the spare need, or as the hard limit allows.
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let wanted = (5000 + 64).min(hard);
    assert!(size >= wanted, "the descriptor table holds {size}, {wanted} wanted");
}
