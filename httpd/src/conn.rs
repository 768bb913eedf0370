//! One connection's state machine and its four timers.
//!
//! ```text
//!   accept ──► Head ──(head complete)──► respond ──► Idle ──(a byte)──► Head …
//!               │  └──(GET /delay/ms)──► Delay ──(timer)──┘   │
//!               └─(header timer)──► closed      (idle timer)─┘──► closed
//! ```
//!
//! - **Head**: the header-read timer is armed, at accept or when the first byte of a later
//!   request comes (or, pipelined, when the previous response is written), and cancelled
//!   when the head is complete: an arm and a cancel per request. Bytes that trickle in do
//!   not push it out, so a slowloris client is closed at the timeout. (A keep-alive
//!   connection waiting for its next request is under the idle timer instead, as in nginx,
//!   whose `client_header_timeout` also counts from the request's first byte.)
//! - **Delay**: `GET /delay/<ms>` is answered by a timer `<ms>` later; requests pipelined
//!   behind it wait, so responses go out in order.
//! - **Idle**: after each response the idle timer is pushed out (`reset_at`, armed afresh
//!   only the first time or after it fired), so a busy keep-alive connection resets one
//!   timer rather than arming one per request. It closes the connection only if it fires
//!   while the connection is idle: no request in hand and no response waiting for the
//!   peer. Firing in the middle of a request, it is dropped, and the next response arms it
//!   again; firing while a response waits for the peer, it is dropped, and armed again from
//!   the moment the peer has taken the last byte.
//! - **Send**: while a response waits for the peer to take its next bytes (a write that
//!   would block), the send timer runs, as nginx's `send_timeout`: armed when a write first
//!   blocks, pushed out each time the peer takes bytes, cancelled when the output is all
//!   sent. Meanwhile the header and idle timers do not close the connection (requests
//!   read behind a blocked response are not a slow head, nor is the wait idle); firing
//!   then, they are armed again from the moment the output is all sent. If it fires, the connection is reset (`SO_LINGER` 0: the kernel drops what the
//!   peer never took). A peer that pipelines requests and never reads is closed by it; a
//!   connection whose writes never block never arms it. Each stall (a write that would
//!   block, the first since bytes last went through) is counted, and so is its end (bytes
//!   through, or the close): `/stats` has `send_stalls`, and the ones not over,
//!   `waiting_for_peer`.
//! - **Half-close**: a peer that shuts down its sending side has its requests answered
//!   first: a `/delay/` in hand, and whole requests behind it; then, with every response
//!   sent, the connection closes. (A partial head at the end of the stream is dropped.)
//! - **Stop**: at the graceful stop ([`Conn::stop`]) a connection with nothing in hand
//!   closes at once; one with a response in hand (a `/delay/`, or output waiting for the
//!   peer) reads no more, finishes that response with `Connection: close`, and closes, as
//!   hyper's `graceful_shutdown` does. Requests pipelined behind it are not answered.
//!
//! Every timer a connection holds is cancelled when it closes, so a timer that fires always
//! names a live connection; the key is checked all the same.

use crate::http::{self, Parsed, Route, Status};
use crate::stats::{ThreadStats, TimedOut, Totals, bump};
use mio::net::TcpStream;
use shardwheel::{LocalWheel, TimerKey};
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// Input held at most before reading stops until requests are answered.
const INPUT_CAP: usize = 64 * 1024;
/// Output waiting for the peer at most before answering stops until it reads.
const OUTPUT_CAP: usize = 64 * 1024;
/// Bytes read per `read` call.
const READ_CHUNK: usize = 16 * 1024;

/// A timer's payload in a thread's wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnTimer {
    /// A connection's timer: the connection's slab index and which of its timers.
    Conn { id: usize, kind: TimerKind },
    /// The graceful stop, armed by the main thread through the `RemoteWheel`: the thread
    /// stops accepting and finishes the requests in hand.
    Shutdown,
    /// The end of the graceful stop's grace: what is still open is closed.
    StopGrace,
    /// An `accept` that failed for want of descriptors (or memory) is tried again.
    AcceptRetry,
}

/// Which of a connection's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKind {
    Header,
    Idle,
    Delay,
    Send,
}

/// Where a connection is in its request cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading a request's head, under the header timer.
    Head,
    /// A `/delay/` response waits for its timer.
    Delay,
    /// Between requests, under the idle timer.
    Idle,
}

