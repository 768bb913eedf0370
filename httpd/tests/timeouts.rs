//! The per-connection timers, seen from a client: silent, idle and trickling connections
//! are closed at their timeouts and not before, and `/delay/` answers no earlier than asked.
//! "Not before" is asserted strictly, from an instant the server's own clock cannot precede;
//! "at" with a second's slack, for a loaded 2-core machine.

mod common;

use common::{Server, assert_closed_at, assert_each_timeouts_lateness};
use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

const HEADER: Duration = Duration::from_millis(200);

#[test]
fn silent_connections_are_closed_at_the_header_timeout() {
    let server = Server::start(&["--threads", "2", "--header-timeout-ms", "200", "--idle-timeout-ms", "300"]);
    // Taken before the connect: the server arms the timer at its accept, later.
    let opened = Instant::now();
    let mut clients: Vec<_> = (0..10).map(|_| server.connect()).collect();
    for client in &mut clients {
        assert_closed_at(opened, client.closed_at(), HEADER, "a silent connection");
    }
    let stats = server.stats_when(|s| s["closed_by_header_timeout"] == 10);
    assert_eq!(stats["closed_by_header_timeout"], 10, "{stats}");
    assert!(stats["timeout_close_late_us"]["max"].as_u64().unwrap() > 0, "{stats}");
    assert_each_timeouts_lateness(&stats);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout_each_response_pushes_out() {
    let idle = Duration::from_millis(800);
    let server = Server::start(&["--threads", "1", "--header-timeout-ms", "200", "--idle-timeout-ms", "800"]);
    let mut client = server.connect();
    client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(client.response().status, 200);
    // Longer than the header timeout: a connection between requests is under the idle one.
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(client.response().status, 200, "the connection lived past the header timeout");
    // The second response pushed the idle timer out: counted from it, not the first.
    assert_closed_at(sent, client.closed_at(), idle, "an idle keep-alive connection");
    let stats = server.stats_when(|s| s["closed_by_idle_timeout"] == 1);
    assert_eq!(stats["closed_by_idle_timeout"], 1, "{stats}");
    assert!(stats["timers_reset"].as_u64().unwrap() >= 1, "{stats}");
    assert_each_timeouts_lateness(&stats);
}

#[test]
fn a_slowloris_connection_is_closed_at_the_header_timeout_however_it_trickles() {
    let server = Server::start(&["--threads", "1", "--header-timeout-ms", "300", "--idle-timeout-ms", "300"]);
    let header = Duration::from_millis(300);
    let opened = Instant::now();
    let mut client = server.connect();
    client.stream.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    // Never a whole head: one byte every 50 ms, for at most 3 s.
    let trickle = format!("GET / HTTP/1.1\r\nX-Slow: {}", "a".repeat(60));
    let mut sent = 0;
    let closed = 'trickle: {
        for byte in trickle.as_bytes() {
            if client.stream.write_all(&[*byte]).is_err() {
                break 'trickle Instant::now();
            }
            sent += 1;
            // The 50 ms pause: a read that sees the close, or times out.
            match client.stream.read(&mut [0u8; 64]) {
                Ok(0) => break 'trickle Instant::now(),
                Ok(n) => panic!("{n} bytes answered a partial head"),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break 'trickle Instant::now(),
            }
        }
        panic!("still open after trickling {sent} bytes");
    };
    assert!(sent >= 4, "only {sent} bytes trickled before the close");
    assert_closed_at(opened, closed, header, "a slowloris connection");
}

#[test]
fn delay_is_answered_no_earlier_than_asked() {
    let server = Server::start(&["--threads", "2", "--header-timeout-ms", "2000", "--idle-timeout-ms", "2000"]);
    let mut client = server.connect();
    for ms in [100, 0, 30] {
        let sent = Instant::now();
        client.send(format!("GET /delay/{ms} HTTP/1.1\r\nHost: t\r\n\r\n"));
        let response = client.response();
        let took = sent.elapsed();
        assert_eq!((response.status, response.body.as_str()), (200, format!("delayed {ms} ms\n").as_str()));
        let asked = Duration::from_millis(ms);
        assert!(took >= asked, "/delay/{ms} answered after {took:?}");
        assert!(took <= asked + common::SLACK, "/delay/{ms} answered after {took:?}");
    }
}

