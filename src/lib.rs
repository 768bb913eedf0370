//! shardwheel (work in progress)
#![allow(dead_code)]
pub(crate) mod state;
pub(crate) mod sync;
pub(crate) mod wheel;
