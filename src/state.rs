//! The state word: one `AtomicU64` per timeout that holds its fate, its deadline, and
//! whether its shard has filed it in the wheel.
//!
//! ```text
//!  63                                            3   2   1  0
//! ┌──────────────────────────────────────────────┬───┬──────┐
//! │ deadline, in ticks since the service started │ L │ st   │   st: 0 PENDING, 1 CANCELLED, 2 EXPIRED
//! └──────────────────────────────────────────────┴───┴──────┘   L:  LINKED, filed in the wheel
//!
//!            reset (any thread): PENDING(d) → PENDING(d')
//!                    ┌──────┐
//!                    ▼      │
//!   schedule ──▶ PENDING(d) ┴──cancel (any thread)──────────▶ CANCELLED   (final)
//!                    │
//!                    └──expire (owning shard, d ≤ now)──────▶ EXPIRED     (final)
//! ```
//!
//! Because state, deadline and the LINKED flag share a word, every transition is one
//! read-modify-write, and the races of `docs/protocols.md` §1 are decided by which lands
//! first:
//!
//! - cancel ∥ expire: exactly one CAS leaves PENDING; the winner alone owns the task.
//! - reset ∥ expire: the shard's CAS expects the deadline it read; a reset that lands first
//!   makes that CAS fail, and the shard re-reads the later deadline and files it again.
//! - cancel ∥ link: the shard sets LINKED with a `fetch_or` as it files the entry. A cancel
//!   that lands first is seen by the shard, which then does not file it; a cancel that lands
//!   after sees LINKED and sends the unlink notice. So an entry cancelled before its shard
//!   got to it costs no notice at all, and a filed one always gets one.
//! - CANCELLED and EXPIRED are final: no method here moves a timeout out of them.
//!
//! Orderings: the task itself needs none from this word. It is stored before the entry is
//! shared, and every thread that can reach the entry got it through a hand-over that already
//! orders that store (the mailbox, a handle moved or cloned to another thread); loom agrees
//! (mutation M14 in `loom-tests/README.md` weakens the expiry CAS to `Relaxed` and no model
//! fails). The transitions are `AcqRel` and the loads `Acquire` for the user: a thread that
//! sees a timeout `Cancelled` or `Expired` through `Timeout::state` also sees what the thread
//! that made the transition did before it (a canceller's writes before `cancel()`, say).

use crate::sync::{AtomicU64, Ordering};

/// The state bits of the word.
const STATE_MASK: u64 = 0b11;
const PENDING: u64 = 0;
const CANCELLED: u64 = 1;
const EXPIRED: u64 = 2;
/// Set by the owning shard when it files the entry in its wheel.
const LINKED: u64 = 0b100;
/// The deadline sits above the state bits and the LINKED flag.
const DEADLINE_SHIFT: u32 = 3;

/// The largest deadline the word can hold; it stands for "never" (`Duration::MAX`, or a
/// deadline so far out that its tick count does not fit: 2⁶¹ ticks, 73,000 years at the
/// smallest tick). A timeout at `NEVER` stays pending until it is cancelled or the service
/// stops.
pub(crate) const NEVER: u64 = u64::MAX >> DEADLINE_SHIFT;

/// A decoded state word (the LINKED flag aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Pending { deadline: u64 },
    Cancelled { deadline: u64 },
    Expired { deadline: u64 },
}

impl State {
    fn decode(word: u64) -> State {
        let deadline = word >> DEADLINE_SHIFT;
        match word & STATE_MASK {
            PENDING => State::Pending { deadline },
            CANCELLED => State::Cancelled { deadline },
            EXPIRED => State::Expired { deadline },
            _ => unreachable!("state bits 0b11 are never written"),
        }
    }

    /// The last deadline the timeout had, whatever its state.
    pub(crate) fn deadline(self) -> u64 {
        match self {
            State::Pending { deadline } | State::Cancelled { deadline } | State::Expired { deadline } => deadline,
        }
    }
}

fn pack(state: u64, deadline: u64) -> u64 {
    debug_assert!(deadline <= NEVER);
    (deadline << DEADLINE_SHIFT) | state
}

/// What a reset did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reset {
    /// The timeout was not pending; nothing changed.
    NotPending,
    /// Moved later (or to the same tick): the entry may stay in its old slot, the shard
    /// files it again when that slot comes due.
    Later,
    /// Moved earlier: the shard must be told so it can file the entry earlier.
    Earlier,
}

