//! [`TimeoutStream`]: the type, how it is made and set, and its tokio I/O traits.

use super::wait::{Name, Timers};
use crate::time::Duration;
use std::fmt;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A tokio stream with a read timeout, a write timeout and an idle timeout, on the ambient
/// timers (the `tokio` feature). A timed-out read or write fails with
/// [`io::ErrorKind::TimedOut`]; the module docs ([`io`](crate::io)) say when each fires and
/// what it costs.
///
/// Its calls are [`tokio-io-timeout`](https://docs.rs/tokio-io-timeout)'s `TimeoutStream`'s
/// (`new`, `set_read_timeout`, `set_write_timeout`, their `_pinned` forms, `read_timeout`,
/// `write_timeout`, `get_ref`, `get_mut`, `get_pin_mut`, `into_inner`), so code written
/// against it moves by its `use` line; the idle timeout and the `with_` builders are added.
/// One difference: a zero timeout is off here, where there it fails every wait at once.
///
/// ```
/// use shardwheel::io::TimeoutStream;
/// use shardwheel::time::{self, Duration};
/// use tokio::io::AsyncReadExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// time::pause(); // the paused clock: the 30 s pass at once
/// let (_client, server) = tokio::io::duplex(64); // a client that never writes
/// let mut server = TimeoutStream::new(server)
///     .with_read_timeout(Duration::from_secs(30))
///     .with_idle_timeout(Duration::from_secs(60));
/// let err = server.read(&mut [0; 16]).await.unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::TimedOut); // the read timeout, at 30 s
/// # }
/// ```
///
/// It is `Unpin` when the stream is. Under hyper: `hyper_util::rt::TokioIo::new(stream)`.
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub struct TimeoutStream<T> {
    inner: T,
    timers: Timers,
}

impl<T> TimeoutStream<T> {
    /// Wraps `inner`, with no timeout (one clock read).
    pub fn new(inner: T) -> TimeoutStream<T> {
        TimeoutStream { inner, timers: Timers::new() }
    }

    /// With a read timeout of `timeout` (zero: none).
    #[must_use]
    pub fn with_read_timeout(mut self, timeout: Duration) -> TimeoutStream<T> {
        self.set_read_timeout(Some(timeout));
        self
    }

    /// With a write timeout of `timeout` (zero: none).
    #[must_use]
    pub fn with_write_timeout(mut self, timeout: Duration) -> TimeoutStream<T> {
        self.set_write_timeout(Some(timeout));
        self
    }

    /// With an idle timeout of `timeout` (zero: none), counted from now.
    #[must_use]
    pub fn with_idle_timeout(mut self, timeout: Duration) -> TimeoutStream<T> {
        self.set_idle_timeout(Some(timeout));
        self
    }

    /// The read timeout, if one is set.
    pub fn read_timeout(&self) -> Option<Duration> {
        self.timers.timeout(Name::Read)
    }

    /// The write timeout, if one is set.
    pub fn write_timeout(&self) -> Option<Duration> {
        self.timers.timeout(Name::Write)
    }

