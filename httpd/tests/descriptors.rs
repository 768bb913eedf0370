//! The descriptor limit, on both stacks: connections that wait in the backlog while the
//! server is out of descriptors (`accept` fails with `EMFILE`) are served once descriptors
//! are freed, with no new connection to wake the listener; and `--max-conns` above what the
//! limit holds is clamped to it, with a message that names the limit.

mod common;

use common::{BIN, Client, Server};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;
use std::io::Read;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Connections queued while the server is out of descriptors, and connections it holds
/// and then frees: as many, so that every queued one fits once they are gone. Under the
/// local loop's `SLICE` of 32 events, so that the frees' events alone do not make a turn
/// accept again.
const QUEUED: usize = 20;
/// How long the queued connections have, from the frees, to be answered: many times the
/// local stack's 100 ms retry and the hyper stack's 10 ms, on a loaded machine.
const BOUND: Duration = Duration::from_secs(3);

/// Process `pid`'s descriptors up to its sockets: the highest socket's number plus one,
/// and how many descriptors are open below that (as many, if there is no hole). (A
/// descriptor inherited from the test's own environment may sit far above: it is not
/// counted.)
fn open_fds(pid: u32) -> (usize, usize) {
    let mut numbers = Vec::new();
    let mut top = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the server's descriptors").flatten() {
        let Some(number) = entry.file_name().to_str().and_then(|n| n.parse::<usize>().ok()) else { continue };
        if std::fs::read_link(entry.path()).is_ok_and(|to| to.to_string_lossy().starts_with("socket:")) {
            top = top.max(number + 1);
        }
        numbers.push(number);
    }
    (top, numbers.iter().filter(|&&n| n < top).count())
}

/// Sets process `pid`'s soft `RLIMIT_NOFILE` to `limit` (util-linux's `prlimit`: nix has
/// no `prlimit(2)`, and the tests use no `unsafe`).
fn set_soft_nofile(pid: u32, limit: usize) {
    let status = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={limit}:")])
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit --pid {pid} --nofile={limit}: {status}");
}

