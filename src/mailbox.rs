//! A shard's mailbox: commands from other threads, and the protocol that wakes a sleeping
//! shard only when it must.
//!
//! Ground rules:
//! - Any thread pushes [`Command`]s; only the shard's driver pops them.
//! - `sleep_until` is written by the driver before it sleeps (the tick it will wake at, or
//!   `u64::MAX` for "until woken") and set back to [`AWAKE`] when it runs. A producer that
//!   claims a wake-up also sets it to `AWAKE`, with a CAS, so that of many producers only one
//!   pays for the `unpark` syscall.
//! - `flags` holds three bits. [`CLOSED`] is set once, by `stop` (or the service's drop, or
//!   a failing driver), and never cleared; [`DRAINING`] likewise, by `stop_gracefully`,
//!   which refuses new timeouts while the shard runs on. [`FULL`] is set and cleared by the
//!   driver alone, as its wheel crosses its marks (`shard/gate.rs`). Each bit moves with a
//!   `fetch_or` or `fetch_and` of its own, so that none ever writes another: clearing FULL
//!   can never clear CLOSED or DRAINING. The arm path reads the word once
//!   ([`Mailbox::gate`]): zero, it goes on; anything else, a cold path tells them apart.
//!
//! Two Dekker-style handshakes, each a store, a `SeqCst` fence and a load on both sides:
//!
//! ```text
//!  producer                            driver
//!  push(cmd)                           sleep_until = t
//!  fence(SeqCst)                       fence(SeqCst)
//!  s = sleep_until                     if !queue.is_empty() { stay awake }
//!  if deadline < s { claim; unpark }   park until t
//! ```
//!
//! Either the driver sees the command before it sleeps, or the producer sees that the
//! driver sleeps past its deadline and wakes it; the `unpark` token makes an unpark that
//! lands before the `park` count. A command the driver does not see before sleeping, with a
//! deadline no earlier than `t`, is picked up when it wakes at `t`: no syscall per arm.
//!
//! ```text
//!  producer                            stopper / driver
//!  push(cmd)                           flags |= CLOSED        (stopper)
//!  fence(SeqCst)                       ...
//!  if closed { try to take it back }   see closed; fence(SeqCst); final drain   (driver)
//! ```
//!
//! Either the final drain sees the command, or the producer sees `closed` and takes its
//! timeout back itself; the state word's CAS decides if both try.

use crate::entry::EntryRef;
use crate::stage::Stage;
use crate::sync::{Arc, AtomicU8, AtomicU64, OnceLock, Ordering, fence, thread};
use crossbeam_utils::CachePadded;

/// `sleep_until` while the driver runs: no deadline is earlier, so nobody wakes it.
pub(crate) const AWAKE: u64 = 0;
/// `sleep_until` while the driver sleeps with nothing to wake for.
pub(crate) const ASLEEP_UNTIL_WOKEN: u64 = u64::MAX;

/// [`Mailbox::gate`]: arms go on.
pub(crate) const OPEN: u8 = 0;
/// [`Mailbox::gate`]: the mailbox is closed (the service stopped, or the shard failed).
pub(crate) const CLOSED: u8 = 1;
/// [`Mailbox::gate`]: the shard's wheel is near its limit; schedules are refused with
/// `ScheduleError::Rejected` (`shard/gate.rs`).
pub(crate) const FULL: u8 = 2;
/// [`Mailbox::gate`]: the service is stopping gracefully (`TimerService::stop_gracefully`):
/// new timeouts are refused with `ScheduleError::Shutdown`; the shard runs on, firing and
/// cancelling what it holds, until the stop closes it.
pub(crate) const DRAINING: u8 = 4;

/// A sleeping shard is woken once this many commands wait for it, whatever their deadlines,
/// so cancels piling up while it sleeps for a far deadline cannot grow without bound.
/// Smaller under loom, so a model can reach it with a few pushes.
#[cfg(not(loom))]
pub(crate) const HIGH_WATER: usize = 1024;
#[cfg(loom)]
pub(crate) const HIGH_WATER: usize = 2;

