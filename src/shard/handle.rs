//! What a [`Timeout`](crate::Timeout) holds to reach its shard: a reference counted per
//! (thread, shard), not per shard, and counted without an atomic operation on the thread
//! that made it.
//!
//! A handle must keep its shard's shared half alive (a cancel sends to the mailbox, a reset
//! reads the clock, `deadline()` answers after the service is gone). Counting every handle
//! on the shard's own `Arc` would make each schedule and each handle drop write one line
//! that every producer of the shard writes too. Instead each thread keeps one
//! [`ShardHandle`] per shard it schedules on (an [`OwnerHandle`], in `staging.rs` beside its
//! stage; the shard's driver keeps one for its own thread), and its timeouts count on that.
//!
//! # Biased counting
//!
//! Most timeouts are made, cancelled and dropped on one thread. Their references are counted
//! as in biased reference counting (Choi, Shull, Torrellas, PACT 2018): a handle has an
//! *owner*, the thread that made it, and two counts.
//!
//! ```text
//!   local  (owner only, plain)   references the owner made or dropped, while it owns the handle
//!   shared (atomic)              BIAS + references other threads made − references they dropped
//! ```
//!
//! - The owner clones and drops with a plain add to `local`: no atomic operation, no line
//!   another thread writes. That is every arm-and-cancel pair on one thread.
//! - Any other thread clones with a `fetch_add` on `shared` and drops with a `fetch_sub`.
//! - While the owner owns the handle, `shared` holds `BIAS` (2⁶²), so other threads' drops,
//!   however many (each drops one reference that exists, and far fewer than 2⁶² exist), never
//!   bring it to zero: only the owner's *merge* can.
//! - **The merge**: when the owner lets go of its [`OwnerHandle`] (its thread exits, or the
//!   shard has stopped), it marks the handle merged (owner only, plain) and adds `local − 1
//!   − BIAS` to `shared` (its references, less the one it lets go of, less the bias): from
//!   then on `shared` is the number of references left, and every later drop, the owner's
//!   included, is a `fetch_sub`. Whoever brings `shared` to zero frees the handle.
//!
//! The free happens after every use: each other thread's drop releases its uses with its
//! `fetch_sub` (Release), the owner's plain drops are ordered before its merge, which is a
//! read-modify-write (AcqRel), and whoever frees acquires all of them first (as `Arc::drop`).
//! Thread identity is a number per thread that no other thread ever gets, so a thread never
//! takes another's plain path; `local` and `merged` are touched by the owner alone. Loom:
//! every model whose timeouts outlive or leave their thread (`loom-tests/`, the "biased
//! count" rows of the mutation table).
//!
//! Why not no count at all (a raw pointer, reclaimed with `crossbeam-epoch`): a handle must
//! answer `deadline()` and `shard()` for as long as it lives, after `stop()` too, so the
//! shard's memory must outlive every handle, and only a count says when none is left. A pin
//! per call would cost as much as the count it replaces.

use crate::counts::Slot;
use crate::routing;
use crate::shard::Shard;
use crate::sync::{Arc, AtomicU64, Ordering, UnsafeCell, fence};
use std::ops::Deref;
use std::ptr::NonNull;

/// What `shared` holds while the owner owns the handle: more than there can ever be drops.
const BIAS: u64 = 1 << 62;

/// The owner of a handle no thread owns: every count is atomic.
const NO_OWNER: u64 = routing::NO_THREAD as u64;

/// This thread's number (`routing::this_thread`): never another thread's.
#[inline]
fn this_thread() -> u64 {
    routing::this_thread() as u64
}

/// A shard's counted way in; see the module docs.
pub(crate) struct ShardHandle {
    shard: Arc<Shard>,
    /// The thread that made it, or [`NO_OWNER`].
    owner: u64,
    /// The owner's count (see the module docs). Owner only.
    local: UnsafeCell<u64>,
    /// Whether the owner has merged `local` into `shared`. Owner only.
    merged: UnsafeCell<bool>,
    /// See the module docs.
    shared: AtomicU64,
    /// The owner's slot in the shard's counts (`counts.rs`), if it holds one: its arms and
    /// cancels on the shard are counted there. Written through by the owner alone, and only
    /// until its merge, after which the slot is given back (`OwnerHandle::drop`).
    counts: Option<NonNull<Slot>>,
    /// Under loom only: what makes a free an access loom sees. Loom does not treat freeing
    /// memory as touching it, so a free not ordered after another thread's last use (the
    /// Acquire fence in `release_shared` cut, or the merge's AcqRel weakened) went unseen.
    /// Each thread reads this cell as it lets go of a reference (`release`), and the free
    /// writes it: loom reports a write not ordered after every read ("Causality
    /// violation"), as Miri's race detector reports a racing free.
    #[cfg(loom)]
    life: UnsafeCell<()>,
}

