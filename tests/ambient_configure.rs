//! `time::configure`: before the default service's first use it takes the builder (its
//! settings refused as `build` refuses them, the default service then untouched); after it,
//! it says so. In a process of its own (one test): the default service is the whole
//! process's.

use shardwheel::time::{self, Duration, error::ConfigureError};
use shardwheel::{BuildError, TimerService};
use std::error::Error;

/// The names of this process's threads.
fn threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
                .map(|name| name.trim_end().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn configure_sets_up_the_default_service_once_before_its_first_use() {
    assert_eq!(time::stats(), Default::default(), "reading the counts does not start it");
    match time::configure(TimerService::builder().shards(0)) {
        // The builder's error is the source, for a caller that walks the chain.
        Err(err @ ConfigureError::Build(BuildError::ZeroShards)) => {
            let source = err.source().expect("the builder's error as the source");
            assert!(matches!(source.downcast_ref::<BuildError>(), Some(BuildError::ZeroShards)), "{source}");
        }
        other => panic!("expected the builder's error, got {other:?}"),
    }
    assert_eq!(time::stats(), Default::default(), "a refused builder starts nothing");
    time::configure(TimerService::builder().shards(1).pin_threads(false).thread_name("ambient")).unwrap();
    futures_executor::block_on(time::sleep(Duration::from_millis(1)));
    if cfg!(target_os = "linux") {
        let names = threads();
        assert!(names.iter().any(|n| n == "ambient-0"), "the configured service serves the calls: {names:?}");
        assert!(!names.iter().any(|n| n == "ambient-1"), "one shard, as configured: {names:?}");
    }
    let err = time::configure(TimerService::builder()).unwrap_err();
    assert!(matches!(err, ConfigureError::AlreadyStarted));
    assert!(err.to_string().contains("before its first use"), "{err}");
    assert!(err.source().is_none(), "nothing under it");
    assert_eq!(time::stats().expired, 1, "the one sleep, on the configured service");
}
