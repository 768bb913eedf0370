//! The worker's turns: events shared and given back, accepts, budgets, and `--max-conns`.

use super::*;

fn worker() -> (Worker, SocketAddr, PortGuard) {
    worker_of(10_000)
}

/// A worker that holds `max_conns` connections at most.
fn worker_of(max_conns: usize) -> (Worker, SocketAddr, PortGuard) {
    let (guard, mut listeners) = bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let listener = listeners.pop().unwrap();
    let addr = listener.local_addr().unwrap();
    let stats: Arc<[ThreadStats]> = vec![ThreadStats::default()].into();
    let timeouts =
        Timeouts { header: Duration::from_secs(30), idle: Duration::from_secs(30), send: Duration::from_secs(30) };
    let (worker, _stopper) =
        Worker::new(0, listener, stats, timeouts, max_conns, Duration::from_millis(1), None).unwrap();
    (worker, addr, guard)
}

/// A worker holding `n` accepted connections, and their clients, each of which has sent
/// a `GET /` if `asking`.
fn holding(n: usize, asking: bool) -> (Worker, SocketAddr, PortGuard, Vec<std::net::TcpStream>) {
    use std::io::Write;
    let (mut worker, addr, guard) = worker_of(n.max(10_000));
    let mut clients = Vec::with_capacity(n);
    let until = Instant::now() + Duration::from_secs(20);
    // Accepted as they come, so the backlog never fills.
    while worker.conns.len() < n {
        assert!(Instant::now() < until, "{} of {n} accepted", worker.conns.len());
        if clients.len() < n {
            clients.push(std::net::TcpStream::connect(addr).unwrap());
        }
        worker.begin_turn(true, Instant::now());
    }
    if asking {
        for client in &mut clients {
            client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        }
    }
    (worker, addr, guard, clients)
}

/// At `--max-conns`, connections waiting in the backlog are closed at once after a turn
/// that saw all its events, and wait for the next turn after one that gave events back
/// (closes that make room may be among those).
#[test]
fn at_max_conns_what_waits_is_closed_only_after_every_event_is_seen() {
    for (handled, closed) in [(Handled::All, 2), (Handled::GaveBack, 0)] {
        let (mut worker, addr, _guard) = worker_of(3);
        let held: Vec<_> = (0..3).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
        while worker.conns.len() < 3 {
            worker.begin_turn(true, Instant::now());
        }
        let waiting: Vec<_> = (0..2).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
        worker.begin_turn(true, Instant::now());
        assert!(worker.waiting);
        worker.after_events(handled);
        let rejected = worker.stats[0].counters.rejected.load(Ordering::Relaxed);
        assert_eq!(rejected, closed, "{handled:?}");
        assert_eq!(worker.accept_more, handled == Handled::GaveBack, "{handled:?}");
        assert_eq!(worker.conns.len(), 3);
        drop((held, waiting));
    }
}

/// A turn that has spent a second of CPU already.
fn over_budget() -> Budget {
    Budget { start: thread_cpu(), before: Duration::from_secs(1) }
}

/// A turn whose CPU time counts from a minute on: within its budget however slow the
/// machine.
fn unbounded() -> Budget {
    Budget { start: Some(thread_cpu().unwrap() + Duration::from_secs(60)), before: Duration::ZERO }
}

/// A turn's budget counts the thread's CPU time: a turn that loses its core spends none
/// of it meanwhile; one that works spends it, and never more than the wall clock saw.
#[test]
fn a_turns_budget_counts_its_threads_cpu_time() {
    let budget = Budget::start();
    std::thread::sleep(Duration::from_millis(30));
    assert!(budget.spent() < Duration::from_millis(10), "asleep, {:?} spent", budget.spent());
    let wall = Instant::now();
    while budget.spent() < Duration::from_millis(20) {
        assert!(wall.elapsed() < Duration::from_secs(10), "the budget's clock does not move");
    }
    assert!(wall.elapsed() >= Duration::from_millis(15), "20 ms spent in {:?}", wall.elapsed());
    assert!(over_budget().spent() >= Duration::from_secs(1));
    assert!(unbounded().spent().is_zero());
}