/// Why a connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// The peer closed it, reset it, or an I/O error.
    Peer,
    /// A response with `Connection: close`, as the request asked (or HTTP/1.0), went out.
    Answered,
    /// The `400`, `413` or `431` answer to a bad request went out, with `Connection: close`.
    BadRequest,
    /// Its header-read timer fired.
    HeaderTimeout,
    /// Its idle timer fired.
    IdleTimeout,
    /// Its send timer fired: a response waited for the peer to read longer than the send
    /// timeout.
    SendTimeout,
    /// The graceful stop.
    Shutdown,
}

/// The timeouts every connection runs under.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header: Duration,
    pub idle: Duration,
    /// How long a response may wait for the peer to take its next bytes.
    pub send: Duration,
}

impl Timeouts {
    /// The timeouts `flags` ask for.
    pub fn of(flags: &crate::Flags) -> Timeouts {
        Timeouts {
            header: Duration::from_millis(flags.header_timeout_ms),
            idle: Duration::from_millis(flags.idle_timeout_ms),
            send: Duration::from_millis(flags.send_timeout_ms),
        }
    }
}

/// What a connection's handlers need from its thread: the wheel, the counters, the time.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub wheel: &'a mut LocalWheel<ConnTimer>,
    /// This thread's counters.
    pub stats: &'a ThreadStats,
    /// Every thread's counters, for `GET /stats`.
    pub all: &'a [ThreadStats],
    pub timeouts: Timeouts,
    /// The instant the loop woke at (what fired timers are measured against).
    pub now: Instant,
}

impl Ctx<'_> {
    /// Arms a timer of connection `id` at `deadline`.
    fn arm(&mut self, id: usize, kind: TimerKind, deadline: Instant) -> Timer {
        bump(&self.stats.counters.timers_armed);
        Timer { key: self.wheel.arm_at(deadline, ConnTimer::Conn { id, kind }), deadline }
    }

    /// Pushes `timer` out to `deadline` (`reset_at`), or arms it afresh if it is not pending.
    fn push_out(&mut self, timer: &mut Option<Timer>, id: usize, kind: TimerKind, deadline: Instant) {
        match timer {
            Some(t) if self.wheel.reset_at(t.key, deadline) => {
                t.deadline = deadline;
                bump(&self.stats.counters.timers_reset);
            }
            _ => *timer = Some(self.arm(id, kind, deadline)),
        }
    }

    /// Cancels `timer` if it is still pending.
    fn cancel(&mut self, timer: Option<Timer>) {
        if let Some(timer) = timer
            && self.wheel.cancel(timer.key).is_some()
        {
            bump(&self.stats.counters.timers_cancelled);
        }
    }
}

/// Where a read stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadEnd {
    /// The socket has nothing more for now.
    Drained,
    /// The input is at its cap; the socket may hold more.
    Cap,
    /// The peer closed its end.
    Eof,
}

/// What a socket's readiness event said.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ready {
    /// It has bytes to read (or an error to read).
    pub readable: bool,
    /// The peer closed its end (or an error): read until the end is seen.
    pub closed: bool,
}

impl Ready {
    /// What an event's flags say: `readable`, `read_closed` (the peer shut its sending side
    /// or the connection hung up) and `error`. Writable only (a fresh connection, an ACK of
    /// a response) is no read to try; a close or an error is one, to see the end.
    pub fn of(readable: bool, read_closed: bool, error: bool) -> Ready {
        let closed = read_closed || error;
        Ready { readable: readable || closed, closed }
    }
}

/// A pending timer: its key, and the deadline it was armed for (for lateness).
#[derive(Debug, Clone, Copy)]
struct Timer {
    key: TimerKey,
    deadline: Instant,
}

/// One connection.
#[derive(Debug)]
pub struct Conn {
    /// Its index in the thread's slab: its timers' payload.
    id: usize,
    pub stream: TcpStream,
    phase: Phase,
    /// Bytes read and not yet consumed by a request.
    input: Vec<u8>,
    /// Bytes to send, of which `written` are sent.
    output: Vec<u8>,
    written: usize,
    /// Once `output` is sent, close, for this reason (a `Connection: close` response went in).
    closing: Option<Close>,
    /// The peer shut down its sending side: no more reads; once what it asked for is
    /// answered, the connection closes.
    eof: bool,
    /// The last read stopped at the input's cap: the socket may hold more, and no event
    /// will say so.
    unread: bool,
    header: Option<Timer>,
    idle: Option<Timer>,
    /// The `/delay/` timer, its milliseconds, and whether the connection stays open after.
    delay: Option<(Timer, u64, bool)>,
    /// Runs while a response waits for the peer to take its next bytes.
    send: Option<Timer>,
    /// A write would block and no bytes went through since: a stall, counted in
    /// `send_stalls` when it began, in `send_stalls_ended` when it ends.
    stalled: bool,
    /// The graceful stop came: nothing more is read or answered; the response in hand is
    /// finished, then the connection closes.
    stopping: bool,
}

