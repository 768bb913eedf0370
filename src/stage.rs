//! Stages: where a thread's arms for one shard wait, on that thread's own cache lines, until
//! the shard needs them.
//!
//! Why: in the request-timeout pattern a thread arms a timeout and cancels it microseconds
//! later. Sent to the shard at once, each such timeout cost a mailbox push, the shard's pop,
//! its look at a cancelled entry, and the entry's memory travelling to the shard's core and
//! back: most of an arm-and-cancel pair's time, measured (README, "Performance"). Staged, an
//! arm is a push onto a short list that only its own thread and, rarely, the shard touch;
//! when the list fills, its thread drops the entries cancelled meanwhile, in its own cache,
//! and the shard never hears of them.
//!
//! Ground rules:
//! - Each (thread, shard) pair has at most one [`Stage`], made on the thread's first
//!   schedule to that shard and registered with the shard before anything is pushed on it.
//!   Only that thread pushes.
//! - Everything in a stage is behind its lock: the owner's pushes and sweeps, the shard's
//!   takes. The owner holds it for one push, or a sweep of at most [`CAPACITY`] entries; the
//!   shard only `try_lock`s it and comes back on its next turn if it is held, so a shard
//!   never waits for a producer (shutdown aside).
//! - `due` is at or before the deadline of every entry in the stage (`NEVER`: nothing
//!   promised). A push that lowers it sends [`Command::Stage`] with the new `due` through
//!   the mailbox, whose wake-up protocol (`mailbox.rs`) wakes a shard sleeping past it. The
//!   shard watches every stage announced to it and takes a stage's entries once its `due`
//!   comes, before it polls the wheel: a staged timeout fires no later than a sent one.
//! - A full stage is swept by its owner: entries no longer waiting to be filed (cancelled,
//!   or already filed by a refile notice) are dropped; if at least half the stage survives,
//!   the survivors go to the mailbox as ordinary arms, under the lock.
//! - Shutdown: the driver's final drain closes and empties every registered stage under its
//!   lock, and only then drains the mailbox. A push sees `closed` under the same lock, so it
//!   either lands before the drain takes the stage (the timeout is in `stop`'s list) or sees
//!   `closed` (the schedule fails with `Shutdown`, task handed back). A sweep moves its
//!   survivors into the mailbox under the lock, so they are there before the drain reads it.
//! - A thread's stages retire when it exits: what they hold is still promised by their `due`;
//!   the shard forgets a retired stage once it has taken it, and a later registration
//!   forgets retired stages that are empty.
//!
//! Order: timeouts armed from one thread for the same tick and shard still fire in the
//! order they were armed (one stage, drained in order). Timeouts armed from different
//! threads for the same tick may fire in either order.

use crate::entry::EntryRef;
use crate::mailbox::Command;
use crate::shard::Shard;
use crate::state::NEVER;
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering, thread_local};
use std::cell::RefCell;

/// Entries a stage holds before its owner sweeps it. Big enough that a request-timeout
/// pattern's arms are almost all cancelled by the time their stage fills, small enough that a
/// sweep is short. Smaller under loom, so a model reaches a sweep with a few arms.
#[cfg(not(loom))]
pub(crate) const CAPACITY: usize = 64;
#[cfg(loom)]
pub(crate) const CAPACITY: usize = 2;

/// One thread's arms for one shard.
pub(crate) struct Stage {
    inner: Mutex<Staged>,
    /// `Staged::due`, readable without the lock, for the shard to plan its sleep. Written
    /// only under the lock.
    due: AtomicU64,
    /// The shard's own mark: whether the stage is on its watch list. Only the shard's thread
    /// touches it, hence `Relaxed`.
    watched: AtomicBool,
}

