//! The overflow timer: where a future waits when no shard will take it.
//!
//! A future cannot be refused the way `schedule` is: its output is `()` (or the inner
//! future's), so there is no error to hand back, and its task is the caller's, not ours to
//! return. Panicking ends a request in a server's ordinary life; completing before the
//! deadline breaks the one promise a timer makes; waiting for a shard to make room can wait
//! past the deadline (a full shard of 60 s timeouts has no room for 60 s). So a [`Sleep`]
//! that every shard refuses, for being full (`max_pending_per_shard`, or a wheel at its
//! limit), stopping ([`TimerService::stop_gracefully`]) or stopped, waits here instead: on
//! one process-wide thread with an ordered map under a mutex, which runs while anything
//! waits (the first entry starts it; it exits when it finds none left, and the next entry
//! starts another). It is the slow path of a service
//! past what it was sized for, or past its life: one lock per registration, poll with a new
//! waker, cancel and firing, against the shards' lock-free arms. `Stats::overflowed` counts
//! what comes here, so an operator sees it.
//!
//! The protocol is the map: an entry (deadline, id) → waker is present while the sleep
//! waits; the thread removes every entry whose deadline `Instant::now()` has reached, under
//! the lock, and wakes their wakers after letting go of it; a poll that finds its entry
//! gone completes (the thread removed it at or after the deadline: never early), one that
//! finds it present stores its waker if it would not wake the same task; a drop removes it.
//! Every step holds the one lock, so each sees the others whole; the wake-up of a poll that
//! stored its waker is the thread's, which reads that waker under the same lock later.
//! Loom: `loom-tests/overflow.rs` (the thread's turn as a step of its own).
//!
//! Why no crate: a timer that any executor can poll exists (async-io's `Timer`), but it
//! brings an I/O reactor (epoll, its driver thread) for a path a healthy server never takes;
//! this is a `BTreeMap` and a condition variable.
//!
//! [`Sleep`]: crate::Sleep
//! [`TimerService::stop_gracefully`]: crate::TimerService::stop_gracefully

use crate::sync::Mutex;
use std::collections::BTreeMap;
use std::fmt;
use std::task::Waker;
use std::time::Instant;

/// A sleep's place in the overflow timer: its deadline and a number of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    at: Instant,
    id: u64,
}

impl Key {
    /// The key of the entry numbered `id`, due at `at` (as `register` made it).
    pub(crate) fn new(at: Instant, id: u64) -> Key {
        Key { at, id }
    }

    /// The entry's number.
    pub(crate) fn id(self) -> u64 {
        self.id
    }
}

/// The overflow timer's state: what waits, in deadline order.
pub(crate) struct Overflow {
    waiting: Mutex<Waiting>,
    /// Wakes the thread for an entry earlier than the one it sleeps towards.
    #[cfg(not(loom))]
    ring: crate::sync::plain::Condvar,
}

#[derive(Default)]
struct Waiting {
    timers: BTreeMap<Key, Waker>,
    /// Sleeps of services on a paused clock (`TestClock`, `time::pause`), by number: their
    /// time is not real time, so the thread never fires them. Every move of a paused clock
    /// wakes them all (`wake_paused`), and each polls again: it completes if its own clock
    /// has reached its deadline, else it waits on here.
    paused: BTreeMap<u64, Waker>,
    next_id: u64,
    /// Whether a thread runs (set by the entry that starts it, cleared by the thread as it
    /// finds the map empty and exits, both under the lock).
    running: bool,
}

impl fmt::Debug for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Overflow").field("waiting", &self.len()).finish()
    }
}

/// What a poll of an entry found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// Still waiting; the waker is the one that will be woken.
    Waiting,
    /// The deadline has come: the thread took the entry out.
    Fired,
}

impl Overflow {
    pub(crate) fn new() -> Overflow {
        Overflow {
            waiting: Mutex::new(Waiting::default()),
            #[cfg(not(loom))]
            ring: crate::sync::plain::Condvar::new(),
        }
    }

    fn waiting(&self) -> crate::sync::MutexGuard<'_, Waiting> {
        // A poisoned lock: a waker's `clone` or `will_wake` panicked inside it (a bug in an
        // executor); the map itself is whole after every step, so go on with it.
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a sleep due at `at`, woken through `waker`. With no thread running, it starts
    /// one; an entry before the one the thread sleeps towards rings it. (Under loom there is
    /// no thread: the model runs its turn, `fire_due`, as a step of its own.)
    pub(crate) fn register(&'static self, at: Instant, waker: &Waker) -> Key {
        let mut waiting = self.waiting();
        let key = Key::new(at, waiting.next_id);
        waiting.next_id += 1;
        let earliest = waiting.timers.first_key_value().is_none_or(|(first, _)| key < *first);
        waiting.timers.insert(key, waker.clone());
        let start_one = !std::mem::replace(&mut waiting.running, true);
        // Rung (and started) under the lock: the thread reads the map under it before each
        // wait, and before it exits, so a ring can only be missed by a thread that will see
        // the entry anyway, and no entry is left with no thread.
        #[cfg(not(loom))]
        {
            if start_one {
                if let Err(e) = start(self) {
                    // No thread: leave nothing behind that waits for one (the map held only
                    // this entry, or a thread would be running), so that a later entry
                    // starts one again; then say why, with the lock let go.
                    waiting.timers.remove(&key);
                    waiting.running = false;
                    drop(waiting);
                    panic!("shardwheel: the overflow timer's thread could not start: {e}");
                }
            } else if earliest {
                self.ring.notify_one();
            }
        }
        #[cfg(loom)]
        let _ = (earliest, start_one);
        key
    }

