//! The process: a graceful stop on SIGTERM, SIGINT or `--for` that closes every thread's
//! connections and prints the summary, and bad flags refused with a usage error (status 2).

mod common;

use common::Server;
use nix::sys::signal::Signal;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn sigterm_closes_every_connection_and_prints_the_summary() {
    let server = Server::start(&["--threads", "2", "--header-timeout-ms", "5000", "--idle-timeout-ms", "5000"]);
    assert!(server.start_line.contains("header timeout 5000 ms, idle timeout 5000 ms"), "{}", server.start_line);
    assert!(server.start_line.contains("tick 250 us"), "{}", server.start_line);
    let mut idle = server.connect();
    idle.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(idle.response().status, 200);
    let mut silent = server.connect();
    // Both connections in: the idle one's /stats counts them (and itself as a request).
    idle.send("GET /stats HTTP/1.1\r\nHost: t\r\n\r\n");
    let until = Instant::now() + Duration::from_secs(3);
    while serde_json::from_str::<serde_json::Value>(&idle.response().body).unwrap()["connections"] != 2 {
        assert!(Instant::now() < until, "the silent connection was never accepted");
        idle.send("GET /stats HTTP/1.1\r\nHost: t\r\n\r\n");
    }
    let stopped = Instant::now();
    let (status, summary) = server.stop_with(Signal::SIGTERM);
    assert!(status.success(), "{status}\n{summary}");
    for client in [&mut idle, &mut silent] {
        let after = client.closed_at() - stopped;
        assert!(after < Duration::from_secs(5), "closed {after:?} after the stop");
    }
    for line in [
        "stopped by SIGTERM",
        "summary: connections 2 ",
        "closed by header timeout 0, by idle timeout 0, by peer 0, by the stop 2",
        "summary: timers armed ",
        "p50 ",
        "summary: RSS ",
        " MiB, CPU ",
    ] {
        assert!(summary.contains(line), "{line:?} not in\n{summary}");
    }
}

#[test]
fn sigint_stops_it_too() {
    let server = Server::start(&["--threads", "1"]);
    let (status, summary) = server.stop_with(Signal::SIGINT);
    assert!(status.success(), "{status}\n{summary}");
    assert!(summary.contains("stopped by SIGINT"), "{summary}");
}

#[test]
fn for_stops_it_by_itself_with_the_timeout_closes_in_the_summary() {
    let mut server =
        Server::start(&["--threads", "2", "--header-timeout-ms", "100", "--idle-timeout-ms", "100", "--for", "1"]);
    let mut silent = server.connect();
    silent.closed_at(); // at the header timeout, well before the stop
    let (status, summary) = server.wait();
    assert!(status.success(), "{status}\n{summary}");
    assert!(summary.contains("stopped by --for"), "{summary}");
    assert!(summary.contains("closed by header timeout 1,"), "{summary}");
    // The lateness line has figures (of the one close).
    let late = summary.lines().find(|l| l.contains("timeout closes late")).expect("a lateness line");
    assert!(late.contains("max ") && late.ends_with(" ms"), "{late}");
}

#[test]
fn bad_flags_are_a_usage_error_with_status_2() {
    for (args, says) in [
        (&["--bogus"][..], "unexpected argument"),
        (&["--threads", "0"], "--threads"),
        (&["--header-timeout-ms", "soon"], "--header-timeout-ms"),
        (&["--addr", "not-an-address"], "--addr"),
        (&["--for=-1"], "--for"),
        (&["--for", "0"], "--for"),
        (&["--timer", "tokio"], "--timer tokio needs --stack hyper"),
        (&["--stack", "hyper", "--timer", "other"], "--timer"),
        (&["--stack", "other"], "--stack"),
        (&["--tick-us", "5"], "--tick-us"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_shardwheel-httpd")).args(args).output().expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error:") && stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} started a server");
    }
}
