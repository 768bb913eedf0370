//! [`RemoteWheel`]: arms, cancels and resets on a [`LocalWheel`](super::LocalWheel) from any
//! thread, and the owner's mailbox they travel through.
//!
//! Ground rules:
//! - Any thread pushes [`Command`]s; only the owner pops them (in `poll_expired`, or its
//!   explicit `drain_remote`), and only the owner touches the wheel.
//! - A remote cancel or reset is decided on the timer's [`SlotWord`](crate::state::SlotWord)
//!   by one CAS before anything is sent: the message that follows only returns memory (a
//!   cancel) or carries the new deadline (a reset), so the answer is exact at once.
//! - `sleep_until` is the tick the owner said it will sleep until (`prepare_park`, which
//!   `park` calls; taken back when `park`'s sleep returns, or by the next poll), or
//!   [`AWAKE`] while it runs. A remote arm or reset earlier than that claims the wake-up with
//!   a CAS back to `AWAKE` and calls the notifier: of many remote threads, one pays.
//! - `closed` is set once, when the owner drops the wheel.
//!
//! The wake-up handshake is the service mailbox's (`src/mailbox.rs`), a store, a `SeqCst`
//! fence and a load on each side:
//!
//! ```text
//!  remote                                owner, in prepare_park()
//!  push(cmd)                             sleep_until = t
//!  fence(SeqCst)                         fence(SeqCst)
//!  s = sleep_until                       if !queue.is_empty() { due now: don't sleep }
//!  if deadline < s { claim; notify }     sleep until t (epoll_wait, io_uring, park)
//! ```
//!
//! Why a mailbox of its own rather than `src/mailbox.rs`'s: that one carries the service's
//! commands (entries with reference counts, stages) and wakes a thread it knows by
//! `unpark`; this one carries typed payloads and wakes through the user's notifier. The
//! queue (`crossbeam-queue`'s `SegQueue`, loom's stand-in under loom) and the handshake are
//! the same; sharing the type would make the service's hot path generic over both for no
//! gain.

use super::TimerKey;
use super::slots::Directory;
use crate::clock::Clock;
use crate::error::Closed;
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering, fence};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::time::{Duration, Instant};

/// `sleep_until` while the owner runs: no deadline is earlier, so nobody notifies.
const AWAKE: u64 = 0;
/// `sleep_until` while the owner sleeps with nothing to wake for.
pub(super) const ASLEEP_UNTIL_WOKEN: u64 = u64::MAX;

/// How a [`RemoteWheel`] wakes the owner of its wheel: see
/// [`LocalBuilder::notifier`](crate::LocalBuilder::notifier). Implemented for every
/// `Fn() + Send + Sync + 'static`.
///
/// ```
/// use shardwheel::{LocalWheel, Notify};
/// use std::sync::atomic::{AtomicBool, Ordering};
///
/// struct Flag(AtomicBool);
/// impl Notify for Flag {
///     fn notify(&self) {
///         self.0.store(true, Ordering::Release);
///     }
/// }
/// let wheel = LocalWheel::builder().notifier(Flag(AtomicBool::new(false))).build::<u64>()?;
/// # Ok::<(), shardwheel::BuildError>(())
/// ```
pub trait Notify: Send + Sync + 'static {
    /// Wakes the owner. Runs on the remote thread; must not block.
    ///
    /// ```
    /// use shardwheel::Notify;
    /// let me = std::thread::current();
    /// let wake = move || me.unpark();
    /// wake.notify(); // what a remote arm earlier than the owner's sleep calls
    /// ```
    fn notify(&self);
}

impl<F: Fn() + Send + Sync + 'static> Notify for F {
    fn notify(&self) {
        self()
    }
}

/// A message to the owner.
pub(super) enum Command<T> {
    /// File this payload at this tick.
    Arm { deadline: u64, payload: T },
    /// A remote cancel won this timer: take it out and drop its payload.
    Unlink(TimerKey),
    /// A remote reset of this timer to this tick, numbered by its slot word: `ticket`
    /// orders it against the timer's other resets (`SlotWord::is_newer`).
    Reset { key: TimerKey, deadline: u64, ticket: u32 },
}

#[cfg(not(loom))]
type Queue<T> = crossbeam_queue::SegQueue<T>;
/// Under loom, the loom-visible stand-in (loom cannot see inside `crossbeam-queue`).
#[cfg(loom)]
type Queue<T> = crate::loom_queue::Queue<T>;