impl Conn {
    /// A connection just accepted, its header timer armed from `accepted` (when `accept`
    /// returned it: the kernel had it by then, so the timeout cannot fire early).
    pub fn accept(id: usize, stream: TcpStream, accepted: Instant, ctx: &mut Ctx<'_>) -> Conn {
        bump(&ctx.stats.counters.connections);
        let mut conn = Conn {
            id,
            stream,
            phase: Phase::Idle,
            input: Vec::new(),
            output: Vec::new(),
            written: 0,
            closing: None,
            eof: false,
            unread: false,
            header: None,
            idle: None,
            delay: None,
            send: None,
            stalled: false,
            stopping: false,
        };
        conn.enter_head_at(accepted, ctx);
        conn
    }

    /// The deadline its timer `kind` is armed for, if armed.
    pub fn deadline(&self, kind: TimerKind) -> Option<Instant> {
        match kind {
            TimerKind::Header => self.header.map(|t| t.deadline),
            TimerKind::Idle => self.idle.map(|t| t.deadline),
            TimerKind::Delay => self.delay.map(|(t, ..)| t.deadline),
            TimerKind::Send => self.send.map(|t| t.deadline),
        }
    }

    /// Reads (if the socket has something: `ready`, or a read stopped at the input's cap),
    /// answers and writes what it can; `Err` says why it must close.
    pub fn drive(&mut self, ready: Ready, ctx: &mut Ctx<'_>) -> Result<(), Close> {
        let mut ready = ready;
        loop {
            let end = if self.eof {
                ReadEnd::Eof
            } else if (ready.readable || self.unread) && !self.stopping {
                self.read(ready.closed, ctx)?
            } else {
                ReadEnd::Drained
            };
            self.eof = end == ReadEnd::Eof;
            // Read once: a second pass reads only what a read at the cap left behind.
            ready.readable = false;
            let consumed = self.answer(ctx);
            self.flush(ctx)?;
            if let Some(why) = self.closing
                && self.output.is_empty()
            {
                return Err(why);
            }
            // Answering stopped at the output's cap and the socket took it all: answer the
            // requests still waiting in the input (no event would come for them).
            let more = consumed && self.output.is_empty() && !self.input.is_empty();
            match end {
                ReadEnd::Eof if more => {}
                // The peer sent all it will and what it asked for is answered (a request in
                // hand, a `/delay/`, is answered first; a partial head never will be): close.
                ReadEnd::Eof if self.output.is_empty() && self.phase != Phase::Delay => return Err(Close::Peer),
                // Input left behind at the cap: read on once answering made room.
                ReadEnd::Cap if consumed => {}
                ReadEnd::Drained if more => {}
                ReadEnd::Eof | ReadEnd::Cap | ReadEnd::Drained => return Ok(()),
            }
        }
    }

