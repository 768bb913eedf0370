//! Which stage a thread's arm goes to: each thread keeps, in a thread-local, one stage
//! (`stage.rs`) per shard it arms on, made on its first arm there. Nothing is registered and
//! nothing is locked: the stage's first announcement is what makes it known to its shard.
//!
//! Ground rules:
//! - Only this thread pushes on, sweeps or retires its stages.
//! - A stage whose sweep found it crowded (more than half live) is retired, promised as due
//!   now and replaced by a fresh one, so an arm never waits for the shard to take the old
//!   one. Its announcement, which goes before any of the fresh stage's, asks for a wake-up
//!   only by its earliest deadline: the shard takes it at its next turn, before the fresh
//!   stage, so one thread's arms keep their order.
//! - When the thread exits, each of its stages is swept one last time, retired, and
//!   announced as due now: the shard takes what is left and forgets the stage, so nothing of
//!   the thread outlives it but its live timeouts, in its shards' wheels.
//! - A thread holds its shards' shared halves (through a `ShardHandle`: the mailbox it
//!   announces through) while it holds their stages, and lends that handle to each timeout
//!   it makes there; never the shard threads, which stop with the service. Stages of
//!   stopped shards are forgotten at this thread's next new shard.

use crate::counts::Slot;
use crate::entry::EntryRef;
use crate::mailbox::Sent;
use crate::shard::{OwnerHandle, Shard, ShardRef};
use crate::stage::{Push, Stage, Sweep};
use crate::sync::Arc;
use std::cell::RefCell;

/// What became of an arm offered to this thread's stage.
pub(crate) enum Staging {
    /// Staged; the handle this thread keeps for the shard, for the timeout to hold.
    Staged(ShardRef),
    /// The shard is shutting down. `Some`: the entry was never shared, here it is back.
    /// `None`: it was published; take the timeout back with a cancel (the final drain may
    /// have taken it first).
    Closed(Option<EntryRef>),
    /// This thread cannot stage now (its thread-locals are being torn down): send the entry
    /// through the mailbox instead.
    Unavailable(EntryRef),
}

/// A stage this thread owns, and whose: the service's id and the shard's index (not the
/// shard's address, which a later shard may reuse).
struct Owned {
    service: u64,
    index: usize,
    /// The shard, counted once for this thread and all the timeouts it makes there (see
    /// `shard/handle.rs`).
    shard: OwnerHandle,
    stage: Arc<Stage>,
}

impl Owned {
    /// This thread's slot in the shard's counts, claimed with the handle and given back
    /// when the handle goes.
    fn counts(&self) -> &Slot {
        self.shard.counts().expect("a stage's handle is made with its thread's counts slot")
    }

    /// Tells the shard the stage is due from `due` on. `false` if the mailbox is closed: the
    /// stage is then closed too, so nothing more is published on it.
    fn announce(&self, due: u64) -> bool {
        match self.shard.mailbox.announce(self.stage.clone(), due) {
            Sent::Delivered => true,
            Sent::Closed => {
                self.stage.close_from_owner();
                false
            }
        }
    }
}

/// This thread's stages, and a buffer for their sweeps.
#[derive(Default)]
struct Mine {
    owned: Vec<Owned>,
    scratch: Vec<EntryRef>,
}

crate::sync::const_thread_local! {
    // Const-initialised: an access checks no lazy initialisation (every arm makes one).
    static MINE: RefCell<Mine> = RefCell::new(Mine { owned: Vec::new(), scratch: Vec::new() });
}

/// Stages `entry`, due at `deadline`, on this thread's stage for `shard`.
pub(crate) fn arm(shard: &Arc<Shard>, entry: EntryRef, deadline: u64) -> Staging {
    #[cfg(loom)]
    if loom_bypass::get() {
        return Staging::Unavailable(entry);
    }
    // In an `Option` so that the entry survives a thread-local that is already gone.
    let mut entry = Some(entry);
    let staged = MINE.try_with(|mine| {
        let mut mine = mine.try_borrow_mut().ok()?;
        Some(mine.arm(shard, entry.take()?, deadline))
    });
    match (staged, entry) {
        (Ok(Some(staging)), _) => staging,
        (_, Some(entry)) => Staging::Unavailable(entry),
        (_, None) => unreachable!("the entry is taken only on the way to `Some`"),
    }
}

