//! A stage: where one thread's arms for one shard wait, on that thread's own cache lines,
//! until the shard needs them. Lock-free: neither side ever waits for the other (the final
//! drain of a stopping shard aside, below).
//!
//! Why stages: in the request-timeout pattern a thread arms a timeout and cancels it
//! microseconds later. Sent to the shard at once, each such timeout costs a mailbox push, the
//! shard's pop, its look at a cancelled entry, and the entry's memory travelling to the
//! shard's core and back. Staged, an arm is a store into a short ring that only its own
//! thread writes; when the ring fills, its thread drops the entries cancelled meanwhile, in
//! its own cache, and the shard never hears of them.
//!
//! The ring is a single-producer queue whose items are *claimed* by a compare-and-swap of
//! `head`, by either side, as the stealers of a work-stealing deque (Chase & Lev) or tokio's
//! run queue claim tasks:
//!
//! ```text
//!            head (CAS by owner or shard)        tail (owner only)
//!              │                                   │
//!   slots: ... [ e7 | e8 | e9 | e10 | e11 | e12 ] ...      entry i in slots[i % CAPACITY]
//!   due:   ≤ the deadline of every entry in [head, tail) (NONE: nothing promised)
//! ```
//!
//! Ground rules:
//! - **Owner** (the one thread that made the stage) publishes entry `i` by writing
//!   `slots[i % CAPACITY]` and then `tail = i + 1` (Release), and then promises it with
//!   `due.fetch_min(deadline)`. It overwrites a slot only once `head` has passed it.
//! - **Claims.** Whoever moves `head` from `h` to `t` with its CAS owns entries `h..t`. A
//!   claimer reads the slots *before* its CAS and discards what it read if the CAS fails, so
//!   a slot is never read after the owner may have reused it. The owner claims in a sweep
//!   (the ring is full: it drops what is cancelled and publishes the rest again); the shard
//!   claims in a take (the stage is due: it files everything in its wheel).
//! - **The promise.** The shard first swaps `due` to `NONE`, then claims. `due` is only
//!   lowered by the owner and only reset by the shard, and both are read-modify-writes of the
//!   one word, so they are totally ordered: an owner's `fetch_min` before the shard's swap
//!   made its entry visible to the claim that follows the swap; one after it finds `NONE`,
//!   lowers it, and so announces the stage again. An entry is never left unpromised.
//! - **Announcements.** An owner whose `fetch_min` lowered `due` announces the stage through
//!   the mailbox ([`Mailbox::announce`]), whose wake-up protocol wakes a shard sleeping past
//!   the new due.
//!   The shard files the stage in a wheel of its own by `due` (`shard/stages.rs`), and keeps
//!   it there, at `NEVER` once taken, until the stage is retired and empty: the shard always
//!   knows every stage that may hold entries for it, which its final drain needs.
//! - **Shutdown.** The final drain sets `closed`, waits out a sweep in progress (`sweeping`,
//!   a Dekker handshake with the owner's check of `closed`; a sweep is at most
//!   [`CAPACITY`] steps and runs no user code), and claims everything. An owner that finds
//!   `closed` after publishing takes its timeout back with the state word's cancel CAS, which
//!   the drain's own cancel races with: exactly one of them gets the task.
//! - **Retiring.** A stage retires when its thread exits, or when a sweep finds it more than
//!   half full of live timeouts (the owner then starts a fresh one, so it never waits for the
//!   shard to take them). A retired stage is promised as due now and announced: the shard
//!   takes it at its next turn and forgets it.
//!
//! Order: entries of one stage are filed in the order they were armed (one claim takes a
//! contiguous range; ranges are taken in order). A retired stage is due at once and its
//! announcement precedes the next stage's, so one thread's arms keep their order across its
//! stages too.
//!
//! [`Mailbox::announce`]: crate::mailbox::Mailbox::announce

use crate::entry::EntryRef;
use crate::sync::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, fence, thread};
use crate::wheel::{Key, Timed};
use std::ptr;

