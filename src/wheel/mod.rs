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
//! Insert and remove are O(1); nodes live in a slab (`slab.rs`) and are reused, so a wheel in
//! steady state does not allocate.
//!
//! # Deadlines that move
//!
//! The wheel does not keep a copy of each entry's deadline: it asks the entry ([`Timed`])
//! whenever it files it, at insertion and at every cascade. A timeout whose deadline was
//! pushed out (a reset, which is only a CAS on its state word) is therefore carried straight
//! to its new place at the next cascade, instead of riding down to its old tick first; and a
//! node is 24 bytes, not 32. The ordering guarantees above hold for entries whose deadlines
//! do not move while they wait; one whose deadline moves is ordered by where it is filed.

mod slab;
#[cfg(all(test, not(loom)))]
mod tests;

use slab::{List, ListId, NIL, Slab};

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

/// List ids beyond the level slots.
const READY: ListId = (LEVELS * SLOTS_PER_LEVEL) as ListId;
const HORIZON: ListId = READY + 1;
const NEVER_LIST: ListId = READY + 2;

/// What the wheel holds: anything that can say when it is due.
pub(crate) trait Timed {
    /// The tick the entry is due at now (`NEVER` or more: never).
    fn deadline(&self) -> u64;
}

/// A key to an entry in the wheel, valid until the entry is removed or returned by `poll`.
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

/// One level: 64 FIFO lists and the bitmap of the non-empty ones.
#[derive(Debug)]
struct Level {
    occupied: u64,
    slots: [List; SLOTS_PER_LEVEL],
}

/// A timing wheel holding values of type `T`, each with a deadline in ticks.
#[derive(Debug)]
pub(crate) struct Wheel<T> {
    /// The tick the wheel has advanced to. Every entry on a level has a deadline after it.
    elapsed: u64,
    levels: Box<[Level; LEVELS]>,
    /// Entries already due (inserted with a deadline at or before `elapsed`), FIFO.
    ready: List,
    /// The slot being worked through, if a budget cut its work short: `(level, slot)`.
    processing: Option<(usize, usize)>,
    /// Deadlines beyond the top level, and the earliest among them (`NEVER` if none).
    horizon: List,
    horizon_min: u64,
    /// Deadlines of `NEVER`.
    never: List,
    slab: Slab<T>,
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

impl<T: Timed> Wheel<T> {
    pub(crate) fn new() -> Wheel<T> {
        const EMPTY_LEVEL: Level = Level { occupied: 0, slots: [List::EMPTY; SLOTS_PER_LEVEL] };
        Wheel {
            elapsed: 0,
            levels: Box::new([EMPTY_LEVEL; LEVELS]),
            ready: List::EMPTY,
            processing: None,
            horizon: List::EMPTY,
            horizon_min: NEVER,
            never: List::EMPTY,
            slab: Slab::new(),
        }
    }

    /// Entries in the wheel.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }

    /// The tick the wheel has advanced to.
    #[cfg(test)]
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Files `value` to fire at its deadline. A deadline at or before `elapsed` fires on the
    /// next `poll`.
    pub(crate) fn insert(&mut self, value: T) -> Key {
        let deadline = value.deadline().min(NEVER);
        let key = self.slab.alloc(value);
        match self.processing {
            // Due now, or belongs in the slot being worked through: join its tail, behind
            // every older entry for the same tick.
            Some((level, slot)) if deadline <= self.elapsed || self.in_processing_range(deadline, level) => {
                self.push_slot(level, slot, key);
            }
            _ => self.file(key),
        }
        Key(key)
    }

    /// Takes an entry out before it fires.
    pub(crate) fn remove(&mut self, key: Key) -> T {
        let id = self.slab.node(key.0).list;
        let list = self.list_mut(id);
        let mut taken = *list;
        self.slab.unlink(&mut taken, key.0);
        *self.list_mut(id) = taken;
        if (id as usize) < READY as usize && taken.is_empty() {
            let (level, slot) = (id as usize / SLOTS_PER_LEVEL, id as usize % SLOTS_PER_LEVEL);
            self.levels[level].occupied &= !(1 << slot);
            if self.processing == Some((level, slot)) {
                self.processing = None;
            }
        }
        self.slab.release(key.0)
    }

    /// The value at `key`, if `key` names an entry.
    pub(crate) fn get(&self, key: Key) -> Option<&T> {
        self.slab.get(key.0).and_then(|n| n.value.as_ref())
    }

