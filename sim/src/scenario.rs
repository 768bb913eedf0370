//! The run: producers arm every connection's idle timeout, then drive activity at the rate
//! for the steady state, then the timer stops; the main thread shows progress and gathers
//! an [`Outcome`]. Generic over [`SimTimer`]: every timer runs this same code.

use crate::args::Config;
use crate::figures::Outcome;
use crate::producer::{Producer, sleep_until};
use crate::progress::Progress;
use crate::tally::{self, Counts, PerKind, Shared};
use crate::timer::SimTimer;
use crate::units::group;
use shardwheel_peers::{heap::HeapPeer, netty::NettyPeer, shardwheel::ShardwheelPeer, tokio_timers::TokioTaskPeer};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread::{self, Scope, ScopedJoinHandle, Thread};
use std::time::{Duration, Instant};

/// Runs the scenario on `timer`, then stops it; progress goes to stderr, each line led by
/// the timer's name if `labelled`.
pub fn run<T: SimTimer>(config: &Config, timer: T, labelled: bool) -> Outcome {
    let (began, cpu_before, shared) = (Instant::now(), tally::cpu_time(), Shared::leak(config));
    let ui = &mut Progress::new(if labelled { timer.label() } else { "" });
    let mut o = Outcome {
        timer: timer.label(),
        describe: timer.describe(config),
        lanes: timer.lanes(),
        tick: config.tick,
        connections: config.connections as u64,
        rss_before: tally::rss_bytes(),
        heap_before: tally::heap_live(),
        handle_bytes: std::mem::size_of::<Option<T::Handle>>() as u64,
        ..Outcome::default()
    };
    let (connections, producers) = (group(o.connections), config.producers);
    ui.line(&format!("arming {connections} idle timeouts on {producers} producer threads ({})…", o.describe));
    let producers = drive(&timer, shared, ui, &mut o);
    producers.iter().for_each(|p| o.counts.add(&p.counts));

    // Activity has stopped and every cancel and reset has returned: from here on, a task
    // dropped unrun is one that never ended (the timer drops it, hands it back, or a handle
    // still holds it).
    (o.pending_at_end, o.heap_at_end) = (timer.pending(), tally::heap_live());
    ui.line(&format!("activity stopped; {} timeouts pending; stopping the timer…", group(o.pending_at_end as u64)));
    // A cancel or reset may drop the task it ended later, on the timer's thread (tokio's
    // abort: a worker drops the aborted task): wait, a second at most, for the drops they owe,
    // so that none of them is counted as a timeout that never ended.
    let (c, waiting) = (&o.counts, Instant::now());
    let owed = [c.reset_tasks() + c.idle_failed, c.cancels_ok + c.request_failed];
    while shared.drops(true) != owed && waiting.elapsed() < Duration::from_secs(1) {
        thread::sleep(Duration::from_millis(1));
    }
    let (before, stopping) = (shared.drops(true), Instant::now());
    (o.unfired_listed, o.stats) = timer.stop();
    o.stop_time = stopping.elapsed();
    drop(producers);
    let after = shared.drops(true);
    (o.unfired, o.unrun_before_stop) = ([after[0] - before[0], after[1] - before[1]], before);
    (o.fired, o.early, o.worst_early_ns) =
        (shared.expired(), shared.early.load(Relaxed), shared.worst_early_ns.load(Relaxed));
    (o.lateness, o.sleep_lateness) =
        (shared.lateness.each_ref().map(|h| h.snapshot()), shared.sleep_lateness.snapshot());
    (o.drops, o.cpu, o.total) = (shared.drops(false), tally::cpu_since(cpu_before), began.elapsed());
    o
}

/// Runs the scenario on shardwheel, then, with `compare`, on every peer in table order, tokio
/// with as many workers as shardwheel has shards (progress led by the timer's name).
pub fn run_all(config: &Config, shardwheel: ShardwheelPeer, compare: bool) -> Vec<Outcome> {
    let mut runs = vec![run(config, shardwheel, compare)];
    if compare {
        runs.push(run(config, NettyPeer::with(config.tick, 512), true));
        runs.push(run(config, HeapPeer::new(), true));
        runs.push(run(config, TokioTaskPeer::with_workers(config.shards), true));
    }
    runs
}