// SAFETY: `shard` and `shared` are shared safely (`Arc`, an atomic); `local` and `merged` are
// read and written only by the thread numbered `owner` (checked on every access through
// `owner_path`), never by two threads, and so is the slot behind `counts` (through
// `owner_path`, or the owner's non-`Send` `OwnerHandle`), so sharing the handle between
// threads is sound.
unsafe impl Sync for ShardHandle {}
// SAFETY: as for `Sync`: the owner-only fields are never touched by a thread that is not
// their owner, wherever the handle is.
unsafe impl Send for ShardHandle {}

impl ShardHandle {
    /// A handle no thread owns (the rare paths: a thread being torn down, a stopping shard, a
    /// series' own handle): every count on it is atomic. Its one reference is returned.
    pub(crate) fn unowned(shard: Arc<Shard>) -> ShardRef {
        let handle = ShardHandle {
            shard,
            owner: NO_OWNER,
            local: UnsafeCell::new(0),
            merged: UnsafeCell::new(true),
            shared: AtomicU64::new(1),
            counts: None,
            #[cfg(loom)]
            life: UnsafeCell::new(()),
        };
        ShardRef { ptr: handle.leak() }
    }

    /// Moves the handle to the heap, for its references to count on.
    fn leak(self) -> NonNull<ShardHandle> {
        #[cfg(loom)]
        crate::loom_live::add_handle(1);
        NonNull::from(Box::leak(Box::new(self)))
    }

    /// Counts one more reference: a plain add on the owner's thread, else an atomic one.
    #[inline]
    fn count_one_more(&self) {
        if self.owner_path(|local| *local = local.wrapping_add(1)).is_none() {
            // Relaxed: a reference is made from one the caller holds, so the handle cannot
            // be freed meanwhile; nothing is published by the count (as `Arc::clone`).
            self.shared.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops a reference counted on `shared`; frees the handle if it was the last.
    ///
    /// # Safety
    /// `ptr` is a live handle, and the caller gives up one reference to it, counted on
    /// `shared`, and does not use the pointer again.
    unsafe fn release_shared(ptr: NonNull<ShardHandle>) {
        // SAFETY: the caller's reference keeps the handle alive until the `fetch_sub`.
        let shared = unsafe { &ptr.as_ref().shared };
        // SAFETY: as above.
        unsafe { ptr.as_ref() }.released();
        // Release: every use of the handle through this reference happens before the free;
        // pairs with the Acquire fence in whichever thread frees it (as `Arc::drop`).
        if shared.fetch_sub(1, Ordering::Release) == 1 {
            fence(Ordering::Acquire);
            // SAFETY: the count reached zero: no reference is left, none can be made.
            unsafe { Self::free(ptr) };
        }
    }

    /// # Safety
    /// No reference to the handle is left.
    unsafe fn free(ptr: NonNull<ShardHandle>) {
        #[cfg(loom)]
        crate::loom_live::add_handle(-1);
        // The free, as loom sees it (see `life`).
        // SAFETY: no reference is left, so the handle is still there and this thread's alone.
        #[cfg(loom)]
        unsafe { ptr.as_ref() }.life.with_mut(|_| ());
        // SAFETY: the handle came from `Box::leak` in `leak`, and by the contract no one
        // refers to it any more.
        drop(unsafe { Box::from_raw(ptr.as_ptr()) });
    }

    /// A reference to the handle is about to be let go of: under loom, its last use as loom
    /// sees it (see `life`); nothing otherwise.
    #[inline]
    fn released(&self) {
        #[cfg(loom)]
        self.life.with(|_| ());
    }

    /// The shard's own counted reference.
    pub(crate) fn shard(&self) -> &Arc<Shard> {
        &self.shard
    }

    /// Counts a winning cancel in the owner's slot, if the calling thread is the owner and
    /// still holds its slot: a plain load and store, no thread-local lookup. `false` if not
    /// (the caller counts it elsewhere).
    #[inline]
    pub(crate) fn count_cancel_as_owner(&self) -> bool {
        let Some(counts) = self.counts else { return false };
        // SAFETY: `owner_path` runs only on the owner before its merge, and the owner gives
        // its slot back only after merging (`OwnerHandle::drop`), so the slot is this
        // thread's to write; it lives as long as the shard, which `self.shard` keeps.
        self.owner_path(|_| unsafe { counts.as_ref() }.cancelled()).is_some()
    }

    /// Runs `f` on the owner's fields if the calling thread owns the handle and has not
    /// merged it; `None` otherwise.
    #[inline]
    fn owner_path<R>(&self, f: impl FnOnce(&mut u64) -> R) -> Option<R> {
        if self.owner == NO_OWNER || !routing::is_this_thread(self.owner as usize) {
            return None;
        }
        // SAFETY: the calling thread is the owner (its number is unique), the only thread
        // that touches `local` and `merged`; nothing else holds a reference into them.
        unsafe {
            if self.merged.with_mut(|m| *m) {
                return None;
            }
            Some(self.local.with_mut(|local| f(&mut *local)))
        }
    }
}

impl Deref for ShardHandle {
    type Target = Shard;

    fn deref(&self) -> &Shard {
        &self.shard
    }
}

impl std::fmt::Debug for ShardHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardHandle").field("shard", &self.shard.index).finish_non_exhaustive()
    }
}

