//! Futures on the service's timers, for any executor: [`Sleep`], [`WithTimeout`] and
//! [`Interval`].
//!
//! Nothing here knows an executor: a future registers a [`Waker`](std::task::Waker) in a
//! timeout's cell, and the shard that fires the timeout wakes it. So they work the same under
//! tokio (current-thread or multi-thread), smol or `async-executor`, and
//! `futures::executor::block_on`. The protocol between a poll and the shard is in
//! [`sleep`]'s module docs.

pub(crate) mod holder;
mod interval;
pub(crate) mod overflow;
pub(crate) mod sleep;
mod with_timeout;

pub use interval::Interval;
pub use sleep::Sleep;
pub use with_timeout::WithTimeout;
