//! The one choice of timer (`--timer`): every timeout of the proxy runs on it.
//!
//! [`TimerKind`] is the choice, and has the two ways the proxy waits:
//! - [`TimerKind::timeout`]: a future under a deadline (the upstream request), the timer's own
//!   `timeout` call: `shardwheel::time::timeout`, `tokio::time::timeout`, pingora's
//!   `fast_timeout`;
//! - [`TimerKind::hyper_timer`]: a [`hyper::rt::Timer`] on the same timer, whose boxed sleeps
//!   run hyper's header timeout ([`crate::conn::HeaderTimer`]) and the tokio and pingora
//!   streams' idle and send timeouts ([`crate::stream::TimedStream`]).
//!
//! Another timer is a variant here, an arm in each `match` of this file, and one in
//! `conn::serve`'s choice of stream.

use hyper::rt::{Sleep, Timer};
use hyper_util::rt::TokioTimer;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Which timer the proxy's timeouts run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TimerKind {
    /// shardwheel's ambient calls (`shardwheel::time`), and `io::TimeoutStream` around each
    /// accepted stream.
    Shardwheel,
    /// `tokio::time`, the runtime's own timer driver (hyper-util's `TokioTimer` for hyper).
    Tokio,
    /// `tokio::time` on tokio's alternative timer, a wheel per worker
    /// (`runtime::Builder::enable_alt_timer`): only in a build with
    /// `RUSTFLAGS="--cfg tokio_unstable"` (`proxy/scale.sh` makes one); other builds refuse it
    /// at start.
    TokioAlt,
    /// pingora-timeout's `fast_timeout` and `fast_sleep`: one clock thread, 10 ms slots.
    Pingora,
}

impl fmt::Display for TimerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimerKind::Shardwheel => "shardwheel",
            TimerKind::Tokio => "tokio",
            TimerKind::TokioAlt => "tokio-alt",
            TimerKind::Pingora => "pingora",
        })
    }
}

/// A timeout passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl TimerKind {
    /// The runtime this timer runs in: tokio's multi-threaded one with `threads` workers,
    /// and for [`TimerKind::TokioAlt`] its alternative timer. An error if this build cannot
    /// make it (`tokio-alt` without `--cfg tokio_unstable`).
    pub fn runtime(self, threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads).enable_all();
        if self == TimerKind::TokioAlt {
            #[cfg(tokio_unstable)]
            builder.enable_alt_timer();
            #[cfg(not(tokio_unstable))]
            return Err(std::io::Error::other(
                "--timer tokio-alt needs a build with RUSTFLAGS=\"--cfg tokio_unstable\" in a target directory \
                 of its own (proxy/scale.sh builds one)",
            ));
        }
        builder.build()
    }

    /// `future` under `duration`, on this timer's own `timeout`.
    pub async fn timeout<F: Future>(self, duration: Duration, future: F) -> Result<F::Output, Elapsed> {
        match self {
            TimerKind::Shardwheel => shardwheel::time::timeout(duration, future).await.map_err(|_| Elapsed),
            TimerKind::Tokio | TimerKind::TokioAlt => tokio::time::timeout(duration, future).await.map_err(|_| Elapsed),
            TimerKind::Pingora => {
                pingora_timeout::fast_timeout::fast_timeout(duration, future).await.map_err(|_| Elapsed)
            }
        }
    }

    /// hyper's view of this timer.
    pub fn hyper_timer(self) -> ProxyTimer {
        ProxyTimer(self)
    }

    /// Starts the timer's machinery before the first request, so its start is in none.
    pub fn warm_up(self) {
        match self {
            // The ambient service starts on its first use.
            TimerKind::Shardwheel => drop(shardwheel::time::sleep(Duration::ZERO)),
            // The runtime's driver is there already.
            TimerKind::Tokio | TimerKind::TokioAlt => {}
            // `fast_timeout` starts pingora's clock thread when it is made (`fast_sleep`, when
            // first polled).
            TimerKind::Pingora => drop(pingora_timeout::fast_timeout::fast_timeout(Duration::ZERO, async {})),
        }
    }
}

