//! The proxy as a process in front of the test upstream, on each timer: proxying, the
//! upstream timeout (504), the header timeout, the idle timeout, the graceful stop.
//! Every timeout is short (200–500 ms); every wait is bounded (`common::BOUND`). A timeout
//! is checked never to fire early; the checks that it fires in time allow for a loaded
//! machine (a few seconds).

mod common;

use common::*;
use std::thread;
use std::time::{Duration, Instant};

/// Late allowance for a timeout on a busy two-core machine.
const LATE: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A request is proxied; `/delay/` past the upstream timeout is a 504 no sooner than it; a
/// half head is closed at the header timeout, and on a kept-alive connection the header
/// timeout counts from the head's first byte, not from the previous response.
fn proxies_and_times_out(timer: &str) {
    let upstream = upstream();
    let mut proxy =
        proxy(timer, &upstream, &["--upstream-timeout", "300ms", "--header-timeout", "300ms", "--idle-timeout", "5s"]);

    let mut conn = connect(proxy.addr);
    assert_eq!(get(&mut conn, "/").unwrap(), Answer { status: 200, body: HELLO.into() });
    let echo = request(&mut conn, "POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello").unwrap();
    assert_eq!(echo, Answer { status: 200, body: "hello".into() });

    let start = Instant::now();
    let late = get(&mut conn, "/delay/2000").unwrap();
    let took = start.elapsed();
    assert_eq!(late.status, 504, "{late:?}");
    assert!(took >= ms(300), "504 early: {took:?}");
    assert!(took < ms(2000), "504 late: {took:?}");
    // The connection is still good.
    assert_eq!(get(&mut conn, "/").unwrap().status, 200);

    // A fresh connection that sends half a head: closed at the header timeout from the accept.
    let start = Instant::now();
    let mut half = connect(proxy.addr);
    std::io::Write::write_all(&mut half, b"GET / HTTP/1.1\r\nHost: te").unwrap();
    assert!(closed(&mut half), "not closed");
    let took = start.elapsed();
    assert!(took >= ms(300), "header timeout early: {took:?}");
    assert!(took < ms(300) + LATE, "header timeout late: {took:?}");

    // Kept alive, quiet longer than the header timeout (under the idle timeout): still open;
    // then half a head, closed at the header timeout from its first byte.
    let mut kept = connect(proxy.addr);
    assert_eq!(get(&mut kept, "/").unwrap().status, 200);
    thread::sleep(ms(600));
    assert_eq!(get(&mut kept, "/").unwrap().status, 200, "closed while waiting for a request");
    thread::sleep(ms(400));
    let start = Instant::now();
    std::io::Write::write_all(&mut kept, b"GET / HTTP/1.1\r\n").unwrap();
    assert!(closed(&mut kept), "not closed");
    let took = start.elapsed();
    assert!(took >= ms(300), "header timeout early: {took:?}");
    assert!(took < ms(300) + LATE, "header timeout late: {took:?}");

    drop(conn);
    let counts = proxy.stop();
    assert_eq!(count(&counts, "requests"), 6, "{counts:?}");
    assert_eq!(count(&counts, "gateway_timeouts"), 1, "{counts:?}");
    assert_eq!(count(&counts, "header_timeouts"), 2, "{counts:?}");
    assert_eq!(count(&counts, "idle_closes"), 0, "{counts:?}");
}

/// An idle kept-alive connection is closed at the idle timeout, not before; one with a
/// request every idle/2 stays open; a request in flight longer than the idle timeout is
/// answered.
fn idle(timer: &str) {
    let upstream = upstream();
    let idle = ms(500);
    let mut proxy =
        proxy(timer, &upstream, &["--idle-timeout", "500ms", "--header-timeout", "200ms", "--upstream-timeout", "5s"]);
    let addr = proxy.addr;
    thread::scope(|s| {
        s.spawn(|| {
            let mut quiet = connect(addr);
            // Counted from before the request: the proxy's idle time starts after it.
            let since = Instant::now();
            assert_eq!(get(&mut quiet, "/").unwrap().status, 200);
            assert!(closed(&mut quiet), "not closed");
            let took = since.elapsed();
            assert!(took >= idle, "idle close early: {took:?}");
            assert!(took < idle + LATE, "idle close late: {took:?}");
        });
        s.spawn(|| {
            let mut busy = connect(addr);
            let start = Instant::now();
            for round in 0..6 {
                assert_eq!(get(&mut busy, "/").unwrap().status, 200, "round {round} at {:?}", start.elapsed());
                thread::sleep(idle / 2);
            }
            assert_eq!(get(&mut busy, "/").unwrap().status, 200);
        });
        s.spawn(|| {
            let mut slow = connect(addr);
            let answer = get(&mut slow, "/delay/900").unwrap();
            assert_eq!(answer, Answer { status: 200, body: "delayed 900 ms\n".into() });
            assert_eq!(get(&mut slow, "/").unwrap().status, 200);
        });
    });
    let counts = proxy.stop();
    assert_eq!(count(&counts, "requests"), 10, "{counts:?}");
    assert_eq!(count(&counts, "idle_closes"), 1, "{counts:?}");
    assert_eq!(count(&counts, "header_timeouts"), 0, "{counts:?}");
    // shardwheel's own lateness, for the closes': at least the idle close's expiry.
    let lines = proxy.lines();
    let timer_line = lines.iter().find(|l| l.starts_with("shardwheel-proxy: timer total "));
    if timer == "shardwheel" {
        let line = timer_line.unwrap_or_else(|| panic!("no timer total line: {lines:?}"));
        let fired = count(&proxy.counts("timer total"), "timer_fired");
        assert!(fired >= 1, "{line}");
        assert!(line.contains(" p99<="), "{line}");
    } else {
        assert!(timer_line.is_none(), "a timer line for {timer}: {lines:?}");
    }
}