struct Staged {
    entries: Vec<EntryRef>,
    /// Set by the final drain: nothing more may be pushed.
    closed: bool,
    /// Set when the owning thread exits: the shard takes what is left and forgets the stage.
    retired: bool,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Relaxed: a debugging snapshot.
        f.debug_struct("Stage").field("due", &self.due.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

/// What the shard took from a stage.
pub(crate) enum Taken {
    /// The owner holds the lock: try again on the next turn.
    Busy,
    /// The entries are in the buffer given; `true` if the stage is retired.
    Took { retired: bool },
}

impl Stage {
    fn new() -> Stage {
        Stage {
            inner: Mutex::new(Staged { entries: Vec::with_capacity(CAPACITY), closed: false, retired: false }),
            due: AtomicU64::new(NEVER),
            watched: AtomicBool::new(false),
        }
    }

    /// Owner only: pushes `entry`, due at `deadline`, sweeping first if the stage is full.
    /// Returns the entry if the stage is closed, and whether `due` was lowered (the caller
    /// then announces the stage).
    fn push(&self, shard: &Shard, entry: EntryRef, deadline: u64) -> Result<bool, EntryRef> {
        let mut staged = lock(&self.inner);
        if staged.closed {
            return Err(entry);
        }
        if staged.entries.len() == CAPACITY {
            staged.sweep(shard);
        }
        staged.entries.push(entry);
        // Relaxed: written under the lock; the shard reads it only to plan its sleep, after
        // the announcement below reached it through the mailbox (which orders it).
        let lowered = deadline < self.due.load(Ordering::Relaxed);
        if lowered {
            self.due.store(deadline, Ordering::Relaxed);
        }
        Ok(lowered)
    }

    /// Owner only, as its thread exits: nothing more will be pushed. What the stage holds
    /// is already promised to the shard by its `due`; the shard forgets the stage once it has
    /// taken it, or a later registration does once it is empty.
    fn retire(&self) {
        lock(&self.inner).retired = true;
    }

    /// Whether the final drain has closed the stage.
    fn is_closed(&self) -> bool {
        lock(&self.inner).closed
    }

    /// Retired and empty: nothing can reach it any more. `false` while its lock is held.
    fn is_spent(&self) -> bool {
        try_lock(&self.inner).is_some_and(|staged| staged.retired && staged.entries.is_empty())
    }

    /// Shard only: the tick by which the stage must be taken (`NEVER`: nothing promised).
    pub(crate) fn due(&self) -> u64 {
        // Relaxed: see `push`.
        self.due.load(Ordering::Relaxed)
    }

    /// Shard only: marks the stage watched; `false` if it already was.
    pub(crate) fn watch(&self) -> bool {
        // Relaxed: only the shard's thread touches the mark.
        !self.watched.swap(true, Ordering::Relaxed)
    }

    /// Shard only.
    pub(crate) fn unwatch(&self) {
        // Relaxed: only the shard's thread touches the mark.
        self.watched.store(false, Ordering::Relaxed);
    }

    /// Shard only: swaps the staged entries into `into` (empty, with capacity for a full
    /// stage, which the owner then keeps), unless the owner holds the lock.
    pub(crate) fn try_take(&self, into: &mut Vec<EntryRef>) -> Taken {
        debug_assert!(into.is_empty());
        let Some(mut staged) = try_lock(&self.inner) else {
            return Taken::Busy;
        };
        std::mem::swap(&mut staged.entries, into);
        // Relaxed: as in `push`.
        self.due.store(NEVER, Ordering::Relaxed);
        Taken::Took { retired: staged.retired }
    }

    /// Shard only, in its final drain: closes the stage and moves out what it holds.
    fn close(&self, into: &mut Vec<EntryRef>) {
        let mut staged = lock_patiently(&self.inner);
        staged.closed = true;
        into.append(&mut staged.entries);
        // Relaxed: as in `push`.
        self.due.store(NEVER, Ordering::Relaxed);
    }
}

impl Staged {
    /// Drops what no longer needs filing; sends the rest on if at least half survives.
    fn sweep(&mut self, shard: &Shard) {
        self.entries.retain(|entry| entry.state().needs_filing());
        if self.entries.len() >= CAPACITY / 2 {
            for entry in self.entries.drain(..) {
                let deadline = entry.state().load().deadline();
                // A closed mailbox is fine: we hold the lock and the stage is not closed, so
                // the final drain reads the mailbox after this (module docs).
                let _ = shard.mailbox.send(Command::Arm(entry), Some(deadline));
            }
        }
    }
}

/// A shard's stages, for its final drain.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    inner: Mutex<Registered>,
}

#[derive(Debug, Default)]
struct Registered {
    stages: Vec<Arc<Stage>>,
    closed: bool,
}

impl Registry {
    /// A new stage for this shard, or `None` once the shard's final drain has begun. Forgets
    /// the stages of exited threads that are empty, so the registry does not grow with
    /// thread churn.
    fn register(&self) -> Option<Arc<Stage>> {
        let mut registered = lock(&self.inner);
        if registered.closed {
            return None;
        }
        registered.stages.retain(|stage| !stage.is_spent());
        let stage = Arc::new(Stage::new());
        registered.stages.push(stage.clone());
        Some(stage)
    }

