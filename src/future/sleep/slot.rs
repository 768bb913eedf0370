//! Where a [`Sleep`](super::Sleep) stands, in two words: the sleep is its service and these,
//! 24 bytes, small enough to fit the room a tokio task has for its future (a bigger future
//! steps the task's allocation up by 128 bytes: `docs/performance.md`, "Bytes per pending
//! future").
//!
//! ```text
//!  word (tagged in its two low bits)           aux
//!  cell (ARMED: 0) ──▶ WakeTaskAt { waker, at }  shard   registered: the cell and its ShardRef
//!  tick << 2 | IDLE                            at      not registered
//!  tick << 2 | STOPPED                         at      no cell, none to come
//!  box | OVERFLOW ──▶ { id, tick }             at      on the overflow timer
//! ```
//!
//! `at` is the deadline as asked, in nanoseconds from the service clock's start (the
//! ambient `Sleep::deadline` returns it; the tick is the wheel's, rounded up). While the
//! sleep is registered, `aux` holds the counted reference to its shard that its
//! [`Timeout`] needs (a cancel counts on it and sends to the shard), and `at` moves into
//! the cell, beside the waker (`WakeTaskAt`): an atomic there that only the sleep reads or
//! writes (a reset moves it), which the winner of the terminal CAS does not read
//! (`WakeTask::move_out` takes the waker alone). The explicit sleep keeps no `at` (its
//! deadline is its tick; `Holder::KEEPS_AT`): its cell is the 16-byte `WakeTask`, and each
//! method that reads or writes `at` is told which kind it serves (`keeps`). The waker's
//! identity, compared on every poll, is read from the cell too (the bytes of the waker it
//! holds, only ever read once it is shared: see "The waker slot" in `sleep.rs`).
//!
//! A tick takes 61 bits (`state::NEVER`), so the word holds it only on a 64-bit target.

use super::{Kept, WakeTask, WakeTaskAt, WakerId};
use crate::entry::EntryRef;
use crate::shard::ShardRef;
use crate::sync::Ordering;
use crate::timeout::Timeout;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::ptr;

#[cfg(not(target_pointer_width = "64"))]
compile_error!("shardwheel needs a 64-bit target: a sleep keeps its 61-bit tick in a pointer-sized word");

/// The registered phase's tag is 0, so that its word is the cell's pointer as it is (cells
/// are aligned to 8 bytes at least): the common phase pays no masking.
const ARMED: usize = 0;
const IDLE: usize = 1;
const STOPPED: usize = 2;
const OVERFLOW: usize = 3;
const TAG: usize = 3;

/// The sleep's state, as the module docs draw it. `aux` first, in C order: a registration
/// (`Timeout { entry, shard }`) then goes into the slot as two word moves, not one 16-byte
/// copy of the two halves just written apart (a store-forwarding stall on the arm path,
/// measured: `sleep_loop` 10 % slower).
#[repr(C)]
pub(super) struct Slot {
    aux: Aux,
    word: *mut (),
}

/// `at` in every phase but `ARMED`, where it is the shard's reference.
union Aux {
    at: i64,
    shard: ManuallyDrop<ShardRef>,
}

/// An entry of the overflow timer: its number there and the deadline's tick.
struct Overflowed {
    id: u64,
    tick: u64,
}

// SAFETY: the word is a tick, an `EntryRef`'s pointer (an `EntryRef` is `Send` and `Sync`)
// or a `Box<Overflowed>` the slot owns (plain integers); `aux` is an integer or a `ShardRef`
// (`Send` and `Sync`). Nothing in it is tied to a thread.
unsafe impl Send for Slot {}
// SAFETY: as for `Send`: through `&Slot` only the cell's atomics and its never-written
// bytes are read.
unsafe impl Sync for Slot {}

/// Where the sleep stands, read from the slot.
pub(super) enum Phase<'a> {
    /// Not registered: the deadline, in the service's ticks.
    Idle(u64),
    /// Registered: the cell that holds the waker, as a [`Timeout`].
    Armed(Registered<'a>),
    /// No cell, and none to come: the service was stopped when the sleep tried to register,
    /// or the sleep was already due on its own shard's thread (its deadline, in ticks). It
    /// completes if the deadline has passed, else says the service stopped.
    Stopped(u64),
    /// Waiting on the overflow timer (`overflow.rs`), no shard having taken it: the entry's
    /// number there, and the deadline in ticks.
    Overflow { id: u64, tick: u64 },
}

/// A registered sleep's [`Timeout`], made from the slot's two words without counting a
/// reference: it borrows the slot, and is never dropped as a `Timeout` (its references
/// are the slot's). Clone it for a counted one.
pub(super) struct Registered<'a> {
    timeout: ManuallyDrop<Timeout>,
    _slot: PhantomData<&'a Slot>,
}

