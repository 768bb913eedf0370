//! Per-connection I/O timeouts for tokio's `AsyncRead + AsyncWrite` (the `tokio` feature):
//! [`TimeoutStream`], a read timeout, a write timeout and an idle timeout around any stream,
//! on the ambient timers of [`time`](crate::time), so no service handle is threaded through.
//!
//! ```
//! use shardwheel::io::TimeoutStream;
//! use shardwheel::time::{self, Duration, Instant};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let (client, server) = tokio::io::duplex(64);
//! // A server side closed after 100 ms without a byte either way.
//! let mut server = TimeoutStream::new(server).with_idle_timeout(Duration::from_millis(100));
//! let mut client = client;
//! client.write_all(b"ping").await?;
//! let mut buf = [0; 4];
//! server.read_exact(&mut buf).await?; // activity: the idle deadline moves out
//! let quiet = Instant::now();
//! let err = server.read(&mut buf).await.unwrap_err(); // the client says no more
//! assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
//! assert!(quiet.elapsed() >= Duration::from_millis(100), "never early");
//! # Ok(())
//! # }
//! ```
//!
//! # The three timeouts
//!
//! - **Read**: a read that waits (its stream said `Pending`) and makes no progress for the
//!   read timeout fails with [`ErrorKind::TimedOut`](std::io::ErrorKind::TimedOut). The count
//!   starts at the read's first `Pending` and ends when a read completes, as
//!   [`tokio-io-timeout`](https://docs.rs/tokio-io-timeout)'s does. A read dropped while it
//!   waits (the loser of a `select!`) does not end the count: the next read goes on from
//!   it, and may fail at once if the timeout has passed meanwhile (tokio-io-timeout's too;
//!   a blocking socket's `SO_RCVTIMEO` counts each call afresh).
//! - **Write**: the same for writes, flushes and shutdowns.
//! - **Idle**: no read that gave bytes and no write that took bytes for the idle timeout (counted
//!   from the last of them, or from when the idle timeout was set): a read or write that
//!   waits fails with `TimedOut` from then on, until one makes progress. Every such read or
//!   write pushes the idle deadline out.
//!
//! A timeout of `None` or zero is off. An operation that is ready is never failed: a read
//! that finds bytes gets them even past the idle deadline (and moves it out). The idle
//! timeout acts on operations that wait, and offers no future of its own: a server loop, and
//! hyper between requests, always has a read waiting on a connection that is quiet, and
//! that read is what fails. A connection whose task waits elsewhere and does no I/O is not
//! failed; its next read or write that waits fails at once if the idle deadline has passed
//! by then. **Under hyper, that includes a slow handler**: with `half_close` off (hyper's
//! default), hyper's HTTP/1 connection keeps a read waiting while the handler runs (to see a
//! client hang up), and a handler slower than the idle timeout has that read fail and the
//! connection dropped unanswered. Serve with `http1::Builder::half_close(true)` (the
//! README's recipe does), or keep the idle timeout above the slowest handler.
//!
//! # Cost
//!
//! A read or write that makes progress, with an idle timeout, reads the clock once
//! ([`Instant::now`](crate::time::Instant::now)) and stores the instant: no atomic operation,
//! no timer touched. Without an idle timeout it reads no clock. The timers move only when an
//! operation waits: each direction has one ambient [`Sleep`](crate::time::Sleep), made on the
//! direction's first wait and kept, which the wait sets to its deadline (the earlier of its
//! own timeout and the idle deadline). Its deadlines only ever move later, so once the sleep
//! is registered this is [`Sleep::reset`](crate::time::Sleep::reset)'s cheap path: one
//! compare-and-swap on the timeout's state word, no message to the shard, no new cell. Activity
//! on the other direction does not touch a waiting direction's sleep: if that sleep fires at
//! the old deadline, the wait looks again, finds the deadline moved, and sets the sleep to it.
//! So a timeout never fires early, and is late by the service's tick (and the wake-up) at
//! most.
//!
//! Each direction's sleep is polled by the task that waits in that direction, so a stream
//! split into a read half and a write half polled by two tasks (`tokio::io::split`) wakes each
//! task for its own timeouts.
//!
//! # Under hyper
//!
//! hyper's `TokioIo` takes it as it takes any tokio stream:
//! `TokioIo::new(TimeoutStream::new(tcp).with_idle_timeout(IDLE))`. The README has the
//! recipe ("An idle timeout pushed out by activity").

mod stream;
mod wait;

pub use stream::TimeoutStream;
