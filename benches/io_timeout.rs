//! CPU per operation of `shardwheel::io::TimeoutStream` (the `tokio` feature) beside the
//! timeouts a tokio user wraps a stream with instead: a hand-written wrapper on tokio's own
//! timer (`tokio::time::Sleep`s reset per operation: `common/tokio_timeouts.rs`) and the
//! `tokio-io-timeout` crate's `TimeoutStream` (read and write timeouts only: it has no idle
//! one), each run as its users run it: in tokio tasks, tokio's timers on the runtime's own
//! driver, shardwheel's on its default service (a shard per core).
//!
//! A row is one echo round trip over `tokio::io::duplex`: a client task writes 64 bytes and
//! reads them back from an echo task that holds the wrapped end (`read_exact`, `write_all`),
//! both on a current-thread runtime (so the figure is CPU, not cross-thread wake-ups), timed
//! in the process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`: every thread's, shardwheel's shard
//! threads and tokio's driver included; on a shared machine a wall-clock time would count the
//! others' builds too; wall time where there is no such clock). Per
//! round trip the echo side does one read that waits (the client has not written yet), one
//! read that completes and one write that completes: the wrapper's work on each. The
//! `plain duplex` row is the same with no wrapper; a row's cost over it is the wrapper's.
//!
//! - `read+write 30 s`: a read timeout and a write timeout of 30 s (never fire).
//! - `idle 60 s`: an idle timeout of 60 s (never fires), pushed out by every read and write.
//!
//! ```sh
//! cargo bench --features tokio --bench io_timeout
//! python3 benches/median.py --runs 5 --bench io_timeout --subject shardwheel -- --features tokio
//! ```

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use shardwheel::io::TimeoutStream;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, duplex};

#[path = "common/tokio_timeouts.rs"]
mod tokio_timeouts;
use tokio_timeouts::TokioTimeouts;

const READ_WRITE: Duration = Duration::from_secs(30);
const IDLE: Duration = Duration::from_secs(60);
const MESSAGE: usize = 64;

/// The process's CPU time so far (every thread's).
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple", target_os = "freebsd"))]
fn cpu_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the system knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Where the system has no process CPU clock here: wall time since the first call.
#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple", target_os = "freebsd")))]
fn cpu_now() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    let mut buf = [0u8; MESSAGE];
    while stream.read_exact(&mut buf).await.is_ok() {
        if stream.write_all(&buf).await.is_err() {
            return;
        }
    }
}

/// `iters` round trips through an echo task holding `wrap(server end)`; the CPU time of the
/// round trips alone (the setup and the teardown not counted).
fn round_trips<S, W>(rt: &tokio::runtime::Runtime, iters: u64, wrap: W) -> Duration
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    W: FnOnce(DuplexStream) -> S,
{
    rt.block_on(async move {
        let (mut client, server) = duplex(4096);
        let server = tokio::spawn(echo(wrap(server)));
        let message = [7u8; MESSAGE];
        let mut back = [0u8; MESSAGE];
        // One round trip first: every wrapper's timers made and registered before the count.
        client.write_all(&message).await.unwrap();
        client.read_exact(&mut back).await.unwrap();
        let start = cpu_now();
        for _ in 0..iters {
            client.write_all(&message).await.unwrap();
            client.read_exact(&mut back).await.unwrap();
        }
        let took = cpu_now() - start;
        drop(client);
        server.await.unwrap();
        took
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    // The default service started before the count.
    rt.block_on(shardwheel::time::sleep(Duration::from_millis(1)));

    let mut group = c.benchmark_group("io_timeout round trip");
    group.throughput(Throughput::Elements(1));
    let rw = "read+write 30 s";
    group.bench_function(BenchmarkId::new(rw, "shardwheel"), |b| {
        b.iter_custom(|n| {
            round_trips(&rt, n, |s| TimeoutStream::new(s).with_read_timeout(READ_WRITE).with_write_timeout(READ_WRITE))
        })
    });
    group.bench_function(BenchmarkId::new(rw, "plain duplex"), |b| b.iter_custom(|n| round_trips(&rt, n, |s| s)));
    group.bench_function(BenchmarkId::new(rw, "tokio hand-written"), |b| {
        b.iter_custom(|n| round_trips(&rt, n, |s| TokioTimeouts::new(s, Some(READ_WRITE), Some(READ_WRITE), None)))
    });
    group.bench_function(BenchmarkId::new(rw, "tokio-io-timeout"), |b| {
        b.iter_custom(|n| {
            round_trips(&rt, n, |s| {
                let mut stream = tokio_io_timeout::TimeoutStream::new(s);
                stream.set_read_timeout(Some(READ_WRITE));
                stream.set_write_timeout(Some(READ_WRITE));
                Box::pin(stream)
            })
        })
    });
    let idle = "idle 60 s";
    group.bench_function(BenchmarkId::new(idle, "shardwheel"), |b| {
        b.iter_custom(|n| round_trips(&rt, n, |s| TimeoutStream::new(s).with_idle_timeout(IDLE)))
    });
    group.bench_function(BenchmarkId::new(idle, "plain duplex"), |b| b.iter_custom(|n| round_trips(&rt, n, |s| s)));
    group.bench_function(BenchmarkId::new(idle, "tokio hand-written"), |b| {
        b.iter_custom(|n| round_trips(&rt, n, |s| TokioTimeouts::new(s, None, None, Some(IDLE))))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
