//! Thread-per-core event loops, each owning a `LocalWheel<ConnId>`, sleeping in
//! `epoll_wait` (through `mio`) until the wheel's next deadline, while another thread
//! cancels some of their timers and arms new ones through `RemoteWheel`s. An arm from the
//! other thread that is earlier than a loop's sleep wakes it through its `mio::Waker`.
//!
//! `cargo run --example event_loop`
//!
//! Each loop arms an idle timeout per connection (40–240 ms) and sends every other key to
//! the canceller thread, as a connection whose peer answered on another core would. At the
//! end every timer is accounted for exactly once: fired on its loop, or cancelled (a
//! `RemoteWheel::cancel` that returned `true`).

use mio::{Events, Poll, Token, Waker};
use shardwheel::{LocalWheel, RemoteWheel, TimerKey};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// A connection's id: the wheel's payload.
#[derive(Debug, Clone, Copy)]
struct ConnId(u32);

const LOOPS: usize = 2;
const CONNECTIONS: u32 = 2_000;
const WAKER: Token = Token(0);

/// What a loop hands the canceller thread: its remote handle, its waker, and the keys of the
/// timers to cancel.
struct Handoff {
    remote: RemoteWheel<ConnId>,
    waker: Arc<Waker>,
    keys: mpsc::Receiver<TimerKey>,
}

fn event_loop(core: usize, handoff: mpsc::Sender<Handoff>, done: Arc<AtomicBool>) -> std::io::Result<(usize, usize)> {
    let mut poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let notify = waker.clone();
    // The wheel belongs to this thread; the notifier runs on remote threads.
    let mut wheel = LocalWheel::builder()
        .capacity(CONNECTIONS as usize)
        .notifier(move || {
            let _ = notify.wake();
        })
        .build::<ConnId>()
        .expect("valid settings");
    let (keys_tx, keys_rx) = mpsc::channel();
    handoff.send(Handoff { remote: wheel.remote(), waker: waker.clone(), keys: keys_rx }).expect("canceller alive");
    drop(handoff);

    // Accepted connections, each with an idle timeout; every other key goes to the canceller.
    for id in 0..CONNECTIONS {
        let key = wheel.arm(Duration::from_millis(40 + u64::from(id % 200)), ConnId(id));
        if id % 2 == 0 {
            keys_tx.send(key).expect("canceller alive");
        }
    }
    drop(keys_tx);

    let (mut fired, mut wake_ups) = (0, 0);
    let mut events = Events::with_capacity(16);
    loop {
        // Sleep until the next deadline (or a remote wake-up): `park` hands `epoll_wait` its
        // timeout and, while it sleeps, tells the remote handles what this loop sleeps until.
        wheel.park(|timeout| poll.poll(&mut events, timeout))?;
        wake_ups += events.iter().filter(|e| e.token() == WAKER).count();
        let now = Instant::now();
        while let Some((_key, ConnId(_id))) = wheel.poll_expired(now) {
            fired += 1; // here: close the idle connection
        }
        // `done` first, then the drain: a remote arm sent before `done` was set is applied
        // here, so an empty wheel means nothing more will come (draining first and loading
        // `done` after could miss an arm sent between the two).
        let finished = done.load(Ordering::Acquire);
        wheel.drain_remote();
        if finished && wheel.is_empty() {
            break;
        }
    }
    println!("loop {core}: {fired} timers fired, {wake_ups} remote wake-ups");
    Ok((fired, wake_ups))
}

fn main() {
    let done = Arc::new(AtomicBool::new(false));
    let (handoff_tx, handoff_rx) = mpsc::channel();
    let loops: Vec<_> = (0..LOOPS)
        .map(|core| {
            let (tx, done) = (handoff_tx.clone(), done.clone());
            thread::Builder::new().name(format!("loop-{core}")).spawn(move || event_loop(core, tx, done)).unwrap()
        })
        .collect();
    drop(handoff_tx);

    // The other thread: cancels the keys it is sent, and arms a short timer on each loop
    // now and then, earlier than the loop's sleep, which wakes it.
    let cancelled = AtomicUsize::new(0);
    let mut remote_armed = 0;
    let handoffs: Vec<Handoff> = handoff_rx.iter().take(LOOPS).collect();
    for (i, h) in handoffs.iter().enumerate() {
        for (n, key) in h.keys.iter().enumerate() {
            if h.remote.cancel(key) {
                cancelled.fetch_add(1, Ordering::Relaxed);
            }
            if n % 100 == 0 {
                h.remote.arm(Duration::from_millis(1), ConnId(1_000_000 + n as u32)).expect("loop alive");
                remote_armed += 1;
            }
        }
        println!("canceller: done with loop {i}");
    }
    done.store(true, Ordering::Release);
    for h in &handoffs {
        let _ = h.waker.wake();
    }
    let (mut fired, mut wake_ups) = (0, 0);
    for l in loops {
        let (f, w) = l.join().unwrap().expect("the loop ran");
        fired += f;
        wake_ups += w;
    }
    let cancelled = cancelled.into_inner();
    let armed = LOOPS * CONNECTIONS as usize + remote_armed;
    println!(
        "armed {armed} ({remote_armed} remotely), fired {fired}, cancelled remotely {cancelled}, wake-ups {wake_ups}"
    );
    assert_eq!(fired + cancelled, armed, "every timer ended exactly once");
}
