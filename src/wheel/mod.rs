//! A hierarchical hashed timing wheel (Varghese & Lauck 1987, scheme 7), single-threaded.
//!
//! This is plain `&mut self` code with no atomics, no `unsafe` and no clock: the shard
//! driver passes the current tick in, so the wheel can be tested deterministically against
//! a model (`tests.rs`).
//!
//! # Geometry
//!
//! [`LEVELS`] levels of 64 slots; a slot at level `L` spans `64^L` ticks, so level `L` holds
//! the deadlines that differ from the wheel's current tick (`elapsed`) first in bits
//! `6L..6L+6`. Each level keeps a `u64` occupancy bitmap, so the next occupied slot is a
//! `trailing_zeros`, never a scan. Beyond the top level (`64^LEVELS` ticks) a deadline is
//! held on the *horizon* list and re-filed when the wheel reaches its top-level block, never
//! wrapped into a near slot; a deadline of [`NEVER`] is held apart and never wakes the wheel.
//!
//! # Firing
//!
//! [`Wheel::poll`] moves time forward to `now` one occupied slot at a time. An entry fires
//! at the first tick at or after its deadline: never early. A level-0 slot's entries all
//! fire; a higher slot's entries are re-filed one level lower (cascade), except those whose
//! deadline is the slot's start, which fire. Entries for the same tick fire in the order
//! they were inserted: all of them are always on the same list, and lists are FIFO. Work is
//! bounded per call by a step budget that counts both firings and cascade moves, so a mass
//! expiry is served in slices; while a slot is being worked through, new entries that belong
//! in it or are already due join its tail, so FIFO order survives the slicing.
//!
//! Each slot also remembers the deadline its entries were filed with while they all share
//! one (a mass expiry: a million connections that time out together). Such a slot cascades
//! as a whole, its list spliced in O(1) to where that deadline goes, so those entries are
//! touched once, when they fire, not once per level. An entry handed out from the ready list
//! is checked against its deadline first, so one whose deadline moved later since it was
//! filed is filed again, never handed out early.
//!
//! Insert and remove are O(1); nodes live in a slab (`slab.rs`) and are reused, so a wheel in
//! steady state does not allocate. Lists are circular with a sentinel node each, so a node
//! carries no list id: 16 bytes for a pointer-sized value.
//!
//! # Two drivers
//!
//! The service's shard drives it with [`Wheel::poll`] (a batch per turn, under a step
//! budget); the embedded [`LocalWheel`](crate::LocalWheel) with [`Wheel::pop_due`] (one due
//! entry at a time, the caller's loop being the budget), which leaves the entry allocated so
//! its owner can look at it before it [`Wheel::take`]s it or [`Wheel::refile`]s it.
//!
//! # Deadlines that move
//!
//! The wheel does not keep a copy of each entry's deadline: it asks the entry ([`Timed`])
//! whenever it files it, at insertion, at a cascade that moves it alone, and when it comes
//! due; a node is smaller by a deadline. A timeout whose deadline was pushed out (a reset,
//! which is only a CAS on its state word) is re-filed lazily: a slot whose entries were all
//! filed with one deadline cascades whole (one splice) by that deadline, so the moved entry
//! rides down to its old tick, and there, found not due, is filed again by its new deadline
//! (in a slot with mixed deadlines it is re-filed by its new deadline at the slot's cascade).
//! Either way it never comes out before its deadline. The ordering guarantees above hold for
//! entries whose deadlines do not move while they wait; one whose deadline moves is ordered
//! by where it is filed.

mod slab;
#[cfg(all(test, not(loom)))]
mod tests;

use slab::{ListId, NIL, Slab};

pub(crate) use crate::state::NEVER;

/// Bits of the tick per level.
const SLOT_BITS: u32 = 6;
/// Slots per level: one `u64` bitmap covers a level.
const SLOTS_PER_LEVEL: usize = 1 << SLOT_BITS;
/// Levels of the wheel. Six levels of 64 slots span 2^36 ticks (795 days at 1 ms); beyond
/// that, deadlines wait on the horizon list. Under loom the wheel is never model-checked
/// itself (it has no atomics), but it runs inside models: two levels keep those runs short
/// and still exercise cascades and the horizon.
#[cfg(not(loom))]
pub(crate) const LEVELS: usize = 6;
#[cfg(loom)]
pub(crate) const LEVELS: usize = 2;
/// Ticks the levels cover.
const HORIZON_BITS: u32 = SLOT_BITS * LEVELS as u32;