/// One counted reference to a [`ShardHandle`].
pub(crate) struct ShardRef {
    ptr: NonNull<ShardHandle>,
}

// SAFETY: a `ShardRef` gives `&ShardHandle` access only, which is `Sync`; its count is kept
// as the module docs say, whichever thread clones or drops it.
unsafe impl Send for ShardRef {}
// SAFETY: as for `Send`.
unsafe impl Sync for ShardRef {}

impl ShardRef {
    fn handle(&self) -> &ShardHandle {
        // SAFETY: this reference is counted, so the handle is not freed while it exists.
        unsafe { self.ptr.as_ref() }
    }
}

impl Clone for ShardRef {
    fn clone(&self) -> ShardRef {
        self.handle().count_one_more();
        ShardRef { ptr: self.ptr }
    }
}

impl Drop for ShardRef {
    // Inline: every timeout's drop, in the user's crate; on the owner's thread a plain
    // subtraction, cheaper than the call.
    #[inline]
    fn drop(&mut self) {
        // The owner's drop, before its merge, is a plain subtraction: `shared` holds the bias
        // until the merge, so the handle cannot be the owner's to free here.
        if self.handle().owner_path(|local| *local = local.wrapping_sub(1)).is_none() {
            // SAFETY: this reference is live and counted on `shared`, and is gone after this.
            unsafe { ShardHandle::release_shared(self.ptr) };
        }
    }
}

impl Deref for ShardRef {
    type Target = ShardHandle;

    fn deref(&self) -> &ShardHandle {
        self.handle()
    }
}

impl std::fmt::Debug for ShardRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.handle().fmt(f)
    }
}

/// A thread's own handle to a shard: the references it makes are counted without atomics
/// (see the module docs). Dropping it merges the thread's count; it must be dropped on the
/// thread that made it.
pub(crate) struct OwnerHandle {
    /// The owner's own reference, counted in `local`.
    ptr: NonNull<ShardHandle>,
}

impl OwnerHandle {
    /// A handle owned by the calling thread, with one reference: this one. `counts`: the
    /// thread's slot in the shard's counts, claimed for it, given back when it lets go.
    pub(crate) fn new(shard: Arc<Shard>, counts: Option<&Slot>) -> OwnerHandle {
        let owner = this_thread();
        let handle = ShardHandle {
            shard,
            owner,
            local: UnsafeCell::new(1),
            // A thread being torn down has no number: it owns nothing, and its only reference
            // (this one) is counted on `shared`.
            merged: UnsafeCell::new(owner == NO_OWNER),
            shared: AtomicU64::new(if owner == NO_OWNER { 1 } else { BIAS }),
            counts: counts.map(NonNull::from),
            #[cfg(loom)]
            life: UnsafeCell::new(()),
        };
        OwnerHandle { ptr: handle.leak() }
    }

