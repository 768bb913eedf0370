//! `shardwheel-load`, the real binary, against a small server in the test that answers each
//! request after a known delay (pipelined requests in order), may stall every response once,
//! closes a connection at known header and idle timeouts, and counts requests and peers.
//! Every wait is bounded (`--max-secs`, and the server's threads by their own deadlines);
//! lower bounds are strict (never early, never faster than the delay), upper ones generous
//! for a loaded 2-core machine.

use serde_json::Value;
use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The server's one response.
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
/// How much later than its floor a figure may come on a loaded 2-core machine, in ms.
const SLACK_MS: f64 = 250.0;
/// No server thread lives longer than this.
const SERVER_BOUND: Duration = Duration::from_secs(20);

/// How the test's server behaves.
#[derive(Debug, Clone, Copy, Default)]
struct Behaviour {
    /// Each response goes out this long after its request came in.
    delay: Duration,
    /// Every response due in `[first request + .0, + .0 + .1)` waits to its end.
    stall: Option<(Duration, Duration)>,
    /// A connection with no request is closed this long after the accept.
    header: Option<Duration>,
    /// A connection is closed this long after its last response, if nothing came since.
    idle: Option<Duration>,
}

/// What the server saw.
#[derive(Debug, Default)]
struct Seen {
    requests: AtomicU64,
    peers: Mutex<HashSet<IpAddr>>,
    first_request: OnceLock<Instant>,
}

fn server(behaviour: Behaviour) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let shared = Arc::clone(&seen);
    thread::spawn(move || {
        let started = Instant::now();
        for stream in listener.incoming() {
            if started.elapsed() > SERVER_BOUND {
                return;
            }
            let Ok(stream) = stream else { continue };
            let seen = Arc::clone(&shared);
            thread::spawn(move || serve(stream, behaviour, &seen));
        }
    });
    (addr, seen)
}

