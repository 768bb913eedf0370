//! The process: a graceful stop on SIGTERM, SIGINT or `--for` that closes every thread's
//! connections and prints the summary, bad flags refused with a usage error (status 2), and
//! an address already served refused at the start (status 1).

mod common;

use common::Server;
use nix::sys::signal::Signal;
use std::process::{Command, Stdio};
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
        "closed by header timeout 0, by idle timeout 0, by send timeout 0, by peer 0, after Connection: close 0, after a bad request 0, by the stop 2, at once 0 (2 in all)",
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
        (&["--stack", "hyper", "--tick-us", "250"], "--tick-us needs --stack local"),
        (&["--stack", "hyper", "--trace", "/tmp/never-written"], "--trace needs --stack local"),
        (&["--stack", "hyper", "--turn-cpu"], "--turn-cpu needs --stack local"),
        (&["--send-timeout-ms", "0"], "--send-timeout-ms"),
        (&["--timer-shards", "1"], "--timer-shards and --timer-pin need --stack hyper --timer shardwheel"),
        (&["--stack", "hyper", "--timer", "tokio", "--timer-pin", "false"], "need --stack hyper --timer shardwheel"),
        (&["--stack", "hyper", "--timer-shards", "0"], "--timer-shards"),
        (&["--stack", "hyper", "--timer-pin", "maybe"], "--timer-pin"),
    ] {
        // Bounded: a flag wrongly accepted starts a server, which would never exit.
        let (status, stdout, stderr) =
            exits_by_itself(args).unwrap_or_else(|| panic!("{args:?} started a server instead of a usage error"));
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error:") && stderr.contains(says), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?} started a server");
    }
}

#[test]
fn the_timer_service_is_sized_and_pinned_as_asked() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (args, shards, pinned, says) in [
        (&[][..], 2, true, "timer shardwheel (2 shards, pinned), 2 threads"),
        (
            &["--timer-shards", "1", "--timer-pin", "false"][..],
            1,
            false,
            "timer shardwheel (1 shard, not pinned), 2 threads",
        ),
        (
            &["--threads", "3", "--timer-pin", "false"][..],
            3,
            false,
            "timer shardwheel (3 shards, not pinned), 3 threads",
        ),
    ] {
        let all: Vec<&str> = ["--stack", "hyper"].iter().chain(args).copied().collect();
        let server = Server::start(&all);
        assert!(server.start_line.contains(says), "{all:?}: {}", server.start_line);
        // The shard threads themselves: how many, and on how many cores each may run. A
        // thread names itself as it starts and pins itself a moment later, so wait (at most
        // 5 s) for the last ones to do both; one not pinned by then fails below.
        let until = Instant::now() + Duration::from_secs(5);
        let timers = loop {
            let timers = timer_threads(server.pid());
            let settled = timers.len() >= shards && (!pinned || timers.iter().all(|a| a.parse::<usize>().is_ok()));
            if settled || Instant::now() > until {
                break timers;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(timers.len(), shards, "{all:?}: shard threads {timers:?}");
        for allowed in &timers {
            // A pinned thread may run on its one core; one not pinned, on every core (with
            // one core, both read the same).
            let one_core = allowed.parse::<usize>().is_ok();
            assert_eq!(one_core, pinned || cores == 1, "{all:?}: a shard thread's cores {allowed:?}");
        }
        let (status, summary) = server.stop_with(Signal::SIGTERM);
        assert!(status.success(), "{status}\n{summary}");
    }
}

/// The cores each `httpd-timer-*` thread of process `pid` may run on (`Cpus_allowed_list`).
fn timer_threads(pid: u32) -> Vec<String> {
    let mut timers = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads") {
        let dir = task.expect("a thread").path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        if name.starts_with("httpd-timer-")
            && let Some(allowed) = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            timers.push(allowed.trim().to_owned());
        }
    }
    timers
}

/// Runs the binary with `args` and waits (at most 5 s) for it to exit by itself: its
/// status, standard output and standard error, or `None` if it was still running (then
/// killed). (Its output is small: a usage error, or a start line.)
fn exits_by_itself(args: &[&str]) -> Option<(std::process::ExitStatus, String, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardwheel-httpd"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let (mut stdout, mut stderr) = (String::new(), String::new());
            std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            return Some((status, stdout, stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_second_server_on_an_address_already_served_refuses_to_start() {
    for first in [&["--stack", "local", "--threads", "2"][..], &["--stack", "hyper"]] {
        let server = Server::start(first);
        let addr = server.addr.to_string();
        for second in [&["--stack", "local"][..], &["--stack", "hyper"]] {
            let mut args = vec!["--addr", addr.as_str(), "--for", "3"];
            args.extend(second);
            let (status, _, stderr) = exits_by_itself(&args)
                .unwrap_or_else(|| panic!("{second:?} started on {addr}, already served by {first:?}"));
            assert_eq!(status.code(), Some(1), "{second:?} on {first:?}: {stderr}");
            assert!(stderr.contains(&format!("{addr} is already in use")), "{second:?} on {first:?}: {stderr}");
        }
        // The first goes on serving, alone.
        let mut client = server.connect();
        client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(client.response().status, 200);
    }
    // Any other program's listener too.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = other.local_addr().unwrap().to_string();
    let (status, _, stderr) =
        exits_by_itself(&["--addr", &addr, "--for", "3"]).expect("started beside another listener");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("already in use"), "{stderr}");
}
