//! The keep-alive idle timeout and the send timeout hyper's HTTP/1 server lacks, kept
//! around the connection's IO.
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
//! A connection with a request in hand is not idle: hyper runs with `half_close`, so it does
//! not read while a request is in hand (no read-ahead, which armed this timer while a
//! `/delay/` slept, and closed the connection under it), and a read that waits before any
//! write since its bytes arms nothing. A response waiting for the peer is not idle either:
//! while a write would block, a read that waits arms nothing. (hyper 1 reads nothing until
//! its flush is done, with `half_close`; the wrapper does not count on it, and its unit test
//! reads while a write is blocked.)
//!
//! The send timeout, as nginx's `send_timeout`: when a write would block (the peer is not
//! taking the bytes), a second sleep on the same timer is armed for `--send-timeout-ms`
//! from then; each write that goes through ends it, and the next write that blocks arms it
//! afresh (each such wait, a stall, is counted in the stats: `send_stalls`, and those not
//! over, `waiting_for_peer`, in `/stats`). If it completes first, the write fails
//! (`TimedOut`), hyper ends the connection, and the socket is reset on close (`SO_LINGER` 0:
//! the kernel drops what the peer never took). Without it, a peer that pipelines requests and
//! never reads held its connection (and a `--max-conns` slot) for ever: hyper waits on the
//! write, and no other timer runs.

use crate::stats::{ThreadStats, TimedOut, bump_shared};
use hyper::rt::{Sleep, Timer};
use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a connection's task learns from its IO after hyper is done with it.
#[derive(Debug, Default)]
pub struct Track {
    /// The idle timer closed it.
    pub idle_closed: AtomicBool,
    /// The send timer closed it.
    pub send_closed: AtomicBool,
    /// The service answered with a response after which hyper closes: `CLOSES_ASKED` (the
    /// request said `Connection: close`, or HTTP/1.0), `CLOSES_BAD` (a `413`), or 0.
    pub closes_after: AtomicU8,
    /// Microseconds from the accept to the last write: where hyper's header timer for the
    /// next request starts (it starts reading the next head once the response is out).
    pub last_write_micros: AtomicU64,
}

/// `Track::closes_after`: the request asked for the close.
pub const CLOSES_ASKED: u8 = 1;
/// `Track::closes_after`: the answer to a bad request closes.
pub const CLOSES_BAD: u8 = 2;

/// A connection's IO with its idle and send timeouts.
pub struct IdleIo<T> {
    io: T,
    timer: Arc<dyn Timer + Send + Sync>,
    idle_timeout: Duration,
    send_timeout: Duration,
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
    /// The send sleep, once a write has blocked once.
    send_sleep: Option<Pin<Box<dyn Sleep>>>,
    /// While writes block: when the peer must have taken the next bytes by.
    send_deadline: Option<Instant>,
    /// Whether `send_sleep` is set for the current `send_deadline`.
    send_armed: bool,
}

impl<T> std::fmt::Debug for IdleIo<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleIo")
            .field("idle_timeout", &self.idle_timeout)
            .field("idle_since", &self.idle_since)
            .field("armed", &self.armed)
            .field("timed_out", &self.timed_out)
            .field("send_timeout", &self.send_timeout)
            .field("send_deadline", &self.send_deadline)
            .finish_non_exhaustive()
    }
}