/// Entries a stage holds before its owner sweeps it. Big enough that a request-timeout
/// pattern's arms are almost all cancelled by the time the ring fills, small enough that a
/// sweep is short. Smaller under loom, so a model reaches a sweep with a few arms.
#[cfg(not(loom))]
pub(crate) const CAPACITY: usize = 64;
#[cfg(loom)]
pub(crate) const CAPACITY: usize = 2;

/// `due` when nothing is promised. Above every deadline (`NEVER` is a deadline: a staged
/// `Duration::MAX` timeout still makes its stage known to the shard).
pub(crate) const NONE: u64 = u64::MAX;

/// "Not in the shard's stage wheel."
const NO_KEY: u32 = u32::MAX;

/// One thread's arms for one shard.
pub(crate) struct Stage {
    /// The first entry nobody has claimed. Only ever moved forward, by a claim's CAS.
    head: AtomicU64,
    /// One past the last entry published. Written by the owner only.
    tail: AtomicU64,
    /// Entry `i`, as a raw [`EntryRef`], in `slots[i % CAPACITY]` while `head ≤ i < tail`.
    /// An array, not a slice: its length is known, so an index modulo `CAPACITY` needs no
    /// bounds check.
    slots: Box<[AtomicPtr<()>; CAPACITY]>,
    /// At or before the deadline of every unclaimed entry; `NONE` if nothing is promised.
    due: AtomicU64,
    /// Set by the shard's final drain (or by an owner whose announcement found the mailbox
    /// closed): nothing more may be published.
    closed: AtomicBool,
    /// Set by the owner for the length of a sweep (see the module docs, "Shutdown").
    sweeping: AtomicBool,
    /// Set by the owner when it will publish nothing more.
    retired: AtomicBool,
    /// The shard's own: where the stage sits in its stage wheel, and at which tick. Only the
    /// shard's thread touches them, hence `Relaxed`.
    key: AtomicU32,
    filed_at: AtomicU64,
}

/// What became of a push.
pub(crate) enum Push {
    /// Published and promised; `true` if `due` was lowered (announce the stage).
    Staged(bool),
    /// No room: sweep, then push again.
    Full(EntryRef),
    /// The stage is closed. `Some`: the entry was not published (it is handed back). `None`:
    /// it was; the final drain may or may not have taken it (take it back with a cancel).
    Closed(Option<EntryRef>),
}

/// What a sweep did.
pub(crate) enum Sweep {
    /// The stage is closed; nothing was touched.
    Closed,
    /// `lowered`: `due` was lowered (announce the stage). `crowded`: more than half the ring
    /// is still live, promised as due now; retire the stage and start a fresh one.
    /// `earliest`: the earliest deadline still on the stage (`NONE` if it is empty), the
    /// tick by which the shard must be awake.
    Swept { lowered: bool, crowded: bool, earliest: u64 },
}