/// One connection: requests in, each answered `delay` after it came (in order), closes at
/// the header or idle timeout.
fn serve(mut stream: TcpStream, b: Behaviour, seen: &Seen) {
    let accepted = Instant::now();
    if let Ok(peer) = stream.peer_addr() {
        seen.peers.lock().unwrap().insert(peer.ip());
    }
    let mut input = Vec::new();
    let mut due: std::collections::VecDeque<Instant> = Default::default();
    let mut last_response: Option<Instant> = None;
    let mut buf = [0u8; 4096];
    loop {
        let now = Instant::now();
        if now - accepted > SERVER_BOUND {
            return;
        }
        // Answer what is due.
        while due.front().is_some_and(|&at| at <= now) {
            due.pop_front();
            if stream.write_all(RESPONSE).is_err() {
                return;
            }
            last_response = Some(Instant::now());
        }
        let close_at = match (due.is_empty(), last_response) {
            (false, _) => None,
            (true, Some(last)) => b.idle.map(|idle| last + idle),
            (true, None) => b.header.map(|header| accepted + header),
        };
        if close_at.is_some_and(|at| at <= now) {
            return;
        }
        let wake = [due.front().copied(), close_at].into_iter().flatten().min().unwrap_or(now + Duration::from_secs(1));
        let wait = wake.saturating_duration_since(now).max(Duration::from_micros(100));
        stream.set_read_timeout(Some(wait)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let came = Instant::now();
                input.extend_from_slice(&buf[..n]);
                while let Some(end) = input.windows(4).position(|w| w == b"\r\n\r\n") {
                    input.drain(..end + 4);
                    seen.requests.fetch_add(1, Ordering::SeqCst);
                    let first = *seen.first_request.get_or_init(|| came);
                    let mut at = came + b.delay;
                    if let Some((from, length)) = b.stall {
                        let (start, end) = (first + from, first + from + length);
                        if at >= start && at < end {
                            at = end;
                        }
                    }
                    due.push_back(at.max(due.back().copied().unwrap_or(at)));
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

fn load_output(addr: SocketAddr, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardwheel-load"))
        .args(["--addr", &addr.to_string(), "--json"])
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Runs the binary with `args` against `addr`; its JSON report.
fn load(addr: SocketAddr, args: &[&str]) -> Value {
    let output = load_output(addr, args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("--json prints JSON")
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_server_answering_after_d_ms_gives_a_p50_between_d_and_d_plus_the_slack() {
    let (addr, _) = server(Behaviour { delay: Duration::from_millis(30), ..Default::default() });
    let r = load(addr, &["--active", "10", "--rate", "100", "--warmup-secs", "0.3", "--secs", "2", "--max-secs", "8"]);
    let latency = &r["requests"]["latency_ms"];
    // Never faster than the server's delay (the histogram's lowest bucket is 0.1 % wide).
    assert!(num(&latency["min"]) >= 30.0 * 0.999, "{r}");
    assert!(num(&latency["p50"]) >= 30.0 && num(&latency["p50"]) <= 30.0 + SLACK_MS, "{r}");
    assert_eq!(r["requests"]["error_count"], 0, "{r}");
    // 100 req/s for 2 s, every one answered.
    assert!((num(&r["requests"]["count"]) - 200.0).abs() <= 10.0, "{r}");
}

#[test]
fn a_stall_is_seen_by_every_request_due_in_it_and_counted_queued() {
    // Every response due in a 300 ms stretch, 1 s after the first request, waits to its end.
    let stall = (Duration::from_millis(1000), Duration::from_millis(300));
    let (addr, _) = server(Behaviour { delay: Duration::from_millis(2), stall: Some(stall), ..Default::default() });
    let r = load(addr, &["--active", "10", "--rate", "200", "--warmup-secs", "0", "--secs", "2.5", "--max-secs", "8"]);
    let latency = &r["requests"]["latency_ms"];
    // The request due as the stall began waited all of it: open loop, from its schedule.
    assert!(num(&latency["max"]) >= 290.0, "{r}");
    assert!(num(&latency["p99.9"]) >= 250.0, "{r}");
    // About 60 requests were due in the stall; each connection (one every 50 ms) had 5 or
    // 6 behind the first: a closed-loop client would have sent none of them.
    assert!(num(&r["requests"]["queued"]) >= 30.0, "{r}");
    // And every due request went out: 200 req/s for 2.5 s.
    assert!((num(&r["requests"]["count"]) - 500.0).abs() <= 10.0, "{r}");
    // About 30 of the 500 waited more than 150 ms (half the stall or more): p99 shows them.
    assert!(num(&latency["p99"]) >= 150.0, "{r}");
}

#[test]
fn the_achieved_rate_is_the_asked_rate_and_the_count_is_the_servers() {
    let (addr, seen) = server(Behaviour { delay: Duration::from_millis(1), ..Default::default() });
    let r = load(addr, &["--active", "20", "--rate", "500", "--warmup-secs", "0.3", "--secs", "2", "--max-secs", "8"]);
    let achieved = num(&r["requests"]["achieved_rps"]);
    assert!((achieved - 500.0).abs() <= 500.0 * 0.04, "{r}");
    assert_eq!(r["requests"]["answered"].as_u64(), Some(seen.requests.load(Ordering::SeqCst)), "{r}");
    assert_eq!(r["requests"]["answered"], r["requests"]["sent"], "{r}");
}

#[test]
fn four_sources_make_the_server_see_four_peer_addresses() {
    let (addr, seen) = server(Behaviour::default());
    let r = load(addr, &["--active", "8", "--rate", "80", "--sources", "4", "--warmup-secs", "0", "--secs", "1"]);
    let peers = seen.peers.lock().unwrap().clone();
    let expected: HashSet<IpAddr> = (2..=5).map(|h| IpAddr::from([127, 0, 0, h])).collect();
    assert_eq!(peers, expected, "{r}");
    assert_eq!(r["requests"]["error_count"], 0, "{r}");
}

#[test]
fn two_processes_merge_into_the_servers_count_and_every_close() {
    let header = Duration::from_millis(400);
    let (addr, seen) = server(Behaviour { header: Some(header), ..Default::default() });
    let r = load(
        addr,
        &["--processes", "2", "--active", "10", "--rate", "200", "--warmup-secs", "0", "--secs", "1.5"]
            .into_iter()
            .chain(["--silent", "6", "--header-timeout-ms", "400", "--max-secs", "8"])
            .collect::<Vec<_>>(),
    );
    // Every request the server counted is in the merged report, and the window's 300.
    assert_eq!(r["requests"]["answered"].as_u64(), Some(seen.requests.load(Ordering::SeqCst)), "{r}");
    assert!((num(&r["requests"]["count"]) - 300.0).abs() <= 10.0, "{r}");
    let silent = &r["closes"]["silent"];
    assert_eq!((silent["count"].as_u64(), silent["closed"].as_u64()), (Some(6), Some(6)), "{r}");
    assert_eq!(silent["early"], 0, "{r}");
}

/// A shell that burns CPU, itself (`tree` false) or in a child it waits for (`tree` true), in
/// a process group of its own that the drop kills whole (the child would outlive its shell).
struct Burner(std::process::Child);

impl Burner {
    fn start(tree: bool) -> Burner {
        use std::os::unix::process::CommandExt;
        let script = if tree { "(while :; do :; done) & wait" } else { "while :; do :; done" };
        Burner(Command::new("sh").args(["-c", script]).process_group(0).spawn().expect("sh"))
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0.id())]).status();
        let _ = self.0.wait();
    }
}

#[test]
fn the_server_pid_and_tree_report_the_cpu_they_burn() {
    let (addr, _) = server(Behaviour::default());
    let args = ["--active", "2", "--rate", "20", "--warmup-secs", "0.2", "--secs", "1"];
    for (flag, tree) in [("--server-pid", false), ("--server-tree", true)] {
        let burner = Burner::start(tree);
        let r = load(addr, &args.into_iter().chain([flag, &burner.pid()]).collect::<Vec<_>>());
        drop(burner);
        // A busy loop for 1 s gets a good part of a core even on a loaded machine.
        assert!(num(&r["server"]["cpu_secs"]) > 0.1, "{flag}: {r}");
        assert!(num(&r["server"]["cpu_us_per_request"]) > 0.0, "{flag}: {r}");
        assert!(num(&r["server"]["rss_end_kib"]) > 0.0, "{flag}: {r}");
        assert_eq!(r["server"]["processes"], if tree { 2 } else { 1 }, "{flag}: {r}");
    }
    // The tree's root alone waits and burns nothing: only `--server-tree` counts its child.
    let burner = Burner::start(true);
    let r = load(addr, &args.into_iter().chain(["--server-pid", &burner.pid()]).collect::<Vec<_>>());
    drop(burner);
    assert!(num(&r["server"]["cpu_secs"]) < 0.05, "{r}");
}

#[test]
fn connections_gone_quiet_together_are_closed_at_the_idle_timeout_and_none_early() {
    let (addr, _) = server(Behaviour { idle: Some(Duration::from_millis(400)), ..Default::default() });
    let started = Instant::now();
    let r = load(
        addr,
        &["--active", "10", "--rate", "100", "--warmup-secs", "0.2", "--secs", "2", "--quiet-at", "1"]
            .into_iter()
            .chain(["--idle-timeout-ms", "400", "--max-secs", "8"])
            .collect::<Vec<_>>(),
    );
    let quiet = &r["closes"]["quiet"];
    assert_eq!((quiet["count"].as_u64(), quiet["closed"].as_u64()), (Some(10), Some(10)), "{r}");
    assert_eq!(quiet["early"], 0, "{r}");
    assert!(num(&quiet["late_ms"]["min"]) > -5.0 && num(&quiet["late_ms"]["max"]) < SLACK_MS, "{r}");
    // Requests were sent for 1 s only.
    assert!((num(&r["requests"]["count"]) - 100.0).abs() <= 10.0, "{r}");
    assert_eq!(r["requests"]["error_count"], 0, "{r}");
    assert!(started.elapsed() < Duration::from_secs(6), "it ends once they are closed");
}

#[test]
fn a_refused_connect_is_counted_by_its_reason() {
    // A port bound and dropped: nothing listens there.
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let r = load(addr, &["--active", "3", "--rate", "30", "--silent", "2", "--warmup-secs", "0", "--secs", "1"]);
    assert_eq!(r["ramp"]["connect_failures"]["ECONNREFUSED"], 5, "{r}");
    assert_eq!(r["requests"]["count"], 0, "{r}");
    assert!(num(&r["requests"]["errors"]["not sent: the connection is closed"]) >= 25.0, "{r}");
}

#[test]
fn a_server_off_loopback_and_a_split_over_the_descriptor_limit_are_refused() {
    let cases: [(&[&str], &str); 4] = [
        (&["--addr", "10.1.2.3:80"], "loopback"),
        (&["--addr", "127.0.0.1:9", "--silent", "30000"], "descriptors"),
        (&["--addr", "127.0.0.1:9", "--silent", "40000", "--processes", "2"], "--processes 3"),
        (&["--addr", "127.0.0.1:9", "--sources", "20000000"], "--sources"),
    ];
    for (args, message) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_shardwheel-load")).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(message) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
