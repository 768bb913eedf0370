//! The active connections: keep-alive, each sending `GET <path>` on its own fixed schedule,
//! open loop.
//!
//! A request is due at its scheduled instant whether or not the previous one came back: if
//! the connection is busy, the request is written behind it (HTTP/1.1 pipelining keeps
//! order), so a stalled server meets every request it would have met, and each one's latency
//! runs from its *scheduled* instant to the loop's seeing the last byte of its response —
//! the queueing a closed-loop client (wrk) leaves out ("coordinated omission"). Every
//! connection has the same interval, so one queue ordered by due instant serves all: pushing
//! the next due at the back keeps it ordered (as the slowloris bytes in `client.rs`).
//!
//! A response is stamped with the instant `epoll_wait` returned the batch that reported it
//! (it had arrived by then), unless this handling wrote first: then when it is read.

use super::counts::Counts;
use crate::connect::{self, Setup};
use crate::report::Outcome;
use crate::response;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// The active connections' tokens start here; the held ones' are below.
pub const TOKEN_BASE: usize = 1 << 40;

/// A request written and not yet answered.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// When it was due.
    scheduled: Instant,
    /// Due inside the measured window.
    measured: bool,
}

/// One active connection.
#[derive(Debug)]
struct Conn {
    /// `None` once closed (or never opened).
    stream: Option<TcpStream>,
    connected: bool,
    /// Bytes due to be written (requests behind a full socket, or before the connect ends).
    out: Vec<u8>,
    /// Bytes read, not yet a whole response.
    input: Vec<u8>,
    pending: VecDeque<Pending>,
    /// Before the last write call that took bytes: the server cannot have read the last
    /// request, so cannot have armed its idle timer, before it.
    last_write: Option<Instant>,
    /// When the last response was whole.
    last_response: Option<Instant>,
    /// How it ended, as a connection gone quiet (its idle close against the timeout).
    outcome: Option<Outcome>,
}

/// Every active connection of a process, their schedule and their figures.
#[derive(Debug)]
pub struct Actives {
    addr: SocketAddr,
    request: Vec<u8>,
    conns: Vec<Conn>,
    /// `(due, connection)`, ordered by due.
    due: VecDeque<(Instant, usize)>,
    interval: Duration,
    window_start: Instant,
    window_end: Instant,
    sending_end: Instant,
    /// Whether the connections go quiet at `sending_end`, their closes timed.
    quiet: bool,
    idle_timeout: Duration,
    sources: Vec<Ipv4Addr>,
    pub counts: Counts,
}

