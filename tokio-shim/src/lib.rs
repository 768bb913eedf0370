//! tokio, with `tokio::time` and `#[tokio::test]` swapped for shardwheel's, so that a file of
//! tests written for `tokio::time` runs on `shardwheel::time` by one added `use` line:
//!
//! ```ignore
//! use shardwheel_tokio_shim as tokio; // every `tokio::…` path in the file now goes here
//! ```
//!
//! Everything of tokio's is re-exported as it is, but `time` (here `shardwheel::time`) and
//! the `test` attribute, which is tokio's with `start_paused = true` done by
//! `shardwheel::time::pause()` as the test's first statement (tokio's pauses its runtime's
//! clock, which shardwheel's calls do not read). `tests/tokio_time_*.rs` run tokio's own
//! time tests so.

pub use ::tokio::*;
pub use shardwheel::time;
pub use shardwheel_tokio_shim_macros::test;
