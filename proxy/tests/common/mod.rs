//! The tests' processes (the upstream and the proxy, on ephemeral ports) and a raw HTTP/1.1
//! client whose every wait is bounded.

#![allow(dead_code)] // each test binary uses its own part

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// `/`'s body at the upstream.
pub const HELLO: &str = "hello from upstream\n";

/// The longest any one wait of a test may take.
pub const BOUND: Duration = Duration::from_secs(10);

/// A process of ours, killed when dropped if still running.
pub struct Process {
    child: Child,
    pub addr: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Process {
    fn start(mut command: Command) -> Process {
        let mut child = command.stdout(Stdio::piped()).spawn().expect("start");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                }
                kept.lock().unwrap().push(line);
            }
        });
        let addr = rx.recv_timeout(BOUND).expect("the process did not say where it listens");
        Process { child, addr: addr.parse().unwrap(), lines }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM.
    pub fn terminate(&self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    }

    /// Waits for the process to exit, at most `bound`.
    pub fn wait(&mut self, bound: Duration) -> ExitStatus {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The output thread gets the last lines at the pipe's end.
                std::thread::sleep(Duration::from_millis(50));
                return status;
            }
            assert!(Instant::now() < deadline, "the process did not exit within {bound:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then its exit (success expected) and the counts of its `total` line.
    pub fn stop(&mut self) -> Vec<(String, u64)> {
        self.terminate();
        let status = self.wait(BOUND);
        assert!(status.success(), "{status}: {:?}", self.lines());
        self.counts("total")
    }

    /// The `name=value` pairs of the line `shardwheel-proxy: <kind> …`.
    pub fn counts(&self, kind: &str) -> Vec<(String, u64)> {
        let prefix = format!("shardwheel-proxy: {kind} ");
        let lines = self.lines();
        let line = lines.iter().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {kind} line: {lines:?}"));
        line.split_whitespace()
            .filter_map(|w| w.split_once('='))
            .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
            .collect()
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One count of a `counts` list.
pub fn count(counts: &[(String, u64)], name: &str) -> u64 {
    counts.iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no {name} in {counts:?}")).1
}

pub fn upstream() -> Process {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardwheel-proxy-upstream"));
    command.args(["--listen", "127.0.0.1:0", "--threads", "1"]);
    Process::start(command)
}

/// The proxy on `timer` in front of `upstream`, with `flags` after the defaults.
pub fn proxy(timer: &str, upstream: &Process, flags: &[&str]) -> Process {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardwheel-proxy"));
    command.args(["--timer", timer, "--listen", "127.0.0.1:0", "--threads", "1", "--upstream"]);
    command.arg(upstream.addr.to_string()).args(flags);
    Process::start(command)
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, BOUND).expect("connect");
    stream.set_read_timeout(Some(BOUND)).unwrap();
    stream.set_write_timeout(Some(BOUND)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A response: its status and body.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// Sends `GET path` on a kept-alive connection and reads the response.
pub fn get(stream: &mut TcpStream, path: &str) -> io::Result<Answer> {
    request(stream, &format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n"))
}

/// Sends `head` (and its body) as it is and reads one response (framed by its
/// `Content-Length`).
pub fn request(stream: &mut TcpStream, raw: &str) -> io::Result<Answer> {
    stream.write_all(raw.as_bytes())?;
    let mut head = Vec::new();
    let mut byte = [0; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before a response"));
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("no content-length in {head:?}"));
    let mut body = vec![0; length];
    stream.read_exact(&mut body)?;
    Ok(Answer { status, body: String::from_utf8_lossy(&body).to_string() })
}

/// Waits until the peer closes `stream` (end of stream or reset), at most [`BOUND`].
pub fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
}