impl Mine {
    /// The index of this thread's stage for `shard`, made if needed.
    #[inline]
    fn find(&mut self, shard: &Arc<Shard>) -> usize {
        match self.owned.iter().position(|o| o.service == shard.service && o.index == shard.index) {
            Some(i) => i,
            None => self.add(shard),
        }
    }

    /// A new stage for `shard`, this thread's first arm there (or first since that shard's
    /// stage closed): out of line, as it happens once per thread and shard.
    #[cold]
    #[inline(never)]
    fn add(&mut self, shard: &Arc<Shard>) -> usize {
        // Forget the stages of shards that have stopped (their final drain takes, or has
        // taken, what is on them); dropping their handles gives their counts slots back.
        self.owned.retain(|o| !o.stage.is_closed());
        self.owned.push(Owned {
            service: shard.service,
            index: shard.index,
            shard: OwnerHandle::new(shard.clone(), Some(shard.counts.claim())),
            stage: Arc::new(Stage::new()),
        });
        self.owned.len() - 1
    }

    fn arm(&mut self, shard: &Arc<Shard>, mut entry: EntryRef, deadline: u64) -> Staging {
        let i = self.find(shard);
        loop {
            let owned = &self.owned[i];
            match owned.stage.push(entry, deadline) {
                Push::Staged(lowered) if !lowered || owned.announce(deadline) => {
                    owned.counts().armed();
                    return Staging::Staged(owned.shard.make_ref());
                }
                // Announced to a closed mailbox: take the timeout back.
                Push::Staged(_) => return Staging::Closed(None),
                Push::Closed(back) => return Staging::Closed(back),
                Push::Full(back) => entry = back,
            }
            if !self.make_room(i) {
                return Staging::Closed(Some(entry));
            }
        }
    }

    /// The ring of stage `i` is full: sweeps it, then retires it for a fresh one if it is
    /// crowded. `false` if the stage is closed (its shard is stopping). Out of line: once
    /// per ring's worth of arms, and the arm's own path keeps fewer registers without it (a
    /// pair 493 → 487 instructions by callgrind over `examples/arm_cancel_loop.rs`).
    #[inline(never)]
    fn make_room(&mut self, i: usize) -> bool {
        let owned = &self.owned[i];
        match owned.stage.sweep(&mut self.scratch) {
            Sweep::Closed => false,
            Sweep::Swept { lowered, crowded, earliest } => {
                // A crowded stage is due now, so that the shard takes it before the next
                // stage's arms (announced after this), but the shard need not wake for it
                // before its earliest deadline.
                if crowded {
                    owned.stage.mark_retired();
                }
                if (lowered || crowded) && !owned.announce(earliest) {
                    return false;
                }
                if crowded {
                    self.owned[i].stage = Arc::new(Stage::new());
                }
                true
            }
        }
    }
}

impl Drop for Mine {
    /// The thread exits: each stage is swept, retired and announced as due now.
    fn drop(&mut self) {
        // Each handle gives its counts slot back as it is dropped, after the last sweep.
        for owned in self.owned.drain(..) {
            if owned.stage.retire(&mut self.scratch) {
                owned.announce(0);
            }
        }
    }
}

/// Counts a winning cancel of a timeout of `shard` in this thread's slot (or, while this
/// thread's thread-locals are torn down, in the shard's shared counter).
pub(crate) fn count_cancelled(shard: &Arc<Shard>) {
    let counted = MINE.try_with(|mine| {
        let mut mine = mine.try_borrow_mut().ok()?;
        let i = mine.find(shard);
        mine.owned[i].counts().cancelled();
        Some(())
    });
    if !matches!(counted, Ok(Some(()))) {
        shard.counters.cancelled();
    }
}

