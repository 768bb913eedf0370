//! `shardwheel-proxy`: a hyper 1 reverse proxy in front of a pooled hyper client, whose
//! timeouts (header, idle, upstream, send) run on `--timer`: shardwheel, tokio, tokio's
//! alternative per-worker timer or pingora.
//! README.md beside this crate has the flags and how to run it.

mod conn;
mod counts;
mod proxy;
mod stream;
mod timer;

use clap::Parser;
use conn::Timeouts;
use counts::{Counts, TimerLateness, Values};
use hyper_util::server::graceful::GracefulShutdown;
use proxy::Proxy;
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use timer::TimerKind;
use tokio::signal::unix::{SignalKind, signal};

/// A hyper 1 reverse proxy whose timeouts run on shardwheel, tokio or pingora-timeout.
#[derive(Debug, Parser)]
#[command(name = "shardwheel-proxy", version, args_override_self = true)]
struct Flags {
    /// The timer every timeout runs on.
    #[arg(long, value_enum, default_value_t = TimerKind::Shardwheel)]
    timer: TimerKind,
    /// The address to listen on (port 0: any free port, printed at the start).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The upstream server every request goes to.
    #[arg(long)]
    upstream: SocketAddr,
    /// tokio worker threads per process (default: one per core).
    #[arg(long)]
    threads: Option<NonZeroUsize>,
    /// Processes sharing the port (`SO_REUSEPORT`), each with its own runtime and timers.
    #[arg(long, default_value = "1")]
    processes: NonZeroUsize,
    /// `--timer shardwheel`: the ambient service's shards, per process (default: one per
    /// worker thread, `--threads`).
    #[arg(long, value_name = "N")]
    timer_shards: Option<NonZeroUsize>,
    /// `--timer shardwheel`: whether its shard threads are pinned to cores of their own
    /// (default: with one process; not with several, whose shards would all pin to the
    /// same first cores).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    timer_pin: Option<bool>,
    /// The whole request head within this, from the accept or from its first byte (0: off).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    header_timeout: Duration,
    /// Close a kept-alive connection with no byte either way this long (0: off).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    idle_timeout: Duration,
    /// The upstream's response head within this, else `504 Gateway Timeout` (0: off).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    upstream_timeout: Duration,
    /// Close a connection whose write takes no byte this long (0: off).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    send_timeout: Duration,
    /// How long the upstream connection pool keeps an idle connection.
    #[arg(long, value_parser = parse_duration, default_value = "90s")]
    pool_idle_timeout: Duration,
    /// Idle upstream connections the pool keeps at most, per process (as nginx's
    /// `keepalive`): one that comes back past it is closed. Default: no bound (hyper's),
    /// so the pool keeps as many as the process ever had requests in flight at once, for
    /// `--pool-idle-timeout` (some 20 KiB each); a bound under a burst's concurrency makes
    /// each burst connect anew.
    #[arg(long, value_name = "N")]
    pool_max_idle: Option<usize>,
    /// At SIGTERM or SIGINT, how long requests in flight have to finish.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    grace: Duration,
    /// The listen backlog.
    #[arg(long, default_value_t = 4096)]
    backlog: i32,
    /// Set by the parent on the processes it starts (their index, from 1).
    #[arg(long, hide = true)]
    child: Option<usize>,
}

/// `250ms`, `10s`, `2m`; a bare `0` is zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or("a unit is needed: ms, s or m")?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|e| format!("{text}: {e}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "s" => Ok(Duration::from_secs(number)),
        "m" => Ok(Duration::from_secs(number * 60)),
        _ => Err(format!("{text}: the unit is ms, s or m")),
    }
}

const NAME: &str = "shardwheel-proxy";

