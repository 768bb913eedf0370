//! The checked settings a service starts with, and the shards they make.

use crate::clock::Clock;
use crate::shard::{Shard, driver};
use crate::sync::plain::Arc as PlainArc;

/// Checked settings, as [`Builder::build`](crate::Builder::build) hands them over.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) shards: usize,
    pub(crate) max_pending_per_shard: Option<usize>,
    pub(crate) pin_threads: bool,
    pub(crate) thread_name: String,
    /// The pool expired tasks run on, if not the shard threads.
    pub(crate) offload: Option<PlainArc<driver::Pool>>,
    #[cfg(any(test, loom))]
    pub(crate) wheel_limit: Option<usize>,
}

impl Settings {
    /// Shard `index` of service `service`, as these settings say.
    pub(crate) fn shard(&self, index: usize, service: u64, clock: Clock) -> Shard {
        #[cfg_attr(not(any(test, loom)), allow(unused_mut))]
        let mut shard = Shard::new(index, service, clock, self.max_pending_per_shard);
        #[cfg(any(test, loom))]
        {
            shard.wheel_limit = self.wheel_limit;
        }
        shard
    }
}