/// Under loom: what the calling thread's exit does to its stages, now (`loom_support`):
/// loom drops a thread's thread-locals after the thread is done, outside the model's
/// schedule, where a destructor's atomic operations may never run to their end.
#[cfg(loom)]
pub(crate) fn loom_exit() {
    let mine = MINE.with(|mine| std::mem::take(&mut *mine.borrow_mut()));
    drop(mine);
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

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::TimerService;
    use std::time::Duration;

    /// The stages this thread holds now, by the shards' services.
    fn my_stages() -> Vec<(u64, std::sync::Arc<crate::stage::Stage>)> {
        super::MINE.with(|mine| mine.borrow().owned.iter().map(|o| (o.service, o.stage.clone())).collect())
    }

    /// A thread's first arm on a shard adds a stage and forgets only those of shards that
    /// stopped: the stages of shards still running are kept (the same stage, not one made
    /// again), and a stopped shard's goes at the next new one. Twice, on a thread of its own.
    #[test]
    fn a_new_stage_forgets_the_stopped_shards_stages_and_keeps_the_rest() {
        std::thread::spawn(|| {
            let first = TimerService::builder().shards(1).build().unwrap();
            let _a = first.schedule(Duration::from_secs(60), || {}).unwrap();
            for round in 0..2 {
                let stopped = TimerService::builder().shards(1).build().unwrap();
                let _b = stopped.schedule(Duration::from_secs(60), || {}).unwrap();
                let before = my_stages();
                assert_eq!(before.len(), 2, "round {round}: one stage a shard armed on");
                assert_eq!(stopped.stop().unwrap().len(), 1);
                let next = TimerService::builder().shards(1).build().unwrap();
                let _c = next.schedule(Duration::from_secs(60), || {}).unwrap();
                let after = my_stages();
                assert_eq!(
                    after.len(),
                    2,
                    "round {round}: the stopped shard's stage forgotten, the running one's kept"
                );
                assert!(
                    std::sync::Arc::ptr_eq(&before[0].1, &after[0].1),
                    "round {round}: the first shard's stage made again"
                );
                assert_eq!(after[0].0, before[0].0);
                assert!(after[1].0 != before[1].0, "round {round}: the stopped shard's stage kept");
                assert_eq!(next.stop().unwrap().len(), 1);
            }
            assert_eq!(first.stop().unwrap().len(), 1);
        })
        .join()
        .unwrap();
    }

    /// Thread churn with threads that only cancel (never arm) on a shard: each claims a count
    /// slot there for its cancel, and must give it back as it exits, so the list stays as
    /// long as the most threads that held one at once, however many come and go.
    #[test]
    fn threads_that_only_cancel_give_their_count_slots_back() {
        const THREADS: usize = 64;
        const AT_ONCE: usize = 4;
        let timers = TimerService::builder().shards(1).build().unwrap();
        let shard = timers.shard_at(0).clone();
        let timeouts: Vec<_> = (0..THREADS).map(|_| timers.schedule(Duration::from_secs(60), || {}).unwrap()).collect();
        for batch in timeouts.chunks(AT_ONCE) {
            let threads: Vec<_> =
                batch.iter().cloned().map(|t| std::thread::spawn(move || assert!(t.cancel()))).collect();
            // `join` returns once the thread is gone, its thread-locals (and slots) with it.
            threads.into_iter().for_each(|t| t.join().unwrap());
        }
        let (slots, held) = shard.counts.census();
        assert_eq!(held, 1, "only this thread (which armed) still holds a slot");
        assert!(slots <= 1 + AT_ONCE, "{slots} slots after {THREADS} threads, at most {AT_ONCE} at once");
        let stats = timers.stats();
        assert_eq!((stats.cancelled, stats.pending), (THREADS as u64, 0));
        assert!(timers.stop().unwrap().is_empty());
    }
}
