//! # shardwheel
//!
//! A lock-free, sharded, multi-core timer service: one hierarchical hashed timing wheel per
//! core, lock-free mailboxes between threads, and one compare-and-swap per timeout.
#![warn(missing_docs)]

mod builder;
mod clock;
mod entry;
mod error;
mod mailbox;
mod routing;
mod service;
mod shard;
mod state;
mod stats;
mod sync;
mod task;
mod timeout;
mod wheel;

pub use builder::Builder;
pub use error::{BuildError, ScheduleError, StopError};
pub use service::TimerService;
pub use stats::Stats;
pub use task::TimerTask;
pub use timeout::{Timeout, TimeoutState, Unfired};
