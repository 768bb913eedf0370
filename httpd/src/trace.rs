//! `--trace FILE`, a diagnostic: each loop keeps, per connection, when it was accepted and
//! when and why it closed, as `CLOCK_MONOTONIC` nanoseconds with the peer's port, and writes
//! them at the stop to `FILE.<thread>`. `shardwheel-conns --trace` writes the client's side
//! (its local port, when it called `connect`, when it saw the close) on the same clock, and
//! `httpd/trace_join.py` joins the two by port: how much of a close's client-seen lateness
//! is the wait before the accept, the server's own lateness, and the delivery to the client.
//!
//! The records stay in memory until the stop (no I/O on the loop's path); nothing is kept
//! without the flag.

use crate::conn::Close;
use crate::mono::mono_ns;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;
use std::time::Instant;

/// A connection accepted and not yet closed.
#[derive(Debug, Clone, Copy)]
struct Open {
    port: u16,
    /// When the loop's `epoll_wait` returned, in the turn that accepted it.
    woke: Instant,
    /// When the `accept` call that returned it was made.
    called: Instant,
    /// When `accept` returned it.
    accepted: Instant,
}

/// One loop's records.
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
    open: HashMap<usize, Open>,
    /// One line per closed connection: see `closed`.
    lines: String,
}

impl Trace {
    /// Records for thread `index`, written to `<path>.<index>`.
    pub fn new(path: &std::path::Path, index: usize) -> Trace {
        let mut file = path.as_os_str().to_owned();
        file.push(format!(".{index}"));
        Trace { path: file.into(), open: HashMap::new(), lines: String::new() }
    }

    /// Connection `id`, from peer port `port`, returned at `accepted` by an `accept` call
    /// made at `called`, in the turn that woke at `woke`.
    pub fn accepted(&mut self, id: usize, port: u16, woke: Instant, called: Instant, accepted: Instant) {
        self.open.insert(id, Open { port, woke, called, accepted });
    }

    /// Connection `id` closed at `closed` for `why`; a timeout close with the deadline its
    /// timer was armed for and the instant the loop woke in the turn that fired it.
    /// The line: `port woke_ns called_ns accepted_ns why deadline_ns fired_woke_ns
    /// closed_ns` (`-` where there is none).
    pub fn closed(&mut self, id: usize, why: Close, timer: Option<(Instant, Instant)>, closed: Instant) {
        let Some(open) = self.open.remove(&id) else { return };
        let (deadline, fired) = match timer {
            Some((deadline, fired)) => (mono_ns(deadline).to_string(), mono_ns(fired).to_string()),
            None => ("-".to_string(), "-".to_string()),
        };
        let _ = writeln!(
            self.lines,
            "{} {} {} {} {:?} {deadline} {fired} {}",
            open.port,
            mono_ns(open.woke),
            mono_ns(open.called),
            mono_ns(open.accepted),
            why,
            mono_ns(closed)
        );
    }

    /// Writes the records out.
    pub fn write(&self) -> io::Result<()> {
        std::fs::write(&self.path, &self.lines)
    }
}