impl Deref for Registered<'_> {
    type Target = Timeout;

    fn deref(&self) -> &Timeout {
        &self.timeout
    }
}

impl Registered<'_> {
    /// The wake-up in the cell, keeping `K`.
    ///
    /// # Safety
    /// The cell holds a `WakeTask<K>`: a `WakeTaskAt` if the sleep keeps its deadline as
    /// asked (`Holder::KEEPS_AT`), else a `WakeTask` (`Sleep::arm` makes that kind).
    #[inline]
    unsafe fn task<K: Kept, R>(&self, f: impl FnOnce(&WakeTask<K>) -> R) -> R {
        // SAFETY: by the contract, the cell holds a `WakeTask<K>`; `f` reads the waker's bytes, never
        // written once the cell is shared, or touches `at`, an atomic the shard never reads.
        unsafe { self.timeout.entry.read_task(f) }
    }

    /// The identity of the waker the cell holds; `keeps`: the sleep's `Holder::KEEPS_AT`.
    #[inline]
    pub(super) fn waker_id(&self, keeps: bool) -> WakerId {
        // SAFETY: the kind of the cell's task is the one `keeps` names (`Sleep::arm`).
        unsafe { if keeps { self.task(WakeTaskAt::waker_id) } else { self.task(WakeTask::<()>::waker_id) } }
    }

    /// The deadline as asked, kept in the cell of a sleep that keeps it (`keeps`).
    #[inline]
    fn at(&self, keeps: bool) -> Option<i64> {
        if !keeps {
            return None;
        }
        // Relaxed: only this sleep reads or writes it (`&mut self` or `&self` of one
        // owner); the atomic is for the shard's move-out, which does not read it.
        // SAFETY: `keeps`: the cell holds a `WakeTaskAt` (`Sleep::arm`).
        Some(unsafe { self.task(|task: &WakeTaskAt| task.at().load(Ordering::Relaxed) as i64) })
    }

    /// Stores the deadline as asked in the cell of a sleep that keeps it (`keeps`).
    #[inline]
    fn set_at(&self, at: i64, keeps: bool) {
        if keeps {
            // Relaxed: as in `at`. SAFETY: as in `at`.
            unsafe { self.task(|task: &WakeTaskAt| task.at().store(at as u64, Ordering::Relaxed)) }
        }
    }
}

impl Slot {
    /// Not registered, due at tick `tick`; `at` as asked.
    #[inline]
    pub(super) fn idle(tick: u64, at: i64) -> Slot {
        Slot { word: tick_word(tick, IDLE), aux: Aux { at } }
    }