    /// The tick at which `poll` next has work: now (`elapsed`) if something is due, else
    /// the start of the next occupied slot, else the tick at which the horizon list must be
    /// re-filed. `None` if nothing but `NEVER` entries (or nothing) is held.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        if !self.ready.is_empty() || self.processing.is_some() {
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
            // Already due: fire in FIFO order.
            if let Some(key) = self.slab.pop_front(&mut self.ready) {
                out.push(self.slab.release(key));
                steps += 1;
                continue;
            }
            // A slot under way: fire what is due, cascade the rest one level down.
            if let Some((level, slot)) = self.processing {
                self.step_processing(level, slot, out);
                steps += 1;
                continue;
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
            return false;
        }
    }

    /// Takes every value out (for shutdown), in no particular order; the wheel is left empty
    /// at the same `elapsed`.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        for level in self.levels.iter_mut() {
            level.occupied = 0;
            level.slots = [List::EMPTY; SLOTS_PER_LEVEL];
        }
        self.ready = List::EMPTY;
        self.processing = None;
        self.horizon = List::EMPTY;
        self.horizon_min = NEVER;
        self.never = List::EMPTY;
        self.slab.drain()
    }

    /// One step on the slot under way.
    fn step_processing(&mut self, level: usize, slot: usize, out: &mut Vec<T>) {
        let mut list = self.levels[level].slots[slot];
        let key = self.slab.pop_front(&mut list).expect("a slot under way is never empty");
        self.levels[level].slots[slot] = list;
        if list.is_empty() {
            self.levels[level].occupied &= !(1 << slot);
            self.processing = None;
        }
        if self.deadline_of(key) <= self.elapsed {
            out.push(self.slab.release(key));
        } else {
            self.file(key);
        }
    }

    /// The deadline the entry at `key` reports now.
    fn deadline_of(&self, key: u32) -> u64 {
        self.slab.node(key).value.as_ref().map_or(NEVER, T::deadline).min(NEVER)
    }

    /// Whether `deadline` falls in the span of the slot under way at `level`.
    fn in_processing_range(&self, deadline: u64, level: usize) -> bool {
        let span_bits = SLOT_BITS * (level as u32 + 1);
        level > 0 && deadline >> (span_bits - SLOT_BITS) == self.elapsed >> (span_bits - SLOT_BITS)
    }

    /// Puts a node on the list its deadline calls for, relative to `elapsed`.
    fn file(&mut self, key: u32) {
        let deadline = self.deadline_of(key);
        if deadline <= self.elapsed {
            self.slab.push_back(&mut self.ready, READY, key);
        } else if deadline == NEVER {
            self.slab.push_back(&mut self.never, NEVER_LIST, key);
        } else {
            let level = level_for(self.elapsed, deadline);
            if level >= LEVELS {
                self.horizon_min = self.horizon_min.min(deadline);
                self.slab.push_back(&mut self.horizon, HORIZON, key);
            } else {
                self.push_slot(level, slot_for(deadline, level), key);
            }
        }
    }

    fn push_slot(&mut self, level: usize, slot: usize, key: u32) {
        let id = (level * SLOTS_PER_LEVEL + slot) as ListId;
        let lvl = &mut self.levels[level];
        self.slab.push_back(&mut lvl.slots[slot], id, key);
        lvl.occupied |= 1 << slot;
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
        (!self.horizon.is_empty()).then_some(self.horizon_min >> HORIZON_BITS << HORIZON_BITS)
    }

    /// Re-files the horizon list after `elapsed` moved; entries still out of range stay.
    fn refile_horizon(&mut self) {
        let mut list = std::mem::replace(&mut self.horizon, List::EMPTY);
        self.horizon_min = NEVER;
        while let Some(key) = self.slab.pop_front(&mut list) {
            self.file(key);
        }
    }

    fn list_mut(&mut self, id: ListId) -> &mut List {
        match id {
            READY => &mut self.ready,
            HORIZON => &mut self.horizon,
            NEVER_LIST => &mut self.never,
            slot => &mut self.levels[slot as usize / SLOTS_PER_LEVEL].slots[slot as usize % SLOTS_PER_LEVEL],
        }
    }
}

impl<T: Timed> Default for Wheel<T> {
    fn default() -> Self {
        Wheel::new()
    }
}
