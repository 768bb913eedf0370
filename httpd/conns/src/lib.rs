//! The two load clients' shared parts: `shardwheel-conns` (`src/main.rs`) holds silent,
//! idle, slowloris and unread connections and measures each close against the server's
//! timeout; `shardwheel-load` (`src/bin/shardwheel-load.rs`) sends open-loop keep-alive
//! requests beside those, from many source addresses and processes, and measures each
//! request's latency and the server's CPU and memory.
//!
//! - `client.rs`: the held connections' loop (`Client`), and `run` for `shardwheel-conns`;
//! - `report.rs`: the closes' classification and figures;
//! - `connect.rs`: a nonblocking connect from a chosen source address;
//! - `response.rs`: where a response ends (`Content-Length`, chunked);
//! - `limits.rs`: the descriptor limit, raised;
//! - `mono.rs`: `Instant`s as `CLOCK_MONOTONIC` nanoseconds, shared by processes;
//! - `load/`: the load generator (its own `mod.rs` says what each file holds).

pub mod client;
pub mod connect;
pub mod limits;
pub mod load;
pub mod mono;
pub mod report;
pub mod response;
