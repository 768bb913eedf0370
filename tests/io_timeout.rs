//! The `tokio` feature: `io::TimeoutStream`'s read, write and idle timeouts fire at their
//! deadline and never before, activity pushes the idle one out (in either direction), a zero
//! or `None` timeout is off, and hyper serves through it. Most tests run on the paused clock
//! (`time::pause`, auto-advance off where a test steps the clock itself); the hyper test and
//! one read timeout run on the real clock. Run with
//! `cargo test --features tokio --test io_timeout`.
#![cfg(feature = "tokio")]

use futures::poll;
use shardwheel::io::TimeoutStream;
use shardwheel::time::{self, Duration, Instant};
use std::io::ErrorKind;
use std::task::Poll;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt, duplex};

const D: Duration = Duration::from_secs(10);
/// A paused clock's sleep completes at its tick boundary: 1 ms, the default tick.
const TICK: Duration = Duration::from_millis(1);

fn timed_out<T: std::fmt::Debug>(result: std::io::Result<T>) -> bool {
    matches!(&result, Err(e) if e.kind() == ErrorKind::TimedOut)
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_times_out_at_its_timeout_and_not_before() {
    time::pause();
    time::auto_advance(false);
    let (_client, server) = duplex(64);
    let mut server = TimeoutStream::new(server).with_read_timeout(D);
    let mut buf = [0; 8];
    let mut read = Box::pin(server.read(&mut buf));
    assert!(poll!(read.as_mut()).is_pending()); // the wait starts here
    time::advance(D - Duration::from_millis(1)).await;
    assert!(poll!(read.as_mut()).is_pending(), "timed out early");
    time::advance(Duration::from_millis(1)).await;
    match poll!(read.as_mut()) {
        Poll::Ready(result) => assert!(timed_out(result), "not a timeout"),
        Poll::Pending => panic!("no timeout at the deadline"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_times_out_on_the_real_clock() {
    let d = Duration::from_millis(100);
    let (_client, server) = duplex(64);
    let mut server = TimeoutStream::new(server).with_read_timeout(d);
    let start = Instant::now();
    let result = server.read(&mut [0; 8]).await;
    let took = start.elapsed();
    assert!(timed_out(result));
    assert!(took >= d, "early: {took:?}");
    assert!(took < d + Duration::from_secs(2), "late: {took:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_write_times_out_on_a_full_pipe() {
    time::pause();
    time::auto_advance(false);
    let (_client, server) = duplex(8); // nobody reads: 8 bytes fit, then the write waits
    let mut server = TimeoutStream::new(server).with_write_timeout(D);
    let mut write = Box::pin(server.write_all(&[7; 64]));
    assert!(poll!(write.as_mut()).is_pending());
    time::advance(D - Duration::from_millis(1)).await;
    assert!(poll!(write.as_mut()).is_pending(), "timed out early");
    time::advance(Duration::from_millis(1)).await;
    match poll!(write.as_mut()) {
        Poll::Ready(result) => assert!(timed_out(result), "not a timeout"),
        Poll::Pending => panic!("no timeout at the deadline"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_write_that_drains_slowly_never_times_out() {
    time::pause();
    let (mut client, server) = duplex(8);
    let mut server = TimeoutStream::new(server).with_write_timeout(D);
    // The reader takes 8 bytes every D/2: each write waits less than D, and completes.
    let reader = async {
        let mut got = 0;
        while got < 64 {
            time::sleep(D / 2).await;
            got += client.read(&mut [0; 8]).await.unwrap();
        }
    };
    let (written, ()) = tokio::join!(server.write_all(&[7; 64]), reader);
    written.unwrap();
}

/// The peer sends a byte every `D / 2` for `3 D`, then falls silent: the read that waits then
/// fails `D` after the last byte (at the tick boundary), never before, and none earlier.
async fn trickle_then_silence(mut server: TimeoutStream<tokio::io::DuplexStream>, mut client: tokio::io::DuplexStream) {
    let start = Instant::now();
    let client_side = async move {
        for _ in 0..6 {
            time::sleep(D / 2).await;
            client.write_all(b"x").await.unwrap();
        }
        client // kept open, silent
    };
    let server_side = async move {
        let mut last = start;
        let mut buf = [0; 8];
        loop {
            match server.read(&mut buf).await {
                Ok(0) => panic!("the client hung up"),
                Ok(_) => last = Instant::now(),
                Err(e) => return (last, Instant::now(), e),
            }
        }
    };
    let (_client, (last, failed, err)) = tokio::join!(client_side, server_side);
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    assert_eq!(last - start, 3 * D, "every byte came through");
    assert!(failed - last >= D, "closed {:?} after the last byte", failed - last);
    assert!(failed - last <= D + TICK, "closed {:?} after the last byte", failed - last);
}

#[tokio::test(flavor = "current_thread")]
async fn idle_is_pushed_out_by_reads() {
    time::pause();
    let (client, server) = duplex(64);
    trickle_then_silence(TimeoutStream::new(server).with_idle_timeout(D), client).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_timeout_counts_from_each_wait() {
    time::pause();
    let (client, server) = duplex(64);
    trickle_then_silence(TimeoutStream::new(server).with_read_timeout(D), client).await;
}

#[tokio::test(flavor = "current_thread")]
async fn idle_with_a_longer_read_timeout_fires_at_the_idle_deadline() {
    time::pause();
    let (client, server) = duplex(64);
    let server = TimeoutStream::new(server).with_idle_timeout(D).with_read_timeout(5 * D);
    trickle_then_silence(server, client).await;
}

/// A read waits while the other direction writes: the writes push the idle deadline out,
/// so the read is not failed until `D` after the last of them (its sleep fires at the old
/// deadline, finds it moved, and waits again). The stream is split: each half in a task of
/// its own, each woken for its own wait.
#[tokio::test(flavor = "current_thread")]
async fn idle_is_pushed_out_by_writes_while_a_read_waits() {
    time::pause();
    let (mut client, server) = duplex(64);
    let server = TimeoutStream::new(server).with_idle_timeout(D);
    let (mut reader, mut writer) = tokio::io::split(server);
    let start = Instant::now();
    let read = tokio::spawn(async move {
        let result = reader.read(&mut [0; 8]).await;
        (result, Instant::now())
    });
    let write = tokio::spawn(async move {
        for _ in 0..6 {
            time::sleep(D / 2).await;
            writer.write_all(b"y").await.unwrap();
        }
        writer
    });
    let mut got = [0; 6];
    client.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"yyyyyy");
    let _writer = write.await.unwrap();
    let (result, failed) = read.await.unwrap();
    assert!(timed_out(result));
    let after_last = failed - (start + 3 * D);
    assert!(after_last >= D && after_last <= D + TICK, "the read failed {after_last:?} after the last write");
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_that_finds_bytes_is_served_past_the_idle_deadline() {
    time::pause();
    time::auto_advance(false);
    let (mut client, server) = duplex(64);
    let mut server = TimeoutStream::new(server).with_idle_timeout(D);
    client.write_all(b"late").await.unwrap();
    time::advance(2 * D).await; // nobody read: the deadline passed with bytes waiting
    let mut buf = [0; 4];
    server.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"late");
    // That read was activity: the next wait has a whole D again.
    let mut read = Box::pin(server.read(&mut buf));
    assert!(poll!(read.as_mut()).is_pending());
    time::advance(D - Duration::from_millis(1)).await;
    assert!(poll!(read.as_mut()).is_pending(), "timed out early");
    time::advance(Duration::from_millis(1)).await;
    match poll!(read.as_mut()) {
        Poll::Ready(result) => assert!(timed_out(result), "not a timeout"),
        Poll::Pending => panic!("no timeout at the deadline"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn once_idle_every_wait_fails_until_bytes_move() {
    time::pause();
    let (_client, server) = duplex(64);
    let mut server = TimeoutStream::new(server).with_idle_timeout(D);
    let start = Instant::now();
    assert!(timed_out(server.read(&mut [0; 4]).await));
    assert!(start.elapsed() >= D);
    let again = Instant::now();
    assert!(timed_out(server.read(&mut [0; 4]).await));
    assert!(again.elapsed() <= TICK, "the second wait failed {:?} later", again.elapsed());
}

#[tokio::test(flavor = "current_thread")]
async fn zero_and_none_timeouts_are_off() {
    time::pause(); // auto-advance: an hour passes at once
    let (_client, server) = duplex(8);
    let mut server = TimeoutStream::new(server)
        .with_read_timeout(Duration::ZERO)
        .with_write_timeout(Duration::ZERO)
        .with_idle_timeout(Duration::ZERO);
    assert_eq!((server.read_timeout(), server.write_timeout(), server.idle_timeout()), (None, None, None));
    let hour = Duration::from_secs(3600);
    assert!(time::timeout(hour, server.read(&mut [0; 4])).await.is_err(), "the read ended");
    assert!(time::timeout(hour, server.write_all(&[0; 64])).await.is_err(), "the write ended");
    // Set, then taken off again with `None`.
    server.set_read_timeout(Some(D));
    server.set_idle_timeout(Some(D));
    server.set_read_timeout(None);
    server.set_idle_timeout(None);
    assert!(time::timeout(hour, server.read(&mut [0; 4])).await.is_err(), "the read ended");
    // The longest timeouts (kept as 584 years of nanoseconds) wait, and overflow nothing.
    server.set_read_timeout(Some(Duration::MAX));
    server.set_idle_timeout(Some(Duration::MAX));
    assert!(time::timeout(hour, server.read(&mut [0; 4])).await.is_err(), "the read ended");
}

/// A writer that takes every byte at once. `stuck`: its flush and shutdown never end;
/// `vectored`: what it says of vectored writes.
struct Sink {
    stuck: bool,
    vectored: bool,
}

impl Sink {
    fn ended(&self) -> Poll<std::io::Result<()>> {
        if self.stuck { Poll::Pending } else { Poll::Ready(Ok(())) }
    }
}

impl AsyncWrite for Sink {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        self.ended()
    }
    fn poll_shutdown(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        self.ended()
    }
    fn is_write_vectored(&self) -> bool {
        self.vectored
    }
}

/// A flush is the stream's own, under the write timeout: one that never ends fails at the
/// timeout and not before; twice on one stream.
#[tokio::test(flavor = "current_thread")]
async fn a_flush_that_never_ends_times_out_at_the_write_timeout() {
    time::pause();
    time::auto_advance(false);
    let mut stream = TimeoutStream::new(Sink { stuck: true, vectored: false }).with_write_timeout(D);
    for round in 0..2 {
        stream.write_all(b"taken").await.unwrap();
        let mut flush = Box::pin(stream.flush());
        assert!(poll!(flush.as_mut()).is_pending(), "round {round}: the flush ended");
        time::advance(D - Duration::from_millis(1)).await;
        assert!(poll!(flush.as_mut()).is_pending(), "round {round}: timed out early");
        time::advance(Duration::from_millis(1)).await;
        match poll!(flush.as_mut()) {
            Poll::Ready(result) => assert!(timed_out(result), "round {round}: not a timeout"),
            Poll::Pending => panic!("round {round}: no timeout at the deadline"),
        }
    }
}

/// The idle deadline is pushed out only by bytes that move: the end of the stream (a read
/// of none) is not activity, so a write that waits after it fails at the idle deadline
/// counted from the last bytes written.
#[tokio::test(flavor = "current_thread")]
async fn the_end_of_the_stream_does_not_push_the_idle_deadline_out() {
    time::pause();
    time::auto_advance(false);
    let (mut client, server) = duplex(8); // the client reads nothing: 8 bytes fit
    let mut server = TimeoutStream::new(server).with_idle_timeout(D);
    server.write_all(&[7; 8]).await.unwrap(); // the last bytes that move; the pipe is full
    time::advance(D / 2).await;
    client.shutdown().await.unwrap();
    assert_eq!(server.read(&mut [0; 4]).await.unwrap(), 0, "the end of the stream");
    let mut write = Box::pin(server.write_all(&[7; 64]));
    assert!(poll!(write.as_mut()).is_pending());
    time::advance(D / 2 - Duration::from_millis(1)).await;
    assert!(poll!(write.as_mut()).is_pending(), "timed out early");
    time::advance(Duration::from_millis(1)).await;
    match poll!(write.as_mut()) {
        Poll::Ready(result) => assert!(timed_out(result), "not a timeout"),
        Poll::Pending => {
            panic!("no timeout at the idle deadline from the last bytes: the end of the stream pushed it out")
        }
    }
}

/// Each setter, plain and pinned, sets the timeout its getter reads, and only that one;
/// `None` and zero take it off.
#[tokio::test(flavor = "current_thread")]
async fn each_setter_plain_or_pinned_sets_its_own_timeout() {
    let (_client, server) = duplex(8);
    let mut server = Box::pin(TimeoutStream::new(server));
    let read = |s: &TimeoutStream<_>| (s.read_timeout(), s.write_timeout(), s.idle_timeout());
    assert_eq!(read(&server), (None, None, None));
    let (a, b, c) = (Duration::from_secs(1), Duration::from_secs(2), Duration::from_secs(3));
    server.as_mut().set_read_timeout_pinned(Some(a));
    assert_eq!(read(&server), (Some(a), None, None));
    server.as_mut().set_write_timeout_pinned(Some(b));
    assert_eq!(read(&server), (Some(a), Some(b), None));
    server.as_mut().set_idle_timeout_pinned(Some(c));
    assert_eq!(read(&server), (Some(a), Some(b), Some(c)));
    server.as_mut().set_write_timeout_pinned(None);
    server.as_mut().set_read_timeout_pinned(Some(Duration::ZERO));
    assert_eq!(read(&server), (None, None, Some(c)));
    server.as_mut().set_idle_timeout_pinned(None);
    assert_eq!(read(&server), (None, None, None));
    // The plain ones, on an unpinned stream.
    let (_client, server) = duplex(8);
    let mut server = TimeoutStream::new(server);
    server.set_write_timeout(Some(b));
    assert_eq!(read(&server), (None, Some(b), None));
    server.set_idle_timeout(Some(c));
    server.set_read_timeout(Some(a));
    assert_eq!(read(&server), (Some(a), Some(b), Some(c)));
    server.set_write_timeout(Some(Duration::ZERO));
    server.set_idle_timeout(None);
    assert_eq!(read(&server), (Some(a), None, None));
}

#[tokio::test(flavor = "current_thread")]
async fn the_stream_inside_is_at_hand() {
    let (mut client, server) = duplex(64);
    let mut server = TimeoutStream::new(server).with_read_timeout(D);
    assert_eq!(server.read_timeout(), Some(D));
    let shown = format!("{server:?}");
    assert!(shown.contains("TimeoutStream") && shown.contains("read_timeout: Some(10s)"), "{shown}");
    server.get_mut().write_all(b"hi").await.unwrap();
    let _: &tokio::io::DuplexStream = server.get_ref();
    assert_eq!(server.is_write_vectored(), server.get_ref().is_write_vectored());
    // Each answer of the stream inside, passed on: a writer that writes vectors and one that
    // does not.
    for vectored in [true, false] {
        assert_eq!(TimeoutStream::new(Sink { stuck: false, vectored }).is_write_vectored(), vectored);
    }
    let mut inner = server.into_inner();
    let mut buf = [0; 2];
    client.read_exact(&mut buf).await.unwrap();
    inner.write_all(b"ok").await.unwrap();
    client.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ok");
}

/// hyper through `TokioIo`: one request served, then the keep-alive connection, silent, is
/// closed at the idle timeout, counted from the response, never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyper_serves_through_it_and_closes_an_idle_keep_alive() {
    use http_body_util::Full;
    use hyper::body::{Bytes, Incoming};
    use hyper::{Request, Response, server::conn::http1, service::service_fn};
    use hyper_util::rt::TokioIo;
    use std::convert::Infallible;
    use tokio::net::{TcpListener, TcpStream};

    const IDLE: Duration = Duration::from_millis(300);
    async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let stream = TimeoutStream::new(stream).with_idle_timeout(IDLE);
        http1::Builder::new().serve_connection(TokioIo::new(stream), service_fn(hello)).await
    });
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").await.unwrap();
    // The server's last byte moved after this: its idle deadline is later than this plus IDLE.
    let sent = Instant::now();
    let mut response = Vec::new();
    let mut buf = [0; 1024];
    while !response.ends_with(b"hello") {
        let n = client.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the response: {:?}", String::from_utf8_lossy(&response));
        response.extend_from_slice(&buf[..n]);
    }
    let answered = Instant::now();
    assert!(response.starts_with(b"HTTP/1.1 200 OK"), "{:?}", String::from_utf8_lossy(&response));
    let closed = client.read(&mut buf).await;
    let (since_sent, after) = (sent.elapsed(), answered.elapsed());
    assert!(matches!(closed, Ok(0) | Err(_)), "more than the response: {closed:?}");
    assert!(since_sent >= IDLE, "closed {since_sent:?} after the request, {after:?} after the response");
    assert!(after < IDLE + Duration::from_secs(2), "closed {after:?} after the response");
    // hyper has no timer here: only the idle timeout could end the connection. A read error
    // on an idle keep-alive connection is a close to hyper (`Ok`); anywhere else, its error.
    if let Err(err) = server.await.unwrap() {
        let io = std::error::Error::source(&err).and_then(|e| e.downcast_ref::<std::io::Error>());
        assert_eq!(io.map(std::io::Error::kind), Some(ErrorKind::TimedOut), "{err}");
    }
}

/// hyper with a handler slower than the idle timeout: with `half_close(true)` (the README's
/// recipe) the request is answered; hyper's default keeps a read waiting while the handler
/// runs, and the idle timeout fails it (a review found the recipe's connection dropped
/// unanswered after the idle timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyper_with_half_close_answers_a_handler_slower_than_the_idle_timeout() {
    use http_body_util::Full;
    use hyper::body::{Bytes, Incoming};
    use hyper::{Request, Response, server::conn::http1, service::service_fn};
    use hyper_util::rt::TokioIo;
    use std::convert::Infallible;
    use tokio::net::{TcpListener, TcpStream};

    const IDLE: Duration = Duration::from_millis(150);
    async fn slow(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        tokio::time::sleep(Duration::from_millis(450)).await;
        Ok(Response::new(Full::new(Bytes::from_static(b"slow"))))
    }
    /// Serves one connection with `half_close` as given; the client's bytes back.
    async fn one(half_close: bool) -> Vec<u8> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let stream = TimeoutStream::new(stream).with_idle_timeout(IDLE);
            let _ = http1::Builder::new()
                .half_close(half_close)
                .serve_connection(TokioIo::new(stream), service_fn(slow))
                .await;
        });
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n").await.unwrap();
        let mut response = Vec::new();
        let mut buf = [0; 1024];
        let give_up = Instant::now() + Duration::from_secs(5);
        while !response.ends_with(b"slow") && Instant::now() < give_up {
            match tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => response.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        response
    }
    let answered = one(true).await;
    assert!(
        answered.starts_with(b"HTTP/1.1 200 OK") && answered.ends_with(b"slow"),
        "{:?}",
        String::from_utf8_lossy(&answered)
    );
    // What the docs warn of, so that the warning stays true: hyper's default drops it.
    assert!(one(false).await.is_empty(), "hyper's default now answers: the docs' warning is stale");
}

/// Polls one read of `server` once (its wait keeps its place in the stream between polls).
fn poll_read_once(server: &mut TimeoutStream<tokio::io::DuplexStream>) -> Poll<std::io::Result<usize>> {
    use tokio::io::{AsyncRead, ReadBuf};
    let mut bytes = [0; 8];
    let mut buf = ReadBuf::new(&mut bytes);
    let waker = futures::task::noop_waker();
    match std::pin::Pin::new(server).poll_read(&mut std::task::Context::from_waker(&waker), &mut buf) {
        Poll::Ready(result) => Poll::Ready(result.map(|()| buf.filled().len())),
        Poll::Pending => Poll::Pending,
    }
}

/// A wait's own timeout counts from its first `Pending`, whatever is set meanwhile: setting
/// the idle timeout, or the other direction's, in the middle of a read's wait leaves the
/// read's deadline where it was (the wait looks at the idle deadline anew, and keeps when
/// it began); setting the read timeout itself starts the wait afresh, as documented.
#[tokio::test(flavor = "current_thread")]
async fn a_setter_mid_wait_restarts_only_its_own_timeouts_wait() {
    time::pause();
    time::auto_advance(false);
    for setter in ["idle", "write", "read"] {
        let (_client, server) = duplex(64);
        let mut server = TimeoutStream::new(server).with_read_timeout(D);
        assert!(poll_read_once(&mut server).is_pending(), "{setter}: the wait starts here");
        time::advance(D / 2).await;
        match setter {
            "idle" => server.set_idle_timeout(Some(10 * D)),
            "write" => server.set_write_timeout(Some(10 * D)),
            _ => server.set_read_timeout(Some(D)),
        }
        assert!(poll_read_once(&mut server).is_pending(), "{setter}: timed out early");
        // The read's own deadline: D from the wait's start, or from the setter for "read".
        let deadline = if setter == "read" { D } else { D / 2 };
        time::advance(deadline - TICK).await;
        assert!(poll_read_once(&mut server).is_pending(), "{setter}: timed out before its deadline");
        time::advance(TICK).await;
        match poll_read_once(&mut server) {
            Poll::Ready(result) => assert!(timed_out(result), "{setter}: not a timeout"),
            Poll::Pending => panic!("{setter}: no timeout at the read's deadline: the setter restarted its wait"),
        }
    }
}

/// A read whose own deadline and the idle deadline fall together fails once, at that
/// deadline, naming its own timeout (the earlier one wins; at a tie, the read's own).
#[tokio::test(flavor = "current_thread")]
async fn at_a_tie_the_error_names_the_reads_own_timeout() {
    time::pause();
    time::auto_advance(false);
    let (_client, server) = duplex(64);
    // Both counted from now: the idle timeout from when it is set, the read's from its
    // first `Pending`, on a clock that stands still between them.
    let mut server = TimeoutStream::new(server).with_idle_timeout(D).with_read_timeout(D);
    assert!(poll_read_once(&mut server).is_pending());
    time::advance(D - TICK).await;
    assert!(poll_read_once(&mut server).is_pending(), "timed out early");
    time::advance(TICK).await;
    match poll_read_once(&mut server) {
        Poll::Ready(Err(e)) => {
            assert_eq!(e.kind(), ErrorKind::TimedOut);
            assert_eq!(e.to_string(), "read timed out", "the read's own timeout, not the idle one");
        }
        other => panic!("no timeout at the deadline: {other:?}"),
    }
}

/// A shutdown through the stream shuts its inner stream's write side: the peer reads the
/// end of the stream after the bytes written before it, and a flush goes through too.
#[tokio::test(flavor = "current_thread")]
async fn a_shutdown_reaches_the_inner_stream() {
    let (mut client, server) = duplex(64);
    let mut server = TimeoutStream::new(server).with_write_timeout(D);
    server.write_all(b"bye").await.unwrap();
    server.flush().await.unwrap();
    server.shutdown().await.unwrap();
    let mut got = Vec::new();
    // Bounded: without the shutdown the peer would wait for ever (the server half lives).
    let read = time::timeout(Duration::from_secs(5), client.read_to_end(&mut got)).await;
    assert!(matches!(read, Ok(Ok(3))), "no end of the stream: {read:?}");
    assert_eq!(got, b"bye", "the bytes, then the end of the stream");
}
