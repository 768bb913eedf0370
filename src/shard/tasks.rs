//! Running what a turn committed: the batch of expired tasks, on the shard thread or on
//! the offload pool (`Builder::offload`), and the tasks the shard drops itself (as it stops
//! unjoined, or fails). Every one runs or drops inside [`catch_panics`], so that no task's
//! panic, nor its payload's own, reaches the driver: a panic that reached it would fail the
//! shard, and "`ShardFailed` is never a task's panic".

use crate::entry::OwnedTask;
use crate::shard::Shard;
use crate::sync::Arc;
use crate::task::catch_panics;

/// Runs the committed tasks with nothing borrowed, catching panics.
pub(super) fn run_tasks(shard: &Shard, batch: &mut Vec<OwnedTask>) {
    for task in batch.drain(..) {
        shard.counters.panicked(catch_panics(|| task.run_on_shard()));
    }
}

/// Drops a task the shard holds the right to (it took it back), catching panics: its
/// `Drop` is user code (a `Sleep`'s wake-up wakes the executor's waker).
pub(super) fn drop_task(shard: &Shard, task: OwnedTask) {
    shard.counters.panicked(catch_panics(|| drop(task)));
}

/// The pool expired tasks may run on (`Builder::offload`, with the `offload` feature).
#[cfg(feature = "offload")]
pub(crate) type Pool = rayon::ThreadPool;

/// Without the `offload` feature there is no pool: a type with no values, so the code that
/// hands tasks over compiles and can never run.
#[cfg(not(feature = "offload"))]
#[derive(Debug)]
pub(crate) enum Pool {}

/// Hands the committed tasks to `pool`, each with the shard to count its panic on. The shard
/// goes on at once.
#[cfg(not(feature = "offload"))]
pub(super) fn offload_tasks(_: &Arc<Shard>, _: &mut Vec<OwnedTask>, pool: &Pool) {
    match *pool {}
}

/// Hands the committed user tasks to `pool`, each with the shard to count its panic on (a
/// cell freed on the pool goes back to its page like any foreign free), and goes on at once.
/// The crate's own tasks (a `Sleep`'s wake-up, a series' control: `TimerTask::runs_on_shard`)
/// run here, on the shard, as without offload: a pool busy with (or blocked by) user tasks
/// must delay no sleep, and a task on the pool that waits for a sleep must not wait for a
/// thread of the pool to wake it.
#[cfg(feature = "offload")]
pub(super) fn offload_tasks(shard: &Arc<Shard>, batch: &mut Vec<OwnedTask>, pool: &Pool) {
    for task in batch.drain(..) {
        if task.runs_on_shard() {
            shard.counters.panicked(catch_panics(|| task.run_on_shard()));
            continue;
        }
        let shard = shard.clone();
        // On the pool too: a payload dropped outside the catch would panic out of rayon's
        // job, which aborts the process.
        pool.spawn(move || shard.counters.panicked(catch_panics(|| task.run_on_shard())));
    }
}
