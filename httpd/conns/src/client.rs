//! The loop: one `mio` poll (epoll) holds every connection, nonblocking, on one thread.
//!
//! Connections are opened at a steady pace (`open_per_ms`), so that the server's accept
//! queue never overflows (an overflow drops the handshake and the retry comes a second
//! later, which would read as lateness). Each is stamped before its `connect` call: the
//! server cannot accept it, so cannot arm its header timer, before that instant. An idle
//! connection writes its request once connected and stamps the write; it is stamped again
//! when its response is whole. A slowloris connection writes one byte every `trickle` from a
//! queue ordered by due instant (one interval for all, so pushing at the back keeps it
//! ordered). A close is a read that returns 0 or an error (a reset counts), or a write that
//! fails. A close and a whole response are stamped with the instant `epoll_wait` returned
//! the batch of events that reported them (not when the loop got to each in the batch), so
//! the client's own handling of a batch is not read as the server's lateness; what a read
//! finds right after the request's write (in the same handling), when it is read; the
//! failing write of a slowloris byte, when it fails.

use crate::connect::{self, Setup};
use crate::report::{Class, ClassReport, Outcome, Report};
use crate::response;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Registry, Token};
use std::collections::{BTreeMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// The idle connections' one request.
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: shardwheel-conns\r\n\r\n";
/// What a slowloris connection trickles: a request line, then one header value that never
/// ends.
const TRICKLE_HEAD: &[u8] = b"GET / HTTP/1.1\r\nHost: shardwheel-conns\r\nX-Trickle: ";
/// The trickled value's byte, after the head.
const TRICKLE_FILL: u8 = b'a';
/// The most distinct failure reasons reported.
const MAX_ERRORS: usize = 5;
/// An unread connection's receive buffer (the kernel doubles it): small, so that the
/// server's writes block after little.
const UNREAD_RCVBUF: usize = 4096;
/// The most an unread connection writes (the server's receive buffer, autotuned, takes
/// megabytes after the server stopped reading).
const UNREAD_MAX_BYTES: usize = 16 << 20;
/// The requests an unread connection writes at a time.
const UNREAD_BATCH: usize = 256;

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub addr: SocketAddr,
    pub silent: usize,
    pub idle: usize,
    pub slowloris: usize,
    pub unread: usize,
    /// The server's header timeout, as the client expects it.
    pub header_timeout: Duration,
    /// The server's idle keep-alive timeout, as the client expects it.
    pub idle_timeout: Duration,
    /// The server's send timeout, as the client expects it.
    pub send_timeout: Duration,
    /// A slowloris connection's pause between bytes.
    pub trickle: Duration,
    /// Connections opened per millisecond.
    pub open_per_ms: usize,
    /// The whole run's bound: connections still open then are reported open.
    pub max: Duration,
    /// `--trace FILE`: each connection's port and instants, written at the end.
    pub trace: Option<std::path::PathBuf>,
    /// The source addresses connection `i` binds to, `sources[i % len]`; empty: the
    /// kernel's choice (`connect.rs` says why).
    pub sources: Vec<Ipv4Addr>,
}

impl Plan {
    /// Every connection's class, in the order opened: unread and idle first (their timeout
    /// starts latest), then slowloris, then silent.
    pub(crate) fn classes(&self) -> Vec<Class> {
        let mut classes = vec![Class::Unread; self.unread];
        classes.extend(std::iter::repeat_n(Class::Idle, self.idle));
        classes.extend(std::iter::repeat_n(Class::Slowloris, self.slowloris));
        classes.extend(std::iter::repeat_n(Class::Silent, self.silent));
        classes
    }
}

/// Where a connection is.
#[derive(Debug)]
enum State {
    /// Its stream is open.
    Live,
    /// Done: the outcome, its stream dropped.
    Done(Outcome),
}

/// One connection.
#[derive(Debug)]
struct Conn {
    class: Class,
    stream: Option<TcpStream>,
    /// Before the `connect` call.
    opened: Instant,
    connected: bool,
    /// Before the request's last write (idle); before the first write (unread).
    request_sent: Option<Instant>,
    /// After the last write that went through (unread).
    last_write: Option<Instant>,
    written: usize,
    /// The response so far, until whole (idle).
    response: Vec<u8>,
    /// When the response was whole (idle).
    responded: Option<Instant>,
    /// Bytes trickled (slowloris).
    trickled: usize,
    state: State,
    /// Its local port, once the connect call returned (the trace's join key).
    port: u16,
    /// When the loop saw the server's close.
    closed: Option<Instant>,
}

