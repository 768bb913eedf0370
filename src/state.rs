//! The state word: one `AtomicU64` per timeout that holds both its fate and its deadline.
//!
//! ```text
//!  63                                               2 1  0
//! ┌─────────────────────────────────────────────────┬────┐
//! │ deadline, in ticks since the service started    │ st │   st: 0 PENDING, 1 CANCELLED, 2 EXPIRED
//! └─────────────────────────────────────────────────┴────┘
//!
//!            reset (any thread): PENDING(d) → PENDING(d')
//!                    ┌──────┐
//!                    ▼      │
//!   schedule ──▶ PENDING(d) ┴──cancel (any thread)──────────▶ CANCELLED   (final)
//!                    │
//!                    └──expire (owning shard, d ≤ now)──────▶ EXPIRED     (final)
//! ```
//!
//! Because state and deadline share a word, every transition is one compare-and-swap, and
//! the races of section 3 of the design are decided by which CAS lands first:
//!
//! - cancel ∥ expire: exactly one CAS leaves PENDING; the winner alone owns the task.
//! - reset ∥ expire: the shard's CAS expects the deadline it read; a reset that lands first
//!   makes that CAS fail, and the shard re-reads the later deadline and files it again.
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
/// The deadline sits above the two state bits.
const DEADLINE_SHIFT: u32 = 2;

/// The largest deadline the word can hold; it stands for "never" (`Duration::MAX`, or a
/// deadline so far out that its tick count does not fit). A timeout at `NEVER` stays
/// pending until it is cancelled or the service stops.
pub(crate) const NEVER: u64 = u64::MAX >> DEADLINE_SHIFT;

/// A decoded state word.
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

/// One timeout's state word.
#[derive(Debug)]
pub(crate) struct StateCell {
    word: AtomicU64,
}

impl StateCell {
    pub(crate) fn new_pending(deadline: u64) -> StateCell {
        StateCell {
            word: AtomicU64::new(pack(PENDING, deadline.min(NEVER))),
        }
    }

    pub(crate) fn load(&self) -> State {
        // Acquire: pairs with the AcqRel of the terminal CASes, so an observer of CANCELLED
        // or EXPIRED also observes what the winner did first.
        State::decode(self.word.load(Ordering::Acquire))
    }

    /// PENDING(d) → CANCELLED. True iff this call made the move; then the caller alone owns
    /// the task.
    pub(crate) fn try_cancel(&self) -> bool {
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            if cur & STATE_MASK != PENDING {
                return false;
            }
            let new = (cur & !STATE_MASK) | CANCELLED;
            // AcqRel on success / Acquire on failure: see the module docs.
            match self
                .word
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// PENDING(deadline) → EXPIRED, for the owning shard once `deadline ≤ now`. Fails if the
    /// word moved (a cancel, or a reset to another deadline): the shard then re-reads it.
    pub(crate) fn try_expire(&self, deadline: u64) -> bool {
        let cur = pack(PENDING, deadline);
        // A strong CAS: a spurious failure would send the shard round its re-read loop for
        // nothing. AcqRel/Acquire: see the module docs.
        self.word
            .compare_exchange(cur, pack(EXPIRED, deadline), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// PENDING(d) → PENDING(new). Says whether the new deadline is earlier than the old.
    pub(crate) fn try_reset(&self, new: u64) -> Reset {
        let new = new.min(NEVER);
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            if cur & STATE_MASK != PENDING {
                return Reset::NotPending;
            }
            let old = cur >> DEADLINE_SHIFT;
            // AcqRel/Acquire: a reset publishes nothing but the word itself, but it must
            // read-modify-write the latest value, and the release lets the shard's Acquire
            // re-read see a consistent word.
            match self
                .word
                .compare_exchange_weak(cur, pack(PENDING, new), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return if new < old { Reset::Earlier } else { Reset::Later },
                Err(actual) => cur = actual,
            }
        }
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
                assert_eq!(want.deadline(), deadline);
            }
        }
    }

    #[test]
    fn cancel_wins_once_and_is_final() {
        let s = StateCell::new_pending(10);
        assert!(s.try_cancel());
        assert!(!s.try_cancel());
        assert!(!s.try_expire(10));
        assert_eq!(s.try_reset(5), Reset::NotPending);
        assert_eq!(s.load(), State::Cancelled { deadline: 10 });
    }

    #[test]
    fn expire_needs_the_current_deadline_and_is_final() {
        let s = StateCell::new_pending(10);
        assert_eq!(s.try_reset(20), Reset::Later);
        assert!(
            !s.try_expire(10),
            "a reset moved the deadline; the old one must not expire"
        );
        assert!(s.try_expire(20));
        assert!(!s.try_cancel());
        assert_eq!(s.load(), State::Expired { deadline: 20 });
    }

    #[test]
    fn reset_reports_direction_and_clamps_to_never() {
        let s = StateCell::new_pending(10);
        assert_eq!(s.try_reset(10), Reset::Later);
        assert_eq!(s.try_reset(3), Reset::Earlier);
        assert_eq!(s.try_reset(u64::MAX), Reset::Later);
        assert_eq!(s.load(), State::Pending { deadline: NEVER });
        assert_eq!(
            StateCell::new_pending(u64::MAX).load(),
            State::Pending { deadline: NEVER }
        );
    }
}
