//! A thread's event loop: its own `mio::Poll`, its own `SO_REUSEPORT` listener, its own
//! `LocalWheel` and its own connections. Nothing is shared with the other threads on the
//! request path; the only cross-thread path is the graceful stop, a timer the main thread
//! arms through the wheel's `RemoteWheel` (which wakes the loop through its `mio::Waker`),
//! and `GET /stats`, which reads the other threads' counters.
//!
//! The loop sleeps in `epoll_wait` until the wheel's next deadline (`LocalWheel::park`),
//! which a `timerfd` in the same poll marks to the nanosecond (`epoll_wait`'s own timeout
//! counts whole milliseconds, rounded up; with the `timerfd` the server's median lateness
//! fell from 1.1 to 0.6–0.9 ms, at a 1 ms tick), then accepts new connections, then
//! handles the socket events, then fires what is due. A turn with many events (a thread that was descheduled finds hundreds) accepts and fires
//! again after every `SLICE` of them, so neither a new connection's header timer nor a due
//! timeout waits for the whole turn: `httpd/trace_join.py` showed connections waiting 8–14
//! ms in the accept queue behind one turn's requests before this. A turn's work is
//! budgeted, as a shard's: `EVENTS` events and `ACCEPTS_PER_TURN` accepts at most, events
//! until `EVENT_BUDGET` of its thread's CPU (the rest go back to the kernel), timers until
//! `FIRE_BUDGET`.
//!
//! An `accept` that fails for want of descriptors (`EMFILE`, `ENFILE`) or memory leaves the
//! connection in the backlog, and the listener, edge-triggered, says nothing more of it
//! until another connection comes: before this, the backlog waited for that connection
//! however many descriptors were freed meanwhile. So accepting pauses and a timer tries
//! again `ACCEPT_RETRY` later, until it goes through, as nginx re-enables its accept events
//! after a delay.
//!
//! The graceful stop (the main thread's timer) closes the listener, closes the connections
//! with nothing in hand, and lets the others finish the response in hand (`Conn::stop`), for
//! `STOP_GRACE` at most, the hyper stack's bound; then it closes what is left, and the loop
//! returns once no connection is open.