    /// This thread's slot in the shard's counts, if it claimed one.
    pub(crate) fn counts(&self) -> Option<&Slot> {
        // SAFETY: the slot lives as long as the shard, which the handle keeps alive, and it
        // is this thread's until this `OwnerHandle` (not `Send`: it stays on its thread)
        // gives it back as it is dropped.
        self.handle().counts.map(|slot| unsafe { slot.as_ref() })
    }

    fn handle(&self) -> &ShardHandle {
        // SAFETY: this handle's own reference keeps it alive.
        unsafe { self.ptr.as_ref() }
    }

    /// A new reference, for a timeout this thread made: a plain add on the owner's count.
    #[inline]
    pub(crate) fn make_ref(&self) -> ShardRef {
        self.handle().count_one_more();
        ShardRef { ptr: self.ptr }
    }
}

impl Drop for OwnerHandle {
    /// The merge (see the module docs): from now on every reference counts on `shared`.
    fn drop(&mut self) {
        let handle = self.handle();
        // SAFETY: an `OwnerHandle` is not `Send`: it is dropped on the thread that made it,
        // the owner, the only thread that touches `merged` and `local`. (Not checked with
        // `owner_path`: the thread's number must not matter here, where a thread's
        // thread-locals are being torn down.)
        let already = unsafe { handle.merged.with_mut(|m| std::mem::replace(&mut *m, true)) };
        // Merged (or never owned): no count goes to the slot through the owner's path any
        // more, so it can go to the next thread that claims it.
        if let Some(counts) = self.counts() {
            counts.give_back();
        }
        if already {
            // Made by a thread being torn down: owned by no thread, an ordinary reference.
            // SAFETY: this handle's own reference, counted on `shared`, gone after this.
            return unsafe { ShardHandle::release_shared(self.ptr) };
        }
        // SAFETY: as above.
        let mine = unsafe { handle.local.with_mut(|local| std::mem::replace(&mut *local, 0)) };
        // The owner's references less this one, less the bias (wrapping: `mine` may be below
        // 1 where the owner dropped references other threads made).
        let delta = mine.wrapping_sub(1).wrapping_sub(BIAS);
        handle.released();
        // AcqRel: releases the owner's uses (its plain drops included) to whoever frees the
        // handle, and acquires the other threads' if this frees it.
        let before = handle.shared.fetch_add(delta, Ordering::AcqRel);
        if before.wrapping_add(delta) == 0 {
            // SAFETY: the count reached zero: every reference is gone.
            unsafe { ShardHandle::free(self.ptr) };
        }
    }
}

impl Deref for OwnerHandle {
    type Target = ShardHandle;

    fn deref(&self) -> &ShardHandle {
        self.handle()
    }
}