/// A message to the shard.
#[derive(Debug)]
pub(crate) enum Command {
    /// File this entry in the wheel at the deadline its state word holds now.
    Arm(EntryRef),
    /// This entry was cancelled after the shard filed it: take it out of the wheel, if it is
    /// still in. (An entry cancelled before it was filed needs no notice: see `state.rs`.)
    Unlink(EntryRef),
    /// This entry's deadline moved earlier: file it again (or file it now, if it still
    /// waits on a stage).
    Refile(EntryRef),
    /// Unit tests only: makes the driver panic, as a bug in it would.
    #[cfg(test)]
    Panic,
}

/// What became of a sent command.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    Delivered,
    /// The mailbox is closed; the command may never be read.
    Closed,
}

pub(crate) struct Mailbox {
    queue: Queue<Command>,
    /// Stages whose promise was lowered (or that retired): file each at its `due()`, or take
    /// it now if that has come (`stage.rs`). A queue of their own, read before the commands,
    /// so that a flood of notices cannot hold back the arms a stage brings: with one queue,
    /// a stage announced behind a million refile notices would be read a million commands
    /// late. One thread's announcements keep their order, which is all its arms need.
    stages: Queue<Arc<Stage>>,
    /// Written by the driver around its sleeps, CASed by producers that claim a wake-up.
    sleep_until: CachePadded<AtomicU64>,
    /// [`CLOSED`] and [`FULL`]; see the module docs.
    flags: AtomicU8,
    /// The driver's thread, registered as it is spawned.
    thread: OnceLock<thread::Thread>,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Relaxed: a debugging snapshot, ordered with nothing.
        f.debug_struct("Mailbox")
            .field("len", &self.queue.len())
            .field("stages", &self.stages.len())
            .field("sleep_until", &self.sleep_until.load(Ordering::Relaxed))
            .field("flags", &self.flags.load(Ordering::Relaxed))
            .finish()
    }
}

impl Mailbox {
    pub(crate) fn new() -> Mailbox {
        Mailbox {
            queue: Queue::new(),
            stages: Queue::new(),
            sleep_until: CachePadded::new(AtomicU64::new(AWAKE)),
            flags: AtomicU8::new(OPEN),
            thread: OnceLock::new(),
        }
    }

    /// Sends `cmd`; wakes the driver if it sleeps past `deadline` or the backlog is high.
    pub(crate) fn send(&self, cmd: Command, deadline: Option<u64>) -> Sent {
        self.queue.push(cmd);
        self.pushed(deadline)
    }

    /// Announces `stage`, due from `due` on; wakes the driver if it sleeps past that.
    pub(crate) fn announce(&self, stage: Arc<Stage>, due: u64) -> Sent {
        self.stages.push(stage);
        self.pushed(Some(due))
    }

