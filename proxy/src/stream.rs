//! The idle and send timeouts of `--timer tokio` and `--timer pingora` around an accepted
//! stream ([`TimedStream`]), as `shardwheel::io::TimeoutStream` keeps them for `--timer
//! shardwheel`, with the same rules, on the timer's [`hyper::rt::Timer`] sleeps:
//!
//! - **Idle**: no read that gave bytes and no write that took bytes for the idle timeout: a read
//!   or write that waits fails with `TimedOut` from then on. Every such read or write moves the
//!   deadline out (one clock read, no timer touched).
//! - **Send**: a write (or flush, or shutdown) that waits and makes no progress for the send
//!   timeout fails with `TimedOut`; the count starts at its first `Pending`.
//!
//! Each direction has one sleep, boxed on its first wait and kept. A deadline that moved later
//! leaves the sleep where it is: when it fires, the wait finds the deadline moved and resets
//! the sleep to it ([`Deadline`]), so a busy connection touches no timer. A timeout fires only
//! once the timer's clock has reached its deadline: never early.

use crate::timer::ProxyTimer;
use hyper::rt::{Sleep, Timer};
use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One sleep that waits for a deadline that only moves later while it waits.
#[derive(Default)]
pub struct Deadline {
    sleep: Option<Pin<Box<dyn Sleep>>>,
    /// The deadline the sleep is set to; `None` once it fired (it must be reset before it is
    /// polled again: an `async fn`'s future, as pingora's sleep is, panics if polled again).
    armed: Option<Instant>,
}

impl fmt::Debug for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadline").field("armed", &self.armed).finish_non_exhaustive()
    }
}

impl Deadline {
    /// Whether `deadline` has passed on `timer`'s clock; if not, `cx` is woken at or after it.
    pub fn poll_passed(&mut self, timer: &ProxyTimer, deadline: Instant, cx: &mut Context<'_>) -> bool {
        loop {
            let sleep = match (&mut self.sleep, self.armed) {
                // Set to this deadline or an earlier one: when that fires, it is looked at again.
                (Some(sleep), Some(armed)) if armed <= deadline => sleep,
                (Some(sleep), _) => {
                    timer.reset(sleep, deadline);
                    self.armed = Some(deadline);
                    sleep
                }
                (None, _) => {
                    self.armed = Some(deadline);
                    self.sleep.insert(timer.sleep_until(deadline))
                }
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return false;
            }
            self.armed = None;
            if timer.now() >= deadline {
                return true;
            }
            // It fired for an earlier deadline: set it to this one.
        }
    }
}

/// A stream with an idle timeout and a send timeout on a [`ProxyTimer`].
pub struct TimedStream<S> {
    inner: S,
    timer: ProxyTimer,
    idle: Option<Duration>,
    send: Option<Duration>,
    /// The last read that gave bytes or write that took some (or the start).
    last_activity: Instant,
    /// When the write now waiting first waited.
    stalled_since: Option<Instant>,
    read_wait: Deadline,
    write_wait: Deadline,
}

impl<S> fmt::Debug for TimedStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimedStream")
            .field("timer", &self.timer)
            .field("idle", &self.idle)
            .field("send", &self.send)
            .field("last_activity", &self.last_activity)
            .field("stalled_since", &self.stalled_since)
            .finish_non_exhaustive()
    }
}

impl<S> TimedStream<S> {
    /// `inner`, idle from now; a zero timeout is off.
    pub fn new(inner: S, timer: ProxyTimer, idle: Duration, send: Duration) -> TimedStream<S> {
        let on = |d: Duration| (!d.is_zero()).then_some(d);
        TimedStream {
            inner,
            timer,
            idle: on(idle),
            send: on(send),
            last_activity: timer.now(),
            stalled_since: None,
            read_wait: Deadline::default(),
            write_wait: Deadline::default(),
        }
    }

    fn active(&mut self) {
        if self.idle.is_some() {
            self.last_activity = self.timer.now();
        }
    }

    /// A write, flush or shutdown waits: whether its send or idle deadline has passed.
    fn write_timed_out(&mut self, cx: &mut Context<'_>) -> bool {
        let send = self.send.map(|send| *self.stalled_since.get_or_insert_with(|| self.timer.now()) + send);
        let idle = self.idle.map(|idle| self.last_activity + idle);
        let deadline = match (send, idle) {
            (Some(s), Some(i)) => s.min(i),
            (Some(d), None) | (None, Some(d)) => d,
            (None, None) => return false,
        };
        self.write_wait.poll_passed(&self.timer, deadline, cx)
    }

    fn write_done<T>(&mut self, result: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match result {
            Poll::Pending if self.write_timed_out(cx) => Poll::Ready(Err(timed_out("send timeout"))),
            Poll::Pending => Poll::Pending,
            ready => {
                self.stalled_since = None;
                ready
            }
        }
    }
}

fn timed_out(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what)
}

impl<S: AsyncRead + Unpin> AsyncRead for TimedStream<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.active();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.idle {
                Some(idle) if this.read_wait.poll_passed(&this.timer, this.last_activity + idle, cx) => {
                    Poll::Ready(Err(timed_out("idle timeout")))
                }
                _ => Poll::Pending,
            },
            error => error,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TimedStream<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            this.active();
        }
        this.write_done(result, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            this.active();
        }
        this.write_done(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.write_done(result, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.write_done(result, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timer::TimerKind;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const KINDS: [TimerKind; 2] = [TimerKind::Tokio, TimerKind::Pingora];

    #[tokio::test]
    async fn idle_read_fails_after_the_idle_timeout_and_activity_moves_it() {
        for kind in KINDS {
            let (mut client, server) = tokio::io::duplex(64);
            let idle = Duration::from_millis(60);
            let mut server = TimedStream::new(server, kind.hyper_timer(), idle, Duration::ZERO);
            let mut buf = [0; 8];
            for _ in 0..4 {
                tokio::time::sleep(idle / 2).await;
                client.write_all(b"x").await.unwrap();
                assert_eq!(server.read(&mut buf).await.unwrap(), 1, "{kind}");
            }
            let quiet = Instant::now();
            let err = server.read(&mut buf).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{kind}");
            assert!(quiet.elapsed() >= idle - Duration::from_millis(1), "{kind}: {:?}", quiet.elapsed());
        }
    }

    #[tokio::test]
    async fn a_stalled_write_fails_after_the_send_timeout() {
        for kind in KINDS {
            let (_client, server) = tokio::io::duplex(16);
            let send = Duration::from_millis(50);
            let mut server = TimedStream::new(server, kind.hyper_timer(), Duration::ZERO, send);
            let start = Instant::now();
            let err = server.write_all(&[0; 64]).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{kind}");
            assert!(start.elapsed() >= send, "{kind}");
        }
    }
}