use crate::conn::{Close, Conn, ConnTimer, Ctx, Ready, Timeouts, TimerKind};
use crate::stats::{LONG_TURN_MICROS, ThreadStats, bump};
use crate::trace::Trace;
use mio::net::TcpListener;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use nix::time::clock_gettime;
use shardwheel::{LocalWheel, RemoteWheel, TimerKey};
use slab::Slab;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a connection's handlers need from a `Worker`: borrows its wheel and counters,
/// field by field, so that its `conns` stay free to borrow beside them.
macro_rules! ctx {
    ($worker:ident, $now:expr) => {
        Ctx {
            wheel: &mut $worker.wheel,
            stats: &$worker.stats[$worker.index],
            all: &$worker.stats,
            timeouts: $worker.timeouts,
            now: $now,
        }
    };
}

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const TIMER: Token = Token(2);
/// A connection's token is its slab index plus this.
const FIRST_CONN: usize = 3;
/// The listen backlog.
const BACKLOG: i32 = 1024;
/// Events taken per `epoll_wait`: a turn's share of the sockets' events. The listener and
/// the connections are edge-triggered, so the kernel keeps the rest on its ready list, and
/// the next `epoll_wait` returns them at once, first. A socket event is some 2-20 µs (more
/// at a million connections, where each connection's memory is cold): at 1,024 a turn of a
/// loaded server at 1 M connections took up to 21 ms of its thread's CPU, so a due timeout
/// or a new connection waited that long; at this share, a turn's events are some 2.5 ms at
/// most, beside `FIRE_BUDGET` and `ACCEPTS_PER_TURN`'s share.
const EVENTS: usize = 128;
/// Within a turn, the listener is accepted from and due timers fired again every this many
/// events.
const SLICE: usize = 32;
/// A turn handles socket events until it has spent this much of its thread's CPU (looked
/// at after each `SLICE`); the rest go back to the kernel for the next turn
/// (`Worker::give_back`).
const EVENT_BUDGET: Duration = Duration::from_millis(2);
/// A turn fires due timers until it has spent this much of its thread's CPU (from its
/// start, so the events' share counts; looked at after every `FIRE_MIN` timers, so each call
/// fires that many at least); the rest fire in the next turns, each after the sockets'
/// events, as a shard serves a mass expiry in budgeted turns. (A close is a few
/// microseconds, and up to some milliseconds of the kernel's on a loaded machine: 20,000
/// connections going idle together would otherwise hold one turn for some 100 ms.)
///
/// The budgets count the CPU clock, not the wall clock: a turn that loses its core for
/// 100 ms to another process has done no more work for it, and one cut short then only
/// pays for another wait (and its given-back events' re-registration) when it runs again.
/// At a million connections and 112 processes on two cores, wall-clock budgets (each
/// event, each timer past the fourth) cut most turns short: request p99 2.3 s and silent
/// closes' p99 7.5 s in one round, against 0.2 s and 0.2 s for the same server bounded
/// only by `EVENTS` (three rounds).
const FIRE_BUDGET: Duration = Duration::from_millis(4);
const FIRE_MIN: u32 = 4;
/// After an `accept` failed for want of descriptors or memory, how long until it is tried
/// again (nginx's `accept_mutex_delay`, which it waits after `EMFILE`, is 500 ms): short
/// enough that a freed descriptor soon serves what waits, long enough that a server out of
/// descriptors does not spin on them.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Connections a turn accepts at most (a connection's accept, registration and first timer
/// are a few microseconds: some 0.5 ms for these): the rest wait in the backlog for the next
/// turn, which does not sleep. Without the bound a turn took its listener's whole backlog,
/// up to `BACKLOG`, and the events that came with them waited behind it.
const ACCEPTS_PER_TURN: usize = 128;
/// How long the graceful stop waits for the responses in hand before it closes their
/// connections: the same on both stacks.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// A socket bound to the server's address without `SO_REUSEPORT`, never listening, held
/// while the server runs: the kernel refuses it if anything listens on the address
/// already, and refuses a second server's, so a second server on an address already
/// served stops with an error instead of sharing its connections through `SO_REUSEPORT`.
/// (`SO_REUSEADDR` on it and on the listeners lets them share the address with it, and
/// lets a restarted server bind past its predecessor's `TIME_WAIT` connections.)
#[derive(Debug)]
pub struct PortGuard {
    _socket: Socket,
}

/// `threads` listeners on `addr`, all with `SO_REUSEPORT`: the kernel spreads connections
/// among them; and the [`PortGuard`] that keeps another server off the address. With port
/// 0 the guard picks the port and the listeners take the same one. An address already
/// served is an error that says so.
pub fn bind(addr: SocketAddr, threads: usize) -> io::Result<(PortGuard, Vec<std::net::TcpListener>)> {
    let guard = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    guard.set_reuse_address(true)?;
    if let Err(e) = guard.bind(&addr.into()) {
        return Err(if e.kind() == io::ErrorKind::AddrInUse {
            io::Error::new(e.kind(), format!("{addr} is already in use (another server listens there?): not starting"))
        } else {
            io::Error::new(e.kind(), format!("cannot bind {addr}: {e}"))
        });
    }
    let addr = guard.local_addr()?.as_socket().ok_or_else(|| io::Error::other("not an IP address"))?;
    let listeners = bind_listeners(addr, threads)?;
    Ok((PortGuard { _socket: guard }, listeners))
}

/// `threads` listeners on `addr` with `SO_REUSEPORT`, no guard: another process of the same
/// server (`--processes`), whose parent holds the guard.
pub fn bind_listeners(addr: SocketAddr, threads: usize) -> io::Result<Vec<std::net::TcpListener>> {
    (0..threads).map(|_| bind_one(addr)).collect()
}