impl Actives {
    /// `count` connections to `addr` sending `GET path` at `rate` per second in all, the
    /// first due from `start`; connection `i`'s phase is `phase(i)` of the interval.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        addr: SocketAddr,
        path: &str,
        count: usize,
        rate: f64,
        schedule: &super::plan::Schedule,
        idle_timeout: Duration,
        sources: Vec<Ipv4Addr>,
        phase: impl Fn(usize) -> f64,
    ) -> Actives {
        let interval = if count == 0 { Duration::ZERO } else { Duration::from_secs_f64(count as f64 / rate) };
        let due = (0..count).map(|i| (schedule.warmup_start + interval.mul_f64(phase(i)), i)).collect();
        Actives {
            addr,
            request: format!("GET {path} HTTP/1.1\r\nHost: shardwheel-load\r\n\r\n").into_bytes(),
            conns: Vec::with_capacity(count),
            due,
            interval,
            window_start: schedule.window_start,
            window_end: schedule.window_end,
            sending_end: schedule.sending_end,
            quiet: schedule.quiet,
            idle_timeout,
            sources,
            counts: Counts::new(),
        }
    }

    /// How many were opened so far.
    pub fn opened(&self) -> usize {
        self.conns.len()
    }

    /// Requests written and not answered, over all the connections.
    pub fn outstanding(&self) -> usize {
        self.conns.iter().filter(|c| c.stream.is_some()).map(|c| c.pending.len()).sum()
    }

    /// Whether every connection gone quiet has been closed (or failed).
    pub fn all_closed(&self) -> bool {
        self.conns.iter().all(|c| c.stream.is_none())
    }

    /// When the next request is due, if one is before the sending ends.
    pub fn next_due(&self) -> Option<Instant> {
        self.due.front().map(|&(due, _)| due)
    }

    /// Opens the next connection: a nonblocking connect, registered.
    pub fn open(&mut self, registry: &Registry) {
        let i = self.conns.len();
        let setup = Setup {
            source: (!self.sources.is_empty()).then(|| self.sources[i % self.sources.len()]),
            recv_buffer: None,
        };
        let stream = connect::connect(self.addr, setup).and_then(|mut stream| {
            registry.register(&mut stream, Token(TOKEN_BASE + i), Interest::READABLE | Interest::WRITABLE)?;
            Ok(stream)
        });
        let stream = stream.map_err(|e| self.counts.connect_failed(&e)).ok();
        self.conns.push(Conn {
            stream,
            connected: false,
            out: Vec::new(),
            input: Vec::new(),
            pending: VecDeque::new(),
            last_write: None,
            last_response: None,
            outcome: None,
        });
    }

    /// Writes every request due by now; schedules each connection's next.
    pub fn send_due(&mut self, now: Instant) {
        while let Some(&(due, i)) = self.due.front() {
            if due > now {
                return;
            }
            self.due.pop_front();
            if due >= self.sending_end {
                // Its connection's schedule is over (and every later one's).
                continue;
            }
            self.send(i, due);
            self.due.push_back((due + self.interval, i));
        }
    }

    /// Request `i`'s request due at `due`: queued behind what it has in flight, written.
    fn send(&mut self, i: usize, due: Instant) {
        let measured = due >= self.window_start && due < self.window_end;
        // Not opened yet (a ramp behind its pace), failed, or closed by the server: the request
        // cannot be sent.
        let Some(conn) = self.conns.get_mut(i).filter(|c| c.stream.is_some()) else {
            self.counts.error("not sent: the connection is closed");
            return;
        };
        if measured && !conn.pending.is_empty() {
            self.counts.queued += 1;
        }
        self.counts.sent += 1;
        conn.pending.push_back(Pending { scheduled: due, measured });
        conn.out.extend_from_slice(&self.request);
        if conn.connected {
            self.flush(i);
        }
    }

    /// Writes what `i` has to write until the socket takes no more; true if it wrote.
    fn flush(&mut self, i: usize) -> bool {
        let mut wrote = false;
        loop {
            let conn = &mut self.conns[i];
            let Some(stream) = conn.stream.as_mut() else { return wrote };
            if conn.out.is_empty() {
                return wrote;
            }
            let before = Instant::now();
            match stream.write(&conn.out) {
                Ok(n) => {
                    conn.out.drain(..n);
                    conn.last_write = Some(before);
                    wrote = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return wrote,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close(i, Instant::now());
                    return wrote;
                }
            }
        }
    }

    /// A readiness event on connection `i`, from an `epoll_wait` that returned at `polled`.
    pub fn on_event(&mut self, i: usize, hung_up: bool, polled: Instant) {
        let conn = &mut self.conns[i];
        let Some(stream) = conn.stream.as_mut() else { return };
        if !conn.connected {
            let failure = match (stream.take_error(), stream.peer_addr()) {
                (Ok(Some(e)) | Err(e), _) => Some(e),
                (Ok(None), Ok(_)) => None,
                (Ok(None), Err(e)) if hung_up => Some(e),
                // Not connected yet: the next event tells.
                (Ok(None), Err(_)) => return,
            };
            if let Some(e) = failure {
                self.counts.connect_failed(&e);
                conn.stream = None;
                conn.outcome = Some(Outcome::Failed);
                return;
            }
            conn.connected = true;
            self.counts.connected(polled);
        }
        let wrote = self.flush(i);
        self.read(i, if wrote { Instant::now() } else { polled });
    }

    /// Reads until it would block: whole responses answer the oldest pending requests.
    fn read(&mut self, i: usize, now: Instant) {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let Some(stream) = self.conns[i].stream.as_mut() else { return };
            match stream.read(&mut buf) {
                Ok(0) => return self.close(i, now),
                Ok(n) => {
                    self.conns[i].input.extend_from_slice(&buf[..n]);
                    if !self.take_responses(i, now) {
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.close(i, now),
            }
        }
    }

    /// Takes every whole response off `i`'s input, each answering its oldest pending request;
    /// false if the connection was dropped (a response it cannot frame or did not ask for).
    fn take_responses(&mut self, i: usize, now: Instant) -> bool {
        loop {
            let conn = &mut self.conns[i];
            let framed = match response::frame(&conn.input) {
                Ok(Some(framed)) => framed,
                Ok(None) => return true,
                Err(e) => {
                    self.counts.error(&format!("response: {e}"));
                    self.drop_conn(i);
                    return false;
                }
            };
            conn.input.drain(..framed.len);
            let Some(request) = conn.pending.pop_front() else {
                self.counts.error("response: one more than the requests");
                self.drop_conn(i);
                return false;
            };
            conn.last_response = Some(now);
            if !(200..400).contains(&framed.status) {
                self.counts.error(&format!("status {}", framed.status));
            }
            self.counts.answered(request.scheduled, request.measured, now, self.window_start, self.sending_end);
        }
    }

    /// The server closed `i`, seen at `closed`: a quiet connection's close against the idle
    /// timeout; any other's requests in flight are errors.
    fn close(&mut self, i: usize, closed: Instant) {
        let conn = &mut self.conns[i];
        conn.stream = None;
        let answered_all = conn.pending.is_empty() && conn.out.is_empty();
        for _ in conn.pending.drain(..) {
            self.counts.error("closed with a request in flight");
        }
        let went_quiet = self.quiet && closed >= self.sending_end;
        conn.outcome = Some(match (went_quiet && answered_all, conn.last_response, conn.last_write) {
            (true, Some(responded), Some(written)) => {
                Outcome::closed(closed, responded + self.idle_timeout, written, self.idle_timeout)
            }
            _ => {
                if self.quiet {
                    self.counts.error("closed before going quiet");
                }
                Outcome::Failed
            }
        });
    }

    /// Drops `i` (a response it cannot follow): its requests in flight are errors.
    fn drop_conn(&mut self, i: usize) {
        let conn = &mut self.conns[i];
        conn.stream = None;
        conn.outcome = Some(Outcome::Failed);
        for _ in conn.pending.drain(..) {
            self.counts.error("dropped with a request in flight");
        }
    }

    /// Each connection's outcome as one gone quiet: closed (late by how much), open, failed.
    pub fn quiet_outcomes(&self) -> impl Iterator<Item = Outcome> + '_ {
        self.conns.iter().map(|c| c.outcome.unwrap_or(if c.stream.is_some() { Outcome::Open } else { Outcome::Failed }))
    }
}
