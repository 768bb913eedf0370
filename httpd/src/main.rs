//! `shardwheel-httpd`: an HTTP/1.1 server whose per-connection timeouts run on shardwheel:
//! its `LocalWheel`, a thread per core (`--stack local`), or its `TimerService` as hyper's
//! timer (`--stack hyper`, `hyper_stack/`, beside tokio's timer with `--timer tokio`).
//!
//! With `--stack local`, the main thread binds the listeners, starts the loops
//! (`server.rs`), prints the start line, and waits for SIGINT, SIGTERM or the end of
//! `--for`; then it stops every loop through its `RemoteWheel`, joins them, and prints the
//! summary (`summary.rs`).

mod conn;
mod fds;
mod http;
mod hyper_stack;
// The client's clock conversion, the same file, so both sides of a trace agree by
// construction (the two packages share no library).
#[path = "../conns/src/mono.rs"]
mod mono;
mod processes;
mod server;
mod stats;
mod summary;
mod trace;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};
use conn::Timeouts;
use mio::{Events, Interest, Poll, Token};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use stats::{ThreadStats, Totals};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use summary::{Summary, TimerCounts, Usage};

/// An HTTP/1.1 server on shardwheel: per-connection header-read and idle timeouts, and
/// `GET /delay/<ms>` answered by a timer.
#[derive(Debug, Parser)]
#[command(name = "shardwheel-httpd", version, args_override_self = true)]
struct Flags {
    /// Where to listen (port 0: any free port, printed on the start line).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Event-loop threads, each with its own listener, wheel and connections.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,
    /// From a request's first byte (or the accept) to the end of its headers.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    header_timeout_ms: u64,
    /// A keep-alive connection's wait for its next request, from the last response.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    idle_timeout_ms: u64,
    /// How long a response may wait for the client to take its next bytes (nginx's
    /// `send_timeout`): from a write that would block, pushed out each time the client
    /// reads; past it the connection is reset.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    send_timeout_ms: u64,
    /// Connections held at most (each process, and each thread in it, holds its share);
    /// more are accepted and closed at once.
    #[arg(long, default_value_t = 19_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_conns: u64,
    /// Processes on one port (`SO_REUSEPORT`), as nginx's `worker_processes`: each with its
    /// own `--threads` loops and its share of `--max-conns`, past the per-process descriptor
    /// limit. `--stack local` only.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    processes: u16,
    /// Set by the parent on the processes it starts (their index, from 1).
    #[arg(long, hide = true, value_parser = clap::value_parser!(u16).range(1..=1024))]
    child: Option<u16>,
    /// Stop by itself after this many seconds (as on SIGINT or SIGTERM).
    #[arg(long = "for", value_name = "SECS")]
    for_secs: Option<f64>,
    /// The server's stack: `local`, a thread per core on mio and `LocalWheel`; `hyper`,
    /// hyper 1.x on a tokio runtime of `--threads` workers.
    #[arg(long, value_enum, default_value_t = Stack::Local)]
    stack: Stack,
    /// The timer of `--stack hyper`'s timeouts and `/delay/`: `shardwheel` (its
    /// `TimerService`, a shard per worker) or `tokio` (hyper-util's `TokioTimer`). The
    /// local stack runs on shardwheel only.
    #[arg(long, value_enum, default_value_t = TimerChoice::Shardwheel)]
    timer: TimerChoice,
    /// `--timer shardwheel`'s shards (`Builder::shards`); default: one per worker
    /// (`--threads`). Fewer shards than workers: each shard serves several workers.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    timer_shards: Option<u16>,
    /// Whether `--timer shardwheel`'s shard threads are pinned to cores of their own
    /// (`Builder::pin_threads`), as `TimerService::new()` pins them.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    timer_pin: bool,
    /// The wheels' resolution (`--stack local`), microseconds: a timeout fires at the first
    /// tick at or after its deadline, so a finer tick is less late and wakes the loop more
    /// often. 250 µs: timeout closes came a median 0.2 ms late instead of 0.7 ms (1 ms).
    /// Refused with `--stack hyper`, whose timers run on `--timer`.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    tick_us: u64,
    /// A diagnostic (`--stack local`): each thread writes, at the stop, to `FILE.<thread>`
    /// when each connection was accepted and closed (`CLOCK_MONOTONIC` ns, by peer port),
    /// for `httpd/trace_join.py` to join with `shardwheel-conns --trace`. Refused with
    /// `--stack hyper`.
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
    /// A diagnostic (`--stack local`): each event-loop turn is timed on the thread's CPU
    /// clock too (a system call a turn), and `/stats` and the summary give the longest and
    /// those over 5 ms. The wall clock's turns count the time the thread was off its core;
    /// these do not. Refused with `--stack hyper`.
    #[arg(long)]
    turn_cpu: bool,
}