fn bind_one(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// A `timerfd` in the loop's poll: the sleep's end, to the nanosecond.
#[derive(Debug)]
struct Alarm {
    fd: TimerFd,
}

impl Alarm {
    fn new(poll: &Poll) -> io::Result<Alarm> {
        let fd = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC)?;
        // Edge-triggered: each expiry is one event, and setting it again re-arms it; it
        // is never read.
        poll.registry().register(&mut SourceFd(&fd.as_fd().as_raw_fd()), TIMER, Interest::READABLE)?;
        Ok(Alarm { fd })
    }

    /// Arms the alarm for `timeout` (the wheel's wait) and returns `epoll_wait`'s: none when
    /// the alarm will end the sleep. Zero stays zero (don't sleep); no deadline leaves the
    /// alarm as it was (an earlier expiry only wakes the loop once more for nothing).
    fn set(&self, timeout: Option<Duration>) -> Option<Duration> {
        match timeout {
            Some(wait) if !wait.is_zero() => {
                let at = Expiration::OneShot(TimeSpec::from_duration(wait));
                // If the kernel refuses, `epoll_wait`'s own timeout, rounded up, still ends it.
                self.fd.set(at, TimerSetTimeFlags::empty()).map_or(Some(wait), |()| None)
            }
            other => other,
        }
    }
}

/// The main thread's hold on a loop: stops it.
#[derive(Debug)]
pub struct Stopper {
    remote: RemoteWheel<ConnTimer>,
}

impl Stopper {
    /// Asks the loop to stop gracefully (stop accepting, finish the responses in hand for
    /// `STOP_GRACE` at most) and return: a timer due now, armed through the `RemoteWheel`,
    /// which wakes the loop if it sleeps.
    pub fn stop(&self) {
        // `Closed` only if the loop is gone already.
        let _ = self.remote.arm(Duration::ZERO, ConnTimer::Shutdown);
    }
}

/// One thread's event loop.
#[derive(Debug)]
pub struct Worker {
    /// Which thread: its counters are `stats[index]`.
    index: usize,
    poll: Poll,
    /// Wakes the loop at the wheel's next deadline to the microsecond: `epoll_wait`'s
    /// timeout counts whole milliseconds, rounded up, which added up to a millisecond to
    /// every timeout close.
    alarm: Alarm,
    /// `None` once the stop came: it accepts no more.
    listener: Option<TcpListener>,
    wheel: LocalWheel<ConnTimer>,
    conns: Slab<Conn>,
    stats: Arc<[ThreadStats]>,
    timeouts: Timeouts,
    /// Connections this thread holds at most.
    max_conns: usize,
    /// `--trace`: when each connection was accepted and closed.
    trace: Option<Trace>,
    /// At `max_conns`, connections were left in the backlog until the turn's end.
    waiting: bool,
    /// An `accept` failed for want of descriptors or memory: it waits for the retry timer.
    accept_paused: bool,
    /// No `accept` went through since one failed so (said once, not at every retry).
    accept_failing: bool,
    /// The graceful stop came: the responses in hand are finishing.
    stopping: bool,
    /// Accepts left to this turn (`ACCEPTS_PER_TURN` at its start).
    accepts_left: usize,
    /// The turn's accepts ran out with connections maybe waiting: the next turn accepts
    /// without sleeping first, and without an event (the listener is edge-triggered).
    accept_more: bool,
    /// `--turn-cpu`: each turn is timed on the thread's CPU clock too.
    turn_cpu: bool,
}

/// How far a turn got through its socket events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handled {
    /// Every one.
    All,
    /// It ran out of budget and gave the rest back to the kernel.
    GaveBack,
    /// The graceful stop is over: the loop returns.
    Stopped,
}

/// What `accept` does at `--max-conns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Full {
    /// Leaves the connections waiting in the backlog (the turn's events may close some).
    Wait,
    /// Closes them at once.
    Close,
}

