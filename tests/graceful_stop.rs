//! `TimerService::stop_gracefully`: new timeouts refused at once, what is pending fires or
//! is cancelled until the grace ends, the rest handed back; and a server that stops its
//! service under running connection tasks loses no request and panics no task, whether its
//! tasks `select!` biased or not.

use shardwheel::{Missed, ScheduleError, TimerService};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn service() -> TimerService {
    TimerService::builder().shards(2).pin_threads(false).build().expect("valid settings")
}

#[test]
fn what_is_due_within_the_grace_fires_and_the_rest_comes_back() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    for ms in [10, 30, 50] {
        let tx = tx.clone();
        timers.schedule(Duration::from_millis(ms), move || tx.send(ms).unwrap()).unwrap();
    }
    let cancelled = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
    let far = timers.schedule(Duration::from_secs(3600), || ()).unwrap();
    let t = timers.clone();
    let stopping = std::thread::spawn(move || t.stop_gracefully(Duration::from_millis(300)));
    // Refused as soon as the drain has begun, the task handed back; cancels still work.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (mine_tx, mine_rx) = mpsc::channel();
        match timers.schedule(Duration::from_millis(1), move || mine_tx.send("mine").unwrap()) {
            Err(ScheduleError::Shutdown(task)) => {
                task();
                assert_eq!(mine_rx.try_recv(), Ok("mine"), "the very task, handed back");
                break;
            }
            Ok(t) => assert!(t.cancel()),
            Err(e) => panic!("refused with {e}"),
        }
        assert!(Instant::now() < deadline, "the drain never refused");
        std::thread::yield_now();
    }
    assert!(!timers.is_stopped(), "draining, not stopped: the shards run on");
    assert!(cancelled.cancel(), "a cancel during the drain wins");
    let unfired = stopping.join().unwrap().unwrap();
    let mut fired: Vec<u64> = rx.try_iter().collect();
    fired.sort_unstable();
    assert_eq!(fired, [10, 30, 50], "every timeout due within the grace fired");
    assert_eq!(unfired.len(), 1);
    assert!(unfired[0].timeout().ptr_eq(&far), "the one left pending comes back");
    assert!(timers.is_stopped());
    let stats = timers.stats();
    assert_eq!(stats.scheduled, stats.expired + stats.cancelled + stats.unfired + stats.pending);
}

#[test]
fn it_returns_as_soon_as_nothing_is_pending_and_ends_a_series() {
    let timers = service();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    timers
        .schedule_repeating(Duration::ZERO, Duration::from_millis(5), Missed::Skip, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    timers.schedule(Duration::from_millis(20), || ()).unwrap();
    while runs.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let started = Instant::now();
    let unfired = timers.stop_gracefully(Duration::from_secs(30)).unwrap();
    // The series' next run was refused (it ended), the one-shot fired: nothing was left to
    // wait for long before the 30 s grace.
    assert!(started.elapsed() < Duration::from_secs(10), "waited {:?}", started.elapsed());
    assert!(unfired.is_empty(), "{unfired:?}");
    let ran = runs.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(runs.load(Ordering::SeqCst), ran, "the series ended with the drain");
    assert!(matches!(
        timers.schedule_repeating(Duration::ZERO, Duration::from_millis(5), Missed::Skip, || ()),
        Err(ScheduleError::Shutdown(_))
    ));
}

/// A shard both draining and full at once: a new series is refused as `Shutdown` (the
/// stop), not `Rejected` (the limit), as a one-shot timeout is, whichever is asked first.
#[test]
fn a_draining_shard_at_its_limit_refuses_a_series_as_shut_down() {
    let timers = TimerService::builder().shards(1).max_pending_per_shard(1).pin_threads(false).build().unwrap();
    let held = timers.schedule(Duration::from_secs(60), || ()).unwrap();
    assert!(matches!(timers.schedule(Duration::from_secs(60), || ()), Err(ScheduleError::Rejected(_))), "full");
    std::thread::scope(|s| {
        // A grace far longer than the test: the shard stays draining and full until the
        // held timeout is cancelled below.
        let stopping = s.spawn(|| timers.stop_gracefully(Duration::from_secs(60)).unwrap());
        let started = Instant::now();
        while !matches!(timers.schedule(Duration::from_secs(60), || ()), Err(ScheduleError::Shutdown(_))) {
            assert!(started.elapsed() < Duration::from_secs(10), "the drain never began");
            std::thread::sleep(Duration::from_millis(1));
        }
        let series = timers.schedule_repeating(Duration::ZERO, Duration::from_millis(5), Missed::Skip, || ());
        let draining = !stopping.is_finished();
        // Cancelled before any check, so that a failing one ends the stop too.
        assert!(held.cancel());
        assert!(stopping.join().unwrap().is_empty(), "nothing pending: the stop ends");
        assert!(draining, "still draining when the series was asked for");
        assert!(matches!(series, Err(ScheduleError::Shutdown(_))), "{series:?}");
    });
}

#[test]
fn a_graceful_stop_from_a_shard_thread_is_refused() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    let t = timers.clone();
    timers
        .schedule(Duration::ZERO, move || tx.send(t.stop_gracefully(Duration::from_secs(1)).map(|v| v.len())).unwrap())
        .unwrap();
    let outcome = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(outcome, Err(shardwheel::StopError::OnTimerThread));
    assert!(!timers.is_stopped());
}

