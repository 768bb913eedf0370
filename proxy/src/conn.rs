//! One client connection: its stream with the idle and send timeouts, hyper's HTTP/1 server
//! with the header timeout, and what ended it, counted.
//!
//! # The header timeout and the idle timeout
//!
//! hyper's `header_read_timeout` starts whenever hyper starts reading a head: on a kept-alive
//! connection, as soon as the previous response is out, so the wait for the next request
//! would be under the header timeout too, and a keep-alive connection would be closed after
//! min(header, idle). The proxy keeps the two apart, as nginx does: the header timeout counts
//! from the connection's accept for its first request, and from the first byte of each later
//! one; the wait before that byte is the idle timeout's alone.
//!
//! It does so with hyper's own header timer, given a [`HeaderTimer`] that knows where the
//! connection is ([`ConnState`]): [`Gate`], the outermost wrapper of the stream, notes the
//! first byte read after a response went out; the header sleep waits (on no timer) until
//! there is such a byte, then for the header timeout from it, on the `--timer`'s sleeps.
//!
//! hyper runs with `half_close`, which also keeps it from reading ahead while a request is in
//! hand: a request that waits on the upstream longer than the idle timeout has no read
//! waiting under it, and its response (a write that makes progress) moves the idle deadline
//! out before the next read waits.

use crate::counts::Counts;
use crate::proxy::Proxy;
use crate::stream::{Deadline, TimedStream};
use crate::timer::{ProxyTimer, TimerKind};
use hyper::rt::{Sleep, Timer};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The proxy's client-side timeouts (zero: off).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// The whole request head, from the accept (first request) or its first byte.
    pub header: Duration,
    /// No byte either way this long, between requests.
    pub idle: Duration,
    /// A write that takes no byte this long.
    pub send: Duration,
}

/// What the connection's stream and its header timer share.
#[derive(Debug)]
pub struct ConnState {
    /// Where the head being read began: the accept, or the first byte after a response;
    /// `None` between a response and the next request's first byte.
    head_start: Mutex<Option<Instant>>,
    /// A byte has been written since the last read: the next byte read starts a head.
    wrote: AtomicBool,
    /// A read failed on the idle timeout.
    idle_closed: AtomicBool,
    /// A write failed on the send timeout.
    send_timed_out: AtomicBool,
}

impl ConnState {
    fn new(accepted: Instant) -> ConnState {
        ConnState {
            head_start: Mutex::new(Some(accepted)),
            wrote: AtomicBool::new(false),
            idle_closed: AtomicBool::new(false),
            send_timed_out: AtomicBool::new(false),
        }
    }

