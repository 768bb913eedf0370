//! The `Peer` trait of the benchmarks (`benches/baselines/peer.rs`), included as it is, so
//! that the simulator can include the baselines' `netty.rs` and `heap.rs` too (they name
//! `super::Peer` and `super::Task`). The simulator cannot include `benches/baselines/mod.rs`
//! itself: it also declares the `DelayQueue` and tokio peers, which need `tokio-util` (a
//! dev-dependency, not available to the binary).

#[allow(dead_code)] // `arm_at`, `prearm`, `diagnostics`: the benchmarks use them
#[rustfmt::skip] // formatted with the benchmarks, not from here
#[path = "../../../../benches/baselines/peer.rs"]
mod peer;

pub use peer::{Peer, Task};