/// List ids (sentinel nodes) beyond the level slots.
const READY: ListId = (LEVELS * SLOTS_PER_LEVEL) as ListId;
const HORIZON: ListId = READY + 1;
const NEVER_LIST: ListId = READY + 2;
/// Lists in all: every level slot, and the three above.
const LISTS: u32 = NEVER_LIST + 1;
/// The smallest key an entry can have: the keys below are the lists' sentinels.
pub(crate) const FIRST_KEY: u32 = LISTS;

/// What the wheel holds: anything that can say when it is due.
pub(crate) trait Timed {
    /// The tick the entry is due at now (`NEVER` or more: never).
    fn deadline(&self) -> u64;
}

/// A key to an entry in the wheel, valid until the entry is removed or returned by `poll`
/// (or taken after `pop_due`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key(u32);

impl Key {
    pub(crate) fn from_raw(raw: u32) -> Option<Key> {
        (raw != NIL).then_some(Key(raw))
    }

    pub(crate) fn into_raw(self) -> u32 {
        self.0
    }
}

/// One level: the bitmap of its non-empty slots (the slots' lists live in the slab), and
/// for each non-empty slot the one deadline all its entries were filed with, or [`MIXED`].
#[derive(Debug, Clone, Copy)]
struct Level {
    occupied: u64,
    common: [u64; SLOTS_PER_LEVEL],
}

impl Level {
    const EMPTY: Level = Level { occupied: 0, common: [MIXED; SLOTS_PER_LEVEL] };
}

/// A slot whose entries were filed with different deadlines (no deadline is this large).
const MIXED: u64 = u64::MAX;

/// A timing wheel holding values of type `T`, each with a deadline in ticks.
#[derive(Debug)]
pub(crate) struct Wheel<T> {
    /// The tick the wheel has advanced to. Every entry on a level has a deadline after it.
    elapsed: u64,
    levels: [Level; LEVELS],
    /// The slot being worked through, if a budget cut its work short: `(level, slot)`.
    processing: Option<(usize, usize)>,
    /// The earliest deadline on the horizon list (`NEVER` if none).
    horizon_min: u64,
    slab: Slab<T>,
}

/// What one step of the wheel did.
enum Step {
    /// This node is due: unlinked, still allocated.
    Fired(u32),
    /// A cascade moved one node.
    Moved,
    /// Nothing is due at or before `now`; `elapsed` is `now` (or was already later).
    Idle,
}

/// The level a deadline after `elapsed` belongs on: where the two first differ, in 6-bit
/// groups. `LEVELS` or more means beyond the horizon.
fn level_for(elapsed: u64, deadline: u64) -> usize {
    let differing = (deadline ^ elapsed) | (SLOTS_PER_LEVEL as u64 - 1);
    ((63 - differing.leading_zeros()) / SLOT_BITS) as usize
}

fn slot_for(deadline: u64, level: usize) -> usize {
    ((deadline >> (SLOT_BITS * level as u32)) & (SLOTS_PER_LEVEL as u64 - 1)) as usize
}

fn slot_list(level: usize, slot: usize) -> ListId {
    (level * SLOTS_PER_LEVEL + slot) as ListId
}

impl<T: Timed> Wheel<T> {
    pub(crate) fn new() -> Wheel<T> {
        Wheel::with_capacity(0)
    }

    /// A wheel with room for `capacity` entries before its slab allocates again.
    pub(crate) fn with_capacity(capacity: usize) -> Wheel<T> {
        Wheel {
            elapsed: 0,
            levels: [Level::EMPTY; LEVELS],
            processing: None,
            horizon_min: NEVER,
            slab: Slab::with_capacity(LISTS, capacity),
        }
    }

    /// Entries in the wheel (counting one taken out by `pop_due` and not yet taken).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }

    /// The tick the wheel has advanced to.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Files `value` to fire at its deadline. A deadline at or before `elapsed` fires on the
    /// next `poll`.
    ///
    /// # Panics
    ///
    /// If the wheel holds its [`limit`](Wheel::limit) already: for a caller that keeps below
    /// it (`LocalWheel`, 2²⁸ timers at most). The shard, which cannot, uses `try_insert`.
    #[inline]
    pub(crate) fn insert(&mut self, value: T) -> Key {
        match self.try_insert(value) {
            Ok(key) => key,
            Err(_) => panic!("a wheel holds at most {} timers", self.limit()),
        }
    }