/// A backlog longer than a turn's accepts is taken a share a turn (one below, at and one
/// above the share, and more), and the turns after the first take theirs with no event
/// from the listener (it is edge-triggered: none comes until another connection does),
/// and do not sleep before they do.
#[test]
fn a_turn_accepts_its_share_and_the_next_turns_the_rest_without_an_event() {
    for waiting in [ACCEPTS_PER_TURN - 1, ACCEPTS_PER_TURN, ACCEPTS_PER_TURN + 1, 2 * ACCEPTS_PER_TURN + 44] {
        let (mut worker, addr, _guard) = worker();
        // Each connect returns once its handshake is done: every one waits in the backlog.
        let clients: Vec<_> = (0..waiting).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
        let (mut expected, mut turns, mut listener_ready) = (0, 0, true);
        while expected < waiting {
            worker.begin_turn(listener_ready, Instant::now());
            listener_ready = false;
            turns += 1;
            expected = (expected + ACCEPTS_PER_TURN).min(waiting);
            assert_eq!(worker.conns.len(), expected, "{waiting} waiting, turn {turns}");
            // A turn that used its whole share cannot know whether more wait.
            let full_share = expected == ACCEPTS_PER_TURN * turns;
            assert_eq!(worker.accept_more, full_share, "{waiting} waiting, turn {turns}");
            let zero = Some(Duration::ZERO);
            for wheel in [Some(Duration::from_secs(7)), None, zero] {
                assert_eq!(wait(worker.accept_more, wheel), if full_share { zero } else { wheel });
            }
        }
        assert_eq!(turns, waiting.div_ceil(ACCEPTS_PER_TURN), "{waiting} waiting");
        // Nothing left: a turn without an event accepts nothing, and the next may sleep.
        worker.begin_turn(false, Instant::now());
        assert_eq!(worker.conns.len(), waiting);
        assert!(!worker.accept_more);
        drop(clients);
    }
}

/// The run loop's share of events a turn relies on the kernel keeping the rest: with
/// more sockets ready than `EVENTS`, a wait returns `EVENTS` of them, and the next waits
/// return the others, each once (one above the share, twice the share and more).
#[test]
fn a_turn_takes_its_share_of_events_and_the_next_turns_the_rest() {
    for ready in [EVENTS + 1, 2 * EVENTS, 3 * EVENTS + 17] {
        let (mut worker, _addr, _guard, clients) = holding(ready, false);
        // Each new connection is writable at once: `ready` events wait.
        let mut events = Events::with_capacity(EVENTS);
        let mut seen = vec![0_u32; ready];
        let mut waits = 0;
        loop {
            worker.poll.poll(&mut events, Some(Duration::from_millis(50))).unwrap();
            let got = events.iter().count();
            if got == 0 {
                break;
            }
            waits += 1;
            let whole = seen.iter().filter(|&&n| n > 0).count() + EVENTS <= ready;
            assert_eq!(got, if whole { EVENTS } else { ready % EVENTS }, "{ready} ready, wait {waits}");
            for event in &events {
                seen[event.token().0 - FIRST_CONN] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "{ready} ready: each once, {seen:?}");
        assert_eq!(waits, ready.div_ceil(EVENTS), "{ready} ready");
        drop(clients);
    }
}

/// A turn past its event budget gives the rest of its events back to the kernel, and
/// the next turns get them: with every turn over budget from its start, a turn answers
/// one `SLICE` of requests at most and gives the rest back, and every connection, more
/// than one wait's share of them, is answered, once.
#[test]
fn a_turn_past_its_budget_gives_its_events_back_and_none_is_lost() {
    use std::io::Read;
    let n = EVENTS + 20;
    let (mut worker, _addr, _guard, mut clients) = holding(n, true);
    let stats = Arc::clone(&worker.stats);
    let counters = &stats[0].counters;
    let requests = || counters.requests.load(Ordering::Relaxed);
    let mut events = Events::with_capacity(EVENTS);
    let (mut turns, until) = (0, Instant::now() + Duration::from_secs(20));
    while requests() < n as u64 && Instant::now() < until {
        worker.poll.poll(&mut events, Some(Duration::from_millis(100))).unwrap();
        let before = requests();
        assert_ne!(worker.handle(&events, over_budget(), Instant::now()).unwrap(), Handled::Stopped);
        let answered = requests() - before;
        assert!(answered <= SLICE as u64, "turn {turns} answered {answered} requests");
        turns += 1;
    }
    assert_eq!(requests(), n as u64, "after {turns} turns");
    assert!(turns >= n.div_ceil(SLICE), "{turns} turns for {n} requests");
    assert!(counters.event_breaks.load(Ordering::Relaxed) >= 1);
    // Each response was written before its turn ended: on loopback, it waits in its
    // client's receive buffer already.
    for (i, client) in clients.iter_mut().enumerate() {
        client.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0_u8; 4096];
        while let Ok(read @ 1..) = client.read(&mut buf) {
            got.extend_from_slice(&buf[..read]);
        }
        let text = String::from_utf8_lossy(&got);
        assert_eq!(text.matches("HTTP/1.1 200").count(), 1, "client {i}: {text:?}");
    }
}

/// A turn accepts and fires again after each `SLICE` of its events, not before its
/// first: at, one below and one above each multiple.
#[test]
fn a_slice_ends_after_every_slice_of_events() {
    let ends: Vec<usize> = (0..=3 * SLICE + 1).filter(|&n| slice_ends(n)).collect();
    assert_eq!(ends, [SLICE, 2 * SLICE, 3 * SLICE]);
}