/// The held connections' state, driven by `run` here or by the load generator's loop
/// (`load/run.rs`), which shares its poll: this side's tokens are `0..` the connections'
/// count.
#[derive(Debug)]
pub(crate) struct Client {
    plan: Plan,
    registry: Registry,
    conns: Vec<Conn>,
    live: usize,
    trickles: VecDeque<(Instant, usize)>,
    errors: Vec<String>,
    /// Failed connects by reason (`connect::reason`).
    connect_failures: BTreeMap<String, usize>,
    /// When the last connect ended (either way), as seen: the load generator's ramp.
    last_connected: Option<Instant>,
}

/// Runs the plan to its end (every connection closed or failed) or to `plan.max`.
pub fn run(plan: &Plan) -> std::io::Result<Report> {
    let classes = plan.classes();
    let mut poll = Poll::new()?;
    let mut client = Client::new(plan.clone(), poll.registry().try_clone()?);
    let mut events = Events::with_capacity(1024);
    let started = Instant::now();
    let end = started + plan.max;
    let mut opening = Duration::ZERO;
    loop {
        let now = Instant::now();
        // Open as many as the pace allows by now.
        if client.conns.len() < classes.len() {
            let elapsed_ms = usize::try_from((now - started).as_millis()).unwrap_or(usize::MAX);
            let target = elapsed_ms.saturating_add(1).saturating_mul(plan.open_per_ms).min(classes.len());
            while client.conns.len() < target {
                client.open(classes[client.conns.len()]);
            }
            if client.conns.len() == classes.len() {
                opening = Instant::now() - started;
            }
        }
        client.trickle_due();
        if (client.conns.len() == classes.len() && client.live == 0) || Instant::now() >= end {
            break;
        }
        // Sleep until the next byte to trickle, the next millisecond's opens, or the end.
        let mut wake = end;
        if let Some(&(due, _)) = client.trickles.front() {
            wake = wake.min(due);
        }
        if client.conns.len() < classes.len() {
            wake = wake.min(Instant::now() + Duration::from_millis(1));
        }
        // Rounded up to a whole millisecond by epoll: never a busy wait.
        let timeout = wake.saturating_duration_since(Instant::now());
        match poll.poll(&mut events, Some(timeout)) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            result => result?,
        }
        // One instant for the whole batch: every close or response in it had reached the
        // socket by the time `epoll_wait` returned, so stamping each one only when the loop
        // gets to it would add the batch's earlier handling (tens of closes, each a syscall
        // or two) to the server's lateness.
        let polled = Instant::now();
        for event in events.iter() {
            client.on_event(event.token().0, event.is_error() || event.is_read_closed(), polled);
        }
    }
    let ran = started.elapsed();
    if let Some(path) = &plan.trace {
        std::fs::write(path, client.trace())?;
    }
    Ok(client.report(opening, ran))
}

impl Client {
    /// No connection yet; each will be registered with `registry`.
    pub(crate) fn new(plan: Plan, registry: Registry) -> Client {
        Client {
            plan,
            registry,
            conns: Vec::new(),
            live: 0,
            trickles: VecDeque::new(),
            errors: Vec::new(),
            connect_failures: BTreeMap::new(),
            last_connected: None,
        }
    }

    /// How many were opened so far.
    pub(crate) fn opened(&self) -> usize {
        self.conns.len()
    }

    /// How many are open (connecting, connected, not yet closed).
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// When the next slowloris byte is due.
    pub(crate) fn next_trickle(&self) -> Option<Instant> {
        self.trickles.front().map(|&(due, _)| due)
    }

    /// Failed connects by reason.
    pub(crate) fn connect_failures(&self) -> &BTreeMap<String, usize> {
        &self.connect_failures
    }

    /// When the last connect ended, either way.
    pub(crate) fn last_connected(&self) -> Option<Instant> {
        self.last_connected
    }

    /// Notes a connect that ended at `at`.
    fn connect_ended(&mut self, at: Instant) {
        self.last_connected = Some(self.last_connected.map_or(at, |last| last.max(at)));
    }