impl Worker {
    /// A loop on `listener`, and the handle that stops it.
    pub fn new(
        index: usize,
        listener: std::net::TcpListener,
        stats: Arc<[ThreadStats]>,
        timeouts: Timeouts,
        max_conns: usize,
        tick: Duration,
        trace: Option<&std::path::Path>,
    ) -> io::Result<(Worker, Stopper)> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::from_std(listener);
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        let alarm = Alarm::new(&poll)?;
        let wheel = LocalWheel::builder()
            .tick(tick)
            .capacity(max_conns.min(1 << 16))
            // Runs on the main thread when its stop timer is earlier than the loop's sleep.
            .notifier(move || {
                let _ = waker.wake();
            })
            .build::<ConnTimer>()
            .map_err(io::Error::other)?;
        let stopper = Stopper { remote: wheel.remote() };
        let conns = Slab::with_capacity(max_conns.min(1 << 16));
        let trace = trace.map(|path| Trace::new(path, index));
        Ok((
            Worker {
                index,
                poll,
                alarm,
                listener: Some(listener),
                wheel,
                conns,
                stats,
                timeouts,
                max_conns,
                trace,
                waiting: false,
                accept_paused: false,
                accept_failing: false,
                stopping: false,
                accepts_left: ACCEPTS_PER_TURN,
                accept_more: false,
                turn_cpu: false,
            },
            stopper,
        ))
    }

    /// Counts each turn's time on the thread's CPU clock beside its wall time
    /// (`--turn-cpu`): one more system call a turn (some 0.3 µs; the budgets read the clock
    /// at the turn's start anyway), so off by default. A turn's wall time includes the time
    /// the thread was off its core (another process ran); its CPU time is the loop's own
    /// work, what the turn's budgets bound.
    pub fn measure_turn_cpu(&mut self) {
        self.turn_cpu = true;
    }

    /// Serves until stopped.
    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(EVENTS);
        loop {
            // Sleep until the wheel's next deadline (the alarm's), a socket event or the stop;
            // not at all if the last turn left connections to accept.
            let (poll, alarm, busy) = (&mut self.poll, &self.alarm, self.accept_more);
            match self.wheel.park(|timeout| poll.poll(&mut events, alarm.set(wait(busy, timeout)))) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                result => result?,
            }
            let now = Instant::now();
            let turn = now;
            let budget = Budget::start();
            self.begin_turn(events.iter().any(|event| event.token() == LISTENER), now);
            let handled = self.handle(&events, budget, now)?;
            if handled == Handled::Stopped {
                return Ok(());
            }
            self.after_events(handled);
            // Read again: what came due while the events were handled fires now, and the
            // lateness of a timeout close is measured at the close.
            if self.fire(Instant::now(), budget)? {
                return Ok(());
            }
            let on_cpu = if self.turn_cpu { budget.on_cpu() } else { None };
            self.turn_took(turn.elapsed(), on_cpu);
        }
    }

    /// Handles a turn's socket events until the turn has spent `EVENT_BUDGET` (looked at
    /// after each `SLICE` of them); the rest go back to the kernel, which returns them at the
    /// next wait (`give_back`). After each `SLICE` it also accepts and fires what came due
    /// meanwhile. How far it got: every event, some given back, or the stop is over.
    fn handle(&mut self, events: &Events, budget: Budget, now: Instant) -> io::Result<Handled> {
        let ready_of = |event: &mio::event::Event| {
            (event.token(), Ready::of(event.is_readable(), event.is_read_closed(), event.is_error()))
        };
        let mut events = events.iter().enumerate();
        while let Some((n, event)) = events.next() {
            if slice_ends(n) {
                if budget.spent() >= EVENT_BUDGET {
                    let rest: Vec<(Token, Ready)> =
                        std::iter::once(ready_of(event)).chain(events.map(|(_, event)| ready_of(event))).collect();
                    bump(&self.stats[self.index].counters.event_breaks);
                    for (token, ready) in rest {
                        self.give_back(token, ready, now);
                    }
                    return Ok(Handled::GaveBack);
                }
                // A long turn: what arrived and what came due meanwhile waits for one
                // slice of it at most, not for the rest.
                let now = Instant::now();
                self.accept(now, Full::Wait);
                if self.fire(now, budget)? {
                    return Ok(Handled::Stopped);
                }
            }
            if let (Token(token @ FIRST_CONN..), ready) = ready_of(event) {
                self.ready(token - FIRST_CONN, ready, now);
            }
        }
        Ok(Handled::All)
    }

    /// After the turn's events: connections waiting at `--max-conns` are accepted now that
    /// the turn's closes are seen, or closed at once if it is still full. If the turn gave
    /// events back, closes may be among them: they wait for the next turn instead, which
    /// comes at once and accepts first.
    fn after_events(&mut self, handled: Handled) {
        if !self.waiting {
            return;
        }
        if handled == Handled::GaveBack {
            self.accept_more = true;
        } else {
            self.accept(Instant::now(), Full::Close);
        }
    }

    /// A socket event this turn has no time for goes back to the kernel: re-registering an
    /// edge-triggered socket (`EPOLL_CTL_MOD`) queues it again on the poll's ready list if it
    /// is still ready, so the next wait returns it (and does not sleep). Nothing is kept
    /// here, so a connection closed meanwhile, and its slot reused, gets no stale event.
    /// If the kernel refuses, the event is handled now. The listener, the waker and the
    /// alarm need nothing: a turn accepts after any listener event, and the wheel is read
    /// at every wait.
    fn give_back(&mut self, token: Token, ready: Ready, now: Instant) {
        let Some(id) = token.0.checked_sub(FIRST_CONN) else { return };
        let Some(conn) = self.conns.get_mut(id) else { return };
        let queued = self.poll.registry().reregister(&mut conn.stream, token, Interest::READABLE | Interest::WRITABLE);
        if queued.is_err() {
            self.ready(id, ready, now);
        }
    }

    /// A turn's start: its share of accepts, and new connections first (their header timeout
    /// counts from the accept, and a turn may hold hundreds of events: after the thread was
    /// descheduled, say) if the listener said so or the last turn left some.
    fn begin_turn(&mut self, listener_ready: bool, now: Instant) {
        self.accepts_left = ACCEPTS_PER_TURN;
        if self.accept_more || listener_ready {
            self.accept(now, Full::Wait);
        }
    }

    /// Counts a turn that took `took` by the wall clock and `on_cpu` of the thread's CPU
    /// time (with `--turn-cpu`): the longest of each, and those over the mark.
    fn turn_took(&self, took: Duration, on_cpu: Option<Duration>) {
        let counters = &self.stats[self.index].counters;
        // Only this thread writes them: a load and a store (`stats::add`'s reasoning).
        let longest = |took: Duration, longest: &AtomicU64, over: &AtomicU64| {
            let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
            longest.store(micros.max(longest.load(Ordering::Relaxed)), Ordering::Relaxed);
            if micros > LONG_TURN_MICROS {
                bump(over);
            }
        };
        longest(took, &counters.longest_turn_micros, &counters.long_turns);
        if let Some(on_cpu) = on_cpu {
            bump(&counters.cpu_timed_turns);
            longest(on_cpu, &counters.longest_turn_cpu_micros, &counters.long_cpu_turns);
        }
    }

    /// Fires the timers due by `now` until the turn has spent `FIRE_BUDGET` (the rest wait
    /// for the next turn, which then does not sleep: the wheel's next deadline has passed);
    /// `true` once the stop is over (every connection closed, the trace written).
    fn fire(&mut self, now: Instant, budget: Budget) -> io::Result<bool> {
        let mut fired = 0_u32;
        while let Some((key, timer)) = self.wheel.poll_expired(now) {
            fired += 1;
            match timer {
                ConnTimer::Conn { id, kind } => self.fire_conn(id, kind, key, now),
                ConnTimer::Shutdown => self.stop(now),
                ConnTimer::StopGrace => self.close_all(now),
                ConnTimer::AcceptRetry => {
                    self.accept_paused = false;
                    self.accept(now, Full::Wait);
                }
            }
            if fired % FIRE_MIN == 0 && budget.spent() >= FIRE_BUDGET {
                bump(&self.stats[self.index].counters.fire_breaks);
                break;
            }
        }
        if self.stopping && self.conns.is_empty() {
            if let Some(trace) = &self.trace {
                trace.write()?;
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Connection `id`'s timer `kind` fired.
    fn fire_conn(&mut self, id: usize, kind: TimerKind, key: TimerKey, now: Instant) {
        bump(&self.stats[self.index].counters.timers_fired);
        let mut ctx = ctx!(self, now);
        if let Some(conn) = self.conns.get_mut(id) {
            let deadline = conn.deadline(kind);
            if let Err(why) = conn.on_timer(kind, key, &mut ctx) {
                self.close(id, why, now);
                if let (Some(trace), Some(deadline)) = (&mut self.trace, deadline) {
                    trace.closed(id, why, Some((deadline, now)), Instant::now());
                }
            }
        }
    }

    /// Accepts every waiting connection; past `max_conns`, closes it at once (`Full::Close`)
    /// or leaves it in the backlog until the end of the turn (`Full::Wait`).
    fn accept(&mut self, now: Instant, full: Full) {
        self.waiting = false;
        self.accept_more = false;
        if self.accept_paused {
            return;
        }
        loop {
            if self.conns.len() >= self.max_conns && full == Full::Wait {
                // A connection this turn's events close may make room: the peer's close came
                // before this connect, and the server holds exactly `--max-conns`.
                self.waiting = true;
                return;
            }
            if self.accepts_left == 0 {
                // The turn's share is taken: the rest wait for the next turn.
                self.accept_more = true;
                return;
            }
            let called = Instant::now();
            let Some(listener) = &self.listener else { return };
            let (mut stream, peer) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted) => continue,
                // Out of descriptors or memory: the rest wait in the backlog for the retry.
                Err(e) if out_of_resources(&e) => return self.pause_accept(&e),
                // Anything else is this connection's alone (a peer gone, a protocol error):
                // the next may be accepted at once, as accept(2) advises.
                Err(_) => continue,
            };
            self.accept_failing = false;
            self.accepts_left -= 1;
            // The header timeout counts from here: the kernel had the connection by now.
            let accepted = Instant::now();
            if self.conns.len() >= self.max_conns {
                bump(&self.stats[self.index].counters.rejected);
                continue; // dropped: closed at once
            }
            let entry = self.conns.vacant_entry();
            let id = entry.key();
            // Small responses go out at once, not after the peer's delayed ACK.
            let _ = stream.set_nodelay(true);
            let registered = self.poll.registry().register(
                &mut stream,
                Token(id + FIRST_CONN),
                Interest::READABLE | Interest::WRITABLE,
            );
            if registered.is_err() {
                // Closed at once, as past `--max-conns`: every accepted connection is
                // counted in exactly one close reason.
                bump(&self.stats[self.index].counters.rejected);
                continue;
            }
            let mut ctx = ctx!(self, now);
            entry.insert(Conn::accept(id, stream, accepted, &mut ctx));
            if let Some(trace) = &mut self.trace {
                trace.accepted(id, peer.port(), now, called, accepted);
            }
        }
    }

    /// A connection's socket is ready.
    fn ready(&mut self, id: usize, ready: Ready, now: Instant) {
        let mut ctx = ctx!(self, now);
        if let Some(conn) = self.conns.get_mut(id)
            && let Err(why) = conn.drive(ready, &mut ctx)
        {
            self.close(id, why, now);
        }
    }

    /// Closes connection `id`.
    fn close(&mut self, id: usize, why: Close, now: Instant) {
        let mut conn = self.conns.remove(id);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        conn.close(why, &mut ctx!(self, now));
        if let Some(trace) = &mut self.trace
            && !matches!(why, Close::HeaderTimeout | Close::IdleTimeout | Close::SendTimeout)
        {
            trace.closed(id, why, None, Instant::now());
        }
    }

    /// An `accept` failed for want of descriptors or memory: no event will come for what
    /// waits in the backlog (the listener is edge-triggered) until another connection does,
    /// so accepting pauses until a timer tries again. A new connection's event meanwhile
    /// accepts nothing: it would only fail the same way.
    fn pause_accept(&mut self, e: &io::Error) {
        if !self.accept_failing {
            eprintln!("shardwheel-httpd: accept: {e}: trying again every {} ms", ACCEPT_RETRY.as_millis());
            self.accept_failing = true;
        }
        self.accept_paused = true;
        self.wheel.arm(ACCEPT_RETRY, ConnTimer::AcceptRetry);
    }

    /// The graceful stop begins: the listener closes (what waits in its backlog is reset,
    /// as a closed server's would be), a connection with nothing in hand closes now, and
    /// the others finish the response in hand, until `STOP_GRACE`.
    fn stop(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        if let Some(mut listener) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut listener);
        }
        self.wheel.arm(STOP_GRACE, ConnTimer::StopGrace);
        let ids: Vec<usize> = self.conns.iter().map(|(id, _)| id).collect();
        for id in ids {
            if let Err(why) = self.conns[id].stop() {
                self.close(id, why, now);
            }
        }
    }

    /// The stop's grace is over: closes every connection still open.
    fn close_all(&mut self, now: Instant) {
        let ids: Vec<usize> = self.conns.iter().map(|(id, _)| id).collect();
        for id in ids {
            self.close(id, Close::Shutdown, now);
        }
    }
}