/// What the owner and its remote handles share.
pub(super) struct Shared<T> {
    queue: Queue<Command<T>>,
    /// Written by the owner around its sleeps, CASed by remotes that claim a wake-up.
    sleep_until: CachePadded<AtomicU64>,
    /// Set by every remote after its push, cleared by the owner before it drains: the owner
    /// reads this one flag, not the queue, on each `poll_expired` (see `has_mail`).
    mail: CachePadded<AtomicBool>,
    closed: AtomicBool,
    /// Held by whoever empties the queue once `closed` is set (the owner's `close`, or a
    /// remote whose arm raced it), so that the queue keeps one consumer at a time. Taken
    /// only after the close: never on a path that runs while the wheel lives.
    discarding: Mutex<()>,
    notifier: Option<Box<dyn Notify>>,
    pub(super) clock: Clock,
    pub(super) directory: Directory,
}

impl<T> Shared<T> {
    pub(super) fn new(clock: Clock, notifier: Option<Box<dyn Notify>>) -> Shared<T> {
        Shared {
            queue: Queue::new(),
            sleep_until: CachePadded::new(AtomicU64::new(AWAKE)),
            mail: CachePadded::new(AtomicBool::new(false)),
            closed: AtomicBool::new(false),
            discarding: Mutex::new(()),
            notifier,
            clock,
            directory: Directory::new(),
        }
    }

    /// Whether remote arms earlier than the owner's sleep can end it (a notifier was given).
    pub(super) fn has_notifier(&self) -> bool {
        self.notifier.is_some()
    }

    /// Owner only: the next command, if any.
    pub(super) fn pop(&self) -> Option<Command<T>> {
        self.queue.pop()
    }

    /// Owner only: whether a remote pushed a command since the owner's last `take_mail`.
    /// One plain load of a line remotes write only when they send (no fence, no RMW), so
    /// `poll_expired` pays it per fired timer instead of a queue pop (whose miss costs
    /// crossbeam's `SeqCst` fence).
    ///
    /// Ordering. A remote pushes, then `swap(true, Release)`; the owner
    /// `swap(false, Acquire)`s, then pops until the queue is empty. Both writes to `mail` are
    /// read-modify-writes, so every remote's `true` heads a release sequence that the others'
    /// swaps and the owner's continue. If the owner's swap reads a `true` written after a
    /// push (that remote's or a later one's in the sequence), it synchronizes with that
    /// push and its pops see the command. If not, the remote's swap comes after the owner's
    /// in `mail`'s modification order and leaves `true` behind: the next `poll_expired`
    /// drains it. A `Relaxed` load here that reads a stale `false` only postpones the drain
    /// by a poll, never past a sleep: `prepare_sleep` looks at the queue itself, and when it
    /// finds mail the owner drains at its next poll whatever this flag says.
    pub(super) fn has_mail(&self) -> bool {
        self.mail.load(Ordering::Relaxed)
    }

    /// Owner only, before it pops: see `has_mail`.
    pub(super) fn take_mail(&self) {
        // Acquire: pairs with the remotes' Release swap in `send`. (`SegQueue::pop` opens
        // with a SeqCst fence, which would make a Relaxed read of that Release store
        // synchronize too: loom agrees, weakening this alone fails no model. The Acquire
        // keeps the handshake from resting on the queue's insides.)
        self.mail.swap(false, Ordering::Acquire);
    }

    /// Owner only: back from a sleep (or never went): remotes need not notify.
    pub(super) fn woke(&self) {
        // Relaxed: remotes only compare their deadline against it; a stale value costs at
        // most one needless notification. A plain store on x86 and ARM.
        self.sleep_until.store(AWAKE, Ordering::Relaxed);
    }

