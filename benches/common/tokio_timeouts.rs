//! The hand-written tokio peer of `shardwheel::io::TimeoutStream` for benches/io_timeout*.rs:
//! read, write and idle timeouts the way a tokio user writes them, with `tokio::time::Sleep`s
//! (boxed: tokio's `Sleep` is `!Unpin`) reset through `Sleep::reset`. A read or write
//! timeout starts at the operation's first `Pending` and ends when it completes (as
//! tokio-io-timeout's); the idle sleep is reset to `now + idle` by every read or write that
//! moves bytes: one `Instant::now()` and one reset per operation (a later deadline on a
//! registered tokio timer is one CAS too, `TimerEntry::reset`'s `extend_expiration`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep, sleep};

/// One direction's timeout: its sleep, and whether it is set for the wait under way.
struct Wait {
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
    active: bool,
}

impl Wait {
    fn new(timeout: Duration) -> Wait {
        Wait { timeout, sleep: Box::pin(sleep(timeout)), active: false }
    }

    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if !self.active {
            self.sleep.as_mut().reset(Instant::now() + self.timeout);
            self.active = true;
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.active = false;
                Poll::Ready(io::ErrorKind::TimedOut.into())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A stream with optional read, write and idle timeouts on tokio's timer.
pub struct TokioTimeouts<T> {
    inner: T,
    read: Option<Wait>,
    write: Option<Wait>,
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
}

impl<T> TokioTimeouts<T> {
    /// Must be called inside a tokio runtime (its timer).
    pub fn new(inner: T, read: Option<Duration>, write: Option<Duration>, idle: Option<Duration>) -> Self {
        TokioTimeouts {
            inner,
            read: read.map(Wait::new),
            write: write.map(Wait::new),
            idle: idle.map(|d| (d, Box::pin(sleep(d)))),
        }
    }

    fn progressed(&mut self) {
        if let Some((idle, sleep)) = &mut self.idle {
            sleep.as_mut().reset(Instant::now() + *idle);
        }
    }

    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        match &mut self.idle {
            Some((_, sleep)) => sleep.as_mut().poll(cx).map(|()| io::ErrorKind::TimedOut.into()),
            None => Poll::Pending,
        }
    }

    fn on_pending(&mut self, write: bool, cx: &mut Context<'_>) -> Poll<io::Error> {
        let wait = if write { &mut self.write } else { &mut self.read };
        if let Some(wait) = wait {
            if let Poll::Ready(e) = wait.poll_pending(cx) {
                return Poll::Ready(e);
            }
        }
        self.poll_idle(cx)
    }

    fn on_ready(&mut self, write: bool, progressed: bool) {
        let wait = if write { &mut self.write } else { &mut self.read };
        if let Some(wait) = wait {
            wait.active = false;
        }
        if progressed {
            self.progressed();
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TokioTimeouts<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Pending => this.on_pending(false, cx).map(Err),
            Poll::Ready(r) => {
                this.on_ready(false, r.is_ok() && buf.filled().len() > before);
                Poll::Ready(r)
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TokioTimeouts<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.on_pending(true, cx).map(Err),
            Poll::Ready(r) => {
                this.on_ready(true, matches!(r, Ok(n) if n > 0));
                Poll::Ready(r)
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.on_pending(true, cx).map(Err),
            Poll::Ready(r) => {
                this.on_ready(true, false);
                Poll::Ready(r)
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Pending => this.on_pending(true, cx).map(Err),
            Poll::Ready(r) => {
                this.on_ready(true, false);
                Poll::Ready(r)
            }
        }
    }
}