/// A [`hyper::rt::Timer`] on a [`TimerKind`].
#[derive(Clone, Copy, Debug)]
pub struct ProxyTimer(TimerKind);

impl ProxyTimer {
    /// The timer this is.
    pub fn kind(self) -> TimerKind {
        self.0
    }
}

impl Timer for ProxyTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        match self.0 {
            TimerKind::Shardwheel => Box::pin(ShardwheelSleep(shardwheel::time::sleep(duration))),
            TimerKind::Tokio | TimerKind::TokioAlt => TokioTimer::new().sleep(duration),
            TimerKind::Pingora => Box::pin(PingoraSleep(Box::pin(pingora_timeout::fast_timeout::fast_sleep(duration)))),
        }
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        match self.0 {
            TimerKind::Shardwheel => Box::pin(ShardwheelSleep(shardwheel::time::sleep_until(deadline.into()))),
            TimerKind::Tokio | TimerKind::TokioAlt => TokioTimer::new().sleep_until(deadline),
            TimerKind::Pingora => self.sleep(deadline.saturating_duration_since(Instant::now())),
        }
    }

    fn now(&self) -> Instant {
        match self.0 {
            // shardwheel's clock (the time-stamp counter where there is one), never behind
            // `Instant::now()`.
            TimerKind::Shardwheel => shardwheel::time::Instant::now().into(),
            TimerKind::Tokio | TimerKind::TokioAlt | TimerKind::Pingora => Instant::now(),
        }
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        match self.0 {
            TimerKind::Shardwheel => match sleep.as_mut().downcast_mut_pin::<ShardwheelSleep>() {
                // `Sleep::reset`: a later deadline is one compare-and-swap.
                Some(ours) => Pin::new(&mut Pin::into_inner(ours).0).reset(new_deadline.into()),
                None => *sleep = self.sleep_until(new_deadline),
            },
            TimerKind::Tokio | TimerKind::TokioAlt => TokioTimer::new().reset(sleep, new_deadline),
            // pingora's sleeps have no reset: a new one.
            TimerKind::Pingora => *sleep = self.sleep_until(new_deadline),
        }
    }
}

/// An ambient `shardwheel::time::Sleep` as a hyper sleep.
struct ShardwheelSleep(shardwheel::time::Sleep);

impl Future for ShardwheelSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl Sleep for ShardwheelSleep {}

/// pingora's `fast_sleep` as a hyper sleep.
struct PingoraSleep(Pin<Box<dyn Future<Output = ()> + Send + Sync>>);

impl Future for PingoraSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl Sleep for PingoraSleep {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_timer_times_out_never_early() {
        for kind in [TimerKind::Shardwheel, TimerKind::Tokio, TimerKind::Pingora] {
            let start = Instant::now();
            let r = kind.timeout(Duration::from_millis(30), std::future::pending::<()>()).await;
            assert_eq!(r, Err(Elapsed), "{kind}");
            // pingora's slots are 10 ms, its deadline truncated to the millisecond first.
            assert!(start.elapsed() >= Duration::from_millis(29), "{kind}: {:?}", start.elapsed());
            assert_eq!(kind.timeout(Duration::from_millis(30), async { 7 }).await, Ok(7));
        }
    }

    #[tokio::test]
    async fn each_hyper_timer_sleeps_and_resets() {
        for kind in [TimerKind::Shardwheel, TimerKind::Tokio, TimerKind::Pingora] {
            let timer = kind.hyper_timer();
            let start = Instant::now();
            let mut sleep = timer.sleep(Duration::from_secs(60));
            timer.reset(&mut sleep, timer.now() + Duration::from_millis(20));
            sleep.as_mut().await;
            assert!(start.elapsed() >= Duration::from_millis(19), "{kind}");
            assert!(start.elapsed() < Duration::from_secs(30), "{kind}");
        }
    }
}
