//! The `hyper` feature: a hyper HTTP/1 server whose timer is shardwheel's closes a silent
//! connection at its `header_read_timeout`, never before, and serves a client that speaks in
//! time. Run with `cargo test --features hyper --test hyper`.
#![cfg(feature = "hyper")]

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use shardwheel::TimerService;
use std::convert::Infallible;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HEADER_READ_TIMEOUT: Duration = Duration::from_millis(300);
/// For the client that speaks in time: long, so that a loaded machine's delays (a late
/// connect, a late wake-up) cannot push a quarter of it past the whole.
const SPEAK_TIMEOUT: Duration = Duration::from_secs(1);

async fn hello(_: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

/// What the server saw: when it accepted the connection, when the connection ended, how.
type Served = (Instant, Instant, hyper::Result<()>);

/// Serves one connection with shardwheel's timer.
async fn serve_one(
    timers: TimerService,
    header_read_timeout: Duration,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<Served>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        // hyper starts the header timer after this, as it first reads.
        let accepted = Instant::now();
        let result = http1::Builder::new()
            .timer(timers)
            .header_read_timeout(header_read_timeout)
            .serve_connection(TokioIo::new(stream), service_fn(hello))
            .await;
        (accepted, Instant::now(), result)
    });
    (addr, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_at_the_header_read_timeout() {
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let (addr, server) = serve_one(timers.clone(), HEADER_READ_TIMEOUT).await;
    // Before the connect: the server cannot accept, nor start its timer, earlier.
    let connecting = Instant::now();
    let mut client = TcpStream::connect(addr).await.unwrap();
    // Say nothing; wait for the server to hang up.
    let mut buf = [0u8; 256];
    let read = client.read(&mut buf).await;
    let closed_after = connecting.elapsed();
    let (accepted, ended, result) = server.await.unwrap();
    println!("silent connection closed after {closed_after:?} (header_read_timeout {HEADER_READ_TIMEOUT:?})");
    assert!(matches!(read, Ok(0) | Err(_)), "the server answered a silent client: {read:?}");
    assert!(closed_after >= HEADER_READ_TIMEOUT, "closed early, after {closed_after:?}");
    assert!(closed_after < HEADER_READ_TIMEOUT + Duration::from_secs(2), "closed late, after {closed_after:?}");
    let served = ended.duration_since(accepted);
    assert!(served >= HEADER_READ_TIMEOUT, "the server gave up after {served:?}");
    let err = result.expect_err("the connection ends in a timeout");
    assert!(err.is_timeout(), "not a timeout: {err}");
    assert!(timers.stats().expired >= 1, "the timeout fired on shardwheel");
    assert_eq!(timers.pending(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_speaks_in_time_is_served() {
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let (addr, server) = serve_one(timers.clone(), SPEAK_TIMEOUT).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    // A quarter of the timeout in (the header timer is running), then the whole request.
    timers.sleep(SPEAK_TIMEOUT / 4).await;
    client.write_all(b"GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut response = Vec::new();
    client.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200 OK") && response.ends_with("hello"), "{response}");
    let (_, _, result) = server.await.unwrap();
    result.expect("served, not timed out");
    assert_eq!(timers.pending(), 0, "the header timeout was cancelled once the head was read");
}

#[test]
fn hypers_reset_moves_the_sleep_in_its_box() {
    use hyper::rt::Timer;
    let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
    let mut sleep = Timer::sleep(&timers, Duration::from_secs(60));
    let target = Instant::now() + Duration::from_millis(20);
    Timer::reset(&timers, &mut sleep, target);
    let start = Instant::now();
    futures_executor::block_on(sleep);
    assert!(Instant::now() >= target, "early");
    assert!(start.elapsed() < Duration::from_secs(5), "the reset was lost");
    assert_eq!(timers.pending(), 0);

    // A registered sleep (polled once, its cell filed on the shard) moved earlier: the same
    // cell is refiled, and it completes at the new deadline, not the old one.
    let mut sleep = Timer::sleep(&timers, Duration::from_secs(60));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    assert_eq!(timers.pending(), 1, "registered");
    let target = Instant::now() + Duration::from_millis(20);
    Timer::reset(&timers, &mut sleep, target);
    assert_eq!(timers.pending(), 1, "moved, not registered twice");
    let start = Instant::now();
    futures_executor::block_on(sleep);
    assert!(Instant::now() >= target, "early");
    assert!(start.elapsed() < Duration::from_secs(5), "the reset of a registered sleep was lost");
    assert_eq!(timers.pending(), 0);
    // And moved later: one CAS, the same cell; it waits for the new deadline.
    let mut sleep = Timer::sleep(&timers, Duration::from_millis(5));
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    let target = Instant::now() + Duration::from_millis(50);
    Timer::reset(&timers, &mut sleep, target);
    futures_executor::block_on(sleep);
    assert!(Instant::now() >= target, "woke at the old deadline");
    assert_eq!(timers.pending(), 0);
}
