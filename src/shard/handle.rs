//! What a [`Timeout`](crate::Timeout) holds to reach its shard: a reference counted per
//! (thread, shard), not per shard.
//!
//! A handle must keep its shard's shared half alive (a cancel sends to the mailbox, a reset
//! reads the clock, `deadline()` answers after the service is gone). Counting every handle
//! on the shard's own `Arc` would make each schedule and each handle drop write one line
//! that every producer of the shard writes too. Instead each thread keeps one
//! `Arc<ShardHandle>` per shard it schedules on (in `staging.rs`, beside its stage), and its
//! timeouts count on that: the line is this thread's, written by other threads only when
//! they clone or drop a handle it made. The shard's own count moves once per (thread, shard),
//! when the handle is made and when its last timeout and the thread are gone.
//!
//! Why not no count at all (a raw pointer, reclaimed with `crossbeam-epoch`): a handle must
//! answer `deadline()` and `shard()` for as long as it lives, after `stop()` too, so the
//! shard's memory must outlive every handle, and only a count says when none is left. A pin
//! per call would cost as much as the count it replaces.

use crate::shard::Shard;
use crate::sync::Arc;
use std::ops::Deref;

/// A thread's counted way to its shard; see the module docs.
#[derive(Debug)]
pub(crate) struct ShardHandle {
    shard: Arc<Shard>,
}

impl ShardHandle {
    pub(crate) fn new(shard: Arc<Shard>) -> Arc<ShardHandle> {
        Arc::new(ShardHandle { shard })
    }

    /// The shard's own counted reference.
    pub(crate) fn shard(&self) -> &Arc<Shard> {
        &self.shard
    }
}

impl Deref for ShardHandle {
    type Target = Shard;

    fn deref(&self) -> &Shard {
        &self.shard
    }
}