    /// Owner only: announces a sleep until tick `until` (`ASLEEP_UNTIL_WOKEN`: none).
    /// `false` if mail came in meanwhile: the owner must not sleep (it is marked awake).
    pub(super) fn prepare_sleep(&self, until: u64) -> bool {
        // SeqCst store and fence: the owner's half of the handshake in the module docs.
        self.sleep_until.store(until.max(AWAKE + 1), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !self.queue.is_empty() {
            self.woke();
            return false;
        }
        true
    }

    /// Owner only, as it drops the wheel: later arms get their payload back.
    pub(super) fn close(&self) {
        // SeqCst: ordered with the remotes' SeqCst fence after their push (see `send`).
        self.closed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.discard();
    }

    /// After `close`: drops whatever commands are still queued (arms that raced with the
    /// close), on the calling thread. The lock makes the pops of the owner's `close` and of
    /// racing remotes take turns (the owner's pops before the close happen before any of
    /// these: a remote gets here only after reading `closed`, which the owner stored after
    /// them). A poisoned lock (a payload's `Drop` panicked while another thread discarded)
    /// is still taken: the queue itself is consistent.
    fn discard(&self) {
        let _turn = self.discarding.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while self.queue.pop().is_some() {}
    }

    fn is_closed(&self) -> bool {
        // Acquire: pairs with the owner's SeqCst store in `close`.
        self.closed.load(Ordering::Acquire)
    }

    /// Pushes `cmd`; notifies the owner if it sleeps past `deadline`.
    fn send(&self, cmd: Command<T>, deadline: Option<u64>) {
        self.queue.push(cmd);
        // Release, and a read-modify-write: see `has_mail`.
        self.mail.swap(true, Ordering::Release);
        let Some(deadline) = deadline else { return };
        // SeqCst fence: the remote's half of the handshake in the module docs.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence; a stale value only makes the CAS below fail and
        // retry.
        let mut until = self.sleep_until.load(Ordering::Relaxed);
        while until != AWAKE && deadline < until {
            // Claim the wake-up. Relaxed: the CAS decides who notifies and publishes no
            // data; the command itself was published by the queue.
            match self.sleep_until.compare_exchange(until, AWAKE, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    if let Some(n) = &self.notifier {
                        n.notify();
                    }
                    return;
                }
                Err(now) => until = now,
            }
        }
    }
}

/// A handle to a [`LocalWheel`](crate::LocalWheel) for other threads: `Send + Sync +
/// Clone` (for `T: Send`), from [`LocalWheel::remote`](crate::LocalWheel::remote).
///
/// Arms, cancels and resets travel to the owner through a lock-free queue and take effect
/// when it next polls (or drains). A cancel and a reset are decided at once, by one CAS on
/// the timer's slot word: `cancel` returning `true` means the timer will never be handed
/// out, and its payload is dropped on the owner's thread. An arm or reset earlier than the
/// owner's announced sleep calls the wheel's notifier.
///
/// ```
/// use shardwheel::LocalWheel;
/// use std::time::{Duration, Instant};
///
/// let mut wheel = LocalWheel::new();
/// let key = wheel.arm(Duration::from_secs(30), "conn 7 idle");
/// let remote = wheel.remote();
/// std::thread::spawn(move || {
///     assert!(remote.cancel(key), "decided by the CAS, here");
///     remote.arm(Duration::ZERO, "from another core").unwrap();
/// })
/// .join()
/// .unwrap();
/// let later = Instant::now() + Duration::from_millis(2);
/// assert_eq!(wheel.poll_expired(later).map(|(_, p)| p), Some("from another core"));
/// assert!(wheel.is_empty());
/// ```
pub struct RemoteWheel<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for RemoteWheel<T> {
    fn clone(&self) -> Self {
        RemoteWheel { shared: self.shared.clone() }
    }
}

impl<T> fmt::Debug for RemoteWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteWheel")
            .field("closed", &self.shared.is_closed())
            .field("queued", &self.shared.queue.len())
            .finish()
    }
}

impl<T: Send> RemoteWheel<T> {
    pub(super) fn new(shared: Arc<Shared<T>>) -> RemoteWheel<T> {
        RemoteWheel { shared }
    }

    /// Arms `payload` to fire `delay` from now (this reads the clock: a remote thread has no
    /// wheel time of its own). The owner files it when it next polls; no key comes back.
    /// `Err` hands the payload back if the wheel was dropped. An arm that races with the
    /// drop is handed back, or returns `Ok` and its payload is dropped before this call
    /// returns or by the owner's thread as it drops the wheel; it never fires. Remote arms
    /// are not held to `max_pending`; one that finds the wheel's 2²⁸ slots all used is
    /// dropped by the owner and counted in
    /// [`LocalWheel::dropped_remote_arms`](crate::LocalWheel::dropped_remote_arms).
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// wheel.remote().arm(Duration::from_millis(1), 5u32).unwrap();
    /// let (_, five) = wheel.poll_expired(Instant::now() + Duration::from_millis(3)).unwrap();
    /// assert_eq!(five, 5);
    /// ```
    pub fn arm(&self, delay: Duration, payload: T) -> Result<(), Closed<T>> {
        let deadline = self.shared.clock.deadline_after(delay);
        self.arm_tick(deadline, payload)
    }