    fn head_start(&self) -> Option<Instant> {
        *self.head_start.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_head_start(&self, at: Option<Instant>) {
        *self.head_start.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }
}

/// The outermost stream wrapper: tells [`ConnState`] where heads begin and why a read or a
/// write failed.
#[derive(Debug)]
pub struct Gate<S> {
    inner: S,
    state: Arc<ConnState>,
    timer: ProxyTimer,
}

impl<S: AsyncRead + Unpin> AsyncRead for Gate<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        match &result {
            Poll::Ready(Ok(())) if buf.filled().len() > before && this.state.wrote.swap(false, Ordering::Relaxed) => {
                this.state.set_head_start(Some(this.timer.now()));
            }
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::TimedOut => {
                this.state.idle_closed.store(true, Ordering::Relaxed);
            }
            _ => {}
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> Gate<S> {
    fn wrote<T>(&self, result: Poll<io::Result<T>>, progress: impl FnOnce(&T) -> bool) -> Poll<io::Result<T>> {
        match &result {
            Poll::Ready(Ok(n)) if progress(n) && !self.state.wrote.swap(true, Ordering::Relaxed) => {
                // A response is going out: the next head starts at its first byte.
                self.state.set_head_start(None);
            }
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::TimedOut => {
                self.state.send_timed_out.store(true, Ordering::Relaxed);
            }
            _ => {}
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Gate<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.wrote(result, |&n| n > 0)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(result, |&n| n > 0)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.wrote(result, |()| false)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.wrote(result, |()| false)
    }
}

/// hyper's timer for one connection: its header sleeps count from where the head began
/// ([`ConnState`]), not from when hyper began to wait for it.
#[derive(Debug, Clone)]
pub struct HeaderTimer {
    timer: ProxyTimer,
    timeout: Duration,
    state: Arc<ConnState>,
}

impl HeaderTimer {
    fn header_sleep(&self) -> Pin<Box<dyn Sleep>> {
        Box::pin(HeaderSleep {
            timer: self.timer,
            timeout: self.timeout,
            state: self.state.clone(),
            wait: Deadline::default(),
        })
    }
}

impl Timer for HeaderTimer {
    // hyper's HTTP/1 server asks its timer for the header timeout alone, as `now() +
    // header_read_timeout`: the sleep knows the timeout already.
    fn sleep(&self, _: Duration) -> Pin<Box<dyn Sleep>> {
        self.header_sleep()
    }

    fn sleep_until(&self, _: Instant) -> Pin<Box<dyn Sleep>> {
        self.header_sleep()
    }

    fn now(&self) -> Instant {
        self.timer.now()
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, _: Instant) {
        *sleep = self.header_sleep();
    }
}

/// The header timeout of one head: pending while no byte of it has come, then until the
/// header timeout from its first byte.
struct HeaderSleep {
    timer: ProxyTimer,
    timeout: Duration,
    state: Arc<ConnState>,
    wait: Deadline,
}

impl Future for HeaderSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        // hyper polls it each time its read of the head waits: the first byte's read comes
        // before the poll that sees it. No byte: the idle timeout has the connection.
        match this.state.head_start() {
            Some(start) if this.wait.poll_passed(&this.timer, start + this.timeout, cx) => Poll::Ready(()),
            _ => Poll::Pending,
        }
    }
}

impl Sleep for HeaderSleep {}

/// Serves one accepted connection on the current runtime, counting how it ends.
pub fn serve(
    tcp: TcpStream,
    proxy: &Arc<Proxy>,
    timeouts: Timeouts,
    graceful: &GracefulShutdown,
    counts: &Arc<Counts>,
) {
    let timer = proxy.timer().hyper_timer();
    let state = Arc::new(ConnState::new(timer.now()));
    counts.connections.fetch_add(1, Ordering::Relaxed);
    match timer.kind() {
        TimerKind::Shardwheel => {
            let on = |d: Duration| (!d.is_zero()).then_some(d);
            let mut stream = shardwheel::io::TimeoutStream::new(tcp);
            stream.set_idle_timeout(on(timeouts.idle));
            stream.set_write_timeout(on(timeouts.send));
            spawn_conn(stream, state, timer, proxy, timeouts, graceful, counts);
        }
        TimerKind::Tokio | TimerKind::TokioAlt | TimerKind::Pingora => {
            let stream = TimedStream::new(tcp, timer, timeouts.idle, timeouts.send);
            spawn_conn(stream, state, timer, proxy, timeouts, graceful, counts);
        }
    }
}

fn spawn_conn<S>(
    stream: S,
    state: Arc<ConnState>,
    timer: ProxyTimer,
    proxy: &Arc<Proxy>,
    timeouts: Timeouts,
    graceful: &GracefulShutdown,
    counts: &Arc<Counts>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(Gate { inner: stream, state: state.clone(), timer });
    let mut http1 = http1::Builder::new();
    http1.keep_alive(true).half_close(true);
    if !timeouts.header.is_zero() {
        http1.timer(HeaderTimer { timer, timeout: timeouts.header, state: state.clone() });
        http1.header_read_timeout(timeouts.header);
    } else {
        http1.header_read_timeout(None);
    }
    let proxy = proxy.clone();
    let conn = http1.serve_connection(
        io,
        service_fn(move |req| {
            let proxy = proxy.clone();
            async move { proxy.handle(req).await }
        }),
    );
    let conn = graceful.watch(conn);
    let counts = counts.clone();
    tokio::spawn(async move {
        let result = conn.await;
        let counter = if state.idle_closed.load(Ordering::Relaxed) {
            Some(&counts.idle_closes)
        } else if state.send_timed_out.load(Ordering::Relaxed) {
            Some(&counts.send_timeouts)
        } else {
            match result {
                Ok(()) => None,
                Err(e) if e.is_timeout() => Some(&counts.header_timeouts),
                Err(_) => Some(&counts.conn_errors),
            }
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
}

impl fmt::Display for Timeouts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "header_timeout={:?} idle_timeout={:?} send_timeout={:?}", self.header, self.idle, self.send)
    }
}