/// A turn's budget: what it has spent of its thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`,
/// a system call of some 0.3 µs, read once a turn and once a `SLICE` of events or
/// `FIRE_MIN` timers). If the clock cannot be read, nothing is spent: the turn is bounded
/// by `EVENTS` and `ACCEPTS_PER_TURN` alone.
#[derive(Debug, Clone, Copy)]
struct Budget {
    /// The thread's CPU time when the turn began.
    start: Option<Duration>,
    /// Spent before `start` (tests only: a turn already over its budget).
    before: Duration,
}

impl Budget {
    fn start() -> Budget {
        Budget { start: thread_cpu(), before: Duration::ZERO }
    }

    /// The turn's CPU time so far.
    fn spent(self) -> Duration {
        self.before + self.on_cpu().unwrap_or(Duration::ZERO)
    }

    /// The thread's CPU time since the turn began; `None` if the clock cannot be read.
    fn on_cpu(self) -> Option<Duration> {
        Some(thread_cpu()?.saturating_sub(self.start?))
    }
}

/// Whether a turn accepts and fires again before its `n`th event (from 0): after each
/// `SLICE` of them.
fn slice_ends(n: usize) -> bool {
    n > 0 && n % SLICE == 0
}

/// How long the loop may sleep: the wheel's `timeout`, or not at all if the last turn left
/// connections to accept (`busy`).
fn wait(busy: bool, timeout: Option<Duration>) -> Option<Duration> {
    if busy { Some(Duration::ZERO) } else { timeout }
}

/// The calling thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID`); `None` if the clock
/// cannot be read.
fn thread_cpu() -> Option<Duration> {
    clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).ok().map(Duration::from)
}

/// Whether `accept` failed for the process's or the system's resources (descriptors,
/// buffers, memory), which a retry on a timer waits out, rather than for the connection.
fn out_of_resources(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
        || e.kind() == io::ErrorKind::OutOfMemory
}

#[cfg(test)]
mod tests;