/// SIGTERM with a request in flight: it is answered, a quiet connection is closed, no new
/// connection is taken, and the proxy exits.
fn sigterm(timer: &str) {
    let upstream = upstream();
    let mut proxy = proxy(timer, &upstream, &["--grace", "5s", "--idle-timeout", "30s"]);
    let addr = proxy.addr;
    let mut quiet = connect(addr);
    assert_eq!(get(&mut quiet, "/").unwrap().status, 200);
    let in_flight = thread::spawn(move || {
        let mut conn = connect(addr);
        get(&mut conn, "/delay/1500")
    });
    thread::sleep(ms(300));
    let stop = Instant::now();
    proxy.terminate();
    assert!(closed(&mut quiet), "the quiet connection stayed open");
    // The request in flight ends 1.2 s after the stop.
    assert!(stop.elapsed() < ms(1000), "the quiet connection was closed only at the end: {:?}", stop.elapsed());
    thread::sleep(ms(100));
    assert!(std::net::TcpStream::connect_timeout(&addr, BOUND).is_err(), "a connection taken while stopping");
    let answer = in_flight.join().unwrap().unwrap();
    assert_eq!(answer, Answer { status: 200, body: "delayed 1500 ms\n".into() });
    let status = proxy.wait(BOUND);
    assert!(status.success(), "{status}");
    assert_eq!(count(&proxy.counts("total"), "requests"), 2);
}

/// A client that sends requests and never reads: once the socket buffers are full, the
/// proxy's write waits, and the send timeout closes the connection.
fn send_stall(timer: &str) {
    let upstream = upstream();
    let mut proxy = proxy(timer, &upstream, &["--send-timeout", "300ms", "--idle-timeout", "30s"]);
    let mut conn = connect(proxy.addr);
    // 1 MiB echoed per request, pipelined: hyper reads the next one when a response is out.
    let body = "x".repeat(1 << 20);
    let head = format!("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n", body.len());
    let start = Instant::now();
    let mut failed = false;
    for _ in 0..64 {
        let sent = std::io::Write::write_all(&mut conn, head.as_bytes())
            .and_then(|()| std::io::Write::write_all(&mut conn, body.as_bytes()));
        if sent.is_err() {
            failed = true; // reset by the proxy, or our own write timeout (BOUND)
            break;
        }
    }
    assert!(failed, "64 MiB went in without a stall");
    assert!(start.elapsed() < BOUND + LATE, "{:?}", start.elapsed());
    let counts = proxy.stop();
    assert_eq!(count(&counts, "send_timeouts"), 1, "{counts:?}");
    assert_eq!(count(&counts, "idle_closes"), 0, "{counts:?}");
}