    /// One of this connection's timers fired.
    pub fn on_timer(&mut self, kind: TimerKind, key: TimerKey, ctx: &mut Ctx<'_>) -> Result<(), Close> {
        let now = ctx.now;
        let late = |timer: Timer| now.saturating_duration_since(timer.deadline);
        match kind {
            TimerKind::Header if self.header.is_some_and(|t| t.key == key) => {
                let timer = self.header.take().expect("checked");
                // Requests read while responses wait for the peer (answering stopped at the
                // output's cap) are not a slow head: the send timer has the connection, and
                // `flush` arms this one again once the peer took it all.
                if self.phase == Phase::Head && self.output.is_empty() {
                    ctx.stats.record_lateness(TimedOut::Header, late(timer));
                    return Err(Close::HeaderTimeout);
                }
            }
            TimerKind::Idle if self.idle.is_some_and(|t| t.key == key) => {
                let timer = self.idle.take().expect("checked");
                // A response waiting for the peer is not idle: the send timer has it, and
                // `flush` arms this one again once the peer took it all.
                if self.phase == Phase::Idle && self.output.is_empty() {
                    ctx.stats.record_lateness(TimedOut::Idle, late(timer));
                    return Err(Close::IdleTimeout);
                }
            }
            TimerKind::Send if self.send.is_some_and(|t| t.key == key) => {
                let timer = self.send.take().expect("checked");
                if !self.output.is_empty() {
                    ctx.stats.record_lateness(TimedOut::Send, late(timer));
                    return Err(Close::SendTimeout);
                }
            }
            TimerKind::Delay if self.delay.is_some_and(|(t, ..)| t.key == key) => {
                let (_, ms, keep_alive) = self.delay.take().expect("checked");
                let body = format!("delayed {ms} ms\n");
                http::respond(&mut self.output, Status::Ok, "text/plain", body.as_bytes(), keep_alive);
                self.responded(keep_alive, ctx);
                return self.drive(Ready::default(), ctx);
            }
            // A stale key: nothing of this connection's.
            _ => {}
        }
        Ok(())
    }

    /// The graceful stop: `Err` if nothing is in hand (close it now); else it reads no more,
    /// answers nothing more, and closes once the response in hand is out (its `/delay/`
    /// answered with `Connection: close`, or the output waiting for the peer sent), under
    /// its send timer and the stop's grace.
    pub fn stop(&mut self) -> Result<(), Close> {
        self.stopping = true;
        self.input.clear();
        if let Some((_, _, keep_alive)) = &mut self.delay {
            *keep_alive = false;
            return Ok(());
        }
        if self.output.is_empty() {
            return Err(Close::Shutdown);
        }
        // One closing already (a `Connection: close` answer in the output) keeps its reason.
        self.closing.get_or_insert(Close::Shutdown);
        Ok(())
    }

    /// Closes: cancels every timer it holds and counts why, in exactly one reason. The
    /// socket closes on drop; after a send timeout, with a reset (what the peer never took
    /// is dropped at once, not kept by the kernel for a peer that does not read).
    pub fn close(mut self, why: Close, ctx: &mut Ctx<'_>) {
        ctx.cancel(self.header.take());
        ctx.cancel(self.idle.take());
        ctx.cancel(self.delay.take().map(|(t, ..)| t));
        ctx.cancel(self.send.take());
        self.unstall(ctx);
        if why == Close::SendTimeout {
            let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
        }
        let c = &ctx.stats.counters;
        bump(match why {
            Close::Peer => &c.peer_closes,
            Close::Answered => &c.answered_closes,
            Close::BadRequest => &c.bad_request_closes,
            Close::HeaderTimeout => &c.header_timeouts,
            Close::IdleTimeout => &c.idle_timeouts,
            Close::SendTimeout => &c.send_timeouts,
            Close::Shutdown => &c.shutdown_closes,
        });
    }

    /// Reads until the socket is drained, the input is at its cap, or the peer's end. A
    /// read shorter than asked drained it (its event came after the bytes, and a later byte
    /// brings a new event), so no read is spent on `WouldBlock`, unless the peer `closed`
    /// its end: then it reads on to see the end.
    fn read(&mut self, closed: bool, ctx: &mut Ctx<'_>) -> Result<ReadEnd, Close> {
        // The thread's buffer, zeroed once (a fresh one was 16 KiB of memset per read,
        // 1.7 % of the server's time under wrk).
        thread_local! {
            static CHUNK: RefCell<Box<[u8]>> = RefCell::new(vec![0; READ_CHUNK].into_boxed_slice());
        }
        let end = CHUNK.with_borrow_mut(|chunk| self.read_with(chunk, closed, ctx));
        self.unread = end == Ok(ReadEnd::Cap);
        end
    }

    /// `read`, through `chunk`.
    fn read_with(&mut self, chunk: &mut [u8], closed: bool, ctx: &mut Ctx<'_>) -> Result<ReadEnd, Close> {
        while self.input.len() < INPUT_CAP {
            match self.stream.read(chunk) {
                Ok(0) => return Ok(ReadEnd::Eof),
                Ok(n) => {
                    if self.phase == Phase::Idle {
                        self.enter_head(ctx);
                    }
                    self.input.extend_from_slice(&chunk[..n]);
                    if n < chunk.len() && !closed {
                        return Ok(ReadEnd::Drained);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ReadEnd::Drained),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Close::Peer),
            }
        }
        Ok(ReadEnd::Cap)
    }