/// A mass expiry is served in budgeted turns: 6,000 silent connections whose header timeouts
/// fall due in one tick (a 1 s tick, so every deadline rounds up to the same boundary) are
/// all closed, and the loop left due timers to a later turn at least once rather than close
/// them all in one turn (some 6,000 closes: tens of milliseconds). With `--turn-cpu`, each
/// turn's CPU time is counted beside its wall time, and is never the longer.
#[test]
fn a_mass_expiry_is_fired_in_turns_of_a_budget() {
    const CONNS: u64 = 6_000;
    let server = Server::start(&[
        "--threads",
        "1",
        "--header-timeout-ms",
        "500",
        "--tick-us",
        "1000000",
        "--max-conns",
        "7000",
        "--turn-cpu",
    ]);
    let clients: Vec<_> = (0..CONNS).map(|_| std::net::TcpStream::connect(server.addr).expect("connect")).collect();
    // The connects, the timeout and its 1 s tick: a few seconds on a loaded machine.
    let until = Instant::now() + Duration::from_secs(15);
    let stats = loop {
        let stats = server.stats();
        if stats["closed_by_header_timeout"] == CONNS || Instant::now() > until {
            break stats;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(stats["closed_by_header_timeout"], CONNS, "{stats}");
    let breaks = stats["fire_budget_breaks"].as_u64().expect("fire_budget_breaks");
    assert!(breaks >= 1, "6,000 closes in one turn: {stats}");
    // The timers left to later turns fire in them, not a tick later: every close within the
    // 1 s tick's rounding and a loaded machine's half second of its deadline (a `park` that
    // slept a whole tick with timers due would be late by a second more).
    let late_max = stats["timeout_close_late_us"]["max"].as_u64().expect("the closes' lateness");
    assert!(late_max < 1_500_000, "a close {late_max} us late: {stats}");
    let n = |key: &str| stats[key].as_u64().unwrap_or_else(|| panic!("{key}: {stats}"));
    assert!(n("turns_timed_on_cpu") > breaks, "{stats}");
    assert!(n("longest_turn_cpu_us") > 0 && n("longest_turn_cpu_us") <= n("longest_turn_us"), "{stats}");
    assert!(n("turns_over_5ms_cpu") <= n("turns_over_5ms"), "{stats}");
    drop(clients);
    // The summary says the same on a line of its own.
    let (status, summary) = server.stop_with(nix::sys::signal::Signal::SIGTERM);
    assert!(status.success(), "{status}");
    let line = summary
        .lines()
        .find(|l| l.starts_with("summary: event-loop turns on the CPU clock: "))
        .unwrap_or_else(|| panic!("no CPU clock line: {summary}"));
    let timed: u64 = line.split_whitespace().nth(7).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"));
    assert!(timed >= n("turns_timed_on_cpu"), "{line} after {stats}");
    // Each timeout that closed any has its own lateness line: here the header timeout's only.
    assert!(summary.contains(&format!("summary: header timeout closes {CONNS}: late p50 ")), "{summary}");
    assert!(
        !summary.contains("summary: idle timeout closes") && !summary.contains("summary: send timeout closes"),
        "{summary}"
    );
}

/// Without `--turn-cpu` no turn is timed on the CPU clock, and `/stats` says so with nulls,
/// not zeros a reader would take for measured; the wall clock's turns are timed always.
#[test]
fn turns_are_timed_on_the_cpu_clock_only_when_asked() {
    let server = Server::start(&["--threads", "1"]);
    let stats = server.stats_when(|s| s["longest_turn_us"].as_u64() > Some(0));
    assert_eq!(stats["turns_timed_on_cpu"], 0, "{stats}");
    assert!(stats["longest_turn_cpu_us"].is_null() && stats["turns_over_5ms_cpu"].is_null(), "{stats}");
    let (status, summary) = server.stop_with(nix::sys::signal::Signal::SIGTERM);
    assert!(status.success(), "{status}");
    assert!(summary.contains("summary: event-loop turns: longest "), "{summary}");
    assert!(!summary.contains("on the CPU clock"), "{summary}");
}