    /// Arms `payload` to fire at `deadline`: see [`arm`](RemoteWheel::arm).
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let at = Instant::now() + Duration::from_millis(1);
    /// wheel.remote().arm_at(at, 'x').unwrap();
    /// assert_eq!(wheel.poll_expired(at + Duration::from_millis(1)).map(|(_, c)| c), Some('x'));
    /// ```
    pub fn arm_at(&self, deadline: Instant, payload: T) -> Result<(), Closed<T>> {
        let deadline = self.shared.clock.deadline_at(deadline);
        self.arm_tick(deadline, payload)
    }

    fn arm_tick(&self, deadline: u64, payload: T) -> Result<(), Closed<T>> {
        if self.shared.is_closed() {
            return Err(Closed(payload));
        }
        self.shared.send(Command::Arm { deadline, payload }, Some(deadline));
        // The owner may have closed between the check above and the push, and emptied the
        // queue before the push landed: then nobody would pop this arm until the last
        // handle drops the queue. `send`'s SeqCst fence comes after the push and the owner's
        // comes after its `closed` store (see `close`): either the owner's pops see the push,
        // or this load sees `closed`, and then this thread empties the queue itself.
        if self.shared.is_closed() {
            self.shared.discard();
        }
        Ok(())
    }

    /// Cancels the timer `key` names. `true` iff this call cancelled it (one CAS decides,
    /// against the owner's expiry and every other cancel): it will never be handed out, and
    /// the owner drops its payload when it next polls. `false` for a timer that fired, was
    /// cancelled, or whose wheel was dropped, and for a stale key.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let key = wheel.arm(Duration::from_secs(1), ());
    /// let remote = wheel.remote();
    /// assert!(remote.cancel(key));
    /// assert!(!remote.cancel(key));
    /// assert_eq!(wheel.get(key), None);
    /// ```
    pub fn cancel(&self, key: TimerKey) -> bool {
        if self.shared.is_closed() {
            return false;
        }
        let Some(word) = self.shared.directory.get(key.index) else { return false };
        if !word.try_cancel_remote(key.generation) {
            return false;
        }
        // Only memory to return: no wake-up for it.
        self.shared.send(Command::Unlink(key), None);
        true
    }

    /// Moves the timer `key` names to fire `delay` from now (reading the clock). `true` iff
    /// it was pending (one CAS decides): it then fires at the new deadline, never at the old
    /// one, unless a later reset (the owner's or another remote's) moves it again: of the
    /// resets that returned `true`, the last one wins. The owner applies it when it next
    /// polls, and is notified if the new deadline is earlier than its sleep.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let key = wheel.arm(Duration::from_secs(60), ());
    /// assert!(wheel.remote().reset(key, Duration::ZERO));
    /// assert!(wheel.poll_expired(Instant::now() + Duration::from_millis(2)).is_some());
    /// ```
    pub fn reset(&self, key: TimerKey, delay: Duration) -> bool {
        self.reset_tick(key, self.shared.clock.deadline_after(delay))
    }

    /// Moves the timer `key` names to fire at `deadline`: see [`reset`](RemoteWheel::reset).
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// let mut wheel = shardwheel::LocalWheel::new();
    /// let key = wheel.arm(Duration::from_millis(1), ());
    /// let later = wheel.now() + Duration::from_secs(60);
    /// assert!(wheel.remote().reset_at(key, later));
    /// assert!(wheel.poll_expired(wheel.now() + Duration::from_secs(1)).is_none());
    /// assert_eq!(wheel.deadline(key), Some(later));
    /// ```
    pub fn reset_at(&self, key: TimerKey, deadline: Instant) -> bool {
        self.reset_tick(key, self.shared.clock.deadline_at_for_reset(deadline))
    }

    fn reset_tick(&self, key: TimerKey, deadline: u64) -> bool {
        if self.shared.is_closed() {
            return false;
        }
        let Some(word) = self.shared.directory.get(key.index) else { return false };
        let Some(ticket) = word.try_reset_remote(key.generation) else { return false };
        self.shared.send(Command::Reset { key, deadline, ticket }, Some(deadline));
        true
    }

    /// Whether the wheel was dropped.
    ///
    /// ```
    /// let wheel = shardwheel::LocalWheel::<()>::new();
    /// let remote = wheel.remote();
    /// assert!(!remote.is_closed());
    /// drop(wheel);
    /// assert!(remote.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }
}
