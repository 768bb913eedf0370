//! `LocalWheel` with remote threads cancelling, resetting and arming at random while its
//! owner polls: every timer ends exactly once (handed out by `poll_expired`, or a
//! `RemoteWheel::cancel`/`LocalWheel::cancel` returned it), and every payload is dropped
//! exactly once. No timer fires before its deadline (checked for every timer no reset
//! moved). The owner sleeps in `park` for the timeout it is given, with no cap: only the notifier (or a
//! worker's "done") wakes it earlier, so a lost wake-up shows as a remote arm fired late.

use shardwheel::{LocalWheel, TimerKey};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// A payload that counts its drops in a shared slot per id.
struct Payload {
    id: usize,
    drops: Arc<Vec<AtomicUsize>>,
    /// No earlier than its deadline (read before arming): it must not fire before this,
    /// unless a reset moved it.
    not_before: Instant,
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

const LOCAL: usize = 4_000;
const REMOTE_ARMS: usize = 1_000;
/// Each worker's last remote arm, made while the owner sleeps with nothing pending.
const PROBES: usize = LOCAL + 2 * REMOTE_ARMS;
const IDS: usize = PROBES + 2;

#[test]
fn remote_threads_race_the_owner_and_every_timer_ends_once() {
    let drops: Arc<Vec<AtomicUsize>> = Arc::new((0..IDS).map(|_| AtomicUsize::new(0)).collect());
    let remote_cancelled: Arc<Vec<AtomicUsize>> = Arc::new((0..IDS).map(|_| AtomicUsize::new(0)).collect());
    let me = thread::current();
    let mut wheel = LocalWheel::builder().notifier(move || me.unpark()).build::<Payload>().unwrap();
    let start = wheel.now();
    let mut keys: Vec<TimerKey> = Vec::with_capacity(LOCAL);
    for id in 0..LOCAL {
        let at = start + Duration::from_micros((id as u64 * 7919) % 40_000);
        keys.push(wheel.arm_at(at, Payload { id, drops: drops.clone(), not_before: at }));
    }
    let keys = Arc::new(keys);
    let reset_tried: Arc<Vec<AtomicBool>> = Arc::new((0..IDS).map(|_| AtomicBool::new(false)).collect());
    let (done_tx, done_rx) = mpsc::channel();
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (remote, keys, drops, cancelled, done) =
                (wheel.remote(), keys.clone(), drops.clone(), remote_cancelled.clone(), done_tx.clone());
            let (reset_tried, owner) = (reset_tried.clone(), thread::current());
            thread::spawn(move || {
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ w as u64;
                let mut armed = vec![false; REMOTE_ARMS];
                for n in 0..LOCAL {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let id = (x % LOCAL as u64) as usize;
                    match x % 3 {
                        0 => {
                            let won = remote.cancel(keys[id]);
                            cancelled[id].fetch_add(usize::from(won), Ordering::SeqCst);
                        }
                        1 => {
                            // Marked before the reset: the owner may fire the timer at its new
                            // deadline before this thread could mark it after.
                            reset_tried[id].store(true, Ordering::SeqCst);
                            remote.reset(keys[id], Duration::from_micros(x % 20_000));
                        }
                        _ if n % 4 == 0 && n / 4 < REMOTE_ARMS => {
                            armed[n / 4] = true;
                            let id = LOCAL + w * REMOTE_ARMS + n / 4;
                            let delay = Duration::from_micros(x % 10_000);
                            let not_before = Instant::now() + delay;
                            let payload = Payload { id, drops: drops.clone(), not_before };
                            assert!(remote.arm(delay, payload).is_ok());
                        }
                        _ => {}
                    }
                }
                // Any remote arms not yet made, so the count is known.
                for k in (0..REMOTE_ARMS).filter(|&k| !armed[k]) {
                    let id = LOCAL + w * REMOTE_ARMS + k;
                    // `Duration::ZERO` fires at the owner's next poll, whose now may be older
                    // than this arm: no deadline to hold it to.
                    let payload = Payload { id, drops: drops.clone(), not_before: start };
                    assert!(remote.arm(Duration::ZERO, payload).is_ok());
                }
                // The probe: once the owner has had time to run out of timers and sleep with
                // nothing pending, a 1 ms arm. Only the notifier can wake the owner for it
                // before "done" comes, 1.5 s later.
                thread::sleep(Duration::from_millis(200));
                let delay = Duration::from_millis(1);
                let payload = Payload { id: PROBES + w, drops: drops.clone(), not_before: Instant::now() + delay };
                assert!(remote.arm(delay, payload).is_ok());
                thread::sleep(Duration::from_millis(1500));
                done.send(()).unwrap();
                // "Done" is no timer: wake the owner for it.
                owner.unpark();
            })
        })
        .collect();
    drop(done_tx);

    let mut fired = vec![0usize; IDS];
    let mut local_cancelled = vec![0usize; IDS];
    let mut finished = 0;
    let mut max_late = Duration::ZERO;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        while done_rx.try_recv().is_ok() {
            finished += 1;
        }
        // The owner cancels some timers itself too.
        let now = Instant::now();
        if let Some(id) = (0..LOCAL).step_by(97).find(|&id| fired[id] + local_cancelled[id] == 0) {
            if let Some(p) = wheel.cancel(keys[id]) {
                local_cancelled[p.id] += 1;
            }
        }
        while let Some((_, p)) = wheel.poll_expired(now) {
            fired[p.id] += 1;
            if !reset_tried[p.id].load(Ordering::SeqCst) {
                assert!(now >= p.not_before, "timer {} fired {:?} early", p.id, p.not_before - now);
            }
            if p.id >= PROBES {
                // The notifier must have woken the owner for it.
                max_late = max_late.max(now.saturating_duration_since(p.not_before));
            }
        }
        wheel.drain_remote();
        if finished == 2 && wheel.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "timers left: {}", wheel.len());
        wheel.park(|timeout| match timeout {
            Some(timeout) => thread::park_timeout(timeout),
            // Nothing pending: only a remote arm (through the notifier) or a worker's
            // "done" wakes the owner. The timeout only keeps a lost wake-up from hanging
            // the test; the lateness check below catches it.
            None => thread::park_timeout(Duration::from_secs(10)),
        });
    }
    // Generous for a loaded 2-core machine; a lost wake-up costs 1.5 s (until "done").
    assert!(max_late < Duration::from_millis(700), "a probe fired {max_late:?} late: a lost wake-up?");
    for w in workers {
        w.join().unwrap();
    }
    drop(wheel);
    for id in 0..IDS {
        let remote = remote_cancelled[id].load(Ordering::SeqCst);
        assert_eq!(
            fired[id] + local_cancelled[id] + remote,
            1,
            "timer {id} ended {} times",
            fired[id] + local_cancelled[id] + remote
        );
        assert_eq!(drops[id].load(Ordering::SeqCst), 1, "payload {id} dropped once");
    }
}

