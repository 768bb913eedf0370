//! `--stack hyper`: the same routes and timeouts on hyper 1.x's HTTP/1 server over a
//! multi-thread tokio runtime (`--threads` workers), the way most Rust servers are built.
//!
//! Every timer of the server runs on the one `--timer`: shardwheel's `TimerService` (its
//! `hyper` feature's `hyper::rt::Timer`, one shard per worker) or hyper-util's `TokioTimer`.
//! That is hyper's `header_read_timeout`, the idle timeout this module adds around each
//! connection's IO (`idle.rs`: hyper's HTTP/1 server has none), and `/delay/<ms>`'s sleep
//! (`service.rs`), so the two timers do the same work in the same server.
//!
//! hyper is set up to answer bad input as the local stack does: `max_header_size` and
//! `max_headers` make a head over 8 KiB (or with over 64 headers) a `431`, the service
//! answers a request with a body `413` and closes, and `half_close` has it answer a request
//! in hand when the client shuts down its sending side (then close), and keeps it from
//! reading ahead while a request is in hand.
//!
//! hyper starts its header timer whenever it starts reading a head, which on a keep-alive
//! connection is as soon as the previous response is out: the wait for the next request is
//! under the header timeout too, so a keep-alive connection is closed after
//! min(`--header-timeout-ms`, `--idle-timeout-ms`), by whichever timer that is. (The local
//! stack, like nginx, puts that wait under the idle timeout alone.)
//!
//! One task accepts, past `--max-conns` closing at once; each connection is a task. The stop
//! (SIGINT, SIGTERM, `--for`) ends the accepting, asks every connection to end gracefully
//! (hyper finishes a response in progress, then closes), waits for them a while, and drops
//! the runtime with whatever is left.

mod idle;
mod service;

use crate::conn::Timeouts;
use crate::http::{MAX_HEADER_BYTES, MAX_HEADERS};
use crate::server::STOP_GRACE;
use crate::stats::{ThreadStats, TimedOut, Totals, bump_shared};
use crate::summary::{Summary, TimerCounts, Usage};
use crate::{Flags, TimerChoice};
use hyper::rt::Timer;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use idle::{CLOSES_ASKED, CLOSES_BAD, IdleIo, Track};
use shardwheel::TimerService;
use std::cell::Cell;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// How long the runtime's shutdown waits for its tasks once dropped.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);
/// At `--max-conns`, how many times the accepting task yields to the others (connections
/// that just ended) before it closes a connection at once.
const FULL_YIELDS: usize = 4;
/// The pause after an accept error that is not the peer's (out of descriptors, say).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

thread_local! {
    /// This thread's stats slot: a worker's own index, 0 on any other thread.
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

/// The stats slot of the thread this runs on, among `len`.
fn worker_slot(len: usize) -> usize {
    SLOT.with(Cell::get) % len
}

/// What every connection's task shares.
pub struct Shared {
    /// The selected timer, for the idle timeout and `/delay/`: the one hyper runs on.
    timer: Arc<dyn Timer + Send + Sync>,
    /// shardwheel's service, with `--timer shardwheel`: its counts go in the stats.
    service: Option<TimerService>,
    choice: TimerChoice,
    timeouts: Timeouts,
    /// One slot per worker, written with read-modify-writes (tasks move between workers).
    stats: Arc<[ThreadStats]>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("timer", &self.choice).field("timeouts", &self.timeouts).finish_non_exhaustive()
    }
}

impl Shared {
    /// The stats slot of the worker this runs on.
    fn slot(&self) -> &ThreadStats {
        &self.stats[worker_slot(self.stats.len())]
    }

    /// The counters of every worker, and shardwheel's timer counts if it is the timer.
    fn totals(&self) -> Totals {
        let mut totals = Totals::of(&self.stats);
        if let Some(service) = &self.service {
            let s = service.stats();
            (totals.timers_armed, totals.timers_cancelled, totals.timers_fired) = (s.scheduled, s.cancelled, s.expired);
        }
        totals
    }

    /// `GET /stats`: the local stack's fields, the timer's counts where there are any (null
    /// with tokio's timer, which keeps none; `timers_reset` is not counted apart), and no
    /// turn lengths (null: tokio's workers' turns are not measured).
    fn json(&self) -> serde_json::Value {
        let mut json = self.totals().to_json();
        json["stack"] = "hyper".into();
        json["timer"] = self.choice.name().into();
        json["timers_reset"] = serde_json::Value::Null;
        // The workers' turns are tokio's, not measured here.
        json["longest_turn_us"] = serde_json::Value::Null;
        json["turns_over_5ms"] = serde_json::Value::Null;
        json["turns_timed_on_cpu"] = serde_json::Value::Null;
        json["fire_budget_breaks"] = serde_json::Value::Null;
        json["event_budget_breaks"] = serde_json::Value::Null;
        if self.service.is_none() {
            for key in ["timers_armed", "timers_cancelled", "timers_fired"] {
                json[key] = serde_json::Value::Null;
            }
        }
        json
    }
}