/// What a winning cancel found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cancelled {
    /// The shard had filed the entry: it must be told, to take it out of its wheel.
    Linked,
    /// The shard had not filed it yet, and now never will.
    Unlinked,
}

/// One timeout's state word.
#[derive(Debug)]
pub(crate) struct StateCell {
    word: AtomicU64,
}

impl StateCell {
    /// Inline: every arm's new cell (see `TimerService::schedule_routed`).
    #[inline]
    pub(crate) fn new_pending(deadline: u64) -> StateCell {
        StateCell { word: AtomicU64::new(pack(PENDING, deadline.min(NEVER))) }
    }

    pub(crate) fn load(&self) -> State {
        // Acquire: pairs with the AcqRel of the terminal CASes, so an observer of CANCELLED
        // or EXPIRED also observes what the winner did first.
        State::decode(self.word.load(Ordering::Acquire))
    }

    /// PENDING(d) → CANCELLED. `Some` iff this call made the move; then the caller alone owns
    /// the task, and learns whether the shard had filed the entry.
    pub(crate) fn try_cancel(&self) -> Option<Cancelled> {
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            if cur & STATE_MASK != PENDING {
                return None;
            }
            let new = (cur & !STATE_MASK) | CANCELLED;
            // AcqRel on success / Acquire on failure: see the module docs.
            match self.word.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if cur & LINKED != 0 => return Some(Cancelled::Linked),
                Ok(_) => return Some(Cancelled::Unlinked),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Sets LINKED, for the owning shard as it files the entry. `true` iff this call linked a
    /// pending entry: `false` if a cancel came first (the entry must not be filed) or if the
    /// entry was already linked (a second hand-over of an entry the shard already filed: a
    /// staged entry that an earlier reset's refile notice filed first, see `stage.rs`).
    pub(crate) fn try_link(&self) -> bool {
        // AcqRel: the flag publishes nothing, but as a read-modify-write it is ordered with
        // the cancel's CAS on the same word, which is all the cancel ∥ link race needs.
        let prev = self.word.fetch_or(LINKED, Ordering::AcqRel);
        prev & STATE_MASK == PENDING && prev & LINKED == 0
    }

    /// Whether the entry is pending and not yet filed: what a stage must still hand to its
    /// shard. A stale answer is harmless: a cancel that lands after it only means the shard
    /// drops the entry itself, and LINKED is only ever set by the shard.
    pub(crate) fn needs_filing(&self) -> bool {
        // Relaxed: a hint (see above); the shard's `try_link` decides.
        self.word.load(Ordering::Relaxed) & (STATE_MASK | LINKED) == PENDING
    }

    /// PENDING(deadline), filed → EXPIRED, for the owning shard once `deadline ≤ now`. Fails
    /// if the word moved (a cancel, or a reset to another deadline): the shard then re-reads.
    pub(crate) fn try_expire(&self, deadline: u64) -> bool {
        let cur = pack(PENDING, deadline) | LINKED;
        // A strong CAS: a spurious failure would send the shard round its re-read loop for
        // nothing. AcqRel/Acquire: see the module docs.
        self.word.compare_exchange(cur, pack(EXPIRED, deadline), Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// PENDING(d) → PENDING(new), keeping the LINKED flag. Says whether the new deadline is
    /// earlier than the old.
    ///
    /// A reset to the deadline the word already holds writes nothing: it takes effect at the
    /// load that saw it (the word was PENDING at that deadline then, which is all a reset
    /// asks). The idle timeout of a busy connection is reset to the same tick many times per
    /// tick, and each such reset is a load instead of a compare-and-swap that would take the
    /// line exclusive.
    pub(crate) fn try_reset(&self, new: u64) -> Reset {
        let new = new.min(NEVER);
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            if cur & STATE_MASK != PENDING {
                return Reset::NotPending;
            }
            let old = cur >> DEADLINE_SHIFT;
            if old == new {
                return Reset::Later;
            }
            let next = pack(PENDING, new) | (cur & LINKED);
            // AcqRel/Acquire: a reset publishes nothing but the word itself, but it must
            // read-modify-write the latest value, and the release lets the shard's Acquire
            // re-read see a consistent word.
            match self.word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return if new < old { Reset::Earlier } else { Reset::Later },
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A slot's word in the embedded wheel (`local/`): the generation of the slot's timer, its
/// state, and the sequence number of the last remote reset of it.
///
/// ```text
///  63             32 31                           2 1  0
/// ┌────────────────┬──────────────────────────────┬─────┐
/// │ generation     │ remote reset sequence        │ st  │   st: 0 VACANT, 1 PENDING,
/// └────────────────┴──────────────────────────────┴─────┘       2 CANCELLED (by a remote)
///
///   owner arm: VACANT(g) ──store──▶ PENDING(g, 0)
///   owner cancel / expiry: PENDING(g, s) ──▶ VACANT(g+1)                 (one CAS decides;
///                          a load and a store while no remote has ever existed)
///   remote cancel: PENDING(g, s) ──CAS──▶ CANCELLED(g, s) ──owner, later──▶ VACANT(g+1)
///   remote reset: PENDING(g, s) ──CAS──▶ PENDING(g, s+1); its ticket s+1 travels with
///                 its message
/// ```
///
/// Why not [`StateCell`]: a service timeout's handle owns its entry, so its word can spend
/// 61 bits on the deadline and a reset is a CAS alone. A [`TimerKey`](crate::TimerKey) names
/// a *slot*, reused by later timers, so every remote CAS must check the generation in the
/// same word, which leaves no room for a deadline. The deadline stays in the owner's node;
/// a remote reset travels as a message, numbered here: its CAS takes the next sequence
/// number, its *ticket*, which orders it against every other reset of the timer (the CASes
/// on one word are totally ordered). The owner remembers the ticket of the reset in effect
/// (the last remote one it applied, or the sequence it read when it reset the timer
/// itself, which supersedes every remote reset made before); a message whose ticket is not
/// newer changes nothing, so the last reset that returned `true` wins, whichever side made
/// it. The owner's expiry CAS expects the word's sequence to equal the ticket in effect: a
/// newer remote reset still on its way makes it fail, so a timer whose reset returned
/// `true` never fires at the deadline it was moved from. Expiry and the owner's cancel go
/// straight to `VACANT(g+1)` whatever the sequence (the owner's cancel wins over resets in
/// flight): the slot is free again in the same CAS, and every key of generation `g` is
/// stale from then on.
///
/// The sequence has 30 bits and wraps; tickets are compared modulo 2³⁰
/// ([`SlotWord::is_newer`]), which is exact while fewer than 2²⁹ remote resets of one timer
/// are in flight at once (each holds a queued message: tens of gibibytes).
///
/// The owner uses the `*_exclusive` forms (a load and a store, no read-modify-write) while no
/// [`RemoteWheel`](crate::RemoteWheel) has ever existed, since then no other thread can
/// reach the word; the CAS forms once one has.
///
/// Orderings: the word publishes no data (a payload never crosses threads through it: a
/// remote cancel leaves it for the owner to drop; a reset's deadline travels in its
/// message, which the queue publishes), so only the modification order of the one word
/// matters, which every ordering keeps. The CASes are still `AcqRel` and the loads
/// `Acquire`, as [`StateCell`]'s, so that a thread that saw a remote cancel lose also sees
/// what the owner did before the expiry; on x86 they cost the same as `Relaxed`.
#[derive(Debug)]
pub(crate) struct SlotWord {
    word: AtomicU64,
}

/// What the owner's expiry CAS found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotExpiry {
    /// The timer fired: the slot is vacant, at the next generation.
    Fired,
    /// A remote cancel won: the owner drops the payload and calls [`SlotWord::clear`].
    Cancelled,
    /// A remote reset newer than the one in effect is on its way: the timer must wait for it.
    ResetInFlight,
    /// The word does not name this generation's pending timer (a stale key).
    Stale,
}

impl SlotWord {
    const VACANT: u64 = 0;
    const PENDING: u64 = 1;
    const CANCELLED: u64 = 2;
    const STATE_MASK: u64 = 0b11;
    const SEQ_SHIFT: u32 = 2;
    /// The largest reset sequence number; the next one is 0.
    pub(crate) const SEQ_MAX: u32 = (1 << 30) - 1;
    const SEQ_MASK: u64 = (Self::SEQ_MAX as u64) << Self::SEQ_SHIFT;
    const GEN_SHIFT: u32 = 32;

    #[inline]
    fn pack(generation: u32, state: u64) -> u64 {
        (u64::from(generation) << Self::GEN_SHIFT) | state
    }

    #[inline]
    fn generation_of(word: u64) -> u32 {
        (word >> Self::GEN_SHIFT) as u32
    }

    #[inline]
    fn seq_of(word: u64) -> u32 {
        ((word & Self::SEQ_MASK) >> Self::SEQ_SHIFT) as u32
    }

    /// Whether reset ticket `ticket` was made after the reset of ticket `than` (modulo
    /// 2³⁰: see the type's docs).
    #[inline]
    pub(crate) fn is_newer(ticket: u32, than: u32) -> bool {
        let ahead = ticket.wrapping_sub(than) & Self::SEQ_MAX;
        ahead != 0 && ahead <= Self::SEQ_MAX / 2
    }

    /// A vacant slot whose next timer gets `generation`.
    #[inline]
    pub(crate) fn vacant(generation: u32) -> SlotWord {
        SlotWord { word: AtomicU64::new(Self::pack(generation, Self::VACANT)) }
    }

    #[inline]
    fn load(&self) -> u64 {
        // Acquire: see the type's docs.
        self.word.load(Ordering::Acquire)
    }

    /// The generation the slot's current (or, if vacant, next) timer has.
    #[inline]
    pub(crate) fn generation(&self) -> u32 {
        Self::generation_of(self.load())
    }

    /// The ticket of the last remote reset of the slot's timer (0: none yet).
    #[inline]
    pub(crate) fn reset_seq(&self) -> u32 {
        Self::seq_of(self.load())
    }

    /// Whether the slot holds generation `generation`'s timer, pending (not cancelled by a
    /// remote).
    #[inline]
    pub(crate) fn is_pending(&self, generation: u32) -> bool {
        self.load() & !Self::SEQ_MASK == Self::pack(generation, Self::PENDING)
    }

    /// Whether a remote cancel won generation `generation`'s timer, which the owner has not
    /// cleared yet.
    #[inline]
    pub(crate) fn is_cancelled(&self, generation: u32) -> bool {
        self.load() & !Self::SEQ_MASK == Self::pack(generation, Self::CANCELLED)
    }

    /// Owner: VACANT(g) → PENDING(g, 0); returns g. A store: no other thread writes a vacant
    /// word (every remote CAS expects PENDING).
    #[inline]
    pub(crate) fn arm(&self) -> u32 {
        debug_assert_eq!(self.load() & Self::STATE_MASK, Self::VACANT, "armed a slot that is not vacant");
        let generation = self.generation();
        // Release: see the type's docs (a remote that got the key got it after this).
        self.word.store(Self::pack(generation, Self::PENDING), Ordering::Release);
        generation
    }

    /// Owner, no remote can exist, and the owner has just seen the word `PENDING(g)` (with
    /// [`is_pending`](SlotWord::is_pending)): → VACANT(g+1), by one store.
    #[inline]
    pub(crate) fn vacate_exclusive(&self, generation: u32) {
        debug_assert!(self.is_pending(generation), "vacated a slot that is not pending");
        // Relaxed: no other thread can reach the word (see the type's docs).
        self.word.store(Self::pack(generation.wrapping_add(1), Self::VACANT), Ordering::Relaxed);
    }

    /// Owner, no remote can exist: the pending timer fires, PENDING(g) → VACANT(g+1) by a
    /// load and a store; returns g. The word is PENDING: the owner fires only filed timers,
    /// and only a remote makes a filed timer's word anything else.
    #[inline]
    pub(crate) fn fire_exclusive(&self) -> u32 {
        let cur = self.load();
        debug_assert_eq!(cur & Self::STATE_MASK, Self::PENDING, "fired a slot that is not pending");
        let generation = Self::generation_of(cur);
        // Relaxed: no other thread can reach the word (see the type's docs).
        self.word.store(Self::pack(generation.wrapping_add(1), Self::VACANT), Ordering::Relaxed);
        generation
    }

    /// Owner: PENDING(g, any sequence) → VACANT(g+1), for a cancel: `true` iff this call
    /// took the timer (a remote cancel did not come first). Resets in flight are left to
    /// find their generation gone: the owner's cancel wins over them.
    #[inline]
    pub(crate) fn try_cancel_owned(&self, generation: u32) -> bool {
        let mut cur = self.load();
        loop {
            if cur & !Self::SEQ_MASK != Self::pack(generation, Self::PENDING) {
                return false;
            }
            let new = Self::pack(generation.wrapping_add(1), Self::VACANT);
            // AcqRel/Acquire: see the type's docs.
            match self.word.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Owner: PENDING(g, `in_effect`) → VACANT(g+1), for an expiry, with one strong CAS:
    /// `in_effect` is the ticket of the reset the owner has in effect (0: none), and a word
    /// whose sequence moved past it has a newer remote reset in flight.
    #[inline]
    pub(crate) fn try_expire(&self, generation: u32, in_effect: u32) -> SlotExpiry {
        let pending = Self::pack(generation, Self::PENDING);
        let expected = pending | (u64::from(in_effect & Self::SEQ_MAX) << Self::SEQ_SHIFT);
        let vacant = Self::pack(generation.wrapping_add(1), Self::VACANT);
        // AcqRel/Acquire: see the type's docs. Strong: a spurious failure would be read as
        // a reset in flight and delay the timer by a tick.
        match self.word.compare_exchange(expected, vacant, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => SlotExpiry::Fired,
            Err(w) if w & !Self::SEQ_MASK == pending => SlotExpiry::ResetInFlight,
            Err(w) if w & !Self::SEQ_MASK == Self::pack(generation, Self::CANCELLED) => SlotExpiry::Cancelled,
            Err(_) => SlotExpiry::Stale,
        }
    }

    /// Owner: CANCELLED(g) → VACANT(g+1), once it has dropped the payload. A store: no other
    /// thread writes a cancelled word.
    #[inline]
    pub(crate) fn clear(&self, generation: u32) {
        debug_assert!(self.is_cancelled(generation));
        // Release: see the type's docs.
        self.word.store(Self::pack(generation.wrapping_add(1), Self::VACANT), Ordering::Release);
    }

    /// Remote: PENDING(g, r) → CANCELLED(g, r). `true` iff this call cancelled the timer:
    /// it will never fire, and the owner drops its payload.
    #[inline]
    pub(crate) fn try_cancel_remote(&self, generation: u32) -> bool {
        let mut cur = self.load();
        loop {
            if cur & !Self::SEQ_MASK != Self::pack(generation, Self::PENDING) {
                return false;
            }
            let new = (cur & !Self::STATE_MASK) | Self::CANCELLED;
            // AcqRel/Acquire: see the type's docs.
            match self.word.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Remote: PENDING(g, s) → PENDING(g, s+1). `Some(ticket)` (s+1, modulo 2³⁰) iff the
    /// timer was pending: it will not fire before the owner applies the reset's message, or
    /// a later reset supersedes it.
    #[inline]
    pub(crate) fn try_reset_remote(&self, generation: u32) -> Option<u32> {
        let mut cur = self.load();
        loop {
            if cur & !Self::SEQ_MASK != Self::pack(generation, Self::PENDING) {
                return None;
            }
            let ticket = Self::seq_of(cur).wrapping_add(1) & Self::SEQ_MAX;
            let new = (cur & !Self::SEQ_MASK) | (u64::from(ticket) << Self::SEQ_SHIFT);
            // AcqRel/Acquire: see the type's docs.
            match self.word.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(ticket),
                Err(actual) => cur = actual,
            }
        }
    }

    #[cfg(test)]
    #[inline]
    pub(crate) fn set_generation_for_test(&self, generation: u32) {
        self.word.store(Self::pack(generation, Self::VACANT), Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips_every_state_and_extreme_deadlines() {
        for deadline in [0, 1, 63, 64, 1 << 40, NEVER - 1, NEVER] {
            for (bits, want) in [
                (PENDING, State::Pending { deadline }),
                (CANCELLED, State::Cancelled { deadline }),
                (EXPIRED, State::Expired { deadline }),
            ] {
                assert_eq!(State::decode(pack(bits, deadline)), want);
                assert_eq!(State::decode(pack(bits, deadline) | LINKED), want, "LINKED is not part of the state");
                assert_eq!(want.deadline(), deadline);
            }
        }
    }

    #[test]
    fn cancel_wins_once_and_is_final() {
        let s = StateCell::new_pending(10);
        assert_eq!(s.try_cancel(), Some(Cancelled::Unlinked));
        assert_eq!(s.try_cancel(), None);
        assert!(!s.try_expire(10));
        assert_eq!(s.try_reset(5), Reset::NotPending);
        assert!(!s.try_link(), "a cancelled entry must not be filed");
        assert!(!s.needs_filing(), "nor handed to its shard");
        assert_eq!(s.load(), State::Cancelled { deadline: 10 });
    }

    #[test]
    fn a_cancel_after_linking_says_so() {
        let s = StateCell::new_pending(10);
        assert!(s.needs_filing());
        assert!(s.try_link());
        assert!(!s.needs_filing());
        assert!(!s.try_link(), "linked once: a second hand-over is not filed again");
        assert_eq!(s.try_reset(20), Reset::Later);
        assert_eq!(s.try_cancel(), Some(Cancelled::Linked), "reset keeps LINKED");
    }

    #[test]
    fn expire_needs_the_current_deadline_and_is_final() {
        let s = StateCell::new_pending(10);
        assert!(s.try_link());
        assert_eq!(s.try_reset(20), Reset::Later);
        assert!(!s.try_expire(10), "a reset moved the deadline; the old one must not expire");
        assert!(s.try_expire(20));
        assert_eq!(s.try_cancel(), None);
        assert_eq!(s.load(), State::Expired { deadline: 20 });
    }

    #[test]
    fn only_a_filed_entry_expires() {
        let s = StateCell::new_pending(10);
        assert!(!s.try_expire(10));
        assert!(s.try_link());
        assert!(s.try_expire(10));
    }

    #[test]
    fn reset_reports_direction_and_clamps_to_never() {
        let s = StateCell::new_pending(10);
        assert_eq!(s.try_reset(10), Reset::Later);
        assert_eq!(s.try_reset(3), Reset::Earlier);
        assert_eq!(s.try_reset(u64::MAX), Reset::Later);
        assert_eq!(s.load(), State::Pending { deadline: NEVER });
        assert_eq!(StateCell::new_pending(u64::MAX).load(), State::Pending { deadline: NEVER });
    }

    #[test]
    fn slot_word_generations_states_and_resets() {
        let w = SlotWord::vacant(u32::MAX);
        let g = w.arm();
        assert_eq!(g, u32::MAX);
        assert!(w.is_pending(g));
        assert_eq!(w.try_reset_remote(g), Some(1));
        assert_eq!(w.try_expire(g, 0), SlotExpiry::ResetInFlight, "a newer reset in flight holds the expiry");
        assert_eq!(w.reset_seq(), 1);
        assert_eq!(w.try_expire(g, 1), SlotExpiry::Fired, "once its ticket is in effect");
        assert_eq!(w.generation(), 0, "the generation wraps");
        assert!(!w.is_pending(g));
        assert!(!w.try_cancel_remote(g), "a stale key cancels nothing");
        assert_eq!(w.try_reset_remote(g), None);
        let g = w.arm();
        assert_eq!(w.reset_seq(), 0, "a new timer starts its sequence again");
        assert!(w.try_cancel_remote(g));
        assert!(!w.try_cancel_owned(g), "exactly one cancel wins");
        assert_eq!(w.try_expire(g, 0), SlotExpiry::Cancelled);
        w.clear(g);
        assert_eq!(w.generation(), 1);
        let g = w.arm();
        assert_eq!(w.try_reset_remote(g), Some(1));
        assert!(w.try_cancel_owned(g), "the owner's cancel wins over resets in flight");
        assert_eq!(w.generation(), 2);
        let g = w.arm();
        w.vacate_exclusive(g);
        assert!(!w.is_pending(g) && w.generation() == g + 1, "vacated, at the next generation");
        // An expiry with a key whose timer is gone finds the word moved on, whatever it is
        // now: vacant, pending or cancelled at a later generation.
        assert_eq!(w.try_expire(g, 0), SlotExpiry::Stale, "vacant at the next generation");
        let next = w.arm();
        assert_eq!(w.try_expire(g, 0), SlotExpiry::Stale, "pending at the next generation");
        assert!(w.try_cancel_remote(next));
        assert_eq!(w.try_expire(g, 0), SlotExpiry::Stale, "cancelled at the next generation");
        assert_eq!(w.try_expire(next, 0), SlotExpiry::Cancelled, "its own key still finds it cancelled");
    }

    #[test]
    fn reset_tickets_compare_modulo_their_width() {
        assert!(SlotWord::is_newer(1, 0));
        assert!(!SlotWord::is_newer(0, 0));
        assert!(!SlotWord::is_newer(0, 1));
        assert!(SlotWord::is_newer(0, SlotWord::SEQ_MAX), "the sequence wraps");
        assert!(SlotWord::is_newer(3, SlotWord::SEQ_MAX - 3));
        assert!(!SlotWord::is_newer(SlotWord::SEQ_MAX, 2));
        let w = SlotWord::vacant(5);
        let g = w.arm();
        w.word.store(SlotWord::pack(g, SlotWord::PENDING) | SlotWord::SEQ_MASK, Ordering::Relaxed);
        assert_eq!(w.try_reset_remote(g), Some(0), "the ticket after the largest is 0");
        assert!(w.is_pending(g));
    }
}
