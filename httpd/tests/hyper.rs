//! `--stack hyper`, with each timer (`--timer shardwheel` and `--timer tokio`, every test run
//! for both), seen from a plain-socket client: silent and idle connections closed at their
//! timeouts and not before, `/delay/` answered no earlier than asked, pipelining in order,
//! `/stats`, `--max-conns`, and the graceful stop. "Not before" is asserted strictly, from an
//! instant the server's own clock cannot precede; "at" with a second's slack.

mod common;

use common::{Client, Server, assert_closed_at, assert_each_timeouts_lateness};
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

/// The hyper server on `timer`, with `threads` workers and these timeouts.
fn start(timer: &str, threads: u16, header_ms: u64, idle_ms: u64, more: &[&str]) -> Server {
    let (threads, header, idle) = (threads.to_string(), header_ms.to_string(), idle_ms.to_string());
    let mut args = vec!["--stack", "hyper", "--timer", timer, "--threads", &threads];
    args.extend(["--header-timeout-ms", &header, "--idle-timeout-ms", &idle]);
    args.extend(more);
    let server = Server::start(&args);
    assert!(server.start_line.contains(&format!("stack hyper, timer {timer}")), "{}", server.start_line);
    server
}

fn get(client: &mut Client, path: &str) -> common::Response {
    client.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"));
    client.response()
}

/// Five connections that say nothing are closed by hyper's `header_read_timeout`.
fn silent_connections_are_closed_at_the_header_timeout(timer: &str) {
    let header = Duration::from_millis(300);
    let server = start(timer, 2, 300, 2000, &[]);
    // Taken before the connect: hyper starts its timer once it serves the connection, later.
    let opened = Instant::now();
    let mut clients: Vec<_> = (0..5).map(|_| server.connect()).collect();
    for client in &mut clients {
        assert_closed_at(opened, client.closed_at(), header, "a silent connection");
    }
    let stats = server.stats_when(|s| s["closed_by_header_timeout"] == 5);
    assert_eq!(stats["closed_by_header_timeout"], 5, "{stats}");
    assert_eq!(stats["closed_by_idle_timeout"], 0, "{stats}");
    assert!(stats["timeout_close_late_us"]["max"].is_u64(), "{stats}");
    assert_each_timeouts_lateness(&stats);
}

/// With the idle timeout the shorter, a keep-alive connection is closed by it, counted from
/// the last response (each response pushes it out).
fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout(timer: &str) {
    let idle = Duration::from_millis(500);
    let server = start(timer, 1, 2000, 500, &[]);
    let mut client = server.connect();
    assert_eq!(get(&mut client, "/").status, 200);
    // Shorter than the idle timeout: the next request comes in time.
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    assert_eq!(get(&mut client, "/").status, 200, "the connection lived through a short idle time");
    // Counted from the second response, not the first: not before `sent + idle`.
    assert_closed_at(sent, client.closed_at(), idle, "an idle keep-alive connection");
    let stats = server.stats_when(|s| s["closed_by_idle_timeout"] == 1);
    assert_eq!(stats["closed_by_idle_timeout"], 1, "{stats}");
    assert_eq!(stats["closed_by_header_timeout"], 0, "{stats}");
    assert!(stats["timeout_close_late_us"]["max"].as_u64().unwrap() > 0, "{stats}");
    assert_each_timeouts_lateness(&stats);
}

