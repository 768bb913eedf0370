//! Bytes per connection of `shardwheel::io::TimeoutStream` (the `tokio` feature) beside a
//! hand-written wrapper on tokio's timer (`common/tokio_timeouts.rs`) and the
//! `tokio-io-timeout` crate: the wrapper's own size (`size_of`, plus the heap it holds at
//! once), and the resident bytes of 100,000 idle connections, each a `tokio::io::duplex`
//! pair whose server end, wrapped, has a tokio task waiting in a read on it (so each
//! connection's timeout is registered with its timer), minus the same connections unwrapped.
//! A current-thread runtime; each row in a process of its own; RSS from `/proc/self/status`
//! (as `task_memory.rs`).
//!
//! ```sh
//! cargo bench --features tokio --bench io_timeout_memory
//! ```

use shardwheel::io::TimeoutStream;
use std::mem::size_of;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, DuplexStream, duplex};

#[path = "common/tokio_timeouts.rs"]
mod tokio_timeouts;
use tokio_timeouts::TokioTimeouts;

const N: usize = 100_000;
const TIMEOUT: Duration = Duration::from_secs(60);

const ROWS: [&str; 5] = [
    "plain duplex (the baseline)",
    "shardwheel, idle 60 s",
    "tokio hand-written, idle 60 s",
    "shardwheel, read 60 s",
    "tokio-io-timeout, read 60 s",
];

fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("a VmRSS line");
    line.split_whitespace().nth(1).and_then(|k| k.parse::<usize>().ok()).expect("VmRSS in kB") * 1024
}

/// `N` connections, each with a task waiting in a read on `wrap(server end)`; prints the
/// resident bytes they added, per connection.
fn measure<S>(rt: &tokio::runtime::Runtime, wrap: impl Fn(DuplexStream) -> S)
where
    S: AsyncRead + Unpin + Send + 'static,
{
    let _inside = rt.enter(); // tokio's timers are made against its driver
    let before = rss();
    let mut clients = Vec::with_capacity(N);
    let mut tasks = Vec::with_capacity(N);
    for _ in 0..N {
        let (client, server) = duplex(64);
        let mut server = wrap(server);
        clients.push(client);
        tasks.push(rt.spawn(async move {
            let _ = server.read(&mut [0u8; 16]).await;
            drop(server);
        }));
    }
    // Every task polled (its read waits, its timeout registers), and the shard's share filed.
    rt.block_on(async {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    let after = rss();
    println!("{}", (after - before) as f64 / N as f64);
    std::mem::forget(tasks);
    std::mem::forget(clients);
}

fn child(row: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
    rt.block_on(shardwheel::time::sleep(Duration::from_millis(1))); // the default service started
    match row {
        "plain duplex (the baseline)" => measure(&rt, |s| s),
        "shardwheel, idle 60 s" => measure(&rt, |s| TimeoutStream::new(s).with_idle_timeout(TIMEOUT)),
        "tokio hand-written, idle 60 s" => measure(&rt, |s| TokioTimeouts::new(s, None, None, Some(TIMEOUT))),
        "shardwheel, read 60 s" => measure(&rt, |s| TimeoutStream::new(s).with_read_timeout(TIMEOUT)),
        "tokio-io-timeout, read 60 s" => measure(&rt, |s| {
            let mut stream = tokio_io_timeout::TimeoutStream::new(s);
            stream.set_read_timeout(Some(TIMEOUT));
            Box::pin(stream)
        }),
        other => panic!("no row named {other:?}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--row") {
        child(&args[at + 1]);
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let base = size_of::<DuplexStream>();
    let sleep = size_of::<tokio::time::Sleep>();
    println!("the wrapper's own bytes over the stream's ({base} B), and what it boxes:");
    println!("  shardwheel TimeoutStream       {:>4} B inline", size_of::<TimeoutStream<DuplexStream>>() - base);
    println!(
        "  tokio hand-written, idle only  {:>4} B inline + {sleep} B boxed (a tokio Sleep; + {sleep} B for each of a read and a write timeout)",
        size_of::<TokioTimeouts<DuplexStream>>() - base
    );
    println!(
        "  tokio-io-timeout TimeoutStream {:>4} B inline (two tokio Sleeps)",
        size_of::<tokio_io_timeout::TimeoutStream<DuplexStream>>() - base
    );
    println!(
        "  (shardwheel's sleep registers a 48 B cell, a slot of its thread's pool, and a 16 B wheel node once filed)"
    );
    let exe = std::env::current_exe().expect("this binary's path");
    println!("resident bytes per idle connection, {N} connections, a task waiting in a read on each (a process a row)");
    let mut baseline = None;
    for row in ROWS {
        let out = Command::new(&exe).args(["--row", row]).output().expect("run a child");
        let per: Option<f64> = String::from_utf8_lossy(&out.stdout).trim().parse().ok();
        match (per, baseline) {
            (Some(b), None) => {
                baseline = Some(b);
                println!("{row:<32} {b:>7.1} B a connection");
            }
            (Some(t), Some(b)) => println!("{row:<32} {t:>7.1} B a connection, {:>6.1} B for the timeouts", t - b),
            (None, _) => println!("{row:<32} failed: {} {}", out.status, String::from_utf8_lossy(&out.stderr)),
        }
    }
}