impl Stage {
    pub(crate) fn new() -> Stage {
        #[cfg(loom)]
        crate::loom_live::add_stage(1);
        Stage {
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            slots: Box::new(std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut()))),
            due: AtomicU64::new(NONE),
            closed: AtomicBool::new(false),
            sweeping: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            key: AtomicU32::new(NO_KEY),
            filed_at: AtomicU64::new(NONE),
        }
    }

    fn slot(&self, i: u64) -> &AtomicPtr<()> {
        &self.slots[(i % CAPACITY as u64) as usize]
    }

    /// Owner only: publishes `entry`, due at `deadline`.
    pub(crate) fn push(&self, entry: EntryRef, deadline: u64) -> Push {
        // Acquire: a hint, a fast refusal (the owner's own `close_from_owner`, or a drain
        // already seen); the check after the promise below is the one that decides, ordered
        // by the drain's swap of `due` (see `promise`).
        if self.closed.load(Ordering::Acquire) {
            return Push::Closed(Some(entry));
        }
        // Relaxed: the owner is the only writer of `tail`.
        let tail = self.tail.load(Ordering::Relaxed);
        // Acquire: pairs with the AcqRel CAS of the claim that moved `head`, so the claimer's
        // reads of the slots happen before this thread reuses them.
        if tail - self.head.load(Ordering::Acquire) == CAPACITY as u64 {
            return Push::Full(entry);
        }
        // Relaxed: published by the Release store of `tail` below.
        self.slot(tail).store(entry.into_raw(), Ordering::Relaxed);
        // Release: the slot, and the entry behind it, before the new tail; pairs with the
        // Acquire load of `tail` in `claim`.
        self.tail.store(tail + 1, Ordering::Release);
        match self.promise(deadline) {
            None => Push::Closed(None),
            Some(lowered) => Push::Staged(lowered),
        }
    }

    /// Owner only: lowers `due` to `deadline` if it is later; `Some(lowered)`, or `None` if
    /// the stage was closed meanwhile.
    fn promise(&self, deadline: u64) -> Option<bool> {
        // AcqRel: a read-modify-write of `due`, totally ordered with the shard's swap in
        // `take`/`close` (module docs, "The promise"). Release publishes the entries before
        // it to a claim that follows that swap; Acquire makes a drain's `closed`, written
        // before its swap, visible to the load below.
        let before = self.due.fetch_min(deadline, Ordering::AcqRel);
        // Acquire: see above.
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        Some(deadline < before)
    }

    /// Owner only, when the ring is full: drops the entries that no longer need filing
    /// (cancelled, or filed already by an earlier reset's refile notice) here, where they
    /// were made, and publishes the rest again. `scratch` is an empty buffer to work in.
    pub(crate) fn sweep(&self, scratch: &mut Vec<EntryRef>) -> Sweep {
        debug_assert!(scratch.is_empty());
        // Store, SeqCst fence, load: the owner's half of the Dekker handshake with `close`:
        // either this sweep sees `closed` and touches nothing, or the drain sees `sweeping`
        // and waits for it to end. (The fence, not SeqCst accesses, makes the handshake, as
        // in `mailbox.rs`; loom models fences, and treats SeqCst accesses as AcqRel.)
        // Relaxed: ordered by the fence.
        self.sweeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence.
        if self.closed.load(Ordering::Relaxed) {
            // Release: nothing to publish, but pairs with the drain's wait like the other.
            self.sweeping.store(false, Ordering::Release);
            return Sweep::Closed;
        }
        self.claim(scratch);
        scratch.retain(|entry| entry.state().needs_filing());
        let live = scratch.len();
        let mut earliest = NONE;
        // Relaxed: the owner's own `tail`; the claim above emptied the ring.
        let tail = self.tail.load(Ordering::Relaxed);
        for (i, entry) in scratch.drain(..).enumerate() {
            earliest = earliest.min(entry.state().load().deadline());
            // Relaxed: published by the Release store of `tail` below.
            self.slot(tail + i as u64).store(entry.into_raw(), Ordering::Relaxed);
        }
        // Release: as in `push`.
        self.tail.store(tail + live as u64, Ordering::Release);
        let crowded = live * 2 > CAPACITY;
        let promised = if crowded { 0 } else { earliest };
        // AcqRel: as in `promise`. A crowded stage is promised as due now.
        let lowered = self.due.fetch_min(promised, Ordering::AcqRel) > promised;
        // Release: the drain that waits for this sees the entries published above.
        self.sweeping.store(false, Ordering::Release);
        Sweep::Swept { lowered, crowded, earliest }
    }

    /// Owner only, as its thread exits: sweeps, marks the stage retired, and promises what
    /// is left as due now. Returns `true` if the shard must be told: it then takes what is
    /// left and forgets the stage. Not if the stage is closed, nor if nothing was ever
    /// published on it (a thread that only cancelled): the shard never heard of it.
    pub(crate) fn retire(&self, scratch: &mut Vec<EntryRef>) -> bool {
        // Relaxed: the owner's own `tail`.
        if self.tail.load(Ordering::Relaxed) == 0 {
            return false;
        }
        if let Sweep::Closed = self.sweep(scratch) {
            return false;
        }
        self.mark_retired();
        // AcqRel: as in `promise`.
        self.due.fetch_min(0, Ordering::AcqRel);
        true
    }

    /// Owner only: it will publish nothing more (a crowded stage, already due now). Announce
    /// the stage after this, so the shard sees the mark when it takes the stage.
    pub(crate) fn mark_retired(&self) {
        // Release: pairs with the Acquire load in `is_retired`, through the announcement.
        self.retired.store(true, Ordering::Release);
    }

    /// Owner only: marks the stage closed after its announcement found the mailbox closed,
    /// so that nothing more is published on it.
    pub(crate) fn close_from_owner(&self) {
        // Release: as the drain's store.
        self.closed.store(true, Ordering::Release);
    }

    /// Whether the stage is closed (the owner then forgets it).
    pub(crate) fn is_closed(&self) -> bool {
        // Acquire: pairs with `close_from_owner`'s Release store; a drain's `closed`, set
        // before its fence, is only a hint here (the owner then forgets a stage it no
        // longer publishes on; its `Arc` count orders the stage's drop).
        self.closed.load(Ordering::Acquire)
    }

    /// Shard only: whether the owner will publish nothing more.
    pub(crate) fn is_retired(&self) -> bool {
        // Acquire: pairs with the Release store in `mark_retired`.
        self.retired.load(Ordering::Acquire)
    }

    /// The tick by which the stage must be taken (`NONE`: nothing promised).
    pub(crate) fn due(&self) -> u64 {
        // Acquire: pairs with the owner's `fetch_min`; a take orders itself with its own
        // swap, so this read only plans.
        self.due.load(Ordering::Acquire)
    }

    /// Whether every published entry has been claimed.
    pub(crate) fn is_empty(&self) -> bool {
        // Acquire: as in `claim`.
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Acquire)
    }

    /// Shard only: takes every published entry into `into`, in the order they were armed.
    pub(crate) fn take(&self, into: &mut Vec<EntryRef>) {
        // AcqRel: see `promise`; the swap must come before the claim.
        self.due.swap(NONE, Ordering::AcqRel);
        self.claim(into);
    }

    /// Shard only, in its final drain: closes the stage, waits for a sweep in progress to
    /// end, and takes everything.
    pub(crate) fn close(&self, into: &mut Vec<EntryRef>) {
        // Store, SeqCst fence, load: the drain's half of the handshake in `sweep`.
        // Relaxed: ordered by the fence; the Acquire load in the loop below pairs with the
        // sweep's Release store of `false`, so its entries are seen.
        self.closed.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        while self.sweeping.load(Ordering::Acquire) {
            // A sweep is a bounded loop without user code: it ends soon.
            thread::yield_now();
        }
        self.take(into);
    }

    /// Moves `head` to `tail` with a CAS and appends the entries it passed to `into`.
    fn claim(&self, into: &mut Vec<EntryRef>) {
        let mut raw = [ptr::null_mut::<()>(); CAPACITY];
        // Acquire: as in `push`.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            // Acquire: pairs with the owner's Release store of `tail`: the slots below it
            // are written.
            let tail = self.tail.load(Ordering::Acquire);
            let n = (tail - head) as usize;
            if n == 0 {
                // Nothing to claim: no CAS, so an empty take does not write the line the
                // owner's pushes read.
                return;
            }
            if n > CAPACITY {
                // `head` moved on since it was read (another claim): read it again.
                // Acquire: as above.
                head = self.head.load(Ordering::Acquire);
                continue;
            }
            for (i, r) in raw[..n].iter_mut().enumerate() {
                // Relaxed: ordered by the Acquire load of `tail`; a value read here is used
                // only if the CAS below shows nobody claimed (so the owner reused) the slot.
                *r = self.slot(head + i as u64).load(Ordering::Relaxed);
            }
            // AcqRel on success: Acquire for the entries, Release so that the reads above
            // happen before the owner reuses the slots. Acquire on failure: as the load.
            match self.head.compare_exchange(head, tail, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    // SAFETY: the CAS made this call the only owner of entries head..tail,
                    // each a reference published by `push` or `sweep` with `into_raw` and
                    // read back once, here.
                    into.extend(raw[..n].iter().map(|&p| unsafe { EntryRef::from_raw(p) }));
                    return;
                }
                Err(actual) => head = actual,
            }
        }
    }

    /// Shard only: where the stage sits in the shard's stage wheel.
    pub(crate) fn key(&self) -> Option<Key> {
        // Relaxed: only the shard's thread touches `key`.
        Key::from_raw(self.key.load(Ordering::Relaxed))
    }

    /// Shard only: records where the stage was filed, and at which tick.
    pub(crate) fn set_key(&self, key: Option<Key>, at: u64) {
        // Relaxed: only the shard's thread touches `key` and `filed_at`.
        self.key.store(key.map_or(NO_KEY, Key::into_raw), Ordering::Relaxed);
        self.filed_at.store(at, Ordering::Relaxed);
    }

    /// Shard only: the tick the stage is filed at.
    pub(crate) fn filed_at(&self) -> u64 {
        // Relaxed: only the shard's thread touches `filed_at`.
        self.filed_at.load(Ordering::Relaxed)
    }
}

