//! The builder's checks at their limits, without starting a service (`settings` checks what
//! `build` would: starting 4,096 shard threads to see the limit accepted would cost more
//! than the check it tests).

use super::*;

#[test]
fn the_most_shards_are_accepted_and_one_more_is_refused() {
    for n in [1, Builder::MAX_SHARDS - 1, Builder::MAX_SHARDS] {
        let settings = TimerService::builder().shards(n).settings();
        assert_eq!(settings.map(|s| s.shards).ok(), Some(n), "{n} shards");
    }
    let refused = TimerService::builder().shards(Builder::MAX_SHARDS + 1).settings();
    assert!(
        matches!(refused, Err(BuildError::TooManyShards { requested, max })
            if requested == Builder::MAX_SHARDS + 1 && max == Builder::MAX_SHARDS),
        "one more"
    );
}
