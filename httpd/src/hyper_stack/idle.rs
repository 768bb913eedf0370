//! The keep-alive idle timeout hyper's HTTP/1 server lacks, kept around the connection's IO.
//!
//! [`IdleIo`] wraps the socket hyper reads and writes (in tokio's IO traits, under hyper-util's
//! `TokioIo`). A write (a response going out) marks
//! the connection idle from that instant; bytes read (the next request) end the idle time.
//! When hyper's read of an idle connection would wait, the wrapper arms a sleep on the
//! server's timer (shardwheel's or tokio's, the one hyper's own timeouts run on) for
//! `--idle-timeout-ms` after the last write; if it completes before a byte comes, the read
//! returns the end of stream, and hyper, between requests, closes the connection quietly.
//! One sleep per connection, boxed once and moved with `Timer::reset` for every later idle
//! time, as hyper does with its header timer.
//!
//! A read that waits while a request is in hand (hyper looks ahead while a `/delay/` sleeps)
//! is not idle: no write came since its bytes, so no timer is armed.

use crate::stats::{ThreadStats, bump_shared};
use hyper::rt::{Sleep, Timer};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a connection's task learns from its IO after hyper is done with it.
#[derive(Debug, Default)]
pub struct Track {
    /// The idle timer closed it.
    pub idle_closed: AtomicBool,
    /// Microseconds from the accept to the last write: where hyper's header timer for the
    /// next request starts (it starts reading the next head once the response is out).
    pub last_write_micros: AtomicU64,
}

/// A connection's IO with its idle timeout.
pub struct IdleIo<T> {
    io: T,
    timer: Arc<dyn Timer + Send + Sync>,
    idle_timeout: Duration,
    accepted: Instant,
    track: Arc<Track>,
    /// Every worker's stats: an idle close is counted in the slot of the worker it runs on.
    stats: Arc<[ThreadStats]>,
    /// The connection's one idle sleep, once it has been idle once.
    sleep: Option<Pin<Box<dyn Sleep>>>,
    /// The end of the last write, while no byte has been read since: idle from then.
    idle_since: Option<Instant>,
    /// Whether `sleep` is set for the current `idle_since`.
    armed: bool,
    /// The idle timer fired: every read from now on is the end of stream.
    timed_out: bool,
}

impl<T> std::fmt::Debug for IdleIo<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleIo")
            .field("idle_timeout", &self.idle_timeout)
            .field("idle_since", &self.idle_since)
            .field("armed", &self.armed)
            .field("timed_out", &self.timed_out)
            .finish_non_exhaustive()
    }
}

impl<T> IdleIo<T> {
    /// `io`, accepted at `accepted`, closed when idle for `idle_timeout` after a response.
    pub fn new(
        io: T,
        timer: Arc<dyn Timer + Send + Sync>,
        idle_timeout: Duration,
        accepted: Instant,
        track: Arc<Track>,
        stats: Arc<[ThreadStats]>,
    ) -> IdleIo<T> {
        IdleIo {
            io,
            timer,
            idle_timeout,
            accepted,
            track,
            stats,
            sleep: None,
            idle_since: None,
            armed: false,
            timed_out: false,
        }
    }

    /// `n` bytes went out: the connection is idle from now, until bytes come in.
    fn wrote(&mut self, n: usize) {
        if n > 0 {
            let now = Instant::now();
            self.idle_since = Some(now);
            self.armed = false;
            let micros = u64::try_from((now - self.accepted).as_micros()).unwrap_or(u64::MAX);
            // Relaxed: read by the connection's own task once hyper is done with the IO.
            self.track.last_write_micros.store(micros, Ordering::Relaxed);
        }
    }

    /// A read would wait: polls the idle timer if the connection is idle (arming it the
    /// first time); `true` if it fired.
    fn idle_expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(since) = self.idle_since else { return false };
        let deadline = since + self.idle_timeout;
        if !self.armed {
            match &mut self.sleep {
                Some(sleep) => self.timer.reset(sleep, deadline),
                None => self.sleep = Some(self.timer.sleep_until(deadline)),
            }
            self.armed = true;
        }
        let Some(sleep) = &mut self.sleep else { return false };
        if sleep.as_mut().poll(cx).is_pending() {
            return false;
        }
        let late = Instant::now().saturating_duration_since(deadline);
        let stats = &self.stats[super::worker_slot(self.stats.len())];
        bump_shared(&stats.counters.idle_timeouts);
        stats.record_lateness_shared(late);
        // Relaxed: read by the connection's own task once hyper is done with the IO.
        self.track.idle_closed.store(true, Ordering::Relaxed);
        self.timed_out = true;
        true
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.timed_out {
            return Poll::Ready(Ok(())); // the end of stream
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.idle_since = None; // a request is coming in
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // Nothing read: the end of stream to hyper once the idle timer fired.
            Poll::Pending if this.idle_expired(cx) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut self.io).poll_write(cx, buf))?;
        self.wrote(n);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, bufs))?;
        self.wrote(n);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