/// hyper starts its header timer as soon as a response is out: with the header timeout the
/// shorter, it is the one that closes an idle keep-alive connection (a documented limit),
/// at the header timeout after the last response, however long the connection lived.
/// The server's own lateness for that close is reckoned from the same deadline: one
/// reckoned from the accept, or on the wrong side of the timeout, is off by twice the
/// connection's age (1.2 s here) or twice the timeout (1.2 s), past the slack.
fn a_keep_alive_connection_waits_no_longer_than_the_header_timeout(timer: &str) {
    let header = Duration::from_millis(600);
    let server = start(timer, 1, 600, 5000, &[]);
    let mut client = server.connect();
    // Three requests 400 ms apart, each within the header timeout of the last response.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(get(&mut client, "/").status, 200, "a request within the header timeout");
    }
    let sent = Instant::now();
    assert_eq!(get(&mut client, "/").status, 200);
    assert_closed_at(sent, client.closed_at(), header, "a keep-alive connection under the header timeout");
    let stats = server.stats_when(|s| s["closed_by_header_timeout"] == 1);
    assert_eq!(stats["closed_by_header_timeout"], 1, "{stats}");
    assert_each_timeouts_lateness(&stats);
    let late = stats["timeout_close_late_us"]["header"]["max"].as_u64().expect("its lateness");
    assert!(late < common::SLACK.as_micros() as u64, "the server saw its close {late} us late: {stats}");
}

/// `/delay/<ms>` sleeps on the selected timer: never answered early.
fn delay_is_answered_no_earlier_than_asked(timer: &str) {
    let server = start(timer, 2, 2000, 2000, &[]);
    let mut client = server.connect();
    for ms in [100, 0, 30] {
        let sent = Instant::now();
        let response = get(&mut client, &format!("/delay/{ms}"));
        let took = sent.elapsed();
        assert_eq!((response.status, response.body.as_str()), (200, format!("delayed {ms} ms\n").as_str()));
        let asked = Duration::from_millis(ms);
        assert!(took >= asked, "/delay/{ms} answered after {took:?}");
        assert!(took <= asked + common::SLACK, "/delay/{ms} answered after {took:?}");
    }
    assert_eq!(get(&mut client, "/delay/60001").status, 400, "out of range");
    assert_eq!(get(&mut client, "/delay/soon").status, 400, "not a number");
}