impl<T> IdleIo<T> {
    /// `io`, accepted at `accepted`, closed when idle for `timeouts.idle` after a response,
    /// or when a response waits `timeouts.send` for the peer to take its next bytes.
    pub fn new(
        io: T,
        timer: Arc<dyn Timer + Send + Sync>,
        timeouts: crate::conn::Timeouts,
        accepted: Instant,
        track: Arc<Track>,
        stats: Arc<[ThreadStats]>,
    ) -> IdleIo<T> {
        IdleIo {
            io,
            timer,
            idle_timeout: timeouts.idle,
            send_timeout: timeouts.send,
            accepted,
            track,
            stats,
            sleep: None,
            idle_since: None,
            armed: false,
            timed_out: false,
            send_sleep: None,
            send_deadline: None,
            send_armed: false,
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
        if self.send_deadline.is_some() {
            return false; // a response waits for the peer: the send timer has it
        }
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
        // The lateness before the count, as the local stack records them (both Relaxed:
        // in this order in the program, which x86 keeps for a reader on another thread).
        stats.record_lateness_shared(TimedOut::Idle, late);
        bump_shared(&stats.counters.idle_timeouts);
        // Relaxed: read by the connection's own task once hyper is done with the IO.
        self.track.idle_closed.store(true, Ordering::Relaxed);
        self.timed_out = true;
        true
    }

    /// A stall ended: bytes went through, or the IO is dropped during one.
    fn stall_ended(&self) {
        bump_shared(&self.stats[super::worker_slot(self.stats.len())].counters.send_stalls_ended);
    }
}

impl<T> Drop for IdleIo<T> {
    fn drop(&mut self) {
        // The connection ends during a stall (at its send timeout, say): so does the stall.
        if self.send_deadline.is_some() {
            self.stall_ended();
        }
    }
}

impl<T: AsFd> IdleIo<T> {
    /// What a write returned: bytes through end the send timer's wait; a write that would
    /// block polls it (arming it the first time since the last bytes went through), and
    /// fails with `TimedOut` once it fired.
    fn sent(&mut self, cx: &mut Context<'_>, result: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match result {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    if self.send_deadline.is_some() {
                        self.stall_ended();
                    }
                    self.send_deadline = None;
                    self.send_armed = false;
                }
                self.wrote(n);
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if self.send_expired(cx) => {
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the send timeout passed")))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// A write would block: polls the send timer (arming it for a new wait); `true` if it
    /// fired, counted, and the socket set to reset on close.
    fn send_expired(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = match self.send_deadline {
            Some(deadline) => deadline,
            None => {
                // A stall begins: counted once, until bytes go through or the IO is dropped.
                bump_shared(&self.stats[super::worker_slot(self.stats.len())].counters.send_stalls);
                *self.send_deadline.insert(Instant::now() + self.send_timeout)
            }
        };
        if !self.send_armed {
            match &mut self.send_sleep {
                Some(sleep) => self.timer.reset(sleep, deadline),
                None => self.send_sleep = Some(self.timer.sleep_until(deadline)),
            }
            self.send_armed = true;
        }
        let Some(sleep) = &mut self.send_sleep else { return false };
        if sleep.as_mut().poll(cx).is_pending() {
            return false;
        }
        let late = Instant::now().saturating_duration_since(deadline);
        let stats = &self.stats[super::worker_slot(self.stats.len())];
        // The lateness before the count, as the local stack records them (both Relaxed:
        // in this order in the program, which x86 keeps for a reader on another thread).
        stats.record_lateness_shared(TimedOut::Send, late);
        bump_shared(&stats.counters.send_timeouts);
        // Relaxed: read by the connection's own task once hyper is done with the IO.
        self.track.send_closed.store(true, Ordering::Relaxed);
        let _ = socket2::SockRef::from(&self.io).set_linger(Some(Duration::ZERO));
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

impl<T: AsyncWrite + AsFd + Unpin> AsyncWrite for IdleIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write(cx, buf);
        self.sent(cx, result)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.sent(cx, result)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::Timeouts;
    use crate::stats::Totals;
    use std::future::poll_fn;

    /// A response waiting for the peer is not idle, even when the connection's reader waits
    /// for the next request meanwhile (hyper 1 does not while a flush is pending, with
    /// `half_close`; this holds whatever it does): with a write blocked (the peer reads
    /// nothing), a read waits past the idle timeout and does not end the stream; the send
    /// timeout then fails the write.
    #[tokio::test]
    async fn a_response_waiting_for_the_peer_is_not_idle() {
        let (ours, _peer) = tokio::net::UnixStream::pair().expect("a socket pair");
        let (idle, send) = (Duration::from_millis(50), Duration::from_millis(400));
        let timeouts = Timeouts { header: Duration::from_secs(10), idle, send };
        let stats: Arc<[ThreadStats]> = Arc::from(vec![ThreadStats::default()]);
        let track = Arc::new(Track::default());
        let timer = Arc::new(hyper_util::rt::TokioTimer::new());
        let mut io = IdleIo::new(ours, timer, timeouts, Instant::now(), track.clone(), stats);
        // Writes until one would block: the peer's buffers are full.
        let chunk = [b'x'; 4096];
        let blocked = loop {
            let wrote = poll_fn(|cx| Poll::Ready(Pin::new(&mut io).poll_write(cx, &chunk))).await;
            match wrote {
                Poll::Ready(Ok(n)) => assert!(n > 0),
                Poll::Ready(Err(e)) => panic!("{e} before the buffers filled"),
                Poll::Pending => break Instant::now(),
            }
        };
        // A read waiting meanwhile: still waiting at four idle timeouts.
        let mut byte = [0u8; 1];
        let reading = poll_fn(|cx| {
            let mut buf = ReadBuf::new(&mut byte);
            Pin::new(&mut io).poll_read(cx, &mut buf).map_ok(|()| buf.filled().len())
        });
        let read = tokio::time::timeout(idle * 4, reading).await;
        assert!(read.is_err(), "the read ended ({read:?}) while a response waited for the peer");
        assert!(!track.idle_closed.load(Ordering::Relaxed), "counted as an idle close");
        // The send timeout, from the write that blocked, fails the next write.
        let error = poll_fn(|cx| Pin::new(&mut io).poll_write(cx, &chunk)).await.expect_err("the peer never read");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert!(blocked.elapsed() >= send, "failed after {:?}", blocked.elapsed());
        assert!(track.send_closed.load(Ordering::Relaxed));
    }

    /// Writes `chunk` until a write would block (the peer's buffers are full), and says
    /// when the write that blocked was begun: its stall's send timeout counts from then or
    /// later. The first write waits until it goes through: tokio learns that a socket is
    /// writable again (a fresh one, or one whose peer read) on the runtime's next turn, and
    /// until then a write returns `Pending` with room in the buffers.
    async fn until_a_write_blocks<T: AsyncWrite + AsFd + Unpin>(io: &mut IdleIo<T>, chunk: &[u8]) -> Instant {
        let wrote = poll_fn(|cx| Pin::new(&mut *io).poll_write(cx, chunk)).await;
        assert!(wrote.as_ref().is_ok_and(|&n| n > 0), "{wrote:?} with room in the buffers");
        loop {
            let begun = Instant::now();
            match poll_fn(|cx| Poll::Ready(Pin::new(&mut *io).poll_write(cx, chunk))).await {
                Poll::Ready(Ok(n)) => assert!(n > 0),
                Poll::Ready(Err(e)) => panic!("{e} before the buffers filled"),
                Poll::Pending => return begun,
            }
        }
    }

    /// Every stall of a response gets a whole send timeout from its own start, however many
    /// came before it: a write blocks, the peer takes everything most of a send timeout
    /// later, and the next stall is held as long, past the instant the stall before it would
    /// have timed out; three times; then a fourth stall, never taken, fails the write a whole
    /// send timeout after it began (not at a deadline left by an earlier one).
    #[tokio::test]
    async fn every_stall_gets_a_whole_send_timeout_from_its_start() {
        let (ours, mut peer) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        ours.set_nonblocking(true).unwrap();
        peer.set_nonblocking(true).unwrap();
        let ours = tokio::net::UnixStream::from_std(ours).expect("a tokio socket");
        // Each stall is held 70 % of the send timeout: 30 % of it (300 ms) short of its own
        // deadline, and 40 % past the deadline of the stall before it (which began a
        // hold and a drain earlier), margins a loaded machine's late wake-ups do not cross.
        let send = Duration::from_millis(1000);
        let hold = send * 7 / 10;
        let timeouts = Timeouts { header: Duration::from_secs(10), idle: Duration::from_secs(10), send };
        let stats: Arc<[ThreadStats]> = Arc::from(vec![ThreadStats::default()]);
        let track = Arc::new(Track::default());
        let timer = Arc::new(hyper_util::rt::TokioTimer::new());
        let mut io = IdleIo::new(ours, timer, timeouts, Instant::now(), track.clone(), stats.clone());
        let counted = || Totals::of(&stats);
        let chunk = [b'x'; 16 * 1024];
        for stall in 1..=3 {
            let begun = until_a_write_blocks(&mut io, &chunk).await;
            assert_eq!(counted().waiting_for_peer(), 1, "stall {stall} not counted as waiting for the peer");
            let waiting = poll_fn(|cx| Pin::new(&mut io).poll_write(cx, &chunk));
            let held = tokio::time::timeout(hold, waiting).await;
            assert!(
                held.is_err(),
                "stall {stall}: the write ended ({held:?}) {:?} after it blocked, before its {send:?} send timeout",
                begun.elapsed()
            );
            // The peer takes everything: the next write goes through, and the one after the
            // buffers fill again begins the next stall.
            let mut sink = [0u8; 64 * 1024];
            loop {
                match std::io::Read::read(&mut peer, &mut sink) {
                    Ok(n) => assert!(n > 0, "the socket closed"),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e} while the peer read"),
                }
            }
        }
        // The fourth stall, never taken: the write fails at its own send timeout, not before
        // (bounded, so that a stall never timed out fails here too).
        let begun = until_a_write_blocks(&mut io, &chunk).await;
        let waiting = poll_fn(|cx| Pin::new(&mut io).poll_write(cx, &chunk));
        let failed = tokio::time::timeout(send * 3, waiting).await.expect("the fourth stall never timed out");
        let error = failed.expect_err("the peer never read");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert!(begun.elapsed() >= send, "the fourth stall failed {:?} after it began", begun.elapsed());
        assert!(track.send_closed.load(Ordering::Relaxed));
        assert!(!track.idle_closed.load(Ordering::Relaxed), "counted as an idle close");
        // The last stall waits until the connection ends. (More than four were counted: a
        // write that tokio answers `Pending` until its next turn is a stall to the wrapper.)
        assert_eq!(counted().waiting_for_peer(), 1);
        assert!(counted().send_stalls >= 4, "{:?}", counted());
        drop(io);
        assert_eq!(counted().waiting_for_peer(), 0, "the stall outlived the connection");
    }
}
