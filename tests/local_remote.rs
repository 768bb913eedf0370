//! `LocalWheel` with remote threads cancelling, resetting and arming at random while its
//! owner polls: every timer ends exactly once (handed out by `poll_expired`, or a
//! `RemoteWheel::cancel`/`LocalWheel::cancel` returned it), and every payload is dropped
//! exactly once.

use shardwheel::{LocalWheel, TimerKey};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// A payload that counts its drops in a shared slot per id.
struct Payload {
    id: usize,
    drops: Arc<Vec<AtomicUsize>>,
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

const LOCAL: usize = 4_000;
const REMOTE_ARMS: usize = 1_000;
const IDS: usize = LOCAL + 2 * REMOTE_ARMS;

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
        keys.push(wheel.arm_at(at, Payload { id, drops: drops.clone() }));
    }
    let keys = Arc::new(keys);
    let (done_tx, done_rx) = mpsc::channel();
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (remote, keys, drops, cancelled, done) =
                (wheel.remote(), keys.clone(), drops.clone(), remote_cancelled.clone(), done_tx.clone());
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
                            remote.reset(keys[id], Duration::from_micros(x % 20_000));
                        }
                        _ if n % 4 == 0 && n / 4 < REMOTE_ARMS => {
                            armed[n / 4] = true;
                            let id = LOCAL + w * REMOTE_ARMS + n / 4;
                            assert!(
                                remote
                                    .arm(Duration::from_micros(x % 10_000), Payload { id, drops: drops.clone() })
                                    .is_ok()
                            );
                        }
                        _ => {}
                    }
                }
                // Any remote arms not yet made, so the count is known.
                for k in (0..REMOTE_ARMS).filter(|&k| !armed[k]) {
                    let id = LOCAL + w * REMOTE_ARMS + k;
                    assert!(remote.arm(Duration::ZERO, Payload { id, drops: drops.clone() }).is_ok());
                }
                done.send(()).unwrap();
            })
        })
        .collect();
    drop(done_tx);

    let mut fired = vec![0usize; IDS];
    let mut local_cancelled = vec![0usize; IDS];
    let mut finished = 0;
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
        }
        wheel.drain_remote();
        if finished == 2 && wheel.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "timers left: {}", wheel.len());
        if let Some(at) = wheel.next_deadline() {
            thread::park_timeout(at.saturating_duration_since(Instant::now()).min(Duration::from_millis(5)));
        }
    }
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
