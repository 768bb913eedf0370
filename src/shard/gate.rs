//! The wheel's limit as a refusal a producer sees: the FULL bit, and the marks at which the
//! driver moves it.
//!
//! A shard's wheel holds at most [`Wheel::limit`](crate::wheel::Wheel::limit) entries
//! (2³² − 388: the slab's keys are `u32`; ~128 GB of timeouts). A schedule past it must be
//! refused with `ScheduleError::Rejected(task)`, the task handed back. But only the driver
//! knows the wheel's length, and most arms reach it later, through a stage or the mailbox,
//! after their `schedule` has returned `Ok`. So the driver publishes the limit ahead of
//! time, in the one word every arm reads already:
//!
//! ```text
//!  producer (every schedule)                  driver
//!  g = mailbox.gate()      (was: is_closed)   file an entry; len ≥ high → flags |= FULL
//!  g == OPEN → arm                            each turn: FULL and len ≤ low → flags &= !FULL
//!  else (cold): CLOSED → Shutdown/ShardFailed
//!               FULL   → Rejected(task), wake a sleeping driver
//! ```
//!
//! - **No cost on the arm path.** The check was `is_closed()`, a load of the mailbox's flag
//!   word; it is now "that word is not zero", the same load and the same branch. Only the
//!   cold path that follows a non-zero word tells CLOSED from FULL. (A separate word cost
//!   every arm-and-cancel pair 10 instructions: callgrind over `examples/arm_cancel_loop.rs`.)
//! - **Marks, with headroom and hysteresis.** FULL is set when an insert brings the wheel to
//!   `high`, a sixteenth of the limit below it, so that what was already in flight when the
//!   mark was crossed (staged on producers' stages, in the mail, read the gate open a moment
//!   before) still fits; it is cleared at the end of a turn that leaves the wheel at `low`, a
//!   further sixteenth below, so the bit does not flap with every cancel and arm at the mark.
//! - **Room comes back.** A cancel of a filed timeout is an unlink notice, which wakes no
//!   sleeping shard; a refusal does (`Mailbox::wake_for_room`), so the driver reads those
//!   notices and clears FULL once the wheel is at `low`. A schedule refused while the notices
//!   are unread is refused (`Rejected`: try again later); one after the driver's next turn
//!   is not.
//! - **The backstop.** An entry that reaches the driver with the wheel at its very limit is
//!   still refused there (`Local::refuse`): its `schedule` returned `Ok` long ago, so its
//!   timeout is cancelled (it reads `Cancelled`, counted as cancelled and as rejected) and its
//!   task dropped, as a cancel drops it. That happens only if more than the headroom (a
//!   sixteenth of the limit, about 268 million on a real wheel) arms were in flight past the
//!   mark: had read the gate open before FULL was visible to their producer, and were filed
//!   after the wheel reached `high`. The driver's own arms (a task scheduling on its own
//!   shard, a series' re-arm on the shard) read the bit it set itself, in program order, and
//!   never reach the backstop.
//!
//! The bits move only by `fetch_or` and `fetch_and` of one bit each (`mailbox.rs`), so
//! clearing FULL never clears CLOSED, and `close`'s SeqCst publication of CLOSED, with the
//! fences of the close handshake, is as it was. Loom: `loom-tests/gate.rs`.

use crate::error::ScheduleError;
use crate::mailbox::{CLOSED, DRAINING, FULL, Mailbox};
use crate::shard::{Shard, driver};

/// The headroom below the limit, and the hysteresis below that, as a fraction of the limit.
const MARGIN_DIVISOR: usize = 16;

/// The marks for a wheel of `limit` entries: `(high, low)`. FULL is set at `high`, a
/// sixteenth below the limit (at least one), and cleared at `low`, a sixteenth below `high`.
pub(crate) fn marks(limit: usize) -> (usize, usize) {
    let margin = (limit / MARGIN_DIVISOR).max(1);
    let high = limit.saturating_sub(margin);
    (high, high.saturating_sub(margin))
}

/// What the gate refuses a schedule with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The mailbox is closed, or draining: `Shutdown` or `ShardFailed`
    /// (`Shard::closed_error`).
    Closed,
    /// The wheel is at its high-water mark: `Rejected`.
    Full,
}

impl Refusal {
    /// The error that hands `task` back. Out of line and cold, as `refusal`.
    #[cold]
    #[inline(never)]
    pub(crate) fn with<T>(self, shard: &Shard, task: T) -> ScheduleError<T> {
        match self {
            Refusal::Closed => shard.closed_error(task),
            Refusal::Full => ScheduleError::Rejected(task),
        }
    }
}

/// The arm path's cold half (`TimerService::schedule_routed`): the mailbox's flags read
/// `gate`, not zero. `None`: go on and arm. It takes no task, so that the task stays where
/// the arm path keeps it (a task passed through it and back cost a `Sleep` 5 instructions:
/// callgrind over `examples/sleep_loop.rs`).
///
/// CLOSED: the service stopped or the shard failed; but a task running on this shard's own
/// thread in its last turn (a series' run re-arming as `stop()` closes the shard) still files
/// straight into the wheel: the final drain that follows hands it back in `stop()`'s list,
/// so nothing is refused that `stop()` could return. DRAINING (`stop_gracefully`): every
/// schedule is refused, the shard's own thread's too (a series' next run ends the series),
/// as `Shutdown`, before FULL is looked at: a service stopping while full is stopping.
/// FULL: `Rejected(task)`, counted in
/// `Stats::rejected`, and a sleeping driver is woken to read the cancels that may have made
/// room since (`Mailbox::wake_for_room`).
#[cold]
#[inline(never)]
pub(crate) fn refusal(shard: &Shard, gate: u8, maybe_driver: bool) -> Option<Refusal> {
    if gate & CLOSED != 0 && !(maybe_driver && driver::drives(shard)) {
        return Some(Refusal::Closed);
    }
    if gate & DRAINING != 0 {
        return Some(Refusal::Closed);
    }
    if gate & FULL != 0 {
        shard.counters.rejected();
        shard.mailbox.wake_for_room();
        return Some(Refusal::Full);
    }
    None
}

/// The driver's side of the gate: where its wheel stands against the marks.
#[derive(Debug)]
pub(crate) struct Gate {
    high: usize,
    low: usize,
    /// The length from which an insert marks the shard FULL: `high` while it is not marked,
    /// `usize::MAX` while it is (so that the per-insert check is one comparison).
    mark_at: usize,
}

impl Gate {
    /// The gate of a wheel of `limit` entries, open.
    pub(crate) fn new(limit: usize) -> Gate {
        let (high, low) = marks(limit);
        Gate { high, low, mark_at: high }
    }

    /// After an insert left the wheel holding `len` entries: marks `mailbox` FULL if that
    /// reached the high-water mark.
    #[inline]
    pub(crate) fn filed(&mut self, len: usize, mailbox: &Mailbox) {
        if len >= self.mark_at {
            self.mark(mailbox);
        }
    }

    #[cold]
    #[inline(never)]
    fn mark(&mut self, mailbox: &Mailbox) {
        mailbox.mark_full();
        self.mark_at = usize::MAX;
    }

    /// Once per turn, with the wheel holding `len` entries: clears FULL if that fell to the
    /// low-water mark.
    #[inline]
    pub(crate) fn turned(&mut self, len: usize, mailbox: &Mailbox) {
        if self.mark_at == usize::MAX && len <= self.low {
            mailbox.clear_full();
            self.mark_at = self.high;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