    /// Adds a sleep of a service on a paused clock, woken through `waker` at every move of a
    /// paused clock (`wake_paused`); returns its number.
    pub(crate) fn register_paused(&self, waker: &Waker) -> u64 {
        let mut waiting = self.waiting();
        let id = waiting.next_id;
        waiting.next_id += 1;
        waiting.paused.insert(id, waker.clone());
        id
    }

    /// A paused-clock entry's poll: stores `waker` if the one held would not wake the same
    /// task; `false` if the entry is gone (never, unless it was cancelled).
    pub(crate) fn poll_paused(&self, id: u64, waker: &Waker) -> bool {
        let mut waiting = self.waiting();
        match waiting.paused.get_mut(&id) {
            None => false,
            Some(held) => {
                if !held.will_wake(waker) {
                    held.clone_from(waker);
                }
                true
            }
        }
    }

    /// Takes a paused-clock entry out; its waker is dropped unwoken, with the lock let go.
    pub(crate) fn cancel_paused(&self, id: u64) {
        let removed = self.waiting().paused.remove(&id);
        drop(removed);
    }

    /// A paused clock moved: wakes every paused-clock entry (each keeps its place; its sleep
    /// polls again and completes if its own clock has reached its deadline).
    pub(crate) fn wake_paused(&self) {
        let wakers: Vec<Waker> = self.waiting().paused.values().cloned().collect();
        for waker in wakers {
            waker.wake();
        }
    }

    /// The entry's state; while it waits, `waker` is the one to wake (stored if the one held
    /// would not wake the same task).
    pub(crate) fn poll(&self, key: Key, waker: &Waker) -> Polled {
        let mut waiting = self.waiting();
        match waiting.timers.get_mut(&key) {
            None => Polled::Fired,
            Some(held) => {
                if !held.will_wake(waker) {
                    held.clone_from(waker);
                }
                Polled::Waiting
            }
        }
    }

    /// Takes the entry out, if it still waits; its waker is dropped unwoken (after the lock
    /// is let go: a waker's drop is the executor's code).
    pub(crate) fn cancel(&self, key: Key) {
        let removed = self.waiting().timers.remove(&key);
        drop(removed);
    }

    /// The thread's turn: takes out every entry due by `now` and returns their wakers (to be
    /// woken with the lock let go), and the deadline of the earliest left.
    pub(crate) fn fire_due(&self, now: Instant) -> (Vec<Waker>, Option<Instant>) {
        let mut waiting = self.waiting();
        let mut due = Vec::new();
        while let Some(entry) = waiting.timers.first_entry() {
            if entry.key().at > now {
                break;
            }
            due.push(entry.remove());
        }
        let next = waiting.timers.first_key_value().map(|(key, _)| key.at);
        (due, next)
    }

    /// Entries waiting now, on real time and on paused clocks (`Debug`, tests, loom models).
    pub(crate) fn len(&self) -> usize {
        let waiting = self.waiting();
        waiting.timers.len() + waiting.paused.len()
    }
}

/// The process's overflow timer; under loom, the model's execution's: loom's `lazy_static`
/// makes a new one for each, so no lock outlives the execution that made it. One function
/// with both bodies (not one for each build): cargo-mutants mutates the plain build's alone,
/// and a mutant of a body that build does not compile would pass every test.
pub(crate) fn timer() -> &'static Overflow {
    #[cfg(not(loom))]
    {
        static TIMER: std::sync::OnceLock<Overflow> = std::sync::OnceLock::new();
        TIMER.get_or_init(Overflow::new)
    }
    #[cfg(loom)]
    {
        loom::lazy_static! {
            static ref TIMER: Overflow = Overflow::new();
        }
        &TIMER
    }
}