    /// Opens one connection of `class`: stamped, then a nonblocking connect.
    pub(crate) fn open(&mut self, class: Class) {
        let token = self.conns.len();
        let opened = Instant::now();
        let mut conn = Conn {
            class,
            stream: None,
            opened,
            connected: false,
            request_sent: None,
            last_write: None,
            written: 0,
            response: Vec::new(),
            responded: None,
            trickled: 0,
            state: State::Live,
            port: 0,
            closed: None,
        };
        let setup = Setup {
            source: (!self.plan.sources.is_empty()).then(|| self.plan.sources[token % self.plan.sources.len()]),
            recv_buffer: (class == Class::Unread).then_some(UNREAD_RCVBUF),
        };
        let registered = connect::connect(self.plan.addr, setup).and_then(|mut stream| {
            self.registry.register(&mut stream, Token(token), Interest::READABLE | Interest::WRITABLE)?;
            Ok(stream)
        });
        match registered {
            Ok(stream) => {
                conn.port = stream.local_addr().map_or(0, |a| a.port());
                conn.stream = Some(stream);
                self.live += 1;
                if class == Class::Slowloris {
                    self.trickles.push_back((opened + self.plan.trickle, token));
                }
            }
            Err(e) => {
                conn.state = State::Done(Outcome::Failed);
                *self.connect_failures.entry(connect::reason(&e)).or_default() += 1;
                note(&mut self.errors, format!("connect: {e}"));
                self.connect_ended(Instant::now());
            }
        }
        self.conns.push(conn);
    }

    /// Writes one byte on each slowloris connection whose turn has come.
    pub(crate) fn trickle_due(&mut self) {
        while let Some(&(due, token)) = self.trickles.front() {
            let now = Instant::now();
            if due > now {
                return;
            }
            self.trickles.pop_front();
            let conn = &mut self.conns[token];
            let (State::Live, Some(stream)) = (&conn.state, conn.stream.as_mut()) else { continue };
            if conn.connected {
                let byte = TRICKLE_HEAD.get(conn.trickled).copied().unwrap_or(TRICKLE_FILL);
                match stream.write(&[byte]) {
                    Ok(n) => conn.trickled += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => {
                        self.close(token, now);
                        continue;
                    }
                }
            }
            self.trickles.push_back((now + self.plan.trickle, token));
        }
    }