    /// Answers the requests at the front of the input, in order, until one must wait (a
    /// delay, a partial head) or the output is at its cap. Whether it consumed any input.
    fn answer(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut consumed = false;
        while self.phase != Phase::Delay
            && self.closing.is_none()
            && !self.stopping
            && self.output.len() - self.written < OUTPUT_CAP
        {
            if self.input.is_empty() {
                break;
            }
            if self.phase == Phase::Idle {
                self.enter_head(ctx);
            }
            match http::parse(&self.input) {
                Parsed::Partial => break,
                Parsed::Request(req) => {
                    consumed = true;
                    ctx.cancel(self.header.take());
                    bump(&ctx.stats.counters.requests);
                    self.input.drain(..req.len);
                    self.route(req.route, req.keep_alive, req.head_only, ctx);
                }
                Parsed::Reject(status) => {
                    consumed = true;
                    ctx.cancel(self.header.take());
                    bump(&ctx.stats.counters.requests);
                    bump(&ctx.stats.counters.bad_requests);
                    http::respond_plain(&mut self.output, status, false, false);
                    self.responded(false, ctx);
                    self.closing = Some(Close::BadRequest);
                }
            }
        }
        consumed
    }

    /// Answers a request (or arms its `/delay/` timer).
    fn route(&mut self, route: Route, keep_alive: bool, head_only: bool, ctx: &mut Ctx<'_>) {
        let out = &mut self.output;
        match route {
            Route::Delay(ms) => {
                let timer = ctx.arm(self.id, TimerKind::Delay, Instant::now() + Duration::from_millis(ms));
                self.delay = Some((timer, ms, keep_alive));
                self.phase = Phase::Delay;
                return;
            }
            Route::Root => http::respond(out, Status::Ok, "text/plain", b"hello from shardwheel-httpd\n", keep_alive),
            Route::Stats => {
                let json = Totals::of(ctx.all).to_json().to_string() + "\n";
                http::respond(out, Status::Ok, "application/json", json.as_bytes(), keep_alive);
            }
            Route::BadDelay | Route::MethodNotAllowed | Route::NotFound => {
                bump(&ctx.stats.counters.bad_requests);
                let status = match route {
                    Route::BadDelay => Status::BadRequest,
                    Route::MethodNotAllowed => Status::MethodNotAllowed,
                    _ => Status::NotFound,
                };
                http::respond_plain(out, status, keep_alive, head_only);
            }
        }
        self.responded(keep_alive, ctx);
    }

    /// A response is in the output: the connection goes idle, its idle timer pushed out,
    /// and closes after the response unless `keep_alive`. (A peer that does not read the
    /// response is under the send timer, armed by `flush`.)
    fn responded(&mut self, keep_alive: bool, ctx: &mut Ctx<'_>) {
        self.phase = Phase::Idle;
        if !keep_alive {
            // The response in hand at the stop closes its connection for the stop, not
            // because the request asked.
            self.closing = Some(if self.stopping { Close::Shutdown } else { Close::Answered });
            self.input.clear();
        }
        let deadline = Instant::now() + ctx.timeouts.idle;
        ctx.push_out(&mut self.idle, self.id, TimerKind::Idle, deadline);
    }

    /// A request's head starts: the header timer is armed.
    fn enter_head(&mut self, ctx: &mut Ctx<'_>) {
        self.enter_head_at(Instant::now(), ctx);
    }

    /// A request's head starts at `start`: the header timer is armed from it.
    fn enter_head_at(&mut self, start: Instant, ctx: &mut Ctx<'_>) {
        self.phase = Phase::Head;
        let deadline = start + ctx.timeouts.header;
        self.header = Some(ctx.arm(self.id, TimerKind::Header, deadline));
    }

    /// Ends a stall, if one is on: bytes went through, or the connection closes.
    fn unstall(&mut self, ctx: &mut Ctx<'_>) {
        if self.stalled {
            self.stalled = false;
            bump(&ctx.stats.counters.send_stalls_ended);
        }
    }