/// One connection of a server: requests come in on `requests`; each is answered after a
/// little work, under a per-request deadline (`timeout`), with an idle timeout between
/// requests (a `Sleep` raced in a `select!`, biased or not). The connection ends when its
/// client hangs up or it has been idle too long. Returns the requests it answered.
async fn connection(
    timers: TimerService,
    mut requests: tokio::sync::mpsc::Receiver<u64>,
    answers: tokio::sync::mpsc::UnboundedSender<u64>,
    biased: bool,
) -> u64 {
    let mut answered = 0;
    loop {
        let idle = timers.sleep(Duration::from_secs(5));
        let request = if biased {
            tokio::select! {
                biased;
                r = requests.recv() => r,
                () = idle => None,
            }
        } else {
            tokio::select! {
                r = requests.recv() => r,
                () = idle => None,
            }
        };
        let Some(id) = request else { return answered };
        let work = async {
            timers.sleep(Duration::from_millis(2)).await;
            id
        };
        match timers.timeout(Duration::from_secs(5), work).await {
            Ok(id) => {
                answers.send(id).unwrap();
                answered += 1;
            }
            Err(elapsed) => panic!("request {id} timed out: {elapsed}"),
        }
    }
}

/// 64 connections, half of them `select!`ing biased, take requests while the service stops
/// gracefully, and go on after the stop: every request sent is answered (none lost), every
/// task ends by itself, none panics. Before `stop_gracefully` and the overflow timer, the
/// `Sleep`s handed back by `stop()` panicked on their next poll.
#[test]
fn a_server_stopping_its_timers_under_running_connections_loses_no_request() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    let timers = service();
    let (answers_tx, mut answers_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for c in 0..64 {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        clients.push(tx);
        tasks.push(rt.spawn(connection(timers.clone(), rx, answers_tx.clone(), c % 2 == 0)));
    }
    drop(answers_tx);
    let sent = rt.block_on(async {
        let mut sent = 0u64;
        let mut stop = None;
        // 30 rounds of a request to every connection; the stop begins after the 10th, with
        // a grace shorter than the rounds that follow, so requests arrive before, during and
        // after it.
        for round in 0..30u64 {
            for (c, client) in clients.iter().enumerate() {
                client.send(round * 64 + c as u64).await.unwrap();
                sent += 1;
            }
            if round == 10 {
                let t = timers.clone();
                stop = Some(tokio::task::spawn_blocking(move || t.stop_gracefully(Duration::from_millis(20))));
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        let unfired = stop.unwrap().await.unwrap().unwrap();
        // What the stop handed back: each one's task wakes its sleep as it is dropped.
        drop(unfired);
        sent
    });
    assert!(timers.is_stopped());
    clients.clear(); // the clients hang up: every connection ends by itself
    let answered: u64 = rt.block_on(async {
        let mut total = 0;
        for task in tasks {
            let joined = tokio::time::timeout(Duration::from_secs(20), task).await.expect("a task hung");
            total += joined.expect("a connection task panicked");
        }
        total
    });
    let mut ids = Vec::new();
    while let Ok(id) = answers_rx.try_recv() {
        ids.push(id);
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(answered, sent, "a request was lost");
    assert_eq!(ids.len() as u64, sent, "each request answered once");
    assert!(timers.stats().overflowed > 0, "the timers after the stop waited on the overflow timer");
}
