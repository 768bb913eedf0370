//! A refused schedule passed on with `?`: the task-less `ScheduleError` goes into a
//! `Box<dyn Error + Send + Sync>` whatever the task was (a `Send`, not `Sync`, closure
//! here), and the caller downcasts it and tells the refusals apart. And a timeout's
//! `Elapsed`, as itself and as an `io::Error`.

use shardwheel::{ScheduleError, ScheduleErrorKind, TimerService};
use std::cell::Cell;
use std::error::Error;
use std::time::Duration;

type BoxError = Box<dyn Error + Send + Sync>;

/// Arms a task that is `Send` but not `Sync` on `shard`, passing a refusal on with `?`.
fn arm_on(timers: &TimerService, shard: usize) -> Result<(), BoxError> {
    let not_sync = Cell::new(0u32);
    timers.schedule_on(shard, Duration::from_secs(60), move || not_sync.set(1)).map_err(ScheduleError::without_task)?;
    Ok(())
}

/// What the caller sees: the refusal's kind, read back from the box.
fn kind_of(err: &BoxError) -> ScheduleErrorKind {
    err.downcast_ref::<ScheduleError>().expect("the box holds a ScheduleError").kind()
}

#[test]
fn a_boxed_refusal_downcasts_and_tells_shutdown_from_rejected() {
    let full = TimerService::builder().shards(1).max_pending_per_shard(1).build().unwrap();
    arm_on(&full, 0).expect("room for one");
    let rejected = arm_on(&full, 0).unwrap_err();
    assert_eq!(kind_of(&rejected), ScheduleErrorKind::Rejected);
    assert!(matches!(rejected.downcast_ref::<ScheduleError>(), Some(ScheduleError::Rejected(()))));
    assert_eq!(
        rejected.to_string(),
        "timeout rejected: the shard is full (at max_pending_per_shard, or its wheel near its limit of 2^32 timeouts)"
    );

    let no_such = arm_on(&full, 1).unwrap_err();
    assert_eq!(kind_of(&no_such), ScheduleErrorKind::NoSuchShard);

    full.stop().unwrap();
    let shutdown = arm_on(&full, 0).unwrap_err();
    assert_eq!(kind_of(&shutdown), ScheduleErrorKind::Shutdown);
    assert!(matches!(shutdown.downcast_ref::<ScheduleError>(), Some(ScheduleError::Shutdown(()))));
    assert_ne!(kind_of(&shutdown), kind_of(&rejected));
    assert_eq!(shutdown.to_string(), "timeout not scheduled: the timer service is stopped");
    // `Debug` names the refusal, the task left out.
    for (err, debug) in [(&rejected, "Rejected(..)"), (&no_such, "NoSuchShard(..)"), (&shutdown, "Shutdown(..)")] {
        assert_eq!(format!("{err:?}"), debug);
    }
}

#[test]
fn kind_and_message_survive_without_task() {
    let timers = TimerService::builder().shards(1).max_pending_per_shard(1).build().unwrap();
    let _held = timers.schedule(Duration::from_secs(60), || ()).unwrap();
    let err = timers.schedule(Duration::from_secs(60), || ()).unwrap_err();
    let (kind, message, debug) = (err.kind(), err.to_string(), format!("{err:?}"));
    let bare = err.without_task();
    assert_eq!(kind, ScheduleErrorKind::Rejected);
    assert_eq!((bare.kind(), bare.to_string(), format!("{bare:?}")), (kind, message, debug));
}

#[test]
fn the_task_less_error_is_send_sync_static_whatever_the_task() {
    fn error_for_a_box<E: Error + Send + Sync + 'static>() {}
    error_for_a_box::<ScheduleError>();
    error_for_a_box::<ScheduleError<()>>();
    // The full error is one too when its task is `Send + Sync + 'static` (not with a `Cell`).
    error_for_a_box::<ScheduleError<fn()>>();
}

/// A timeout's error says what happened, in tokio's words, and says it still as an
/// `io::Error` (kind `TimedOut`, the `Elapsed` inside), so `timeout(..).await??` reads well.
#[test]
fn elapsed_says_the_deadline_passed_and_converts_to_timed_out() {
    let err = shardwheel::Elapsed::new();
    assert_eq!(err.to_string(), "deadline has elapsed");
    let io: std::io::Error = err.into();
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(io.to_string(), "deadline has elapsed");
    assert!(io.get_ref().is_some_and(|inner| inner.is::<shardwheel::Elapsed>()));
}