/// An expired timer gives the deadline it fired for: the one a remote reset moved it to,
/// with a remote handle out (the owner's CAS path) as without.
#[test]
fn an_expired_timer_gives_its_deadline() {
    let mut wheel = LocalWheel::<&str>::new();
    let start = wheel.now();
    let plain = wheel.arm_at(start + Duration::from_millis(4), "plain");
    let remote = wheel.remote();
    let moved = wheel.arm_at(start + Duration::from_millis(2), "moved");
    assert!(remote.reset_at(moved, start + Duration::from_millis(6)));
    let later = start + Duration::from_millis(20);
    let first = wheel.poll_expired_with_deadline(later).unwrap();
    assert_eq!((first.key, first.payload, first.deadline - start), (plain, "plain", Duration::from_millis(4)));
    let second = wheel.poll_expired_with_deadline(later).unwrap();
    assert_eq!((second.key, second.payload, second.deadline - start), (moved, "moved", Duration::from_millis(6)));
    assert!(wheel.poll_expired_with_deadline(later).is_none());
}

/// Arms a remote queued that the owner never read go with the wheel when it is dropped (on
/// the dropping thread), not when the last remote handle goes; an arm after that gets its
/// payload back.
#[test]
fn arms_queued_when_the_wheel_drops_go_with_it() {
    let wheel = LocalWheel::<Arc<()>>::new();
    let remote = wheel.remote();
    let payload = Arc::new(());
    for _ in 0..3 {
        remote.arm(Duration::from_secs(60), payload.clone()).unwrap();
    }
    assert_eq!(Arc::strong_count(&payload), 4, "queued, not read by the owner");
    drop(wheel);
    assert_eq!(Arc::strong_count(&payload), 1, "the queued arms went with the wheel");
    let back = remote.arm(Duration::from_secs(60), payload.clone()).expect_err("the wheel is gone");
    assert!(Arc::ptr_eq(&back.into_inner(), &payload));
    assert_eq!(Arc::strong_count(&payload), 1);
}