/// Runs the server until a signal or `--for`, then prints the summary.
pub fn serve(flags: &Flags) -> io::Result<()> {
    let started = Instant::now();
    let threads = usize::from(flags.threads);
    let next_slot = AtomicUsize::new(0);
    // Before the runtime's threads (see `fds.rs`).
    let max_conns = crate::reserve_fds(flags);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("httpd-hyper")
        // Relaxed: only distinct values are needed.
        .on_thread_start(move || SLOT.with(|slot| slot.set(next_slot.fetch_add(1, Ordering::Relaxed))))
        .enable_all()
        .build()?;
    let timeouts = Timeouts::of(flags);
    let mut http1 = http1::Builder::new();
    http1
        .header_read_timeout(timeouts.header)
        .keep_alive(true)
        // The local stack's limits: a head over them is a `431`.
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS)
        // A client that shuts down its sending side has the request in hand answered; and
        // no read-ahead while a request is in hand (it armed the idle timer under it).
        .half_close(true);
    let (timer, service): (Arc<dyn Timer + Send + Sync>, _) = match flags.timer {
        TimerChoice::Shardwheel => {
            let shards = flags.timer_shards.map_or(threads, usize::from);
            let timers = TimerService::builder()
                .shards(shards)
                .pin_threads(flags.timer_pin)
                .thread_name("httpd-timer")
                .build()
                .map_err(io::Error::other)?;
            http1.timer(timers.clone());
            (Arc::new(timers.clone()), Some(timers))
        }
        TimerChoice::Tokio => {
            http1.timer(TokioTimer::new());
            (Arc::new(TokioTimer::new()), None)
        }
    };
    let stats: Arc<[ThreadStats]> = (0..threads).map(|_| ThreadStats::default()).collect();
    let shared = Arc::new(Shared { timer, service, choice: flags.timer, timeouts, stats });
    let stopped_by = runtime.block_on(run(flags, max_conns, shared.clone(), Arc::new(http1)))?;
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    let timers = if shared.service.is_some() { TimerCounts::Service } else { TimerCounts::Uncounted };
    let summary = Summary { totals: shared.totals(), usage: Usage::now(), ran: started.elapsed(), stopped_by, timers };
    println!("{summary}");
    Ok(())
}

/// Listens, prints the start line, serves until the stop, and stops; says what stopped it.
async fn run(flags: &Flags, max_conns: u64, shared: Arc<Shared>, http1: Arc<http1::Builder>) -> io::Result<String> {
    // Before the start line: a signal sent once it is out stops the server gracefully.
    let (mut sigint, mut sigterm) = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
    // The guard lives as long as `run`: it keeps a second server off the address.
    let (_guard, mut listeners) = crate::server::bind(flags.addr, 1)?;
    let listener = TcpListener::from_std(listeners.remove(0))?;
    let addr = listener.local_addr()?;
    println!(
        "shardwheel-httpd: listening on {addr} (stack hyper, timer {}{}, {} threads, header timeout {} ms, \
         idle timeout {} ms, send timeout {} ms, max {} connections)",
        shared.choice.name(),
        shared.service.as_ref().map_or(String::new(), |s| format!(
            " ({} shard{}, {})",
            s.shard_count(),
            if s.shard_count() == 1 { "" } else { "s" },
            if flags.timer_pin { "pinned" } else { "not pinned" }
        )),
        flags.threads,
        flags.header_timeout_ms,
        flags.idle_timeout_ms,
        flags.send_timeout_ms,
        max_conns
    );
    let (stop, stopped) = watch::channel(false);
    let live = Arc::new(AtomicUsize::new(0));
    let max_conns = usize::try_from(max_conns).unwrap_or(usize::MAX);
    tokio::spawn(accept(listener, shared, http1, max_conns, live.clone(), stopped));

    // `--for` on tokio's clock whatever the `--timer`: it times the run, not a connection.
    let for_secs = async {
        match flags.for_secs {
            Some(secs) => tokio::time::sleep(Duration::from_secs_f64(secs)).await,
            None => std::future::pending().await,
        }
    };
    let stopped_by = tokio::select! {
        _ = sigint.recv() => "SIGINT",
        _ = sigterm.recv() => "SIGTERM",
        _ = for_secs => "--for",
    };
    let _ = stop.send(true);
    // Bounded: at most `STOP_GRACE`, in steps of 10 ms. Acquire: pairs with the Release
    // decrement in `Live::drop`, so every ended connection's close is counted in the summary.
    let until = Instant::now() + STOP_GRACE;
    while live.load(Ordering::Acquire) > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(stopped_by.to_string())
}