    /// A readiness event on `token`, reported by an `epoll_wait` that returned at `now`:
    /// the connect's end, the request's write, reads.
    pub(crate) fn on_event(&mut self, token: usize, hung_up: bool, now: Instant) {
        let conn = &mut self.conns[token];
        let (State::Live, Some(stream)) = (&conn.state, conn.stream.as_mut()) else { return };
        if !conn.connected {
            let failure = match (stream.take_error(), stream.peer_addr()) {
                (Ok(Some(e)) | Err(e), _) => Some(e),
                (Ok(None), Ok(_)) => None,
                (Ok(None), Err(e)) if hung_up => Some(e),
                // Not connected yet: the next event tells.
                (Ok(None), Err(_)) => return,
            };
            if let Some(e) = failure {
                *self.connect_failures.entry(connect::reason(&e)).or_default() += 1;
                note(&mut self.errors, format!("connect: {e}"));
                self.finish(token, Outcome::Failed);
                self.connect_ended(now);
                return;
            }
            conn.connected = true;
            self.last_connected = Some(self.last_connected.map_or(now, |last| last.max(now)));
        }
        if conn.class == Class::Unread {
            // Never reads: the server's close is a hang-up (a reset, or its end of stream).
            if hung_up {
                return self.close(token, now);
            }
            return self.write_unread(token);
        }
        let mut now = now;
        if conn.class == Class::Idle && conn.written < REQUEST.len() {
            let before = Instant::now();
            match stream.write(&REQUEST[conn.written..]) {
                Ok(n) => {
                    conn.written += n;
                    if conn.written == REQUEST.len() {
                        conn.request_sent = Some(before);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return self.close(token, now),
            }
            // What the read below finds came after this write, not by the batch's instant:
            // the response to it is stamped when it is read.
            now = Instant::now();
        }
        self.read(token, now);
    }

    /// Writes pipelined requests on unread connection `token` until the socket takes no
    /// more (or `UNREAD_MAX_BYTES`); a failed write is the server's close.
    fn write_unread(&mut self, token: usize) {
        let batch = REQUEST.repeat(UNREAD_BATCH);
        loop {
            let conn = &mut self.conns[token];
            let Some(stream) = conn.stream.as_mut() else { return };
            if conn.written >= UNREAD_MAX_BYTES {
                return;
            }
            let offset = conn.written % batch.len();
            let before = Instant::now();
            match stream.write(&batch[offset..]) {
                Ok(n) => {
                    conn.request_sent.get_or_insert(before);
                    conn.written += n;
                    conn.last_write = Some(Instant::now());
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.close(token, Instant::now()),
            }
        }
    }

    /// Reads until it would block: a close, or (idle) the response.
    fn read(&mut self, token: usize, now: Instant) {
        let mut buf = [0u8; 4096];
        loop {
            let conn = &mut self.conns[token];
            let Some(stream) = conn.stream.as_mut() else { return };
            match stream.read(&mut buf) {
                Ok(0) => return self.close(token, now),
                Ok(n) if conn.class == Class::Idle && conn.responded.is_none() => {
                    conn.response.extend_from_slice(&buf[..n]);
                    match response::frame(&conn.response) {
                        Ok(Some(framed)) if framed.status != 200 => {
                            note(&mut self.errors, format!("idle: status {} to GET /", framed.status));
                            return self.finish(token, Outcome::Failed);
                        }
                        Ok(Some(_)) => {
                            conn.responded = Some(now);
                            conn.response = Vec::new();
                        }
                        Ok(None) => {}
                        Err(e) => {
                            note(&mut self.errors, format!("idle: {e}"));
                            return self.finish(token, Outcome::Failed);
                        }
                    }
                }
                // Bytes nobody asked for (an error page before a close): read past them.
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.close(token, now),
            }
        }
    }

    /// The server closed `token`, seen at `closed`: its outcome against its timeout.
    fn close(&mut self, token: usize, closed: Instant) {
        self.conns[token].closed = Some(closed);
        let conn = &self.conns[token];
        let outcome = match conn.class {
            Class::Silent | Class::Slowloris if conn.connected => {
                let timeout = self.plan.header_timeout;
                Outcome::closed(closed, conn.opened + timeout, conn.opened, timeout)
            }
            Class::Unread => match (conn.request_sent, conn.last_write) {
                (Some(first), Some(last)) => {
                    let timeout = self.plan.send_timeout;
                    Outcome::closed(closed, last + timeout, first, timeout)
                }
                _ => {
                    note(&mut self.errors, "unread: closed before its first request".to_string());
                    Outcome::Failed
                }
            },
            Class::Idle => match (conn.request_sent, conn.responded) {
                (Some(sent), Some(responded)) => {
                    let timeout = self.plan.idle_timeout;
                    Outcome::closed(closed, responded + timeout, sent, timeout)
                }
                _ => {
                    note(&mut self.errors, "idle: closed before its whole response".to_string());
                    Outcome::Failed
                }
            },
            _ => Outcome::Failed,
        };
        self.finish(token, outcome);
    }

    /// Drops `token`'s stream and records its outcome.
    fn finish(&mut self, token: usize, outcome: Outcome) {
        let conn = &mut self.conns[token];
        // Closing the descriptor takes it out of the epoll set: no `epoll_ctl` call, one
        // syscall fewer per close in the wave of closes the client must stamp.
        if conn.stream.take().is_some() {
            self.live -= 1;
        }
        conn.state = State::Done(outcome);
    }

    /// `--trace`: a line per connection, `port class opened_ns responded_ns closed_ns`
    /// (`CLOCK_MONOTONIC` ns; `-` where there is none).
    pub(crate) fn trace(&self) -> String {
        let ns = |i: Option<Instant>| i.map_or("-".to_string(), |i| crate::mono::mono_ns(i).to_string());
        let mut out = String::new();
        for c in &self.conns {
            out +=
                &format!("{} {} {} {} {}\n", c.port, c.class.name(), ns(Some(c.opened)), ns(c.responded), ns(c.closed));
        }
        out
    }

    /// Every class's figures; connections still live are open.
    pub(crate) fn report(&self, opening: Duration, ran: Duration) -> Report {
        let classes = Class::ALL
            .iter()
            .map(|&class| {
                let outcomes = self.conns.iter().filter(|c| c.class == class).map(|c| match c.state {
                    State::Live => Outcome::Open,
                    State::Done(outcome) => outcome,
                });
                ClassReport::of(class, outcomes)
            })
            .collect();
        Report { classes, opening, ran, errors: self.errors.clone() }
    }
}

/// Keeps `error` if it is new and there is room.
pub(crate) fn note(errors: &mut Vec<String>, error: String) {
    if errors.len() < MAX_ERRORS && !errors.contains(&error) {
        errors.push(error);
    }
}