    /// Writes what the socket takes. A write that would block starts the send timer (or
    /// pushes it out, if the peer took bytes since it started); once the output is all
    /// sent, the send timer is cancelled, and a connection whose idle or header timer fired
    /// meanwhile (ignored: the response waited for the peer) gets it again, from now.
    fn flush(&mut self, ctx: &mut Ctx<'_>) -> Result<(), Close> {
        let mut took = false;
        while self.written < self.output.len() {
            match self.stream.write(&self.output[self.written..]) {
                Ok(0) => return Err(Close::Peer),
                Ok(n) => {
                    self.written += n;
                    took = true;
                    self.unstall(ctx);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !self.stalled {
                        self.stalled = true;
                        bump(&ctx.stats.counters.send_stalls);
                    }
                    if took || self.send.is_none() {
                        let deadline = Instant::now() + ctx.timeouts.send;
                        ctx.push_out(&mut self.send, self.id, TimerKind::Send, deadline);
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Close::Peer),
            }
        }
        self.output.clear();
        self.written = 0;
        ctx.cancel(self.send.take());
        match self.phase {
            Phase::Idle if self.idle.is_none() && self.closing.is_none() => {
                self.idle = Some(ctx.arm(self.id, TimerKind::Idle, Instant::now() + ctx.timeouts.idle));
            }
            Phase::Head if self.header.is_none() => self.enter_head(ctx),
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Shutdown, TcpListener};

    /// How many `GET /`s the client pipelines: some 140 KiB of answers, many times what the
    /// kernel's small buffers below hold, and over the output's cap.
    const REQUESTS: usize = 1000;

    /// A thread's wheel and counters, as a `Worker` lends them to its connections.
    struct Thread {
        wheel: LocalWheel<ConnTimer>,
        stats: Vec<ThreadStats>,
    }

    impl Thread {
        fn new() -> Thread {
            Thread { wheel: LocalWheel::new(), stats: vec![ThreadStats::default()] }
        }

        /// The timeouts far off: none of them fires during a test.
        fn ctx(&mut self) -> Ctx<'_> {
            let long = Duration::from_secs(60);
            Ctx {
                wheel: &mut self.wheel,
                stats: &self.stats[0],
                all: &self.stats,
                timeouts: Timeouts { header: long, idle: long, send: long },
                now: Instant::now(),
            }
        }
    }

    /// A connection on loopback and its client, the client's receive buffer and the server's
    /// send buffer small: the kernel holds a few KiB of the answers, the rest waits in the
    /// connection's output until the client reads.
    fn connection(thread: &mut Thread) -> (Conn, std::net::TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(&listener.local_addr().unwrap().into()).unwrap();
        let client: std::net::TcpStream = socket.into();
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (stream, _) = listener.accept().unwrap();
        socket2::SockRef::from(&stream).set_send_buffer_size(4096).unwrap();
        stream.set_nonblocking(true).unwrap();
        let conn = Conn::accept(0, TcpStream::from_std(stream), Instant::now(), &mut thread.ctx());
        (conn, client)
    }

    /// The socket's event once the peer's end of stream is there.
    const CLOSED: Ready = Ready { readable: true, closed: true };

    /// Drives `conn` on the end of stream's event until it has seen it (the client
    /// half-closed: the end is on its way), each turn answering `Ok`; then its answers must
    /// still wait for the client, or the test would not reach what it is for.
    fn until_the_end_is_seen(conn: &mut Conn, thread: &mut Thread) {
        let until = Instant::now() + Duration::from_secs(5);
        while !conn.eof {
            let driven = conn.drive(CLOSED, &mut thread.ctx());
            let waiting = conn.output.len() - conn.written;
            assert_eq!(driven, Ok(()), "closed with {waiting} bytes of answers the half-closed client never got");
            assert!(Instant::now() < until, "the client's end of stream never came");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!conn.output.is_empty(), "the end of stream was seen with the answers all sent: nothing to test");
        assert_eq!(Totals::of(&thread.stats).waiting_for_peer(), 1, "answers waiting, not counted as a stall");
    }

    /// The client reads as the connection writes on (each turn a writable event, the end of
    /// stream seen already) until the connection closes: with every answer sent, as the peer's
    /// close. Then the client must have them all, and the end of stream.
    fn read_to_the_close(mut conn: Conn, mut client: std::net::TcpStream, thread: &mut Thread) {
        let mut got = Vec::new();
        let mut chunk = [0u8; 64 * 1024];
        client.set_nonblocking(true).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        let why = loop {
            loop {
                match client.read(&mut chunk) {
                    Ok(n) => {
                        assert!(n > 0, "the end of stream while the connection is open");
                        got.extend_from_slice(&chunk[..n]);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e} while the client read"),
                }
            }
            if let Err(why) = conn.drive(Ready::default(), &mut thread.ctx()) {
                break why;
            }
            assert!(Instant::now() < until, "the answers never all went out");
            std::thread::yield_now();
        };
        let waiting = conn.output.len() - conn.written;
        assert_eq!(why, Close::Peer);
        assert_eq!(waiting, 0, "closed with {waiting} bytes of answers the half-closed client never got");
        conn.close(why, &mut thread.ctx());
        let totals = Totals::of(&thread.stats);
        assert!(totals.send_stalls > 0 && totals.waiting_for_peer() == 0, "stalls counted: {totals:?}");
        client.set_nonblocking(false).unwrap();
        client.read_to_end(&mut got).expect("the rest, then the end of stream");
        let text = String::from_utf8(got).expect("text");
        let answered = text.matches("HTTP/1.1 200 OK\r\n").count();
        assert_eq!(answered, REQUESTS, "answers the half-closed client got");
        assert!(text.ends_with("hello from shardwheel-httpd\n"), "the last answer cut short");
    }

    /// A client that pipelines more answers than the kernel's buffers take and half-closes
    /// gets every answer, then the close, when the turn that reads its requests reads its end
    /// of stream too (and so does every later turn, on writable events, the end seen already).
    #[test]
    fn a_half_closed_client_gets_every_answer_when_its_end_comes_with_its_requests() {
        let mut thread = Thread::new();
        let (mut conn, mut client) = connection(&mut thread);
        client.write_all("GET / HTTP/1.1\r\nHost: t\r\n\r\n".repeat(REQUESTS).as_bytes()).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        until_the_end_is_seen(&mut conn, &mut thread);
        read_to_the_close(conn, client, &mut thread);
    }

    /// As above, its end of stream read in a later turn, with the answers already waiting.
    #[test]
    fn a_half_closed_client_gets_every_answer_when_its_end_comes_after_they_wait() {
        let mut thread = Thread::new();
        let (mut conn, mut client) = connection(&mut thread);
        client.write_all("GET / HTTP/1.1\r\nHost: t\r\n\r\n".repeat(REQUESTS).as_bytes()).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while conn.input.is_empty() && conn.output.is_empty() {
            assert_eq!(conn.drive(Ready { readable: true, closed: false }, &mut thread.ctx()), Ok(()));
            assert!(Instant::now() < until, "the requests never came");
        }
        assert!(!conn.eof && !conn.output.is_empty(), "the answers do not wait for the client");
        client.shutdown(Shutdown::Write).unwrap();
        until_the_end_is_seen(&mut conn, &mut thread);
        read_to_the_close(conn, client, &mut thread);
    }

    /// As above, with a `/delay/` in hand when the end of stream is read (the answers
    /// behind it not yet written): its timer answers it, and the requests behind it, in a turn
    /// with the end seen already; their answers wait for the client, and all come, then the
    /// close.
    #[test]
    fn a_half_closed_client_gets_every_answer_when_its_end_comes_behind_a_delay() {
        let mut thread = Thread::new();
        let (mut conn, mut client) = connection(&mut thread);
        let requests = "GET / HTTP/1.1\r\nHost: t\r\n\r\n".repeat(REQUESTS - 1);
        client.write_all(format!("GET /delay/0 HTTP/1.1\r\nHost: t\r\n\r\n{requests}").as_bytes()).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while !conn.eof {
            assert_eq!(conn.drive(CLOSED, &mut thread.ctx()), Ok(()), "closed with a /delay/ in hand");
            assert!(Instant::now() < until, "the client's end of stream never came");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(conn.phase, Phase::Delay);
        // The `/delay/0` timer: due at once (at the wheel's next tick).
        std::thread::sleep(Duration::from_millis(5));
        let mut ctx = thread.ctx();
        let (key, timer) = ctx.wheel.poll_expired(Instant::now()).expect("the /delay/ timer");
        assert_eq!(timer, ConnTimer::Conn { id: 0, kind: TimerKind::Delay });
        let fired = conn.on_timer(TimerKind::Delay, key, &mut ctx);
        let waiting = conn.output.len() - conn.written;
        assert_eq!(fired, Ok(()), "closed with {waiting} bytes of answers the half-closed client never got");
        assert!(waiting > 0, "the answers behind the /delay/ do not wait for the client: nothing to test");
        read_to_the_close(conn, client, &mut thread);
    }
}
