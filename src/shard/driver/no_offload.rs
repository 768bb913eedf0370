//! The driver without the `offload` feature: there is no pool, so the code that hands
//! tasks over compiles and can never run.

use super::{Arc, OwnedTask, Shard};

/// A type with no values: no service has a pool.
#[derive(Debug)]
pub(crate) enum Pool {}

/// Hands the committed tasks to `pool`: never called, as no `Pool` exists.
pub(super) fn offload_tasks(_: &Arc<Shard>, _: &mut Vec<OwnedTask>, pool: &Pool) {
    match *pool {}
}