/// Which server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Stack {
    /// A thread per core: mio, `SO_REUSEPORT`, a `LocalWheel` per thread.
    Local,
    /// hyper 1.x on a multi-thread tokio runtime.
    Hyper,
}

/// Which timer `--stack hyper` runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TimerChoice {
    /// shardwheel's `TimerService`, as `hyper::rt::Timer`.
    Shardwheel,
    /// hyper-util's `TokioTimer`: tokio's timer.
    Tokio,
}

impl TimerChoice {
    /// Its name on the command line.
    fn name(self) -> &'static str {
        match self {
            TimerChoice::Shardwheel => "shardwheel",
            TimerChoice::Tokio => "tokio",
        }
    }
}

fn main() -> ExitCode {
    let matches = Flags::command().get_matches();
    let flags = Flags::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let conflict =
        |message: &str| -> ! { Flags::command().error(clap::error::ErrorKind::ArgumentConflict, message).exit() };
    if flags.stack == Stack::Local && flags.timer != TimerChoice::Shardwheel {
        conflict("--timer tokio needs --stack hyper (the local stack runs on shardwheel's LocalWheel)");
    }
    if flags.stack == Stack::Hyper && matches.value_source("tick_us") == Some(ValueSource::CommandLine) {
        conflict("--tick-us needs --stack local (the hyper stack's timers run on --timer, whose tick is its own)");
    }
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    if (given("timer_shards") || given("timer_pin"))
        && (flags.stack, flags.timer) != (Stack::Hyper, TimerChoice::Shardwheel)
    {
        conflict("--timer-shards and --timer-pin need --stack hyper --timer shardwheel (the service they size)");
    }
    if flags.stack == Stack::Hyper && flags.trace.is_some() {
        conflict("--trace needs --stack local");
    }
    if flags.stack == Stack::Hyper && flags.turn_cpu {
        conflict("--turn-cpu needs --stack local (the hyper stack's turns are tokio's)");
    }
    if flags.processes > 1 && flags.stack == Stack::Hyper {
        conflict("--processes needs --stack local (the hyper stack is one process)");
    }
    if flags.processes > 1 && flags.trace.is_some() {
        conflict("--trace needs one process (each would write the same files)");
    }
    if let Some(secs) = flags.for_secs
        && !(secs.is_finite() && secs > 0.0 && secs <= 1e9)
    {
        Flags::command().error(clap::error::ErrorKind::InvalidValue, "--for takes seconds above 0").exit();
    }
    let served = match flags.stack {
        Stack::Local => serve(&flags),
        Stack::Hyper => hyper_stack::serve(&flags),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shardwheel-httpd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the server until a signal or `--for`, then prints the summary.
fn serve(flags: &Flags) -> std::io::Result<()> {
    let started = Instant::now();
    let threads = usize::from(flags.threads);
    let timeouts = Timeouts::of(flags);
    // Before the start line: a signal sent once it is out stops the server gracefully.
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    let mut poll = Poll::new()?;
    poll.registry().register(&mut signals, Token(0), Interest::READABLE)?;

    // Held until the end: keeps a second server off the address. A child shares its
    // parent's, whose guard it is.
    let (_guard, listeners) = match flags.child {
        Some(_) => {
            processes::die_with_parent()?;
            (None, server::bind_listeners(flags.addr, threads)?)
        }
        None => {
            let (guard, listeners) = server::bind(flags.addr, threads)?;
            (Some(guard), listeners)
        }
    };
    let max_conns = reserve_fds(flags);
    let per_thread = usize::try_from(max_conns).unwrap_or(usize::MAX).div_ceil(threads);
    let addr = listeners[0].local_addr()?;
    let children = match (flags.child, flags.processes) {
        (None, n) if n > 1 => Some(processes::Children::start(usize::from(n), addr)?),
        _ => None,
    };
    let stats: Arc<[ThreadStats]> = (0..threads).map(|_| ThreadStats::default()).collect();
    let mut stoppers = Vec::with_capacity(threads);
    let mut loops = Vec::with_capacity(threads);
    for (index, listener) in listeners.into_iter().enumerate() {
        let (mut worker, stopper) = server::Worker::new(
            index,
            listener,
            stats.clone(),
            timeouts,
            per_thread,
            Duration::from_micros(flags.tick_us),
            flags.trace.as_deref(),
        )?;
        if flags.turn_cpu {
            worker.measure_turn_cpu();
        }
        stoppers.push(stopper);
        loops.push(thread::Builder::new().name(format!("httpd-{index}")).spawn(move || worker.run())?);
    }
    let (processes, each) = match flags.processes {
        1 => (String::new(), ""),
        n => (format!("{n} processes, "), " each"),
    };
    say(format_args!(
        "shardwheel-httpd: listening on {addr} (stack local, {processes}{threads} threads{each}, header timeout {} ms, \
         idle timeout {} ms, send timeout {} ms, max {} connections{each}, tick {} us)",
        flags.header_timeout_ms, flags.idle_timeout_ms, flags.send_timeout_ms, max_conns, flags.tick_us
    ));

    let deadline = flags.for_secs.map(|secs| started + Duration::from_secs_f64(secs));
    let stopped_by = wait(&mut poll, &mut signals, deadline, &loops)?;
    for stopper in &stoppers {
        stopper.stop();
    }
    let mut failed = None;
    for handle in loops {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(std::io::Error::other("an event loop panicked")),
        }
    }
    let summary = Summary {
        totals: Totals::of(&stats),
        usage: Usage::now(),
        ran: started.elapsed(),
        stopped_by,
        timers: TimerCounts::Wheels,
    };
    say(format_args!("{summary}"));
    if let Some(children) = children {
        // Each child stops gracefully as this one did, its summary after this one's.
        children.stop(Duration::from_secs(10));
    }
    failed.map_or(Ok(()), Err)
}

/// Prints a line on stdout, flushed (a child's lines go through its parent's pipe, from
/// another thread there). A stdout gone (the parent that read it died, a reader that
/// closed) is no reason to fail a stop: the line is lost, as nobody reads it.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Descriptors kept beyond `--max-conns` for `threads` event-loop threads: stdio and the
/// process's own (9 measured with one thread), and a listener, an epoll, a waker and a
/// timer's per thread (4 each: 13 at `--threads 1`, 73 at 16, 137 at 32, as a review counted
/// them), with a few to spare.
fn spare_fds(threads: u64) -> u64 {
    16 + 4 * threads
}

/// The connections the server holds at most: `--max-conns`, or fewer if the descriptor
/// limit cannot hold them and the spare (the hard limit caps the soft one, which the server
/// raises): past the limit, `accept` would fail, and a connection wait in the backlog,
/// instead of being closed at once as `--max-conns` promises. Fewer is said on stderr,
/// with the limit. Then grows the descriptor table for them now, while the process has one
/// thread, so that no `accept` waits for it to grow later (`fds.rs`); a failure is only
/// said.
pub(crate) fn reserve_fds(flags: &Flags) -> u64 {
    let asked =
        processes::share(flags.max_conns, u64::from(flags.processes), u64::from(flags.child.unwrap_or(0))).max(1);
    let threads = u64::from(flags.threads).max(1);
    let spare = spare_fds(threads);
    // Each thread holds `asked / threads` rounded up: the total may pass `asked` by a few.
    let total = asked.div_ceil(threads).saturating_mul(threads);
    let held = match fds::raise_limit(total.saturating_add(spare)) {
        Ok(limit) => held_under(asked, limit, threads),
        Err(e) => {
            eprintln!("shardwheel-httpd: the descriptor limit not read ({e}): --max-conns {asked} taken as it is");
            asked
        }
    };
    if let Err(e) = fds::grow_table(held.div_ceil(threads).saturating_mul(threads).saturating_add(spare)) {
        eprintln!("shardwheel-httpd: the descriptor table not grown in advance ({e}): accepts may wait for it");
    }
    held
}

/// `asked` connections over `threads` threads (each holding its share rounded up), clamped
/// to what `limit` descriptors hold beside the spare (a connection a thread at least), with
/// a message naming the limit if clamped.
fn held_under(asked: u64, limit: u64, threads: u64) -> u64 {
    let spare = spare_fds(threads);
    let room = limit.saturating_sub(spare);
    if asked.div_ceil(threads).saturating_mul(threads) <= room {
        return asked;
    }
    let held = (room / threads).max(1) * threads;
    eprintln!(
        "shardwheel-httpd: --max-conns {asked} is more than the descriptor limit allows (RLIMIT_NOFILE {limit}, \
         {spare} of them kept for the server's own with {threads} threads): holding at most {held} connections; \
         raise the hard limit (ulimit -Hn) for more"
    );
    held
}

/// Waits for SIGINT or SIGTERM, the `--for` deadline, or a loop that ended (an error);
/// says which.
fn wait(
    poll: &mut Poll,
    signals: &mut Signals,
    deadline: Option<Instant>,
    loops: &[thread::JoinHandle<std::io::Result<()>>],
) -> std::io::Result<String> {
    let mut events = Events::with_capacity(4);
    loop {
        // Wakes twice a second at most to see whether a loop ended.
        let mut timeout = Duration::from_millis(500);
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok("--for".to_string());
            }
            timeout = timeout.min(left);
        }
        match poll.poll(&mut events, Some(timeout)) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            result => result?,
        }
        if let Some(signal) = signals.pending().next() {
            return Ok(if signal == SIGINT { "SIGINT" } else { "SIGTERM" }.to_string());
        }
        if loops.iter().any(|l| l.is_finished()) {
            return Ok("an event loop's error".to_string());
        }
    }
}