/// Whether `client` has something to read (a response, or the close) now.
fn readable(client: &Client) -> bool {
    let mut fds = [PollFd::new(client.stream.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

/// The server holds `QUEUED` connections; its descriptor limit is lowered to what it holds,
/// so `accept` fails with `EMFILE`; `QUEUED` more connect and send a request, and wait in
/// the backlog (none answered in 250 ms); the first `QUEUED` close, freeing as many
/// descriptors. Every queued one must be answered within `BOUND`, though no connection
/// arrives after the frees.
fn the_backlog_is_served_once_descriptors_are_freed(stack: &[&str]) {
    let mut command = Command::new(BIN);
    command.args(["--addr", "127.0.0.1:0"]).args(stack);
    command.args(["--threads", "1", "--header-timeout-ms", "10000", "--idle-timeout-ms", "10000"]);
    // Piped: each failed `accept` of the hyper stack says so, every 10 ms.
    command.stderr(Stdio::piped());
    let mut server = Server::spawn(command);
    let mut stderr = server.take_stderr().expect("piped");
    let mut held: Vec<Client> = (0..QUEUED).map(|_| server.connect()).collect();
    for client in &mut held {
        assert_eq!(client.get("/").status, 200);
    }
    // The limit caps a descriptor's number, not their count: below the highest connection's,
    // a descriptor closed at the start left a hole, which held connections fill first, so
    // that the next accept fails and the connections freed are below the limit.
    let open = loop {
        match open_fds(server.pid()) {
            (top, count) if count == top => break top,
            (top, _) if top > 200 => panic!("the server's descriptors never filled their holes"),
            _ => {
                let mut client = server.connect();
                assert_eq!(client.get("/").status, 200);
                held.push(client);
            }
        }
    };
    assert!(held.len() < 32, "{} held: their closes would make a turn of the local loop accept", held.len());
    set_soft_nofile(server.pid(), open);
    let mut queued: Vec<Client> = (0..QUEUED).map(|_| server.connect()).collect();
    for client in &mut queued {
        client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    }
    // Not a multiple of the local retry's 100 ms: the frees do not come just before a retry.
    std::thread::sleep(Duration::from_millis(250));
    let early = queued.iter().filter(|c| readable(c)).count();
    assert_eq!(early, 0, "{early} of {QUEUED} answered while the server was out of descriptors: nothing to test");
    assert_eq!(open_fds(server.pid()), (open, open), "the server's descriptors changed while it was out of them");

    drop(held);
    let freed = Instant::now();
    let mut answered = 0;
    for client in &mut queued {
        let left = (freed + BOUND).saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        client.stream.set_read_timeout(Some(left)).unwrap();
        if let Some(response) = try_response_or_timeout(client) {
            assert_eq!(response, 200);
            answered += 1;
        }
    }
    let took = freed.elapsed();
    println!("{answered} of {QUEUED} answered {took:?} after the frees");
    assert_eq!(answered, QUEUED, "{answered} of {QUEUED} answered in {took:?} after descriptors were freed");
    assert!(took < BOUND, "answered, but only after {took:?}");
    let (status, summary) = server.stop_with(Signal::SIGTERM);
    assert!(status.success(), "{status}\n{summary}");
    let mut said = String::new();
    stderr.read_to_string(&mut said).unwrap();
    assert!(said.contains("accept: Too many open files"), "{said}");
    if stack.contains(&"local") {
        assert!(said.contains("trying again every 100 ms"), "{said}");
    }
}

/// The status of a response read before the read timeout; `None` at the timeout or the close.
fn try_response_or_timeout(client: &mut Client) -> Option<u16> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match client.stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&head).split_whitespace().nth(1)?.parse().ok()
}

/// `--max-conns 1000` under a descriptor limit of 100 (hard, so the server cannot raise
/// it): the server holds 80 (100 less its spare, 16 and 4 for its one thread), says so on its
/// start line, says why on stderr, and closes an 81st at once, as past any `--max-conns`.
fn max_conns_above_the_descriptor_limit_is_clamped_to_it(stack: &[&str]) {
    let mut command = Command::new("sh");
    // `ulimit -n` sets the soft and the hard limit; `exec` keeps the process the server.
    command
        .args(["-c", "ulimit -n 100 && exec \"$0\" \"$@\"", BIN, "--addr", "127.0.0.1:0"])
        .args(stack)
        .args(["--threads", "1", "--max-conns", "1000"])
        .stderr(Stdio::piped());
    let mut server = Server::spawn(command);
    let mut stderr = server.take_stderr().expect("piped");
    assert!(server.start_line.contains(", max 80 connections"), "{}", server.start_line);
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..84 {
        let mut client = server.connect();
        client.send_lossy("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        match client.try_response() {
            Some(response) => {
                assert_eq!(response.status, 200);
                held.push(client);
            }
            None => refused += 1,
        }
    }
    assert_eq!((held.len(), refused), (80, 4), "held, closed at once");
    let (status, summary) = server.stop_with(Signal::SIGTERM);
    assert!(status.success(), "{status}\n{summary}");
    let mut said = String::new();
    stderr.read_to_string(&mut said).unwrap();
    let message = "--max-conns 1000 is more than the descriptor limit allows (RLIMIT_NOFILE 100, 20 of them kept \
                   for the server's own with 1 threads): holding at most 80 connections";
    assert!(said.contains(message), "{said}");
}

/// Each behaviour above, as a test per stack.
macro_rules! for_each_stack {
    ($($name:ident),* $(,)?) => {
        mod local {
            $(#[test] fn $name() { super::$name(&["--stack", "local"]) })*
        }
        mod hyper {
            $(#[test] fn $name() { super::$name(&["--stack", "hyper"]) })*
        }
    };
}

for_each_stack!(
    the_backlog_is_served_once_descriptors_are_freed,
    max_conns_above_the_descriptor_limit_is_clamped_to_it
);