    /// Where the sleep stands.
    #[inline]
    pub(super) fn phase(&self) -> Phase<'_> {
        let bits = self.word.addr();
        match bits & TAG {
            IDLE => Phase::Idle((bits >> 2) as u64),
            STOPPED => Phase::Stopped((bits >> 2) as u64),
            ARMED => Phase::Armed(self.registered()),
            _ => {
                // SAFETY: an `OVERFLOW` word is the slot's `Box<Overflowed>`, tagged.
                let overflowed = unsafe { &*self.word.map_addr(|a| a & !TAG).cast::<Overflowed>() };
                Phase::Overflow { id: overflowed.id, tick: overflowed.tick }
            }
        }
    }

    #[inline]
    fn registered(&self) -> Registered<'_> {
        debug_assert_eq!(self.word.addr() & TAG, ARMED);
        // SAFETY: an `ARMED` word is a counted `EntryRef`'s pointer as it is (tag 0), and `aux` its
        // shard's counted reference; both copies are wrapped so that they are never dropped
        // (the slot's own references stay the slot's), and live no longer than `&self`.
        let timeout = unsafe { Timeout { entry: EntryRef::from_raw(self.word), shard: ptr::read(&*self.aux.shard) } };
        Registered { timeout: ManuallyDrop::new(timeout), _slot: PhantomData }
    }

    /// The deadline as asked, in nanoseconds from the clock's start, for a sleep that keeps
    /// it (`keeps`: `Holder::KEEPS_AT`); 0 for one that does not, while it is registered.
    #[inline]
    pub(super) fn at(&self, keeps: bool) -> i64 {
        if self.word.addr() & TAG == ARMED {
            return self.registered().at(keeps).unwrap_or(0);
        }
        // SAFETY: `aux` is `at` in every phase but `ARMED`.
        unsafe { self.aux.at }
    }

    /// Sets the deadline as asked (a reset), in whichever place it is kept now.
    #[inline]
    pub(super) fn set_at(&mut self, at: i64, keeps: bool) {
        if self.word.addr() & TAG == ARMED {
            self.registered().set_at(at, keeps);
        } else {
            self.aux = Aux { at };
        }
    }

    /// The registration, moved out (the slot is left `IDLE` at tick 0, its `at` lost): for
    /// a sleep being dropped, which cancels it and lets go of it in one step.
    #[inline]
    pub(super) fn take_registration(&mut self) -> Option<Timeout> {
        if self.word.addr() & TAG != ARMED {
            return None;
        }
        let word = std::mem::replace(&mut self.word, tick_word(0, IDLE));
        // SAFETY: an `ARMED` word, now replaced.
        let timeout = unsafe { self.take_timeout(word) };
        self.aux = Aux { at: 0 };
        Some(timeout)
    }

    /// The slot's own registration, moved out of `word` (an `ARMED` word the slot held) and
    /// `aux` (its shard's reference).
    ///
    /// # Safety
    /// `word` was the slot's `ARMED` word and no longer is (the caller replaced it), and `aux`
    /// is overwritten before anything reads it again: each reference is given up once.
    #[inline]
    unsafe fn take_timeout(&mut self, word: *mut ()) -> Timeout {
        // SAFETY: by the contract, the entry's counted pointer and the shard's counted
        // reference, each moved out once, here.
        unsafe { Timeout { entry: EntryRef::from_raw(word), shard: ManuallyDrop::take(&mut self.aux.shard) } }
    }

    /// Registered: `timeout`'s cell is the sleep's kind of wake-up (with this slot's `at`,
    /// for a sleep that keeps it). The slot is `IDLE` (every arm starts there), so there is
    /// nothing to let go of.
    #[inline]
    pub(super) fn armed(&mut self, timeout: Timeout) {
        debug_assert_eq!(self.word.addr() & TAG, IDLE, "armed from a phase that holds something");
        let Timeout { entry, shard } = timeout;
        let raw = entry.into_raw();
        debug_assert_eq!(raw.addr() & TAG, 0, "a cell aligned to 4 bytes at least");
        self.word = raw;
        self.aux = Aux { shard: ManuallyDrop::new(shard) };
    }

    /// Not registered, due at tick `tick`.
    #[inline]
    pub(super) fn set_idle(&mut self, tick: u64, keeps: bool) {
        let at = self.leave(keeps);
        self.word = tick_word(tick, IDLE);
        self.aux = Aux { at };
    }

    /// No cell, and none to come, due at tick `tick`.
    #[inline]
    pub(super) fn set_stopped(&mut self, tick: u64, keeps: bool) {
        let at = self.leave(keeps);
        self.word = tick_word(tick, STOPPED);
        self.aux = Aux { at };
    }

    /// On the overflow timer as entry `id`, due at tick `tick`.
    pub(super) fn set_overflow(&mut self, id: u64, tick: u64, keeps: bool) {
        let at = self.leave(keeps);
        let boxed = Box::into_raw(Box::new(Overflowed { id, tick }));
        self.word = boxed.cast::<()>().map_addr(|a| a | OVERFLOW);
        self.aux = Aux { at };
    }

    /// Lets go of what the phase holds (see `release`) and returns `at`, which `aux` then
    /// holds; the word is left `IDLE` at tick 0, for the caller to overwrite.
    #[inline]
    fn leave(&mut self, keeps: bool) -> i64 {
        let at = self.at(keeps);
        self.release();
        self.aux = Aux { at };
        at
    }

    /// Lets go of what the phase holds: a registration's two references, an overflow's
    /// box. The word is left `IDLE` at tick 0, and `aux` as it was (a shard's reference
    /// given up: the caller overwrites it, or the slot is being dropped).
    #[inline]
    fn release(&mut self) {
        let word = std::mem::replace(&mut self.word, tick_word(0, IDLE));
        match word.addr() & TAG {
            ARMED => {
                // SAFETY: an `ARMED` word, replaced above; `aux` is overwritten before anything
                // reads it again (the callers', or the slot is being dropped).
                drop(unsafe { self.take_timeout(word) });
            }
            OVERFLOW => {
                // SAFETY: the slot's `Box<Overflowed>`, given up once, here.
                drop(unsafe { Box::from_raw(word.map_addr(|a| a & !TAG).cast::<Overflowed>()) });
            }
            _ => {}
        }
    }
}

impl Drop for Slot {
    /// Gives back what the phase holds. A sleep being dropped has already taken its
    /// registration out (`take_registration`: the word is `IDLE` then), so this is one
    /// compare, inline in the sleep's drop.
    #[inline(always)]
    fn drop(&mut self) {
        if self.word.addr() & TAG == IDLE {
            return;
        }
        self.release();
    }
}

/// A tick, tagged, as the word holds it (the word has no provenance then: it is no pointer).
#[inline]
fn tick_word(tick: u64, tag: usize) -> *mut () {
    debug_assert!(tick <= crate::state::NEVER);
    ptr::without_provenance_mut(((tick as usize) << 2) | tag)
}