    /// The idle timeout, if one is set.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.timers.idle()
    }

    /// Sets the read timeout (`None` or zero: none); a read waiting now counts it from its
    /// next poll.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.timers.set_timeout(Name::Read, timeout);
    }

    /// Sets the write timeout (`None` or zero: none); a write waiting now counts it from its
    /// next poll.
    pub fn set_write_timeout(&mut self, timeout: Option<Duration>) {
        self.timers.set_timeout(Name::Write, timeout);
    }

    /// Sets the idle timeout (`None` or zero: none), counted from now.
    pub fn set_idle_timeout(&mut self, timeout: Option<Duration>) {
        self.timers.set_idle(timeout);
    }

    /// [`set_read_timeout`](Self::set_read_timeout), on a pinned stream.
    pub fn set_read_timeout_pinned(self: Pin<&mut Self>, timeout: Option<Duration>) {
        self.project().1.set_timeout(Name::Read, timeout);
    }

    /// [`set_write_timeout`](Self::set_write_timeout), on a pinned stream.
    pub fn set_write_timeout_pinned(self: Pin<&mut Self>, timeout: Option<Duration>) {
        self.project().1.set_timeout(Name::Write, timeout);
    }

    /// [`set_idle_timeout`](Self::set_idle_timeout), on a pinned stream.
    pub fn set_idle_timeout_pinned(self: Pin<&mut Self>, timeout: Option<Duration>) {
        self.project().1.set_idle(timeout);
    }

    /// The stream inside.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The stream inside, to change: reading or writing it directly bypasses the timeouts
    /// (and does not count as activity).
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// The stream inside, pinned.
    pub fn get_pin_mut(self: Pin<&mut Self>) -> Pin<&mut T> {
        self.project().0
    }

    /// The stream inside, the timeouts dropped (a registered one cancelled: one CAS).
    pub fn into_inner(self) -> T {
        self.inner
    }

    /// The stream, structurally pinned, and the timers (`Unpin`: the ambient `Sleep` is).
    fn project(self: Pin<&mut Self>) -> (Pin<&mut T>, &mut Timers) {
        // SAFETY: `inner` is pinned structurally, as `pin-project` would: this type has no
        // `Drop` impl and is not `repr(packed)`, it is `Unpin` only when `T` is (its other
        // field is `Unpin`), and no method moves `inner` out of a pinned `self` (`into_inner`
        // takes `self` by value, which a pinned `!Unpin` stream cannot give). `timers` is
        // not pinned: it is handed out as a plain `&mut`, which pins nothing.
        unsafe {
            let this = self.get_unchecked_mut();
            (Pin::new_unchecked(&mut this.inner), &mut this.timers)
        }
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<T: AsyncRead> AsyncRead for TimeoutStream<T> {
    /// Reads from the stream; a read that waits fails with `TimedOut` at the read or the
    /// idle deadline, whichever is earlier (at a tie, the error names the read timeout).
    #[inline]
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let (inner, timers) = self.project();
        let before = buf.filled().len();
        match inner.poll_read(cx, buf) {
            Poll::Pending => timers.poll_wait(Name::Read, cx).map(Err),
            Poll::Ready(result) => {
                timers.done(Name::Read, result.is_ok() && buf.filled().len() > before);
                Poll::Ready(result)
            }
        }
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<T: AsyncWrite> AsyncWrite for TimeoutStream<T> {
    /// Writes to the stream; a write that waits fails with `TimedOut` at the write or the
    /// idle deadline, whichever is earlier (at a tie, the error names the write timeout).
    #[inline]
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let (inner, timers) = self.project();
        let poll = inner.poll_write(cx, buf);
        written(timers, cx, poll)
    }

    /// As `poll_write`, the stream's own vectored write.
    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let (inner, timers) = self.project();
        let poll = inner.poll_write_vectored(cx, bufs);
        written(timers, cx, poll)
    }

    /// The stream's.
    #[inline]
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    /// Flushes the stream, under the write timeout (a flush moves no bytes of its own: it
    /// does not push the idle deadline out).
    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (inner, timers) = self.project();
        let poll = inner.poll_flush(cx);
        ended(timers, cx, poll)
    }

    /// Shuts the stream's write side down, under the write timeout.
    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (inner, timers) = self.project();
        let poll = inner.poll_shutdown(cx);
        ended(timers, cx, poll)
    }
}

/// A write's answer: progress if it took bytes.
#[inline]
fn written(timers: &mut Timers, cx: &mut Context<'_>, poll: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
    match poll {
        Poll::Pending => timers.poll_wait(Name::Write, cx).map(Err),
        Poll::Ready(result) => {
            timers.done(Name::Write, matches!(result, Ok(n) if n > 0));
            Poll::Ready(result)
        }
    }
}

/// A flush's or shutdown's answer: the end of a write wait, no progress.
#[inline]
fn ended(timers: &mut Timers, cx: &mut Context<'_>, poll: Poll<io::Result<()>>) -> Poll<io::Result<()>> {
    match poll {
        Poll::Pending => timers.poll_wait(Name::Write, cx).map(Err),
        Poll::Ready(result) => {
            timers.done(Name::Write, false);
            Poll::Ready(result)
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for TimeoutStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeoutStream")
            .field("inner", &self.inner)
            .field("read_timeout", &self.timers.timeout(Name::Read))
            .field("write_timeout", &self.timers.timeout(Name::Write))
            .field("idle_timeout", &self.timers.idle())
            .finish()
    }
}
