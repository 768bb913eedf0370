//! The tests' harness: the real binary on an ephemeral loopback port, and a plain-socket
//! client. Every wait is bounded: reads time out, and a server left running is killed.
#![allow(dead_code)] // each test file uses its own part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The longest any single read waits.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How much later than its timeout a close may come on a loaded 2-core machine.
pub const SLACK: Duration = Duration::from_secs(1);
/// The server's binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_shardwheel-httpd");

/// The server, started on `127.0.0.1:0`; killed on drop if still running.
#[derive(Debug)]
pub struct Server {
    child: Child,
    stdout: BufReader<ChildStdout>,
    pub addr: SocketAddr,
    pub start_line: String,
}

impl Server {
    /// Starts the binary with `args` (after `--addr 127.0.0.1:0`), and reads the port off
    /// its start line.
    pub fn start(args: &[&str]) -> Server {
        let mut command = Command::new(BIN);
        command.args(["--addr", "127.0.0.1:0"]).args(args);
        Server::spawn(command)
    }

    /// Starts `command`, which runs the binary (`BIN`, or a shell that `exec`s it: the
    /// process is the server) with its flags, `--addr` included; reads the port off its
    /// start line.
    pub fn spawn(mut command: Command) -> Server {
        let mut child = command.stdout(Stdio::piped()).spawn().expect("the binary starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut start_line = String::new();
        stdout.read_line(&mut start_line).expect("a start line");
        let addr = start_line
            .split_whitespace()
            .find_map(|word| word.parse::<SocketAddr>().ok())
            .unwrap_or_else(|| panic!("no address in the start line {start_line:?}"));
        Server { child, stdout, addr, start_line }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its standard error, if `spawn`'s command piped it (read it once the server exited).
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// Sends `signal`, and does not wait.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("kill");
    }

    /// A connection to it, reads and writes bounded by `READ_TIMEOUT`.
    pub fn connect(&self) -> Client {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
        Client { stream, buf: Vec::new() }
    }

    /// `GET /stats` on a new connection, parsed.
    pub fn stats(&self) -> serde_json::Value {
        let mut client = self.connect();
        client.send("GET /stats HTTP/1.1\r\nHost: t\r\n\r\n");
        let response = client.response();
        assert_eq!(response.status, 200);
        serde_json::from_str(&response.body).expect("/stats is JSON")
    }

    /// Polls `/stats` until `ready` holds of it (at most 3 s), and hands it back.
    pub fn stats_when(&self, ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let until = Instant::now() + Duration::from_secs(3);
        loop {
            let stats = self.stats();
            if ready(&stats) || Instant::now() > until {
                return stats;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal` and waits (at most 10 s) for the exit; its status and the rest of
    /// its standard output (the summary).
    pub fn stop_with(mut self, signal: nix::sys::signal::Signal) -> (ExitStatus, String) {
        self.signal(signal);
        self.wait()
    }

    /// Waits (at most 10 s) for the exit; its status and the rest of its standard output.
    pub fn wait(&mut self) -> (ExitStatus, String) {
        let until = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(Instant::now() < until, "the server did not exit within 10 s");
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).expect("stdout");
        (status, rest)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A response read off a connection.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// The head, as text.
    pub head: String,
    pub body: String,
}

impl Response {
    /// Whether the head says `Connection: close`.
    pub fn closes(&self) -> bool {
        self.head.to_ascii_lowercase().contains("\r\nconnection: close\r\n")
    }
}

/// A plain-socket client, buffering what it read past a response.
#[derive(Debug)]
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl From<TcpStream> for Client {
    fn from(stream: TcpStream) -> Client {
        Client { stream, buf: Vec::new() }
    }
}

impl Client {
    /// Sends `GET path` and reads its response.
    pub fn get(&mut self, path: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"));
        self.response()
    }

    /// Asserts the server closes this connection well before any timeout (within a second).
    pub fn assert_closed_now(&mut self, what: &str) {
        let from = Instant::now();
        let after = self.closed_at() - from;
        assert!(after < Duration::from_secs(1), "{what}: closed only after {after:?}");
    }

    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.stream.write_all(bytes.as_ref()).expect("write");
    }

    /// Reads one response (a head and a `Content-Length` body).
    pub fn response(&mut self) -> Response {
        self.try_response().expect("closed while waiting for a response")
    }

    /// Reads one response; `None` if the connection closes before its head.
    pub fn try_response(&mut self) -> Option<Response> {
        let head_end = loop {
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("{e} while waiting for a response head"),
            }
        };
        let head = String::from_utf8(self.buf[..head_end].to_vec()).expect("a text head");
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
        let length: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
            .expect("a Content-Length");
        while self.buf.len() < head_end + length {
            self.fill("a response body");
        }
        let body = String::from_utf8(self.buf[head_end..head_end + length].to_vec()).expect("a text body");
        self.buf.drain(..head_end + length);
        Some(Response { status, head, body })
    }

    fn fill(&mut self, what: &str) {
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => panic!("closed while waiting for {what}"),
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("{e} while waiting for {what}"),
        }
    }

    /// Reads one response's head alone (the answer to a `HEAD`: no body follows, whatever
    /// its `Content-Length`).
    pub fn head_response(&mut self) -> Response {
        let head_end = loop {
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            self.fill("a response head");
        };
        let head = String::from_utf8(self.buf[..head_end].to_vec()).expect("a text head");
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
        self.buf.drain(..head_end);
        Response { status, head, body: String::new() }
    }

    /// Writes what the socket takes, ignoring errors (a connection the server may have
    /// closed at once).
    pub fn send_lossy(&mut self, bytes: impl AsRef<[u8]>) {
        let _ = self.stream.write_all(bytes.as_ref());
    }

    /// Waits, without reading, for the server to reset the connection (`poll` sees an error
    /// or a hang-up; both stacks reset a connection they close at the send timeout) until
    /// `until`; when it saw it, or `None`. Bytes waiting unread do not count.
    pub fn ended_unread(&self, until: Instant) -> Option<Instant> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let ended = PollFlags::POLLERR | PollFlags::POLLHUP;
        while Instant::now() < until {
            // No event asked for: the kernel reports an error and a hang-up regardless.
            let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::empty())];
            match poll(&mut fds, PollTimeout::from(5u16)) {
                Ok(n) if n > 0 && fds[0].revents().is_some_and(|r| r.intersects(ended)) => return Some(Instant::now()),
                _ => {}
            }
        }
        None
    }

    /// Waits for the server to close the connection (an end of stream or a reset, with
    /// nothing else read first) and says when; panics past `READ_TIMEOUT`.
    pub fn closed_at(&mut self) -> Instant {
        assert!(self.buf.is_empty(), "unread bytes: {:?}", String::from_utf8_lossy(&self.buf));
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => Instant::now(),
            // A close with data unread on either side comes as a reset (or, on some paths, an
            // abort): the server closed the connection either way.
            Err(e)
                if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted) =>
            {
                Instant::now()
            }
            Ok(n) => panic!("read {:?} instead of the close", String::from_utf8_lossy(&chunk[..n])),
            Err(e) => panic!("{e} instead of the close"),
        }
    }
}

/// Asserts that `closed`, measured from `from`, came at `timeout` or after, and within
/// `SLACK` of it.
pub fn assert_closed_at(from: Instant, closed: Instant, timeout: Duration, what: &str) {
    let after = closed - from;
    assert!(after >= timeout, "{what}: closed after {after:?}, before its {timeout:?} timeout");
    assert!(after <= timeout + SLACK, "{what}: closed after {after:?}, long past its {timeout:?} timeout");
}

/// Asserts that `/stats` gives each timeout's closes their own lateness, once each: under
/// `timeout_close_late_us`, `header`, `idle` and `send` count what `closed_by_<name>_timeout`
/// counts, and the whole counts them all. (Read once the closes are counted: each stack
/// records a close's lateness before it counts the close.)
pub fn assert_each_timeouts_lateness(stats: &serde_json::Value) {
    let late = &stats["timeout_close_late_us"];
    let mut all = 0;
    for name in ["header", "idle", "send"] {
        let closes = stats[format!("closed_by_{name}_timeout")].as_u64().expect("a close count");
        assert_eq!(late[name]["closes"], closes, "{name}: {stats}");
        let (p50, max) = (late[name]["p50"].as_u64().expect("p50"), late[name]["max"].as_u64().expect("max"));
        assert!(p50 <= max, "{name}: {stats}");
        all += closes;
    }
    assert_eq!(late["closes"], all, "{stats}");
}