    /// After a push to either queue: the producer half of both handshakes.
    fn pushed(&self, deadline: Option<u64>) -> Sent {
        // SeqCst fence: the producer half of both handshakes in the module docs.
        fence(Ordering::SeqCst);
        if self.flags.load(Ordering::Relaxed) & CLOSED != 0 {
            return Sent::Closed;
        }
        // Relaxed: ordered by the fence above; a stale value only makes the CAS below fail
        // and retry.
        let mut until = self.sleep_until.load(Ordering::Relaxed);
        while until != AWAKE && (deadline.is_some_and(|d| d < until) || self.len() >= HIGH_WATER) {
            // Claim the wake-up. Relaxed: the CAS decides who unparks and publishes no data;
            // the command itself was published by the queue.
            match self.sleep_until.compare_exchange(until, AWAKE, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.unpark();
                    break;
                }
                Err(now) => until = now,
            }
        }
        Sent::Delivered
    }

    /// Commands and announcements waiting.
    pub(crate) fn len(&self) -> usize {
        self.queue.len() + self.stages.len()
    }

    /// Whether an announcement waits to be read. Driver only, after it popped an `Arm`: the
    /// arm's thread announced its stage before it sent the arm, so popping the arm makes
    /// that announcement visible here, if it is not read yet.
    pub(crate) fn has_announcements(&self) -> bool {
        !self.stages.is_empty()
    }

    /// Driver only: the next command, if any.
    pub(crate) fn pop(&self) -> Option<Command> {
        self.queue.pop()
    }

    /// Driver only: the next announced stage, if any.
    pub(crate) fn pop_stage(&self) -> Option<Arc<Stage>> {
        self.stages.pop()
    }

    /// Registers the driver's thread, the one to unpark. The service does it as it spawns
    /// the thread, before anyone can close the mailbox: registered from the driver itself, a
    /// close that raced with it could miss the thread and leave it asleep for good.
    pub(crate) fn register_driver(&self, driver: thread::Thread) {
        let _ = self.thread.set(driver);
    }

    /// Driver only: announces a sleep until tick `until` (`ASLEEP_UNTIL_WOKEN`: no
    /// deadline). Returns `false` if the driver must not sleep (mail came, or it is closed);
    /// then it is marked awake again.
    pub(crate) fn prepare_sleep(&self, until: u64) -> bool {
        // SeqCst store and fence: the driver half of the wake-up handshake.
        self.sleep_until.store(until.max(AWAKE + 1), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !self.queue.is_empty() || !self.stages.is_empty() || self.flags.load(Ordering::Relaxed) & CLOSED != 0 {
            self.woke();
            return false;
        }
        true
    }

    /// Driver only: back from a sleep.
    pub(crate) fn woke(&self) {
        // Relaxed: producers only compare their deadline against it; an out-of-date value
        // costs at most one unnecessary unpark.
        self.sleep_until.store(AWAKE, Ordering::Relaxed);
    }

    /// Closes the mailbox and wakes the driver so it sees it.
    pub(crate) fn close(&self) {
        // SeqCst, as the store it replaced: a read-modify-write, so that a FULL bit the
        // driver moves at the same moment is kept, and CLOSED is never lost to it.
        self.flags.fetch_or(CLOSED, Ordering::SeqCst);
        self.sleep_until.store(AWAKE, Ordering::SeqCst);
        self.unpark();
    }

    /// Wakes the driver whatever it sleeps until (a paused clock moved: `TestClock`). As
    /// `close`'s wake-up: the driver re-reads the clock at its next turn.
    pub(crate) fn wake(&self) {
        self.sleep_until.store(AWAKE, Ordering::SeqCst);
        self.unpark();
    }

    /// Refuses new timeouts from now on ([`DRAINING`]); the driver runs on. SeqCst, as
    /// `close`: a schedule that reads the gate after this refuses; one that read it before
    /// is pending, and the stop that follows waits for it or hands it back.
    pub(crate) fn drain(&self) {
        self.flags.fetch_or(DRAINING, Ordering::SeqCst);
    }

    /// Whether the mailbox refuses new timeouts: closed, or draining.
    pub(crate) fn is_refusing(&self) -> bool {
        self.flags.load(Ordering::SeqCst) & (CLOSED | DRAINING) != 0
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.flags.load(Ordering::SeqCst) & CLOSED != 0
    }

    /// The arm path's one look at the mailbox: [`OPEN`], or [`CLOSED`] and/or [`FULL`]. The
    /// same load `is_closed` makes (SeqCst, a plain load on x86), so that the wheel's limit
    /// costs the arm path no instruction: only a word other than `OPEN` goes to the cold path
    /// that tells the bits apart (`shard::gate::refusal`). Not `#[inline]`, as `is_closed`
    /// was not: inlined into the user's crate, it changed how the whole arm was compiled
    /// (a `Sleep` 553 → 561 instructions, callgrind over `examples/sleep_loop.rs`).
    pub(crate) fn gate(&self) -> u8 {
        self.flags.load(Ordering::SeqCst)
    }

    /// Driver only: its wheel reached its high-water mark (`shard/gate.rs`). Relaxed: the bit
    /// publishes no data; a producer that reads it late arms once more, which the marks'
    /// headroom and the driver's backstop (`Local::refuse`) cover. A `fetch_or`, never a
    /// store: CLOSED is kept.
    pub(crate) fn mark_full(&self) {
        self.flags.fetch_or(FULL, Ordering::Relaxed);
    }

    /// Driver only: its wheel fell to its low-water mark. Relaxed, as `mark_full`; a
    /// `fetch_and` of FULL alone, so that CLOSED is never cleared.
    pub(crate) fn clear_full(&self) {
        self.flags.fetch_and(!FULL, Ordering::Relaxed);
    }

    /// Whether FULL is set (tests).
    #[cfg(test)]
    pub(crate) fn is_full(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & FULL != 0
    }

    /// A schedule was refused as FULL: wakes the driver if it sleeps, so that the cancels
    /// waiting in its mail (unlink notices, which wake no sleeping shard) are read and it can
    /// clear FULL. Without this, room made by cancels would stay unseen until the shard's
    /// next deadline, however far. The fence pairs with `prepare_sleep`'s, as a producer's
    /// does (the module docs' first handshake): either the driver saw the mail before it
    /// slept, or this sees it asleep and wakes it. One claim per sleep, so a flood of refusals
    /// costs one `unpark` per sleep, not one each.
    #[cold]
    pub(crate) fn wake_for_room(&self) {
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence; the CAS decides who unparks, as in `pushed`.
        let until = self.sleep_until.load(Ordering::Relaxed);
        if until != AWAKE
            && self.sleep_until.compare_exchange(until, AWAKE, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.unpark();
        }
    }

    /// Driver only, after it saw `is_closed()`: the fence that pairs with the producers'
    /// fence, so the final drain sees every command whose producer did not see `closed`.
    /// `SegQueue`'s `SeqCst` index operations may give that order already; loom's lock-free
    /// stand-in does not, and loom then finds the lost command (mutation M16 in
    /// `loom-tests/README.md`). Once per shutdown, it keeps the handshake independent of the
    /// queue's insides.
    pub(crate) fn begin_final_drain(&self) {
        fence(Ordering::SeqCst);
    }

    fn unpark(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
}

#[cfg(not(loom))]
type Queue<T> = crossbeam_queue::SegQueue<T>;

/// Under loom the mailbox is a loom-visible stand-in (`loom_queue.rs`): loom cannot see
/// inside `crossbeam-queue`'s atomics.
#[cfg(loom)]
type Queue<T> = crate::loom_queue::Queue<T>;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// What the driver told producers it sleeps until (`AWAKE` while it runs).
    fn sleeping_until(mailbox: &Mailbox) -> u64 {
        mailbox.sleep_until.load(Ordering::Relaxed)
    }

    /// `len` counts both queues: commands alone, announcements alone, and both together.
    #[test]
    fn len_counts_commands_and_announcements() {
        let mailbox = Mailbox::new();
        let stage = Arc::new(Stage::new());
        assert_eq!(mailbox.len(), 0);
        assert_eq!(mailbox.send(Command::Panic, None), Sent::Delivered);
        assert_eq!(mailbox.len(), 1, "a command");
        assert!(mailbox.pop().is_some());
        assert_eq!(mailbox.announce(stage.clone(), 5), Sent::Delivered);
        assert_eq!(mailbox.len(), 1, "an announcement");
        for _ in 0..3 {
            mailbox.send(Command::Panic, None);
        }
        mailbox.announce(stage, 5);
        assert_eq!(mailbox.len(), 5, "three commands and two announcements");
        assert!(mailbox.pop_stage().is_some());
        assert_eq!(mailbox.len(), 4);
    }

    /// A driver asleep until a tick no message is due before is woken once its mail,
    /// commands and announcements together, reaches `HIGH_WATER`: not one message before,
    /// whichever queue holds them.
    #[test]
    fn a_backlog_in_either_queue_wakes_the_driver_at_the_high_water_mark() {
        let stage = Arc::new(Stage::new());
        for announced in [0, 1, HIGH_WATER / 2, HIGH_WATER - 1] {
            let mailbox = Mailbox::new();
            assert!(mailbox.prepare_sleep(10));
            for _ in 0..announced {
                mailbox.announce(stage.clone(), 100);
            }
            for _ in announced..HIGH_WATER - 1 {
                mailbox.send(Command::Panic, Some(100));
            }
            assert_eq!(sleeping_until(&mailbox), 10, "{announced} announced: one below the mark, still asleep");
            mailbox.send(Command::Panic, None);
            assert_eq!(sleeping_until(&mailbox), AWAKE, "{announced} announced: at the mark, woken");
        }
    }

    /// The driver's half of the wake-up: `prepare_sleep` announces the tick it sleeps until
    /// (never `AWAKE`), or refuses to sleep while mail waits or the mailbox is closed; and
    /// both a refusal and `woke` mark it awake again, so that no producer claims a wake-up
    /// (an `unpark`, a spurious turn) from a driver that runs.
    #[test]
    fn the_driver_is_marked_awake_when_it_wakes_or_does_not_sleep() {
        let mailbox = Mailbox::new();
        assert_eq!(sleeping_until(&mailbox), AWAKE);
        for until in [10, AWAKE, ASLEEP_UNTIL_WOKEN] {
            assert!(mailbox.prepare_sleep(until));
            assert_eq!(sleeping_until(&mailbox), until.max(AWAKE + 1));
            mailbox.woke();
            assert_eq!(sleeping_until(&mailbox), AWAKE, "woken from a sleep until {until}");
        }
        mailbox.send(Command::Panic, Some(5));
        assert!(!mailbox.prepare_sleep(10), "a command waits");
        assert_eq!(sleeping_until(&mailbox), AWAKE);
        assert!(mailbox.pop().is_some());
        mailbox.announce(Arc::new(Stage::new()), 5);
        assert!(!mailbox.prepare_sleep(10), "an announcement waits");
        assert_eq!(sleeping_until(&mailbox), AWAKE);
        assert!(mailbox.pop_stage().is_some());
        mailbox.close();
        assert!(!mailbox.prepare_sleep(10), "closed");
        assert_eq!(sleeping_until(&mailbox), AWAKE);
    }

    /// A producer wakes a sleeping driver only for a deadline before the tick it sleeps
    /// until (one due at that tick is served by the sleep's own end), by either queue; a
    /// refused schedule (`wake_for_room`) wakes it whatever it sleeps until, and marks it
    /// awake, so that the next refusal claims no second wake-up.
    #[test]
    fn a_deadline_wakes_the_driver_only_before_its_sleep_ends_and_a_refusal_always() {
        let stage = Arc::new(Stage::new());
        let mailbox = Mailbox::new();
        assert!(mailbox.prepare_sleep(10));
        mailbox.announce(stage.clone(), 10);
        mailbox.send(Command::Panic, Some(10));
        assert_eq!(sleeping_until(&mailbox), 10, "due as the sleep ends: not woken");
        mailbox.announce(stage.clone(), 9);
        assert_eq!(sleeping_until(&mailbox), AWAKE, "an announcement due before: woken");
        let mailbox = Mailbox::new();
        assert!(mailbox.prepare_sleep(10));
        mailbox.send(Command::Panic, Some(9));
        assert_eq!(sleeping_until(&mailbox), AWAKE, "a command due before: woken");
        for until in [10, ASLEEP_UNTIL_WOKEN] {
            let mailbox = Mailbox::new();
            assert!(mailbox.prepare_sleep(until));
            mailbox.wake_for_room();
            assert_eq!(sleeping_until(&mailbox), AWAKE, "a refusal wakes a sleep until {until}");
            mailbox.wake_for_room();
            assert_eq!(sleeping_until(&mailbox), AWAKE);
        }
    }

    /// `Debug` shows each queue's length, what the driver sleeps until and the flags.
    #[test]
    fn debug_shows_the_queues_and_the_sleep() {
        let mailbox = Mailbox::new();
        mailbox.send(Command::Panic, None);
        mailbox.announce(Arc::new(Stage::new()), 5);
        mailbox.announce(Arc::new(Stage::new()), 5);
        assert!(!mailbox.prepare_sleep(40), "mail waits");
        let shown = format!("{mailbox:?}");
        assert_eq!(shown, format!("Mailbox {{ len: 1, stages: 2, sleep_until: {AWAKE}, flags: 0 }}"));
    }
}