/// The shard's stage wheel files a stage at the tick it was filed for.
impl Timed for crate::sync::Arc<Stage> {
    fn deadline(&self) -> u64 {
        self.filed_at()
    }
}

impl Drop for Stage {
    /// Whatever nobody claimed (timeouts the final drain or their owner took back): the
    /// references are dropped with the stage.
    fn drop(&mut self) {
        let mut left = Vec::new();
        self.claim(&mut left);
        #[cfg(loom)]
        crate::loom_live::add_stage(-1);
    }
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Relaxed: a debugging snapshot.
        f.debug_struct("Stage")
            .field("head", &self.head.load(Ordering::Relaxed))
            .field("tail", &self.tail.load(Ordering::Relaxed))
            .field("due", &self.due.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn entry(deadline: u64) -> EntryRef {
        EntryRef::new(deadline, || {})
    }

    fn deadlines(entries: &[EntryRef]) -> Vec<u64> {
        entries.iter().map(|e| e.state().load().deadline()).collect()
    }

    /// Fills `stage`'s ring with live timeouts due at 100, 101, ...; returns their handles.
    fn fill(stage: &Stage) -> Vec<EntryRef> {
        (0..CAPACITY as u64)
            .map(|i| {
                let (mine, staged) = EntryRef::new_pair(100 + i, || {});
                assert!(matches!(stage.push(staged, 100 + i), Push::Staged(_)));
                mine
            })
            .collect()
    }

    #[test]
    fn push_promises_and_take_claims_in_order() {
        let stage = Stage::new();
        assert!(matches!(stage.push(entry(50), 50), Push::Staged(true)), "the first push lowers due");
        assert!(matches!(stage.push(entry(70), 70), Push::Staged(false)), "a later one does not");
        assert!(matches!(stage.push(entry(20), 20), Push::Staged(true)));
        assert_eq!(stage.due(), 20);
        let mut taken = Vec::new();
        stage.take(&mut taken);
        assert_eq!(deadlines(&taken), [50, 70, 20], "armed order");
        assert_eq!(stage.due(), NONE);
        assert!(stage.is_empty());
        assert!(matches!(stage.push(entry(90), 90), Push::Staged(true)), "announced again");
    }

    /// `is_empty` holds exactly while nothing published waits to be claimed: after every
    /// way entries are published (a push, a sweep's republication, a retirement's sweep) it
    /// is false, and after every way they are claimed (a take, a sweep that drops them all, a
    /// close) it is true. The shard forgets a retired stage only once it is empty.
    #[test]
    fn a_stage_is_empty_exactly_while_nothing_published_waits() {
        let stage = Stage::new();
        assert!(stage.is_empty(), "new");
        assert!(matches!(stage.push(entry(50), 50), Push::Staged(true)));
        assert!(!stage.is_empty(), "one pushed");
        let mut taken = Vec::new();
        stage.take(&mut taken);
        assert_eq!(taken.len(), 1);
        assert!(stage.is_empty(), "taken");
        // A full ring whose sweep keeps a quarter: republished, so not empty.
        let handles = fill(&stage);
        for (i, h) in handles.iter().enumerate() {
            if i % 4 != 0 {
                assert!(h.cancel().is_some());
            }
        }
        assert!(matches!(stage.sweep(&mut Vec::new()), Sweep::Swept { .. }));
        assert!(!stage.is_empty(), "a sweep republishes the live ones");
        // Every one left cancelled: the next sweep drops them all.
        for h in handles.iter().step_by(4) {
            assert!(h.cancel().is_some());
        }
        assert!(matches!(stage.sweep(&mut Vec::new()), Sweep::Swept { .. }));
        assert!(stage.is_empty(), "a sweep that keeps nothing");
        // Retired with one live entry: not empty until the shard takes it.
        let (live, staged) = EntryRef::new_pair(700, || {});
        assert!(matches!(stage.push(staged, 700), Push::Staged(_)));
        assert!(stage.retire(&mut Vec::new()));
        assert!(stage.is_retired() && !stage.is_empty(), "retired, its entry waiting");
        taken.clear();
        stage.close(&mut taken);
        assert_eq!(taken.len(), 1);
        assert!(stage.is_empty(), "closed: everything taken");
        drop(live);
    }

    #[test]
    fn a_full_ring_sweeps_out_the_cancelled_and_keeps_order() {
        let stage = Stage::new();
        let handles = fill(&stage);
        assert!(matches!(stage.push(entry(1), 1), Push::Full(_)));
        // Cancel all but every fourth: a quarter survives, so the stage is not crowded.
        for (i, h) in handles.iter().enumerate() {
            if i % 4 != 0 {
                assert!(h.cancel().is_some());
            }
        }
        let mut scratch = Vec::new();
        assert!(matches!(stage.sweep(&mut scratch), Sweep::Swept { lowered: false, crowded: false, earliest: 100 }));
        let mut taken = Vec::new();
        stage.take(&mut taken);
        let expected: Vec<u64> = (0..CAPACITY as u64).filter(|i| i % 4 == 0).map(|i| 100 + i).collect();
        assert_eq!(deadlines(&taken), expected);
    }

    /// A sweep finds the stage crowded (promised now, to be retired) when more than half of
    /// its ring is live, and only then: one below half, exactly half and one above, each on
    /// a fresh stage.
    #[test]
    fn a_sweep_is_crowded_only_past_half_the_ring() {
        for (live, crowded) in [(CAPACITY / 2 - 1, false), (CAPACITY / 2, false), (CAPACITY / 2 + 1, true)] {
            let stage = Stage::new();
            let handles = fill(&stage);
            for h in &handles[live..] {
                assert!(h.cancel().is_some());
            }
            match stage.sweep(&mut Vec::new()) {
                Sweep::Swept { crowded: was, lowered, earliest } => {
                    assert_eq!(was, crowded, "{live} live of {CAPACITY}");
                    assert_eq!(earliest, 100, "{live} live");
                    assert_eq!(lowered, crowded, "{live} live: only a crowded stage lowers its promise to now");
                }
                Sweep::Closed => panic!("not closed"),
            }
            assert_eq!(stage.due(), if crowded { 0 } else { 100 }, "{live} live");
            let mut taken = Vec::new();
            stage.take(&mut taken);
            assert_eq!(taken.len(), live);
        }
    }

    /// A stage prints where its ring stands and what it promises.
    #[test]
    fn a_stage_prints_its_head_tail_and_promise() {
        let stage = Stage::new();
        assert_eq!(format!("{stage:?}"), format!("Stage {{ head: 0, tail: 0, due: {NONE}, .. }}"));
        assert!(matches!(stage.push(entry(50), 50), Push::Staged(true)));
        assert!(matches!(stage.push(entry(20), 20), Push::Staged(true)));
        assert_eq!(format!("{stage:?}"), "Stage { head: 0, tail: 2, due: 20, .. }");
        stage.take(&mut Vec::new());
        assert_eq!(format!("{stage:?}"), format!("Stage {{ head: 2, tail: 2, due: {NONE}, .. }}"));
    }

    #[test]
    fn a_crowded_sweep_promises_now() {
        let stage = Stage::new();
        for i in 0..CAPACITY as u64 {
            assert!(matches!(stage.push(entry(100 + i), 100 + i), Push::Staged(_)));
        }
        let mut scratch = Vec::new();
        assert!(matches!(stage.sweep(&mut scratch), Sweep::Swept { lowered: true, crowded: true, earliest: 100 }));
        assert_eq!(stage.due(), 0);
    }

    #[test]
    fn a_closed_stage_refuses_and_a_sweep_leaves_it_alone() {
        let stage = Stage::new();
        assert!(matches!(stage.push(entry(5), 5), Push::Staged(true)));
        let mut taken = Vec::new();
        stage.close(&mut taken);
        assert_eq!(taken.len(), 1);
        assert!(matches!(stage.push(entry(5), 5), Push::Closed(Some(_))));
        assert!(matches!(stage.sweep(&mut Vec::new()), Sweep::Closed));
        assert!(!stage.retire(&mut Vec::new()));
    }

    #[test]
    fn retiring_sweeps_and_promises_the_rest_now() {
        let stage = Stage::new();
        let (mine, staged) = EntryRef::new_pair(500, || {});
        assert!(matches!(stage.push(staged, 500), Push::Staged(true)));
        assert!(matches!(stage.push(entry(600), 600), Push::Staged(false)));
        assert!(mine.cancel().is_some());
        assert!(stage.retire(&mut Vec::new()));
        assert!(stage.is_retired());
        assert_eq!(stage.due(), 0);
        let mut taken = Vec::new();
        stage.take(&mut taken);
        assert_eq!(deadlines(&taken), [600], "the cancelled entry was dropped by the owner");
    }

    /// What nobody claimed goes with the stage: each entry's reference is dropped, so an
    /// entry the stage held alone is freed with its task, on each way entries wait there
    /// (pushed, republished by a sweep, left by a retirement); one whose handle lives on
    /// stays whole, its task dropped only with the handle.
    #[test]
    fn unclaimed_entries_are_dropped_with_the_stage() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicUsize;

        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let counted = |drops: &Arc<AtomicUsize>, deadline: u64| {
            let counted = Counted(drops.clone());
            EntryRef::new_pair(deadline, move || drop(counted))
        };
        type Ways = fn(&Stage);
        let ways: [(&str, Ways); 3] = [
            ("pushed", |_| {}),
            ("republished by a sweep", |stage| assert!(matches!(stage.sweep(&mut Vec::new()), Sweep::Swept { .. }))),
            ("left by a retirement", |stage| assert!(stage.retire(&mut Vec::new()))),
        ];
        for (way, then) in ways {
            let drops = Arc::new(AtomicUsize::new(0));
            let stage = Stage::new();
            let (mine, staged) = counted(&drops, 500);
            assert!(matches!(stage.push(staged, 500), Push::Staged(true)));
            for deadline in [600, 700] {
                let (handle, staged) = counted(&drops, deadline);
                assert!(matches!(stage.push(staged, deadline), Push::Staged(false)));
                drop(handle);
            }
            then(&stage);
            assert_eq!(drops.load(Ordering::Relaxed), 0, "{way}: nothing freed while staged");
            drop(stage);
            assert_eq!(drops.load(Ordering::Relaxed), 2, "{way}: the two the stage held alone are freed");
            assert!(mine.cancel().is_some(), "{way}: the handle's reference still works");
            assert_eq!(drops.load(Ordering::Relaxed), 3, "{way}: its task dropped by the cancel");
            drop(mine);
        }
    }
}