/// The end of the steady state: dropped when the duration is over (or the main thread unwinds),
/// sets the stop flag and wakes every thread that waits for it (the producers between batches,
/// the baseline within its tick), so that the scope joins them at once, however long they
/// meant to sleep: a tick may be an hour, a slow producer's next batch seconds away.
struct Stop<'a> {
    flag: &'a AtomicBool,
    sleepers: Vec<Thread>,
}

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        // Relaxed: `unpark` synchronizes-with the `park_timeout` it wakes (std's guarantee),
        // so the woken thread sees the flag set; one not parked sees it at its next load.
        self.flag.store(true, Relaxed);
        self.sleepers.iter().for_each(Thread::unpark);
    }
}

/// Runs `work` on a producer thread of its own, in the timer's context.
fn spawn<'s, T: SimTimer>(
    s: &'s Scope<'s, '_>,
    p: usize,
    timer: &'s T,
    work: impl FnOnce() -> Producer<T> + Send + 's,
) -> ScopedJoinHandle<'s, Producer<T>> {
    let thread = thread::Builder::new().name(format!("sim-producer-{p}"));
    thread.spawn_scoped(s, move || timer.enter(work)).expect("spawn a producer")
}

/// Joins a thread, passing its panic on.
fn join<R>(handle: ScopedJoinHandle<'_, R>) -> R {
    handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The threads' part: the producers arm, the memory is measured, they drive the steady state;
/// hands back the producers, whose handles must live until the timer has stopped.
fn drive<T: SimTimer>(timer: &T, shared: &'static Shared, ui: &mut Progress, o: &mut Outcome) -> Vec<Producer<T>> {
    let arming = Instant::now();
    ui.start_bar(o.connections, false);
    let producers = arm(timer, shared, ui);
    let settling = Instant::now();
    o.setup = settling - arming;
    timer.settle_arms();
    (o.settle, o.rss_after, o.heap_after) = (settling.elapsed(), tally::rss_bytes(), tally::heap_live());
    ui.finish();
    let (setup, duration) = (o.setup.as_secs_f64(), shared.config.duration.as_secs_f64());
    ui.line(&format!("armed in {setup:.3} s; steady state for {duration:.1} s"));
    let start = Instant::now();
    let (producers, lasted) = steady(timer, shared, ui, producers, start);
    o.steady = lasted;
    producers
}

/// Every producer arms its connections' idle timeouts, on a thread of its own.
fn arm<T: SimTimer>(timer: &T, shared: &'static Shared, ui: &Progress) -> Vec<Producer<T>> {
    thread::scope(|s| {
        let arm = |p| move || Producer::new(p, shared, timer).arm_idle(timer);
        let producers: Vec<_> = (0..shared.config.producers).map(|p| spawn(s, p, timer, arm(p))).collect();
        // Polled every ms: the setup time (the unpaced arm rate) is only as exact as the poll.
        while !producers.iter().all(|h| h.is_finished()) {
            thread::sleep(Duration::from_millis(1));
            let c = shared.counts();
            ui.position(c.idle_armed + c.idle_failed);
        }
        producers.into_iter().map(join).collect()
    })
}

/// The steady state from `start`: the producers drive activity, a baseline thread sleeps,
/// and the main thread shows progress until the duration is over. Hands back the producers
/// and how long the activity lasted: until the last producer stopped.
fn steady<T: SimTimer>(
    timer: &T,
    shared: &'static Shared,
    ui: &mut Progress,
    producers: Vec<Producer<T>>,
    start: Instant,
) -> (Vec<Producer<T>>, Duration) {
    let flag = &AtomicBool::new(false);
    thread::scope(|s| {
        let mut stop = Stop { flag, sleepers: Vec::with_capacity(producers.len() + 1) };
        let mut handles = Vec::with_capacity(producers.len());
        for (p, producer) in producers.into_iter().enumerate() {
            handles.push(spawn(s, p, timer, move || producer.steady(timer, start, flag)));
            stop.sleepers.push(handles[p].thread().clone());
        }
        // The baseline: how late a plain sleep of a tick wakes up meanwhile, with the wake-ups
        // a stall made it miss (as a timer thread would miss them). A tick cut short by the
        // stop is not recorded.
        let (tick, us) = (shared.config.tick, shared.config.tick.as_micros() as u64);
        let baseline = thread::Builder::new().name("sim-baseline".into()).spawn_scoped(s, move || {
            let mut slept = Instant::now();
            while sleep_until(slept + tick, flag) {
                shared.sleep_lateness.record_corrected(slept.elapsed().saturating_sub(tick).as_micros() as u64, us);
                slept = Instant::now();
            }
        });
        let baseline = baseline.expect("spawn the baseline thread");
        stop.sleepers.push(baseline.thread().clone());
        progress(shared, timer, start, ui);
        drop(stop);
        let producers = handles.into_iter().map(join).collect();
        let lasted = start.elapsed();
        join(baseline);
        (producers, lasted)
    })
}

/// Progress until the steady state is over: the bar moves ten times a second; the rates of
/// arms, cancels and expiries are taken once a second.
fn progress<T: SimTimer>(shared: &Shared, timer: &T, start: Instant, ui: &mut Progress) {
    let duration = shared.config.duration;
    ui.start_bar(duration.as_millis() as u64, true);
    let totals = |c: Counts, [idle, request]: PerKind<u64>| [c.scheduled(), c.cancels_ok, idle + request];
    let (end, mut prev) = (start + duration, (start, totals(shared.counts(), shared.expired())));
    for second in 1u32.. {
        let target = (start + Duration::from_secs(u64::from(second))).min(end);
        while let Some(left) = target.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
            thread::sleep(left.min(Duration::from_millis(100)));
            ui.position(start.elapsed().as_millis() as u64);
        }
        let (now, counts) = (Instant::now(), totals(shared.counts(), shared.expired()));
        let secs = now.duration_since(prev.0).as_secs_f64().max(1e-9);
        let rates = [0, 1, 2].map(|i| (counts[i] - prev.1[i]) as f64 / secs);
        let max_late_us = shared.interval_max_us.swap(0, Relaxed);
        ui.second(rates, max_late_us, timer.pending());
        prev = (now, counts);
        if target >= end {
            break;
        }
    }
    ui.finish();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::{checks, passed, succeeded};
    use crate::producer::lanes_of;
    use crate::timer::shardwheel;
    use shardwheel_peers::Peer;
    use std::sync::mpsc;

    /// A short scenario with expiries of both kinds, cancels and resets: half a second.
    fn short_run() -> Config {
        let args = "--connections 2000 --producers 2 --shards 2 --idle-timeout-ms 200 --idle-fraction 0.5 \
            --request-timeout-ms 50 --lost-fraction 0.05 --in-flight 16 --pin-threads false --rate 40000 \
            --duration-secs 0.5";
        crate::args::tests::parse_str(args).unwrap().0
    }

    #[test]
    fn lanes_are_spread() {
        let lanes = [lanes_of(0, 2, 2), lanes_of(1, 2, 5), lanes_of(0, 2, 5), lanes_of(3, 4, 2), lanes_of(1, 2, 1)];
        assert_eq!(lanes, [vec![0], vec![1, 3], vec![0, 2, 4], vec![1], vec![0]]);
    }

    /// Every timer runs a short scenario with expiries of both kinds, cancels and resets, and
    /// passes the self-check: the adapters keep the exactly-once contract.
    #[test]
    fn every_timer_passes_a_short_run() {
        let config = short_run();
        assert!(config.warnings().is_empty(), "{:?}", config.warnings());
        let runs = run_all(&config, shardwheel(&config).unwrap(), true);
        let timers: Vec<_> = runs.iter().map(|o| o.timer).collect();
        assert_eq!(timers, ["shardwheel", "netty-wheel", "Mutex<BinaryHeap>", "tokio"]);
        for o in &runs {
            let c = &o.counts;
            assert!(passed(o), "{}: {:#?}", o.timer, checks(o));
            assert!(o.fired[0] > 0 && o.fired[1] > 0 && c.cancels_ok > 0 && c.resets_ok > 0, "{}: {c:?}", o.timer);
            assert!(c.resets_failed == 0 && o.unfired[0] + o.unfired[1] > 0, "{}: {c:?}", o.timer);
        }
    }

    /// Runs the short scenario on shardwheel with `change` applied, on a thread of its own:
    /// the outcome, or a failure if the run is not over `grace` after its steady state's end.
    fn run_within(change: impl FnOnce(&mut Config), grace: Duration) -> (Config, Outcome) {
        let mut config = short_run();
        change(&mut config);
        let ((tx, rx), c) = (mpsc::channel(), config.clone());
        // The send fails only if the wait below gave up: the test has failed already.
        thread::spawn(move || _ = tx.send(run(&c, shardwheel(&c).unwrap(), true)));
        let (duration, tick) = (config.duration, config.tick);
        let late = |_| panic!("a run of {duration:?} with tick {tick:?} still going {grace:?} after its end");
        (config, rx.recv_timeout(duration + grace).unwrap_or_else(late))
    }

    /// A tick longer than the run (10 s, and the largest allowed, an hour) neither stretches
    /// the steady state nor the run (the baseline's sleep of a tick is cut short by the stop),
    /// and the rate is reported over the time the activity ran.
    #[test]
    fn a_tick_longer_than_the_run_does_not_stretch_it() {
        for tick in [Duration::from_secs(10), shardwheel::Builder::MAX_TICK] {
            let (config, o) = run_within(|c| c.tick = tick, Duration::from_secs(3));
            let (steady, rate) = (o.steady.as_secs_f64(), o.steady_rate(o.counts.events) / config.rate as f64);
            assert!((0.5..0.75).contains(&steady), "tick {tick:?}: steady state {steady} s, asked 0.5 s");
            assert!((0.7..1.01).contains(&rate), "tick {tick:?}: {rate} of the target rate reported");
            assert!(passed(&o), "tick {tick:?}: {:#?}", checks(&o));
        }
    }

    /// A rate so low that a producer's next batch is due long after the end (here 2 s after
    /// the start, the run lasting 0.5 s) does not stretch the run: the stop wakes it.
    #[test]
    fn a_producer_waiting_for_its_next_batch_stops_with_the_run() {
        let (_, o) = run_within(|c| c.rate = 1, Duration::from_secs(1));
        assert!(o.steady < Duration::from_millis(750), "steady state {:?}, asked 0.5 s", o.steady);
        assert!(passed(&o), "{:#?}", checks(&o));
    }

    /// How the wrapped heap peer breaks its contract: it fires every timeout at half its delay
    /// (`Early`), forgets the task, which then never runs nor drops (`Loses`), or resets by
    /// arming a new timeout, leaving the old one to fire too (`FiresTwice`).
    #[derive(Clone, Copy, Debug)]
    enum Break {
        Early,
        Loses,
        FiresTwice,
    }

    struct Broken(HeapPeer, Break);

    impl Peer for Broken {
        type Handle = <HeapPeer as Peer>::Handle;
        fn name(&self) -> &'static str {
            "broken"
        }
        fn arm<F: FnOnce() + Send + 'static>(&self, delay: Duration, task: F) -> Self::Handle {
            match self.1 {
                Break::Early => self.0.arm(delay / 2, task),
                Break::Loses => {
                    std::mem::forget(task);
                    self.0.arm(delay, || ())
                }
                Break::FiresTwice => self.0.arm(delay, task),
            }
        }
        fn arm_at<F: FnOnce() + Send + 'static>(&self, at: std::time::Instant, task: F) -> Self::Handle {
            self.0.arm_at(at, task)
        }
        fn cancel(&self, handle: Self::Handle) -> bool {
            self.0.cancel(handle)
        }
        fn reset<F: FnOnce() + Send + 'static>(&self, handle: &mut Self::Handle, delay: Duration, task: F) -> bool {
            if !matches!(self.1, Break::FiresTwice) {
                return self.0.reset(handle, delay, task);
            }
            *handle = self.0.arm(delay, task);
            true
        }
        fn reset_kind(&self) -> &'static str {
            "broken"
        }
    }

    impl SimTimer for Broken {
        fn describe(&self, _: &Config) -> String {
            "broken".into()
        }
        fn pending(&self) -> usize {
            self.0.entries()
        }
    }

    /// Timers that break the contract, run through the real scenario: each must fail the
    /// self-check that guards what it breaks, and fail the whole run.
    #[test]
    fn every_break_fails_the_check_that_guards_it_and_the_run() {
        let config = short_run();
        let (ended, dropped) = ("ended_exactly_once", "dropped_exactly_once");
        let cases =
            [(Break::Early, "never_early"), (Break::Loses, ended), (Break::Loses, dropped), (Break::FiresTwice, ended)];
        for (how, guard) in cases {
            let outcome = run(&config, Broken(HeapPeer::new(), how), true);
            let failed: Vec<_> = checks(&outcome).iter().filter(|c| !c.ok).map(|c| c.key).collect();
            assert!(failed.contains(&guard), "{how:?} must fail {guard}; failed: {failed:?}");
            assert!(!succeeded(std::slice::from_ref(&outcome), true), "{how:?}: the run must fail");
        }
    }
}
