//! Builder settings: every bad one is a `BuildError` naming the setting, never a panic; and
//! the error and handle types implement `Debug`, `Display` and `Error` as promised.

mod common;

use common::{ChanTask, events};
use shardwheel::{BuildError, Builder, LocalWheel, ScheduleError, StopError, TimerService, TimerTask};
use std::error::Error;
use std::sync::mpsc;
use std::time::Duration;

fn build_err(builder: Builder) -> BuildError {
    builder.build().expect_err("the settings are invalid")
}

/// The error names the setting in its message.
fn assert_names(err: &BuildError, setting: &str) {
    let message = err.to_string();
    assert!(message.contains(setting), "{message:?} does not name `{setting}`");
    assert!(err.source().is_none());
}

#[test]
fn zero_shards_is_an_error() {
    let err = build_err(TimerService::builder().shards(0));
    assert!(matches!(err, BuildError::ZeroShards), "{err:?}");
    assert_names(&err, "shards");
}

#[test]
fn too_many_shards_is_an_error() {
    for n in [Builder::MAX_SHARDS + 1, usize::MAX] {
        let err = build_err(TimerService::builder().shards(n));
        assert!(
            matches!(err, BuildError::TooManyShards { requested, max } if requested == n && max == Builder::MAX_SHARDS),
            "{err:?}"
        );
        assert_names(&err, "shards");
    }
}

#[test]
fn a_zero_tick_is_an_error() {
    let err = build_err(TimerService::builder().tick(Duration::ZERO));
    assert!(matches!(err, BuildError::ZeroTick), "{err:?}");
    assert_names(&err, "tick");
}

#[test]
fn a_tick_below_the_minimum_is_an_error() {
    let small = Builder::MIN_TICK - Duration::from_nanos(1);
    for tick in [Duration::from_nanos(1), small] {
        let err = build_err(TimerService::builder().tick(tick));
        assert!(
            matches!(err, BuildError::TickTooSmall { tick: t, min } if t == tick && min == Builder::MIN_TICK),
            "{err:?}"
        );
        assert_names(&err, "tick");
    }
}

#[test]
fn a_tick_above_the_maximum_is_an_error() {
    for tick in [Builder::MAX_TICK + Duration::from_nanos(1), Duration::MAX] {
        let err = build_err(TimerService::builder().tick(tick));
        assert!(
            matches!(err, BuildError::TickTooLarge { tick: t, max } if t == tick && max == Builder::MAX_TICK),
            "{err:?}"
        );
        assert_names(&err, "tick");
    }
}

#[test]
fn the_tick_limits_themselves_are_accepted() {
    for tick in [Builder::MIN_TICK, Builder::MAX_TICK] {
        let timers = TimerService::builder().shards(1).tick(tick).build().expect("a tick at the limit is valid");
        assert_eq!(timers.tick(), tick);
    }
}

/// `LocalWheel`'s builder keeps the service's tick limits, each at, one nanosecond below
/// and one above.
#[test]
fn a_local_wheels_tick_limits_are_the_services() {
    let ns = Duration::from_nanos(1);
    for tick in [Builder::MIN_TICK, Builder::MIN_TICK + ns, Builder::MAX_TICK - ns, Builder::MAX_TICK] {
        let wheel = LocalWheel::builder().tick(tick).build::<()>().expect("a tick within the limits is valid");
        let printed = format!("{wheel:?}");
        assert!(printed.contains(&format!("tick: {tick:?},")), "{printed}");
    }
    for tick in [Duration::from_nanos(1), Builder::MIN_TICK - ns] {
        let err = LocalWheel::builder().tick(tick).build::<()>().expect_err("below the minimum");
        assert!(
            matches!(err, BuildError::TickTooSmall { tick: t, min } if t == tick && min == Builder::MIN_TICK),
            "{err:?}"
        );
        assert_names(&err, "tick");
    }
    for tick in [Builder::MAX_TICK + ns, Duration::MAX] {
        let err = LocalWheel::builder().tick(tick).build::<()>().expect_err("above the maximum");
        assert!(
            matches!(err, BuildError::TickTooLarge { tick: t, max } if t == tick && max == Builder::MAX_TICK),
            "{err:?}"
        );
        assert_names(&err, "tick");
    }
    let err = LocalWheel::builder().tick(Duration::ZERO).build::<()>().expect_err("zero");
    assert!(matches!(err, BuildError::ZeroTick), "{err:?}");
}

/// A shard thread that could not start hands the OS's error on as the source.
#[test]
fn a_spawn_error_is_its_source() {
    let err = BuildError::Spawn(std::io::Error::other("no threads left"));
    let source = err.source().expect("the OS's error is the source");
    assert_eq!(source.to_string(), "no threads left");
    assert!(err.to_string().contains("no threads left"), "{err}");
}

#[test]
fn a_zero_max_pending_is_an_error() {
    let err = build_err(TimerService::builder().max_pending_per_shard(0));
    assert!(matches!(err, BuildError::ZeroMaxPending), "{err:?}");
    assert_names(&err, "max_pending_per_shard");
}

#[test]
fn a_thread_name_with_nul_is_an_error() {
    let err = build_err(TimerService::builder().thread_name("bad\0name"));
    assert!(matches!(err, BuildError::ThreadNameHasNul), "{err:?}");
    assert_names(&err, "thread_name");
}

#[test]
fn defaults_build_and_work() {
    let timers = TimerService::new().expect("the defaults are valid");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(timers.shard_count(), cores);
    assert_eq!(timers.tick(), Duration::from_millis(1));
    let (tx, rx) = mpsc::channel();
    timers.schedule(Duration::from_millis(1), ChanTask::new(0, &tx)).unwrap();
    assert_eq!(events(&rx, 1)[0].id, 0);
}