macro_rules! each_timer {
    ($($(#[$attr:meta])* $timer:ident = $flag:literal),*) => {$(
        $(#[$attr])*
        mod $timer {
            #[test]
            fn proxies_and_times_out() {
                super::proxies_and_times_out($flag);
            }

            #[test]
            fn idle() {
                super::idle($flag);
            }

            #[test]
            fn send_stall() {
                super::send_stall($flag);
            }

            #[test]
            fn sigterm() {
                super::sigterm($flag);
            }
        }
    )*};
}

each_timer!(
    shardwheel = "shardwheel",
    tokio = "tokio",
    pingora = "pingora",
    // tokio's alternative timer exists only in a `--cfg tokio_unstable` build (`proxy/scale.sh`
    // tests that build so before it measures).
    #[cfg(tokio_unstable)]
    tokio_alt = "tokio-alt"
);

/// Without `--cfg tokio_unstable`, `--timer tokio-alt` is refused at start with the way to get
/// it, before any process listens.
#[cfg(not(tokio_unstable))]
#[test]
fn tokio_alt_is_refused_by_a_build_without_it() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_shardwheel-proxy"))
        .args(["--timer", "tokio-alt", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--processes", "2"])
        .output()
        .expect("run the proxy");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "it listened: {}", String::from_utf8_lossy(&output.stdout));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--cfg tokio_unstable"), "{stderr}");
}

/// Two processes on one port: requests are answered by both, each counts its own, and the
/// parent's SIGTERM stops both and sums them.
#[test]
fn two_processes_share_the_port() {
    let upstream = upstream();
    let mut proxy = proxy("shardwheel", &upstream, &["--processes", "2"]);
    for _ in 0..20 {
        let mut conn = connect(proxy.addr);
        assert_eq!(get(&mut conn, "/").unwrap(), Answer { status: 200, body: HELLO.into() });
    }
    let counts = proxy.stop();
    assert_eq!(count(&counts, "processes"), 2);
    assert_eq!(count(&counts, "requests"), 20, "{counts:?}");
    let exits: Vec<_> = proxy.lines().into_iter().filter(|l| l.starts_with("shardwheel-proxy: exit")).collect();
    assert_eq!(exits.len(), 2, "{exits:?}");
}

/// Established TCP connections whose local port is `port` (IPv4, `/proc/net/tcp`).
fn established_on(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let local = format!(":{port:04X}");
    // Columns: sl, local address, remote address, state (01: established).
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3 && cols[1].ends_with(&local) && cols[3] == "01"
        })
        .count()
}

/// The upstream pool keeps `--pool-max-idle` idle connections at most: after eight requests
/// in flight at once, each on a connection of its own, two stay at a bound of two and seven
/// at seven (one under the eight), and the default (no bound) keeps all eight.
#[test]
fn the_upstream_pool_keeps_its_bound_of_idle_connections() {
    const AT_ONCE: usize = 8;
    for (flags, kept) in [(&["--pool-max-idle", "2"][..], 2), (&["--pool-max-idle", "7"][..], 7), (&[][..], AT_ONCE)] {
        let upstream = upstream();
        let mut proxy = proxy("shardwheel", &upstream, flags);
        let clients: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                let addr = proxy.addr;
                // Long enough that all eight are in flight at once on a loaded machine.
                thread::spawn(move || get(&mut connect(addr), "/delay/1000").unwrap().status)
            })
            .collect();
        for client in clients {
            assert_eq!(client.join().unwrap(), 200, "{flags:?}");
        }
        // A connection past the bound is closed as it comes back, after its response.
        let until = Instant::now() + BOUND;
        let mut held = established_on(upstream.addr.port());
        while held != kept && Instant::now() < until {
            thread::sleep(ms(20));
            held = established_on(upstream.addr.port());
        }
        assert_eq!(held, kept, "{flags:?}: the upstream holds {held} of the proxy's connections");
        proxy.stop();
    }
}

/// The threads of process `pid` named as the ambient service's shards (`shardwheel-N`).
fn shard_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the proxy's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end().strip_prefix("shardwheel-").is_some_and(|n| n.parse::<usize>().is_ok()))
        .count()
}

/// `--timer shardwheel` sizes the ambient service from `--threads` (pinned with one process,
/// not with several) or `--timer-shards`/`--timer-pin`; the other timers refuse those flags.
#[test]
fn the_shardwheel_service_is_sized_per_process() {
    let upstream = upstream();
    for (flags, says, shards) in [
        (&["--threads", "1"][..], "shards=1 pinned=true", 1),
        (&["--threads", "2", "--processes", "2"][..], "shards=2 pinned=false", 2),
        (
            &["--threads", "2", "--timer-shards", "1", "--timer-pin", "true", "--processes", "2"][..],
            "shards=1 pinned=true",
            1,
        ),
    ] {
        let mut proxy = proxy("shardwheel", &upstream, flags);
        let mut conn = connect(proxy.addr);
        assert_eq!(get(&mut conn, "/").unwrap(), Answer { status: 200, body: HELLO.into() });
        let lines = proxy.lines();
        let started: Vec<_> = lines.iter().filter(|l| l.contains("listening on")).collect();
        assert!(!started.is_empty() && started.iter().all(|l| l.contains(says)), "{flags:?}: {started:?}");
        // The service itself, in the parent: its shard threads (named `shardwheel-N`).
        assert_eq!(shard_threads(proxy.pid()), shards, "{flags:?}: the parent's shard threads");
        proxy.stop();
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_shardwheel-proxy"))
        .args(["--timer", "tokio", "--timer-shards", "2", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9"])
        .output()
        .expect("run the proxy");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "it listened");
    assert!(String::from_utf8_lossy(&output.stderr).contains("need --timer shardwheel"));
}