    /// Shard only: forgets a retired stage.
    pub(crate) fn remove(&self, stage: &Arc<Stage>) {
        let mut registered = lock(&self.inner);
        if let Some(i) = registered.stages.iter().position(|s| Arc::ptr_eq(s, stage)) {
            registered.stages.swap_remove(i);
        }
    }

    /// Shard only, in its final drain: closes every stage and moves out what they hold.
    pub(crate) fn close(&self, into: &mut Vec<EntryRef>) {
        let stages = {
            let mut registered = lock_patiently(&self.inner);
            registered.closed = true;
            std::mem::take(&mut registered.stages)
        };
        for stage in stages {
            stage.close(into);
        }
    }
}

/// What became of an arm offered to this thread's stage.
pub(crate) enum Staging {
    Staged,
    /// The shard is shutting down; the entry was never shared.
    Closed(EntryRef),
    /// This thread cannot stage now (it is exiting); send the entry instead.
    Unavailable(EntryRef),
}

/// A stage this thread owns, and whose: the service's id and the shard's index (not the
/// shard's address, which a later shard may reuse; and not a reference to the shard, which
/// would keep a dropped service's shards alive as long as the thread).
struct Owned {
    service: u64,
    shard: usize,
    stage: Arc<Stage>,
}

/// This thread's stages, one per shard it has scheduled on. Retired when the thread exits.
#[derive(Default)]
struct Mine(Vec<Owned>);

thread_local! {
    static MINE: RefCell<Mine> = RefCell::new(Mine::default());
}

impl Mine {
    /// The index of this thread's stage for `shard`, registering one if needed; `None` if the
    /// shard is shutting down.
    fn find(&mut self, shard: &Shard) -> Option<usize> {
        if let Some(i) = self.0.iter().position(|o| o.service == shard.service && o.shard == shard.index) {
            return Some(i);
        }
        // Forget the stages of shards that have stopped: their final drain emptied them.
        self.0.retain(|o| !o.stage.is_closed());
        let stage = shard.stages.register()?;
        self.0.push(Owned { service: shard.service, shard: shard.index, stage });
        Some(self.0.len() - 1)
    }
}

impl Drop for Mine {
    fn drop(&mut self) {
        for owned in self.0.drain(..) {
            owned.stage.retire();
        }
    }
}

/// Stages `entry`, due at `deadline`, on this thread's stage for `shard`.
pub(crate) fn arm(shard: &Shard, entry: EntryRef, deadline: u64) -> Staging {
    #[cfg(loom)]
    if loom_bypass::get() {
        return Staging::Unavailable(entry);
    }
    // In an `Option` so that the entry survives a thread-local that is already gone.
    let mut entry = Some(entry);
    let staged = MINE.try_with(|mine| {
        let mut mine = mine.try_borrow_mut().ok()?;
        let entry = entry.take()?;
        let Some(i) = mine.find(shard) else {
            return Some(Staging::Closed(entry));
        };
        let stage = &mine.0[i].stage;
        Some(match stage.push(shard, entry, deadline) {
            Ok(true) => {
                // A closed mailbox is fine: the stage was open when the entry went on it,
                // so the final drain takes it.
                let _ = shard.mailbox.send(Command::Stage(stage.clone()), Some(deadline));
                Staging::Staged
            }
            Ok(false) => Staging::Staged,
            Err(entry) => Staging::Closed(entry),
        })
    });
    match (staged, entry) {
        (Ok(Some(staging)), _) => staging,
        (_, Some(entry)) => Staging::Unavailable(entry),
        (_, None) => unreachable!("the entry is taken only on the way to `Some`"),
    }
}

/// Under loom: a thread's choice to arm through the mailbox (`loom_support`).
#[cfg(loom)]
pub(crate) mod loom_bypass {
    use std::cell::Cell;

    loom::thread_local! {
        static BYPASS: Cell<bool> = Cell::new(false);
    }

    pub(crate) fn set() {
        BYPASS.with(|b| b.set(true));
    }

    pub(crate) fn get() -> bool {
        BYPASS.with(|b| b.get())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No user code runs under these locks, so a poisoned one holds consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(_) => None,
    }
}

/// The driver's blocking lock. Under loom it spins with yields instead of blocking: loom's
/// `unpark` cannot wake a thread blocked on a mutex (see the mailbox's loom queue).
fn lock_patiently<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    loop {
        if let Some(guard) = try_lock(m) {
            return guard;
        }
        crate::sync::thread::yield_now();
    }
}
