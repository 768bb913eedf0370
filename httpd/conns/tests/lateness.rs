//! The real binary against a tiny server on `127.0.0.1:0` that closes each connection after
//! a known delay: a server on time is measured late by little and never early; one that
//! closes before the timeout is counted early; one that never closes leaves them open and
//! the run ends at `--max-secs`. Every wait is bounded.

use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// The tiny server's one response.
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
/// How late a close may be seen on a loaded 2-core machine.
const SLACK_MS: f64 = 1000.0;

/// A server that closes a connection `header` after its accept unless a whole head came in,
/// and `idle` after its response; `None`: never closes. It stops accepting after `accepts`.
fn tiny_server(header: Option<Duration>, idle: Option<Duration>, accepts: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().take(accepts) {
            let Ok(stream) = stream else { continue };
            thread::spawn(move || serve(stream, header, idle));
        }
    });
    addr
}

/// One connection: reads until its deadline, answers a whole head, closes at the deadline.
fn serve(mut stream: TcpStream, header: Option<Duration>, idle: Option<Duration>) {
    // Never longer than the test's bound, even for a server that "never" closes.
    let never = Duration::from_secs(20);
    let mut deadline = Instant::now() + header.unwrap_or(never);
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return; // the drop closes it
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                head.extend_from_slice(&buf[..n]);
                if head.windows(4).any(|w| w == b"\r\n\r\n") {
                    if stream.write_all(RESPONSE).is_err() {
                        return;
                    }
                    head.clear();
                    deadline = Instant::now() + idle.unwrap_or(never);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// Runs the binary with `args` against `addr`, `--json`; its report.
fn conns(addr: SocketAddr, args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_shardwheel-conns"))
        .args(["--addr", &addr.to_string(), "--json"])
        .args(args)
        .output()
        .expect("the binary runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("--json prints JSON")
}

fn ms(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_server_on_time_is_seen_closing_every_class_late_by_little_and_none_early() {
    let addr = tiny_server(Some(Duration::from_millis(300)), Some(Duration::from_millis(400)), 35);
    let report = conns(
        addr,
        &["--silent", "20", "--idle", "10", "--slowloris", "5"]
            .into_iter()
            .chain(["--header-timeout-ms", "300", "--idle-timeout-ms", "400", "--trickle-ms", "20", "--max-secs", "10"])
            .collect::<Vec<_>>(),
    );
    for (class, count) in [("silent", 20), ("idle", 10), ("slowloris", 5)] {
        let c = &report["classes"][class];
        assert_eq!(c["count"], count, "{report}");
        assert_eq!(c["closed"], count, "{class}: {report}");
        assert_eq!(c["early"], 0, "{class}: {report}");
        assert_eq!((c["open"].as_u64(), c["failed"].as_u64()), (Some(0), Some(0)), "{report}");
        // Late, but by less than the slack; the server's clock starts after the client's.
        assert!(ms(&c["late_ms"]["min"]) > -5.0, "{class}: {report}");
        assert!(ms(&c["late_ms"]["max"]) < SLACK_MS, "{class}: {report}");
        assert!(ms(&c["late_ms"]["p50"]) <= ms(&c["late_ms"]["p99"]), "{report}");
    }
    assert!(ms(&report["ran_secs"]) < 5.0, "it ends when every connection is closed: {report}");
}

#[test]
fn a_server_that_closes_before_the_timeout_is_counted_early() {
    let addr = tiny_server(Some(Duration::from_millis(100)), Some(Duration::from_millis(100)), 8);
    let report = conns(
        addr,
        &["--silent", "5", "--idle", "3", "--slowloris", "0", "--header-timeout-ms", "600", "--idle-timeout-ms", "600"],
    );
    for (class, count) in [("silent", 5), ("idle", 3)] {
        let c = &report["classes"][class];
        assert_eq!((c["closed"].as_u64(), c["early"].as_u64()), (Some(count), Some(count)), "{class}: {report}");
        assert!(ms(&c["late_ms"]["max"]) < -300.0, "about 500 ms before the timeout: {report}");
    }
}

#[test]
fn a_server_that_never_closes_leaves_them_open_and_the_run_ends_at_max_secs() {
    let addr = tiny_server(None, None, 6);
    let started = Instant::now();
    let report = conns(
        addr,
        &["--silent", "3", "--idle", "2", "--slowloris", "1", "--header-timeout-ms", "100", "--max-secs", "1"],
    );
    let took = started.elapsed();
    for (class, count) in [("silent", 3), ("idle", 2), ("slowloris", 1)] {
        let c = &report["classes"][class];
        assert_eq!((c["closed"].as_u64(), c["open"].as_u64()), (Some(0), Some(count)), "{class}: {report}");
        assert_eq!(c["late_ms"]["p99"], Value::Null, "{report}");
    }
    assert!(took < Duration::from_secs(5), "ran {took:?}");
}

#[test]
fn a_refused_connect_is_a_failure_not_a_close() {
    // A port bound and dropped: nothing listens there.
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let report = conns(addr, &["--silent", "3", "--idle", "1", "--slowloris", "1", "--max-secs", "2"]);
    for class in ["silent", "idle", "slowloris"] {
        let c = &report["classes"][class];
        assert_eq!(c["failed"], c["count"], "{class}: {report}");
        assert_eq!(c["closed"], 0, "{report}");
    }
    assert!(report["errors"][0].as_str().unwrap().starts_with("connect"), "{report}");
}

#[test]
fn bad_flags_are_a_usage_error() {
    for args in [&["--addr", "10.1.2.3:80"][..], &["--addr", "127.0.0.1:80", "--max-secs", "0"], &["--silent", "1"]] {
        let status = Command::new(env!("CARGO_BIN_EXE_shardwheel-conns")).args(args).output().unwrap().status;
        assert_eq!(status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn trace_writes_a_line_per_connection_with_its_port_class_and_instants() {
    let addr = tiny_server(Some(Duration::from_millis(100)), Some(Duration::from_millis(100)), 6);
    let trace = std::env::temp_dir().join(format!("shardwheel-conns-trace-{}", std::process::id()));
    let args = ["--silent", "3", "--idle", "2", "--slowloris", "1", "--header-timeout-ms", "100"];
    let more = ["--idle-timeout-ms", "100", "--trickle-ms", "20", "--max-secs", "10", "--trace"];
    let report = conns(addr, &args.into_iter().chain(more).chain([trace.to_str().unwrap()]).collect::<Vec<_>>());
    let text = std::fs::read_to_string(&trace).expect("the trace");
    std::fs::remove_file(&trace).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 6, "{text}");
    let mut classes: Vec<&str> = lines.iter().map(|l| l[1]).collect();
    classes.sort_unstable();
    assert_eq!(classes, ["idle", "idle", "silent", "silent", "silent", "slowloris"], "{text}");
    for l in &lines {
        // port class opened_ns responded_ns closed_ns
        assert_eq!(l.len(), 5, "{text}");
        assert!(l[0].parse::<u16>().unwrap() > 0, "{text}");
        let opened: i128 = l[2].parse().unwrap();
        let closed: i128 = l[4].parse().unwrap_or_else(|_| panic!("not closed: {text}"));
        // Closed at the 100 ms timeout, after the connect call.
        assert!(closed - opened >= 100_000_000, "{text}");
        assert_eq!(l[3] != "-", l[1] == "idle", "only idle connections have a response: {text}");
    }
    assert_eq!(report["classes"]["silent"]["closed"], 3, "{report}");
}

/// A server that reads a request's first byte, then nothing, and resets each connection
/// (`SO_LINGER` 0) `after` that byte, as a server does at its send timeout (which cannot
/// start before a request came). It stops accepting after `accepts`.
fn reset_server(after: Duration, accepts: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().take(accepts) {
            let Ok(mut stream) = stream else { continue };
            thread::spawn(move || {
                stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let _ = stream.read(&mut [0u8; 1]);
                thread::sleep(after);
                let socket = socket2::Socket::from(stream);
                socket.set_linger(Some(Duration::ZERO)).unwrap();
            });
        }
    });
    addr
}

#[test]
fn an_unread_connection_writes_until_blocked_and_sees_the_reset_without_reading() {
    let addr = reset_server(Duration::from_millis(300), 3);
    let only = ["--silent", "0", "--idle", "0", "--slowloris", "0", "--unread", "3", "--max-secs", "5"];
    let report = conns(addr, &only.into_iter().chain(["--send-timeout-ms", "300"]).collect::<Vec<_>>());
    let c = &report["classes"]["unread"];
    assert_eq!(
        (c["count"].as_u64(), c["closed"].as_u64(), c["early"].as_u64()),
        (Some(3), Some(3), Some(0)),
        "{report}"
    );
    // Due from the last write, which the server's full receive buffer stops soon after the
    // connect: about on time.
    assert!(ms(&c["late_ms"]["min"]) > -200.0 && ms(&c["late_ms"]["max"]) < SLACK_MS, "{report}");

    // A reset before the send timeout could have run (from the first write) is early.
    let addr = reset_server(Duration::from_millis(100), 2);
    let only = ["--silent", "0", "--idle", "0", "--slowloris", "0", "--unread", "2", "--max-secs", "5"];
    let report = conns(addr, &only.into_iter().chain(["--send-timeout-ms", "600"]).collect::<Vec<_>>());
    let c = &report["classes"]["unread"];
    assert_eq!((c["closed"].as_u64(), c["early"].as_u64()), (Some(2), Some(2)), "{report}");
}