    /// [`Wheel::insert`], or the value handed back if the wheel holds its
    /// [`limit`](Wheel::limit) already.
    #[inline]
    pub(crate) fn try_insert(&mut self, value: T) -> Result<Key, T> {
        let deadline = value.deadline().min(NEVER);
        let key = self.slab.alloc(value)?;
        self.place_at(key, deadline);
        Ok(Key(key))
    }

    /// The most entries the wheel holds: 2³² less its lists (the slab's keys are `u32`).
    pub(crate) fn limit(&self) -> usize {
        self.slab.limit()
    }

    /// A wheel that holds at most `limit` entries, for tests of what happens at the limit.
    #[cfg(any(test, loom))]
    pub(crate) fn with_limit(limit: usize) -> Wheel<T> {
        let mut wheel = Wheel::new();
        wheel.slab.set_limit(limit);
        wheel
    }

    /// Takes an entry out before it fires.
    #[inline]
    pub(crate) fn remove(&mut self, key: Key) -> T {
        self.detach(key.0);
        self.slab.release(key.0)
    }

    /// Files the entry at `key` again by the deadline it reports now, behind every entry
    /// already filed for the same tick: for a deadline that moved, or for an entry handed
    /// out by `pop_due` that its owner keeps.
    pub(crate) fn refile(&mut self, key: Key) {
        self.detach(key.0);
        self.place(key.0);
    }

    /// The value at `key`, if `key` names an entry.
    pub(crate) fn get(&self, key: Key) -> Option<&T> {
        self.slab.get(key.0).and_then(|n| n.value.as_ref())
    }