#[test]
fn more_shards_than_cores_work() {
    const SHARDS: usize = 8;
    for pin in [true, false] {
        let timers = TimerService::builder().shards(SHARDS).pin_threads(pin).thread_name("many").build().unwrap();
        assert_eq!(timers.shard_count(), SHARDS);
        let (tx, rx) = mpsc::channel();
        for k in 0..SHARDS {
            timers.schedule_on(k, Duration::from_millis(1), ChanTask::new(k, &tx)).unwrap();
        }
        let mut ran: Vec<_> = events(&rx, SHARDS).into_iter().map(|e| (e.id, e.thread_name.unwrap())).collect();
        ran.sort();
        let expected: Vec<_> = (0..SHARDS).map(|k| (k, format!("many-{k}"))).collect();
        assert_eq!(ran, expected);
        assert!(timers.stop().unwrap().is_empty());
    }
}

/// A task that is deliberately not `Debug`.
struct NotDebug(u32);

impl TimerTask for NotDebug {
    fn run(self: Box<Self>) {}
}

fn schedule_missing_shard(timers: &TimerService) -> Result<(), Box<dyn Error>> {
    // `?` needs `ScheduleError<NotDebug>: Error`, with no `T: Debug` bound.
    timers.schedule_on(timers.shard_count(), Duration::ZERO, NotDebug(7))?;
    Ok(())
}

#[test]
fn schedule_error_is_an_error_for_any_task_type() {
    let timers = TimerService::builder().shards(1).build().unwrap();
    let err = schedule_missing_shard(&timers).expect_err("no such shard");
    assert!(!err.to_string().is_empty());
    let errors: [ScheduleError<NotDebug>; 3] = [
        ScheduleError::Rejected(NotDebug(1)),
        ScheduleError::Shutdown(NotDebug(2)),
        ScheduleError::NoSuchShard(NotDebug(3)),
    ];
    let mut messages = Vec::new();
    for (i, err) in errors.into_iter().enumerate() {
        let debug = format!("{err:?}");
        let display = err.to_string();
        assert!(!debug.is_empty() && !display.is_empty());
        assert!(err.source().is_none());
        assert_eq!(err.task().0, i as u32 + 1);
        assert_eq!(err.into_task().0, i as u32 + 1);
        messages.push(display);
    }
    messages.sort();
    messages.dedup();
    assert_eq!(messages.len(), 3, "each variant has its own message");
    // Also as a standard trait object.
    let boxed: Box<dyn Error + Send> = Box::new(ScheduleError::Shutdown(NotDebug(0)));
    assert_eq!(boxed.to_string(), ScheduleError::Shutdown(NotDebug(0)).to_string());
}

#[test]
fn stop_error_is_an_error() {
    let err = StopError::OnTimerThread;
    assert!(!format!("{err:?}").is_empty());
    assert!(!err.to_string().is_empty());
    let boxed: Box<dyn Error + Send + Sync> = Box::new(err);
    assert!(boxed.source().is_none());
}

/// The local wheel's refusals, `Closed` (its wheel dropped) and `Full` (at its limit), are
/// errors that say which: each its own message, through a `Box<dyn Error>` as well, with the
/// payload handed back.
#[test]
fn a_local_wheels_refusals_are_errors_that_say_which() {
    let mut wheel = LocalWheel::builder().max_pending(1).build::<u32>().unwrap();
    let remote = wheel.remote();
    let at = wheel.now() + Duration::from_secs(60);
    wheel.try_arm_at(at, 1).unwrap();
    let full = wheel.try_arm_at(at, 2).expect_err("at its limit");
    assert_eq!(full.0, 2);
    drop(wheel);
    let closed = remote.arm(Duration::from_secs(1), 3).expect_err("its wheel was dropped");
    assert_eq!(closed.0, 3);
    assert_eq!((format!("{full:?}"), format!("{closed:?}")), ("Full(..)".to_owned(), "Closed(..)".to_owned()));
    let (full_text, closed_text) = (full.to_string(), closed.to_string());
    assert!(full_text.contains("max_pending"), "{full_text}");
    assert!(closed_text.contains("dropped"), "{closed_text}");
    assert_ne!(full_text, closed_text);
    for (boxed, text) in [(Box::new(full) as Box<dyn Error>, &full_text), (Box::new(closed), &closed_text)] {
        assert_eq!(&boxed.to_string(), text);
        assert!(boxed.source().is_none());
    }
}

#[test]
fn build_error_is_an_error() {
    let boxed: Box<dyn Error + Send + Sync> = Box::new(BuildError::ZeroShards);
    assert!(!boxed.to_string().is_empty());
    assert!(!format!("{boxed:?}").is_empty());
    // Through `?`, from a builder.
    fn build() -> Result<TimerService, Box<dyn Error>> {
        Ok(TimerService::builder().shards(0).build()?)
    }
    assert!(build().is_err());
}

#[test]
fn handles_and_snapshots_implement_debug() {
    let builder = TimerService::builder().shards(1).thread_name("dbg");
    assert!(format!("{builder:?}").contains("Builder"));
    let timers = builder.build().unwrap();
    assert!(format!("{timers:?}").contains("TimerService"));
    let timeout = timers.schedule(Duration::from_secs(60), || ()).unwrap();
    assert!(format!("{timeout:?}").contains("Timeout"));
    assert!(format!("{:?}", timers.stats()).contains("Stats"));
    let unfired = timers.stop().unwrap();
    assert_eq!(unfired.len(), 1);
    assert!(format!("{:?}", unfired[0]).contains("Unfired"));
    assert!(format!("{:?}", timeout.state()).contains("Cancelled"));
}