/// Accepts until the stop; past `max_conns` live connections, closes at once.
async fn accept(
    listener: TcpListener,
    shared: Arc<Shared>,
    http1: Arc<http1::Builder>,
    max_conns: usize,
    live: Arc<AtomicUsize>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.changed() => return, // the listener closes on drop
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted) => continue,
            Err(e) => {
                eprintln!("shardwheel-httpd: accept: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // Relaxed: a count; only this task adds to it, so it can only be high, for a moment
        // (a connection that just ended), never let one too many in. At the limit, the
        // tasks the runtime has woken (a connection whose peer closed before this connect)
        // run first, so that the server holds exactly `max_conns`.
        for _ in 0..FULL_YIELDS {
            if live.load(Ordering::Relaxed) < max_conns {
                break;
            }
            tokio::task::yield_now().await;
        }
        if live.load(Ordering::Relaxed) >= max_conns {
            bump_shared(&shared.slot().counters.rejected);
            continue; // dropped: closed at once
        }
        live.fetch_add(1, Ordering::Relaxed);
        // Counted here, not in its task: a task the stop drops before it ever ran is still
        // one connection, closed by the stop (`Live::drop`).
        bump_shared(&shared.slot().counters.connections);
        let guard = Live { live: live.clone(), shared: shared.clone(), counted: false };
        tokio::spawn(connection(stream, guard, http1.clone(), stopped.clone()));
    }
}

/// A live connection: counted in `live` until its task ends or is dropped.
#[derive(Debug)]
struct Live {
    live: Arc<AtomicUsize>,
    shared: Arc<Shared>,
    /// Why it closed is counted; if not, the runtime dropped it at the stop.
    counted: bool,
}

impl Drop for Live {
    fn drop(&mut self) {
        if !self.counted {
            bump_shared(&self.shared.slot().counters.shutdown_closes);
        }
        // Release: pairs with the stop's Acquire load; the count of its close, above, is
        // visible to the stop that sees it gone.
        self.live.fetch_sub(1, Ordering::Release);
    }
}

/// Serves one connection until it closes, and counts why it closed.
async fn connection(
    stream: TcpStream,
    mut guard: Live,
    http1: Arc<http1::Builder>,
    mut stopped: watch::Receiver<bool>,
) {
    let accepted = Instant::now();
    let shared = guard.shared.clone();
    // Small responses go out at once, not after the peer's delayed ACK.
    let _ = stream.set_nodelay(true);
    let track = Arc::new(Track::default());
    let io = IdleIo::new(stream, shared.timer.clone(), shared.timeouts, accepted, track.clone(), shared.stats.clone());
    let (for_service, for_track) = (shared.clone(), track.clone());
    let conn = http1.serve_connection(
        TokioIo::new(io),
        service_fn(move |req| service::handle(req, for_service.clone(), for_track.clone())),
    );
    tokio::pin!(conn);
    let mut stopping = false;
    let result = loop {
        tokio::select! {
            result = conn.as_mut() => break result,
            _ = stopped.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    };
    guard.counted = true;
    let stats = shared.slot();
    // Relaxed: written by the IO this task polled, and by the service it ran.
    if track.idle_closed.load(Ordering::Relaxed) || track.send_closed.load(Ordering::Relaxed) {
        return; // counted, with its lateness, by the IO when its timer fired
    }
    let closes_after = track.closes_after.load(Ordering::Relaxed);
    let c = &stats.counters;
    match result {
        Err(e) if e.is_timeout() => {
            // hyper's header timer starts at the accept, or when the last response is out.
            let from = Duration::from_micros(track.last_write_micros.load(Ordering::Relaxed));
            let deadline = accepted + from + shared.timeouts.header;
            // The lateness before the count, as the IO's timeouts record them.
            stats.record_lateness_shared(TimedOut::Header, Instant::now().saturating_duration_since(deadline));
            bump_shared(&c.header_timeouts);
        }
        _ if stopping => bump_shared(&c.shutdown_closes),
        // hyper answered a head it could not parse (`400`) or too large (`431`), and closed.
        Err(e) if e.is_parse() => {
            bump_shared(&c.bad_request_closes);
            bump_shared(&c.requests);
            bump_shared(&c.bad_requests);
        }
        Ok(()) if closes_after == CLOSES_BAD => bump_shared(&c.bad_request_closes),
        Ok(()) if closes_after == CLOSES_ASKED => bump_shared(&c.answered_closes),
        // The peer closed (after its requests were answered) or reset, or an I/O error.
        _ => bump_shared(&c.peer_closes),
    }
}
