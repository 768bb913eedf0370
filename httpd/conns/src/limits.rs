//! The descriptor limit: raised to its hard limit at start, without `unsafe`.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Descriptors kept for what is not a connection (stdio, epoll, pipes).
pub const SPARE_FDS: u64 = 32;

/// Raises the soft RLIMIT_NOFILE to the hard limit; an error if that is below `needed`.
pub fn raise_nofile(needed: u64) -> Result<(), String> {
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("getrlimit: {e}"))?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|e| format!("setrlimit: {e}"))?;
    if hard < needed {
        return Err(format!("open files limited to {hard}, {needed} wanted: the connections past it fail"));
    }
    Ok(())
}