/// Three requests in one write, a slow one first: answered in order, and the connection
/// goes on.
fn pipelined_requests_are_answered_in_order(timer: &str) {
    let server = start(timer, 2, 5000, 5000, &[]);
    let mut client = server.connect();
    let sent = Instant::now();
    client.send(
        "GET /delay/150 HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    let first = client.response();
    assert!(sent.elapsed() >= Duration::from_millis(150));
    assert_eq!((first.status, first.body.as_str()), (200, "delayed 150 ms\n"));
    let second = client.response();
    assert_eq!((second.status, second.body.as_str()), (200, "hello from shardwheel-httpd\n"));
    assert_eq!(client.response().status, 404);
    assert_eq!(get(&mut client, "/").status, 200, "the connection goes on");
}

/// `/stats` is the local stack's JSON, with the stack and timer named, and the timer's
/// counts where it keeps any.
fn stats_are_json(timer: &str) {
    let server = start(timer, 2, 5000, 5000, &[]);
    let mut client = server.connect();
    assert_eq!(get(&mut client, "/delay/10").status, 200);
    assert_eq!(get(&mut client, "/nope").status, 404);
    let response = get(&mut client, "/stats");
    assert!(response.head.contains("application/json"), "{}", response.head);
    let stats: serde_json::Value = serde_json::from_str(&response.body).expect("JSON");
    assert_eq!((stats["stack"].as_str(), stats["timer"].as_str()), (Some("hyper"), Some(timer)), "{stats}");
    assert_eq!((stats["connections"].as_u64(), stats["requests"].as_u64()), (Some(1), Some(3)), "{stats}");
    assert_eq!(stats["bad_requests"], 1, "{stats}");
    for key in ["closed_by_header_timeout", "closed_by_idle_timeout", "closed_by_peer", "closed_by_shutdown"] {
        assert!(stats[key].is_u64(), "{key} in {stats}");
    }
    assert!(stats["timeout_close_late_us"]["p99"].is_u64(), "{stats}");
    // tokio's workers' turns are not measured: none of the local loop's turn figures.
    let turns =
        ["longest_turn_us", "turns_over_5ms", "turns_timed_on_cpu", "fire_budget_breaks", "event_budget_breaks"];
    for key in turns {
        assert!(stats[key].is_null(), "{key} in {stats}");
    }
    if timer == "shardwheel" {
        // `/delay/10`'s sleep at least (hyper's header timers register only if hyper had to
        // wait for a head, which depends on the timing).
        assert!(stats["timers_armed"].as_u64().unwrap() >= 1, "{stats}");
        assert!(stats["timers_fired"].as_u64().unwrap() >= 1, "{stats}");
        assert!(stats["timers_cancelled"].is_u64(), "{stats}");
    } else {
        assert!(stats["timers_armed"].is_null(), "tokio's timer keeps no counts: {stats}");
    }
}

/// Past `--max-conns` live connections, a connection is accepted and closed at once; the
/// ones held go on.
fn connections_past_max_conns_are_closed_at_once(timer: &str) {
    let server = start(timer, 2, 5000, 5000, &["--max-conns", "1"]);
    let mut held = server.connect();
    assert_eq!(get(&mut held, "/").status, 200, "the first is served");
    let mut extra = server.connect();
    let from = Instant::now();
    let after = extra.closed_at() - from;
    assert!(after < Duration::from_secs(1), "the connection past --max-conns closed only after {after:?}");
    let stats = get(&mut held, "/stats");
    let stats: serde_json::Value = serde_json::from_str(&stats.body).expect("JSON");
    assert_eq!(stats["rejected_over_max_conns"], 1, "{stats}");
}

/// SIGTERM ends an idle and a silent connection at once, and the server exits with 0 and
/// its summary.
fn sigterm_stops_it_gracefully(timer: &str) {
    let server = start(timer, 2, 5000, 5000, &[]);
    assert!(server.start_line.contains("header timeout 5000 ms, idle timeout 5000 ms"), "{}", server.start_line);
    let mut idle = server.connect();
    assert_eq!(get(&mut idle, "/").status, 200);
    let mut silent = server.connect();
    // Both connections in: the idle one's /stats counts them.
    let until = Instant::now() + Duration::from_secs(3);
    while serde_json::from_str::<serde_json::Value>(&get(&mut idle, "/stats").body).unwrap()["connections"] != 2 {
        assert!(Instant::now() < until, "the silent connection was never accepted");
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
        "summary: timers ",
        "p50 ",
        "summary: RSS ",
        " MiB, CPU ",
    ] {
        assert!(summary.contains(line), "{line:?} not in\n{summary}");
    }
}

/// `--for` stops it by itself, with a timeout close in the summary.
fn for_stops_it_by_itself(timer: &str) {
    let mut server = start(timer, 1, 100, 100, &["--for", "1"]);
    let mut silent = server.connect();
    silent.closed_at(); // at the header timeout, well before the stop
    let (status, summary) = server.wait();
    assert!(status.success(), "{status}\n{summary}");
    assert!(summary.contains("stopped by --for"), "{summary}");
    assert!(summary.contains("closed by header timeout 1,"), "{summary}");
}

/// Each behaviour above, as a test per timer: `shardwheel::…` and `tokio::…`.
macro_rules! for_each_timer {
    ($($name:ident),* $(,)?) => {
        mod shardwheel {
            $(#[test] fn $name() { super::$name("shardwheel") })*
        }
        mod tokio {
            $(#[test] fn $name() { super::$name("tokio") })*
        }
    };
}

for_each_timer!(
    silent_connections_are_closed_at_the_header_timeout,
    an_idle_keep_alive_connection_is_closed_at_the_idle_timeout,
    a_keep_alive_connection_waits_no_longer_than_the_header_timeout,
    delay_is_answered_no_earlier_than_asked,
    pipelined_requests_are_answered_in_order,
    stats_are_json,
    connections_past_max_conns_are_closed_at_once,
    sigterm_stops_it_gracefully,
    for_stops_it_by_itself,
);