/// Starts the thread, which wakes what is due and sleeps until the next deadline (or until
/// `register` rings for an earlier one), and exits once nothing waits (a process, or a test
/// under Miri, is left with no thread of ours). The error of a thread that cannot start (the
/// process is out of threads): `register` undoes its entry and panics with it, as there is
/// no other way to keep the promise.
#[cfg(not(loom))]
fn start(overflow: &'static Overflow) -> std::io::Result<()> {
    let spawned = crate::sync::plain::thread::Builder::new().name("shardwheel-overflow".into()).spawn(move || {
        loop {
            let (due, _) = overflow.fire_due(Instant::now());
            for waker in due {
                waker.wake();
            }
            let mut waiting = overflow.waiting();
            // Look again under the lock: an entry registered since `fire_due` rang before
            // this wait began, and its ring is lost; the map is not.
            let Some(at) = waiting.timers.first_key_value().map(|(key, _)| key.at) else {
                // Nothing waits: exit, and let the next entry start another thread.
                waiting.running = false;
                return;
            };
            let wait = at.saturating_duration_since(Instant::now());
            // A poisoned lock comes back as the guard all the same (see `waiting`); it is
            // let go here, and the next turn locks again.
            drop(overflow.ring.wait_timeout(waiting, wait));
        }
    });
    spawned.map(drop)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::test_wakers::WakeCount;
    use std::sync::Arc;
    use std::time::Duration;

    fn counter() -> (Arc<WakeCount>, Waker) {
        WakeCount::waker()
    }

    /// An overflow timer of the test's own, `'static` as the process's is (its thread holds
    /// it): a `static` of the calling test's, so that it stays reachable (valgrind's leak
    /// check: a leaked box is "definitely lost" once the test returns).
    macro_rules! own_timer {
        () => {{
            static TIMER: std::sync::OnceLock<Overflow> = std::sync::OnceLock::new();
            TIMER.get_or_init(Overflow::new)
        }};
    }

    #[test]
    fn fires_in_deadline_order_and_never_before() {
        let overflow = own_timer!();
        let t0 = Instant::now() + Duration::from_secs(3600);
        let (a, wa) = counter();
        let (b, wb) = counter();
        let late = overflow.register(t0 + Duration::from_millis(2), &wa);
        let early = overflow.register(t0, &wb);
        let (due, next) = overflow.fire_due(t0 - Duration::from_nanos(1));
        assert!(due.is_empty(), "nothing before its deadline");
        assert_eq!(next, Some(t0));
        let (due, next) = overflow.fire_due(t0);
        assert_eq!(due.len(), 1, "the deadline itself is due");
        due.into_iter().for_each(Waker::wake);
        assert_eq!((a.woken(), b.woken()), (0, 1));
        assert_eq!(overflow.poll(early, &wb), Polled::Fired);
        assert_eq!(overflow.poll(late, &wa), Polled::Waiting);
        assert_eq!(next, Some(t0 + Duration::from_millis(2)));
    }

    #[test]
    fn a_new_waker_is_the_one_woken_and_a_cancel_wakes_none() {
        let overflow = own_timer!();
        let at = Instant::now() + Duration::from_secs(3600);
        let (a, wa) = counter();
        let (b, wb) = counter();
        let key = overflow.register(at, &wa);
        assert_eq!(overflow.poll(key, &wb), Polled::Waiting);
        let (due, _) = overflow.fire_due(at);
        due.into_iter().for_each(Waker::wake);
        assert_eq!((a.woken(), b.woken()), (0, 1));
        assert_eq!(Arc::strong_count(&a), 2, "the replaced waker was let go");
        let key = overflow.register(at, &wa);
        assert_eq!(overflow.len(), 1, "one entry on real time");
        let paused = overflow.register_paused(&wb);
        assert_eq!(overflow.len(), 2, "and one on a paused clock");
        assert!(format!("{overflow:?}").contains("waiting: 2"), "{overflow:?}");
        overflow.cancel_paused(paused);
        assert_eq!(overflow.len(), 1);
        overflow.cancel(key);
        assert_eq!(overflow.len(), 0);
        assert!(overflow.fire_due(at).0.is_empty());
        assert_eq!(a.woken(), 0, "a cancelled entry is never woken");
    }

    /// The thread exits once nothing waits, and the next entry starts another that fires it.
    #[test]
    fn the_thread_runs_while_something_waits_and_a_new_one_starts_after() {
        let overflow = own_timer!();
        for round in 0..2 {
            let (count, waker) = counter();
            let at = Instant::now() + Duration::from_millis(5);
            overflow.register(at, &waker);
            assert!(overflow.waiting().running, "round {round}: a thread runs while the entry waits");
            let give_up = Instant::now() + Duration::from_secs(10);
            while (count.woken() == 0 || overflow.waiting().running) && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(count.woken(), 1, "round {round}: fired");
            assert!(!overflow.waiting().running, "round {round}: the thread exited with nothing left");
        }
    }

    #[test]
    fn the_thread_wakes_an_earlier_entry_registered_while_it_sleeps() {
        let overflow = own_timer!();
        let (far, wfar) = counter();
        overflow.register(Instant::now() + Duration::from_secs(3600), &wfar);
        std::thread::sleep(Duration::from_millis(20)); // the thread now sleeps for an hour
        let (near, wnear) = counter();
        let at = Instant::now() + Duration::from_millis(10);
        let key = overflow.register(at, &wnear);
        let give_up = Instant::now() + Duration::from_secs(10);
        while near.woken() == 0 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(near.woken(), 1, "the ring reached the sleeping thread");
        assert!(Instant::now() >= at);
        assert_eq!(overflow.poll(key, &wnear), Polled::Fired);
        assert_eq!(far.woken(), 0);
    }
}