impl std::fmt::Debug for OwnerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.handle().fmt(f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::TimerService;
    use crate::sync::Arc;
    use std::sync::mpsc;
    use std::time::Duration;

    /// An owner's handle prints as the handle it owns: the shard's index.
    #[test]
    fn an_owner_handle_prints_its_shard() {
        let timers = TimerService::builder().shards(2).pin_threads(false).build().unwrap();
        let owned = super::OwnerHandle::new(timers.shard_at(1).clone(), None);
        assert_eq!(format!("{owned:?}"), "ShardHandle { shard: 1, .. }");
        assert_eq!(format!("{:?}", owned.make_ref()), "ShardHandle { shard: 1, .. }", "and so does a reference");
    }

    /// A winning cancel is counted in the owner's slot when the owner makes it (a plain
    /// add), and elsewhere (`false`: the caller counts it) when another thread does, or when
    /// the handle holds no slot.
    #[test]
    fn a_cancel_is_counted_in_the_owners_slot_by_the_owner_alone() {
        let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
        let shard = timers.shard_at(0).clone();
        let before = shard.counts.sum().1;
        let owned = super::OwnerHandle::new(shard.clone(), Some(shard.counts.claim()));
        let mine = owned.make_ref();
        assert!(mine.count_cancel_as_owner(), "the owner, with its slot");
        assert_eq!(shard.counts.sum().1, before + 1, "counted in the slot");
        let theirs = std::thread::scope(|s| s.spawn(|| mine.count_cancel_as_owner()).join().unwrap());
        assert!(!theirs, "another thread counts it elsewhere");
        assert_eq!(shard.counts.sum().1, before + 1);
        let slotless = super::OwnerHandle::new(shard.clone(), None);
        assert!(!slotless.make_ref().count_cancel_as_owner(), "no slot");
        drop((mine, owned, slotless));
        // The shard's thread joined: none left running when the test ends (Miri).
        drop(timers.stop());
    }

    /// The owner's clones and drops are plain adds to its `local` count, with `shared` left
    /// at the bias; another thread's clone and drop are atomic, on `shared`. (The owner may
    /// drop a reference another thread made: its plain count then goes below the references
    /// it made, which the merge's sum puts right.)
    #[test]
    fn the_owner_counts_plainly_and_every_other_thread_on_the_shared_count() {
        use crate::sync::Ordering;
        let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
        let owned = super::OwnerHandle::new(timers.shard_at(0).clone(), None);
        // SAFETY: the handle is live (held by `owned`); `local` is read on its owner's
        // thread, this one, and written by no other.
        let handle = unsafe { owned.ptr.as_ref() };
        let counts = || {
            // SAFETY: as above: read on the owner's thread, which alone writes it.
            let local = handle.local.with(|l| unsafe { *l });
            (local, handle.shared.load(Ordering::Relaxed))
        };
        let mine = owned.make_ref();
        assert_eq!(counts(), (2, super::BIAS), "the owner's clone");
        let theirs = std::thread::scope(|s| s.spawn(|| mine.clone()).join().unwrap());
        assert_eq!(counts(), (2, super::BIAS + 1), "another thread's clone");
        std::thread::scope(|s| s.spawn(|| drop(mine.clone())).join().unwrap());
        assert_eq!(counts(), (2, super::BIAS + 1), "another thread's clone and drop");
        drop(mine);
        drop(theirs);
        assert_eq!(counts(), (0, super::BIAS + 1), "the owner's drops");
        drop(owned);
        drop(timers.stop());
    }

    /// A handle is owned by the thread that made it, by that thread's number: made on two
    /// threads (whose numbers differ), each records its own maker, and only there is it
    /// owned.
    #[test]
    fn a_handle_is_owned_by_the_thread_that_made_it() {
        let timers = TimerService::builder().shards(1).pin_threads(false).build().unwrap();
        let make = || {
            let handle = super::OwnerHandle::new(timers.shard_at(0).clone(), None);
            // SAFETY: the handle is live (held by `handle`); only its `owner` is read.
            let owner = unsafe { handle.ptr.as_ref() }.owner;
            (owner, crate::routing::this_thread() as u64)
        };
        let here = make();
        let there = std::thread::scope(|s| s.spawn(make).join().unwrap());
        assert_ne!(here.1, there.1, "two threads, two numbers");
        assert_eq!(here.0, here.1, "made here: owned here");
        assert_eq!(there.0, there.1, "made there: owned there");
    }

    /// A thread that merged its count while it lives (it forgot the stage of a stopped
    /// shard, as its next first arm on another shard does) and then drops its timeouts: those
    /// drops must take the atomic path, the owner's plain one being closed by the merge (its
    /// plain count is no longer read by anyone). Taken after the merge, they would leave the
    /// handle's count above zero for ever: the handle, and the shard's `Arc` it holds, leak.
    #[test]
    fn an_owner_that_merged_drops_its_timeouts_through_the_shared_count() {
        let timers = TimerService::builder().shards(1).build().unwrap();
        let shard = timers.shard_at(0).clone();
        let other = TimerService::builder().shards(1).build().unwrap();
        let (timers2, other2) = (timers.clone(), other.clone());
        let (stopped_tx, stopped_rx) = mpsc::channel::<()>();
        let (armed_tx, armed_rx) = mpsc::channel::<()>();
        let owner = std::thread::spawn(move || {
            let kept: Vec<_> = (0..3).map(|_| timers2.schedule(Duration::from_secs(600), || {}).unwrap()).collect();
            armed_tx.send(()).unwrap();
            stopped_rx.recv().unwrap();
            // A first arm on another shard forgets the stopped shard's stage: the merge.
            drop(other2.schedule(Duration::from_secs(600), || {}).unwrap());
            // Dropped after the merge, on the owner's thread.
            drop(kept);
            drop(timers2);
            drop(other2);
            // The thread stays alive until the counts are checked.
            stopped_rx.recv().unwrap_or(());
        });
        armed_rx.recv().unwrap();
        let unfired = timers.stop().unwrap();
        assert_eq!(unfired.len(), 3);
        drop(unfired);
        stopped_tx.send(()).unwrap();
        // What holds the shard now: this test, the service; nothing else once the owner's
        // handle is freed.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&shard) > 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the owner's handle leaked ({} refs)",
                Arc::strong_count(&shard)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(stopped_tx);
        owner.join().unwrap();
        drop(other.stop().unwrap());
    }

    /// Every handle is freed once its last reference goes, whichever thread drops it and
    /// whether before or after its owner's merge: the shard's `Arc` (one per handle) comes
    /// back to where it was once every thread has exited and every timeout is dropped.
    #[test]
    fn handles_counted_on_many_threads_are_all_freed() {
        // What holds a stopped shard that never had a timeout: the service, and this test.
        let baseline = {
            let timers = TimerService::builder().shards(1).build().unwrap();
            let shard = timers.shard_at(0).clone();
            drop(timers.stop().unwrap());
            Arc::strong_count(&shard)
        };
        let timers = TimerService::builder().shards(1).build().unwrap();
        let shard = timers.shard_at(0).clone();
        const PRODUCERS: usize = 8;
        let (tx, rx) = mpsc::channel::<crate::Timeout>();
        let sink = std::thread::spawn(move || {
            let mut kept = Vec::new();
            for (i, t) in rx.into_iter().enumerate() {
                // Clones made here (atomic), some dropped now, the rest after every owner exits.
                let c = t.clone();
                if i % 2 == 0 {
                    drop(t);
                    kept.push(c);
                } else {
                    kept.push(t);
                    kept.push(c);
                }
            }
            kept
        });
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|n| {
                let timers = timers.clone();
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..200 {
                        let t = timers.schedule(Duration::from_secs(600), || {}).unwrap();
                        tx.send(t.clone()).unwrap();
                        if (i + n) % 3 == 0 {
                            assert!(t.cancel());
                        }
                        if i % 2 == 0 {
                            mine.push(t);
                        }
                    }
                    // Half dropped before the thread's merge, half after (a thread-local
                    // destroyed after `Mine` or before: either order must hold).
                    mine.truncate(100);
                    thread_local! {
                        static LATE: std::cell::RefCell<Vec<crate::Timeout>> = const { std::cell::RefCell::new(Vec::new()) };
                    }
                    LATE.with(|l| l.borrow_mut().extend(mine));
                })
            })
            .collect();
        // Timeouts made on the shard's own thread (the driver's handle), sent away; armed
        // from a thread of their own (this one would keep its handle to the end).
        let (timers1, tx1) = (timers.clone(), tx.clone());
        std::thread::spawn(move || {
            for _ in 0..50 {
                let (timers2, tx) = (timers1.clone(), tx1.clone());
                let t = timers1.schedule(Duration::from_nanos(1), move || {
                    let t = timers2.schedule(Duration::from_secs(600), || {}).unwrap();
                    let c = t.clone();
                    tx.send(t).unwrap();
                    drop(c);
                });
                drop(t);
            }
        })
        .join()
        .unwrap();
        // Under Miri, time runs with the instructions interpreted, every test's threads too.
        let deadline = std::time::Instant::now() + Duration::from_secs(if cfg!(miri) { 600 } else { 10 });
        while timers.stats().expired < 50 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(tx);
        producers.into_iter().for_each(|p| p.join().unwrap());
        let kept = sink.join().unwrap();
        assert!(Arc::strong_count(&shard) > baseline);
        drop(kept);
        let unfired = timers.stop().unwrap();
        drop(unfired);
        assert_eq!(Arc::strong_count(&shard), baseline, "a handle leaked (or was freed twice)");
    }
}