    /// The value at `key`, if `key` names an entry. Changing its deadline through it takes a
    /// `refile` to move it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        self.slab.get_mut(key.0)
    }

    /// The tick at which `poll` next has work: now (`elapsed`) if something is due, else
    /// the start of the next occupied slot, else the tick at which the horizon list must be
    /// re-filed. `None` if nothing but `NEVER` entries (or nothing) is held.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        if !self.slab.is_empty(READY) || self.processing.is_some() {
            return Some(self.elapsed);
        }
        self.next_slot().map(|(_, _, start)| start).or_else(|| self.horizon_wake())
    }

    /// Advances to tick `now`, appending to `out` the values that fire, in firing order, and
    /// spending at most `budget` steps (a firing or a cascade move each). Returns `true` if
    /// the budget ran out with work left: call again. Ticks before `elapsed` are ignored.
    pub(crate) fn poll(&mut self, now: u64, budget: usize, out: &mut Vec<T>) -> bool {
        let mut steps = 0;
        loop {
            if steps == budget {
                if self.next_deadline().is_some_and(|t| t <= now.max(self.elapsed)) {
                    return true;
                }
                self.elapsed = self.elapsed.max(now);
                return false;
            }
            match self.step(now) {
                Step::Fired(key) => out.push(self.slab.release(key)),
                Step::Moved => {}
                Step::Idle => return false,
            }
            steps += 1;
        }
    }

    /// Advances towards tick `now` until one entry is due, and hands out its key: the entry
    /// is off every list but still allocated, for the caller to [`Wheel::take`] (it fires)
    /// or [`Wheel::refile`] (it stays). `None` once nothing is due at `now`; `elapsed` is
    /// then `now`. Entries come out in the order `poll` would fire them.
    #[inline]
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<Key> {
        // The common case inline: the front of the ready list is due (a mass expiry hands
        // out its entries here, one call each). Anything else takes the full step.
        if let Some(key) = self.slab.front(READY).filter(|&key| self.deadline_of(key) <= self.elapsed) {
            self.slab.pop_front(READY);
            return Some(Key(key));
        }
        self.pop_due_slow(now)
    }

    /// The rest of [`Wheel::pop_due`]: steps (cascades, moves of time, re-filed entries)
    /// until an entry is due, or nothing is due at `now`.
    #[inline(never)]
    fn pop_due_slow(&mut self, now: u64) -> Option<Key> {
        loop {
            match self.step(now) {
                Step::Fired(key) => return Some(Key(key)),
                Step::Moved => {}
                Step::Idle => return None,
            }
        }
    }

    /// Frees the entry `pop_due` handed out, and returns its value.
    #[inline]
    pub(crate) fn take(&mut self, key: Key) -> T {
        self.slab.release(key.0)
    }

    /// After `remove` or `take` freed `key`: never hands that key out again.
    pub(crate) fn retire(&mut self, key: Key) {
        self.slab.retire(key.0);
    }

    /// Takes every value out (for shutdown), in no particular order; the wheel is left empty
    /// at the same `elapsed`.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.levels = [Level::EMPTY; LEVELS];
        self.processing = None;
        self.horizon_min = NEVER;
        self.slab.drain()
    }

    /// One firing or one cascade move, after moving time to the next occupied slot if it is
    /// due (which counts as no step, as re-filing the horizon does not).
    #[inline]
    fn step(&mut self, now: u64) -> Step {
        loop {
            // Already due: fire in FIFO order (unless its deadline moved on since it was
            // filed: then file it again).
            if let Some(key) = self.slab.pop_front(READY) {
                if self.deadline_of(key) > self.elapsed {
                    self.place(key);
                    return Step::Moved;
                }
                return Step::Fired(key);
            }
            // A slot under way: fire what is due, cascade the rest one level down.
            if let Some((level, slot)) = self.processing {
                // Every entry filed with one deadline (a mass expiry, a burst armed at once):
                // the whole list moves at once, in order, to where that deadline goes.
                let common = self.levels[level].common[slot];
                if common != MIXED {
                    self.levels[level].occupied &= !(1 << slot);
                    self.processing = None;
                    self.splice_to(slot_list(level, slot), common);
                    return Step::Moved;
                }
                let key = self.slab.pop_front(slot_list(level, slot)).expect("a slot under way is never empty");
                if self.slab.is_empty(slot_list(level, slot)) {
                    self.levels[level].occupied &= !(1 << slot);
                    self.processing = None;
                }
                let deadline = self.deadline_of(key);
                if deadline <= self.elapsed {
                    return Step::Fired(key);
                }
                let list = self.list_for(deadline);
                // A cascade moves an entry off the slot under way: down a level, or up if its
                // deadline moved on, never back onto it, where the next step would meet it at
                // the same tick again, forever. A debug build checks it, so a wrong level
                // (`level_for`, `slot_for`) fails at once instead of hanging its caller.
                debug_assert_ne!(list, slot_list(level, slot), "an entry cascaded back onto its own slot");
                self.slab.push_back(list, key);
                return Step::Moved;
            }
            // Move time to the next occupied slot if it is due, and start on it.
            match self.next_slot() {
                Some((level, slot, start)) if start <= now => {
                    self.elapsed = start;
                    self.processing = Some((level, slot));
                    continue;
                }
                Some(_) => {}
                None => {
                    if let Some(wake) = self.horizon_wake().filter(|&t| t <= now) {
                        self.elapsed = wake;
                        self.refile_horizon();
                        continue;
                    }
                }
            }
            // Nothing is due before `now`: every occupied slot starts after it.
            self.elapsed = self.elapsed.max(now);
            return Step::Idle;
        }
    }

    /// Takes a node off its list, clearing its slot's bit if that emptied it.
    #[inline]
    fn detach(&mut self, key: u32) {
        if let Some(list) = self.slab.unlink(key).filter(|&l| l < READY) {
            let (level, slot) = (list as usize / SLOTS_PER_LEVEL, list as usize % SLOTS_PER_LEVEL);
            self.levels[level].occupied &= !(1 << slot);
            if self.processing == Some((level, slot)) {
                self.processing = None;
            }
        }
    }

    /// Files a node that is on no list, by its deadline now.
    #[inline]
    fn place(&mut self, key: u32) {
        self.place_at(key, self.deadline_of(key));
    }

    /// [`Wheel::place`], given the deadline the entry at `key` reports.
    #[inline]
    fn place_at(&mut self, key: u32, deadline: u64) {
        let list = match self.processing {
            // Due now, or belongs in the slot being worked through: join its tail, behind
            // every older entry for the same tick.
            Some((level, slot)) if deadline <= self.elapsed || self.in_processing_range(deadline, level) => {
                self.note_deadline(level, slot, deadline);
                slot_list(level, slot)
            }
            _ => self.list_for(deadline),
        };
        // One copy of the push where this is inlined (the arm path), whichever the list.
        self.slab.push_back(list, key);
    }

    /// The deadline the entry at `key` reports now.
    #[inline]
    fn deadline_of(&self, key: u32) -> u64 {
        self.slab.node(key).value.as_ref().map_or(NEVER, T::deadline).min(NEVER)
    }

    /// Whether `deadline` falls in the span of the slot under way at `level`.
    fn in_processing_range(&self, deadline: u64, level: usize) -> bool {
        let span_bits = SLOT_BITS * (level as u32 + 1);
        level > 0 && deadline >> (span_bits - SLOT_BITS) == self.elapsed >> (span_bits - SLOT_BITS)
    }

    /// Puts a node on the list its deadline calls for, relative to `elapsed`.
    #[inline(always)]
    fn file(&mut self, key: u32) {
        self.file_at(key, self.deadline_of(key));
    }

    /// [`Wheel::file`], given the deadline the entry at `key` reports.
    #[inline(always)]
    fn file_at(&mut self, key: u32, deadline: u64) {
        let list = self.list_for(deadline);
        self.slab.push_back(list, key);
    }

    /// The list [`Wheel::file_at`] puts an entry with `deadline` on, its slot marked
    /// occupied by it.
    #[inline(always)]
    fn list_for(&mut self, deadline: u64) -> ListId {
        if deadline <= self.elapsed {
            READY
        } else if deadline == NEVER {
            NEVER_LIST
        } else {
            let level = level_for(self.elapsed, deadline);
            if level >= LEVELS {
                self.horizon_min = self.horizon_min.min(deadline);
                HORIZON
            } else {
                let slot = slot_for(deadline, level);
                self.note_deadline(level, slot, deadline);
                slot_list(level, slot)
            }
        }
    }

    /// Marks slot `(level, slot)` occupied by an entry filed with `deadline`.
    #[inline]
    fn note_deadline(&mut self, level: usize, slot: usize, deadline: u64) {
        let lvl = &mut self.levels[level];
        if lvl.occupied & (1 << slot) == 0 {
            lvl.occupied |= 1 << slot;
            lvl.common[slot] = deadline;
        } else if lvl.common[slot] != deadline {
            lvl.common[slot] = MIXED;
        }
    }

    /// Moves the whole list `from`, whose entries were all filed with `deadline`, to where
    /// `file` would put an entry with that deadline now.
    fn splice_to(&mut self, from: ListId, deadline: u64) {
        let level = level_for(self.elapsed, deadline);
        if deadline <= self.elapsed {
            self.slab.splice(from, READY);
        } else if level < LEVELS {
            let slot = slot_for(deadline, level);
            // As in `step`'s cascade: a list never moves back onto itself.
            debug_assert_ne!(slot_list(level, slot), from, "a slot's list spliced back onto itself");
            self.slab.splice(from, slot_list(level, slot));
            self.note_deadline(level, slot, deadline);
        } else {
            // Beyond the levels (a slot never holds such a deadline; for completeness).
            self.horizon_min = self.horizon_min.min(deadline);
            self.slab.splice(from, HORIZON);
        }
    }

    /// The first occupied slot at or after `elapsed`: `(level, slot, start tick)`. Lower
    /// levels always come first: level `L` only holds deadlines inside `elapsed`'s current
    /// level-`L+1` block, which ends before any slot of level `L+1` starts.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        self.levels.iter().enumerate().find_map(|(level, lvl)| {
            let shift = SLOT_BITS * level as u32;
            let here = slot_for(self.elapsed, level);
            debug_assert_eq!(lvl.occupied & ((1u64 << here) - 1), 0, "a slot behind elapsed is occupied");
            let ahead = lvl.occupied & (u64::MAX << here);
            (ahead != 0).then(|| {
                let slot = ahead.trailing_zeros() as usize;
                let block = self.elapsed >> (shift + SLOT_BITS) << (shift + SLOT_BITS);
                (level, slot, block + ((slot as u64) << shift))
            })
        })
    }

    /// The tick at which the earliest horizon entry comes within the levels' range: the
    /// start of its top-level block.
    fn horizon_wake(&self) -> Option<u64> {
        (!self.slab.is_empty(HORIZON)).then_some(self.horizon_min >> HORIZON_BITS << HORIZON_BITS)
    }

    /// Re-files the horizon list after `elapsed` moved; entries still out of range stay.
    fn refile_horizon(&mut self) {
        // Detach the whole list first (its entries may go straight back on it).
        let mut taken = Vec::new();
        while let Some(key) = self.slab.pop_front(HORIZON) {
            taken.push(key);
        }
        self.horizon_min = NEVER;
        for key in taken {
            self.file(key);
        }
    }
}

impl<T: Timed> Default for Wheel<T> {
    fn default() -> Self {
        Wheel::new()
    }
}
