//! Resident bytes per pending timer future, as a tokio server holds them: 1,000,000 tokio
//! tasks (a current-thread runtime, so no worker's queue skews it), each awaiting a 60 s
//! sleep or timeout, minus the same tasks awaiting `std::future::pending()`: what the timer
//! adds to a task, its future and the timer's own memory together (the task grows by the
//! future's size, rounded to tokio's allocation of the task). Each row in a process of its
//! own, RSS from `/proc/self/status`. Bar (issue 29): shardwheel's ambient `sleep` and
//! `timeout` ≤ 100 B (tokio 127 B, pingora's `fast_sleep` 128 B, measured when it was set).
//! Two rows of plain futures of 24 and 32 bytes show the room a task has before it steps up
//! (the future shares it with the task's output, `Result<(), JoinError>`).
//!
//! ```sh
//! cargo bench --bench task_memory
//! ```

use std::future::Future;
use std::process::Command;
use std::time::Duration;

const N: usize = 1_000_000;
const DELAY: Duration = Duration::from_secs(60);

const ROWS: [&str; 9] = [
    "pending() (the baseline)",
    "a 24-byte future (the room)",
    "a 32-byte future (one step)",
    "shardwheel time::sleep",
    "shardwheel time::timeout",
    "shardwheel TimerService::sleep",
    "tokio::time::sleep",
    "tokio::time::timeout",
    "pingora fast_sleep",
];

/// This process's resident set, in bytes.
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("a VmRSS line");
    line.split_whitespace().nth(1).and_then(|k| k.parse::<usize>().ok()).expect("VmRSS in kB") * 1024
}

/// Spawns `N` tasks each awaiting `make()`'s future, lets each reach its first `Pending`,
/// and prints the resident bytes the tasks added, per task.
fn measure<F>(rt: &tokio::runtime::Runtime, make: impl Fn() -> F)
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    // In the runtime's context: tokio's timers are made against its driver.
    let _inside = rt.enter();
    let before = rss();
    let tasks: Vec<_> = (0..N).map(|_| rt.spawn(make())).collect();
    // Every task polled once (registered, for the timers): the runtime runs them all.
    rt.block_on(async {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
    let after = rss();
    println!("{}", (after - before) as f64 / N as f64);
    for task in &tasks {
        task.abort();
    }
    std::mem::forget(tasks);
}

/// A future of `K` bytes that never completes: where tokio's task steps up a size.
struct Padded<const K: usize>([u64; K]);

impl<const K: usize> Future for Padded<K> {
    type Output = ();
    fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        std::hint::black_box(&self.0);
        std::task::Poll::Pending
    }
}

fn child(row: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
    // The default service (and pingora's timer thread) started before the count.
    rt.block_on(async {
        shardwheel::time::sleep(Duration::from_millis(1)).await;
        pingora_timeout::fast_timeout::fast_sleep(Duration::from_millis(1)).await;
    });
    let explicit = shardwheel::TimerService::builder().shards(1).build().expect("a service");
    match row {
        "pending() (the baseline)" => measure(&rt, std::future::pending::<()>),
        "a 24-byte future (the room)" => measure(&rt, || Padded::<3>([0; 3])),
        "a 32-byte future (one step)" => measure(&rt, || Padded::<4>([0; 4])),
        "shardwheel time::sleep" => measure(&rt, || shardwheel::time::sleep(DELAY)),
        "shardwheel time::timeout" => measure(&rt, || shardwheel::time::timeout(DELAY, std::future::pending::<()>())),
        "shardwheel TimerService::sleep" => measure(&rt, || explicit.sleep(DELAY)),
        "tokio::time::sleep" => measure(&rt, || tokio::time::sleep(DELAY)),
        "tokio::time::timeout" => measure(&rt, || tokio::time::timeout(DELAY, std::future::pending::<()>())),
        "pingora fast_sleep" => measure(&rt, || pingora_timeout::fast_timeout::fast_sleep(DELAY)),
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
    let exe = std::env::current_exe().expect("this binary's path");
    println!("resident bytes per pending future, {N} tokio tasks each awaiting one (a process a row)");
    let mut baseline = None;
    for row in ROWS {
        let out = Command::new(&exe).args(["--row", row]).output().expect("run a child");
        let per_task: Option<f64> = String::from_utf8_lossy(&out.stdout).trim().parse().ok();
        match (per_task, baseline) {
            (Some(b), None) => {
                baseline = Some(b);
                println!("{row:<32} {b:>7.1} B a task");
            }
            (Some(t), Some(b)) => println!("{row:<32} {t:>7.1} B a task, {:>6.1} B for the timer", t - b),
            (None, _) => println!("{row:<32} failed: {} {}", out.status, String::from_utf8_lossy(&out.stderr)),
        }
    }
}