fn main() -> ExitCode {
    let flags = Flags::parse();
    match run(&flags) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bind(addr: SocketAddr, reuse_port: bool, backlog: i32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

/// A process the parent started, and the thread forwarding its output.
struct Worker {
    child: Child,
    output: JoinHandle<()>,
}

fn run(flags: &Flags) -> io::Result<()> {
    let index = flags.child.unwrap_or(0);
    if flags.child.is_some() {
        // A child stops with its parent, however the parent ends.
        #[cfg(target_os = "linux")]
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).map_err(io::Error::from)?;
    }
    let processes = flags.processes.get();
    let listener = bind(flags.listen, processes > 1 || flags.child.is_some(), flags.backlog)?;
    let addr = listener.local_addr()?;
    let threads = flags
        .threads
        .map_or_else(|| std::thread::available_parallelism().map_or(1, NonZeroUsize::get), NonZeroUsize::get);
    let timeouts = Timeouts { header: flags.header_timeout, idle: flags.idle_timeout, send: flags.send_timeout };

    // Before any child starts: a runtime this build cannot make is refused at once.
    let runtime = flags.timer.runtime(threads)?;
    let mut sized = String::new();
    if flags.timer == TimerKind::Shardwheel {
        let shards = flags.timer_shards.map_or(threads, NonZeroUsize::get);
        let pin = flags.timer_pin.unwrap_or(processes == 1);
        shardwheel::time::configure(shardwheel::TimerService::builder().shards(shards).pin_threads(pin))
            .map_err(|e| io::Error::other(format!("--timer-shards {shards}: {e}")))?;
        sized = format!(" shards={shards} pinned={pin}");
    } else if flags.timer_shards.is_some() || flags.timer_pin.is_some() {
        return Err(io::Error::other("--timer-shards and --timer-pin need --timer shardwheel (the service they size)"));
    }
    let totals = Arc::new(Mutex::new((Values::default(), TimerLateness::default())));
    let mut workers = Vec::new();
    if flags.child.is_none() && processes > 1 {
        let (started, up) = mpsc::channel();
        for i in 1..processes {
            workers.push(start_child(i, addr, started.clone(), &totals)?);
        }
        drop(started);
        // Every process listens before the parent says it does.
        let deadline = Instant::now() + Duration::from_secs(30);
        for _ in 1..processes {
            if up.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
                for worker in &mut workers {
                    let _ = worker.child.kill();
                }
                return Err(io::Error::other("a child process did not start"));
            }
        }
    }

    runtime.block_on(async { flags.timer.warm_up() });
    println!(
        "{NAME}: listening on {addr} process={index} timer={}{sized} upstream={} threads={threads} processes={processes} {timeouts} upstream_timeout={:?} pool_idle_timeout={:?} pool_max_idle={} grace={:?}",
        flags.timer,
        flags.upstream,
        flags.upstream_timeout,
        flags.pool_idle_timeout,
        flags.pool_max_idle.map_or("none".to_string(), |n| n.to_string()),
        flags.grace,
    );
    io::stdout().flush()?;

    let counts = Arc::new(Counts::default());
    let proxy = Arc::new(Proxy::new(
        flags.upstream,
        flags.timer,
        flags.upstream_timeout,
        flags.pool_idle_timeout,
        flags.pool_max_idle,
        counts.clone(),
    ));
    let pids: Vec<u32> = workers.iter().map(|w| w.child.id()).collect();
    let result = runtime.block_on(serve(listener, proxy, timeouts, flags.grace, counts.clone(), || {
        // The parent's signal stops every process.
        for &pid in &pids {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
            }
        }
    }));
    runtime.shutdown_timeout(Duration::from_secs(1));
    let values = counts.values();
    // Not `println!`: a parent killed before its children (a run's bound) leaves them a
    // closed pipe, and the line is for the parent only.
    let _ = writeln!(io::stdout(), "{NAME}: exit process={index} {values}");
    // The timer's own lateness, for the closes' (the parent sums the processes').
    let timer_late =
        (flags.timer == TimerKind::Shardwheel).then(|| TimerLateness::of(&shardwheel::time::stats().lateness));
    if let Some(late) = &timer_late {
        let _ = writeln!(io::stdout(), "{NAME}: timer process={index} {late}");
    }
    if flags.child.is_none() {
        let deadline = Instant::now() + flags.grace + Duration::from_secs(5);
        for mut worker in workers {
            wait_bounded(&mut worker.child, deadline);
            let _ = worker.output.join();
        }
        let (mut total, mut sum) = totals.lock().unwrap_or_else(PoisonError::into_inner).clone();
        total.add(values);
        println!("{NAME}: total processes={processes} {total}");
        if let Some(late) = timer_late {
            sum.add(&late);
            println!("{NAME}: timer total {}", sum.summary());
        }
    }
    io::stdout().flush()?;
    result
}

/// Starts process `index` on `addr`, its output forwarded (and its counts and timer lateness
/// added to `totals`); `started` hears when it listens.
fn start_child(
    index: usize,
    addr: SocketAddr,
    started: mpsc::Sender<()>,
    totals: &Arc<Mutex<(Values, TimerLateness)>>,
) -> io::Result<Worker> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(std::env::args_os().skip(1))
        .args(["--listen", &addr.to_string(), "--child", &index.to_string()])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or_else(|| io::Error::other("no child stdout"))?;
    let totals = totals.clone();
    let output = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            println!("{line}");
            if line.starts_with(&format!("{NAME}: listening on")) {
                let _ = started.send(());
            } else if line.starts_with(&format!("{NAME}: exit")) {
                if let Some(values) = Values::parse(&line) {
                    totals.lock().unwrap_or_else(PoisonError::into_inner).0.add(values);
                }
            } else if line.starts_with(&format!("{NAME}: timer process")) {
                if let Some(late) = TimerLateness::parse(&line) {
                    totals.lock().unwrap_or_else(PoisonError::into_inner).1.add(&late);
                }
            }
        }
    });
    Ok(Worker { child, output })
}

/// Waits for `child` until `deadline`, then kills it.
fn wait_bounded(child: &mut Child, deadline: Instant) {
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    eprintln!("{NAME}: process {} did not stop in time: killed", child.id());
    let _ = child.kill();
    let _ = child.wait();
}

/// Accepts until SIGTERM or SIGINT, then stops: no more accepts (`on_stop` is called), the
/// connections are asked to close once their request in hand is answered, and are given
/// `grace` to.
async fn serve(
    listener: std::net::TcpListener,
    proxy: Arc<Proxy>,
    timeouts: Timeouts,
    grace: Duration,
    counts: Arc<Counts>,
    on_stop: impl FnOnce(),
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let graceful = GracefulShutdown::new();
    let mut accept_errors = 0_u64;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    let _ = tcp.set_nodelay(true);
                    conn::serve(tcp, &proxy, timeouts, &graceful, &counts);
                }
                Err(e) => {
                    // Out of descriptors, most likely: wait for some to close.
                    accept_errors += 1;
                    if accept_errors.is_power_of_two() {
                        eprintln!("{NAME}: accept failed ({accept_errors} times so far): {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
    }
    on_stop();
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        eprintln!("{NAME}: connections still open after the grace of {grace:?}: closed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10h").is_err());
    }
}