/// Connections that wait while a turn's events are handled are accepted at the end of
/// its first slice, and not within a turn shorter than a slice.
#[test]
fn a_turn_accepts_what_waits_after_each_slice_of_events() {
    for (events, accepted) in [(5, false), (SLICE + 3, true)] {
        let (mut worker, addr, _guard, clients) = holding(events, true);
        let mut ready = Events::with_capacity(EVENTS);
        let (mut seen, until) = (0, Instant::now() + Duration::from_secs(10));
        // The connections' events: each writable and readable by now.
        while seen < events && Instant::now() < until {
            worker.poll.poll(&mut ready, Some(Duration::from_millis(100))).unwrap();
            seen = ready.iter().filter(|e| e.token().0 >= FIRST_CONN && e.is_readable()).count();
        }
        assert_eq!(seen, events);
        let waiting: Vec<_> = (0..3).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
        worker.accepts_left = ACCEPTS_PER_TURN;
        assert_eq!(worker.handle(&ready, unbounded(), Instant::now()).unwrap(), Handled::All);
        let expected = if accepted { events + waiting.len() } else { events };
        assert_eq!(worker.conns.len(), expected, "{events} events");
        drop((clients, waiting));
    }
}

/// An event's flags as the loop reads them: a close or an error is a read to try, to
/// see the end, and says the peer closed; writable alone is neither.
#[test]
fn an_events_flags_say_what_to_read() {
    // (readable, read closed, error) -> (a read to try, the peer closed)
    let table = [
        ((false, false, false), (false, false)),
        ((true, false, false), (true, false)),
        ((false, true, false), (true, true)),
        ((false, false, true), (true, true)),
        ((true, true, false), (true, true)),
        ((true, false, true), (true, true)),
        ((false, true, true), (true, true)),
        ((true, true, true), (true, true)),
    ];
    for ((readable, read_closed, error), expected) in table {
        let ready = Ready::of(readable, read_closed, error);
        assert_eq!((ready.readable, ready.closed), expected, "{readable} {read_closed} {error}");
    }
}

/// A turn fires due timers until its budget, and `FIRE_MIN` at least each time it
/// fires: over budget from the start (a turn that began a second ago), each call fires
/// `FIRE_MIN` and stops; a turn within its budget fires every due timer.
#[test]
fn a_turn_fires_until_its_budget_and_at_least_its_minimum_each_time() {
    let rest = 12;
    let n = 2 * FIRE_MIN as usize + rest;
    let (mut worker, _addr, _guard, clients) = holding(n, false);
    let stats = Arc::clone(&worker.stats);
    let c = &stats[0].counters;
    let counts = || (c.timers_fired.load(Ordering::Relaxed), c.fire_breaks.load(Ordering::Relaxed));
    // Past every connection's header timeout (30 s).
    let due = Instant::now() + Duration::from_secs(31);
    let min = u64::from(FIRE_MIN);
    assert!(!worker.fire(due, over_budget()).unwrap());
    assert_eq!(counts(), (min, 1));
    assert!(!worker.fire(due, over_budget()).unwrap());
    assert_eq!(counts(), (2 * min, 2));
    assert!(!worker.fire(due, unbounded()).unwrap());
    assert_eq!(counts(), (n as u64, 2));
    assert!(worker.conns.is_empty(), "{} left open", worker.conns.len());
    drop(clients);
}

/// A turn's CPU time is counted apart from its wall time, and only when measured; each
/// at, one below and one above the 5 ms mark.
#[test]
fn a_turns_cpu_time_is_counted_beside_its_wall_time() {
    let (worker, _addr, _guard) = worker();
    let c = &worker.stats[0].counters;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let wall = || (load(&c.longest_turn_micros), load(&c.long_turns));
    let cpu = || (load(&c.cpu_timed_turns), load(&c.longest_turn_cpu_micros), load(&c.long_cpu_turns));
    let us = Duration::from_micros;
    worker.turn_took(us(LONG_TURN_MICROS - 1), None);
    assert_eq!((wall(), cpu()), ((LONG_TURN_MICROS - 1, 0), (0, 0, 0)));
    worker.turn_took(us(LONG_TURN_MICROS + 1), None);
    assert_eq!((wall(), cpu()), ((LONG_TURN_MICROS + 1, 1), (0, 0, 0)));
    worker.turn_took(us(9_000), Some(us(LONG_TURN_MICROS)));
    assert_eq!((wall(), cpu()), ((9_000, 2), (1, LONG_TURN_MICROS, 0)));
    worker.turn_took(us(6_000), Some(us(LONG_TURN_MICROS + 1)));
    assert_eq!((wall(), cpu()), ((9_000, 3), (2, LONG_TURN_MICROS + 1, 1)));
    worker.turn_took(us(LONG_TURN_MICROS), Some(us(LONG_TURN_MICROS - 1)));
    assert_eq!((wall(), cpu()), ((9_000, 3), (3, LONG_TURN_MICROS + 1, 1)));
    // The thread's CPU clock moves with work, and not past the wall clock.
    let (cpu, wall) = (thread_cpu().unwrap(), Instant::now());
    let mut x = 0_u64;
    while wall.elapsed() < Duration::from_millis(20) {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    let (on_cpu, took) = (thread_cpu().unwrap() - cpu, wall.elapsed());
    assert!(on_cpu > Duration::ZERO && on_cpu <= took, "{on_cpu:?} on the CPU in {took:?}");
}
